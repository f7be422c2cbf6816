#!/usr/bin/env python
"""A rank blend for a GPU whose nearest bundle's GPU shares its matrix cores and wave size, measured
leave-one-GPU-out on the CDNA devices (MI300X and MI210 held out in turn: 12 cells, FP32 and FP16,
every direction) before adopting it.

Per cell, bench_logo's tables and recipe (same subsample and seed, so the first two rows repeat
bench_logo's "today's fallback" and "zero-shot: model across the other five"):

- **nearest bundle**: the other CDNA GPU's shipped bundle, as ``stage=predict`` serves it now;
- **model across the other five**: the zero-shot model (the recipe of the shipped models across GPUs);
- **rank blend**: each (problem, solver) ranked by the mean of its rank under the two (a solver one
  of them does not rank comes after all it ranks; ties go to the bundle's order).

    python bench/bench_logo_blend.py [--data DIR] [--max-problems 1500] [--jobs 2] [--threads 1] [--out blend.json]

Adopt only if the blend beats the bundle in a clear majority of the 12 cells with a mean gain
larger than the gains' spread (their standard deviation over the cells).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logo import BUNDLED, DEVICES, FALLBACK, ZERO, device_tables, nearest, problem_ranks  # noqa: E402
from bench_miopen_fdb import ROOT  # noqa: E402
from bench_unseen import bundle_scores, fit_on, predict_rows, ranked_rows, report  # noqa: E402

HELD = ("MI300X", "MI210")  # matrix cores, wave 64: the nearest bundle is the other CDNA GPU's
BLEND = "rank blend: mean of the nearest bundle's and the model across the five's ranks"


def ranks(pid: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each row's rank among its problem's rows by score, best 0; a row not ranked (-inf) after all ranked ones."""
    out = problem_ranks(pid, -scores)
    finite = np.bincount(pid, weights=np.isfinite(scores), minlength=pid.max() + 1)
    return np.where(np.isfinite(scores), out, finite[pid])


def blend(pid: np.ndarray, bundle: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Higher is better: minus the mean rank of the two (ties: the bundle's order); -inf where neither ranks."""
    mean = (ranks(pid, bundle) + ranks(pid, zero)) / 2
    tie = ranks(pid, bundle) / (len(pid) + 1.0)
    return np.where(np.isfinite(bundle) | np.isfinite(zero), -(mean + 1e-3 * tie), -np.inf)


def one_op(args: tuple) -> dict:
    """The two CDNA devices held out, one direction and dtype."""
    data, direction, dtype, max_problems, seed, threads = args
    from ckheur.learn.training import concat_tables

    t0 = time.perf_counter()
    model, cfgs, tables, union_list, hw, trained = device_tables(data, direction, dtype, max_problems, seed, threads)
    out = {"direction": direction, "dtype": dtype, "held_out": {}}
    for held in HELD:
        tb, others = tables[held], [d for d in DEVICES if d != held]
        rows = np.arange(len(tb.pid))
        kept = ranked_rows(tb, tb.op, rows)
        zero, _ = fit_on(concat_tables([trained[d] for d in others]), None, model, seed)
        z = np.where(kept, predict_rows(zero, hw[held], rows), -np.inf)
        near = nearest(held, [d for d in others if DEVICES[d][0] in BUNDLED], cfgs, dtype)
        b = bundle_scores(ROOT / "models" / f"miopen_{direction}_{dtype}_{DEVICES[near][0]}", tb)[0]
        listed = tb.listed[tb.kid]
        b, z = np.where(listed, b, -np.inf), np.where(listed, z, -np.inf)  # as bench_logo scores its rows
        out["held_out"][held] = {FALLBACK: report(tb, rows, b), ZERO: report(tb, rows, z),
                                 BLEND: report(tb, rows, blend(tb.pid, b, z))}
        print(f"{direction} {dtype} {held} ({time.perf_counter() - t0:.0f} s): " + "; ".join(
            f"{n}: {100 * r['top1']:.1f} / {100 * r['efficiency']:.2f}" for n, r in out["held_out"][held].items()),
            flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/ckheur_logo_data", help="bench_logo.py's --data (the six imports)")
    ap.add_argument("--directions", nargs="+", default=["fwd", "bwd_data", "bwd_weight"])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16"])
    ap.add_argument("--max-problems", type=int, default=1500)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    jobs = [(args.data, d, t, args.max_problems, args.seed, args.threads) for d in args.directions for t in args.dtypes]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        results = list(ex.map(one_op, jobs))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    cells = [(r["direction"], r["dtype"], d, res) for r in results for d, res in r["held_out"].items()]
    print("\n| direction | dtype | held out | nearest bundle | model across the five | rank blend | blend - bundle |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for direction, dtype, d, res in cells:
        print(f"| {direction} | {dtype} | {d} | " + " | ".join(
            f"{100 * res[n]['top1']:.1f} / {100 * res[n]['efficiency']:.2f}" for n in (FALLBACK, ZERO, BLEND))
            + f" | {100 * (res[BLEND]['efficiency'] - res[FALLBACK]['efficiency']):+.2f} |")
    gains = np.array([res[BLEND]["efficiency"] - res[FALLBACK]["efficiency"] for *_, res in cells]) * 100
    top = np.array([res[BLEND]["top1"] - res[FALLBACK]["top1"] for *_, res in cells]) * 100
    print(f"\nrank blend minus the nearest bundle over {len(gains)} cells: mean efficiency {gains.mean():+.2f} points "
          f"(spread, SD over cells, {gains.std(ddof=1) if len(gains) > 1 else 0:.2f}; better in "
          f"{int((gains > 0).sum())}, worse in {int((gains < 0).sum())}); top-1 {top.mean():+.1f} points")


if __name__ == "__main__":
    main()
