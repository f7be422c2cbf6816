"""Typed CSV tables for importers: one vectorized reader that checks columns the same way for
every source (CK tile_engine CSVs today, any measurement table tomorrow).

What a source must hold is a :class:`TableSpec`: required columns, integer and numeric columns,
defaults for optional ones, and partner groups (columns that only make sense together, such as
``stride_h``/``stride_w``: one present without the other is refused, since the other would
silently take its default). Every error names the file, the column and the line; every default
applied is reported so the importer can print it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ckheur.parts import DatasetError


@dataclass(frozen=True)
class TableSpec:
    """The columns an importer expects of a CSV."""

    what: str  # the kind of file, for messages ("CK tile_engine CSV")
    required: tuple[str, ...]
    integer: tuple[str, ...] = ()  # whole numbers (required or optional)
    numeric: tuple[str, ...] = ()  # real numbers; an empty cell is NaN
    text: tuple[str, ...] = ()  # kept as strings
    defaults: Mapping[str, Any] = field(default_factory=dict)  # optional column -> the value a missing one takes
    partners: tuple[tuple[str, ...], ...] = ()  # columns that come together


@dataclass
class Table:
    """A checked table: the columns of the spec (defaults filled in) and which defaults were applied."""

    frame: Any  # pandas DataFrame, one row per data line, in file order
    defaults_applied: dict[str, Any]

    @staticmethod
    def line(row: int) -> int:
        """The file line of a data row (the header is line 1)."""
        return row + 2


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def _read_arrow(path: Path, spec: TableSpec, data: bytes | None = None):
    import lzma
    import zlib

    import pyarrow as pa
    import pyarrow.csv as pacsv

    from ckheur.files import COMPRESSED_SUFFIXES, decompress, read_compressed

    types = {c: pa.string() for c in spec.text}
    try:
        # A compressed file is decompressed here, under the cap, never by Arrow (which has none).
        if data is not None:  # the bytes already read (and hashed) by the caller
            source = pa.BufferReader(decompress(data, path))
        else:
            source = pa.BufferReader(read_compressed(path)) if path.suffix in COMPRESSED_SUFFIXES else path
        return pacsv.read_csv(source, convert_options=pacsv.ConvertOptions(column_types=types))
    except (pa.ArrowInvalid, OSError, EOFError, UnicodeDecodeError, zlib.error, lzma.LZMAError) as e:
        msg = _first_line(e)
        if "Empty CSV file" in msg:
            raise DatasetError(f"{path}: empty file; a {spec.what} starts with a header line") from None
        raise DatasetError(f"{path}: cannot be read as a {spec.what} ({msg})") from None


def _numbers(path: Path, name: str, col: Any, integer: bool) -> Any:
    """A column as float64 (integer columns: checked whole), or a DatasetError naming the line."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    if pa.types.is_integer(col.type) and not col.null_count:
        return col.to_numpy()
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_null(col.type):
        # Arrow reads 'nan', 'NA' and empty cells of an integer column as nulls: checked below as NaN.
        values = col.to_numpy(zero_copy_only=False).astype(np.float64)
    else:
        raw = col.to_pandas()
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
        bad = np.flatnonzero(np.isnan(values) & raw.notna().to_numpy() & (raw.astype(str).str.strip() != "").to_numpy())
        if len(bad):
            i = int(bad[0])
            raise DatasetError(f"{path} line {Table.line(i)}: column {name}={raw.iloc[i]!r} is not a number"
                               + (f" ({len(bad)} such lines)" if len(bad) > 1 else ""))
    if integer:
        whole = np.isfinite(values) & (values == np.floor(values)) & (np.abs(values) < 2.0**62)
        bad = np.flatnonzero(~whole)
        if len(bad):
            i = int(bad[0])
            v = "empty or NaN" if np.isnan(values[i]) else repr(float(values[i]))
            raise DatasetError(f"{path} line {Table.line(i)}: column {name} is {v}; it must be a whole number "
                               f"below 2^62"
                               + (f" ({len(bad)} such lines)" if len(bad) > 1 else ""))
    return values


def read_csv_table(path: str | Path, spec: TableSpec, data: bytes | None = None) -> Table:
    """Read and check a CSV (plain or compressed by its extension: .gz, .bz2) against a spec;
    ``data``: the file's bytes, already read (then parsed from them, not read again)."""
    import numpy as np
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{spec.what} {path} not found" if not path.exists() else f"{path} is not a file")
    table = _read_arrow(path, spec, data)
    repeated = sorted({c for c in table.column_names if table.column_names.count(c) > 1})
    if repeated:
        raise DatasetError(f"{path}: column(s) {', '.join(repeated)} appear more than once in the header; each "
                           "column must be named once")
    names = set(table.column_names)
    missing = [c for c in spec.required if c not in names]
    if missing:
        raise DatasetError(f"{path}: not a {spec.what}; missing column(s) {', '.join(missing)} "
                           f"(required: {', '.join(spec.required)})")
    for group in spec.partners:
        have = [c for c in group if c in names]
        if have and len(have) < len(group):
            lack = [c for c in group if c not in names]
            raise DatasetError(f"{path}: column(s) {', '.join(have)} without {', '.join(lack)}; these columns come "
                               f"together ({', '.join(group)}): add the missing one(s), or drop them all to take "
                               f"the defaults")
    if table.num_rows == 0:
        raise DatasetError(f"{path}: no data lines below the header")
    cols: dict[str, Any] = {}
    for name in spec.text:
        if name in names:
            cols[name] = table.column(name).to_pandas()
    for name in (*spec.integer, *spec.numeric):
        if name in names and name not in cols:
            values = _numbers(path, name, table.column(name), name in spec.integer)
            cols[name] = values.astype(np.int64) if name in spec.integer else values
    applied = {c: v for c, v in spec.defaults.items() if c not in names}
    n = table.num_rows
    for c, v in applied.items():
        cols[c] = np.full(n, v, dtype=np.int64 if isinstance(v, int) else object)
    return Table(pd.DataFrame(cols), applied)
