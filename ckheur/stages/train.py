"""stage=train: LightGBM on measured datasets; grouped CV picks the tree count (and, with
train.compare, the objective/features); the bundle records how and on what it was trained."""

from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ckheur.stages import Context, StageError, plain

# Leave-shape-family-out CV needs families worth the name: at least this many problems per
# family (5 families: 50 problems); below it candidates are compared by grouped CV.
FAMILY_MIN_PROBLEMS = 10


def data_paths(cfg: Any, op: dict, arch: dict, explicit: list, problems: str) -> list[Path]:
    """Datasets to read: the explicit list, else this op's sweep dataset of a problem set."""
    from ckheur.dataset import dataset_dir

    from ckheur.measurements import resolve

    paths = [resolve(p) for p in explicit] or [dataset_dir(cfg.paths.data, op, arch["name"], problems)]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise StageError(f"dataset not found: {', '.join(missing)}; run stage=sweep (problems={problems}) "
                         "first, or name datasets / CK CSVs with data.paths=[...]")
    return paths


def _candidates(cfg: Any) -> list[tuple[str, bool, bool]]:
    """(objective, analytic features, analytic prior) of the configured model, then train.compare's."""
    from ckheur.models.training import OBJECTIVES

    first = (str(cfg.model.objective), bool(cfg.features.analytic), str(cfg.model.prior) == "analytic")
    out = [first]
    for c in cfg.train.compare:
        obj, *flags = str(c).split("+")
        if obj not in OBJECTIVES or not set(flags) <= {"analytic", "prior"} or len(set(flags)) < len(flags):
            raise StageError(f"train.compare entry {c!r}: use an objective ({', '.join(OBJECTIVES)}) optionally "
                             "followed by +analytic (simulator features) and/or +prior (simulator as prior)")
        cand = (obj, "analytic" in flags, "prior" in flags)
        if cand not in out:
            out.append(cand)
    return out


def _name(cand: tuple[str, bool, bool]) -> str:
    return cand[0] + ("+analytic" if cand[1] else "") + ("+prior" if cand[2] else "")


def run(cfg: Any, ctx: Context) -> dict:
    """Train (or warm-start) a model bundle for the op/dtype/arch on the configured data."""
    from ckheur.dataset import keep_shard, read_dataset
    from ckheur.features import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.models.bundle import incompatibilities, load_bundle, save_bundle
    from ckheur.models.fold_calibration import calibration_overlap, fold_calibrated
    from ckheur.models.prior import pair_prior, prior_spec
    from ckheur.models.training import build_table, cross_validate, fit, leave_family_out_cv
    from ckheur.ops import get_family
    from ckheur.parts import sha256_of
    from ckheur.sim import load_params
    from ckheur.threads import lightgbm
    from ckheur.version import __version__

    lgb = lightgbm()
    op, arch, model = plain(cfg.op), plain(cfg.arch), plain(cfg.model)
    engine = get_engine(op["family"])
    paths = data_paths(cfg, op, arch, list(cfg.data.paths), cfg.problems.name)
    df = keep_shard(read_dataset(paths), plain(cfg.data.shard), op["family"])
    pool = enumerate_pool(op, arch, cfg.kernels.filter).kernels
    given = [str(p) for p in cfg.data.paths] or [str(p) for p in paths]  # as the user named them
    hashes = {g: sha256_of(p) for g, p in zip(given, paths)}
    sim_params = load_params()

    tables: dict[bool, Any] = {}

    def table(analytic: bool):
        if analytic not in tables:
            tables[analytic] = build_table(df, op, arch, pool, engine, sim_params if analytic else None,
                                           bool(cfg.data.exclude_suspect))
        return tables[analytic]

    t0 = time.perf_counter()
    base = table(bool(cfg.features.analytic))
    rep = base.report
    measured = sorted(set(base.kid.tolist()))
    candidates = [base.kernels[i] for i in measured]
    print(f"train: {rep['rows_used']} rows, {rep['problems']} problems, {rep['kernels_measured']} of {rep['pool']} "
          f"pool kernels measured (only those become candidates) from {', '.join(map(str, paths))}")
    if rep["rows_kernel_not_in_pool"]:
        print(f"train: {rep['rows_kernel_not_in_pool']} rows skipped: kernel not in the legal pool "
              f"(e.g. {', '.join(rep['kernels_not_in_pool'][:3])})")
    if rep["rows_not_used_by_status"]:
        print(f"train: rows skipped by status: {rep['rows_not_used_by_status']}")
    partial, pair_weight = str(cfg.train.partial), float(cfg.train.pairwise_weight)
    if rep["problems_partly_measured"] and not rep["problems_fully_measured"]:
        print("train: no problem is fully measured: CV efficiency is against each problem's best measured kernel "
              "(optimistic where the best kernel was not timed)")
    if rep["problems_partly_measured"]:
        print(f"train: {rep['problems_partly_measured']} of {rep['problems']} problems are partly measured "
              f"(tuning databases, interrupted sweeps); target for them: train.partial={partial}"
              + (" (applies to the relative objective)" if str(cfg.model.objective) != "relative" else ""))
    backends = sorted(set(df.backend.dropna()))
    simulated = "sim" in backends

    warm = load_bundle(cfg.train.warm_start) if cfg.train.warm_start else None
    seed = int(cfg.seed)
    cat = lambda names: [names.index(c) for c in engine.CATEGORICAL]  # noqa: E731
    cands = _candidates(cfg)
    # Real measurements the simulator's parameters were fitted on: the calibration file itself, an
    # import of it (imports.json), or any data holding its problems (subsets, replays, re-exports).
    # Only candidates that use the simulator can leak, so only they make it worth looking.
    fitted_on, leaky_data = 0, False
    if warm is None and any(c[1] or c[2] for c in cands):
        fitted_with = _calibration_hashes()
        fitted_on = 0 if simulated else calibration_overlap(base.problems, op, arch, fitted_with)
        leaky_data = bool(fitted_with & _origins(paths, hashes.values())) or fitted_on > 0
    family = get_family(op["family"])
    prior = prior_spec({**model, "prior": "analytic"}, family, sim_params) if any(c[2] for c in cands) else None
    with_prior: dict[tuple, Any] = {}

    def cand_table(cand: tuple[str, bool, bool]) -> Any:
        """The table of a candidate, with its prior when it has one."""
        objective, analytic, use_prior = cand
        tb = table(analytic)
        if not use_prior:
            return tb
        if (objective, analytic) not in with_prior:
            with_prior[(objective, analytic)] = dataclasses.replace(tb, prior=pair_prior(
                engine, tb.problems, tb.kernels, tb.pid, tb.kid, arch, op["direction"], prior, objective))
        return with_prior[(objective, analytic)]

    cv_kw = dict(partial=partial, pair_weight=pair_weight)
    folds, inner = int(cfg.train.folds), float(cfg.train.inner_valid_fraction)
    seeds = [seed + i for i in range(max(1, int(cfg.train.seeds)))] if len(cands) > 1 else [seed]
    clusters = max(folds, int(cfg.train.family_clusters))
    families_ok = len(base.problems) >= FAMILY_MIN_PROBLEMS * clusters
    if cfg.train.family_cv and not families_ok:
        print(f"train: leave-shape-family-out CV skipped: {len(base.problems)} problems, fewer than "
              f"{FAMILY_MIN_PROBLEMS} per family x {clusters} families")
    family_cv = bool(cfg.train.family_cv) and families_ok
    select_by = str(cfg.train.select_by) if family_cv else "grouped_cv"
    if len(cands) > 1 and select_by != str(cfg.train.select_by):
        print("train: selecting by grouped CV (no leave-shape-family-out CV)")
    guard = str(cfg.train.sim_calibration) == "fold"
    iterations = int(cfg.train.calibration_iterations)

    def recalibrated(cand: tuple[str, bool, bool]) -> bool:
        """Does the candidate's CV recalibrate the simulator in each fold (the leakage guard)?"""
        return guard and leaky_data and (cand[1] or cand[2])

    if any(map(recalibrated, cands)) and warm is None:
        if iterations < 1:
            raise StageError(f"train.calibration_iterations={iterations}: must be at least 1 (search steps of each "
                             "fold's calibration; 2000 by default)")
        print(f"train: the simulator was calibrated on this data ({fitted_on} of its {len(base.problems)} problems): "
              f"each CV fold of the candidates that use it recalibrates it on its training problems ({iterations} "
              f"steps; train.sim_calibration=fold)")

    def fold_kw(cand: tuple[str, bool, bool], tb: Any, sd: int) -> dict:
        """CV options of a candidate: with the leakage guard, a per-fold calibrated table."""
        if not recalibrated(cand):
            return cv_kw
        return {**cv_kw, "fold_table": fold_calibrated(tb, engine, arch, op["direction"], sim_params, cand[1],
                                                       prior if cand[2] else None, cand[0], iterations, sd)}

    results = []
    chosen = cands[0]
    if warm is None:
        for cand in cands:
            tb = cand_table(cand)
            runs = [cross_validate(tb, model, cand[0], cat(tb.feature_names), folds, inner, sd, **fold_kw(cand, tb, sd))
                    for sd in seeds]
            fam = [leave_family_out_cv(tb, model, cand[0], cat(tb.feature_names), folds, inner, clusters, sd,
                                       **fold_kw(cand, tb, sd)) for sd in seeds] if family_cv else []
            leaky = (cand[1] or cand[2]) and leaky_data and not guard
            results.append({"objective": cand[0], "analytic": cand[1], "prior": cand[2], "leaky": leaky,
                            "fold_calibrated": recalibrated(cand),
                            "seeds": seeds, "oof": runs[0]["oof"], "fold": runs[0]["fold"],
                            "best_iterations": [b for r in runs for b in r["best_iterations"]],
                            "metrics": runs[0]["metrics"], "grouped_cv": _seed_mean([r["metrics"] for r in runs]),
                            "family_cv": _seed_mean([r["metrics"] for r in fam]) if fam else None,
                            "family_cv_detail": {"clusters": clusters, "cluster_sizes": fam[0]["cluster_sizes"],
                                                 "best_iterations": fam[0]["best_iterations"], **fam[0]["metrics"]}
                            if fam else None})
            _print_candidate(results[-1], len(seeds))
        if len(cands) > 1:
            selectable = [r for r in results if not r["leaky"]] or results
            best = max(selectable, key=lambda r: (r[select_by]["mean"], r[select_by]["p10"]))
            chosen = (best["objective"], best["analytic"], best["prior"])
            print(f"train: chose {_name(chosen)} by {select_by.replace('_', ' ')} (mean, then P10; averaged over seeds "
                  f"{', '.join(map(str, seeds))})")
    objective, analytic, use_prior = chosen
    tb = cand_table(chosen)
    names = tb.feature_names
    spec = {"engine": op["family"], "encoding_version": engine.ENCODING_VERSION, "feature_names": names,
            "categorical": list(engine.CATEGORICAL), "analytic": analytic,
            "analytic_params": sim_params if analytic else None, "objective": objective,
            "prior": prior if use_prior else None, "arch": arch,
            "op": {"family": op["family"], "direction": op["direction"], "dtype": op["dtype"]},
            "op_config": op, "ckheur_version": __version__}
    everything = np.arange(len(tb.X))
    if warm is not None:
        why = incompatibilities(warm.spec, spec)
        if why:
            raise StageError(f"train.warm_start={cfg.train.warm_start} is incompatible: " + "; ".join(why))
        n_trees = int(cfg.train.warm_start_trees)
        booster = fit(tb, everything, model, objective, cat(names), seed, n_trees, init_model=warm.booster, **cv_kw)
        print(f"train: warm start from {warm.path}: {warm.booster.current_iteration()} trees + {n_trees} on this data")
        cv_metrics = {"warm_start_from": str(warm.path), "previous": warm.cv_metrics}
    else:
        picked = next(r for r in results if (r["objective"], r["analytic"], r["prior"]) == chosen)
        n_trees = max(10, int(np.median(picked["best_iterations"])))
        booster = fit(tb, everything, model, objective, cat(names), seed, n_trees, **cv_kw)
        cv_metrics = {
            "chosen": {"objective": objective, "analytic": analytic, "prior": spec["prior"] and
                       {k: v for k, v in spec["prior"].items() if k != "params"}, "trees": n_trees},
            "selected_by": select_by if len(cands) > 1 else None, "seeds": seeds,
            "folds": folds, "group_key": "full problem identity (every field) within one direction",
            "early_stopping": f"inner group split ({inner:.0%}) of the training folds",
            "data_backend": backends, "simulated": simulated, "partial_target": partial,
            "problems_fully_measured": rep["problems_fully_measured"],
            "problems_partly_measured": rep["problems_partly_measured"], "family_cv": picked["family_cv_detail"],
            "family_cv_seed_mean": picked["family_cv"], "grouped_cv_seed_mean": picked["grouped_cv"],
            "candidates": [{"objective": r["objective"], "analytic": r["analytic"], "prior": r["prior"],
                            "leaky": r["leaky"], "fold_calibrated": r["fold_calibrated"],
                            "best_iterations": r["best_iterations"], **r["metrics"],
                            "grouped_cv_seed_mean": r["grouped_cv"], "family_cv_seed_mean": r["family_cv"]}
                           for r in results]}
        _write_oof(ctx.output_dir, tb, picked)
    tflops_booster = None
    if objective != "regression_log":
        tflops_booster = fit(tb, everything, model, "regression_log", cat(names), seed, int(model["companion_trees"]))
    gains = booster.feature_importance(importance_type="gain")
    importances = dict(sorted(zip(names, map(float, gains)), key=lambda kv: -kv[1]))
    out = Path(cfg.train.output) if cfg.train.output else \
        Path(cfg.paths.sim_models if simulated else cfg.paths.models) / op["model_name"]
    manifest = {
        "datasets": [{"path": p, "sha256": h} for p, h in hashes.items()], "rows": rep["rows_used"],
        "problems": rep["problems"], "kernels": len(candidates), "data_backend": backends,
        "data_kind": "simulated" if simulated else "real", "skipped": {k: v for k, v in rep.items() if k.startswith("rows_")},
        "config": plain(cfg), "versions": _versions(lgb), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "train_seconds": round(time.perf_counter() - t0, 2), "command": sys.argv}
    save_bundle(out, booster, tflops_booster, spec, candidates, cv_metrics, importances, manifest)
    print(f"train: chose {_name(chosen)} with {booster.current_iteration()} trees; "
          f"bundle ({'SIMULATED' if simulated else 'real'} data) -> {out}")
    return {"bundle": str(out), "cv": cv_metrics}


def _seed_mean(metrics: list[dict]) -> dict:
    """Efficiency mean and P10, top-1, averaged over seeds, with their spread (sd over seeds)."""
    mean = [m["efficiency"]["mean"] for m in metrics]
    p10 = [m["efficiency"]["p10"] for m in metrics]
    top1 = [m["top1"] for m in metrics]
    return {"mean": float(np.mean(mean)), "p10": float(np.mean(p10)), "top1": float(np.mean(top1)),
            "mean_sd": float(np.std(mean)), "p10_sd": float(np.std(p10)), "seeds": len(metrics)}


def _print_candidate(r: dict, n_seeds: int) -> None:
    e, g, f = r["metrics"]["efficiency"], r["grouped_cv"], r["family_cv"]
    seeds = f" (mean of {n_seeds} seeds)" if n_seeds > 1 else ""
    print(f"train: CV {_name((r['objective'], r['analytic'], r['prior']))}: grouped mean {100 * g['mean']:.2f}% "
          f"P10 {100 * g['p10']:.2f}%{seeds}; median {100 * e['median']:.2f}% min {100 * e['min']:.2f}% top-1 "
          f"{100 * r['metrics']['top1']:.1f}%, trees {r['best_iterations'][:5]}"
          + (f"; leave-shape-family-out mean {100 * f['mean']:.2f}% P10 {100 * f['p10']:.2f}%"
             + (f" (sd {100 * f['mean_sd']:.2f} / {100 * f['p10_sd']:.2f})" if n_seeds > 1 else "") if f else "")
          + ("  [simulator calibrated on this data: optimistic, not selectable]" if r["leaky"] else "")
          + ("  [simulator recalibrated in each fold]" if r["fold_calibrated"] else ""))


def _origins(paths: list[Path], hashes: Any) -> set[str]:
    """sha256 of the data read and of every file imported into the datasets read (imports.json)."""
    from ckheur.stages.import_record import read_record

    return set(hashes).union(*(read_record(p) for p in paths if p.is_dir()))


def _calibration_hashes() -> set[str]:
    from ckheur.config import load_option

    return set(load_option("backend/sim").get("calibration_sha256") or [])


def _write_oof(out_dir: Path, tb: Any, picked: dict) -> None:
    import pandas as pd

    from ckheur.files import make_folder, replacing, write_file

    make_folder(out_dir, "run folder")
    with replacing(out_dir / "oof.parquet", binary=True) as f:
        pd.DataFrame({"problem": tb.pid, "kernel": [tb.kernels[i].name for i in tb.kid], "tflops": tb.tflops,
                      "oof_score": picked["oof"], "fold": picked["fold"]}).to_parquet(f)
    write_file(out_dir / "cv_metrics.json", json.dumps(picked["metrics"], indent=2))


def _versions(lgb: Any) -> dict:
    import numpy
    import pandas

    return {"python": platform.python_version(), "lightgbm": lgb.__version__, "numpy": numpy.__version__,
            "pandas": pandas.__version__}
