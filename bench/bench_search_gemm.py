#!/usr/bin/env python
"""Surrogate search on the GEMM pool: how close does a 500-evaluation search get to the
full-pool argmax of the same surrogate, over a set of problems?

Surrogate: the GEMM model trained by `python run.py -m stage=sweep,train op=gemm` (in
outputs/sim_models/, simulated data), else the analytic model (said so). Prints, per method
(discrete DE, random top-k), the share of problems where the search found the full-pool
argmax, the mean and P10 ratio of predicted TFLOPS (search best / full-pool best), mean
evaluations, and the median time per problem.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(n_problems: int = 40, budget: int = 500) -> int:
    from ckheur.job import Job
    from ckheur.selection.predicting import selector_for
    from ckheur.families import get_family
    from ckheur.problems import load_named_set
    from ckheur.sweeping.search import SearchOptions, search_problem
    from ckheur.stages import compose_config

    job = Job.from_config(compose_config(["op=gemm"]))
    selector, label = selector_for(job, bundles=ROOT / "models", sim_models=ROOT / "outputs" / "sim_models")
    pool = job.pool.kernels
    problems = load_named_set("holdout", get_family("gemm"))[:n_problems]
    print(f"surrogate: {label}; pool {len(pool)} kernels; {len(problems)} holdout GEMMs; budget {budget}")
    for method in ("de", "random"):
        options = SearchOptions(method=method, budget=budget)
        found, ratios, evals, times = [], [], [], []
        for p in problems:
            t = time.perf_counter()
            r = search_problem(selector, pool, p, options)
            times.append(time.perf_counter() - t)
            found.append(r["full_pool"]["found"])
            ratios.append(r["full_pool"]["ratio"])
            evals.append(r["evaluations"])
        print(f"{method:>6}: full-pool argmax found {100 * np.mean(found):.1f}%, predicted TFLOPS of the best found "
              f"vs the argmax: mean {100 * np.mean(ratios):.2f}% P10 {100 * np.percentile(ratios, 10):.2f}% "
              f"min {100 * np.min(ratios):.2f}%; mean evaluations {np.mean(evals):.0f}; "
              f"median {1e3 * statistics.median(times):.0f} ms per problem (full pool scored too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
