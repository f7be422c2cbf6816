"""stage=import: a CK tile_engine CSV or a MIOpen find-db into datasets (``ckheur.data.importing``), or a
dataset folder into a database tuning database (``ckheur.data.tuning_db.import_dataset``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain

OUTPUTS = ()  # datasets go to paths.data, a tuning database where named


def run(cfg: Any, ctx: Context) -> dict:
    """Import import.path into {paths.data}/{family}_{direction}_{dtype}_{arch}/{dataset}.parquet (a dataset
    folder: into the tuning database)."""
    from ckheur.data.importing import import_file

    opts = cfg["import"]
    if not opts.path:
        raise StageError("stage=import needs import.path=<CK tile_engine CSV, MIOpen find-db file or dataset folder>")
    if Path(opts.path).is_dir():
        return _dataset(cfg)
    return import_file(opts.path, data_root=cfg.paths.data, op=plain(cfg.op), arch=plain(cfg.arch),
                       dataset=opts.dataset, find_db_arch=opts.arch, overwrite=bool(opts.overwrite))


def _dataset(cfg: Any) -> dict:
    """The dataset folder import.path, row for row, into import.tuning_db (default db.url)."""
    from ckheur.data.database import campaign_of, check_url, mask_url
    from ckheur.data.tuning_db import import_dataset

    opts = cfg["import"]
    if not any(Path(opts.path).glob("part-*.parquet")) and not (Path(opts.path) / "tuning_db.json").exists():
        raise StageError(f"import.path={opts.path}: a folder, but not a dataset (no part-*.parquet files, no "
                         "tuning_db.json)")
    url = check_url(str(opts.tuning_db), "import.tuning_db") if opts.tuning_db else check_url(str(cfg.db.url))
    got = import_dataset(url, opts.path, campaign=campaign_of(url))
    print(f"import: {got['rows']} measurements of {opts.path} into {mask_url(url)}: "
          + (", ".join(f"campaign {name} {n} rows" for name, n in got["campaigns"].items()) or "nothing to load"))
    return got
