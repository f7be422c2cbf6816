"""CK's tile_engine grouped-convolution CSV: read as dataset rows, and imported into datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ckheur.config import load_option
from ckheur.families import get_family
from ckheur.data.dataset import (COLUMNS, DIRECTION_INDEX, DatasetError, kernel_columns, non_zero_status,
                                 time_refusals)
from ckheur.families.grouped_conv.problems import CONV_FIELDS
from ckheur.parts import SCHEMA_VERSION, UNKNOWN_WORKSPACE
from ckheur.version import __version__


def ck_csv_spec() -> Any:
    """What a CK tile_engine grouped-conv CSV holds (older 17-column or current form)."""
    from ckheur.csv_table import TableSpec
    from ckheur.families.grouped_conv.problems import DEFAULTS, PARTNERS

    required = ("kernel", "N", "C", "K", "Hi", "Wi", "Y", "X", "latency_ms")
    return TableSpec("CK tile_engine CSV", required, integer=CONV_FIELDS, numeric=("latency_ms", "non_zero"),
                     text=("kernel",), defaults={f: DEFAULTS[f] for f in CONV_FIELDS if f not in required},
                     partners=PARTNERS)


REPEAT_MAX_RATIO = 2.0  # repeats of one pair further apart than this are refused as conflicting


def import_ck_csv(path: str | Path, arch: str = "gfx950", tiles: Sequence[Mapping] | None = None,
                  data: bytes | None = None):
    """A CK tile_engine grouped-conv CSV (plain or gzipped) as dataset rows, and what the reader
    did beyond copying: ``(DataFrame, {"defaults": {column: value}, "repeats": [...]})``.

    Direction, dtype and ndim come from each kernel name. ``non_zero`` is judged by
    :func:`non_zero_status` (0: ``wrong_result``; far from the problem's other kernels:
    ``suspect``). Refused with the file line: a latency that is not a positive finite number, one
    implying more than the arch's dense peak, and repeats of one (problem, kernel) pair more than
    2x apart. Repeats that agree (CK's sweeps measure a shape listed twice twice, within about
    12%) become one row: their median latency, their range as ``latency_spread_ms``; the report
    lists them. ``tiles`` (the op's tile table) fills wave layouts and warp tiles; default:
    shipped fwd op; ``data``: the file's bytes, already read. Vectorized: each distinct problem and
    kernel name is checked once."""
    import numpy as np
    import pandas as pd

    from ckheur.csv_table import Table, read_csv_table
    from ckheur.kernels import KernelError, parse_name
    from ckheur.problems import ProblemError, problem_from_dict
    from ckheur.problems.sources import distinct_problems

    path = Path(path)
    table = read_csv_table(path, ck_csv_spec(), data)
    raw = table.frame
    if tiles is None:
        tiles = load_option("op/grouped_conv/fwd")["tiles"]
    try:
        pid, problems = distinct_problems(raw, CONV_FIELDS, problem_from_dict, path)
    except ProblemError as e:
        raise DatasetError(str(e)) from None
    kid, names = pd.factorize(raw["kernel"].fillna(""))
    kfirst = np.unique(kid, return_index=True)[1]
    kernels = []
    for i, name in zip(kfirst, names):
        try:
            kernels.append(parse_name(str(name), {"tiles": tiles}))
        except KernelError as e:
            raise DatasetError(f"{path} line {Table.line(int(i))}: {e}") from None
    p_ndim = np.array([p.ndim for p in problems])[pid]
    k_ndim = np.array([k.ndim for k in kernels])[kid]
    wrong = np.flatnonzero(p_ndim != k_ndim)
    if len(wrong):
        i = int(wrong[0])
        raise DatasetError(f"{path} line {Table.line(i)}: kernel {names[kid[i]]} is {k_ndim[i]}D but the problem "
                           f"{problems[pid[i]].describe()} is {p_ndim[i]}D")
    lat = raw["latency_ms"].to_numpy(dtype=float)
    flops = np.array([float(p.flops) for p in problems])[pid]
    dtypes = np.array([k.dtype for k in kernels], dtype=object)[kid]
    refused = time_refusals(lat, flops, dtypes, arch)
    bad = [i for i, why in enumerate(refused) if why]
    if bad:
        raise DatasetError(f"{path} line {Table.line(bad[0])}: {refused[bad[0]]}"
                           + (f" ({len(bad)} such lines)" if len(bad) > 1 else ""))
    # Repeats of a pair: combined when they agree, refused when they conflict.
    pair = pid.astype(np.int64) * len(kernels) + kid
    keep, spread, repeats = _combine_repeats(path, pair, lat)
    conv = get_family("grouped_conv")  # CK's CSVs hold grouped convolutions
    kcols = pd.DataFrame([kernel_columns(k, conv) for k in kernels]).take(kid[keep]).reset_index(drop=True)
    directions = np.array([k.direction for k in kernels], dtype=object)[kid]
    n = len(keep)
    stamp = pd.Timestamp(path.stat().st_mtime, unit="s", tz="UTC").isoformat(timespec="microseconds")
    df = pd.DataFrame({
        "op": np.array([f"grouped_conv/{k.direction}" for k in kernels], dtype=object)[kid[keep]],
        "direction": directions[keep], "dtype": dtypes[keep],
        "arch": arch, "backend": "ck_csv", **{f: raw[f].to_numpy()[keep] for f in CONV_FIELDS}, **kcols,
        "latency_ms": lat[keep], "latency_spread_ms": spread, "tflops": flops[keep] / (lat[keep] * 1e-3) / 1e12,
        "status": "ok", "error": "", "workspace_bytes": UNKNOWN_WORKSPACE,
        "warmup": 3, "repeat": 10, "clock_mhz": np.nan,  # CK tile_engine defaults (data README)
        "timestamp": stamp, "host": f"import:{path.name}", "device_cus": 0,  # a CK CSV does not say: the arch's own
        "ckheur_version": __version__,
        "schema_version": SCHEMA_VERSION,
    }, index=pd.RangeIndex(n))[list(COLUMNS)]
    if "non_zero" in raw.columns:
        df["status"], df["error"] = non_zero_status(pid[keep] * len(DIRECTION_INDEX) + pd.Series(
            directions[keep]).map(DIRECTION_INDEX).to_numpy(), raw["non_zero"].to_numpy()[keep])
    return df, {"defaults": table.defaults_applied, "repeats": repeats}


def _combine_repeats(path: Path, pair: Any, lat: Any) -> tuple[Any, Any, list[list[int]]]:
    """Rows to keep (the first of each pair), each kept row's latency replaced by the median of its
    pair's repeats (in ``lat``, in place), their range (NaN without repeats), and the file lines of
    each repeated pair. Repeats more than REPEAT_MAX_RATIO apart are a DatasetError naming them."""
    import numpy as np

    from ckheur.csv_table import Table

    order = np.argsort(pair, kind="stable")
    first = np.r_[True, pair[order][1:] != pair[order][:-1]]
    starts = np.flatnonzero(first)
    sizes = np.diff(np.r_[starts, len(order)])
    keep_sorted = order[starts]
    spread = np.full(len(starts), np.nan)
    repeats = []
    for j in np.flatnonzero(sizes > 1):
        rows = order[starts[j]:starts[j] + sizes[j]]
        vals = lat[rows]
        lines = [Table.line(int(r)) for r in rows]
        if vals.max() > REPEAT_MAX_RATIO * vals.min():
            raise DatasetError(f"{path} lines {', '.join(map(str, lines))}: the same problem and kernel measured "
                               f"{', '.join(f'{v:.4g}' for v in vals)} ms, more than {REPEAT_MAX_RATIO:g}x apart: "
                               "conflicting repeats; remove the wrong ones")
        lat[rows[0]] = float(np.median(vals))
        spread[j] = float(vals.max() - vals.min())
        repeats.append(lines)
    by_line = np.argsort(keep_sorted)
    return keep_sorted[by_line], spread[by_line], repeats


def read_ck_csv(path: str | Path, arch: str = "gfx950", tiles: Sequence[Mapping] | None = None):
    """A CK tile_engine grouped-conv CSV as dataset rows (:func:`import_ck_csv` without its report)."""
    return import_ck_csv(path, arch, tiles)[0]


def import_csv_file(src: Path, *, data_root: str | Path, op: Mapping[str, Any], arch: Mapping[str, Any],
                    dataset: str | None, overwrite: bool, log: Callable[[str], None], **_: Any) -> dict:
    """One CK CSV into a dataset per direction and dtype it holds, as one transaction."""
    from ckheur.data.dataset import dataset_dir
    from ckheur.data.importing import ImportRefused, ImportTransaction, begin_import, import_report, plan_import
    from ckheur.files import read_regular

    if op.get("family") != "grouped_conv":  # the CSV's rows are grouped convolutions, read with the op's tiles
        from ckheur.formats import import_only_endings

        named = ", ".join(f"*{e}" for e in import_only_endings())
        raise ImportRefused(f"import.path={src}: not a MIOpen find-db by its name ({named}, plain, .bz2 or .gz), so "
                            f"read as a CK tile_engine CSV of grouped convolutions, which imports with a grouped_conv "
                            f"op (op=fwd, bwd_data or bwd_weight), not a {op.get('family')} op")
    try:
        data = read_regular(src)  # read once: the import's sha256 and its rows come from these bytes
        name, sha, done = begin_import(src, data_root, dataset, log, data)
        if done is not None:
            return done
        df, report = import_ck_csv(src, arch=arch["name"], tiles=op["tiles"], data=data)
    except (DatasetError, OSError, EOFError) as e:
        raise ImportRefused(str(e) if isinstance(e, DatasetError) else f"{src}: cannot be read ({e})") from None
    for column, value in report["defaults"].items():
        log(f"import: {src.name} has no column {column}: every row takes {column}={value}")
    if report["repeats"]:
        lines = "; ".join("lines " + ", ".join(map(str, r)) for r in report["repeats"][:3])
        log(f"import: {len(report['repeats'])} (problem, kernel) pairs are measured more than once ({lines}"
            f"{' ...' if len(report['repeats']) > 3 else ''}): each is one row with the median of its repeats, "
            "their range in latency_spread_ms")
    targets = {}
    for (direction, dtype), part in df.groupby(["direction", "dtype"]):
        targets[dataset_dir(data_root, {**op, "direction": direction, "dtype": dtype}, arch["name"], name,
                            field="import.dataset")] = part
    plan = plan_import(data_root, name, sha, src.name, list(targets), overwrite)
    with ImportTransaction(plan) as txn:
        for target in plan.targets:
            txn.add(target, targets[target])
    return import_report(txn, log)
