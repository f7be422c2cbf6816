#!/usr/bin/env python
"""Regenerate the shipped models across GPUs (``models/miopen_<direction>_<dtype>_gpus``): one bundle
per direction and dtype trained on the six find-dbs of ../shared/data/miopen_fdb with each device's
hardware descriptors (``train.across_gpus=true``). They serve a GPU without a bundle of its own.

    python tools/train_gpus_bundles.py [--fdb DIR] [--data outputs/data_gpus] [--models models]
                                       [--directions fwd bwd_data bwd_weight] [--dtypes fp32 fp16]
                                       [--shard-count 4] [--dry-run] [-- extra run.py overrides]

1. Each find-db not yet imported into ``--data`` is imported (``stage=import``; a row's device is the
   one its file name says: MI50 and MI60 apart).
2. Per direction and dtype, ``stage=train train.across_gpus=true`` on the six devices' datasets,
   with a small recipe that fits 2 cores and the wheel: a quarter of the problems of each device
   (``data.shard.count=4``: a seeded hash of the problem, the same quarter on every device), 15
   leaves, at most 300 trees, 3-fold grouped CV only. The commands are printed before they run.
3. Each bundle's train_manifest.json then names the find-db file each dataset was imported from
   and its sha256 (``find_db``, ``find_db_sha256``: the import folder may be temporary), with the
   dataset paths under ``--data`` and ``paths.models`` as ``--models``.

``--record-sources`` does step 3 alone on the bundles already in ``--models`` (no import, no
training: the models stay byte for byte): their dataset paths are rewritten to ``--data``.

Extra overrides after ``--`` reach every training (e.g. another feature set once the lead has one).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "miopen_fdb"
# the six find-dbs: (arch, file stem); the stem names the device (gfx906_64: MI60)
FILES = (("gfx942", "gfx942130"), ("gfx90a", "gfx90a68"), ("gfx906", "gfx906_60"), ("gfx906", "gfx906_64"),
         ("gfx900", "gfx900_56"), ("gfx1030", "gfx1030_36"))
RECIPE = ("train.folds=3", "train.cluster_cv=false", "train.seeds=1", "train.select_by=grouped_cv",
          "model.num_leaves=15", "model.learning_rate=0.15", "model.max_trees=300", "model.companion_trees=50")


def run(cmd: list[str], dry: bool) -> None:
    """Print a command, then run it from the repository root (stop at the first failure)."""
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    if not dry:
        subprocess.run(cmd, cwd=ROOT, check=True)


def record_sources(bundle: Path, data: Path, fdb: Path, models: str) -> None:
    """Step 3: the bundle's manifest names each dataset's find-db (file name and sha256), its path
    under ``data`` and ``paths.models`` as ``models``, in its ``datasets``, ``config`` and ``command``."""
    import json

    sys.path.insert(0, str(ROOT))
    from ckheur.learn.bundle import write_json
    from ckheur.parts import sha256_of

    path = bundle / "train_manifest.json"
    manifest = json.loads(path.read_text())
    moved = {}
    for entry in manifest["datasets"]:
        old = Path(entry["path"])
        new = data / old.parent.name / old.name  # <data>/miopen_<op>_<dtype>_<arch>/<find-db stem>.parquet
        src = fdb / f"{old.stem}.HIP.fdb.txt.bz2"
        moved[str(old)] = str(new)
        entry.update(path=str(new), find_db=src.name, find_db_sha256=sha256_of(src))
    cfg = manifest["config"]
    cfg["data"]["paths"] = [moved.get(p, p) for p in cfg["data"]["paths"]]
    cfg["paths"]["models"] = models
    command = []
    for arg in manifest["command"]:
        if arg.startswith("data.paths=["):
            arg = "data.paths=[" + ",".join(moved.get(p, p) for p in arg[len("data.paths=["):-1].split(",")) + "]"
        command.append(f"paths.models={models}" if arg.startswith("paths.models=") else arg)
    manifest["command"] = command
    write_json(path, manifest)
    print(f"{path}: {len(moved)} datasets named by their find-db files", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fdb", default=str(SHARED), help="folder of the six find-db files")
    ap.add_argument("--data", default="outputs/data_gpus", help="datasets (each find-db imported once)")
    ap.add_argument("--models", default="models", help="where the bundles go (paths.models)")
    ap.add_argument("--directions", nargs="+", default=["fwd", "bwd_data", "bwd_weight"])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16"])
    ap.add_argument("--shard-count", type=int, default=4, help="train on 1/N of each device's problems")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--record-sources", action="store_true", help="only name the find-db files in the manifests of "
                    "the bundles already in --models (nothing imported or trained)")
    ap.add_argument("extra", nargs="*", help="run.py overrides for every training (after --)")
    args = ap.parse_args()
    py, data = sys.executable, Path(args.data)
    bundles = [Path(args.models) / f"miopen_{d}_{t}_gpus" for d in args.directions for t in args.dtypes]
    if args.record_sources:
        for bundle in bundles:
            record_sources(bundle, data, Path(args.fdb), args.models)
        return
    for arch, stem in FILES:
        if not (data / f"miopen_fwd_fp32_{arch}" / f"{stem}.parquet").exists():
            run([py, "run.py", "stage=import", f"import.path={Path(args.fdb) / f'{stem}.HIP.fdb.txt.bz2'}",
                 f"paths.data={data}", f"hydra.run.dir=outputs/import_gpus/{stem}"], args.dry_run)
    took = {}
    for direction in args.directions:
        for dtype in args.dtypes:
            paths = ",".join(str(data / f"miopen_{direction}_{dtype}_{arch}" / f"{stem}.parquet") for arch, stem in FILES)
            t0 = time.perf_counter()
            run([py, "run.py", "stage=train", f"op=miopen/{direction}", f"op.dtype={dtype}", "arch=gfx942",
                 "train.across_gpus=true", f"data.paths=[{paths}]", f"data.shard.count={args.shard_count}",
                 *RECIPE, f"paths.models={args.models}", "train.overwrite=true",
                 f"hydra.run.dir=outputs/train_gpus/{direction}_{dtype}", *args.extra], args.dry_run)
            took[f"{direction} {dtype}"] = round(time.perf_counter() - t0)
            if not args.dry_run:
                record_sources(Path(args.models) / f"miopen_{direction}_{dtype}_gpus", data, Path(args.fdb), args.models)
    print("trained (s): " + ", ".join(f"{k} {v}" for k, v in took.items()))


if __name__ == "__main__":
    main()
