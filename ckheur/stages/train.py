"""stage=train: LightGBM on measured datasets; grouped CV picks the tree count (and, with
train.compare, the objective/features); the bundle records how and on what it was trained."""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ckheur.stages import Context, StageError, plain


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


def _candidates(cfg: Any) -> list[tuple[str, bool]]:
    from ckheur.models.training import OBJECTIVES

    first = (str(cfg.model.objective), bool(cfg.features.analytic))
    out = [first]
    for c in cfg.train.compare:
        obj, _, flag = str(c).partition("+")
        if obj not in OBJECTIVES or flag not in ("", "analytic"):
            raise StageError(f"train.compare entry {c!r}: use an objective ({', '.join(OBJECTIVES)}) "
                             "optionally followed by +analytic")
        if (obj, flag == "analytic") not in out:
            out.append((obj, flag == "analytic"))
    return out


def run(cfg: Any, ctx: Context) -> dict:
    """Train (or warm-start) a model bundle for the op/dtype/arch on the configured data."""
    from ckheur.dataset import keep_shard, read_dataset
    from ckheur.features import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.models.bundle import incompatibilities, load_bundle, save_bundle
    from ckheur.models.training import build_table, cross_validate, fit
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
    leaky_data = bool(_calibration_hashes() & set(hashes.values()))
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
    results = []
    chosen = _candidates(cfg)[0]
    if warm is None:
        for objective, analytic in _candidates(cfg):
            tb = table(analytic)
            cv = cross_validate(tb, model, objective, cat(tb.feature_names), int(cfg.train.folds),
                                float(cfg.train.inner_valid_fraction), seed, partial=partial, pair_weight=pair_weight)
            leaky = analytic and leaky_data
            results.append({"objective": objective, "analytic": analytic, "leaky": leaky, **cv})
            e = cv["metrics"]["efficiency"]
            print(f"train: CV {objective}{'+analytic' if analytic else ''}: mean {100 * e['mean']:.2f}% median "
                  f"{100 * e['median']:.2f}% P10 {100 * e['p10']:.2f}% min {100 * e['min']:.2f}%, top-1 "
                  f"{100 * cv['metrics']['top1']:.1f}%, trees {cv['best_iterations']}"
                  + ("  [simulator calibrated on this data: optimistic, not selectable]" if leaky else ""))
        if cfg.train.compare:
            selectable = [r for r in results if not r["leaky"]] or results
            best = max(selectable, key=lambda r: (r["metrics"]["efficiency"]["mean"], r["metrics"]["efficiency"]["p10"]))
            chosen = (best["objective"], best["analytic"])
    objective, analytic = chosen
    tb = table(analytic)
    names = tb.feature_names
    spec = {"engine": op["family"], "encoding_version": engine.ENCODING_VERSION, "feature_names": names,
            "categorical": list(engine.CATEGORICAL), "analytic": analytic,
            "analytic_params": sim_params if analytic else None, "objective": objective, "arch": arch,
            "op": {"family": op["family"], "direction": op["direction"], "dtype": op["dtype"]},
            "op_config": op, "ckheur_version": __version__}
    everything = np.arange(len(tb.X))
    if warm is not None:
        why = incompatibilities(warm.spec, spec)
        if why:
            raise StageError(f"train.warm_start={cfg.train.warm_start} is incompatible: " + "; ".join(why))
        n_trees = int(cfg.train.warm_start_trees)
        booster = fit(tb, everything, model, objective, cat(names), seed, n_trees, init_model=warm.booster,
                      partial=partial, pair_weight=pair_weight)
        print(f"train: warm start from {warm.path}: {warm.booster.current_iteration()} trees + {n_trees} on this data")
        cv_metrics = {"warm_start_from": str(warm.path), "previous": warm.cv_metrics}
    else:
        picked = next(r for r in results if (r["objective"], r["analytic"]) == chosen)
        n_trees = max(10, int(np.median(picked["best_iterations"])))
        booster = fit(tb, everything, model, objective, cat(names), seed, n_trees, partial=partial,
                      pair_weight=pair_weight)
        family_cv = _family_cv(cfg, tb, model, objective, cat(names), seed, partial, pair_weight, picked) \
            if cfg.train.family_cv else None
        cv_metrics = {
            "chosen": {"objective": objective, "analytic": analytic, "trees": n_trees},
            "folds": int(cfg.train.folds), "group_key": "full problem identity (every field) within one direction",
            "early_stopping": f"inner group split ({cfg.train.inner_valid_fraction:.0%}) of the training folds",
            "data_backend": backends, "simulated": simulated, "partial_target": partial,
            "problems_fully_measured": rep["problems_fully_measured"],
            "problems_partly_measured": rep["problems_partly_measured"], "family_cv": family_cv,
            "candidates": [{"objective": r["objective"], "analytic": r["analytic"], "leaky": r["leaky"],
                            "best_iterations": r["best_iterations"], **r["metrics"]} for r in results]}
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
    print(f"train: chose {objective}{'+analytic' if analytic else ''} with {booster.current_iteration()} trees; "
          f"bundle ({'SIMULATED' if simulated else 'real'} data) -> {out}")
    return {"bundle": str(out), "cv": cv_metrics}


def _family_cv(cfg: Any, tb: Any, model: dict, objective: str, categorical: list[int], seed: int, partial: str,
               pair_weight: float, picked: dict) -> dict | None:
    """Leave-shape-family-out CV: folds of whole clusters of problems in log problem space, so
    each test fold holds shapes unlike the training ones. It estimates how far to trust the
    model on a new workload, beside the grouped CV (which tests on neighbours of training shapes)."""
    from ckheur.models.training import cross_validate
    from ckheur.problems.space import shape_families

    folds = int(cfg.train.folds)
    clusters = max(folds, int(cfg.train.family_clusters))
    if len(tb.problems) < clusters:
        print(f"train: leave-shape-family-out CV skipped: {len(tb.problems)} problems, fewer than {clusters} clusters")
        return None
    fam = shape_families(tb.problems, clusters, seed)
    cv = cross_validate(tb, model, objective, categorical, folds, float(cfg.train.inner_valid_fraction), seed,
                        groups=fam, partial=partial, pair_weight=pair_weight)
    e, g = cv["metrics"]["efficiency"], picked["metrics"]["efficiency"]
    print(f"train: leave-shape-family-out CV ({clusters} clusters in log problem space, {folds} folds): mean "
          f"{100 * e['mean']:.2f}% median {100 * e['median']:.2f}% P10 {100 * e['p10']:.2f}% min {100 * e['min']:.2f}% "
          f"(grouped CV: mean {100 * g['mean']:.2f}%, P10 {100 * g['p10']:.2f}%); expect new workloads between the two")
    return {"clusters": clusters, "cluster_sizes": np.bincount(fam).tolist(), "best_iterations": cv["best_iterations"],
            **cv["metrics"]}


def _calibration_hashes() -> set[str]:
    from ckheur.config import load_option

    return set(load_option("backend/sim").get("calibration_sha256") or [])


def _write_oof(out_dir: Path, tb: Any, picked: dict) -> None:
    import pandas as pd

    out_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"problem": tb.pid, "kernel": [tb.kernels[i].name for i in tb.kid], "tflops": tb.tflops,
                  "oof_score": picked["oof"], "fold": picked["fold"]}).to_parquet(out_dir / "oof.parquet")
    (out_dir / "cv_metrics.json").write_text(json.dumps(picked["metrics"], indent=2))


def _versions(lgb: Any) -> dict:
    import numpy
    import pandas

    return {"python": platform.python_version(), "lightgbm": lgb.__version__, "numpy": numpy.__version__,
            "pandas": pandas.__version__}
