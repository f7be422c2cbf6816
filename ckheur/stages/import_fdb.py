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
from ckheur.stages.import_record import note_import, prepare_target, read_record, save_record


def is_find_db(path: Path) -> bool:
    """Whether a path names a find-db file."""
    return ".fdb.txt" in path.name


def _already_imported(cfg: Any, arch: str, name: str, sha: str) -> dict:
    """{direction/dtype: folder} when every dataset this file could have written holds it (an
    import that finished); {} otherwise (nothing yet, or an import killed half way)."""
    from ckheur.dataset import dataset_dir
    from ckheur.miopen_fdb import DIRECTIONS, DTYPES

    found = {}
    for direction in DIRECTIONS.values():
        for dtype in DTYPES.values():
            target = dataset_dir(cfg.paths.data, {"family": "miopen", "direction": direction, "dtype": dtype}, arch, name)
            if target.exists():
                if not read_record(target).get(sha, {}).get("complete"):
                    return {}
                found[f"{direction}/{dtype}"] = str(target)
    return found


def run_find_db(cfg: Any, src: Path) -> dict:
    """Import one find-db file; returns {direction/dtype: dataset folder}."""
    from ckheur.config import CONF_DIR, load_option
    from ckheur.dataset import dataset_dir, write_part
    from ckheur.miopen_fdb import FindDbError, arch_from_name, dataset_rows, read_find_db
    from ckheur.parts import sha256_of

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
        sha = sha256_of(src)
        name = opts.dataset or src.name.split(".")[0]
        done = _already_imported(cfg, arch, name, sha)
        if done:
            for target in done.values():
                print(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
            return done
        fdb = read_find_db(src)
    except FindDbError as e:
        raise StageError(str(e)) from None
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
    out = {}
    for direction, dtype in sorted(tuple(k.split("/")) for k in rep["by_direction_dtype"]):
        op = {**load_option(f"op/miopen/{direction}"), "direction": direction, "dtype": dtype}
        solvers = (op.get("solvers") or {}).get(arch)
        if not solvers:
            raise StageError(f"conf/op/miopen/{direction}.yaml has no solver table for {arch}; "
                             f"tools/miopen_solvers.py derives one from find-db files")
        target = dataset_dir(cfg.paths.data, op, arch, name)
        record = prepare_target(target, sha, src.name, bool(opts.overwrite))
        if record is None:
            print(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
            out[f"{direction}/{dtype}"] = str(target)
            continue
        rows, left = dataset_rows(fdb, direction, dtype, arch, solvers, src.name, stamp)
        write_part(target, rows)
        note_import(target, record, sha, src.name, len(rows))
        counts = rows.status.value_counts().to_dict()
        print(f"import: {direction} {dtype}: {rows.shape[0]} rows ({counts}) -> {target}")
        if left["listed_solvers_outside_pool"]:
            print(f"import: {direction} {dtype}: listed solvers not in the {arch} table, left out: "
                  f"{left['listed_solvers_outside_pool']}")
        out[f"{direction}/{dtype}"] = str(target)
    for folder in out.values():  # every dataset of the file is written: later imports can skip the parse
        record = read_record(Path(folder))
        record[sha]["complete"] = True
        save_record(Path(folder), record)
    print(f"import: done in {time.perf_counter() - t0:.1f}s")
    return out
