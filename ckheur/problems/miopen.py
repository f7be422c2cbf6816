"""MIOpenDriver command lines <-> problem field values (the codec; ``ckheur.problems.conv``
builds problems from it)."""

from __future__ import annotations

import re
import shlex
from typing import Mapping, Sequence

from ckheur.problems.base import ProblemError

# Flag -> problem field. Defaults are MIOpenDriver's own when a flag is absent.
_MIOPEN_FLAGS = {
    "-n": "N", "-c": "C", "-k": "K", "-g": "G",
    "-H": "Hi", "-W": "Wi", "-!": "Di",
    "-y": "Y", "-x": "X", "-@": "Z",
    "-p": "pad_h", "-q": "pad_w", "-$": "pad_d",
    "-u": "stride_h", "-v": "stride_w", "-#": "stride_d",
    "-l": "dilation_h", "-j": "dilation_w", "-^": "dilation_d",
}
_MIOPEN_LONG = {
    "--batchsize": "-n", "--in_channels": "-c", "--out_channels": "-k", "--group_count": "-g",
    "--in_h": "-H", "--in_w": "-W", "--in_d": "-!", "--fil_h": "-y", "--fil_w": "-x",
    "--fil_d": "-@", "--pad_h": "-p", "--pad_w": "-q", "--pad_d": "-$",
    "--conv_stride_h": "-u", "--conv_stride_w": "-v", "--conv_stride_d": "-#",
    "--dilation_h": "-l", "--dilation_w": "-j", "--dilation_d": "-^",
    "--forw": "-F", "--spatial_dim": "-_", "--in_layout": "-I", "--bias": "-b",
}
_MIOPEN_DEFAULTS = {"N": 100, "C": 3, "K": 32, "G": 1, "Hi": 32, "Wi": 32, "Di": 32,
                    "Y": 3, "X": 3, "Z": 3}
_MIOPEN_COMMANDS = ("conv", "convfp16", "convbfp16", "convint8", "convfp8", "convbfp8")
# Flags that take a value but do not describe the problem (layouts, timing, verification...).
_MIOPEN_IGNORED = {"-F", "-m", "-t", "-V", "-i", "-w", "-s", "-P", "-I", "-O", "-f", "-S",
                   "-b", "-a", "-d", "-e", "-z", "-o", "-r", "-C", "-D", "-_", "-T", "-Z",
                   "-B", "-A", "-G", "-E", "-R", "-X", "-Y"}


def driver_args(line: str) -> dict[str, str]:
    """The flags of one MIOpenDriver command line, by short name, as written."""
    try:
        # A comment starts at '#' after whitespace; '-#' is MIOpen's stride_d flag.
        tokens = shlex.split(re.split(r"(?:^|\s)#", line, maxsplit=1)[0])
    except ValueError as e:
        raise ProblemError(f"MIOpenDriver line {line!r}: {e}") from None
    # Skip a leading path to the driver binary (./bin/MIOpenDriver).
    while tokens and tokens[0] not in _MIOPEN_COMMANDS:
        if tokens[0].startswith("-"):
            break
        tokens = tokens[1:]
    if not tokens or tokens[0] not in _MIOPEN_COMMANDS:
        raise ProblemError(
            f"MIOpenDriver line {line!r}: expected a command ({', '.join(_MIOPEN_COMMANDS)})")
    args: dict[str, str] = {}
    rest = tokens[1:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        if "=" in flag and flag.startswith("--"):
            flag, val = flag.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(rest):
                raise ProblemError(f"MIOpenDriver line {line!r}: flag {flag} has no value")
            val = rest[i + 1]
            i += 2
        flag = _MIOPEN_LONG.get(flag, flag)
        if flag not in _MIOPEN_FLAGS and flag not in _MIOPEN_IGNORED and not flag.startswith("--"):
            raise ProblemError(f"MIOpenDriver line {line!r}: unknown flag {flag}")
        args[flag] = val
    return args


def spatial_dims(args: Mapping[str, str]) -> int:
    """2 or 3: ``--spatial_dim``, else 3 when any depth flag is given."""
    return int(args.get("-_", "3" if any(f in args for f in ("-!", "-@", "-$", "-#", "-^")) else "2"))


def parse_driver_line(line: str) -> tuple[dict[str, int], str | None, dict[str, str]]:
    """Parse one MIOpenDriver command line into (problem field values, direction or None for all,
    every flag as written)."""
    args = driver_args(line)
    spatial = spatial_dims(args)
    vals: dict[str, int] = {}
    for flag, field_name in _MIOPEN_FLAGS.items():
        if field_name in ("Di", "Z", "pad_d", "stride_d", "dilation_d") and spatial != 3:
            continue
        if flag in args:
            try:
                vals[field_name] = int(args[flag])
            except ValueError:
                raise ProblemError(
                    f"MIOpenDriver line {line!r}: {flag} ({field_name}) must be an integer, "
                    f"got {args[flag]!r}") from None
        elif field_name in _MIOPEN_DEFAULTS:
            vals[field_name] = _MIOPEN_DEFAULTS[field_name]
    direction = {"1": "fwd", "2": "bwd_data", "4": "bwd_weight"}.get(args.get("-F", "0"))
    return vals, direction, args


def driver_line(values: Mapping[str, int], fields: Sequence[str], ndim: int, dtype: str = "bf16") -> str:
    """A MIOpenDriver command line giving ``fields`` (in that order) their ``values``
    (inverse of :func:`parse_driver_line`)."""
    cmd = {"fp16": "convfp16", "bf16": "convbfp16", "fp8": "convfp8"}.get(dtype, "conv")
    inv = {v: k for k, v in _MIOPEN_FLAGS.items()}
    names = fields if ndim == 3 else [f for f in fields if not f.endswith("_d") and f not in ("Di", "Z")]
    parts = [cmd] + [f"{inv[f]} {values[f]}" for f in names]
    if ndim == 3:
        parts.append("--spatial_dim 3")
    return " ".join(parts)
