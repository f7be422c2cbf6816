"""stage=train: LightGBM on measured datasets (``ckheur.learn.trainer``); the bundle records how
and on what it was trained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain

OUTPUTS = ("oof.parquet", "cv_metrics.json")  # the out-of-fold predictions and CV metrics (the bundle goes to train.output)


def data_paths(cfg: Any, op: dict, arch: dict, explicit: list, problems: str) -> list[Path]:
    """Datasets to read: the explicit list, else this op's sweep dataset of a problem set."""
    from ckheur.data.dataset import dataset_dir
    from ckheur.measurements import resolve

    from ckheur.data.database import is_url

    paths = [str(p) if is_url(str(p)) else resolve(p) for p in explicit] or \
        [dataset_dir(cfg.paths.data, op, arch["name"], problems)]
    missing = [str(p) for p in paths if not isinstance(p, str) and not p.exists()]
    if missing:
        raise StageError(f"dataset not found: {', '.join(missing)}; run stage=sweep (problems={problems}) "
                         "first, or name datasets / CK CSVs with data.paths=[...]")
    return paths


def candidates(cfg: Any) -> list:
    """The configured model (objective, features.*, model.prior, model.bagging_seeds, model.distill_trees),
    then train.compare's."""
    from ckheur.learn.trainer import Candidate

    bagging, distill = int(cfg.model.bagging_seeds), int(cfg.model.distill_trees)
    first = Candidate(str(cfg.model.objective), bool(cfg.features.analytic), str(cfg.model.prior) == "analytic",
                      str(cfg.features.engine), bagging, distill=distill)
    out = [first]
    for text in cfg.train.compare:
        c = Candidate.parse(str(text), bagging, distill)
        if c not in out:
            out.append(c)
    return out


def options(cfg: Any) -> Any:
    """The train node as the trainer's options."""
    from ckheur.learn.trainer import TrainOptions

    t = cfg.train
    return TrainOptions(folds=int(t.folds), inner_valid_fraction=float(t.inner_valid_fraction), seeds=int(t.seeds),
                        seed=int(cfg.seed), cluster_cv=bool(t.cluster_cv), shape_clusters=int(t.shape_clusters),
                        select_by=str(t.select_by), choice=str(t.choice), partial=str(t.partial),
                        pairwise_weight=float(t.pairwise_weight), sim_calibration=str(t.sim_calibration),
                        calibration_iterations=int(t.calibration_iterations),
                        warm_start_trees=int(t.warm_start_trees), regime_cv=tuple(str(r) for r in t.regime_cv),
                        budget_loss_pts=float(t.budget_loss_pts),
                        target_weight=(1.0 if t.across_gpus else None) if t.target_weight is None
                        else float(t.target_weight))  # across_gpus: no GPU is the target


def check_output(out: Path, overwrite: bool) -> None:
    """Refuse to train into a folder that already holds a bundle unless train.overwrite=true."""
    from ckheur.learn.bundle import REQUIRED

    if not overwrite and any((out / name).exists() for name in REQUIRED):
        raise StageError(f"train: {out} already holds a bundle; pass train.overwrite=true to replace it, "
                         "or train.output=<another folder>")


def run(cfg: Any, ctx: Context) -> dict:
    """Train (or warm-start) a model bundle for the op/dtype/arch on the configured data."""
    from ckheur.job import Job
    from ckheur.learn.trainer import check_remember, train_bundle

    from ckheur.stages.common import note_available

    job = Job.from_config(cfg)
    note_available(job)
    check_remember(job, bool(cfg.train.remember))  # before any data is read
    if cfg.train.screen and str(cfg.model.prior) == "analytic":
        raise StageError("train.screen=true: a model with an analytic prior (model.prior=analytic) needs every tree "
                         "for every candidate; drop one of the two")
    cands = candidates(cfg)
    paths = data_paths(cfg, job.op, job.arch, list(cfg.data.paths), cfg.problems.name)
    names = [str(p) for p in cfg.data.paths] or [str(p) for p in paths]  # as the user named them
    if cfg.train.output:
        out = Path(cfg.train.output)
    else:  # where the data's kind says: a model of simulated data never shadows a real one
        from ckheur.data.dataset import read_dataset

        simulated = "sim" in set(read_dataset(paths, dedupe=False, columns=["backend"])["backend"])
        name = job.across_gpus_model_name if cfg.train.across_gpus else job.model_name
        if name is None:
            raise StageError(f"train.across_gpus=true: the model name {job.model_name} does not end with the arch; "
                             "give train.output=<folder>")
        out = Path(cfg.paths.sim_models if simulated else cfg.paths.models) / name
    check_output(out, bool(cfg.train.overwrite))
    result = train_bundle(paths, job, out, model=plain(cfg.model), candidates=cands, options=options(cfg),
                          warm_start=cfg.train.warm_start, shard=plain(cfg.data.shard),
                          exclude_suspect=bool(cfg.data.exclude_suspect), mix_simulated=bool(cfg.data.mix_simulated), remember=bool(cfg.train.remember),
                          names=names, config=plain(cfg),
                          hardware=bool(cfg.features.hardware) or bool(cfg.train.across_gpus),
                          across_gpus=bool(cfg.train.across_gpus),
                          run_dir=ctx.output_dir)
    print(f"train: chose {result['chosen']} with {result['trees']} trees; "
          f"bundle ({'SIMULATED' if result['simulated'] else 'real'} data) -> {out}")
    if cfg.train.screen:
        from ckheur.selection.screening import BARS, NeedsEveryTree, screen_bundle

        try:
            choice = screen_bundle(out, seed=int(cfg.seed))
        except NeedsEveryTree:  # train.compare chose a candidate with the prior
            print("train: no screen: the chosen model has an analytic prior, which needs every tree for every candidate")
        else:
            print("train: " + (choice.describe() if choice is not None else
                               f"no screen keeps the whole model's top-1 on {BARS}: every tree ranks every candidate"))
    return {"bundle": result["bundle"], "cv": result["cv"]}
