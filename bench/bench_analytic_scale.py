#!/usr/bin/env python
"""How far the analytic fallback's absolute figures are from measurements: on the shipped real
gfx950 forward measurements (185 shapes x 20 kernels), the predicted TFLOPS of each selector's
pick divided by that kernel's measured TFLOPS, median over the problems whose pick was measured.

    python bench/bench_analytic_scale.py

The analytic model ranks the whole legal pool (60 kernels), so its pick is sometimes a kernel the
CSV did not measure: those problems are left out and counted. The shipped model was trained on
these problems (in sample): its ratio is a reference, not a held-out figure.
"""

from __future__ import annotations

import numpy as np


def main() -> int:
    """Print the median predicted / measured TFLOPS of each selector's pick."""
    import pandas as pd

    from ckheur.job import Job
    from ckheur.measurements import CK_GFX950_FWD
    from ckheur.selection.selector import Selector
    from ckheur.problems import problem_from_dict
    from ckheur.stages import compose_config

    job = Job.from_config(compose_config(["op=fwd", "arch=gfx950"]))
    selectors = {"analytic model": Selector.analytic(job.pool.kernels, job.arch, job.direction, job.dtype, op=job.op),
                 "shipped model": Selector.load("models/grouped_conv_fwd_bf16_gfx950")}
    raw = pd.read_csv(CK_GFX950_FWD)
    fields = ["N", "C", "K", "G", "Hi", "Wi", "Y", "X", "stride_h", "stride_w", "pad_h", "pad_w"]
    ratios: dict[str, list] = {name: [] for name in selectors}
    problems = 0
    for key, g in raw.groupby(fields):
        problems += 1
        p = problem_from_dict(dict(zip(fields, map(int, key))))
        # The CSV's older names leave out the default wave mode.
        measured = {n if n.endswith("wave") else f"{n}_intrawave": t for n, t in zip(g.kernel, g.tflops)}
        for name, sel in selectors.items():
            kernel, predicted = sel.rank(p, k=1)[0]
            if measured.get(kernel, 0) > 0:
                ratios[name].append(predicted / measured[kernel])
    for name, r in ratios.items():
        print(f"{name}: median predicted / measured TFLOPS of its pick {np.median(r):.2f}x over {len(r)} of "
              f"{problems} problems (P10 {np.percentile(r, 10):.2f}x, P90 {np.percentile(r, 90):.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
