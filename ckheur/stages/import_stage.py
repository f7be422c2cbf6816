"""stage=import: bring a CK tile_engine CSV or a MIOpen find-db into datasets (same schema as a sweep's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain


def run(cfg: Any, ctx: Context) -> dict:
    """Import import.path for arch into {paths.data}/{op}_{dtype}_{arch}/{dataset}.parquet."""
    from ckheur.dataset import DatasetError, dataset_dir, import_ck_csv, write_part

    op, arch = plain(cfg.op), plain(cfg.arch)
    opts = cfg["import"]
    if not opts.path:
        raise StageError("stage=import needs import.path=<CK tile_engine CSV or MIOpen find-db file>")
    src = Path(opts.path)
    from ckheur.stages.import_fdb import is_find_db, run_find_db

    if is_find_db(src):
        return run_find_db(cfg, src)
    from ckheur.parts import sha256_of
    from ckheur.stages.import_record import note_import, prepare_target

    try:
        sha = sha256_of(src) if src.is_file() else ""
        df, defaults = import_ck_csv(src, arch=arch["name"], tiles=op["tiles"])
    except (DatasetError, OSError, EOFError) as e:
        raise StageError(str(e) if isinstance(e, DatasetError) else f"{src}: cannot be read ({e})") from None
    for column, value in defaults.items():
        print(f"import: {src.name} has no column {column}: every row takes {column}={value}")
    out = {}
    for direction, part in df.groupby("direction"):
        dtype = part.dtype.iloc[0]
        target = dataset_dir(cfg.paths.data, {**op, "direction": direction, "dtype": dtype}, arch["name"],
                             opts.dataset or src.stem)
        record = prepare_target(target, sha, src.name, bool(opts.overwrite))
        if record is None:
            print(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
            out[direction] = str(target)
            continue
        write_part(target, part)
        note_import(target, record, sha, src.name, len(part))
        counts = part.status.value_counts().to_dict()
        print(f"import: {len(part)} rows ({counts}) from {src} -> {target}")
        out[direction] = str(target)
    return out
