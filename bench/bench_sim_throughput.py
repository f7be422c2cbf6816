#!/usr/bin/env python
"""Simulator throughput: measurements per second on one core (target: >= 50,000/s).

Times ckheur.sim.simulate on the forward pool (30 kernels) x train_fwd_2d (1,500 problems),
median of repeats, beside a per-pair Python loop over the same model (the naive baseline)
run in the same process.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    from ckheur.config import load_option

    from ckheur.kernels import enumerate_pool
    from ckheur.families import get_family
    from ckheur.problems import load_named_set
    from ckheur.sim import kernel_arrays, load_params, predict_latency_ms, problem_arrays, simulate

    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    kernels = enumerate_pool(op, arch).by_group()[2]
    problems = load_named_set("train_fwd_2d", get_family("grouped_conv"))
    params = {**load_params(), "dtype": "bf16"}
    pairs = len(problems) * len(kernels)

    def vectorized() -> None:
        simulate(problems, kernels, arch, params, "fwd", seed=0)

    def per_pair(n: int = 300) -> None:
        kern = kernel_arrays(kernels)
        for p in problems[: n // len(kernels) + 1]:
            prob = problem_arrays([p], "fwd")
            for j in range(len(kernels)):
                predict_latency_ms(prob, {k: v[j:j + 1] for k, v in kern.items()}, arch, params, "fwd")

    times = []
    for _ in range(7):
        t = time.perf_counter()
        vectorized()
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    n_loop = (300 // len(kernels) + 1) * len(kernels)
    loop_times = []
    for _ in range(3):
        t = time.perf_counter()
        per_pair()
        loop_times.append(time.perf_counter() - t)
    loop_rate = n_loop / statistics.median(loop_times)
    rate = pairs / med
    print(f"sim: {len(problems)} problems x {len(kernels)} kernels = {pairs} pairs")
    print(f"vectorized simulate: median {med * 1e3:.1f} ms over 7 runs -> {rate:,.0f} measurements/s "
          f"(target >= 50,000/s: {'MET' if rate >= 50_000 else 'NOT MET'})")
    print(f"per-pair loop baseline: {loop_rate:,.0f} measurements/s; vectorized is {rate / loop_rate:.0f}x faster")


if __name__ == "__main__":
    main()
