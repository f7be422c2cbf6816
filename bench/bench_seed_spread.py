"""How much a model's CV figures move with its seed, and how much bagging (several seeds averaged
into one model, ``model.bagging_seeds``) steadies them, on the real gfx950 forward data.

Each candidate is cross-validated with ``--seeds`` model seeds on fixed folds and shape clusters
(``train.seed``'s), so the spread is the models' own: what retraining with another seed moves.

    python bench/bench_seed_spread.py                       # relative with 1, 5 and 10 seeds averaged
    python bench/bench_seed_spread.py --seeds 10 --candidates relative relative+bag5 relative+prior+bag5
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
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--candidates", nargs="+", default=["relative", "relative+bag5", "relative+bag10"])
    ap.add_argument("overrides", nargs="*", help="config overrides (after --), e.g. model.learning_rate=0.3")
    args = ap.parse_args()

    from ckheur.data.dataset import read_dataset
    from ckheur.job import Job
    from ckheur.learn.trainer import Candidate, TrainOptions, train
    from ckheur.stages import compose_config, plain

    cfg = compose_config(["op=fwd", "arch=gfx950", "model.prior=none", *args.overrides])
    job, model = Job.from_config(cfg), plain(cfg.model)
    df = read_dataset([REAL])
    t0 = time.perf_counter()
    cands = [Candidate.parse(t) for t in args.candidates]
    res = train(df, job, model=model, candidates=cands, options=TrainOptions(seeds=args.seeds, seed=int(cfg.seed)),
                # The simulator was calibrated on this very file: candidates using it recalibrate it per fold.
                leaky_data=lambda table: (True, len(table.problems)),
                log=lambda line: print(line, flush=True) if "CV" in line else None)
    rows = [(c["candidate"], c["cluster_cv_seed_mean"], c["grouped_cv_seed_mean"]) for c in res.cv_metrics["candidates"]]
    print(f"({time.perf_counter() - t0:.0f} s)")
    base = rows[0]
    print(f"\n{args.seeds} model seeds, fixed folds and clusters; sd ratios against {base[0]}:\n")
    print("| candidate | cluster CV mean / P10 (sd) | grouped CV mean / P10 (sd) | cluster sd ratio (mean / P10) |")
    print("| --- | --- | --- | --- |")
    for text, f, g in rows:
        ratio = (f"{f['mean_sd'] / base[1]['mean_sd']:.2f} / {f['p10_sd'] / base[1]['p10_sd']:.2f}"
                 if base[1]["mean_sd"] and base[1]["p10_sd"] else "-")
        print(f"| {text} | {100 * f['mean']:.2f} / {100 * f['p10']:.2f} ({100 * f['mean_sd']:.2f} / "
              f"{100 * f['p10_sd']:.2f}) | {100 * g['mean']:.2f} / {100 * g['p10']:.2f} ({100 * g['mean_sd']:.2f} / "
              f"{100 * g['p10_sd']:.2f}) | {ratio} |")


if __name__ == "__main__":
    main()
