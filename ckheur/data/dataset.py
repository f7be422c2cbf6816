"""Measurement datasets: one row per (problem, kernel) attempt, stored as Parquet part files
(``ckheur.parts``).

A dataset is a folder ``{data}/{family}_{direction}_{dtype}_{arch}/{problems}.parquet/``
holding ``part-*.parquet`` files. Each batch of a sweep is written to a temporary file and
renamed into place, so a killed sweep loses at most the batch in flight, and readers never
see half a file. Shard jobs write parts into the same folder; reading merges them and keeps
the newest row per (device, arch, direction, dtype, problem, kernel). Failed attempts are rows too.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ckheur.config import load_option
from ckheur.families import Family, get_family
from ckheur.parts import SCHEMA_VERSION, DatasetError, read_parquet, read_parts, write_table
from ckheur.families.grouped_conv.problems import DIRECTIONS
from ckheur.version import __version__

STATUSES = ("ok", "failed", "timeout", "unsupported", "wrong_result", "missing", "suspect", "censored")
# A censored pair was not timed by itself but is known to lose: a find-db lists only the fastest
# solvers of a problem, so an unlisted one is slower than the slowest listed (or does not apply).
# Training ranks it below every measured pair of its problem; it is never a measurement.
CENSORED = "censored"
# A suspect run has a valid timing but a sanity count unlike the other kernels of its problem:
# kept and reported; it counts as a measurement unless the user excludes suspects.
USABLE = ("ok", "suspect")
SIMULATED = "sim"  # the backend label of simulated rows: never a measurement, labeled so wherever they go
# workspace_bytes: the device workspace the run used, -1 where the backend does not say (MIOpen's
# find-db records it per solver and problem, and allocates by it).
MEASURE_COLUMNS = ("latency_ms", "latency_spread_ms", "tflops", "status", "error", "workspace_bytes")
# device_cus: the CU count of the device that measured the row (arch=gfx906 arch.num_cus=64 is MI60,
# gfx906's other device); 0 where the writer did not know it (datasets of schema version 2 and
# before, CK's CSVs): the arch config's own device, or the one an import's file name says
# (``ckheur.families.hardware.row_devices``). Rows of two devices of one arch are told apart by it.
PROVENANCE_COLUMNS = ("warmup", "repeat", "clock_mhz", "timestamp", "host", "device_cus", "ckheur_version",
                      "schema_version")
_STRINGS = {"layout", "pipeline", "scheduler", "epilogue", "kernel", "algorithm", "implementation"}
_BOOLS = {"dsb", "si", "pad_m", "pad_n", "pad_k", "persistent", "workspace"}


def columns(family: Family) -> tuple[str, ...]:
    """Dataset columns of an operator family: op, problem fields, kernel and traits, results."""
    return ("op", "direction", "dtype", "arch", "backend", *family.problems.FIELDS, "kernel", *family.kernels.COLUMNS,
            *MEASURE_COLUMNS, *PROVENANCE_COLUMNS)


def identity(family: Family) -> tuple[str, ...]:
    """Columns identifying one (problem, kernel) pair."""
    return ("arch", "direction", "dtype", *family.problems.FIELDS, "kernel")


COLUMNS = columns(get_family("grouped_conv"))  # CK grouped convolution's (its CSVs, the shipped measurements)
DIRECTION_INDEX = {d: i for i, d in enumerate(DIRECTIONS)}


def ran_ok(status: str, latency_ms: float) -> bool:
    """Whether one attempt is a measurement: a usable status and a positive latency."""
    return status in USABLE and latency_ms > 0


# The columns usable reads: a read of a subset of a dataset's columns that keeps these is held to
# the same rule as a whole read (without algorithm, Winograd and FFT lose their allowance; without
# latency_ms, the time rule is skipped).
USABLE_COLUMNS = ("arch", "dtype", "status", "tflops", "algorithm", "latency_ms")


def usable(df: Any, exclude_suspect: bool = False) -> Any:
    """Mask of rows that are measurements to learn from, score against, serve and export: a usable
    status, positive TFLOPS not beyond what the arch's peak allows, and a time that passes
    :func:`time_refusals` for the FLOPs of the row's problem (a row whose fields are no valid
    problem never does). The one rule for stored times: applied on every read, so rows an older
    version or another tool recorded as ok are held to it too."""
    import numpy as np

    statuses = ["ok"] if exclude_suspect else list(USABLE)
    tflops = df["tflops"].to_numpy(dtype=float)
    ok = df["status"].isin(statuses).to_numpy() & (tflops > 0) & np.isfinite(tflops)
    if len(df) and {"arch", "dtype"} <= set(df.columns):
        fewer_all = fewer_multiplies(df["algorithm"]) if "algorithm" in df.columns else np.zeros(len(df), bool)
        for (arch, dtype), rows in df.groupby(["arch", "dtype"], observed=True, sort=False).indices.items():
            limit = float(arch_peaks(str(arch)).get(str(dtype), np.inf)) * PEAK_MARGIN
            # the time rule's allowance for Winograd and FFT holds for the TFLOPS recorded too
            ok[rows] &= tflops[rows] <= np.where(fewer_all[rows], limit * FEWER_MULTIPLIES_FACTOR, limit)
            rows = rows[ok[rows]]  # the time rule, on the rows that pass so far
            if "latency_ms" in df.columns and len(rows):
                fewer = fewer_all[rows]
                flops = problem_flops(df, rows)
                why = time_refusals(df["latency_ms"].to_numpy(dtype=float)[rows], np.nan_to_num(flops, nan=0.0),
                                    str(dtype), str(arch), fewer)
                ok[rows] = np.isfinite(flops) & np.array([not w for w in why], dtype=bool)
    return ok


# MIOpen's algorithms that do fewer multiplications than the FLOPs counted (time_refusals' allowance).
FEWER_MULTIPLY_ALGORITHMS = ("winograd", "fft")


def fewer_multiplies(algorithms: Any) -> Any:
    """Mask of the algorithm names (a kernel's ``algorithm``) that get time_refusals' allowance."""
    import numpy as np
    import pandas as pd

    names = pd.Categorical(np.asarray(algorithms, dtype=object))  # a few names over many rows: each once
    hit = np.isin(np.char.lower(np.asarray(names.categories, dtype=str)), FEWER_MULTIPLY_ALGORITHMS)
    return np.append(hit, False)[names.codes]  # code -1, a missing name: no allowance


def problem_flops(df: Any, rows: Any = None) -> Any:
    """Each row's problem FLOPs (``rows``: of those rows only), from its fields and the family its
    ``op`` column names (the family's ``frame_flops``: every direction does as many); NaN where
    they are no problem's."""
    import numpy as np

    from ckheur.errors import UserError

    rows = np.arange(len(df)) if rows is None else np.asarray(rows)
    out = np.full(len(rows), np.nan)
    if "op" not in df.columns or not len(rows):
        return out
    ops = df["op"].to_numpy()[rows]
    for op in set(ops):
        at = np.flatnonzero(ops == op)
        try:
            mod = get_family(str(op).split("/")[0]).problems
            frame = {f: df[f].to_numpy()[rows[at]] for f in mod.FIELDS}
        except (UserError, KeyError):
            continue  # an unknown family or missing fields: no FLOPs, no usable time
        out[at] = mod.frame_flops(frame)
    out[~(out > 0)] = np.nan
    return out


def fastest_by_problem(df: Any, family: Family) -> dict[tuple, str]:
    """Each problem's fastest usable measurement: {problem key (the family's fields): kernel name}."""
    fields = list(family.problems.FIELDS)
    ok = df[usable(df)]
    if ok.empty:
        return {}
    best = ok.loc[ok.groupby(fields, observed=True, sort=False)["tflops"].idxmax()]
    return dict(zip(problem_keys(best[fields]), best["kernel"].astype(str)))


def problem_keys(frame: Any) -> list[tuple]:
    """Each row's problem key as the problem objects' ``key()`` gives it: Python ints and strings,
    not numpy scalars (the columns of ``frame`` are the family's fields, in order)."""
    plain = lambda v: v if isinstance(v, str) else int(v)  # noqa: E731
    return [tuple(plain(v) for v in row) for row in frame.itertuples(index=False, name=None)]


def arrow_schema(family: Family):
    """The versioned Arrow schema of a family's dataset."""
    import pyarrow as pa

    ints = {*family.problems.FIELDS, *family.kernels.COLUMNS, "workspace_bytes", "warmup", "repeat", "device_cus",
            "schema_version"} - _STRINGS - _BOOLS
    types = {c: pa.int64() for c in ints}
    types.update({c: pa.float64() for c in ("latency_ms", "latency_spread_ms", "tflops", "clock_mhz")})
    types.update({c: pa.bool_() for c in _BOOLS})
    fields = [pa.field(c, types.get(c, pa.string())) for c in columns(family)]
    return pa.schema(fields, metadata={"ckheur_schema_version": str(SCHEMA_VERSION), "ckheur_family": family.name})


def _family_of(df: Any) -> Family:
    families = sorted({str(op).split("/")[0] for op in df["op"].unique()}) if len(df) else ["grouped_conv"]
    if len(families) != 1:
        raise DatasetError(f"rows of several operator families ({', '.join(families)}) in one dataset")
    from ckheur.families import FAMILIES

    if families[0] not in FAMILIES:
        raise DatasetError(f"op {families[0]!r} in rows: the op column must start with one of {', '.join(FAMILIES)}")
    return get_family(families[0])  # a dataset records its family by name


def keep_shard(df: Any, shard: Mapping[str, Any], family: Family) -> Any:
    """Rows of the problems in part ``shard.index`` of a seeded ``shard.count``-way split
    (the split ``problems.shard`` makes with the same seed); ``count`` 1 keeps everything."""
    from ckheur.problems.sources import shard_of

    count, index, seed = int(shard.get("count", 1)), int(shard.get("index", 0)), int(shard.get("seed", 0))
    if count <= 1 or not len(df):
        return df
    if not 0 <= index < count:
        raise DatasetError(f"data.shard: need 0 <= index < count, got index={index}, count={count}")
    keys = list(df[list(family.problems.FIELDS)].itertuples(index=False, name=None))
    part = {k: shard_of(k, count, seed) for k in set(keys)}
    return df[[part[k] == index for k in keys]]


def dataset_dir(data_root: str | Path, op: Mapping[str, Any], arch: str, problems: str,
                field: str = "problems.name") -> Path:
    """Where the dataset of a problem set (or import) ``problems`` lives under ``data_root``; every
    name in it is a single path component (``field`` names the option in the error)."""
    from ckheur.files import check_name

    folder = check_name(f"{op['family']}_{op['direction']}_{op['dtype']}_{arch}", "op family, direction, dtype and arch")
    return Path(data_root) / folder / f"{check_name(problems, field)}.parquet"


def write_part(folder: str | Path, rows: Sequence[Mapping[str, Any]] | Any, name: str | None = None,
               commit: bool = True) -> Path:
    """Write rows (dicts or a DataFrame) as one new part file, atomically (``ckheur.parts.write_table``
    explains ``name`` and ``commit``)."""
    import pandas as pd
    import pyarrow as pa

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if "op" not in df.columns:
        raise DatasetError("rows lack dataset columns: op")
    family = _family_of(df)
    cols = columns(family)
    if "device_cus" not in df.columns or df["device_cus"].isna().any():  # rows that do not know their device
        df = df.assign(device_cus=df["device_cus"].fillna(0).astype("int64") if "device_cus" in df.columns else 0)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DatasetError(f"rows lack dataset columns: {', '.join(missing)}")
    bad = sorted(set(map(str, df["status"])) - set(STATUSES))
    if bad:
        raise DatasetError(f"status {bad}: allowed values are {', '.join(STATUSES)}")
    table = pa.Table.from_pandas(df[list(cols)], schema=arrow_schema(family), preserve_index=False)
    return write_table(folder, table, name=name, commit=commit)


def _read_one(path: Path, columns: Sequence[str] | None = None):
    from ckheur.formats import import_only, reader_for

    if path.is_dir():
        return read_parts(path, columns=columns)[0]
    if import_only(path.name):
        raise DatasetError(f"{path}: a file stage=import reads, not a dataset: import it (stage=import "
                           f"import.path={path}), then name the datasets it writes (the import prints them)")
    reader = reader_for(path.name)  # another tool's measurement file (ckheur.formats)
    if reader is not None:
        df = reader(path)
        return df if columns is None else df[[c for c in columns if c in df.columns]]
    return read_parquet(path, columns)


def read_dataset(paths: str | Path | Iterable[str | Path], dedupe: bool = True, columns: Sequence[str] | None = None):
    """Read datasets (part folders, Parquet files, measurement files ``ckheur.formats`` reads, or database
    URLs: every campaign's rows, or ``?campaign=<name>``'s) into one DataFrame.

    With ``dedupe`` the newest row per (device, arch, direction, dtype, problem, kernel) is kept (:func:`newest`).
    ``columns``: only these (and what dedupe needs), text columns as categories: what large
    evaluations read.
    """
    import pandas as pd

    from ckheur.measurements import resolve

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if columns is not None:
        columns = list(dict.fromkeys([*columns, "op", "timestamp", "arch", "direction", "dtype", "kernel", "host",
                                      "device_cus"]))
    frames = []
    for p in paths:
        if _is_url(p):
            frames.append(_read_url(str(p), columns))
            continue
        p = resolve(p)
        if not p.exists():
            raise DatasetError(f"dataset {p} not found")
        frames.append(_read_one(p, columns))
    frames = [f for f in frames if len(f)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    if columns is not None and len(frames) > 1:  # categories of different parts concatenate as text
        for c in df.columns:
            if df[c].dtype == object:
                df[c] = df[c].astype("category")
    if dedupe and len(df):
        df = newest(df)
    return df


def newest(df: Any) -> Any:
    """The newest row of each (device, arch, direction, dtype, problem, kernel): MI50's and MI60's
    rows of one pair (both gfx906, ``hardware.row_devices``) are two measurements, never one."""
    import numpy as np
    import pandas as pd

    from ckheur.families.hardware import row_devices

    key = list(identity(_family_of(df)))
    devices = row_devices(df)
    hashed = (row_hash(df, key) * np.uint64(0x100000001B3)) ^ devices.astype(np.uint64)
    if not pd.Series(hashed).duplicated().any():  # no two rows may share a key: millions are not sorted for nothing
        return df
    if isinstance(df["timestamp"].dtype, pd.CategoricalDtype):  # newest by the text, not by category order
        df["timestamp"] = df["timestamp"].cat.reorder_categories(sorted(df["timestamp"].cat.categories), ordered=True)
    order = df[key + ["timestamp"]].assign(__device=devices).sort_values("timestamp", kind="stable")
    keep = ~order.duplicated([*key, "__device"], keep="last")
    return df.loc[order.index[keep.to_numpy()]].reset_index(drop=True)


def _is_url(p: Any) -> bool:
    from ckheur.data.database import is_url

    return is_url(p)


def _read_url(url: str, columns: Sequence[str] | None = None) -> Any:
    """The rows of a database URL (``ckheur.data.database``): its ``?campaign=`` or every campaign."""
    from ckheur.data.database import DatabaseError, Store, campaign_of, mask_url

    with Store(url) as store:
        name = campaign_of(url)
        ids = {c["name"]: c["id"] for c in store.campaigns()}
        if name is not None and name not in ids:
            raise DatasetError(f"{mask_url(url)}: no campaign {name!r}; it has: {', '.join(ids) or 'none'}")
        try:
            df = store.frame(ids[name] if name is not None else None)
        except DatabaseError as e:
            raise DatasetError(str(e)) from None
    return df if columns is None or not len(df) else df[[c for c in columns if c in df.columns]]


def row_hash(df: Any, cols: Sequence[str]) -> Any:
    """A 64-bit hash per row of ``cols``, computed column by column (no copy of the frame): equal
    rows hash equal; unequal rows almost never do, so callers confirm what a hash match suggests."""
    import numpy as np
    import pandas as pd

    h = np.zeros(len(df), dtype=np.uint64)
    for c in cols:
        h = (h * np.uint64(0x100000001B3)) ^ pd.util.hash_pandas_object(df[c], index=False).to_numpy()
    return h


# ------------------------------------------------------------------ CK tile_engine CSV import

SUSPECT_RATIO = 4.0  # a non_zero count this many times off its problem's median is suspect


def non_zero_status(problem_ids: Sequence[Any], non_zero: Sequence[float],
                    ratio: float = SUSPECT_RATIO) -> tuple[Any, Any]:
    """(status, reason) per row from CK's ``non_zero`` sanity counts (object arrays).

    The count is not a correctness proof: CK's own sweeps often report far fewer non-zero
    elements than the output size for valid runs, every kernel of the problem alike. So only
    ``non_zero == 0`` is ``wrong_result``; a count more than ``ratio`` times away from the
    median of the other kernels of the same problem is ``suspect``; anything else is ``ok``."""
    import numpy as np
    import pandas as pd

    gid = pd.factorize(pd.Series(list(problem_ids)) if not isinstance(problem_ids, np.ndarray) else problem_ids)[0]
    nz = pd.to_numeric(pd.Series(np.asarray(non_zero)), errors="coerce").to_numpy(dtype=float)
    status, reason = np.full(len(nz), "ok", dtype=object), np.full(len(nz), "", dtype=object)
    zero = nz == 0
    status[zero], reason[zero] = "wrong_result", "non_zero=0: the kernel wrote no output"
    # The median of the other positive counts of each row's problem, vectorized: sort the
    # positive counts by (problem, count); removing a row's own count at rank r leaves a sorted
    # list whose element i is at i + (i >= r).
    rows = np.flatnonzero(nz > 0)  # NaN and 0 compare False: only real counts
    order = np.lexsort((nz[rows], gid[rows]))
    rows = rows[order]
    g, v = gid[rows], nz[rows]
    starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    sizes = np.diff(np.r_[starts, len(g)])
    start, others = np.repeat(starts, sizes), np.repeat(sizes, sizes) - 1
    rank = np.arange(len(g)) - start
    judge = np.flatnonzero(others >= 2)
    if len(judge):
        s0, m, r = start[judge], others[judge], rank[judge]

        def remaining(i):
            return v[s0 + i + (i >= r)]

        med = (remaining((m - 1) // 2) + remaining(m // 2)) / 2
        c = v[judge]
        off = (c * ratio < med) | (c > med * ratio)
        hit = rows[judge[off]]
        status[hit] = "suspect"
        reason[hit] = [f"non_zero={int(x)} departs from the median {y:.0f} of the other kernels of this problem"
                       for x, y in zip(c[off], med[off])]
    return status, reason


PEAK_MARGIN = 1.25  # a time implying more than this times the arch's dense peak is impossible: refused
# Winograd and FFT convolutions do fewer multiplications than the direct count the FLOPs are:
# Winograd F(6x6, 3x3) about 5x fewer. MIOpen's own files reach 1.6x the dense peak with them.
FEWER_MULTIPLIES_FACTOR = 4.0


def arch_peaks(arch: str | Mapping[str, Any]) -> dict[str, float]:
    """An arch's dense peak TFLOPS per dtype, from its config or its name (empty when unknown)."""
    if not isinstance(arch, str):
        return dict(arch.get("peak_tflops") or {})
    return dict(_shipped_peaks(arch))


@functools.lru_cache(maxsize=None)
def _shipped_peaks(name: str) -> tuple:
    try:  # by name, any device of the arch (conf/arch devices: MI60 beside MI50): the fastest one's peak
        cfg = load_option(f"arch/{name}")
        peaks = dict(cfg["peak_tflops"])
        for dev in cfg.get("devices") or []:
            for dtype, peak in (dev.get("peak_tflops") or {}).items():
                peaks[dtype] = max(float(peak), float(peaks.get(dtype, 0.0)))
        return tuple(peaks.items())
    except (OSError, KeyError, TypeError, AttributeError):
        return ()


def time_refusals(latency_ms: Any, flops: Any, dtypes: Any, arch: str | Mapping[str, Any],
                  fewer_multiplies: Any = None) -> list[str]:
    """Why each measured time is not a measurement, '' where it is: the rule every import and
    backend applies. Refused: a time that is not a positive finite number of milliseconds, and one
    implying more than PEAK_MARGIN times the arch's dense peak for its dtype (``arch``: its config
    or its name). Rows marked in ``fewer_multiplies`` (Winograd, FFT: fewer multiplications than
    the FLOPs counted) may go FEWER_MULTIPLIES_FACTOR times further. Vectorized over rows;
    ``dtypes`` may be one dtype for all."""
    import numpy as np

    lat = np.atleast_1d(np.asarray(latency_ms, dtype=float))
    flops = np.broadcast_to(np.asarray(flops, dtype=float), lat.shape)
    dtypes = np.broadcast_to(np.asarray(dtypes, dtype=object), lat.shape)
    name = arch if isinstance(arch, str) else arch.get("name", "this arch")
    peaks = arch_peaks(arch)
    not_a_time = ~(np.isfinite(lat) & (lat > 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        tflops = flops / (lat * 1e-3) / 1e12
    names, which = np.unique(dtypes.astype(str), return_inverse=True)
    peak = np.array([float(peaks.get(d, np.inf)) for d in names])[which.reshape(-1)] if len(lat) else np.zeros(0)
    limit = peak * PEAK_MARGIN
    if fewer_multiplies is not None:
        limit = np.where(np.broadcast_to(np.asarray(fewer_multiplies, dtype=bool), lat.shape),
                         limit * FEWER_MULTIPLIES_FACTOR, limit)
    fast = ~not_a_time & (tflops > limit)
    out = [""] * len(lat)
    for i in np.flatnonzero(not_a_time):
        out[i] = f"latency_ms={lat[i]}: a time must be a positive number of milliseconds"
    for i in np.flatnonzero(fast):
        out[i] = (f"latency_ms={lat[i]} implies {tflops[i]:,.0f} TFLOPS, above the {name} peak of {peak[i]:,.0f} "
                  f"for {dtypes[i]}: not a real measurement")
    return out


def refuse_impossible(pairs: Sequence[tuple[Any, Any]], results: Any, dtype: str,
                      arch: str | Mapping[str, Any]) -> int:
    """Mark as failed, in place and with the reason, each attempt of ``results`` (a backend's
    Results, in pair order) whose time breaks :func:`time_refusals`: such a time is never a
    measurement, so the pair is measured again and never served. Returns how many."""
    ran = [i for i, s in enumerate(results.status) if s in USABLE]
    if not ran:
        return 0
    # Winograd and FFT do fewer multiplications than the FLOPs counted: the imports' allowance for them
    fewer = fewer_multiplies([str(getattr(pairs[i][1], "algorithm", "")) for i in ran])
    why = time_refusals([results.latency_ms[i] for i in ran], [pairs[i][0].flops for i in ran], dtype, arch,
                        fewer_multiplies=fewer)
    for i, reason in zip(ran, why):
        if reason:
            results.status[i], results.error[i] = "failed", reason
    return sum(map(bool, why))


def common_columns(family: Family, direction: str, dtype: str, arch: str, backend: str, warmup: int = 0,
                   repeat: int = 1, device_cus: int = 0) -> dict[str, Any]:
    """Columns shared by every row a measuring run writes: op, arch, backend and provenance
    (``device_cus``: the measuring device's CU count, the job's ``arch["num_cus"]``)."""
    import socket

    return {"op": f"{family.name}/{direction}", "direction": direction, "dtype": dtype, "arch": arch, "backend": backend,
            "warmup": warmup, "repeat": repeat, "host": socket.gethostname(), "device_cus": int(device_cus),
            "ckheur_version": __version__, "schema_version": SCHEMA_VERSION}


def measurement_rows(pairs: Sequence[tuple[Any, Any]], results: Any, common: Mapping[str, Any],
                     problem_cols: Mapping[tuple, Mapping[str, Any]], kernel_cols: Mapping[str, Mapping[str, Any]],
                     clock_mhz: float = float("nan")) -> list[dict]:
    """Dataset rows for measured pairs (a backend's Results, in pair order), stamped now in UTC.
    Times that are not measurements (:func:`refuse_impossible`) are recorded as failed.

    UTC ISO 8601 with microseconds, as imports use: "newest row wins" compares these strings."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    refuse_impossible(pairs, results, common["dtype"], common["arch"])
    rows = []
    for i, (p, k) in enumerate(pairs):
        lat = results.latency_ms[i]
        ok = ran_ok(results.status[i], lat)
        rows.append({**common, **problem_cols[p.key()], **kernel_cols[k.name], "latency_ms": lat,
                     "latency_spread_ms": results.latency_spread_ms[i],
                     "tflops": p.flops / (lat * 1e-3) / 1e12 if ok else float("nan"),
                     "status": results.status[i], "error": results.error[i],
                     "workspace_bytes": results.workspace_bytes[i], "timestamp": stamp,
                     "clock_mhz": clock_mhz})
    return rows


def kernel_columns(k: Any, family: Family) -> dict[str, Any]:
    """The dataset's kernel columns for a kernel."""
    traits = k.traits()
    return {"kernel": k.name, **{c: traits[c] for c in family.kernels.COLUMNS}}


