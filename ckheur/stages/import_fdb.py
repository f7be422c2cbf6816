"""A MIOpen find-db into ckheur datasets (family ``miopen``): one dataset per direction and data
type, ``{paths.data}/miopen_{direction}_{dtype}_{arch}/{dataset}.parquet``, every listed solver
timed and every other solver of the arch's table ``censored``. Idempotent by content: the
source's sha256 is recorded in each dataset (``imports.json``); the same file again does
nothing, another file of the same name is refused unless ``import.overwrite=true``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ckheur.stages import StageError, plain


def is_find_db(path: Path) -> bool:
    """Whether a path names a find-db file."""
    return ".fdb.txt" in path.name


def run_find_db(cfg: Any, src: Path) -> dict:
    """Import one find-db file as one transaction: every direction and data type it holds, or
    nothing (``ckheur.stages.import_record``)."""
    from ckheur.config import CONF_DIR, load_option
    from ckheur.dataset import dataset_dir
    from ckheur.files import check_name
    from ckheur.miopen_fdb import FindDbError, arch_from_name, dataset_rows, read_find_db
    from ckheur.parts import sha256_of
    from ckheur.stages.import_record import ImportTransaction, already_imported, plan_import, report_import

    opts = cfg["import"]
    known = sorted(p.stem for p in (CONF_DIR / "arch").glob("*.yaml"))
    t0 = time.perf_counter()
    try:
        if opts.arch:
            arch, cus = str(opts.arch), None
            if arch not in known:
                raise StageError(f"import.arch={arch!r}: allowed values are {', '.join(known)}")
        else:
            arch, cus = arch_from_name(src, known)
        name = check_name(opts.dataset, "import.dataset") if opts.dataset else \
            check_name(src.name.split(".")[0], "import.dataset (default: the file name up to its first dot)")
        sha = sha256_of(src)
        done = already_imported(cfg.paths.data, name, sha, src.name)
        if done:
            for target in done:
                print(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
            return {"datasets": [str(t) for t in done]}
        fdb = read_find_db(src)
    except FindDbError as e:
        raise StageError(str(e)) from None
    except (OSError, EOFError) as e:
        raise StageError(f"{src}: cannot be read ({e})") from None
    arch_cfg = plain(cfg.arch) if cfg.arch.name == arch else load_option(f"arch/{arch}")
    if cus is not None and cus != arch_cfg.get("num_cus"):
        print(f"import: the file was measured on {arch} with {cus} CUs (conf/arch/{arch}.yaml says "
              f"{arch_cfg.get('num_cus')}): the datasets are labeled {arch}")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(src.stat().st_mtime)) + "+00:00"
    rep = fdb.report
    print(f"import: {src.name}: {rep['lines']} lines, {rep['problems']} problems, {rep['entries']} listed "
          f"solver times ({arch}{f', {cus} CUs' if cus else ''})")
    for reason, n in {**rep["skipped_keys"], **rep["skipped_entries"]}.items():
        print(f"import: skipped {n}: {reason}")
    if rep.get("problems_out_of_time_order"):
        print(f"import: {rep['problems_out_of_time_order']} problems listed their solvers out of time order (sorted)")
    if not rep["problems"]:
        raise StageError(f"{src}: no problem left to import (every line was skipped, above); nothing was written")
    keys = sorted(tuple(k.split("/")) for k in rep["by_direction_dtype"])
    ops = {}
    for direction, dtype in keys:
        op = {**load_option(f"op/miopen/{direction}"), "direction": direction, "dtype": dtype}
        if not (op.get("solvers") or {}).get(arch):
            raise StageError(f"conf/op/miopen/{direction}.yaml has no solver table for {arch}; "
                             f"tools/miopen_solvers.py derives one from find-db files")
        ops[dataset_dir(cfg.paths.data, op, arch, name, field="import.dataset")] = op
    plan = plan_import(cfg.paths.data, name, sha, src.name, list(ops), bool(opts.overwrite))
    with ImportTransaction(plan) as txn:
        for target in plan.targets:  # one direction and dtype at a time: its rows are written, then freed
            op = ops[target]
            rows, left = dataset_rows(fdb, op["direction"], op["dtype"], arch, op["solvers"][arch], src.name, stamp)
            txn.add(target, rows)
            if left["listed_solvers_outside_pool"]:
                print(f"import: {op['direction']} {op['dtype']}: listed solvers not in the {arch} table, left out: "
                      f"{left['listed_solvers_outside_pool']}")
    out = report_import(txn)
    print(f"import: done in {time.perf_counter() - t0:.1f}s")
    return out
