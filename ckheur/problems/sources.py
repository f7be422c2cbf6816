"""Problem-set sources declared in YAML: inline lists, seeded generators, MIOpenDriver
command lines, CSV files, and other shipped sets; plus dedupe, exclusion and sharding."""

from __future__ import annotations

import csv
import math
import random
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ckheur.problems.conv import CONV_FIELDS, ConvProblem, ProblemError, problem_from_dict

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
if not CONF_DIR.is_dir():  # source checkout: conf/ sits at the repository root
    CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

SOURCE_KINDS = ("inline", "generate", "miopen", "csv", "set")

# ------------------------------------------------------------------ MIOpenDriver
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


# ------------------------------------------------------------------ generator
# Channel counts seen in production networks; sampled for C and K.
_CHANNELS = (3, 8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 240, 256, 320,
             384, 480, 512, 576, 640, 672, 768, 960, 1024, 1152, 1280, 1536, 2048)
_SPATIAL = {"small": (4, 7, 8, 10, 14, 16), "medium": (17, 20, 28, 32, 35, 48, 56, 64),
            "large": (71, 73, 96, 112, 128, 147, 149, 224)}
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
FAMILIES = ("pointwise", "conv3x3", "conv5x5", "conv7x7", "strided", "dilated",
            "grouped", "depthwise", "conv3d")


def _sample(rng: random.Random, family: str, ndim: int) -> dict[str, int]:
    """One random problem of a shape family (fields as a dict, maybe invalid)."""
    size_class = rng.choices(("small", "medium", "large"), weights=(0.35, 0.45, 0.2))[0]
    hw = rng.choice(_SPATIAL[size_class])
    d: dict[str, int] = {
        "N": rng.choice(_BATCH), "C": rng.choice(_CHANNELS), "K": rng.choice(_CHANNELS[1:]),
        "Hi": hw, "Wi": hw if rng.random() < 0.85 else rng.choice(_SPATIAL[size_class]),
    }
    filt = {"pointwise": 1, "conv3x3": 3, "conv5x5": 5, "conv7x7": 7}.get(family)
    if filt is None:
        filt = rng.choice((1, 3, 3, 3, 5)) if family in ("strided", "grouped", "conv3d") else 3
    d["Y"] = d["X"] = filt
    d["pad_h"] = d["pad_w"] = filt // 2 if rng.random() < 0.85 else 0
    if family == "strided":
        d["stride_h"] = d["stride_w"] = 2
    if family == "dilated":
        dil = rng.choice((2, 2, 3, 4))
        d["dilation_h"] = d["dilation_w"] = dil
        d["pad_h"] = d["pad_w"] = dil
    if family == "grouped":
        g = rng.choice((2, 4, 8, 16, 32, 64))
        d["G"] = g
        d["C"] = g * rng.choice((1, 2, 4, 8, 16, 32))
        d["K"] = g * rng.choice((1, 2, 4, 8, 16, 32))
    if family == "depthwise":
        c = rng.choice((16, 32, 64, 96, 128, 144, 192, 240, 256, 384, 480, 512, 576, 672, 960))
        d["G"] = d["C"] = d["K"] = c
        d["Y"] = d["X"] = rng.choice((3, 3, 5, 7))
        d["pad_h"] = d["pad_w"] = d["Y"] // 2
        if rng.random() < 0.3:
            d["stride_h"] = d["stride_w"] = 2
    if family == "conv3d" or ndim == 3:
        d["Di"] = rng.choice((2, 4, 8, 16, 32))
        d["Hi"] = d["Wi"] = rng.choice((7, 14, 16, 28, 32, 56, 64, 112))
        d["Z"] = rng.choice((1, 3, 3)) if d["Y"] > 1 else 1
        d["pad_d"] = d["Z"] // 2
        d["N"] = rng.choice((1, 2, 4, 8, 16, 32))
        if rng.random() < 0.2:
            d["stride_d"] = d["stride_h"] = d["stride_w"] = 2
    return d


def generate(seed: int, count: int, ndim: int = 2, families: Mapping[str, float] | None = None,
             max_gflop: float = 20000.0) -> list[ConvProblem]:
    """Draw ``count`` distinct valid problems from weighted shape families, deterministically."""
    fams = dict(families or {f: 1.0 for f in FAMILIES if (f == "conv3d") == (ndim == 3)})
    unknown = sorted(set(fams) - set(FAMILIES))
    if unknown:
        raise ProblemError(f"generator family {', '.join(unknown)} unknown; allowed: {', '.join(FAMILIES)}")
    rng = random.Random(seed)
    names, weights = list(fams), [float(fams[f]) for f in fams]
    out: dict[tuple, ConvProblem] = {}
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 50 * count + 1000:
            raise ProblemError(f"generator could not draw {count} distinct problems (got {len(out)})")
        fam = rng.choices(names, weights=weights)[0]
        try:
            p = problem_from_dict(_sample(rng, fam, ndim))
        except ProblemError:
            continue
        if p.flops > max_gflop * 1e9 or p.ndim != ndim:
            continue
        out.setdefault(p.key(), p)
    return list(out.values())


# ------------------------------------------------------------------ loading sets
def resolve_path(path: str) -> Path:
    """Absolute paths as given; relative ones against conf/ (shipped data), then the cwd."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    for base in (CONF_DIR, Path.cwd()):
        if (base / p).exists():
            return base / p
    raise ProblemError(f"problem source path {path!r} not found (looked in {CONF_DIR} and {Path.cwd()})")


def read_csv(path: str | Path) -> list[ConvProblem]:
    """Problems from a CSV with problem columns (extra columns such as kernel are ignored)."""
    out = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        cols = [c for c in (reader.fieldnames or []) if c in CONV_FIELDS]
        if not {"N", "C", "K"} <= set(cols):
            raise ProblemError(f"CSV {path}: needs at least columns N, C, K; has {reader.fieldnames}")
        for i, row in enumerate(reader, start=2):
            try:
                out.append(problem_from_dict({c: row[c] for c in cols if row[c] not in ("", None)}))
            except ProblemError as e:
                raise ProblemError(f"CSV {path} line {i}: {e}") from None
    return out


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


def dedupe(problems: Iterable[ConvProblem]) -> list[ConvProblem]:
    """Drop repeated problems, keeping first occurrences in order."""
    seen: dict[tuple, ConvProblem] = {}
    for p in problems:
        seen.setdefault(p.key(), p)
    return list(seen.values())


def shard(problems: Sequence[ConvProblem], index: int, count: int) -> list[ConvProblem]:
    """Every count-th problem starting at index: shards partition the set."""
    if count < 1 or not 0 <= index < count:
        raise ProblemError(f"problems.shard: need 0 <= index < count, got index={index}, count={count}")
    return [p for i, p in enumerate(problems) if i % count == index]


def _with_batches(problems: list[ConvProblem], batches: Sequence[int]) -> list[ConvProblem]:
    if not batches:
        return problems
    return [problem_from_dict({**p.to_dict(), "N": n}) for p in problems for n in batches]


def load_source(src: Mapping[str, Any], load_set: Callable[[str], list[ConvProblem]]) -> list[ConvProblem]:
    """Problems of one source node (kind: inline, generate, miopen, csv or set)."""
    kind = str(src.get("kind"))
    if kind == "inline":
        probs = []
        for i, d in enumerate(src.get("problems") or []):
            try:
                probs.append(problem_from_dict(dict(d)))
            except ProblemError as e:
                raise ProblemError(f"inline problem #{i}: {e}") from None
    elif kind == "generate":
        probs = generate(int(src.get("seed", 0)), int(src.get("count", 0)), int(src.get("ndim", 2)),
                         src.get("families") or None, float(src.get("max_gflop", 20000.0)))
    elif kind in ("miopen", "csv"):
        if not src.get("path"):
            raise ProblemError(f"problem source kind={kind} needs a path")
        path = resolve_path(str(src["path"]))
        probs = read_miopen_file(path) if kind == "miopen" else read_csv(path)
    elif kind == "set":
        if not src.get("name"):
            raise ProblemError("problem source kind=set needs a name (a shipped problem set)")
        probs = load_set(str(src["name"]))
    else:
        raise ProblemError(f"problem source kind={kind!r}: allowed values are {', '.join(SOURCE_KINDS)}")
    return _with_batches(probs, list(src.get("batch") or []))
