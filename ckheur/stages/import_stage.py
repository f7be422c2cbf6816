"""stage=import: bring a CK tile_engine CSV or a MIOpen find-db into datasets (same schema as a
sweep's), as one transaction (``ckheur.stages.import_record``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain


def run(cfg: Any, ctx: Context) -> dict:
    """Import import.path for arch into {paths.data}/{op}_{dtype}_{arch}/{dataset}.parquet."""
    from ckheur.dataset import DatasetError, dataset_dir, import_ck_csv
    from ckheur.files import check_name
    from ckheur.parts import sha256_of
    from ckheur.stages.import_fdb import is_find_db, run_find_db
    from ckheur.stages.import_record import ImportTransaction, already_imported, plan_import, report_import

    op, arch = plain(cfg.op), plain(cfg.arch)
    opts = cfg["import"]
    if not opts.path:
        raise StageError("stage=import needs import.path=<CK tile_engine CSV or MIOpen find-db file>")
    src = Path(opts.path)
    if not src.is_file():
        raise StageError(f"import.path={src}: " + ("not a file" if src.exists() else "not found"))
    if is_find_db(src):
        return run_find_db(cfg, src)
    name = check_name(opts.dataset, "import.dataset") if opts.dataset else \
        check_name(src.name.split(".")[0], "import.dataset (default: the file name up to its first dot)")
    try:
        sha = sha256_of(src)
        done = already_imported(cfg.paths.data, name, sha, src.name)
        if done:
            for target in done:
                print(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
            return {"datasets": [str(t) for t in done]}
        df, report = import_ck_csv(src, arch=arch["name"], tiles=op["tiles"])
    except (DatasetError, OSError, EOFError) as e:
        raise StageError(str(e) if isinstance(e, DatasetError) else f"{src}: cannot be read ({e})") from None
    for column, value in report["defaults"].items():
        print(f"import: {src.name} has no column {column}: every row takes {column}={value}")
    if report["repeats"]:
        lines = "; ".join("lines " + ", ".join(map(str, r)) for r in report["repeats"][:3])
        print(f"import: {len(report['repeats'])} (problem, kernel) pairs are measured more than once ({lines}"
              f"{' ...' if len(report['repeats']) > 3 else ''}): each is one row with the median of its repeats, "
              "their range in latency_spread_ms")
    targets = {}
    for (direction, dtype), part in df.groupby(["direction", "dtype"]):
        targets[dataset_dir(cfg.paths.data, {**op, "direction": direction, "dtype": dtype}, arch["name"], name,
                            field="import.dataset")] = part
    plan = plan_import(cfg.paths.data, name, sha, src.name, list(targets), bool(opts.overwrite))
    with ImportTransaction(plan) as txn:
        for target in plan.targets:
            txn.add(target, targets[target])
    return report_import(txn)
