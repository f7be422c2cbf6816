"""stage=import: a CK tile_engine CSV or a MIOpen find-db into datasets (``ckheur.data.importing``)."""

from __future__ import annotations

from typing import Any

from ckheur.stages import Context, StageError, plain


def run(cfg: Any, ctx: Context) -> dict:
    """Import import.path into {paths.data}/{family}_{direction}_{dtype}_{arch}/{dataset}.parquet."""
    from ckheur.data.importing import import_file

    opts = cfg["import"]
    if not opts.path:
        raise StageError("stage=import needs import.path=<CK tile_engine CSV or MIOpen find-db file>")
    return import_file(opts.path, data_root=cfg.paths.data, op=plain(cfg.op), arch=plain(cfg.arch),
                       dataset=opts.dataset, find_db_arch=opts.arch, overwrite=bool(opts.overwrite))
