"""Importing a MIOpen find-db (system or user) into datasets: one per direction and dtype it holds."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping


def import_find_db_file(src: Path, *, data_root: str | Path, arch: Mapping[str, Any], dataset: str | None,
                        find_db_arch: str | None, overwrite: bool, log: Callable[[str], None], **_: Any) -> dict:
    """One find-db: one dataset per direction and dtype it holds, every listed solver timed and every
    other solver of the arch's table ``censored``."""
    from ckheur.config import find_db_device, known_archs, load_option
    from ckheur.data.dataset import dataset_dir
    from ckheur.data.importing import ImportRefused, ImportTransaction, begin_import, import_report, plan_import
    from ckheur.integrations.miopen.find_db import FindDbError, arch_from_name, dataset_rows, read_find_db
    from ckheur.families.miopen.solvers import arch_table
    from ckheur.files import read_regular

    shipped_archs = known_archs()
    known = sorted({*shipped_archs, str(arch["name"])})  # the job's arch: a user's own config too
    t0 = time.perf_counter()
    try:
        if find_db_arch:
            file_arch, cus = str(find_db_arch), None
            if file_arch not in known:
                raise ImportRefused(f"import.arch={file_arch!r}: allowed values are {', '.join(known)}")
        else:
            file_arch, cus = arch_from_name(src, known)
        data = read_regular(src)  # read once: the import's sha256 and its rows come from these bytes
        name, sha, done = begin_import(src, data_root, dataset, log, data)
        if done is not None:
            return done
        fdb = read_find_db(src, file_arch, data)
    except FindDbError as e:
        raise ImportRefused(str(e)) from None
    except (OSError, EOFError) as e:
        raise ImportRefused(f"{src}: cannot be read ({e})") from None
    shipped = load_option(f"arch/{file_arch}") if file_arch in shipped_archs else dict(arch)
    arch_cfg = dict(arch) if arch.get("name") == file_arch else shipped
    device = find_db_device(shipped, cus) if cus is not None else None
    if device is not None:
        log(f"import: measured on {device.get('product', file_arch)} ({file_arch}, {device['num_cus']} CUs: "
            f"arch={file_arch}" + (f" arch.num_cus={device['num_cus']}" if device["num_cus"] != arch_cfg["num_cus"]
                                   else "") + ")")
    elif cus is not None:
        log(f"import: the file was measured on {file_arch} with {cus} CUs (conf/arch/{file_arch}.yaml says "
            f"{arch_cfg.get('num_cus')}): the datasets are labeled {file_arch}")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(src.stat().st_mtime)) + "+00:00"
    rep = fdb.report
    log(f"import: {src.name}: {rep['lines']} lines, {rep['problems']} problems, {rep['entries']} listed "
        f"solver times ({file_arch}{f', {cus} CUs' if cus else ''})")
    for renamed, n in (rep.get("renamed_solvers") or {}).items():
        log(f"import: mapped {n} entries of an older solver name to today's: {renamed} (the same solver; "
            "ckheur.integrations.miopen.find_db.OLDER_NAMES says why)")
    for reason, n in {**rep["skipped_keys"], **rep["skipped_entries"]}.items():
        log(f"import: skipped {n}: {reason}")
    alone = fdb.entries.groupby("problem", sort=False).solver.transform("size") == 1
    if alone.any():  # MIOpen lists the fastest solver of each algorithm it ran: one alone says no other ran
        top = fdb.entries.solver[alone].value_counts()
        log(f"import: {int(alone.sum())} of the {rep['problems']} problems list one solver alone ("
            + ", ".join(f"{name} {n}" for name, n in top.head(3).items()) + (", ..." if len(top) > 3 else "")
            + "): every other solver of the table reads censored there, as if none applied or ran faster")
    if rep.get("problems_out_of_time_order"):
        log(f"import: {rep['problems_out_of_time_order']} problems listed their solvers out of time order (sorted)")
    if not rep["problems"]:
        raise ImportRefused(f"{src}: no problem left to import (every line was skipped, above); nothing was written")
    ops = {}
    entry_direction = fdb.problems.direction.to_numpy()[fdb.entries.problem.to_numpy()]
    for direction, dtype in sorted(tuple(k.split("/")) for k in rep["by_direction_dtype"]):
        op = {**load_option(f"op/miopen/{direction}"), "direction": direction, "dtype": dtype}
        listed = set(fdb.entries.solver[entry_direction == direction])  # measured there: kept, whatever the table
        op["solvers"] = {file_arch: arch_table(direction, file_arch, measured=listed)}
        ops[dataset_dir(data_root, op, file_arch, name, field="import.dataset")] = op
    plan = plan_import(data_root, name, sha, src.name, list(ops), overwrite)
    with ImportTransaction(plan) as txn:
        for target in plan.targets:  # one direction and dtype at a time: its rows are written, then freed
            op = ops[target]
            rows, left = dataset_rows(fdb, op["direction"], op["dtype"], file_arch, op["solvers"][file_arch], src.name,
                                      stamp, device["num_cus"] if device is not None else cus or 0)
            txn.add(target, rows)
            if left["listed_solvers_outside_pool"]:
                log(f"import: {op['direction']} {op['dtype']}: listed solvers not in the {file_arch} table, left out: "
                    f"{left['listed_solvers_outside_pool']}")
    out = import_report(txn, log)
    log(f"import: done in {time.perf_counter() - t0:.1f}s")
    return out
