"""Folders of Parquet part files: atomic writes, tolerant reads, a schema version.

The storage under datasets, sweeps, imports and tuning databases (``ckheur.dataset`` gives the
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

SCHEMA_VERSION = 1


class DatasetError(UserError):
    """A dataset or import file is missing, malformed or of another schema version."""


class CorruptPartWarning(UserWarning):
    """A part file of a dataset folder could not be read and was skipped."""


def write_table(folder: str | Path, table: Any) -> Path:
    """Write an Arrow table as one new part file of ``folder``, atomically."""
    from datetime import datetime, timezone

    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"part-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = folder / f".tmp-{name}"
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, folder / name)
    return folder / name


def write_text_atomic(path: Path, text: str) -> None:
    """Replace a small file (a JSON record) atomically: a kill leaves the old or the new file, and
    concurrent writers each write a whole one."""
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex[:8]}-{path.name}")
    tmp.write_text(text)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def sha256_of(path: Path) -> str:
    """sha256 of a file (of its content when gzipped, so a compressed copy hashes as the
    original), or of a dataset folder's part files in name order."""
    import gzip

    h = hashlib.sha256()
    files = sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]
    for f in files:
        h.update(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes())
    return h.hexdigest()


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> Any:
    """One part (or Parquet file) as a DataFrame, refused if of another schema version."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    version = (schema.metadata or {}).get(b"ckheur_schema_version", b"?").decode()
    if version != str(SCHEMA_VERSION):
        raise DatasetError(f"{path}: schema version {version}, this ckheur reads {SCHEMA_VERSION}")
    cols = None if columns is None else [c for c in columns if c in schema.names]
    return pq.read_table(path, columns=cols).to_pandas()


def read_parts(folder: Path, skip: set[str] | frozenset = frozenset(),
               columns: Sequence[str] | None = None) -> tuple[Any, list[str]]:
    """Rows of a folder's part files not named in ``skip`` (only ``columns`` if given), and the
    names read.

    A part that cannot be read (corrupt, truncated by a dying disk) is skipped with a
    :class:`CorruptPartWarning`, never fatal: parts are written atomically, so this is damage,
    and the other parts are still good."""
    import pandas as pd

    frames, names = [], []
    for p in sorted(Path(folder).glob("part-*.parquet")):
        if p.name in skip:
            continue
        try:
            frames.append(read_parquet(p, columns))
        except DatasetError:
            raise
        except Exception as e:  # noqa: BLE001 - any unreadable part is skipped, whatever pyarrow says
            warnings.warn(f"skipping unreadable dataset part {p}: {str(e).splitlines()[0][:200]}",
                          CorruptPartWarning, stacklevel=2)
            continue
        names.append(p.name)
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["op"])), names
