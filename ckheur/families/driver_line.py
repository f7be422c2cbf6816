"""MIOpenDriver command lines <-> problem field values (the codec; ``ckheur.families.grouped_conv.problems``
builds problems from it)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from ckheur.families.problem_base import ProblemError, ascii_int

SHOWN_CHARS = 160  # an error quotes at most this much of a line (a 5,000-digit flag is not repeated)


def shown(line: str) -> str:
    """A line as an error message quotes it: its start, and how long it is when cut."""
    return repr(line) if len(line) <= SHOWN_CHARS else f"{line[:SHOWN_CHARS]!r}... ({len(line):,} characters)"


# MIOpenDriver's convolution flags (its ConvDriver::AddCmdLineArgs), long name -> short name.
# Flags that describe the problem, with the field each sets:
_PROBLEM_FLAGS = {
    "-n": "N", "-c": "C", "-k": "K", "-g": "G",
    "-H": "Hi", "-W": "Wi", "-!": "Di",
    "-y": "Y", "-x": "X", "-@": "Z",
    "-p": "pad_h", "-q": "pad_w", "-$": "pad_d",
    "-u": "stride_h", "-v": "stride_w", "-#": "stride_d",
    "-l": "dilation_h", "-j": "dilation_w", "-^": "dilation_d",
}
_LONG = {
    "--batchsize": "-n", "--in_channels": "-c", "--out_channels": "-k", "--group_count": "-g",
    "--in_h": "-H", "--in_w": "-W", "--in_d": "-!", "--fil_h": "-y", "--fil_w": "-x",
    "--fil_d": "-@", "--pad_h": "-p", "--pad_w": "-q", "--pad_d": "-$",
    "--conv_stride_h": "-u", "--conv_stride_w": "-v", "--conv_stride_d": "-#",
    "--dilation_h": "-l", "--dilation_w": "-j", "--dilation_d": "-^",
    "--forw": "-F", "--spatial_dim": "-_", "--in_layout": "-I", "--out_layout": "-O", "--fil_layout": "-f",
    "--bias": "-b", "--mode": "-m", "--pad_mode": "-z", "--pad_val": "-r", "--trans_output_pad_d": "-%",
    "--trans_output_pad_h": "-Y", "--trans_output_pad_w": "-X", "--iter": "-i", "--verify": "-V",
    "--verification_cache": "-C", "--time": "-t", "--wall": "-w", "--search": "-s", "--printconv": "-P",
    "--dump_output": "-o", "--in_data": "-d", "--weights": "-e", "--tensor_vect": "-Z", "--vector_length": "-L",
    "--in_bias": "-a", "--dout_data": "-D", "--solution": "-S", "--gpualloc": "-G", "--in_cast_type": "-U",
    "--out_cast_type": "-T", "--wei_cast_type": "-R",
}
_SHORT_TO_LONG = {v: k for k, v in _LONG.items()}
_DEFAULTS = {"N": 100, "C": 3, "K": 32, "G": 1, "Hi": 32, "Wi": 32, "Di": 32, "Y": 3, "X": 3, "Z": 3}
_DEPTH_FIELDS = ("Di", "Z", "pad_d", "stride_d", "dilation_d")
COMMAND_DTYPES = {"conv": "fp32", "convfp16": "fp16", "convbfp16": "bf16", "convint8": "int8", "convfp8": "fp8",
                  "convbfp8": "bf8"}
# -F: which directions a line runs (MIOpenDriver: 0 all, 1 fwd, 2 bwd data, 4 wrw, and their sums).
_LAYOUT_FLAGS = ("-I", "-O", "-f")  # input, output, filter: a problem has one layout for all three
_FORW = {"0": ("fwd", "bwd_data", "bwd_weight"), "1": ("fwd",), "2": ("bwd_data",), "4": ("bwd_weight",),
         "3": ("fwd", "bwd_data"), "5": ("fwd", "bwd_weight"), "6": ("bwd_data", "bwd_weight")}
DIRECTION_FLAG = {"fwd": 1, "bwd_data": 2, "bwd_weight": 4}  # the -F that runs one direction alone


@dataclass(frozen=True)
class DriverLine:
    """One MIOpenDriver convolution line, checked: the problem's field values, the directions it
    runs, its data type, and every flag by short name as written."""

    values: dict
    directions: tuple
    dtype: str
    ndim: int
    flags: dict

    @property
    def layout(self) -> str | None:
        """The tensor layout the line gives (input, output and filter agree), or None when not given."""
        return next((self.flags[f] for f in _LAYOUT_FLAGS if f in self.flags), None)

    def check_op(self, direction: str | None = None, dtype: str | None = None, line: str = "") -> None:
        """Refuse a line that contradicts the op it is ranked for (direction, data type)."""
        if direction is not None and direction not in self.directions:
            raise ProblemError(f"MIOpenDriver line {shown(line)}: -F {self.flags.get('-F', '0')} runs "
                               f"{' and '.join(self.directions)}, not {direction}: give -F for {direction}, or "
                               f"choose the op of the line's direction")
        if dtype is not None and dtype != self.dtype:
            cmd = next(c for c, d in COMMAND_DTYPES.items() if d == dtype) if dtype in COMMAND_DTYPES.values() else dtype
            raise ProblemError(f"MIOpenDriver line {shown(line)}: the command is {self.dtype}, the op is {dtype} "
                               f"(write {cmd}, or set op.dtype={self.dtype})")


def _flag_name(flag: str) -> str:
    return f"{flag} ({_SHORT_TO_LONG[flag]})" if flag in _SHORT_TO_LONG else flag


def _flag_field(flag: str) -> str:
    """A flag as written, with its other name and the problem field it sets: ``-W (--in_w, Wi)``."""
    short = _LONG.get(flag, flag)
    other = _SHORT_TO_LONG.get(short) if short == flag else short
    names = [n for n in (other, _PROBLEM_FLAGS.get(short)) if n]
    return f"{flag} ({', '.join(names)})" if names else flag


def _is_flag(token: str) -> bool:
    """Whether a token is a MIOpenDriver flag (not a value: negative numbers are values)."""
    return token.split("=", 1)[0] in _LONG or token in _SHORT_TO_LONG or token in _PROBLEM_FLAGS


def driver_args(line: str) -> tuple[str, dict[str, str]]:
    """The command and the flags of one MIOpenDriver line, by short name, as written. Unknown
    flags, a flag without a value and a flag given twice with different values are refused."""
    try:
        # A comment starts at '#' after whitespace; '-#' is MIOpen's stride_d flag.
        tokens = shlex.split(re.split(r"(?:^|\s)#", line, maxsplit=1)[0])
    except ValueError as e:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: {e}") from None
    while tokens and tokens[0] not in COMMAND_DTYPES and not tokens[0].startswith("-"):
        tokens = tokens[1:]  # a leading path to the driver binary (./bin/MIOpenDriver)
    if not tokens or tokens[0] not in COMMAND_DTYPES:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: expected a command ({', '.join(COMMAND_DTYPES)})")
    args: dict[str, str] = {}
    rest = tokens[1:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        if flag.startswith("--") and "=" in flag:
            flag, val = flag.split("=", 1)
            i += 1
        else:
            val = rest[i + 1] if i + 1 < len(rest) else ""
            i += 2
        if val == "" or _is_flag(val):  # a line cut short: MIOpenDriver would take the next flag as the value
            raise ProblemError(f"MIOpenDriver line {shown(line)}: {_flag_field(flag)} has no value"
                               + (f" (followed by the flag {val})" if val else "") + ": the line is cut short; "
                               "give its value, or leave the flag out for MIOpenDriver's default")
        short = _LONG.get(flag, flag)
        if short not in _SHORT_TO_LONG and short not in _PROBLEM_FLAGS:
            import difflib

            near = difflib.get_close_matches(flag, [*_LONG, *_SHORT_TO_LONG], n=1)
            raise ProblemError(f"MIOpenDriver line {shown(line)}: unknown flag {flag}"
                               + (f" (did you mean {near[0]}?)" if near else " (not a MIOpenDriver convolution flag)"))
        if short in args and args[short] != val:
            raise ProblemError(f"MIOpenDriver line {shown(line)}: {_flag_name(short)} is given twice, as {args[short]} "
                               f"and {val}")
        args[short] = val
    return tokens[0], args


def _int_flag(args: Mapping[str, str], flag: str, line: str, what: str) -> int | None:
    if flag not in args:
        return None
    try:
        value = ascii_int(args[flag])
    except ProblemError as e:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: {flag} ({what}): {e}") from None
    if value is None:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: {flag} ({what}) must be an integer, got {args[flag]!r} "
                           "(ASCII digits only)")
    return value


def spatial_dims(args: Mapping[str, str], line: str = "") -> int:
    """2 or 3: ``--spatial_dim``, else 3 when any depth flag is given; a 2 with depth flags, or
    another value, is refused."""
    depth = [f for f, name in _PROBLEM_FLAGS.items() if name in _DEPTH_FIELDS and f in args]
    given = _int_flag(args, "-_", line, "--spatial_dim")
    if given is None:
        return 3 if depth else 2
    if given not in (2, 3):
        raise ProblemError(f"MIOpenDriver line {shown(line)}: --spatial_dim {given}: allowed values are 2, 3")
    if given == 2 and depth:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: --spatial_dim 2 with the depth flag(s) "
                           f"{', '.join(_flag_name(f) for f in depth)}")
    return given


def parse_driver_line(line: str) -> DriverLine:
    """Parse one MIOpenDriver convolution line strictly: unknown flags, malformed values, flags given
    twice with different values, a transposed convolution, a padding mode other than explicit pads
    and an impossible ``-F`` or ``--spatial_dim`` are refused, naming the flag."""
    command, args = driver_args(line)
    spatial = spatial_dims(args, line)
    vals: dict[str, int] = {}
    for flag, field_name in _PROBLEM_FLAGS.items():
        if field_name in _DEPTH_FIELDS and spatial != 3:
            continue
        got = _int_flag(args, flag, line, field_name)
        if got is not None:
            vals[field_name] = got
        elif field_name in _DEFAULTS:
            vals[field_name] = _DEFAULTS[field_name]
    forw = args.get("-F", "0")
    if forw not in _FORW:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: -F (--forw) {forw}: allowed values are "
                           f"{', '.join(sorted(_FORW))} (0 all directions, 1 fwd, 2 bwd data, 4 wrw, and sums)")
    if args.get("-m", "conv") != "conv":
        raise ProblemError(f"MIOpenDriver line {shown(line)}: -m (--mode) {args['-m']}: only convolutions (conv) "
                           "are ranked, not transposed ones")
    if args.get("-z", "default") != "default":
        raise ProblemError(f"MIOpenDriver line {shown(line)}: -z (--pad_mode) {args['-z']}: give the pads with "
                           "-p/-q (and -$) instead")
    for flag in ("-b", "-F"):
        _int_flag(args, flag, line, _SHORT_TO_LONG[flag])
    layouts = {f: args[f] for f in _LAYOUT_FLAGS if f in args}
    if len(set(layouts.values())) > 1:
        raise ProblemError(f"MIOpenDriver line {shown(line)}: mixed tensor layouts "
                           f"({', '.join(f'{_flag_name(f)} {v}' for f, v in layouts.items())}): a problem has one "
                           "layout for its input, output and filter; give them the same layout")
    return DriverLine(vals, _FORW[forw], COMMAND_DTYPES[command], spatial, args)


def driver_line(values: Mapping[str, int], fields: Sequence[str], ndim: int, dtype: str = "bf16") -> str:
    """A MIOpenDriver command line giving ``fields`` (in that order) their ``values``
    (inverse of :func:`parse_driver_line`)."""
    cmd = next((c for c, d in COMMAND_DTYPES.items() if d == dtype), "conv")
    inv = {v: k for k, v in _PROBLEM_FLAGS.items()}
    names = fields if ndim == 3 else [f for f in fields if not f.endswith("_d") and f not in ("Di", "Z")]
    parts = [cmd] + [f"{inv[f]} {values[f]}" for f in names]
    if ndim == 3:
        parts.append("--spatial_dim 3")
    return " ".join(parts)
