#!/usr/bin/env python
"""The shipped models across GPUs (models/miopen_<direction>_<dtype>_gpus) on the devices without a
bundle of their own (MI50, MI60, Vega 56, the RDNA2 Radeon), on problems they were not trained on,
beside the nearest GPU's bundle as is (``evaluate.nearest_gpu``).

    python bench/bench_gpus_bundles.py [--data outputs/data_gpus] [--directions fwd bwd_data bwd_weight]
                                       [--dtypes fp32 fp16] [--out gpus.json]

Each is ``stage=evaluate`` as a user runs it (the model across GPUs is what ``predict`` serves
those GPUs) on the second quarter of the device's problems (``data.shard.count=4
data.shard.index=1``: the bundles were trained on the first, tools/train_gpus_bundles.py), open
protocol (a pick the device's find-db does not list for the problem counts 0). These devices'
other problems were in the training data: this is a GPU seen, problems unseen, not a GPU never
measured (bench/bench_logo.py holds each GPU out). ``--data``: the six find-dbs imported as
tools/train_gpus_bundles.py imports them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEVICES = {"MI50": ("gfx906", 60, "gfx906_60"), "MI60": ("gfx906", 64, "gfx906_64"),
           "Vega56": ("gfx900", 56, "gfx900_56"), "RDNA2": ("gfx1030", 72, "gfx1030_36")}
NEAREST = "bundle as is (the nearest other GPU with one)"


def one(data: Path, device: str, direction: str, dtype: str) -> dict:
    """The evaluation of one device, direction and dtype: model and nearest bundle, open protocol."""
    arch, cus, stem = DEVICES[device]
    with tempfile.TemporaryDirectory() as run:
        r = subprocess.run([sys.executable, "run.py", "stage=evaluate", f"op=miopen/{direction}", f"op.dtype={dtype}",
                            f"arch={arch}", f"arch.num_cus={cus}", "evaluate.plots=false",
                            f"data.eval_paths=[{data / f'miopen_{direction}_{dtype}_{arch}' / f'{stem}.parquet'}]",
                            "data.shard.count=4", "data.shard.index=1", f"hydra.run.dir={run}"],
                           cwd=ROOT, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(r.stderr[-2000:])
        m = json.loads(next(Path(run).rglob("metrics.json")).read_text())
    beside = next(v for k, v in m["censored_beside"].items() if k.endswith(NEAREST))
    pick = lambda x: {"top1": x["open"]["top1"], "efficiency": x["open"]["efficiency"]["mean"],  # noqa: E731
                      "unlisted": x["open"]["picks_outside_listed"]}
    return {"device": device, "direction": direction, "dtype": dtype, "problems": beside["problems"],
            "model": pick(beside["model"]), "nearest": pick(next(v for k, v in beside.items() if k.endswith(NEAREST)))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="outputs/data_gpus")
    ap.add_argument("--directions", nargs="+", default=["fwd", "bwd_data", "bwd_weight"])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    print("| direction | dtype | device | problems | model across GPUs: top-1 / eff / unlisted % "
          "| nearest bundle as is |\n| --- | --- | --- | --- | --- | --- |")
    for direction in args.directions:
        for dtype in args.dtypes:
            for device in DEVICES:
                r = one(Path(args.data).resolve(), device, direction, dtype)
                rows.append(r)
                cell = lambda x: f"{100 * x['top1']:.1f} / {100 * x['efficiency']:.2f} / {100 * x['unlisted']:.1f}"  # noqa: E731
                print(f"| {direction} | {dtype} | {device} | {r['problems']} | {cell(r['model'])} | {cell(r['nearest'])} |",
                      flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(rows, indent=1))
    mean = lambda who, k: 100 * sum(r[who][k] for r in rows) / len(rows)  # noqa: E731
    print(f"\nmean over {len(rows)} cells: model across GPUs {mean('model', 'top1'):.1f} / "
          f"{mean('model', 'efficiency'):.2f} / {mean('model', 'unlisted'):.1f}; nearest bundle as is "
          f"{mean('nearest', 'top1'):.1f} / {mean('nearest', 'efficiency'):.2f} / {mean('nearest', 'unlisted'):.1f}")


if __name__ == "__main__":
    main()
