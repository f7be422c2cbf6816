"""backend=command: an external benchmark command per (problem, kernel).

The template is formatted with the problem's fields, the kernel's traits and name, and for
convolutions ``{miopen_args}`` (the problem as MIOpenDriver flags), ``{miopen_command}`` and
``{miopen_direction}`` (1, 2, 4); it is split like a shell line and run without a shell.
``regex``'s first group is the time; ``workspace_regex``'s, when given, the workspace in bytes
the run used (what a MIOpen find-db records; without it the workspace is unknown, -1);
``kernel_regex``'s, when given, the kernel the run says it ran (a run of another fails). For a CK
GEMM benchmark binary, for example: ``benchmark_{kernel} -m={M} -n={N} -k={K} -split_k={split_k}``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results
from ckheur.parts import UNKNOWN_WORKSPACE
from ckheur.problems.conv import to_miopen
from ckheur.problems.miopen_conv import to_driver_line

_UNITS = {"ms": 1.0, "us": 1e-3, "s": 1e3}


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    if cfg["time_unit"] not in _UNITS:
        raise BackendError(f"backend.time_unit={cfg['time_unit']!r}: allowed values are {', '.join(_UNITS)}")
    pattern = _compiled(cfg, "regex")
    workspace_pattern = _compiled(cfg, "workspace_regex") if cfg.get("workspace_regex") else None
    kernel_pattern = _compiled(cfg, "kernel_regex") if cfg.get("kernel_regex") else None
    scale, timeout = _UNITS[cfg["time_unit"]], float(cfg["timeout_s"])
    direction_flag = {"fwd": 1, "bwd_data": 2, "bwd_weight": 4}[op["direction"]]

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        out = Results()
        for p, k in pairs:
            fields = {**p.to_dict(), **k.traits(), "kernel": k.name, "arch": arch["name"]}
            if op["family"] in ("grouped_conv", "miopen"):
                line = to_miopen(p, op["dtype"]) if op["family"] == "grouped_conv" else to_driver_line(p, op["dtype"])
                command, args = line.split(" ", 1)
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
            text = r.stdout + r.stderr
            m = pattern.search(text)
            w = workspace_pattern.search(text) if workspace_pattern else None
            if r.returncode != 0:
                out.add(float("nan"), "failed", f"exit code {r.returncode}: {(r.stderr or r.stdout)[-200:].strip()}")
            elif not m:
                out.add(float("nan"), "failed", f"output did not match backend.regex: {r.stdout[-200:].strip()}")
            elif not _is_number(m.group(1)):
                out.add(float("nan"), "failed", f"backend.regex matched {m.group(1)[:80]!r}, not a number")
            elif kernel_pattern and (other := _ran_other(kernel_pattern, text, k.name)):
                out.add(float("nan"), "failed", f"the run reports another kernel than {k.name} (backend.kernel_regex "
                        f"found {other}): its time is not {k.name}'s")
            elif workspace_pattern and not (w and w.group(1).isdigit()):
                out.add(float("nan"), "failed", "output did not give a workspace in bytes matching "
                        f"backend.workspace_regex: {r.stdout[-200:].strip()}")
            else:
                out.add(float(m.group(1)) * scale, workspace_bytes=int(w.group(1)) if w else UNKNOWN_WORKSPACE)
        return out

    return Measurer(name="command", measure=measure, batch_pairs=int(cfg["batch_pairs"]))


def _ran_other(pattern: re.Pattern, text: str, kernel: str) -> str:
    """What the run reports having run when it is not ``kernel`` (MIOpenDriver falls back to its
    own Find for a solver name it does not know), else ''."""
    m = pattern.search(text)
    ran = m.group(1) if m else "nothing"
    return "" if ran == kernel else repr(ran)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _compiled(cfg: Mapping[str, Any], name: str) -> re.Pattern:
    """backend.<name> as a regex with a group, or a BackendError naming it."""
    try:
        pattern = re.compile(cfg[name])
    except re.error as e:
        raise BackendError(f"backend.{name} {cfg[name]!r}: {e}") from None
    if pattern.groups < 1:
        raise BackendError(f"backend.{name} {cfg[name]!r}: needs a group, (...), around the number")
    return pattern
