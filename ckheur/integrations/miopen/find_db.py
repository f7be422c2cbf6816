"""MIOpen find-db files: each problem MIOpen was tuned on with its fastest solvers and their times.

Format (``../shared/data/README.md``): one line per problem, ``KEY=ENTRY;ENTRY;...``, at most
four entries, fastest first (not always: sorted here). Read vectorized (a 175k-line file in a few
seconds): keys and entries are parsed with pyarrow's regex extraction (RE2), never line by line.

- KEY 2D ``C1-H1-W1-YxX-C2-H2-W2-N-PhxPw-ShxSw-DhxDw-bias-LAYOUT-DTYPE-DIR[_gG]``, 3D with depth
  in each block. For backward directions (B, W) the first block is the output (dy): swapped
  back here, so C/Hi/Wi are always the input and K the output channels.
- ENTRY ``Solver:time_ms,workspace,algo`` (current) or ``algo:Solver,time_ms,workspace,...`` (older).

Skipped with a count per reason: keys whose sizes do not satisfy the output-size formula, mixed
layouts or data types, unknown data types, unparseable keys or entries, and zero times (not
measurements). A solver of the pool that a problem does not list is **censored**: either it
does not apply or it is slower than the slowest listed one; the import writes it as a row with
status ``censored``, never as unmeasured.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ckheur.errors import UserError
from ckheur.families import get_family
from ckheur.families.grouped_conv.problems import output_sizes

DIRECTIONS = {"F": "fwd", "B": "bwd_data", "W": "bwd_weight"}
DTYPES = {"FP32": "fp32", "FP16": "fp16", "BF16": "bf16"}
LAYOUTS = ("NCHW", "NCDHW", "NHWC", "NDHWC")
ALGORITHMS = {"Direct": "direct", "ImplicitGEMM": "implicit_gemm", "Winograd": "winograd", "GEMM": "gemm",
              "FFT": "fft"}
# Older find-dbs' solver names that are today's solver under another name, with why they are the
# same (read in MIOpen's sources); the import maps them and says so. Any other unknown name is left
# out of a dataset and counted (dataset_rows).
OLDER_NAMES = {
    # conv_ocl_dir2Dfwd.cpp / solvers.hpp (MIOpen 2.x-5.x): ``struct ConvOclDirectFwdFused :
    # ConvOclDirectFwd``, its IsApplicable and kernel (MIOpenConvDirUni.cl) inherited, its
    # GetSolution the base's without the MLO_CONV_BIAS macro: on a problem without bias, the same
    # kernel. Registry id 12, retired since; mapped on bias-free problems only.
    "ConvOclDirectFwdFused": "ConvOclDirectFwd",
}
CENSORED_REASON = "not listed in the find-db: not applicable, or slower than the slowest listed solver"

_KEY_2D_COLS = ["c1", "h1", "w1", "Y", "X", "c2", "h2", "w2", "N", "pad_h", "pad_w", "stride_h", "stride_w",
                "dilation_h", "dilation_w"]
_KEY_3D_COLS = ["c1", "d1", "h1", "w1", "Z", "Y", "X", "c2", "d2", "h2", "w2", "N", "pad_d", "pad_h", "pad_w",
                "stride_d", "stride_h", "stride_w", "dilation_d", "dilation_h", "dilation_w"]
# What follows each number of a key, in order: C1-H1-W1-YxX-C2-H2-W2-N-PhxPw-ShxSw-DhxDw (2D),
# C1-D1-H1-W1-ZxYxX-C2-D2-H2-W2-N-PdxPhxPw-SdxShxSw-DdxDhxDw (3D).
_SEPARATORS_2D = "---x-----x-x-x"
_SEPARATORS_3D = "----xx------xx-xx-xx"
_TAIL = r"-(?P<bias>[0-9]+)-(?P<layout_raw>[A-Z]+(?:-[A-Z]+)*)-(?P<dtype_raw>[A-Z0-9]+)-(?P<dir>[FBW])(?:_g(?P<G>[0-9]+))?$"


def _key_regex(cols: list[str], seps: str) -> str:
    body = "".join(f"(?P<{c}>[0-9]+)" + (seps[i] if i < len(seps) else "") for i, c in enumerate(cols))
    return "^" + body + _TAIL


_KEY_2D = _key_regex(_KEY_2D_COLS, _SEPARATORS_2D)
_KEY_3D = _key_regex(_KEY_3D_COLS, _SEPARATORS_3D)
# A solver name; templated solvers carry their parameters: ConvOclBwdWrW2<4>, ConvWinograd3x3MultipassWrW<3-2>.
SOLVER_NAME = r"[A-Za-z][A-Za-z0-9_]*(?:<[0-9-]+>)?"
_ENTRY_NEW = r"^(?P<solver>" + SOLVER_NAME + r"):(?P<time>[0-9.eE+-]+),(?P<workspace>[0-9]+),miopenConvolution\w*?Algo(?P<algo>\w+)$"
_ENTRY_OLD = r"^miopenConvolution\w*?Algo(?P<algo>\w+):(?P<solver>" + SOLVER_NAME + r"),(?P<time>[0-9.eE+-]+),(?P<workspace>[0-9]+)(?:,.*)?$"


class FindDbError(UserError):
    """A find-db file cannot be read; the message says why."""


@dataclass
class FindDb:
    """A parsed find-db: one row per problem, one row per listed (problem, solver), and a report."""

    problems: Any  # DataFrame: direction, dtype, problem fields (forward terms), layout, bias
    entries: Any  # DataFrame: problem (row of problems), solver, time_ms, workspace, algorithm
    report: dict = field(default_factory=dict)


def arch_from_name(path: str | Path, known: Sequence[str]) -> tuple[str, int]:
    """(arch, CU count) from a find-db file name: ``gfx942130`` is gfx942 with 0x130 = 304 CUs,
    ``gfx906_60`` gfx906 with 60 (an arch with at most 64 CUs is written with ``_``)."""
    from ckheur.config import find_db_name_device

    name = Path(path).name
    found = find_db_name_device(name, known)
    if found is not None:
        return found
    raise FindDbError(f"{name}: not a find-db file name <arch><CUs in hex>.HIP.fdb.txt[.bz2] (or a user "
                      f"find-db's <arch><CUs>.HIP.<version>.ufdb.txt) of a known arch "
                      f"({', '.join(known)}); give import.arch")


def _text(path: Path, data: bytes | None = None) -> str:
    """A find-db's text (plain, or decompressed under ``ckheur.files.DATA_LIMIT_BYTES``): of the
    file's bytes ``data`` when given (read once: what the cache key hashed), else read here."""
    import lzma
    import zlib

    from ckheur.files import decompress, read_compressed

    try:
        return (read_compressed(path) if data is None else decompress(data, path)).decode()
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, lzma.LZMAError) as e:
        raise FindDbError(f"{path}: cannot be read ({str(e).splitlines()[0][:200]})") from None


MAX_DIGITS = 15  # integers of a key or entry longer than this are refused (beyond any real size)


def _extract(strings: Any, pattern: str, numbers: Sequence[str] = (), floats: Sequence[str] = (),
             where: Any = None) -> Any:
    """Named groups of a regex over an Arrow string array, as a DataFrame; a non-match is a row of
    nulls. Groups in ``numbers`` / ``floats`` come as int64 / float64 (an empty group as null).
    ``where(i)`` names the file line of row i: a number that is not one (too long, malformed) is
    a FindDbError there."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    got = pc.extract_regex(strings, pattern)
    valid = got.is_valid()
    cols = {}
    for i, f in enumerate(got.type):
        col = pc.if_else(valid, got.field(i), pa.scalar(None, pa.string()))
        if f.name in numbers or f.name in floats:
            col = pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), col)
            if f.name in numbers:
                long = np.flatnonzero(pc.fill_null(pc.greater(pc.utf8_length(col), MAX_DIGITS), False)
                                      .to_numpy(zero_copy_only=False))
                if len(long):
                    raise FindDbError(f"{where(int(long[0])) if where else 'a line'}: {f.name}="
                                      f"{col[int(long[0])].as_py()} is larger than any real size")
                col = pc.cast(col, pa.int64())
            else:  # "1.2.3" matches the entry pattern's characters but is no number
                import pandas as pd

                text = col.to_pandas()
                values = pd.to_numeric(text, errors="coerce")
                bad = np.flatnonzero(values.isna().to_numpy() & text.notna().to_numpy())
                if len(bad):
                    raise FindDbError(f"{where(int(bad[0])) if where else 'a line'}: {f.name}={text.iloc[int(bad[0])]!r} "
                                      "is not a number")
                col = pa.array(values.to_numpy(dtype=np.float64), mask=values.isna().to_numpy())
        cols[f.name] = col
    return pa.table(cols).to_pandas()


CACHE_ENV = "CKHEUR_FIND_DB_CACHE"  # the parsed find-db cache folder; "off" parses every time
CACHE_FORMAT = 2  # bump when FindDb's columns or the parser's rules change: older entries are ignored


def read_find_db(path: str | Path, arch: str | None = None, data: bytes | None = None) -> FindDb:
    """Parse a find-db file (plain, .bz2 or .gz) into problems and listed entries, with a report.
    ``arch``: the GPU it was measured on; an entry whose time implies more than its peak (the
    imports' rule, ``ckheur.data.dataset.time_refusals``; Winograd and FFT solvers count as doing fewer
    multiplications) is skipped and counted, naming the first's line.

    The file is read once: its bytes are hashed and parsed from that one buffer, so a parse is
    kept under the hash of exactly the bytes it parsed. A file is parsed once per process (the
    selectors of several directions share it) and once per machine: the parse is kept in a
    private cache folder (``$CKHEUR_FIND_DB_CACHE``, default ``~/.cache/ckheur/find_db``; ``off``
    disables it) under the sha256 of the bytes. ``data``: the file's bytes, already read by the
    caller (an import, which hashes them too). Callers must not modify what they get."""
    import hashlib
    import os

    from ckheur.files import NotRegularFileError, read_regular

    path = Path(path)
    if not os.path.exists(path):
        raise FindDbError(f"find-db {path} not found")
    if os.path.isdir(path):
        raise FindDbError(f"find-db {path} is a folder, not a find-db file")
    try:
        data = read_regular(path) if data is None else data
    except NotRegularFileError as e:
        raise FindDbError(f"find-db {e}") from None
    except OSError as e:
        raise FindDbError(f"{path}: cannot be read ({e.strerror or e})") from None
    sha = hashlib.sha256(data).hexdigest()
    return _read_once(os.path.realpath(path), str(path), sha, arch, _Bytes(data))


class _Bytes:
    """A file's bytes carried beside a memo key without being part of it (the sha256 is)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Bytes)

    def __hash__(self) -> int:
        return 0


@functools.lru_cache(maxsize=4)
def _read_once(real: str, given: str, sha: str, arch: str | None, data: _Bytes) -> FindDb:
    """read_find_db's parse of the bytes ``data`` (whose sha256 is ``sha``), memoized per process
    by the path and that hash, and kept in the cache folder under the same hash."""
    import hashlib

    folder = _cache_folder()
    if folder is None:
        return _parse_find_db(Path(given), arch, data.data)
    entry = folder / hashlib.sha256(f"{sha}|{real}|{arch}|{CACHE_FORMAT}".encode()).hexdigest()[:32]
    meta = {"format": CACHE_FORMAT, "source": real, "sha256": sha, "size": len(data.data), "arch": arch}
    cached = _cached_parse(entry, meta)
    if cached is not None:
        return cached
    fdb = _parse_find_db(Path(given), arch, data.data)  # the bytes hashed, never a second read
    _store_parse(folder, entry, meta, fdb)
    return fdb


def _cache_folder() -> Path | None:
    """The parsed find-db cache folder when it can be trusted (ckheur.files.private_cache), else None."""
    import os

    from ckheur.files import private_cache

    env = os.environ.get(CACHE_ENV, "")
    if env.lower() == "off":
        return None
    root = Path(env) if env else Path.home() / ".cache" / "ckheur" / "find_db"
    return private_cache(root, "find-db cache", fallback_prefix=None)


def _cached_parse(entry: Path, meta: Mapping[str, Any]) -> FindDb | None:
    """A cache entry's FindDb when it is this user's, whole, and recorded for exactly this file."""
    import json

    import pandas as pd

    from ckheur.files import entry_risk

    try:
        for p in (entry, entry / "meta.json", entry / "problems.parquet", entry / "entries.parquet"):
            if entry_risk(p):
                return None
        got = json.loads((entry / "meta.json").read_text())
        if not isinstance(got, dict) or {k: got.get(k) for k in meta} != dict(meta):
            return None
        return FindDb(pd.read_parquet(entry / "problems.parquet"), pd.read_parquet(entry / "entries.parquet"),
                      dict(got.get("report", {})))
    except (OSError, ValueError, TypeError, RecursionError, ImportError):
        return None  # missing or damaged: parsed again and stored anew


def _store_parse(folder: Path, entry: Path, meta: Mapping[str, Any], fdb: FindDb) -> None:
    """Keep a parse in the cache: written whole in a private folder beside the entry, then renamed
    into place (a reader never sees half of one; of two writers, one wins)."""
    import json
    import shutil
    import tempfile

    try:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder))
        try:
            fdb.problems.to_parquet(tmp / "problems.parquet")
            fdb.entries.to_parquet(tmp / "entries.parquet")
            (tmp / "meta.json").write_text(json.dumps({**meta, "report": fdb.report}, default=str))
            if entry.exists():
                shutil.rmtree(entry, ignore_errors=True)
            tmp.rename(entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass  # a cache that cannot be written costs the next process a parse, nothing more


def _parse_find_db(path: Path, arch: str | None, data: bytes | None = None) -> FindDb:
    """read_find_db's work: the file parsed (vectorized, pyarrow's regex extraction); of its bytes
    ``data`` when given, else as read here."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    raw_lines = _text(path, data).splitlines()
    line_no = np.array([i + 1 for i, ln in enumerate(raw_lines) if ln.strip()], dtype=np.int64)
    lines = pa.array([raw_lines[i - 1] for i in line_no], type=pa.string())

    def at(row: int) -> str:
        """Where row ``row`` of ``lines`` is in the file."""
        return f"{path} line {line_no[row]}"

    report: dict[str, Any] = {"lines": int(len(lines)), "skipped_keys": {}, "skipped_entries": {}}
    if not len(lines):
        raise FindDbError(f"{path}: empty; a find-db has one KEY=ENTRY;... line per problem")
    kv = _extract(lines, r"^(?P<key>[^=]+)=(?P<values>.+)$")
    if kv["key"].isna().all():
        raise FindDbError(f"{path}: no KEY=ENTRY lines (is this a find-db file?)")
    keys, values = kv["key"], kv["values"]
    skipped = report["skipped_keys"]

    def skip(mask: Any, reason: str) -> None:
        if mask.any():
            skipped[reason] = skipped.get(reason, 0) + int(mask.sum())

    skip(keys.isna(), "not a KEY=ENTRY line")
    key_arr = pa.array(keys, type=pa.string())
    k2 = _extract(key_arr, _KEY_2D, [*_KEY_2D_COLS, "bias", "G"], where=at)
    k3 = _extract(key_arr, _KEY_3D, [*_KEY_3D_COLS, "bias", "G"], where=at)
    is3 = k2["c1"].isna() & k3["c1"].notna()
    parsed = k2["c1"].notna() | is3
    skip(~parsed & keys.notna(), "key not in the 2D or 3D find-db format")
    k = pd.concat([k2[~is3 & parsed], k3[is3]]).reindex(keys.index[parsed])
    for c in ("d1", "d2", "Z", "pad_d", "stride_d", "dilation_d"):
        k[c] = k[c].fillna(0 if c == "pad_d" else 1)
    k["G"] = k["G"].fillna(1)  # no _g<G>: one group
    num = [c for c in k.columns if c not in ("layout_raw", "dtype_raw", "dir")]
    k[num] = k[num].astype(np.int64)
    # Layouts and data types: one name, or three (one per tensor) that must agree.
    lay = k["layout_raw"].str.split("-")
    same_lay = lay.map(lambda xs: len(set(xs)) == 1)
    skip(~same_lay, "mixed tensor layouts")
    k["layout"] = lay.str[0].where(lay.str[0].isin(LAYOUTS))
    skip(same_lay & k["layout"].isna(), f"layout not {', '.join(LAYOUTS)}")
    wrong_dims = k["layout"].notna() & (k["layout"].str.contains("D") != is3.loc[k.index])
    skip(wrong_dims, "layout of other spatial dimensions than the key")
    dt = k["dtype_raw"].str.findall(r"FP32|FP16|BF16|[A-Z]+[0-9]*")
    same_dt = dt.map(lambda xs: len(set(xs)) == 1)
    skip(~same_dt, "mixed data types")
    k["dtype"] = dt.str[0].map(DTYPES)
    skip(same_dt & k["dtype"].isna(), "data type not FP32, FP16 or BF16")
    k = k[same_lay & same_dt & k["layout"].notna() & k["dtype"].notna() & ~wrong_dims]
    k["direction"] = k["dir"].map(DIRECTIONS)
    # Forward terms: backward keys list the output (dy) block first.
    back = k["dir"] != "F"
    first, second = ("c1", "d1", "h1", "w1"), ("c2", "d2", "h2", "w2")
    for inp, out, f, s in zip(("C", "Di", "Hi", "Wi"), ("K", "Do", "Ho", "Wo"), first, second):
        k[inp] = np.where(back, k[s], k[f])
        k[out] = np.where(back, k[f], k[s])

    do, ho, wo = output_sizes(k)
    ok = (do == k["Do"]) & (ho == k["Ho"]) & (wo == k["Wo"])
    skip(~ok, "sizes do not satisfy the output-size formula")
    valid = ok & (k[["N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X"]] >= 1).all(axis=1) \
        & (k["C"] % k["G"] == 0) & (k["K"] % k["G"] == 0) & k["bias"].isin([0, 1])
    skip(ok & ~valid, "invalid sizes (zero, or channels not divisible by groups)")
    k = k[valid]
    _refuse_beyond_validity(k, at)
    fields = ["N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "stride_d", "stride_h", "stride_w", "pad_d",
              "pad_h", "pad_w", "dilation_d", "dilation_h", "dilation_w", "layout", "bias"]
    problems = k[["direction", "dtype", *fields]]
    dup = problems.duplicated()
    skip(dup, "repeated key")
    problems = problems[~dup]
    # Entries of the kept problems, one row each.
    lists = pc.split_pattern(pa.array(values.loc[problems.index], type=pa.string()), ";")
    flat = pc.utf8_trim_whitespace(pc.list_flatten(lists))
    line = problems.index.to_numpy()[pc.list_parent_indices(lists).to_numpy()]
    filled = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    flat, line = flat.filter(pa.array(filled)), line[filled]
    def entry_at(row: int) -> str:
        return at(int(line[row]))

    new = _extract(flat, _ENTRY_NEW, ["workspace"], ["time"], where=entry_at)
    old = _extract(flat, _ENTRY_OLD, ["workspace"], ["time"], where=entry_at)
    use_old = (new["solver"].isna() & old["solver"].notna()).to_numpy()
    pick = lambda c: np.where(use_old, old[c].to_numpy(), new[c].to_numpy())  # noqa: E731
    e = pd.DataFrame({"line": line, "solver": pick("solver"), "time_ms": pick("time"), "workspace": pick("workspace"),
                      "algo": pick("algo")})
    bad = e["solver"].isna()
    if bad.any():
        report["skipped_entries"]["entry not in either find-db format"] = int(bad.sum())
    e = e[~bad]
    e["time_ms"] = e["time_ms"].astype(np.float64)
    e["workspace"] = e["workspace"].astype(np.int64)
    older = e["solver"].isin(list(OLDER_NAMES)).to_numpy()
    if older.any():  # today's name where it is the same solver (OLDER_NAMES): bias-free problems only
        bias = problems["bias"].reindex(e["line"].to_numpy()).to_numpy()
        mapped = older & (bias == 0)
        renamed = report.setdefault("renamed_solvers", {})
        for old_name, n in e["solver"][mapped].value_counts().items():
            renamed[f"{old_name} -> {OLDER_NAMES[old_name]}"] = int(n)
        e.loc[mapped, "solver"] = e["solver"][mapped].map(OLDER_NAMES)
    t = e["time_ms"].to_numpy()
    wrong = np.flatnonzero(~np.isfinite(t) | (t < 0))
    if len(wrong):
        i = int(wrong[0])
        raise FindDbError(f"{at(int(e['line'].iloc[i]))}: solver {e['solver'].iloc[i]} has time {t[i]} ms; a time "
                          "must be a finite number >= 0 (0 is a known export quirk, skipped)")
    zero = ~(e["time_ms"] > 0)
    if zero.any():
        report["skipped_entries"]["time 0 (not a measurement)"] = int(zero.sum())
    e = e[~zero]
    pos = pd.Series(np.arange(len(problems)), index=problems.index)
    e["problem"] = pos.loc[e["line"].to_numpy()].to_numpy()
    if arch is not None:  # the imports' peak rule; like a zero time, such an entry is no measurement
        from ckheur.data.dataset import fewer_multiplies, time_refusals

        p = e["problem"].to_numpy()
        fewer = fewer_multiplies(e["algo"].to_numpy())
        why = time_refusals(e["time_ms"].to_numpy(), _flops(problems)[p], problems["dtype"].to_numpy()[p], arch,
                            fewer_multiplies=fewer)
        fast = np.flatnonzero([bool(w) for w in why])
        if len(fast):
            i = int(fast[0])
            report["skipped_entries"][f"time beyond the {arch} peak (not a measurement; the first: "
                                      f"{at(int(e['line'].iloc[i]))}, {e['solver'].iloc[i]}: {why[i]})"] = int(len(fast))
            e = e.drop(e.index[fast])
    e["algorithm"] = e["algo"].map(ALGORITHMS).fillna(e["algo"].str.lower())
    p_, t_ = e["problem"].to_numpy(), e["time_ms"].to_numpy()  # file order within each problem
    report["problems_out_of_time_order"] = int(len(np.unique(p_[1:][(p_[1:] == p_[:-1]) & (t_[1:] < t_[:-1])])))
    dup_e = e.duplicated(["problem", "solver"])
    if dup_e.any():
        report["skipped_entries"]["solver listed twice for a problem (the faster kept)"] = int(dup_e.sum())
    e = e.sort_values(["problem", "time_ms"], kind="stable").drop_duplicates(["problem", "solver"])
    listed = np.bincount(e["problem"].to_numpy(), minlength=len(problems))
    if (listed == 0).any():
        skipped["every entry dropped"] = skipped.get("every entry dropped", 0) + int((listed == 0).sum())
    keep = listed > 0
    problems = problems[keep].reset_index(drop=True)
    remap = np.cumsum(keep) - 1
    e["problem"] = remap[e["problem"].to_numpy()]
    report.update(problems=int(len(problems)), entries=int(len(e)),
                  by_direction_dtype={f"{d}/{t}": int(n) for (d, t), n in
                                      problems.groupby(["direction", "dtype"]).size().items()})
    return FindDb(problems=problems, entries=e[["problem", "solver", "time_ms", "workspace", "algorithm"]]
                  .reset_index(drop=True), report=report)


def _refuse_beyond_validity(k: Any, at: Any) -> None:
    """A FindDbError at the first key whose sizes break the problem types' validity rule (fields
    at most 2^31-1, FLOPs and tensor elements below 2^53: what every ckheur path computes exactly)."""
    import numpy as np

    from ckheur.families.problem_base import EXACT_LIMIT, FIELD_MAX

    fields = [c for c in k.columns if c not in ("layout_raw", "dtype_raw", "dir", "layout", "dtype", "direction")]
    big = (k[fields] > FIELD_MAX).any(axis=1).to_numpy()
    v = {c: k[c].to_numpy(dtype=np.float64) for c in ("N", "C", "K", "G", "Di", "Hi", "Wi", "Do", "Ho", "Wo", "Z",
                                                       "Y", "X")}
    flops = 2 * v["N"] * v["K"] * v["Do"] * v["Ho"] * v["Wo"] * (v["C"] / v["G"]) * v["Z"] * v["Y"] * v["X"]
    elems = v["N"] * v["C"] * v["Di"] * v["Hi"] * v["Wi"] + v["K"] * (v["C"] / v["G"]) * v["Z"] * v["Y"] * v["X"] \
        + v["N"] * v["K"] * v["Do"] * v["Ho"] * v["Wo"]
    bad = np.flatnonzero(big | (flops >= EXACT_LIMIT) | (elems >= EXACT_LIMIT))
    if len(bad):
        i = int(bad[0])
        raise FindDbError(f"{at(int(k.index[i]))}: sizes beyond the validity rule (every field at most {FIELD_MAX}, "
                          f"FLOPs and tensor elements below 2^53): N={k['N'].iloc[i]} C={k['C'].iloc[i]} "
                          f"K={k['K'].iloc[i]} {k['Hi'].iloc[i]}x{k['Wi'].iloc[i]}")


@dataclass(frozen=True)
class FindDbAnswers:
    """MIOpen's exact answers: the fastest listed solver of each problem of one direction and
    data type in a find-db, by problem key (``MIOpenConvProblem.key()``)."""

    path: Path
    arch: str
    direction: str
    dtype: str
    best: dict  # problem key -> (solver, time_ms)
    refused: dict = field(default_factory=dict)  # solver name -> entries left out: not a solver of the table

    def __len__(self) -> int:
        return len(self.best)


def find_db_answers(path: str | Path, direction: str, dtype: str, arch: str,
                    solvers: Sequence[str] | None = None) -> FindDbAnswers:
    """The answers a find-db (MIOpen's system file or a user find-db) gives for one direction and
    data type: each problem's fastest listed solver among ``solvers`` (default: the arch's table
    of the direction); entries of other solvers (unknown, or of another direction) are left out
    and counted in ``refused``. FindDbError when its file name names another arch, or none, or
    when a time breaks the peak rule."""
    from ckheur.data.dataset import problem_keys
    from ckheur.families.kernel_base import KernelError
    from ckheur.families.miopen.solvers import table_names
    from ckheur.families.miopen.problems import FIELDS

    cus_of(path, arch)
    if solvers is None:
        try:
            solvers = table_names(direction, arch)
        except KernelError as e:
            raise FindDbError(f"find-db {path}: {e}") from None
    fdb = read_find_db(path, arch)
    keep = ((fdb.problems["direction"] == direction) & (fdb.problems["dtype"] == dtype)).to_numpy()
    mine = fdb.entries[keep[fdb.entries["problem"].to_numpy()]]
    known = mine["solver"].isin(set(solvers)).to_numpy()
    refused = {str(s): int(n) for s, n in mine["solver"][~known].value_counts().items()}
    first = mine[known].drop_duplicates("problem")  # entries are sorted by time within a problem
    keys = problem_keys(fdb.problems.iloc[first["problem"].to_numpy()][list(FIELDS)])
    best = dict(zip(keys, zip(first["solver"].tolist(), first["time_ms"].astype(float).tolist())))
    return FindDbAnswers(Path(path), arch, direction, dtype, best, refused)


def serve_find_db(selector: Any, find_db: Any) -> FindDbAnswers:
    """MIOpen's answers from a find-db (a path or ``FindDbAnswers``) for a selector's op and arch: only
    solvers of this pool with a positive finite time are ever served (others are counted in
    ``refused``)."""
    import dataclasses
    import math

    from ckheur.families.problem_base import ProblemError

    if selector.family.name != "miopen":
        raise ProblemError(f"find_db: a MIOpen find-db answers for MIOpen's solvers (op family miopen), not "
                           f"the {selector.family.name} family")
    pool = selector._kernel_names
    if not isinstance(find_db, FindDbAnswers):
        find_db = find_db_answers(find_db, selector.direction, selector.dtype, selector.arch["name"], sorted(pool))
    if (find_db.arch, find_db.direction, find_db.dtype) != (selector.arch["name"], selector.direction, selector.dtype):
        raise ProblemError(f"find_db {find_db.path} answers {find_db.direction}/{find_db.dtype} on {find_db.arch}, "
                           f"not {selector.direction}/{selector.dtype} on {selector.arch['name']}")
    served = {key: hit for key, hit in find_db.best.items()
              if hit[0] in pool and isinstance(hit[1], (int, float)) and math.isfinite(hit[1]) and hit[1] > 0}
    if len(served) < len(find_db.best):
        refused = dict(find_db.refused)
        for solver, _ in (hit for key, hit in find_db.best.items() if key not in served):
            refused[str(solver)] = refused.get(str(solver), 0) + 1
        find_db = dataclasses.replace(find_db, best=served, refused=refused)
    return find_db


def find_db_listing(path: str | Path, problem: Any, direction: str, dtype: str, arch: str) -> dict[str, float] | None:
    """Every solver a find-db lists for one problem (``MIOpenConvProblem``) of a direction and data
    type, with its time in ms; None when the file does not hold the problem."""
    import numpy as np

    from ckheur.data.dataset import problem_keys
    from ckheur.families.miopen.problems import FIELDS

    cus_of(path, arch)
    fdb = read_find_db(path)
    rows = np.flatnonzero(((fdb.problems["direction"] == direction) & (fdb.problems["dtype"] == dtype)).to_numpy())
    keys = problem_keys(fdb.problems.iloc[rows][list(FIELDS)])
    at = next((int(r) for r, key in zip(rows, keys) if key == problem.key()), None)
    if at is None:
        return None
    e = fdb.entries[fdb.entries["problem"].to_numpy() == at]
    return dict(zip(e["solver"].astype(str), e["time_ms"].astype(float)))


def learn_listed(fdb: FindDb, direction: str) -> dict[str, list[str]]:
    """For each solver a find-db lists for a direction, the kinds of problem it is ever listed for
    (``ckheur.families.miopen.solvers.listing_kind``: layout, data type, group and filter kind), the
    ``op.listed`` table of ``op.applicability=listed``: a kind a solver is never listed for is taken
    as one it does not apply to."""
    from ckheur.families.miopen.solvers import listed_kinds

    cols = ["layout", "dtype", "G", "C", "Z", "Y", "X"]
    probs = fdb.problems.reset_index(drop=True)
    e = fdb.entries[fdb.entries["problem"].isin(probs.index[probs["direction"] == direction])]
    rows = probs.loc[e["problem"].to_numpy(), cols].reset_index(drop=True)
    rows["kernel"] = e["solver"].astype(str).to_numpy()
    return listed_kinds(rows)


# MIOpen's files that name the solvers a release ran (``op.available`` given as a path): find-dbs
# (system ``<arch><CUs>.HIP.fdb.txt``, user ``.ufdb.txt``), text perf-dbs (``.db.txt``, user
# ``.udb.txt``: ``KEY=Solver:tuning parameters;...``) and SQLite perf-dbs (``.db``, user ``.udb``:
# older ROCm releases; a ``perf_db`` table with a ``solver`` column), each plain or compressed.
SOLVER_FILES = (".fdb.txt", ".ufdb.txt", ".db.txt", ".udb.txt", ".db", ".udb")
_PERF_ENTRY = re.compile(r"(?:^|[=;])(" + SOLVER_NAME + r"):", re.MULTILINE)
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def solver_names(path: str | Path) -> list[str]:
    """Every solver name MIOpen's files at ``path`` list (a find-db, a text or SQLite perf-db, plain or
    compressed, or a folder of them such as a ROCm install's ``share/miopen/db``), sorted: the
    solvers that MIOpen release ships. A find-db is read by :func:`read_find_db` (its older names
    also as today's, ``OLDER_NAMES``). A FindDbError names ``op.available`` when there is no such
    file or it names no solver."""
    import os

    path = Path(path)
    kinds = ", ".join(f"*{s}[.bz2]" for s in SOLVER_FILES)
    takes = (f"op.available takes a list of solver names, or a path to MIOpen's files that name them ({kinds}, or "
             "a folder of them such as /opt/rocm/share/miopen/db)")
    if not os.path.exists(path):
        raise FindDbError(f"op.available={path}: no such file or folder; {takes}")
    files = sorted(f for f in path.iterdir() if f.is_file() and _solver_file(f.name)) if path.is_dir() else [path]
    if not files or not _solver_file(files[0].name):
        raise FindDbError(f"op.available={path}: {'holds no' if path.is_dir() else 'not a'} MIOpen find-db or "
                          f"perf-db; {takes}")
    names: set = set()
    for f in files:
        if ".fdb.txt" in f.name or ".ufdb.txt" in f.name:
            listed = set(read_find_db(f).entries["solver"].astype(str))
            names |= listed | {OLDER_NAMES[n] for n in listed if n in OLDER_NAMES}
        elif ".db.txt" in f.name or ".udb.txt" in f.name:
            text = _text(f)
            names |= {m for m in _PERF_ENTRY.findall(text) if not m.startswith("miopenConvolution")}
        else:
            names |= _sqlite_solvers(f)
    if not names:
        raise FindDbError(f"op.available={path}: names no solver (no entry in {len(files)} MIOpen file"
                          f"{'s' if len(files) > 1 else ''}); {takes}")
    return sorted(names)


def _sqlite_solvers(path: Path) -> set[str]:
    """The solver names of a SQLite perf-db's ``perf_db`` table, read only: a plain file through
    SQLite's read-only URI, a compressed one decompressed into memory (Python 3.11's deserialize).
    A FindDbError names a file that is not one."""
    import sqlite3

    from ckheur.files import open_regular, read_compressed

    plain = path.suffix not in (".gz", ".bz2", ".xz")
    try:
        if plain:
            with open_regular(path) as f:
                data = f.read(len(SQLITE_MAGIC))
        else:
            data = read_compressed(path)
    except (OSError, EOFError) as e:
        raise FindDbError(f"op.available: {path} cannot be read ({str(e).splitlines()[0][:200]})") from None
    if not data.startswith(SQLITE_MAGIC):
        raise FindDbError(f"op.available: {path} is no SQLite database (MIOpen's binary perf-dbs *.db and *.udb are)")
    if not plain and not hasattr(sqlite3.Connection, "deserialize"):  # Python 3.10
        raise FindDbError(f"op.available: {path}: reading a compressed SQLite perf-db needs Python 3.11; "
                          "decompress it first")
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) if plain else sqlite3.connect(":memory:")
    try:
        if not plain:
            con.deserialize(data)
        return {str(r[0]) for r in con.execute("SELECT DISTINCT solver FROM perf_db")}
    except sqlite3.DatabaseError as e:
        raise FindDbError(f"op.available: {path} is no MIOpen perf-db (a perf_db table with a solver column): "
                          f"{e}") from None
    finally:
        con.close()


def _solver_file(name: str) -> bool:
    """Whether a file name is one of SOLVER_FILES' kinds, plain or compressed."""
    return any(name.endswith(s) or f"{s}." in name for s in SOLVER_FILES)


def cus_of(path: str | Path, arch: str, *, user: bool = False) -> int:
    """The CU count a find-db's file name gives, after checking that it names ``arch`` (with
    ``user``: a user find-db, plain text); FindDbError saying how MIOpen names them otherwise."""
    name = Path(path).name
    try:
        named, cus = arch_from_name(name, [arch])
    except FindDbError:
        named, cus = None, 0
    if named == arch and (not user or name.endswith(".ufdb.txt")):
        return cus
    kind = "a user find-db" if user else "a find-db"
    raise FindDbError(f"{name}: not {kind} of {arch} (the job's arch): MIOpen names them "
                      + ("" if user else f"{arch}<CUs in hex>.HIP.fdb.txt[.bz2] (system) or ")
                      + f"{arch}<CUs>.HIP.<MIOpen version>.ufdb.txt (user, read from $MIOPEN_USER_DB_PATH, "
                      "default ~/.config/miopen/); the file name says which GPU a find-db is for")


# ---------------------------------------------------------------- lines, as MIOpen writes them
# ``read_find_db`` reads a whole file into tables (cleaned: forward terms, zero times skipped);
# these read and write single lines exactly: parsing a line and writing it back gives the line.

LETTERS = {direction: letter for letter, direction in DIRECTIONS.items()}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
DEFAULT_LAYOUTS = ("NCHW", "NCDHW")  # the only layouts MIOpen names once (others: once per tensor)
_LINE_KEY = re.compile(r"^(?P<body>[0-9x-]+?)-(?P<bias>[0-9]+)-(?P<layouts>[A-Z]+(?:-[A-Z]+)*)-(?P<dtypes>[A-Z0-9]+)"
                       r"-(?P<dir>[FBW])(?:_g(?P<G>[0-9]+))?$")
_LINE_ENTRY = re.compile(r"^(?P<solver>" + SOLVER_NAME + r"):(?P<time>[0-9.eE+-]+),(?P<workspace>[0-9]+),"
                         r"(?P<algorithm>miopenConvolution\w+Algo\w+)$")
_INT = re.compile(r"^(?:0|[1-9][0-9]{0,14})$")  # as C++ streams write integers: no sign, no leading zeros


@dataclass(frozen=True)
class FindDbKey:
    """A find-db key's fields in MIOpen's order. ``first`` and ``second`` are (channels, [depth,]
    height, width) of the input and output tensors, swapped for backward directions (the first
    is the output dy there); ``layouts`` and ``dtypes`` hold one name, or one per tensor."""

    first: tuple
    filter: tuple
    second: tuple
    batch: int
    pads: tuple
    strides: tuple
    dilations: tuple
    bias: int
    layouts: tuple
    dtypes: tuple
    direction: str  # F, B or W
    groups: int = 1

    def text(self) -> str:
        """The key as MIOpen writes it."""
        def dims(values: tuple, sep: str) -> str:
            return sep.join(str(v) for v in values)

        return "-".join([dims(self.first, "-"), dims(self.filter, "x"), dims(self.second, "-"), str(self.batch),
                         dims(self.pads, "x"), dims(self.strides, "x"), dims(self.dilations, "x"), str(self.bias),
                         *self.layouts, "".join(self.dtypes), self.direction]) \
            + (f"_g{self.groups}" if self.groups != 1 else "")


@dataclass(frozen=True)
class FindDbEntry:
    """One solver's result in a find-db line. ``time_text`` is the time as a file spelled it
    (kept so that a line is written back unchanged); empty, it is written as MIOpen writes a
    float (six significant digits)."""

    solver: str
    time_ms: float
    workspace: int  # bytes
    algorithm: str  # MIOpen's name, e.g. miopenConvolutionFwdAlgoImplicitGEMM
    time_text: str = ""

    def text(self) -> str:
        """The entry as MIOpen writes it."""
        return f"{self.solver}:{self.time_text or format(self.time_ms, 'g')},{self.workspace},{self.algorithm}"


@dataclass(frozen=True)
class FindDbLine:
    """A find-db line: a key and its entries, in the file's order."""

    key: FindDbKey
    entries: tuple

    def text(self) -> str:
        """The line as MIOpen writes it (without the newline)."""
        return self.key.text() + "=" + ";".join(e.text() for e in self.entries)


def _number(text: str, what: str, line: str) -> int:
    if not _INT.match(text):
        raise FindDbError(f"find-db line {line[:120]!r}: {what} {text!r} is not a number as MIOpen writes one")
    return int(text)


# A key's numbers, every one as _INT allows, with their separators: one match checks them all.
_NUMBERS = re.compile(r"(?:0|[1-9][0-9]{0,14})(?:[-x](?:0|[1-9][0-9]{0,14}))*")


def parse_key(text: str) -> FindDbKey:
    """A key's fields, exactly as written (nothing checked but the syntax); FindDbError if it is
    not a convolution find-db key."""
    m = _LINE_KEY.match(text)
    parts = m["body"].split("-") if m else []
    if len(parts) not in (11, 13):
        raise FindDbError(f"find-db key {text[:120]!r}: not C-H-W-YxX-K-Ho-Wo-N-PxP-SxS-DxD-bias-LAYOUT-TYPE-DIR "
                          "(or its 3D form)")
    nd = 2 if len(parts) == 11 else 3
    singles = (*parts[:nd + 1], *parts[nd + 2:2 * nd + 4])  # the tensors' sizes and the batch: no "x" in them
    # The common case, every number as _INT allows (one match checks them all): read without checking each again.
    checked = _NUMBERS.fullmatch(m["body"]) and _INT.match(m["bias"]) and (not m["G"] or _INT.match(m["G"])) \
        and not any("x" in v for v in singles)
    ints = (lambda values, what: tuple(map(int, values))) if checked else \
        (lambda values, what: tuple(_number(v, what, text) for v in values))
    pairs = [ints(part.split("x"), "size") for part in (parts[nd + 1], *parts[2 * nd + 4:])]
    dtypes = tuple(re.findall(r"[A-Z]+[0-9]+", m["dtypes"]))
    layouts = tuple(m["layouts"].split("-"))
    if any(len(p) != nd for p in pairs) or "".join(dtypes) != m["dtypes"] or len(dtypes) not in (1, 3) \
            or len(layouts) not in (1, 3):
        raise FindDbError(f"find-db key {text[:120]!r}: filter, pads, strides, dilations, layouts or data types "
                          f"do not fit a {nd}D key")
    return FindDbKey(first=ints(parts[:nd + 1], "size"), filter=pairs[0], second=ints(parts[nd + 2:2 * nd + 3], "size"),
                     batch=ints([parts[2 * nd + 3]], "batch")[0], pads=pairs[1], strides=pairs[2],
                     dilations=pairs[3], bias=ints([m["bias"]], "bias")[0], layouts=layouts, dtypes=dtypes,
                     direction=m["dir"], groups=ints([m["G"]], "groups")[0] if m["G"] else 1)


def parse_line(text: str) -> FindDbLine:
    """A find-db line (``KEY=ENTRY;ENTRY;...``, the current entry format) as written; FindDbError
    names what does not parse."""
    key, sep, values = text.partition("=")
    if not sep or not values:
        raise FindDbError(f"find-db line {text[:120]!r}: not KEY=ENTRY;ENTRY;...")
    entries = []
    for item in values.split(";"):
        m = _LINE_ENTRY.match(item)
        if not m:
            raise FindDbError(f"find-db line {text[:120]!r}: entry {item[:120]!r} is not Solver:time,workspace,algorithm")
        try:
            time_ms = float(m["time"])
        except ValueError:
            raise FindDbError(f"find-db line {text[:120]!r}: time {m['time']!r} is not a number") from None
        entries.append(FindDbEntry(m["solver"], time_ms, _number(m["workspace"], "workspace", text), m["algorithm"],
                                   m["time"]))
    return FindDbLine(parse_key(key), tuple(entries))


def problem_key(problem: Any, direction: str, dtype: str) -> FindDbKey:
    """The key MIOpen files a problem (``ckheur.families.miopen.problems``, forward terms) under."""
    nd = problem.ndim
    spatial = lambda *v: tuple(v[3 - nd:])  # noqa: E731  (2D keys leave the depth out)
    inp = (problem.C, *spatial(problem.Di, problem.Hi, problem.Wi))
    out = (problem.K, *spatial(problem.Do, problem.Ho, problem.Wo))
    if direction not in LETTERS or dtype not in DTYPE_NAMES:
        raise FindDbError(f"find-db keys are for directions {', '.join(LETTERS)} and data types "
                          f"{', '.join(DTYPE_NAMES)}, not {direction}/{dtype}")
    first, second = (inp, out) if direction == "fwd" else (out, inp)
    layouts = (problem.layout,) if problem.layout in DEFAULT_LAYOUTS else (problem.layout,) * 3
    return FindDbKey(first=first, filter=spatial(problem.Z, problem.Y, problem.X), second=second, batch=problem.N,
                     pads=spatial(problem.pad_d, problem.pad_h, problem.pad_w),
                     strides=spatial(problem.stride_d, problem.stride_h, problem.stride_w),
                     dilations=spatial(problem.dilation_d, problem.dilation_h, problem.dilation_w),
                     bias=problem.bias, layouts=layouts, dtypes=(DTYPE_NAMES[dtype],), direction=LETTERS[direction],
                     groups=problem.G)


ALGORITHM_NAMES = {"fwd": "miopenConvolutionFwdAlgo", "bwd_data": "miopenConvolutionBwdDataAlgo",
                   "bwd_weight": "miopenConvolutionBwdWeightsAlgo"}
ALGORITHM_SUFFIXES = {algorithm: suffix for suffix, algorithm in ALGORITHMS.items()}  # implicit_gemm -> ImplicitGEMM
# MIOpen's line syntax, whatever the key: KEY=ID:VALUES;ID:VALUES... (what a find-db file must hold)
_ANY_LINE = re.compile(r"^[^=;\s]+=[^=;:\s]+:[^=;\s]+(?:;[^=;:\s]+:[^=;\s]+)*$")


def algorithm_name(direction: str, algorithm: str) -> str:
    """MIOpen's name of a solver's algorithm in a direction (``implicit_gemm`` in ``fwd``:
    miopenConvolutionFwdAlgoImplicitGEMM)."""
    if direction not in ALGORITHM_NAMES or algorithm not in ALGORITHM_SUFFIXES:
        raise FindDbError(f"algorithm {algorithm!r} in direction {direction!r}: allowed algorithms "
                          f"{', '.join(ALGORITHM_SUFFIXES)}, directions {', '.join(ALGORITHM_NAMES)}")
    return ALGORITHM_NAMES[direction] + ALGORITHM_SUFFIXES[algorithm]


def merge_find_db(path: str | Path, lines: Sequence[FindDbLine], *, merge: bool = False) -> dict:
    """Write ``lines`` into a find-db text file (MIOpen's user find-db), as MIOpen would: a key
    the file has keeps its other solvers' entries, a given solver's entry replaces its own, and
    the key's entries are sorted by time; every other line stays as it is, in its place; new keys
    are appended. The whole read-modify-write holds an exclusive lock (``<name>.lock`` beside the
    file), so concurrent merges each keep their entries. When the text changes, the old text is
    kept beside it (``<name>.<UTC time>.bak``) and the file replaced, each written aside and renamed
    into place with the file's permission bits; an unchanged file is neither rewritten nor backed up.
    An existing file is written only with ``merge`` and only when every line is a find-db line
    (else FindDbError naming the line); a given line or solver name its own reader would refuse is
    refused before anything is written. Returns counts: lines kept, keys updated, keys added, the
    backup's path (None for a new or unchanged file) and whether the file ``changed``."""
    import os
    import stat
    from datetime import datetime, timezone

    from ckheur.files import lock_waiting, make_folder, open_lock, write_file

    path = Path(path)
    if path.suffix in (".bz2", ".gz"):
        raise FindDbError(f"{path}: MIOpen's user find-db is plain text (…/<arch><CUs>.HIP.<version>.ufdb.txt)")
    new = {}
    for line in lines:
        bad = next((e.solver for e in line.entries if not re.fullmatch(SOLVER_NAME, str(e.solver))), None)
        if bad is not None or not _ANY_LINE.match(line.text()):  # never a line this reader would refuse
            raise FindDbError(f"{path}: refused, nothing written: " + (f"solver name {str(bad)[:120]!r} is not one"
                              if bad is not None else f"{line.text()[:120]!r} is not a find-db line"))
        key = line.key.text()
        old = new.get(key)
        new[key] = line if old is None else FindDbLine(line.key, old.entries + line.entries)
    if (path.exists() or path.is_symlink()) and not merge:
        raise FindDbError(f"{path} exists: give merge=True to merge into it")
    make_folder(path.parent, "find-db folder")
    lock = open_lock(path.with_name(f"{path.name}.lock"))
    try:
        # held until the new text is in place: another merge reads it; another user's held lock is not waited on forever
        lock_waiting(lock, path.with_name(f"{path.name}.lock"), f"find-db {path}")
        existing: list[str] = []
        old_text, mode = None, None
        if path.exists() or path.is_symlink():
            if not merge:  # created by another writer since the check above
                raise FindDbError(f"{path} exists: give merge=True to merge into it")
            if not path.is_file() or path.is_symlink():
                raise FindDbError(f"{path} is not a regular file")
            mode = stat.S_IMODE(os.stat(path).st_mode)
            old_text = _text(path)
            existing = old_text.splitlines()
            bad = next((i for i, ln in enumerate(existing) if ln.strip() and not _ANY_LINE.match(ln)), None)
            if bad is not None:
                raise FindDbError(f"{path} line {bad + 1} is not a find-db line (KEY=SOLVER:VALUES;...): refused, "
                                  f"nothing written: {existing[bad][:120]!r}")
        counts: dict[str, Any] = {"kept": 0, "updated": 0, "added": 0, "backup": None}
        out = []
        for text in existing:
            key = text.partition("=")[0]
            if key not in new:
                out.append(text)
                counts["kept"] += 1
                continue
            mine = new.pop(key)
            out.append(_by_time(mine.key, parse_line(text).entries + mine.entries))
            counts["updated"] += 1
        for line in new.values():
            out.append(_by_time(line.key, line.entries))
            counts["added"] += 1
        text = "".join(f"{ln}\n" for ln in out)
        counts["changed"] = old_text is None or out != existing  # a missing last newline alone is no change
        if not counts["changed"]:
            return counts
        if old_text is not None:  # the replaced entries were measurements too: keep them
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
            counts["backup"] = str(write_file(path.with_name(f"{path.name}.{stamp}.bak"), old_text, mode=mode))
        write_file(path, text, mode=mode)
        return counts
    finally:
        os.close(lock)  # releases the lock


def tuning_db_lines(rows: Any, direction: str, dtype: str) -> tuple[list[FindDbLine], dict]:
    """Find-db lines of measured rows (a MIOpen-family tuning database or dataset) of one direction
    and data type: per problem, each solver's usable time with the workspace it used, fastest
    first. Only measurements go in: failed, censored and unmeasured pairs never do, nor a pair whose
    workspace is unknown (MIOpen allocates by it), which is counted; simulated rows are refused."""
    import numpy as np

    from ckheur.data.dataset import SIMULATED, problem_keys, usable
    from ckheur.families.miopen.problems import FIELDS, problem_from_dict

    if not len(rows):
        return [], {"problems": 0, "entries": 0, "workspace_unknown": 0}
    mine = (rows["direction"].astype(str) == direction).to_numpy() & (rows["dtype"].astype(str) == dtype).to_numpy()
    rows = rows[mine]
    ok = rows[usable(rows)]
    simulated = int((ok["backend"].astype(str) == SIMULATED).sum())
    if simulated:
        raise FindDbError(f"{simulated} of the rows are simulated (backend sim): a find-db holds measurements only, "
                          "and MIOpen would trust them; tune with a measuring backend (command, or replay of "
                          "measured data)")
    known = ok["workspace_bytes"].to_numpy(dtype=np.int64) >= 0
    kept = ok[known]
    by_key: dict[tuple, list] = {}
    for key, solver, time_ms, workspace, algorithm in zip(
            problem_keys(kept[list(FIELDS)]), kept["kernel"].astype(str), kept["latency_ms"].astype(float),
            kept["workspace_bytes"].astype(int), kept["algorithm"].astype(str)):
        by_key.setdefault(key, []).append(FindDbEntry(solver, time_ms, workspace, algorithm_name(direction, algorithm)))
    lines = [FindDbLine(problem_key(problem_from_dict(dict(zip(FIELDS, key))), direction, dtype),
                        tuple(sorted(entries, key=lambda e: e.time_ms))) for key, entries in by_key.items()]
    return lines, {"problems": len(lines), "entries": int(known.sum()), "workspace_unknown": int((~known).sum())}


def write_user_find_db(db: str | Path, path: str | Path, job: Any, *, merge: bool = False) -> dict:
    """Write the measurements of a tuning database of ``job`` (a MIOpen-family ``ckheur.job.Job``;
    ``tuning_db_lines``) into the user find-db ``path``, whose name must be MIOpen's for the job's
    arch (``<arch><CUs>.HIP.<version>.ufdb.txt``) and for the device that measured the database
    (its CU count: MI60's times never go into MI50's file), merged as :func:`merge_find_db` does; returns
    what was written. FindDbError when nothing measured can be written."""
    from ckheur.data.tuning_db import TuningDB

    if job.family.name != "miopen":
        raise FindDbError(f"op.family={job.family.name!r}: a find-db holds MIOpen's solvers; use op=miopen/<direction>")
    cus = cus_of(path, job.arch_name, user=True)
    tdb = TuningDB.open(db, job.op, job.arch)
    try:
        _refuse_other_device(Path(path), tdb)
        lines, counts = tuning_db_lines(tdb.frame(), job.direction, job.dtype)
    finally:
        tdb.close()
    if not lines:
        raise FindDbError(f"tuning database {tdb.path} holds no {job.direction} {job.dtype} measurement with a "
                          f"known workspace ({counts['workspace_unknown']} without one): nothing to write; a "
                          "find-db entry needs the workspace bytes (backend=command: backend.workspace_regex)")
    written = merge_find_db(path, lines, merge=merge)
    return {"find_db": str(path), "database": str(tdb.path), "cus": cus, **counts, **written}


def _refuse_other_device(path: Path, tdb: Any) -> None:
    """Refuse a user find-db named for another device of the arch than the one that measured the
    tuning database (MI60's times in gfx906_60...: MIOpen on an MI50 would serve them)."""
    from ckheur.families.hardware import device_name, file_device

    named = file_device(tdb.arch, path.name)
    if named and tdb.device_cus and named != tdb.device_cus:
        raise FindDbError(f"{path.name}: refused, nothing written: the file is {device_name(tdb.arch, named)}'s user "
                          f"find-db, but tuning database {tdb.path} was measured on {device_name(tdb.arch, tdb.device_cus)}"
                          "; MIOpen serves a user find-db's times on the device its name says: name it for the "
                          "device that measured them")


def _by_time(key: FindDbKey, entries: Sequence[FindDbEntry]) -> str:
    """A line of the key with one entry per solver (a later entry replaces an earlier one), fastest first."""
    by_solver = {e.solver: e for e in entries}
    return FindDbLine(key, tuple(sorted(by_solver.values(), key=lambda e: e.time_ms))).text()


def _flops(problems: Any) -> Any:
    """Each problem's FLOPs (forward terms; every direction does as many)."""
    do, ho, wo = output_sizes(problems)
    return (2.0 * problems["N"] * problems["K"] * do * ho * wo * (problems["C"] // problems["G"])
            * problems["Z"] * problems["Y"] * problems["X"]).to_numpy(dtype=float)


def dataset_rows(fdb: FindDb, direction: str, dtype: str, arch: str, solvers: Sequence[Mapping[str, Any]],
                 source: str, timestamp: str, device_cus: int = 0) -> tuple[Any, dict]:
    """Dataset rows (family ``miopen``) of one direction and data type: every listed solver of the
    pool with its time, and every pool solver a problem does not list as ``censored``. ``device_cus``:
    the CU count of the device the file's name says (as the arch config counts them; 0: unknown).

    Returns the rows and what was left out (listed solvers outside the pool)."""
    import numpy as np
    import pandas as pd

    from ckheur.data.dataset import columns
    from ckheur.parts import SCHEMA_VERSION, UNKNOWN_WORKSPACE
    from ckheur.version import __version__

    sel = np.flatnonzero((fdb.problems["direction"] == direction).to_numpy()
                         & (fdb.problems["dtype"] == dtype).to_numpy())
    probs = fdb.problems.iloc[sel].reset_index(drop=True)
    names = [s["name"] for s in solvers]
    index = {n: i for i, n in enumerate(names)}
    e = fdb.entries[fdb.entries["problem"].isin(sel)]
    outside = e[~e["solver"].isin(names)]
    e = e[e["solver"].isin(names)]
    # The full grid problems x pool solvers; listed ones carry their time.
    P, S = len(probs), len(names)
    local = np.searchsorted(sel, e["problem"].to_numpy())
    t = np.full(P * S, np.nan)
    at = local * S + e["solver"].map(index).to_numpy()
    t[at] = e["time_ms"].to_numpy()
    workspace = np.full(P * S, UNKNOWN_WORKSPACE, dtype=np.int64)  # censored pairs: not measured
    workspace[at] = e["workspace"].to_numpy()
    n = P * S
    per_problem, per_solver = np.repeat(np.arange(P), S), np.tile(np.arange(S), P)
    listed = ~np.isnan(t)
    # String columns as categoricals built from codes: few distinct values, no Python strings per row.
    const = lambda v: pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), [v])  # noqa: E731
    by_solver = lambda vals: pd.Categorical(vals)[per_solver]  # noqa: E731
    cols: dict[str, Any] = {"op": const(f"miopen/{direction}"), "direction": const(direction), "dtype": const(dtype),
                            "arch": const(arch), "backend": const("miopen_fdb")}
    for c in probs.columns:
        if c not in ("direction", "dtype"):
            v = probs[c].to_numpy()
            cols[c] = pd.Categorical(v)[per_problem] if c == "layout" else v[per_problem]
    cols["kernel"] = by_solver(names)
    cols["solver_id"] = np.array([int(s["id"]) for s in solvers], dtype=np.int64)[per_solver]
    for col in ("algorithm", "implementation"):
        cols[col] = by_solver([s[col] for s in solvers])
    cols["workspace"] = np.array([bool(s["workspace"]) for s in solvers], dtype=bool)[per_solver]
    cols["latency_ms"] = t
    cols["latency_spread_ms"] = np.full(n, np.nan)
    flops = _flops(probs)
    cols["tflops"] = np.where(listed, flops[per_problem] / np.where(listed, t, 1.0) * 1e-9, np.nan)
    cols["status"] = pd.Categorical.from_codes((~listed).astype(np.int8), ["ok", "censored"])
    cols["error"] = pd.Categorical.from_codes((~listed).astype(np.int8), ["", CENSORED_REASON])
    cols["workspace_bytes"] = workspace
    cols["warmup"], cols["repeat"] = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)  # not in find-db files
    cols["clock_mhz"] = np.full(n, np.nan)
    cols["timestamp"], cols["host"], cols["ckheur_version"] = const(timestamp), const(f"import:{source}"), const(__version__)
    cols["device_cus"] = np.full(n, int(device_cus), dtype=np.int64)
    cols["schema_version"] = np.full(n, SCHEMA_VERSION, dtype=np.int64)
    df = pd.DataFrame(cols)
    left = {"listed_solvers_outside_pool": outside["solver"].value_counts().to_dict()}
    return df[list(columns(get_family("miopen")))], left  # this file's rows are the miopen family's

