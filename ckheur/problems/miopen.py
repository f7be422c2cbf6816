"""MIOpenDriver command lines <-> grouped-convolution problems."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ckheur.problems.conv import CONV_FIELDS, ConvProblem, ProblemError, problem_from_dict

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
    "--forw": "-F", "--spatial_dim": "-_",
}
_MIOPEN_DEFAULTS = {"N": 100, "C": 3, "K": 32, "G": 1, "Hi": 32, "Wi": 32, "Di": 32,
                    "Y": 3, "X": 3, "Z": 3}
_MIOPEN_COMMANDS = ("conv", "convfp16", "convbfp16", "convint8", "convfp8", "convbfp8")
# Flags that take a value but do not describe the problem (layouts, timing, verification...).
_MIOPEN_IGNORED = {"-F", "-m", "-t", "-V", "-i", "-w", "-s", "-P", "-I", "-O", "-f", "-S",
                   "-b", "-a", "-d", "-e", "-z", "-o", "-r", "-C", "-D", "-_", "-T", "-Z",
                   "-B", "-A", "-G", "-E", "-R", "-X", "-Y"}


def parse_miopen(line: str) -> tuple[ConvProblem, str | None]:
    """Parse one MIOpenDriver command line into (problem, direction or None for all)."""
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
    spatial = int(args.get("-_", "3" if any(f in args for f in ("-!", "-@", "-$", "-#", "-^")) else "2"))
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
    return problem_from_dict(vals), direction


def to_miopen(p: ConvProblem, dtype: str = "bf16") -> str:
    """Format a problem as a MIOpenDriver command line (inverse of parse_miopen)."""
    cmd = {"fp16": "convfp16", "bf16": "convbfp16", "fp8": "convfp8"}.get(dtype, "conv")
    inv = {v: k for k, v in _MIOPEN_FLAGS.items()}
    names = CONV_FIELDS if p.ndim == 3 else [f for f in CONV_FIELDS if not f.endswith("_d") and f not in ("Di", "Z")]
    parts = [cmd] + [f"{inv[f]} {getattr(p, f)}" for f in names]
    if p.ndim == 3:
        parts.append("--spatial_dim 3")
    return " ".join(parts)




def read_miopen_file(path: str | Path) -> list[ConvProblem]:
    """Problems from a text file of MIOpenDriver lines ('#' comments and blank lines skipped)."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.append(parse_miopen(line)[0])
        except ProblemError as e:
            raise ProblemError(f"{path} line {i}: {e}") from None
    return out
