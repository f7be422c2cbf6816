"""What every problem type shares: the error type and seeded generation of distinct problems."""

from __future__ import annotations

import dataclasses
import numbers
import random
import re
from typing import Any, Callable, Mapping, Sequence


from ckheur.errors import UserError


class ProblemError(UserError):
    """A problem description is invalid; the message names the field and value."""


# The validity rule every problem type shares with the exported C selector (``ckheur_abi.h``):
# integer fields fit in 31 bits (what kernels take as sizes and strides), and FLOPs and tensor
# elements stay below 2^53, where a double (the C selector's arithmetic) still counts exactly.
FIELD_MAX = 2**31 - 1
EXACT_LIMIT = 2**53


def check_int_field(name: str, value: Any, lo: int) -> None:
    """Refuse a problem field that is not an integer in [lo, FIELD_MAX]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProblemError(f"problem field {name}={value!r}: must be an integer")
    if value < lo:
        raise ProblemError(f"problem field {name}={value}: must be >= {lo}")
    if value > FIELD_MAX:
        raise ProblemError(f"problem field {name}={value}: must be <= {FIELD_MAX} (2^31-1)")


_ASCII_INT = re.compile(r"-?[0-9]+")


_DIGITS_MAX = 30  # far beyond any size; Python's int() refuses strings of more than 4,300 digits


def ascii_int(text: str) -> int | None:
    """The integer ``text`` writes in ASCII digits (an optional minus sign first), or None:
    Python's int() also reads '1_6' and other scripts' digits (full-width '１６') as numbers. A
    number of more than 30 digits (leading zeros aside) is refused (ProblemError), whatever its length."""
    if not _ASCII_INT.fullmatch(text):
        return None
    digits = len(text.lstrip("-").lstrip("0"))
    if digits > _DIGITS_MAX:
        raise ProblemError(f"the number {text[:12]}... has {digits:,} digits: beyond any size (at most {_DIGITS_MAX})")
    return int(text)


def check_exact_sizes(flops: int, elems: int, what: str | Callable[[], str]) -> None:
    """Refuse a problem whose FLOPs or tensor elements reach 2^53 (no longer exact as doubles);
    ``what``: the problem's description, or a function giving it (only built for the error)."""
    for name, v in (("FLOPs", flops), ("tensor elements", elems)):
        if v >= EXACT_LIMIT:
            raise ProblemError(f"problem too large: {name} {v:.3g} >= 2^53 in {what if isinstance(what, str) else what()}")


def draw_distinct(seed: int, count: int, shapes: Mapping[str, float], allowed: Sequence[str],
                  sample: Callable[[random.Random, str], Any]) -> list:
    """``count`` distinct problems from weighted shape kinds, deterministically for a seed.

    ``sample(rng, kind)`` returns one problem, or None to draw again (invalid or filtered).
    """
    unknown = sorted(set(shapes) - set(allowed))
    if unknown:
        raise ProblemError(f"shape kind {', '.join(unknown)} unknown (problems.sources[].shapes); allowed: {', '.join(allowed)}")
    rng = random.Random(seed)
    names, weights = list(shapes), [float(shapes[f]) for f in shapes]
    out: dict[tuple, Any] = {}
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 50 * count + 1000:
            raise ProblemError(f"generator could not draw {count} distinct problems (got {len(out)})")
        p = sample(rng, rng.choices(names, weights=weights)[0])
        if p is not None:
            out.setdefault(p.key(), p)
    return list(out.values())


def checked_fields(d: Mapping[str, Any], allowed: Sequence[str], required: Sequence[str],
                   text: Sequence[str] = ()) -> dict[str, Any]:
    """Problem fields from a mapping: unknown or missing names are errors; integral floats,
    numpy integers and digit strings become ints (fields in ``text`` stay as given)."""
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise ProblemError(f"unknown problem field(s) {', '.join(unknown)}; allowed fields: {', '.join(allowed)}")
    missing = [k for k in required if k not in d]
    if missing:
        raise ProblemError(f"problem is missing required field(s) {', '.join(missing)}")
    out = {}
    for k, v in d.items():
        if type(v) is int:  # the common case, without the slower checks below
            out[k] = v
            continue
        if k not in text:
            if isinstance(v, numbers.Integral) and not isinstance(v, bool):
                v = int(v)
            elif isinstance(v, float) and v.is_integer():
                v = int(v)
            elif isinstance(v, str) and ascii_int(v.strip()) is not None:
                v = ascii_int(v.strip())
        out[k] = v
    return out


def field_defaults(problem_type: type) -> dict[str, Any]:
    """Default values of a problem dataclass's optional fields (the required ones are absent)."""
    return {f.name: f.default for f in dataclasses.fields(problem_type) if f.default is not dataclasses.MISSING}
