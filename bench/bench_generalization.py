#!/usr/bin/env python
"""Where the data is not: the CK forward model's CV figures on splits that hold out whole shape
regions, beside the random split, with their spread over model seeds (real gfx950 data).

Splits (each test fold holds problems unlike the training ones, except in ``random``):
- ``random``: grouped 5-fold CV (a problem is never split), the usual and most flattering figure;
- ``cluster``: 5 shape clusters (k-means in log problem space), one held out per fold;
- ``flops``: FLOPs terciles, one held out per fold (small / medium / large problems);
- ``spatial``: output size (Ho x Wo) terciles, one held out per fold.

    python bench/bench_generalization.py [--seeds 3] [--candidates relative+bag5 relative+bag5+distill150]
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REAL = "measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz"


def terciles(values: np.ndarray) -> np.ndarray:
    """0, 1, 2 per value: its third of the sorted values."""
    cuts = np.quantile(values, [1 / 3, 2 / 3])
    return np.searchsorted(cuts, values, side="right")


def split_groups(problems: list, seed: int) -> dict[str, tuple[np.ndarray | None, int]]:
    """Per split: a group per problem (None: each problem its own) and the number of folds."""
    from ckheur.problems.space import cluster_shapes

    flops = np.array([float(p.flops) for p in problems])
    spatial = np.array([float(p.Ho * p.Wo) for p in problems])
    return {"random": (None, 5), "cluster": (cluster_shapes(problems, 5, seed), 5),
            "flops": (terciles(np.log(flops)), 3), "spatial": (terciles(np.log(spatial)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--candidates", nargs="+", default=["relative", "relative+bag5", "relative+bag5+distill150"])
    ap.add_argument("--splits", nargs="+", default=["random", "cluster", "flops", "spatial"])
    ap.add_argument("overrides", nargs="*", help="config overrides (after --), e.g. model=relative_bagged")
    args = ap.parse_args()

    from ckheur.dataset import read_dataset
    from ckheur.features import get_engine
    from ckheur.job import Job
    from ckheur.models.trainer import Candidate
    from ckheur.models.training import build_table, cross_validate
    from ckheur.stages import compose_config, plain

    cfg = compose_config(["op=fwd", "arch=gfx950", "model=relative_bagged", *args.overrides])
    job, model = Job.from_config(cfg), plain(cfg.model)
    engine = get_engine(job.family.name)
    table = build_table(read_dataset([REAL]), job.op, job.arch, job.pool.kernels, engine, None)
    cat = [table.feature_names.index(c) for c in engine.CATEGORICAL if c in table.feature_names]
    groups = split_groups(table.problems, int(cfg.seed))
    print(f"{len(table.problems)} real problems x {len(set(table.kid.tolist()))} kernels; "
          f"{args.seeds} model seeds; model={cfg.model.objective} ({', '.join(args.overrides) or 'relative_bagged'})")
    header = " | ".join(f"{s} mean / P10 (sd)" for s in args.splits)
    print(f"\n| candidate | {header} |\n|---|" + "---|" * len(args.splits))
    for text in args.candidates:
        c = Candidate.parse(text)
        m = c.model(model)
        cells, t0 = [], time.perf_counter()
        for split in args.splits:
            g, folds = groups[split]
            runs = [cross_validate(table, m, c.objective, cat, folds, 0.15, int(cfg.seed) + s, groups=g,
                                   split_seed=int(cfg.seed))["metrics"]["efficiency"] for s in range(args.seeds)]
            means, p10s = [r["mean"] for r in runs], [r["p10"] for r in runs]
            cells.append(f"{100 * np.mean(means):.2f} / {100 * np.mean(p10s):.2f} "
                         f"({100 * np.std(means):.2f} / {100 * np.std(p10s):.2f})")
        print(f"| {c.name} | " + " | ".join(cells) + f" |  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
