"""backend=command: an external benchmark command per (problem, kernel).

The template is formatted with the problem's fields, the kernel's traits and name, and for
convolutions ``{miopen_args}`` (the problem as MIOpenDriver flags), ``{miopen_command}`` and
``{miopen_direction}`` (1, 2, 4); it is split like a shell line and run without a shell.
``regex``'s first group is the time. For a CK GEMM benchmark binary, for example:
``benchmark_{kernel} -m={M} -n={N} -k={K} -split_k={split_k}``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results
from ckheur.problems.conv import to_miopen

_UNITS = {"ms": 1.0, "us": 1e-3, "s": 1e3}


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    if cfg["time_unit"] not in _UNITS:
        raise BackendError(f"backend.time_unit={cfg['time_unit']!r}: allowed values are {', '.join(_UNITS)}")
    try:
        pattern = re.compile(cfg["regex"])
    except re.error as e:
        raise BackendError(f"backend.regex {cfg['regex']!r}: {e}") from None
    scale, timeout = _UNITS[cfg["time_unit"]], float(cfg["timeout_s"])
    direction_flag = {"fwd": 1, "bwd_data": 2, "bwd_weight": 4}[op["direction"]]

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        out = Results()
        for p, k in pairs:
            fields = {**p.to_dict(), **k.traits(), "kernel": k.name, "arch": arch["name"]}
            if op["family"] == "grouped_conv":
                command, args = to_miopen(p, op["dtype"]).split(" ", 1)
                fields.update(miopen_args=args, miopen_command=command, miopen_direction=direction_flag)
            try:
                argv = shlex.split(cfg["template"].format(**fields))
            except (KeyError, IndexError) as e:
                raise BackendError(f"backend.template uses unknown field {e}; fields: {', '.join(sorted(fields))}") from None
            try:
                r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                out.add(float("nan"), "timeout", f"no result within {timeout:g}s")
                continue
            except OSError as e:
                out.add(float("nan"), "failed", f"cannot run {argv[0]}: {e}")
                continue
            m = pattern.search(r.stdout + r.stderr)
            if r.returncode != 0:
                out.add(float("nan"), "failed", f"exit code {r.returncode}: {(r.stderr or r.stdout)[-200:].strip()}")
            elif not m:
                out.add(float("nan"), "failed", f"output did not match backend.regex: {r.stdout[-200:].strip()}")
            else:
                out.add(float(m.group(1)) * scale)
        return out

    return Measurer(name="command", measure=measure, batch_pairs=int(cfg["batch_pairs"]))
