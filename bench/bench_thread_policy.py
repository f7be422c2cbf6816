#!/usr/bin/env python
"""Training and active-sweep choice under load: the thread policy against LightGBM's defaults.

Two workloads on the real gfx950 forward measurements (shipped in the package):
- "small training": one `relative` model, 60 trees, on all 185 problems x 20 kernels (3,700 rows);
- "active round": what choosing one active-sweep round costs: a bootstrap ensemble of 5 x 100
  trees on 40% of the problems (measured), then every member scores the other 60% (candidates).

Each runs in several fresh processes (the OpenMP wait policy is read when the runtime loads;
and under load a process either falls into a slow pattern or not, so one process is no sample),
quiet and with N busy processes spinning on the cores, under two policies:
- "policy": ckheur's thread policy (ckheur.threads: one thread for small work, passive waits);
- "lightgbm default": LightGBM's default thread count (num_threads=0: every available CPU) for
  every training and prediction, with OpenMP's default wait policy, as ckheur did before.
Prints, per case, the median and the worst over all repeats of all processes, and the slowdown
busy / quiet of the medians. Target: <= 3x for the policy with two busy processes on 2 cores.
A run slower than --timeout seconds counts as that many (so the figure is a lower bound).

    python bench/bench_thread_policy.py [--processes 3] [--repeats 3] [--busy 2] [--timeout 120]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("small training", "active round")


def _table():
    import numpy as np

    from ckheur.data.dataset import read_dataset
    from ckheur.families.engines import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.measurements import CK_GFX950_FWD
    from ckheur.learn.training import build_table
    from ckheur.stages import compose_config, plain

    cfg = compose_config(["op=fwd", "arch=gfx950"])
    op, arch = plain(cfg.op), plain(cfg.arch)
    tb = build_table(read_dataset(CK_GFX950_FWD), op, arch, enumerate_pool(op, arch).kernels,
                     get_engine(op["family"]), None)
    cat = [tb.feature_names.index(c) for c in get_engine(op["family"]).CATEGORICAL]
    return tb, plain(cfg.model), cat, np


def child(workload: str, policy: str, repeats: int) -> None:
    """Run one workload ``repeats`` times in this process and print the seconds as JSON."""
    import ckheur.threads

    if policy == "lightgbm default":  # as before the policy: OpenMP's wait policy, LightGBM's thread count
        ckheur.threads.quiet_openmp = lambda: None
        ckheur.threads.train_threads = lambda *a: 0
        ckheur.threads.predict_threads = lambda *a: 0
    from ckheur.sweeping.acquisition import train_ensemble
    from ckheur.learn.training import Table, fit
    from ckheur.threads import predict

    tb, model, cat, np = _table()
    model = {**model, "threads": 0}
    ckheur.threads.lightgbm()  # the import is not what is measured
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        if workload == "small training":
            fit(tb, np.arange(len(tb.X)), model, "relative", cat, 0, 60)
        else:
            n = len(tb.problems)
            measured = np.random.default_rng(0).permutation(n)[: int(0.4 * n)]
            rows = np.flatnonzero(np.isin(tb.pid, measured))
            sub = Table(X=tb.X[rows], tflops=tb.tflops[rows], pid=np.unique(tb.pid[rows], return_inverse=True)[1],
                        kid=tb.kid[rows], problems=[tb.problems[i] for i in np.sort(measured)], kernels=tb.kernels,
                        feature_names=tb.feature_names, full=np.ones(len(measured), dtype=bool))
            boosters, _ = train_ensemble(sub, model, 5, 100, cat, 0)
            cand = tb.X[np.flatnonzero(~np.isin(tb.pid, measured))]
            np.stack([predict(b, cand) for b in boosters])
        times.append(time.perf_counter() - t0)
    print(json.dumps(times))


def _run_children(workload: str, policy: str, processes: int, repeats: int, timeout: float) -> list[float]:
    """Times of ``repeats`` runs in each of ``processes`` fresh processes (a process past the
    timeout counts each of its runs as ``timeout`` seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    times: list[float] = []
    for _ in range(processes):
        try:
            out = subprocess.run([sys.executable, __file__, "--child", workload, policy, str(repeats)], env=env,
                                 cwd=ROOT, capture_output=True, text=True, check=True, timeout=timeout)
            times += json.loads(out.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            times += [timeout] * repeats
    return sorted(times)


def _busy(n: int) -> list[subprocess.Popen]:
    """n processes that spin on a core each (they stop by themselves after 30 minutes)."""
    code = "import time\nt = time.time() + 1800\nwhile time.time() < t:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per case")
    ap.add_argument("--repeats", type=int, default=3, help="runs per process")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a process counts as that slow")
    ap.add_argument("--busy", type=int, default=2, help="busy processes beside the workload")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    from ckheur.threads import available_cpus

    print(f"thread policy bench: {available_cpus()} available CPUs, {args.busy} busy processes, "
          f"{args.processes} processes x {args.repeats} runs per case")
    rows = []
    for workload in WORKLOADS:
        for policy in ("policy", "lightgbm default"):
            quiet = _run_children(workload, policy, args.processes, args.repeats, args.timeout)
            procs = _busy(args.busy)
            try:
                busy = _run_children(workload, policy, args.processes, args.repeats, args.timeout)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            q, b = quiet[len(quiet) // 2], busy[len(busy) // 2]
            rows.append((workload, policy, q, b, b / q))
            print(f"  {workload:15s} {policy:17s} quiet median {q:7.3f}s (worst {quiet[-1]:7.3f}s)  busy median "
                  f"{b:7.3f}s (worst {busy[-1]:7.3f}s)  slowdown {b / q:6.2f}x (worst/median {busy[-1] / q:6.1f}x)",
                  flush=True)
    worst = max(r[4] for r in rows if r[1] == "policy")
    print(f"worst slowdown under the policy: {worst:.2f}x (target <= 3x) -> {'met' if worst <= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
