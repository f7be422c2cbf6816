#!/usr/bin/env python
"""The product's own bring-up of a held-out GPU (docs/miopen.md, "A new GPU"), on bench_logo's data.

For one cell (direction, dtype, held-out device): each device's bench_logo subsample (at most
--max-problems problems, seed 0: ``bench_logo.load_device``'s draw) is written as a dataset under
--work; the held-out device's is split into the ceiling's 20% test problems (bench_logo's split)
and the other 80%. Then the commands a user runs, each timed:

1. ``stage=train`` across the other five devices (``features.hardware=true``): the zero-shot bundle;
2. ``stage=sweep backend=replay`` serving the 80% only, ``sweep.strategy=random sweep.budget=0.05
   sweep.active.ranker=<zero-shot bundle>``;
3. ``stage=train`` on the five and the sweep's rows;
4. ``stage=evaluate`` of both bundles on the 20% (the open protocol: ``censored.all.open``, the
   function bench_unseen's ``report`` calls).

Then both bundles' picks are scored again (:func:`figures`, which reproduces stage=evaluate's open
figures) on the 20% and on bench_fewshot_levers' scored problems (the 20% its sweep did not
measure), among every solver of the device's table (as stage=evaluate) and among those its file
lists at least once (bench_logo's protocol).

    LOGO_DATA=<bench_logo.py's --data> python bench/bench_product_bringup.py --cell fwd:fp16:MI60 \
        --work /tmp/scratch/MI60 [--max-problems 1500] [--budget 0.05] [--out MI60.json] [--figures-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logo import DEVICES, ceiling_split, device_rows, load_device, sweep_rows  # noqa: E402
from bench_unseen import ranked_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def subsample(data: Path, device: str, direction: str, dtype: str, max_problems: int, seed: int):
    """The device's rows of load_device's draw (the same problems), and the ceiling's test problems' keys."""
    from ckheur.families.miopen.problems import FIELDS

    df, _ = device_rows(data, device, direction, dtype, max_problems, seed)
    tb = load_device(data, device, direction, dtype, max_problems, seed)
    test = ceiling_split(len(tb.problems), seed)
    keys = {tb.problems[i].key() for i in np.flatnonzero(test)}
    # bench_fewshot_levers scores its rows on the test problems its sweep did not measure; which problems
    # that sweep measures does not depend on the ranker's scores (only which solvers), so zeros give them
    kept = ranked_rows(tb, tb.op, np.arange(len(tb.pid)))
    swept = {tb.problems[i].key() for i in np.unique(tb.pid[sweep_rows(tb, kept, np.zeros(len(tb.pid)), 0.05, seed)])}
    row_keys = list(zip(*(df[f].tolist() for f in FIELDS)))
    in_test = np.array([k in keys for k in row_keys])
    in_scored = np.array([k in keys and k not in swept for k in row_keys])
    return df, in_test, in_scored, len(keys), len(keys - swept), len(tb.problems)


def figures(bundle: Path, overrides: list, frame, listed: set | None) -> dict:
    """Open-protocol top-1, mean efficiency and unlisted picks of the bundle's picks on the problems of
    ``frame`` (a pick the problem does not list counts 0; problems with no listed time left out), as
    ``stage=evaluate`` serves the device; with ``listed``, it picks among those solvers only, as
    bench_logo's protocol does (the solvers the held-out device's file lists at least once)."""
    from ckheur.data.dataset import usable
    from ckheur.families.miopen.problems import FIELDS, problem_from_dict
    from ckheur.job import Job
    from ckheur.selection.predicting import across_gpus_selector
    from ckheur.stages import compose_config

    sel = across_gpus_selector(Job.from_config(compose_config(overrides)), bundle, served=False,
                               cascade_threshold=10**9)
    top1 = eff = unlisted = n = 0
    for key, g in frame.groupby(list(FIELDS), sort=False, observed=True, dropna=False):
        ok = usable(g)  # the times stage=evaluate and bench_logo's tables score against
        times = dict(zip(g.kernel.astype(str)[ok], g.latency_ms[ok]))
        if not times:
            continue
        ks, scores, _ = sel.scores(problem_from_dict(dict(zip(FIELDS, key))))
        ok = [i for i in range(len(ks)) if np.isfinite(scores[i]) and (listed is None or ks[i].name in listed)]
        pick = ks[max(ok, key=lambda i: scores[i])].name if ok else None
        n += 1
        best = min(times.values())
        top1 += times.get(pick, np.inf) == best
        eff += best / times[pick] if pick in times else 0.0
        unlisted += pick not in times
    return {"problems": n, "top1": top1 / n, "efficiency": eff / n, "not_listed": unlisted / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("LOGO_DATA"))
    ap.add_argument("--cell", required=True, help="direction:dtype:device, e.g. fwd:fp16:MI60")
    ap.add_argument("--work", required=True, help="scratch folder (datasets, bundles, run folders)")
    ap.add_argument("--max-problems", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=0.05, help="sweep.budget (a share of the runnable pairs)")
    ap.add_argument("--model", default=None, help="model= of both trainings (default: the op's, relative_wide; the "
                    "figures in docs/miopen-results.md were measured with relative, its default then)")
    ap.add_argument("--out")
    ap.add_argument("--figures-only", action="store_true", help="only the figures of an earlier run in --work")
    a = ap.parse_args()
    from ckheur.data.dataset import write_part

    direction, dtype, held = a.cell.split(":")
    work, data = Path(a.work).resolve(), Path(a.data)
    ds = work / "data"
    t0 = time.perf_counter()
    files = {}
    arch, cus, name = DEVICES[held]
    if a.figures_only:
        out = json.loads(Path(a.out).read_text()) if a.out and Path(a.out).exists() else {"cell": a.cell}
        return report(out, work, direction, dtype, held, a)
    for d, (arch, cus, name) in DEVICES.items():
        df, in_test, in_scored, n_test, n_scored, n = subsample(data, d, direction, dtype, a.max_problems, a.seed)
        folder = ds / f"miopen_{direction}_{dtype}_{arch}"
        if d == held:
            files["test"] = write_part(work / "held" / f"{name}_test20.parquet", df[in_test])
            files["train"] = write_part(work / "held" / f"{name}_rest80.parquet", df[~in_test])
            files["scored"] = write_part(work / "held" / f"{name}_bench_scored.parquet", df[in_scored]).parent
            files["test"], files["train"] = files["test"].parent, files["train"].parent
            split = {"problems": n, "test_problems": n_test, "bench_scored_problems": n_scored}
        else:
            files[d] = write_part(folder / f"{name}.parquet", df).parent
    out = {"cell": a.cell, "split": split, "seconds": {"prepare": round(time.perf_counter() - t0, 1)}}
    arch, cus, name = DEVICES[held]
    five = ",".join(str(files[d]) for d in DEVICES if d != held)
    common = [f"op=miopen/{direction}", f"op.dtype={dtype}", f"arch={arch}", f"arch.num_cus={cus}",
              f"paths.data={ds}", f"paths.models={work / 'models'}", f"paths.tuning={work / 'tuning'}",
              *([f"model={a.model}"] if a.model else [])]
    swept = ds / f"miopen_{direction}_{dtype}_{arch}" / "bringup.parquet"
    steps = [
        ("train zero-shot", ["stage=train", "features.hardware=true", f"train.output={work / 'zero'}",
                             f"data.paths=[{five}]"]),
        ("sweep", ["stage=sweep", "backend=replay", f"backend.paths=[{files['train']}]", "problems=miopen_log",
                   "problems.name=bringup", "problems.sources.0.kind=dataset",
                   f"problems.sources.0.path={files['train']}", "sweep.strategy=random", f"sweep.budget={a.budget}",
                   f"sweep.active.ranker={work / 'zero'}"]),
        ("train bring-up", ["stage=train", "features.hardware=true", f"train.output={work / 'bringup'}",
                            f"data.paths=[{five},{swept}]"]),
        ("evaluate zero-shot", ["stage=evaluate", f"evaluate.model_dir={work / 'zero'}",
                                f"data.eval_paths=[{files['test']}]"]),
        ("evaluate bring-up", ["stage=evaluate", f"evaluate.model_dir={work / 'bringup'}",
                               f"data.eval_paths=[{files['test']}]"]),
    ]
    out["commands"] = {}
    for what, args in steps:
        run_dir = work / "runs" / what.replace(" ", "_")
        cmd = [sys.executable, "run.py", *args, *common, f"hydra.run.dir={run_dir}"]
        out["commands"][what] = " ".join(cmd[1:])
        t = time.perf_counter()
        log = run_dir.with_suffix(".log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as f:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
        out["seconds"][what] = round(time.perf_counter() - t, 1)
        print(f"{a.cell} {what}: rc {rc}, {out['seconds'][what]} s ({log})", flush=True)
        if rc:
            raise SystemExit(f"{what} failed: {log}")
        if what.startswith("evaluate"):
            m = json.loads(next(run_dir.rglob("metrics.json")).read_text())
            o = m["censored"]["all"]["open"]
            out[what] = {"problems": o["problems"], "top1": o["top1"], "efficiency": o["efficiency"]["mean"],
                         "not_listed": o["picks_outside_listed"], "problems_evaluated": m["problems_evaluated"]}
            print(f"  {100 * o['top1']:.1f} / {100 * o['efficiency']['mean']:.2f} / "
                  f"{100 * o['picks_outside_listed']:.2f} on {o['problems']} problems", flush=True)
    report(out, work, direction, dtype, held, a)


def report(out: dict, work: Path, direction: str, dtype: str, held: str, a) -> None:
    """The swept rows, and the bundles' figures on the ceiling's 20% and on the bench's scored problems,
    as stage=evaluate picks (every solver of the device's table) and among the solvers its file lists
    (bench_logo's protocol)."""
    import pandas as pd

    from ckheur.data.dataset import read_dataset, usable
    from ckheur.families.miopen.problems import FIELDS

    arch, cus, name = DEVICES[held]
    sw = read_dataset(work / "data" / f"miopen_{direction}_{dtype}_{arch}" / "bringup.parquet")
    out["swept"] = {"pairs": len(sw), "problems": int(sw.groupby(list(FIELDS), observed=True, dropna=False).ngroups),
                    **{k: int(v) for k, v in sw.status.value_counts().items()}}
    test = read_dataset(work / "held" / f"{name}_test20.parquet")
    whole = pd.concat([test, read_dataset(work / "held" / f"{name}_rest80.parquet")])
    listed = set(whole.kernel.astype(str)[usable(whole)])
    if not (work / "held" / f"{name}_bench_scored.parquet").exists():  # a run before it was written
        from ckheur.data.dataset import write_part

        df, _, in_scored, *_ = subsample(Path(a.data), held, direction, dtype, a.max_problems, a.seed)
        write_part(work / "held" / f"{name}_bench_scored.parquet", df[in_scored])
    scored = read_dataset(work / "held" / f"{name}_bench_scored.parquet")
    overrides = [f"op=miopen/{direction}", f"op.dtype={dtype}", f"arch={arch}", f"arch.num_cus={cus}"]
    for m in ("zero", "bringup"):
        for where, frame in (("test 20%", test), ("bench's scored", scored)):
            for proto, among in (("table", None), ("listed", listed)):
                r = figures(work / m, overrides, frame, among)
                out[f"{m}, {where}, {proto}"] = r
                print(f"{a.cell} {m}, {where}, among the {proto} solvers: {100 * r['top1']:.1f} / "
                      f"{100 * r['efficiency']:.2f} / {100 * r['not_listed']:.2f} on {r['problems']} problems",
                      flush=True)
    print(f"{a.cell} swept: {out['swept']}")
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
