"""Measurement datasets: one row per (problem, kernel) attempt, stored as Parquet part files.

A dataset is a folder ``{data}/{family}_{direction}_{dtype}_{arch}/{problems}.parquet/``
holding ``part-*.parquet`` files. Each batch of a sweep is written to a temporary file and
renamed into place, so a killed sweep loses at most the batch in flight, and readers never
see half a file. Shard jobs write parts into the same folder; reading merges them and keeps
the newest row per (arch, direction, dtype, problem, kernel). Failed attempts are rows too.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ckheur import __version__
from ckheur.config import load_option
from ckheur.errors import UserError
from ckheur.ops import get_family
from ckheur.problems.conv import CONV_FIELDS

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "timeout", "unsupported", "wrong_result", "missing")
MEASURE_COLUMNS = ("latency_ms", "latency_spread_ms", "tflops", "status", "error")
PROVENANCE_COLUMNS = ("warmup", "repeat", "clock_mhz", "timestamp", "host", "ckheur_version", "schema_version")
_STRINGS = {"layout", "pipeline", "scheduler", "epilogue", "kernel"}
_BOOLS = {"dsb", "si", "pad_m", "pad_n", "pad_k", "persistent"}


def columns(family: str = "grouped_conv") -> tuple[str, ...]:
    """Dataset columns of an operator family: op, problem fields, kernel and traits, results."""
    fam = get_family(family)
    return ("op", "direction", "dtype", "arch", "backend", *fam.problems.FIELDS, "kernel", *fam.kernels.COLUMNS,
            *MEASURE_COLUMNS, *PROVENANCE_COLUMNS)


def identity(family: str = "grouped_conv") -> tuple[str, ...]:
    """Columns identifying one (problem, kernel) pair."""
    return ("arch", "direction", "dtype", *get_family(family).problems.FIELDS, "kernel")


COLUMNS = columns("grouped_conv")


class DatasetError(UserError):
    """A dataset or import file is missing, malformed or of another schema version."""


def arrow_schema(family: str = "grouped_conv"):
    """The versioned Arrow schema of a family's dataset."""
    import pyarrow as pa

    fam = get_family(family)
    ints = {*fam.problems.FIELDS, *fam.kernels.COLUMNS, "warmup", "repeat", "schema_version"} - _STRINGS - _BOOLS
    types = {c: pa.int64() for c in ints}
    types.update({c: pa.float64() for c in ("latency_ms", "latency_spread_ms", "tflops", "clock_mhz")})
    types.update({c: pa.bool_() for c in _BOOLS})
    fields = [pa.field(c, types.get(c, pa.string())) for c in columns(family)]
    return pa.schema(fields, metadata={"ckheur_schema_version": str(SCHEMA_VERSION), "ckheur_family": family})


def _family_of(df: Any) -> str:
    families = sorted({str(op).split("/")[0] for op in df["op"].unique()}) if len(df) else ["grouped_conv"]
    if len(families) != 1:
        raise DatasetError(f"rows of several operator families ({', '.join(families)}) in one dataset")
    from ckheur.ops import FAMILIES

    if families[0] not in FAMILIES:
        raise DatasetError(f"op {families[0]!r} in rows: the op column must start with one of {', '.join(FAMILIES)}")
    return families[0]


def dataset_dir(data_root: str | Path, op: Mapping[str, Any], arch: str, problems: str) -> Path:
    """Default location of a sweep's dataset."""
    return Path(data_root) / f"{op['family']}_{op['direction']}_{op['dtype']}_{arch}" / f"{problems}.parquet"


def write_part(folder: str | Path, rows: Sequence[Mapping[str, Any]] | Any) -> Path:
    """Write rows (dicts or a DataFrame) as one new part file, atomically."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if "op" not in df.columns:
        raise DatasetError("rows lack dataset columns: op")
    family = _family_of(df)
    cols = columns(family)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DatasetError(f"rows lack dataset columns: {', '.join(missing)}")
    bad = sorted(set(df["status"]) - set(STATUSES))
    if bad:
        raise DatasetError(f"status {bad}: allowed values are {', '.join(STATUSES)}")
    table = pa.Table.from_pandas(df[list(cols)], schema=arrow_schema(family), preserve_index=False)
    name = f"part-{pd.Timestamp.now('UTC').strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".tmp-{name}"
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    return folder / name


def _read_one(path: Path):
    import pandas as pd
    import pyarrow.parquet as pq

    if path.is_dir():
        parts = sorted(path.glob("part-*.parquet"))
        if not parts:
            return pd.DataFrame(columns=["op"])
        return pd.concat([_read_one(p) for p in parts], ignore_index=True)
    if path.suffix == ".csv":
        return read_ck_csv(path)
    table = pq.read_table(path)
    version = (table.schema.metadata or {}).get(b"ckheur_schema_version", b"?").decode()
    if version != str(SCHEMA_VERSION):
        raise DatasetError(f"{path}: schema version {version}, this ckheur reads {SCHEMA_VERSION}")
    return table.to_pandas()


def read_dataset(paths: str | Path | Iterable[str | Path], dedupe: bool = True):
    """Read datasets (part folders, Parquet files or CK CSVs) into one DataFrame.

    With ``dedupe`` the newest row per (arch, direction, dtype, problem, kernel) is kept.
    """
    import pandas as pd

    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    frames = []
    for p in map(Path, paths):
        if not p.exists():
            raise DatasetError(f"dataset {p} not found")
        frames.append(_read_one(p))
    frames = [f for f in frames if len(f)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(COLUMNS))
    if dedupe and len(df):
        df = df.sort_values("timestamp", kind="stable").drop_duplicates(list(identity(_family_of(df))), keep="last")
        df = df.reset_index(drop=True)
    return df


# ------------------------------------------------------------------ CK tile_engine CSV import

def read_ck_csv(path: str | Path, arch: str = "gfx950", tiles: Sequence[Mapping] | None = None):
    """Import a CK tile_engine grouped-conv CSV (older 17-column or current form) into our schema.

    Direction, dtype and ndim come from each kernel name. Rows whose ``non_zero`` count differs
    from the elements the direction writes get status ``wrong_result`` (never silently used).
    ``tiles`` (the op's tile table) fills wave layouts and warp tiles; default: shipped fwd op.
    """
    import pandas as pd

    from ckheur.kernels import KernelError, parse_name
    from ckheur.problems import ProblemError, problem_from_dict

    path = Path(path)
    if not path.exists():
        raise DatasetError(f"CK CSV {path} not found")
    raw = pd.read_csv(path)
    need = {"kernel", "N", "C", "K", "Hi", "Wi", "Y", "X", "latency_ms"}
    if not need <= set(raw.columns):
        raise DatasetError(f"{path}: not a CK tile_engine CSV; missing columns {sorted(need - set(raw.columns))}")
    if tiles is None:
        tiles = load_option("op/grouped_conv/fwd")["tiles"]
    stat = path.stat()
    rows = []
    for i, r in enumerate(raw.to_dict("records"), start=2):
        try:
            p = problem_from_dict({c: r[c] for c in CONV_FIELDS if c in r and pd.notna(r[c])})
            k = parse_name(str(r["kernel"]), tiles)
        except (ProblemError, KernelError) as e:
            raise DatasetError(f"{path} line {i}: {e}") from None
        lat = float(r["latency_ms"])
        status, error = "ok", ""
        if "non_zero" in r and pd.notna(r["non_zero"]) and int(r["non_zero"]) != p.output_elems(k.direction):
            status, error = "wrong_result", f"non_zero={int(r['non_zero'])} != {p.output_elems(k.direction)} output elements"
        if not lat > 0:
            status, error = "failed", f"latency_ms={lat}"
        rows.append({
            "op": f"grouped_conv/{k.direction}", "direction": k.direction, "dtype": k.dtype, "arch": arch,
            "backend": "ck_csv", **p.to_dict(), **kernel_columns(k),
            "latency_ms": lat, "latency_spread_ms": float("nan"),
            "tflops": p.flops / (lat * 1e-3) / 1e12 if lat > 0 else float("nan"),
            "status": status, "error": error,
            "warmup": 3, "repeat": 10, "clock_mhz": float("nan"),  # CK tile_engine defaults (data README)
            "timestamp": pd.Timestamp(stat.st_mtime, unit="s", tz="UTC").isoformat(timespec="microseconds"),
            "host": f"import:{path.name}", "ckheur_version": __version__, "schema_version": SCHEMA_VERSION,
        })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def kernel_columns(k: Any, family: str = "grouped_conv") -> dict[str, Any]:
    """The dataset's kernel columns for a kernel."""
    traits = k.traits()
    return {"kernel": k.name, **{c: traits[c] for c in get_family(family).kernels.COLUMNS}}


