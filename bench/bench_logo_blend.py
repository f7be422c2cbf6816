#!/usr/bin/env python
"""A rank blend for a GPU whose nearest bundle's GPU shares its matrix cores and wave size, measured
leave-one-GPU-out on the CDNA devices (MI300X and MI210 held out in turn: 12 cells, FP32 and FP16,
every direction) before adopting it.

Per cell, bench_logo's tables and recipe (same subsample and seed, so the first two rows repeat
bench_logo's "today's fallback" and "zero-shot: model across the other five"):

- **nearest bundle**: the other CDNA GPU's shipped bundle, as ``stage=predict`` serves it now;
- **model across the other five**: the zero-shot model (the recipe of the shipped models across GPUs);
- **rank blend**: each (problem, solver) ranked by the mean of its rank under the two (a solver one
  of them does not rank comes after all it ranks; ties go to the bundle's order);
- **filled in**: the bundle's order, and each solver it does not know (its GPU never listed it)
  placed by the model across the five: after as many of the bundle's solvers as that model ranks
  above it. Where the bundle knows every solver, it is the bundle.
- **filled in, pool**: the same, also placing each solver the bundle's own arch refuses for the
  op (``ckheur.families.miopen.solvers.rejections``: gfx90a's backward FP16 and its FP16 alternate
  implementation), whose rows the bundle only ever saw unlisted; where its arch refuses none, it is
  the row above.

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
FILL = "filled in: the nearest bundle's order, each solver it does not know placed by the model across the five"
FILL_POOL = "filled in, pool: also each solver the bundle's arch refuses for the op placed by the model across the five"


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


def filled(pid: np.ndarray, bundle: np.ndarray, zero: np.ndarray, unknown: np.ndarray) -> np.ndarray:
    """Higher is better: the bundle's order; an ``unknown`` row (a solver the bundle does not have)
    that the model across GPUs ranks goes after the c best of the bundle's rows, c the bundle's
    ranked rows that model scores above it."""
    fill = unknown & np.isfinite(zero)
    out = np.where(np.isfinite(bundle), -ranks(pid, bundle).astype(float), -np.inf)
    for p in np.unique(pid[fill]):
        rows = np.flatnonzero(pid == p)
        ranked = rows[np.isfinite(bundle[rows])]
        for r in rows[fill[rows]]:
            out[r] = -(np.count_nonzero(zero[ranked] > zero[r]) - 0.5)  # just before the bundle's c-th
    return out


def one_op(args: tuple) -> dict:
    """The two CDNA devices held out, one direction and dtype."""
    data, direction, dtype, max_problems, seed, threads = args
    from ckheur.config import load_arch
    from ckheur.kernels import enumerate_pool
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
        bundle = ROOT / "models" / f"miopen_{direction}_{dtype}_{DEVICES[near][0]}"
        b = bundle_scores(bundle, tb)[0]
        own = {k["name"] for k in json.loads((bundle / "kernels.json").read_text())}
        unknown = np.array([k.name not in own for k in tb.kernels])[tb.kid]
        refused = {name for name, _ in enumerate_pool(tb.op, load_arch(DEVICES[near][0])).rejected}
        unseen = unknown | np.array([k.name in refused for k in tb.kernels])[tb.kid]
        listed = tb.listed[tb.kid]
        b, z = np.where(listed, b, -np.inf), np.where(listed, z, -np.inf)  # as bench_logo scores its rows
        out["held_out"][held] = {FALLBACK: report(tb, rows, b), ZERO: report(tb, rows, z),
                                 BLEND: report(tb, rows, blend(tb.pid, b, z)),
                                 FILL: report(tb, rows, filled(tb.pid, b, z, unknown)),
                                 FILL_POOL: report(tb, rows, filled(tb.pid, np.where(unseen, -np.inf, b), z, unseen))}
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
    ap.add_argument("--from-json", default=None, help="print the tables of an earlier run's --out, run nothing")
    args = ap.parse_args()
    if args.from_json:
        return tables(json.loads(Path(args.from_json).read_text()))
    jobs = [(args.data, d, t, args.max_problems, args.seed, args.threads) for d in args.directions for t in args.dtypes]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        results = list(ex.map(one_op, jobs))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    tables(results)


def tables(results: list) -> None:
    """The per-cell table and each row's difference from the nearest bundle."""
    cells = [(r["direction"], r["dtype"], d, res) for r in results for d, res in r["held_out"].items()]
    rows = [n for n in (FALLBACK, ZERO, BLEND, FILL, FILL_POOL) if all(n in res for *_, res in cells)]
    short = {FALLBACK: "nearest bundle", ZERO: "model across the five", BLEND: "rank blend", FILL: "filled in",
             FILL_POOL: "filled in, pool"}
    print("\n| direction | dtype | held out | " + " | ".join(short[n] for n in rows) + " | "
          + " | ".join(f"{short[n]} - bundle" for n in rows[2:]) + " |")
    print("| --- " * (1 + 2 * len(rows)) + "|")
    for direction, dtype, d, res in cells:
        print(f"| {direction} | {dtype} | {d} | " + " | ".join(
            f"{100 * res[n]['top1']:.1f} / {100 * res[n]['efficiency']:.2f}" for n in rows) + " | " + " | ".join(
            f"{100 * (res[n]['efficiency'] - res[FALLBACK]['efficiency']):+.2f}" for n in rows[2:]) + " |")
    for n in rows[2:]:
        gains = np.array([res[n]["efficiency"] - res[FALLBACK]["efficiency"] for *_, res in cells]) * 100
        top = np.array([res[n]["top1"] - res[FALLBACK]["top1"] for *_, res in cells]) * 100
        print(f"\n{n.split(':')[0]} minus the nearest bundle over {len(gains)} cells: mean efficiency "
              f"{gains.mean():+.2f} points (spread, SD over cells, {gains.std(ddof=1) if len(gains) > 1 else 0:.2f}; "
              f"better in {int((gains > 0).sum())}, worse in {int((gains < 0).sum())}); top-1 {top.mean():+.1f} points")


if __name__ == "__main__":
    main()
