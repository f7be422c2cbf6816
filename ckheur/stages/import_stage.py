"""stage=import: bring a CK tile_engine CSV or a MIOpen find-db into datasets (same schema as a sweep's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain


def run(cfg: Any, ctx: Context) -> dict:
    """Import import.path for arch into {paths.data}/{op}_{dtype}_{arch}/{dataset}.parquet."""
    from ckheur.dataset import DatasetError, dataset_dir, read_ck_csv, read_dataset, write_part

    op, arch = plain(cfg.op), plain(cfg.arch)
    opts = cfg["import"]
    if not opts.path:
        raise StageError("stage=import needs import.path=<CK tile_engine CSV or MIOpen find-db file>")
    src = Path(opts.path)
    from ckheur.stages.import_fdb import is_find_db, run_find_db

    if is_find_db(src):
        return run_find_db(cfg, src)
    try:
        df = read_ck_csv(src, arch=arch["name"], tiles=op["tiles"])
    except DatasetError as e:
        raise StageError(str(e)) from None
    out = {}
    for direction, part in df.groupby("direction"):
        dtype = part.dtype.iloc[0]
        target = dataset_dir(cfg.paths.data, {**op, "direction": direction, "dtype": dtype}, arch["name"],
                             opts.dataset or src.stem)
        if target.exists():
            have = read_dataset(target, dedupe=False)
            if len(have) and set(have.host) == {f"import:{src.name}"} and len(have) >= len(part):
                print(f"import: {target} already holds this file's {len(part)} rows; nothing to do")
                out[direction] = str(target)
                continue
        write_part(target, part)
        counts = part.status.value_counts().to_dict()
        print(f"import: {len(part)} rows ({counts}) from {src} -> {target}")
        out[direction] = str(target)
    return out
