#!/usr/bin/env python
"""Where the data is not: the CK forward model's CV figures on splits that hold out whole shape
regions, beside the random split, with their spread over model seeds (real gfx950 data).

Splits (each test fold holds problems unlike the training ones, except the random one), all run by
the trainer (``train.cluster_cv``, ``train.regime_cv``), so candidates using the simulator are
scored with it recalibrated in each fold (the leakage guard):
- random: grouped 5-fold CV (a problem is never split), the usual and most flattering figure;
- shape clusters: 5 clusters (k-means in log problem space), one held out per fold;
- FLOPs terciles: one held out per fold (small / medium / large problems);
- output-size terciles (Ho x Wo): one held out per fold.

    python bench/bench_generalization.py [--seeds 3] [--candidates relative relative+bag5 relative+prior]
        [-- model=relative_bagged ...]

Prints per candidate and split: mean / P10 efficiency over the held-out problems, averaged over
model seeds, with their standard deviations. Folds and clusters are fixed; only the models' seed
varies.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = "measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--candidates", nargs="+", default=["relative", "relative+bag5", "relative+bag5+distill150"])
    ap.add_argument("overrides", nargs="*", help="config overrides (after --), e.g. model=relative_bagged")
    args = ap.parse_args()

    from ckheur.data.dataset import read_dataset
    from ckheur.job import Job
    from ckheur.learn.trainer import Candidate, TrainOptions, train
    from ckheur.stages import compose_config, plain

    cfg = compose_config(["op=fwd", "arch=gfx950", "model=relative_bagged", "model.prior=none", *args.overrides])
    job, model = Job.from_config(cfg), plain(cfg.model)
    t0 = time.perf_counter()
    res = train(read_dataset([REAL]), job, model=model, candidates=[Candidate.parse(t, 1) for t in args.candidates],
                options=TrainOptions(seeds=args.seeds, seed=int(cfg.seed), regime_cv=("flops", "output_size")),
                # The simulator was calibrated on this very file: candidates using it recalibrate it per fold.
                leaky_data=lambda table: (True, len(table.problems)),
                log=lambda line: print(line, flush=True) if "CV" in line or "calibrat" in line else None)
    print(f"({time.perf_counter() - t0:.0f} s; {args.seeds} model seeds, fixed folds; "
          f"{', '.join(args.overrides) or 'model=relative_bagged'})\n")
    print("| candidate | random 5-fold | shape clusters | FLOPs terciles | output-size terciles |")
    print("| --- | --- | --- | --- | --- |")
    cell = lambda v: (f"{100 * v['mean']:.2f} / {100 * v['p10']:.2f} ({100 * v['mean_sd']:.2f} / "  # noqa: E731
                      f"{100 * v['p10_sd']:.2f})") if v else "-"
    for c in res.cv_metrics["candidates"]:
        regimes = c.get("regime_cv_seed_mean", {})
        print(f"| {c['candidate']} | {cell(c['grouped_cv_seed_mean'])} | {cell(c['cluster_cv_seed_mean'])} | "
              f"{cell(regimes.get('flops'))} | {cell(regimes.get('output_size'))} |")


if __name__ == "__main__":
    main()
