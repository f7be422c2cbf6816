#!/usr/bin/env python
"""How much does calibrating the simulator on the training data flatter simulator-based models?

The simulator's shipped parameters were fitted on the real gfx950 forward data, so CV of a
model that uses the simulator (as a prior or as features) on that same data scores it on
problems the simulator was fitted to. This bench measures the leak on a candidate (by default
the shipped forward recipe: relative with the simulator's features and prior, small trees), per
seed, under grouped and leave-cluster-out CV, with the simulator calibrated:

- fold:    in each CV fold, on the training folds' problems only (train.sim_calibration=fold);
- global:  once on all problems, with the same search from the same data-free start;
- shipped: conf/backend/sim.yaml's parameters as they are (fitted on all problems).

fold - global is the leak (same procedure, only the held-out problems differ); it prints the
mean difference over seeds with its sd. A plain candidate without the simulator is the reference.

    python bench/bench_calibration_leak.py [--seeds 0 1 2] [--iterations 2000] [--modes ...] [-- override ...]
    python bench/bench_calibration_leak.py -- features.analytic=false model.prior_scale=1.0
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

REAL = "measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz"
# The recipe shipped for the forward model (models/grouped_conv_fwd_bf16_gfx950).
MODES = ("shipped", "global", "fold")
RECIPE = ["model=relative_prior", "features.analytic=true"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--iterations", type=int, default=None, help="calibration search steps (train's default)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="calibrations to compare")
    ap.add_argument("overrides", nargs="*", help="config overrides applied after the shipped recipe")
    args = ap.parse_args()

    from ckheur.config import plain
    from ckheur.data.dataset import read_dataset
    from ckheur.families.engines import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.measurements import resolve
    from ckheur.learn.fold_calibration import fold_calibrated, table_calibration_data, with_sim_params
    from ckheur.learn.prior import prior_spec
    from ckheur.learn.training import build_table, cross_validate, leave_cluster_out_cv
    from ckheur.families import get_family
    from ckheur.sim import load_params
    from ckheur.sim_calibration import calibrate, fit_report, neutral_params
    from ckheur.stages import compose_config

    cfg = compose_config(["stage=train", "op=fwd", "arch=gfx950", f"data.paths=[{REAL}]", *RECIPE, *args.overrides])
    op, arch, model = plain(cfg.op), plain(cfg.arch), plain(cfg.model)
    engine, family = get_engine(op["family"]), get_family(op["family"])
    objective, analytic = str(model["objective"]), bool(cfg.features.analytic)
    folds, inner, clusters = int(cfg.train.folds), float(cfg.train.inner_valid_fraction), int(cfg.train.shape_clusters)
    iterations = args.iterations or int(cfg.train.calibration_iterations)
    shipped = load_params()
    prior = prior_spec(model, family, shipped)
    if prior is None and not analytic:
        print("the candidate uses no simulator (model.prior=none, features.analytic=false): nothing leaks")
        return 2
    pool = enumerate_pool(op, arch, cfg.kernels.filter).kernels
    plain_table = build_table(read_dataset([resolve(REAL)]), op, arch, pool, engine, None)
    cat = [plain_table.feature_names.index(c) for c in engine.CATEGORICAL]
    data = table_calibration_data(plain_table, engine, arch, op["direction"])

    def sim_table(params):
        return with_sim_params(plain_table, engine, arch, op["direction"], params, analytic, prior, objective)

    def both_cvs(tb, seed, mdl=model, **kw):
        """[grouped mean, grouped P10, family mean, family P10] of one seed."""
        g = cross_validate(tb, mdl, objective, cat, folds, inner, seed, **kw)["metrics"]["efficiency"]
        f = leave_cluster_out_cv(tb, mdl, objective, cat, folds, inner, clusters, seed, **kw)["metrics"]["efficiency"]
        return [g["mean"], g["p10"], f["mean"], f["p10"]]

    print(f"candidate: {objective}" + (" + analytic features" if analytic else "")
          + (f" + prior {prior['scale']}" if prior else "") + f"; {model['num_leaves']} leaves, min_data_in_leaf "
          f"{model['min_data_in_leaf']}, feature_fraction {model['feature_fraction']}, lambda_l2 {model['lambda_l2']}; "
          f"{len(plain_table.problems)} real problems; calibration {iterations} steps; seeds {args.seeds}")
    print(f"shipped parameters' fit on all problems: {_fit(fit_report(shipped, data))}")
    rows: dict[str, list] = {k: [] for k in ("plain (no simulator)", *args.modes)}
    plain_model = {**model, "prior": "none"}
    for seed in args.seeds:
        t0 = time.perf_counter()
        rows["plain (no simulator)"].append(both_cvs(plain_table, seed, plain_model))
        if "shipped" in rows:
            rows["shipped"].append(both_cvs(sim_table(shipped), seed))
        if "global" in rows:
            fitted, report = calibrate(neutral_params(shipped), data, iterations, seed)
            rows["global"].append(both_cvs(sim_table(fitted), seed))
            print(f"seed {seed}: global calibration's fit {_fit(report)}")
        if "fold" in rows:
            per_fold = fold_calibrated(plain_table, engine, arch, op["direction"], shipped, analytic, prior,
                                       objective, iterations, seed)
            rows["fold"].append(both_cvs(plain_table, seed, fold_table=per_fold))
        print(f"seed {seed} ({time.perf_counter() - t0:.0f} s): " + "; ".join(f"{k} {_cells(v[-1])}"
                                                                             for k, v in rows.items()))
    print("\n| calibration | grouped CV mean / P10 | leave-cluster-out CV mean / P10 |")
    print("| --- | --- | --- |")
    for k, v in rows.items():
        a, sd = 100 * np.mean(v, axis=0), 100 * np.std(v, axis=0)
        print(f"| {k} | {a[0]:.2f} / {a[1]:.2f} (sd {sd[0]:.2f} / {sd[1]:.2f}) "
              f"| {a[2]:.2f} / {a[3]:.2f} (sd {sd[2]:.2f} / {sd[3]:.2f}) |")
    for name, base in (("fold - global (the leak)", "global"), ("fold - shipped", "shipped"),
                       ("fold - plain", "plain (no simulator)")):
        if "fold" not in rows or base not in rows:
            continue
        d = 100 * (np.array(rows["fold"]) - np.array(rows[base]))
        m, s = d.mean(axis=0), d.std(axis=0)
        print(f"{name}, points, mean (sd over {len(args.seeds)} seeds): grouped {m[0]:+.2f} ({s[0]:.2f}) / "
              f"{m[1]:+.2f} ({s[1]:.2f}); family {m[2]:+.2f} ({s[2]:.2f}) / {m[3]:+.2f} ({s[3]:.2f})")
    return 0


def _cells(v: list) -> str:
    return f"{100 * v[0]:.2f}/{100 * v[1]:.2f} | {100 * v[2]:.2f}/{100 * v[3]:.2f}"


def _fit(r: dict) -> str:
    return (f"Spearman {r['median_spearman']:.3f}, sim-pick {100 * r['mean_eff_sim_pick']:.1f}% "
            f"(P10 {100 * r['p10_eff_sim_pick']:.1f}%)")


if __name__ == "__main__":
    sys.exit(main())
