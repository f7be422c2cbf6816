"""Folders of Parquet part files: atomic writes, tolerant reads, a schema version.

The storage under datasets, sweeps, imports and tuning databases (``ckheur.data.dataset`` gives the
rows their meaning). Each part is written to a temporary file, synced and renamed into place,
so a killed writer loses at most the part in flight and readers never see half a file.
"""

from __future__ import annotations

import hashlib
import os
import uuid
import warnings
from pathlib import Path
from typing import Any, Sequence

from ckheur.errors import UserError

SCHEMA_VERSION = 3
# Version 1 parts lack ``workspace_bytes`` (the device workspace a run used): read as -1, unknown.
UNKNOWN_WORKSPACE = -1
# Versions 1 and 2 lack ``device_cus`` (the CU count of the device that measured a row): read as 0,
# the arch config's own device (``ckheur.families.hardware.row_devices``). A version-2 reader would
# take a version-3 dataset's MI60 rows for MI50's, so it refuses them.
OWN_DEVICE = 0


class DatasetError(UserError):
    """A dataset or import file is missing, malformed or of another schema version."""


class CorruptPartWarning(UserWarning):
    """A part file of a dataset folder could not be read and was skipped."""


def part_name(tag: str = "") -> str:
    """A new part file name: its UTC time and a random suffix, or ``tag`` (an import's content
    hash: writing the same import again replaces its part instead of adding one)."""
    from datetime import datetime, timezone

    return f"part-{tag}.parquet" if tag else \
        f"part-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}.parquet"


def write_table(folder: str | Path, table: Any, name: str | None = None, commit: bool = True) -> Path:
    """Write an Arrow table as one new part file of ``folder``, atomically (``ckheur.files``: never
    through a link, in a folder only this user can change). ``commit=False`` leaves it under its
    hidden temporary name (returned) for :func:`commit_part` to rename into place later."""
    import pyarrow.parquet as pq

    from ckheur.files import make_folder, open_new

    folder = make_folder(folder, "dataset folder")
    name = name or part_name()
    tmp = folder / f".tmp-{uuid.uuid4().hex[:8]}-{name}"
    try:
        with open_new(tmp, binary=True) as f:
            pq.write_table(table, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return commit_part(tmp) if commit else tmp


def commit_part(tmp: Path) -> Path:
    """Rename a part written with ``commit=False`` to its final name."""
    final = tmp.with_name(tmp.name.split("-", 2)[2])
    os.replace(tmp, final)
    return final


def sha256_of(path: Path, data: bytes | None = None) -> str:
    """sha256 of a file (of its content when gzipped, so a compressed copy hashes as the
    original; ``data``: its bytes, already read), or of a dataset folder's part files in name order."""
    from ckheur.files import decompress, read_compressed

    if data is not None:
        return hashlib.sha256(decompress(data, path) if path.suffix == ".gz" else data).hexdigest()
    h = hashlib.sha256()
    files = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    for f in files:
        h.update(read_compressed(f) if f.suffix == ".gz" else f.read_bytes())
    return h.hexdigest()


def _read_arrow(path: Path, columns: Sequence[str] | None = None) -> Any:
    """One part (or Parquet file) as an Arrow table, refused if of another schema version."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    version = (schema.metadata or {}).get(b"ckheur_schema_version", b"?").decode()
    if version not in ("1", "2", str(SCHEMA_VERSION)):
        raise DatasetError(f"{path}: schema version {version}, this ckheur reads 1 to {SCHEMA_VERSION}")
    cols = None if columns is None else [c for c in columns if c in schema.names]
    table = pq.read_table(path, columns=cols)
    if version == "1" and (columns is None or "workspace_bytes" in columns):
        import pyarrow as pa

        table = table.append_column("workspace_bytes", pa.array([UNKNOWN_WORKSPACE] * table.num_rows, pa.int64()))
    if version in ("1", "2") and (columns is None or "device_cus" in columns) and "device_cus" not in table.column_names:
        import pyarrow as pa

        table = table.append_column("device_cus", pa.array([OWN_DEVICE] * table.num_rows, pa.int64()))
    return table


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> Any:
    """One part (or Parquet file) as a DataFrame, refused if of another schema version; with
    ``columns``, only those, text as categories (small in memory for millions of rows). A file
    that is not Parquet (empty, truncated, another format) is a DatasetError naming it."""
    import pyarrow as pa

    try:
        table = _read_arrow(path, columns)
    except (pa.ArrowInvalid, OSError) as e:
        raise DatasetError(f"{path}: not a readable Parquet dataset ({str(e).splitlines()[0][:200]}); datasets are "
                           "what stage=sweep and stage=import write, or CK CSVs (*.csv, *.csv.gz)") from None
    return table.to_pandas(strings_to_categorical=columns is not None)


def read_parts(folder: Path, skip: set[str] | frozenset = frozenset(),
               columns: Sequence[str] | None = None) -> tuple[Any, list[str]]:
    """Rows of a folder's part files not named in ``skip`` (only ``columns`` if given, text as
    categories), and the names read.

    A part that cannot be read (corrupt, truncated by a dying disk) is skipped with a
    :class:`CorruptPartWarning`, never fatal: parts are written atomically, so this is damage,
    and the other parts are still good."""
    import pandas as pd
    import pyarrow as pa

    tables, names = [], []
    for p in sorted(Path(folder).glob("part-*.parquet")):
        if p.name in skip:
            continue
        try:
            tables.append(_read_arrow(p, columns))
        except DatasetError:
            raise
        except Exception as e:  # noqa: BLE001 - any unreadable part is skipped, whatever pyarrow says
            warnings.warn(f"skipping unreadable dataset part {p}: {str(e).splitlines()[0][:200]}",
                          CorruptPartWarning, stacklevel=2)
            continue
        names.append(p.name)
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pd.DataFrame(columns=["op"]), names
    if columns is None:  # each part converted alone: parts of older ckheur versions may differ in columns
        return pd.concat([t.to_pandas() for t in tables], ignore_index=True), names
    table = pa.concat_tables(tables, promote_options="default")
    del tables
    # Column by column, freeing Arrow's copy as it goes: millions of rows need their size once, not twice.
    df = table.to_pandas(strings_to_categorical=True, self_destruct=True, split_blocks=True)
    del table
    pa.default_memory_pool().release_unused()
    return df, names
