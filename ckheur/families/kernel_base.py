"""What every kernel family shares: the error type, element sizes, and the architecture's
code-generation rules for a block tile (wave layout x MFMA warp tile)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from ckheur.errors import UserError

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "fp32": 4}
# No predicted latency is below this (a kernel launch's floor): the fastest real timing in the
# shipped data is 0.68 us (MI300X find-db), so the floor never undercuts a measurement.
LATENCY_FLOOR_MS = 5e-4


class KernelError(UserError):
    """A kernel name or trait is invalid; the message names it and the allowed values."""


# What a kernel's name and text traits may hold: letters, digits and _ < > . - (MIOpen's solver
# names have the last four), starting with a letter or digit. Nothing a C string or comment, a
# shell or an argument list reads specially (quotes, backslashes, ?, *, /, spaces, a leading -).
SAFE_TEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_<>.-]{0,199}")
TILE_MAX = 4096  # a block tile's side; CK's largest are 256
WAVE_MAX = 16  # waves along one dimension of a block (max_waves_per_block bounds their product)
WARP_TILE_MAX = 256  # an MFMA tile's side; the largest is 128


def safe_text(value: Any, what: str) -> str:
    """``value`` when it is text of SAFE_TEXT's characters (what may reach generated C and a
    benchmark's argument list), else a KernelError naming ``what``."""
    if not isinstance(value, str) or not SAFE_TEXT.fullmatch(value):
        raise KernelError(f"{what}={str(value)[:80]!r}: give letters, digits and _ < > . - only, starting with a "
                          "letter or digit (at most 200 characters)")
    return value


def field_values(k: Any) -> dict:
    """A kernel dataclass's fields by name, in order: ``dataclasses.asdict`` without its deep copy
    (a kernel's fields are plain values; pools of tens of thousands of kernels read them)."""
    return {f.name: getattr(k, f.name) for f in dataclasses.fields(k)}


def command_fields(k: Any) -> dict:
    """A kernel's traits and name as a benchmark or build command's template reads them, each text
    one checked (``safe_text``: no space, quote, slash or leading ``-`` reaches an argument list or
    a file name), or a KernelError."""
    fields = {**k.traits(), "kernel": k.name}
    for key, value in fields.items():
        if isinstance(value, str):
            safe_text(value, f"kernel trait {key}")
    return fields


def checked_traits(cls: type, d: Any, rules: Mapping[str, Any], op: Mapping[str, Any] | None = None,
                   derived: Sequence[str] = ()) -> Any:
    """A kernel of dataclass ``cls`` from its traits ``d`` (a kernels.json object), every trait
    checked: of its field's type (int, str, bool; a bool is no int), within ``rules`` (field ->
    (low, high) for ints, a tuple of allowed values for text), text of SAFE_TEXT's characters, and
    ``direction`` / ``dtype`` those of ``op`` when given; keys other than the fields and
    ``derived`` (values computed from the fields: they must agree) are refused. A KernelError
    names the field and what is allowed."""
    if not isinstance(d, Mapping):
        raise KernelError(f"a kernel is a JSON object of traits, not {type(d).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(str(k)[:40] for k in d if k not in fields and k not in derived)
    if unknown:
        raise KernelError(f"unknown trait {unknown[0]!r}; traits: {', '.join(fields)}")
    values = {}
    for name, f in fields.items():
        if name not in d:
            if f.default is dataclasses.MISSING:
                raise KernelError(f"trait {name} missing")
            continue
        v, rule, kind = d[name], rules.get(name), f.type
        if kind == "bool":
            ok = isinstance(v, bool)
        elif kind == "int":
            ok = isinstance(v, int) and not isinstance(v, bool) and (rule is None or rule[0] <= v <= rule[1])
        else:
            ok = isinstance(v, str) and (rule is None or v in rule)
            if ok:
                safe_text(v, name)
        if not ok:
            allowed = ("true or false" if kind == "bool" else f"an integer from {rule[0]} to {rule[1]}"
                       if kind == "int" and rule else "an integer" if kind == "int" else
                       f"one of {', '.join(rule)}" if rule else "text")
            raise KernelError(f"{name}={v!r:.80}: must be {allowed}")
        values[name] = v
    for key in ("direction", "dtype"):
        if op is not None and key in values and op.get(key) is not None and values[key] != op[key]:
            raise KernelError(f"{key}={values[key]!r}: the bundle's op is {op[key]!r}; a kernel of another "
                              f"{key} cannot serve it")
    kernel = cls(**values)
    for key in derived:
        if key in d and d[key] != getattr(kernel, key):
            raise KernelError(f"{key}={d[key]!r:.80} disagrees with the kernel's traits ({getattr(kernel, key)!r})")
    return kernel


def check_distinct(kernels: Sequence[Any]) -> None:
    """Refuse (KernelError) a kernel table that lists one name twice: a name is what a pick, a
    measurement and an exported index mean."""
    seen: dict[str, int] = {}
    for i, k in enumerate(kernels):
        if k.name in seen:
            raise KernelError(f"kernel {i} ({k.name}) repeats kernel {seen[k.name]}: duplicate kernels")
        seen[k.name] = i


def tile_problems(tile: Mapping[str, Any], wave: Sequence[int], warp: Sequence[int],
                  arch: Mapping[str, Any], dtype: str) -> list[str]:
    """Reasons a tile with this wave layout and warp tile is illegal on the arch ([] if legal)."""
    cg = arch["codegen"]
    why = []
    if [list(w) for w in cg["wave_layouts"]].count(list(wave)) == 0:
        why.append(f"wave layout {list(wave)} not allowed on {arch['name']}")
    allowed_warp = [list(w) for w in cg["warp_tiles"].get(dtype, [])]
    if list(warp) not in allowed_warp:
        why.append(f"warp tile {list(warp)} not allowed for {dtype} on {arch['name']}")
    for dim, w, t in zip("mnk", wave, warp):
        size = tile[f"tile_{dim}"]
        if w * t == 0 or size % (w * t):
            why.append(f"tile_{dim}={size} not divisible by wave_{dim} x warp_tile_{dim} = {w}x{t}")
    waves = wave[0] * wave[1] * wave[2]
    if waves > cg.get("max_waves_per_block", 16):
        why.append(f"{waves} waves per block > max {cg.get('max_waves_per_block', 16)}")
    return why


def _lds_budget(arch: Mapping[str, Any], pipeline: str) -> int:
    cg = arch["codegen"]
    frac = cg.get("lds_budget_fraction", {}).get(pipeline, cg.get("default_lds_budget_fraction", 1.0))
    return int(arch["lds_bytes"] * frac)


def all_support_arrays(kernels: Sequence[Any]) -> dict:
    """Support data of a family whose every kernel is a candidate for every valid problem."""
    return {"n": len(kernels)}


def all_support_mask(problem: Any, kernels: Mapping, op: Mapping) -> tuple[Any, str]:
    """Every kernel is a candidate (see :func:`all_support_arrays`)."""
    import numpy as np

    return np.ones(kernels["n"], dtype=bool), ""


def all_support_reasons(problem: Any, kernels: Mapping, op: Mapping) -> list[str]:
    """Why each kernel is not a candidate for the problem: never (see :func:`all_support_arrays`)."""
    return [""] * kernels["n"]


def tile_rejections(kernels: Sequence[Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> list[list[str]]:
    """Why each tile-based kernel (conv, GEMM) is illegal on the arch ([] if legal): the dtype's
    MFMA tiles, tile divisibility, the pipeline's LDS budget, intrawave-only compute pipelines,
    and trait combinations the op lists as unsupported."""
    dtype = op["dtype"]
    if not arch["codegen"]["warp_tiles"]:  # e.g. gfx908: MIOpen ops serve it, CK Tile kernels do not
        raise KernelError(f"arch={arch['name']}: no CK Tile code generation for it (its codegen declares no MFMA "
                          f"warp tiles); CK ops (grouped_conv, gemm) need an arch with CK Tile kernels; on "
                          f"{arch['name']} use op=miopen/<direction>")
    if dtype not in arch["codegen"]["warp_tiles"]:
        raise KernelError(f"op.dtype={dtype}: no warp tiles for it on {arch['name']}; "
                          f"allowed: {', '.join(arch['codegen']['warp_tiles'])}")
    intrawave_only = set(arch["codegen"].get("intrawave_only_pipelines", []))
    unsupported = [dict(u) for u in op.get("unsupported") or []]
    tile_why: dict[tuple, list[str]] = {}
    out = []
    for k in kernels:
        tkey = (k.tile_m, k.tile_n, k.tile_k, k.wave_m, k.wave_n, k.wave_k, k.warp_tile_m, k.warp_tile_n, k.warp_tile_k)
        if tkey not in tile_why:
            tile = {"tile_m": k.tile_m, "tile_n": k.tile_n, "tile_k": k.tile_k}
            tile_why[tkey] = tile_problems(tile, tkey[3:6], tkey[6:9], arch, dtype)
        why = list(tile_why[tkey])
        budget = _lds_budget(arch, k.pipeline)
        if k.lds_bytes > budget:
            why.append(f"LDS {k.lds_bytes} B > {k.pipeline} budget {budget} B on {arch['name']}")
        if k.scheduler != "intrawave" and k.pipeline in intrawave_only:
            why.append(f"{k.pipeline} is a compute pipeline: intrawave scheduler only")
        traits = k.traits()
        for u in unsupported:
            if all(traits.get(key) == val for key, val in u.items()):
                why.append(f"unsupported combination {u}")
        out.append(why)
    return out
