"""stage=train: LightGBM on measured datasets (``ckheur.models.trainer``); the bundle records how
and on what it was trained."""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any

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


def candidates(cfg: Any) -> list:
    """The configured model (objective, features.*, model.prior, model.bagging_seeds), then train.compare's."""
    from ckheur.models.trainer import Candidate

    bagging = int(cfg.model.bagging_seeds)
    first = Candidate(str(cfg.model.objective), bool(cfg.features.analytic), str(cfg.model.prior) == "analytic",
                      str(cfg.features.engine), bagging)
    out = [first]
    for text in cfg.train.compare:
        c = Candidate.parse(str(text), bagging)
        if c not in out:
            out.append(c)
    return out


def options(cfg: Any) -> Any:
    """The train node as the trainer's options."""
    from ckheur.models.trainer import TrainOptions

    t = cfg.train
    return TrainOptions(folds=int(t.folds), inner_valid_fraction=float(t.inner_valid_fraction), seeds=int(t.seeds),
                        seed=int(cfg.seed), family_cv=bool(t.family_cv), family_clusters=int(t.family_clusters),
                        select_by=str(t.select_by), choice=str(t.choice), partial=str(t.partial),
                        pairwise_weight=float(t.pairwise_weight), sim_calibration=str(t.sim_calibration),
                        calibration_iterations=int(t.calibration_iterations),
                        warm_start_trees=int(t.warm_start_trees))


def run(cfg: Any, ctx: Context) -> dict:
    """Train (or warm-start) a model bundle for the op/dtype/arch on the configured data."""
    from ckheur.dataset import keep_shard, read_dataset
    from ckheur.kernels import enumerate_pool
    from ckheur.models.bundle import load_bundle, save_bundle
    from ckheur.models.fold_calibration import calibration_overlap
    from ckheur.models.trainer import train
    from ckheur.parts import sha256_of
    from ckheur.sim import load_params
    from ckheur.threads import lightgbm

    op, arch, model = plain(cfg.op), plain(cfg.arch), plain(cfg.model)
    cands = candidates(cfg)
    warm = load_bundle(cfg.train.warm_start) if cfg.train.warm_start else None
    paths = data_paths(cfg, op, arch, list(cfg.data.paths), cfg.problems.name)
    df = keep_shard(read_dataset(paths), plain(cfg.data.shard), op["family"])
    pool = enumerate_pool(op, arch, cfg.kernels.filter).kernels
    given = [str(p) for p in cfg.data.paths] or [str(p) for p in paths]  # as the user named them
    hashes = {g: sha256_of(p) for g, p in zip(given, paths)}
    backends = sorted(set(df.backend.dropna()))
    simulated = "sim" in backends
    print(f"train: reading {', '.join(map(str, paths))}")

    def leaky_data(table: Any) -> tuple[bool, int]:
        """Is the simulator calibrated on this data (the calibration file itself, an import of it
        (imports.json), or data holding its problems: a subset, a replay, a re-export), and on how
        many of its problems?"""
        fitted_with = _calibration_hashes()
        fitted_on = 0 if simulated else calibration_overlap(table.problems, op, arch, fitted_with)
        return bool(fitted_with & _origins(paths, hashes.values())) or fitted_on > 0, fitted_on

    result = train(df, op=op, arch=arch, pool=pool, model=model, candidates=cands, options=options(cfg), warm=warm,
                   sim_params=load_params(), leaky_data=leaky_data, exclude_suspect=bool(cfg.data.exclude_suspect))
    cv_metrics = {**result.cv_metrics, "data_backend": backends, "simulated": simulated} if warm is None \
        else result.cv_metrics
    if result.oof is not None:
        _write_oof(ctx.output_dir, result.table, result.oof, result.cv_metrics)
    out = Path(cfg.train.output) if cfg.train.output else \
        Path(cfg.paths.sim_bundles if simulated else cfg.paths.bundles) / op["model_name"]
    rep = result.report
    manifest = {
        "datasets": [{"path": p, "sha256": h} for p, h in hashes.items()], "rows": rep["rows_used"],
        "problems": rep["problems"], "kernels": len(result.kernels), "data_backend": backends,
        "data_kind": "simulated" if simulated else "real", "skipped": {k: v for k, v in rep.items() if k.startswith("rows_")},
        "config": plain(cfg), "versions": _versions(lightgbm()), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "train_seconds": rep["train_seconds"], "command": sys.argv}
    save_bundle(out, result.booster, result.tflops_booster, result.spec, result.kernels, cv_metrics,
                result.importances, manifest)
    print(f"train: chose {result.chosen.name} with {result.booster.current_iteration()} trees; "
          f"bundle ({'SIMULATED' if simulated else 'real'} data) -> {out}")
    return {"bundle": str(out), "cv": cv_metrics}


def _origins(paths: list[Path], hashes: Any) -> set[str]:
    """sha256 of the data read and of every file imported into the datasets read (imports.json)."""
    from ckheur.importing import read_record

    return set(hashes).union(*(read_record(p) for p in paths if p.is_dir()))


def _calibration_hashes() -> set[str]:
    from ckheur.config import load_option

    return set(load_option("backend/sim").get("calibration_sha256") or [])


def _write_oof(out_dir: Path, tb: Any, oof: dict, cv_metrics: dict) -> None:
    import json

    import pandas as pd

    from ckheur.files import make_folder, replacing, write_file

    make_folder(out_dir, "run folder")
    with replacing(out_dir / "oof.parquet", binary=True) as f:
        pd.DataFrame({"problem": tb.pid, "kernel": [tb.kernels[i].name for i in tb.kid], "tflops": tb.tflops,
                      "oof_score": oof["oof"], "fold": oof["fold"]}).to_parquet(f)
    write_file(out_dir / "cv_metrics.json", json.dumps(cv_metrics, indent=2))


def _versions(lgb: Any) -> dict:
    import numpy
    import pandas

    return {"python": platform.python_version(), "lightgbm": lgb.__version__, "numpy": numpy.__version__,
            "pandas": pandas.__version__}
