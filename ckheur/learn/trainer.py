"""Training a model bundle: candidates cross-validated over seeds, one chosen, the final fit.

    from ckheur.learn.trainer import Candidate, TrainOptions, train
    result = train(df, job, model=model_cfg,
                   candidates=[Candidate("relative"), Candidate.parse("relative+analytic+prior")],
                   options=TrainOptions(seeds=5))
    result.booster, result.spec, result.cv_metrics      # what a bundle holds (models.bundle.save_bundle)

A candidate is an objective with its inputs: the feature set (ckheur's own, or CK's dispatcher
features: ``+ck``), the simulator's TFLOPS as features (``+analytic``), the simulator as a prior
the trees correct (``+prior``) and bagging (``+bag5``: five seeds averaged into one model). Each is
scored by grouped K-fold CV and, with enough problems, leave-cluster-out CV, over several
seeds; the choice rule (:func:`choose`) prefers the simpler candidate unless a richer one wins by
more than its spread over seeds on both.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ckheur.job import Job
from ckheur.learn.training import OBJECTIVES, TrainingError

# Leave-cluster-out CV needs clusters worth the name: at least this many problems per
# cluster (5 clusters: 50 problems); below it candidates are compared by grouped CV.
CLUSTER_MIN_PROBLEMS = 10
# ckheur's engine of the op family; CK's dispatcher features (grouped conv); MIOpen solvers by kind, not id
FEATURE_SETS = ("native", "ck", "kinds")
CHOICE_RULES = ("simpler", "best")
# features.hardware: the weight of each of the job's arch's rows against another GPU's (train.target_weight).
# With 1% or 5% of a GPU's pairs it beat weight 1 in all 24 bring-up rows (every direction, FP32 and FP16,
# both ways), by 0.7-8.4 points of top-1 and 0.5-6.9 of efficiency (docs/miopen-results.md, few-shot).
TARGET_WEIGHT = 20.0


@dataclass(frozen=True)
class Candidate:
    """A model to cross-validate: its objective and inputs."""

    objective: str
    analytic: bool = False  # the simulator's TFLOPS as features
    prior: bool = False  # the simulator's ranking as init score, the trees learn corrections
    features: str = "native"  # native (the family's engine), ck (CK's dispatcher features) or kinds (family+kinds)
    bagging: int = 1  # seeds averaged into one model
    leaves: int = 0  # num_leaves of this candidate (0: the model config's)
    learning_rate: float = 0.0  # learning rate of this candidate (0: the model config's)
    distill: int = 0  # > 0: a student of this many trees replaces the trained model (training.distill)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise TrainingError(f"objective {self.objective!r}: allowed values are {', '.join(OBJECTIVES)}")
        if self.features not in FEATURE_SETS:
            raise TrainingError(f"feature set {self.features!r}: allowed values are {', '.join(FEATURE_SETS)}")
        if self.features == "ck" and (self.analytic or self.prior):
            raise TrainingError("CK's feature set (+ck) takes neither +analytic nor +prior: CK's predictor has no "
                                "simulator")
        if self.bagging < 1:
            raise TrainingError(f"bagging {self.bagging}: must be >= 1")
        if self.distill < 0:
            raise TrainingError(f"distill {self.distill}: the student's trees, >= 1 (0: no distillation)")
        if self.leaves < 0 or self.leaves == 1 or not 0 <= self.learning_rate <= 1:
            raise TrainingError(f"leaves={self.leaves}, learning_rate={self.learning_rate}: leaves is 0 (the model "
                                "config's) or at least 2; learning_rate is 0 (the config's) or in (0, 1]")

    @classmethod
    def parse(cls, text: str, bagging: int = 1, distill: int = 0) -> "Candidate":
        """A candidate from ``objective[+analytic][+prior][+ck|+kinds][+bagN][+leavesN][+lrX][+distillN]``
        (train.compare's entries; leaves and lr override the model config's ``num_leaves`` and
        ``learning_rate``; distillN distills the model into a student of N trees)."""
        objective, *flags = str(text).split("+")
        known = {"analytic", "prior", "ck", "kinds"}
        numbered = {kind: [f for f in flags if re.fullmatch(pattern, f)] for kind, pattern in
                    (("bag", r"bag\d+"), ("leaves", r"leaves([2-9]|\d\d+)"), ("lr", r"lr(0?\.\d+|1(\.0*)?)"),
                     ("distill", r"distill[1-9]\d*"))}
        bad = [f for f in flags if f not in known and not any(f in v for v in numbered.values())]
        if objective not in OBJECTIVES or bad or len(set(flags)) < len(flags) or any(len(v) > 1 for v in numbered.values()) \
                or {"ck", "kinds"} <= set(flags):
            raise TrainingError(f"train.compare entry {text!r}: use an objective ({', '.join(OBJECTIVES)}) optionally "
                                "followed by +analytic (simulator features), +prior (simulator as prior), +ck (CK's "
                                "feature set) or +kinds (MIOpen solvers by kind), +bagN (N seeds averaged), +leavesN "
                                "(num_leaves), +lrX (learning rate) and +distillN (a student of N trees)")
        first = lambda kind, cut, cast, default: cast(numbered[kind][0][cut:]) if numbered[kind] else default  # noqa: E731
        features = next((f for f in ("ck", "kinds") if f in flags), "native")
        return cls(objective, "analytic" in flags, "prior" in flags, features,
                   first("bag", 3, int, bagging), first("leaves", 6, int, 0), first("lr", 2, float, 0.0),
                   first("distill", 7, int, distill))

    @property
    def name(self) -> str:
        return (self.objective + ("+analytic" if self.analytic else "") + ("+prior" if self.prior else "")
                + ("" if self.features == "native" else f"+{self.features}")
                + (f"+bag{self.bagging}" if self.bagging > 1 else "")
                + (f"+leaves{self.leaves}" if self.leaves else "") + (f"+lr{self.learning_rate:g}" if self.learning_rate else "")
                + (f"+distill{self.distill}" if self.distill else ""))

    def model(self, model: Mapping[str, Any]) -> dict:
        """The model settings this candidate trains with: the config's, with its own overrides."""
        return {**model, "bagging_seeds": self.bagging, "distill_trees": self.distill,
                **({"num_leaves": self.leaves} if self.leaves else {}),
                **({"learning_rate": self.learning_rate} if self.learning_rate else {})}

    @property
    def uses_simulator(self) -> bool:
        return self.analytic or self.prior


@dataclass
class TrainOptions:
    """How candidates are scored and chosen (the ``train`` config node)."""

    folds: int = 5
    inner_valid_fraction: float = 0.15
    seeds: int = 3  # seeds per candidate when there are several candidates
    seed: int = 0
    cluster_cv: bool = True
    shape_clusters: int = 5
    select_by: str = "cluster_cv"  # the estimate "best" chooses by, and the one "simpler" names first
    choice: str = "simpler"  # simpler: the simplest candidate unless another wins beyond its spread; best
    partial: str = "naive"
    pairwise_weight: float = 1.0
    sim_calibration: str = "fold"
    calibration_iterations: int = 2000
    warm_start_trees: int = 100
    regime_cv: tuple = ()  # size regimes (problems.space.SIZE_REGIMES) held out a third at a time, reported
    budget_loss_pts: float = 0.0  # > 0: cut the model at the fewest trees within this much mean efficiency (CV)
    target_weight: float | None = None  # hardware: the weight of each row of the job's arch (others: 1); None: 20


@dataclass
class Trained:
    """What :func:`train` produced: a bundle's content, and how it was chosen."""

    booster: Any
    tflops_booster: Any
    spec: dict
    kernels: list
    cv_metrics: dict
    importances: dict
    table: Any  # the chosen candidate's training table
    oof: dict | None  # the chosen candidate's out-of-fold scores: {"oof", "fold"} (None on a warm start)
    report: dict  # the training table's report: rows used, skipped, problems measured fully / partly
    chosen: Candidate


def engine_of(family: str, features: str) -> Any:
    """The feature engine module of a family's feature set."""
    from ckheur.families.engines import get_engine

    if features == "native":
        return get_engine(family)
    if features == "kinds":
        if family != "miopen":
            raise TrainingError(f"the kinds feature set (+kinds) describes MIOpen's solvers, not {family}'s kernels")
        return get_engine(f"{family}+kinds")
    if family != "grouped_conv":
        raise TrainingError(f"CK's feature set (+ck, features.engine=ck) is for grouped convolution, not {family}")
    return get_engine("ck_grouped_conv")


def union_pool(df: Any, op: Mapping[str, Any], arch: Mapping[str, Any]) -> list:
    """The kernels of the job's arch and of every arch of the op's rows in ``df`` (each arch's pool;
    MIOpen: its solver table), one of each name, in a stable order (a MIOpen solver's id)."""
    from ckheur.config import load_arch
    from ckheur.kernels import enumerate_pool

    rows = df[(df.direction == op["direction"]) & (df.dtype == op["dtype"])]
    out: dict = {}
    for cfg in [arch, *(load_arch(a) for a in sorted(set(rows.arch.astype(str)) - {arch["name"]}))]:
        for k in enumerate_pool(op, cfg).kernels:
            out.setdefault(k.name, k)
    return sorted(out.values(), key=lambda k: (getattr(k, "solver_id", 0), k.name))


def seed_summary(metrics: Sequence[Mapping[str, Any]]) -> dict:
    """Efficiency mean and P10, top-1, averaged over seeds, with their spread (sd over seeds)."""
    mean = [m["efficiency"]["mean"] for m in metrics]
    p10 = [m["efficiency"]["p10"] for m in metrics]
    top1 = [m["top1"] for m in metrics]
    return {"mean": float(np.mean(mean)), "p10": float(np.mean(p10)), "top1": float(np.mean(top1)),
            "mean_sd": float(np.std(mean)), "p10_sd": float(np.std(p10)), "seeds": len(metrics),
            "per_seed_mean": [float(x) for x in mean], "per_seed_p10": [float(x) for x in p10]}


def choose(results: Sequence[Mapping[str, Any]], rule: str = "simpler", select_by: str = "cluster_cv") -> int:
    """The index of the chosen result (dicts with ``grouped_cv``, ``cluster_cv`` seed summaries or
    None, ``complexity`` and ``leaky``).

    ``simpler``: start from the simplest candidate (fewest inputs; of the same inputs, the fewest
    leaves, then the one averaging most seeds, whose figures move least; then in listed order) and
    move to a richer one only when it beats the current choice by more than its own spread over
    seeds in mean efficiency, on cluster CV and grouped CV both (grouped CV alone without cluster
    CV): with a couple of hundred problems, a margin within the seed noise is not evidence. With
    one seed the spread is twice the standard error of the per-problem paired difference of the
    two candidates' out-of-fold efficiencies (``per_problem`` in the results). ``best``: the
    highest mean (then P10) by ``select_by``."""
    if rule not in CHOICE_RULES:
        raise TrainingError(f"train.choice={rule!r}: allowed values are {', '.join(CHOICE_RULES)}")
    usable = [i for i, r in enumerate(results) if not r["leaky"]] or list(range(len(results)))
    if rule == "best":
        key = select_by if all(results[i][select_by] for i in usable) else "grouped_cv"
        return max(usable, key=lambda i: (results[i][key]["mean"], results[i][key]["p10"]))
    order = sorted(usable, key=lambda i: (results[i]["complexity"], i))
    chosen = order[0]
    for i in order[1:]:
        estimates = [e for e in ("cluster_cv", "grouped_cv") if results[i][e] and results[chosen][e]]
        if all(results[i][e]["mean"] - results[chosen][e]["mean"] > _spread(results[i], results[chosen], e)
               for e in estimates):
            chosen = i
    return chosen


def _spread(result: Mapping[str, Any], other: Mapping[str, Any], estimate: str) -> float:
    """The margin a gain in mean efficiency must exceed: the spread over seeds, or with one seed
    twice the standard error of the paired per-problem difference (grouped CV's out-of-fold)."""
    if result[estimate].get("seeds", 1) > 1 or estimate != "grouped_cv" or result.get("per_problem") is None \
            or other.get("per_problem") is None:
        return result[estimate]["mean_sd"]
    diff = np.asarray(result["per_problem"]) - np.asarray(other["per_problem"])
    return float(2 * diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0


# Each numeric setting's lowest allowed value, and whether that value itself is allowed; the
# fractions are also at most 1. What LightGBM or scikit-learn would refuse with a traceback.
MODEL_RANGES = {"num_leaves": (2, True), "learning_rate": (0, False), "max_trees": (1, True),
                "early_stopping_rounds": (0, True), "min_data_in_leaf": (0, True), "feature_fraction": (0, False),
                "subsample": (0, False), "subsample_freq": (0, True), "lambda_l2": (0, True),
                "rank_label_power": (0, False), "companion_trees": (0, True), "companion_leaves": (2, True),
                "threads": (0, True), "prior_scale": (0, True), "bagging_seeds": (1, True), "distill_trees": (0, True),
                "distill_problems": (0, True), "distill_leaves": (2, True)}
TRAIN_RANGES = {"folds": (2, True), "inner_valid_fraction": (0, False), "seeds": (1, True), "shape_clusters": (2, True),
                "pairwise_weight": (0, False), "warm_start_trees": (0, True), "budget_loss_pts": (0, True)}
# (train.calibration_iterations is checked where a fold recalibrates the simulator: otherwise unused)
FRACTIONS = {"feature_fraction": True, "subsample": True, "inner_valid_fraction": False}  # may it be 1


def check_settings(model: Mapping[str, Any], options: TrainOptions) -> None:
    """TrainingError naming the first model.* or train.* number out of its range."""
    import math

    for group, values, ranges in (("model", model, MODEL_RANGES), ("train", vars(options), TRAIN_RANGES)):
        for key, (low, inclusive) in ranges.items():
            if key not in values:
                continue
            v = values[key]
            top = FRACTIONS.get(key)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
                and (v >= low if inclusive else v > low) and (top is None or (v <= 1 if top else v < 1))
            if not ok:
                bound = f"{'>=' if inclusive else '>'} {low}" + {None: "", True: " and <= 1", False: " and < 1"}[top]
                raise TrainingError(f"{group}.{key}={v}: must be a number {bound}")


def train(df: Any, job: Job, *, model: Mapping[str, Any], candidates: Sequence[Candidate], options: TrainOptions,
          warm: Any = None, leaky_data: Callable[[Any], tuple[bool, int]] | None = None, exclude_suspect: bool = False,
          hardware: bool = False, across_gpus: bool = False, log: Callable[[str], None] = print) -> Trained:
    """Cross-validate ``candidates`` on the measurements ``df`` (dataset rows) of the job (its op
    on its arch, over its kernel pool), choose one, and fit it on all the data (or add trees to
    ``warm``, a loaded bundle). ``leaky_data(table) -> (is the simulator calibrated on this data, on how many
    of its problems)`` turns the leakage guard on (``models.fold_calibration``). ``hardware``
    (features.hardware): the GPU's descriptors are features and every arch in ``df`` is trained
    on, so the model serves the job's arch even when ``df`` has no row of it. ``across_gpus``
    (train.across_gpus): with ``hardware``, the kernels are the union of the solver tables of the
    data's archs, each device's rows on its own table: one model for any GPU (``union_pool``)."""
    from ckheur.learn.bundle import incompatibilities
    from ckheur.learn.fold_calibration import fold_calibrated
    from ckheur.learn.prior import pair_prior, prior_spec
    from ckheur.families.hardware import DESCRIPTORS, WithHardware, with_hardware
    from ckheur.learn.training import (TREE_BUDGETS, build_table, build_table_across_archs, cross_validate, fit,
                                       leave_cluster_out_cv)
    from ckheur.problems.space import SIZE_REGIMES, regime_groups

    check_settings(model, options)
    bad = [r for r in options.regime_cv if r not in SIZE_REGIMES]
    if bad:
        raise TrainingError(f"train.regime_cv={list(options.regime_cv)}: allowed values are {', '.join(SIZE_REGIMES)}")
    if options.target_weight is not None and not hardware:
        raise TrainingError(f"train.target_weight={options.target_weight} weighs the job's arch against other GPUs' "
                            "rows: it needs features.hardware=true (one model across GPUs)")
    target_weight = TARGET_WEIGHT if options.target_weight is None else options.target_weight
    if not target_weight > 0:
        raise TrainingError(f"train.target_weight={target_weight}: must be > 0 (1: the job's arch weighs as much as "
                            "any other GPU; null: 20)")
    from ckheur.version import __version__

    t0 = time.perf_counter()
    family, op, arch, pool, sim_params = job.family, job.op, job.arch, job.pool.kernels, job.sim_params
    learned_op = getattr(family.kernels, "learned_op", None)  # what a family's op learns from the data (op.listed)
    if learned_op is not None:
        op = learned_op(df, op)
    if across_gpus:
        if not hardware:
            raise TrainingError("train.across_gpus=true: a model for any GPU needs the GPUs' descriptors as features "
                                "(features.hardware=true)")
        pool = union_pool(df, op, arch)
    tables: dict[tuple[str, bool], Any] = {}

    def engine(features: str) -> Any:
        base = engine_of(family.name, features)
        return with_hardware(base, op["dtype"]) if hardware else base

    def table(features: str, analytic: bool) -> Any:
        if (features, analytic) not in tables:
            params = sim_params if analytic else None
            tables[features, analytic] = build_table_across_archs(
                df, op, arch, pool, engine(features), params, exclude_suspect, target_weight, across_gpus) if hardware \
                else build_table(df, op, arch, pool, engine(features), params, exclude_suspect)
        return tables[features, analytic]

    first = candidates[0]
    base = table(first.features, first.analytic)
    rep = base.report
    _report_table(rep, options, model, log)
    seeds = [options.seed + i for i in range(max(1, options.seeds))] if len(candidates) > 1 else [options.seed]
    leaky, fitted_on = (False, 0)
    if warm is None and leaky_data is not None and any(c.uses_simulator for c in candidates):
        leaky, fitted_on = leaky_data(base)
    prior = prior_spec({**model, "prior": "analytic"}, family, sim_params) if any(c.prior for c in candidates) else None
    with_prior: dict[Candidate, Any] = {}

    def cand_table(c: Candidate) -> Any:
        tb = table(c.features, c.analytic)
        if not c.prior:
            return tb
        key = dataclasses.replace(c, bagging=1)
        if key not in with_prior:
            with_prior[key] = dataclasses.replace(tb, prior=pair_prior(
                engine(c.features), tb.problems, tb.kernels, tb.pid, tb.kid, arch, op["direction"],
                prior, c.objective))
        return with_prior[key]

    # Seeds vary the models only: the folds, clusters and early-stopping splits are train.seed's, so
    # the spread over seeds is the models' own (what a retrained model would vary by).
    cv_kw = {"partial": options.partial, "pair_weight": options.pairwise_weight, "split_seed": options.seed}
    folds, inner = options.folds, options.inner_valid_fraction
    clusters = max(folds, options.shape_clusters)
    clusters_ok = len(base.problems) >= CLUSTER_MIN_PROBLEMS * clusters
    if options.cluster_cv and not clusters_ok:
        log(f"train: leave-cluster-out CV skipped: {len(base.problems)} problems, fewer than "
            f"{CLUSTER_MIN_PROBLEMS} per cluster x {clusters} clusters")
    cluster_cv = options.cluster_cv and clusters_ok
    guard = options.sim_calibration == "fold"

    def recalibrated(c: Candidate) -> bool:
        """Does the candidate's CV recalibrate the simulator in each fold (the leakage guard)?"""
        return guard and leaky and c.uses_simulator

    if warm is None and any(map(recalibrated, candidates)):
        if options.calibration_iterations < 1:
            raise TrainingError(f"train.calibration_iterations={options.calibration_iterations}: must be at least 1 "
                                "(search steps of each fold's calibration; 2000 by default)")
        log(f"train: the simulator was calibrated on this data ({fitted_on} of its {len(base.problems)} problems): "
            f"each CV fold of the candidates that use it recalibrates it on its training problems "
            f"({options.calibration_iterations} steps; train.sim_calibration=fold)")

    def model_of(c: Candidate) -> dict:
        return c.model(model)

    def fold_kw(c: Candidate, tb: Any, sd: int) -> dict:
        """CV options of a candidate: with the leakage guard, a per-fold calibrated table."""
        if not recalibrated(c):
            return cv_kw
        return {**cv_kw, "fold_table": fold_calibrated(
            tb, engine(c.features), arch, op["direction"], sim_params, c.analytic,
            prior if c.prior else None, c.objective, options.calibration_iterations, sd)}

    results: list[dict] = []
    chosen = candidates[0]
    if warm is not None:  # more trees of the same kind: as many seeds averaged as the bundle has
        chosen = dataclasses.replace(chosen, bagging=int(warm.spec.get("bagging_seeds", 1)))
    else:
        for c in candidates:
            tb = cand_table(c)
            cat = [tb.feature_names.index(n) for n in engine(c.features).CATEGORICAL]
            log(f"train: cross-validating {c.name}: {folds} folds x {len(seeds)} seed(s)"
                + (", then leave-cluster-out" if cluster_cv else "")
                + (f", then regimes {', '.join(options.regime_cv)}" if options.regime_cv else "")
                + f" on {len(tb.problems)} problems ...")
            whole = int(model_of(c)["distill_trees"]) or int(model_of(c)["max_trees"])  # what a cut shortens
            cuts = [k for k in TREE_BUDGETS if k < whole] if options.budget_loss_pts > 0 else []
            runs = [cross_validate(tb, model_of(c), c.objective, cat, folds, inner, sd, cuts=cuts, **fold_kw(c, tb, sd))
                    for sd in seeds]
            fam = [leave_cluster_out_cv(tb, model_of(c), c.objective, cat, folds, inner, clusters, sd,
                                       **fold_kw(c, tb, sd)) for sd in seeds] if cluster_cv else []
            regimes = {name: seed_summary([cross_validate(tb, model_of(c), c.objective, cat, 3, inner, sd,
                                                          groups=regime_groups(tb.problems, name), **fold_kw(c, tb, sd))
                                           ["metrics"] for sd in seeds]) for name in options.regime_cv}
            results.append({
                "candidate": c, "leaky": c.uses_simulator and leaky and not guard, "fold_calibrated": recalibrated(c),
                "complexity": (len(tb.feature_names) + c.prior, model_of(c)["num_leaves"], -c.bagging), "seeds": seeds,
                "oof": runs[0]["oof"], "per_problem": _oof_efficiency(tb, runs[0]["oof"]),
                "fold": runs[0]["fold"], "best_iterations": [b for r in runs for b in r["best_iterations"]],
                "metrics": runs[0]["metrics"], "grouped_cv": seed_summary([r["metrics"] for r in runs]),
                "cluster_cv": seed_summary([r["metrics"] for r in fam]) if fam else None,
                "cluster_cv_detail": {"clusters": clusters, "cluster_sizes": fam[0]["cluster_sizes"],
                                     "best_iterations": fam[0]["best_iterations"], **fam[0]["metrics"]} if fam else None,
                "regime_cv": regimes, "cut_runs": [r["cut_metrics"] for r in runs], "oof_cut": runs[0]["oof_cut"],
                "teacher": runs[0]["teacher_metrics"], "target_cv": _target_cv(tb, runs[0]["oof"])})
            log(_candidate_line(results[-1], len(seeds)))
            if results[-1]["target_cv"]:
                t = results[-1]["target_cv"]
                log(f"train: CV on {t['arch']}'s own {t['problems']} problems (beside the other GPUs'): mean "
                    f"{100 * t['efficiency']['mean']:.2f}% P10 {100 * t['efficiency']['p10']:.2f}% top-1 "
                    f"{100 * t['top1']:.1f}%" + (" (partly measured: each pick against its problem's best measured "
                                                  "kernel)" if t["partly_measured"] else ""))
            cap = int(model_of(c)["max_trees"])
            capped = sum(b >= cap for b in results[-1]["best_iterations"])
            if 2 * capped >= len(results[-1]["best_iterations"]):  # the final model, of the median count, is capped too
                log(f"train: note: {c.name}: early stopping reached model.max_trees={cap} in {capped} of "
                    f"{len(results[-1]['best_iterations'])} CV fits, so its CV figure may be a floor; to know, train "
                    f"again with model.max_trees={2 * cap}")
        if len(candidates) > 1:
            pick = choose(results, options.choice, options.select_by if cluster_cv else "grouped_cv")
            chosen = results[pick]["candidate"]
            log(f"train: chose {chosen.name} by the {options.choice} rule over seeds {', '.join(map(str, seeds))} ("
                + ("the simplest candidate unless another wins by more than its spread (over seeds; with one seed "
                   "twice the paired per-problem standard error) on "
                   + ("cluster and grouped CV" if cluster_cv else "grouped CV") if options.choice == "simpler" else
                   f"highest mean, then P10, of {(options.select_by if cluster_cv else 'grouped_cv').replace('_', ' ')}")
                + ")")
    chosen_engine = engine(chosen.features)
    fit_kw = {"partial": options.partial, "pair_weight": options.pairwise_weight}
    tb = cand_table(chosen)
    names = tb.feature_names
    cat = [names.index(n) for n in chosen_engine.CATEGORICAL]
    spec = {"engine": getattr(chosen_engine, "NAME", op["family"]), "encoding_version": chosen_engine.ENCODING_VERSION,
            "feature_names": names, "categorical": list(chosen_engine.CATEGORICAL), "analytic": chosen.analytic,
            "analytic_params": dict(sim_params) if chosen.analytic else None, "objective": chosen.objective,
            "prior": prior if chosen.prior else None, "arch": dict(arch),
            "op": {"family": op["family"], "direction": op["direction"], "dtype": op["dtype"]},
            "op_config": dict(op), "bagging_seeds": chosen.bagging, "ckheur_version": __version__}
    if hardware:  # the descriptors this bundle's rows end with (none where the family's features have them)
        spec["hardware"] = list(DESCRIPTORS) if isinstance(chosen_engine, WithHardware) else []
        trained = {a: r for a, r in tb.report.get("archs", {}).items() if "error" not in r}
        spec["trained_archs"] = sorted({r.get("arch", a) for a, r in trained.items()})
        spec["trained_devices"] = sorted(trained)  # e.g. MI60 (gfx906, 64 CUs): the devices its rows came from
        if across_gpus:  # its kernels: the union of the trained archs' tables; it serves any GPU without a bundle
            spec["across_gpus"] = True
    else:  # the device its rows were measured on (a sibling of the job's device may stand in for it)
        spec["trained_devices"] = sorted({*rep.get("devices", []), *(warm.spec.get("trained_devices", [])
                                                                    if warm is not None else [])})
    everything = np.arange(len(tb.X))
    oof = None
    if warm is not None:
        why = incompatibilities(warm.spec, spec)
        if why:
            raise TrainingError(f"train.warm_start={warm.path} is incompatible: " + "; ".join(why))
        n_trees = options.warm_start_trees
        booster = fit(tb, everything, model_of(chosen), chosen.objective, cat, options.seed, n_trees,
                      init_model=warm.booster, **fit_kw)
        log(f"train: warm start from {warm.path}: {warm.booster.current_iteration()} trees + {n_trees} on this data"
            + (f" (each of {chosen.bagging} seeds, averaged)" if chosen.bagging > 1 else ""))
        cv_metrics = {"warm_start_from": str(warm.path), "previous": warm.cv_metrics}
    else:
        picked = next(r for r in results if r["candidate"] == chosen)
        n_trees = max(10, int(np.median(picked["best_iterations"])))  # a student's: its teacher's
        final = model_of(chosen)
        student_trees = int(final["distill_trees"])
        budget = None
        if options.budget_loss_pts > 0:
            picked, cut, budget = _cut(picked, student_trees or n_trees, options.budget_loss_pts, tb, log)
            final = {**final, "distill_trees": cut} if student_trees else final
            n_trees = n_trees if student_trees else cut
        log(f"train: fitting {chosen.name} on all {len(tb.problems)} problems (up to {n_trees} trees) ...")
        booster = fit(tb, everything, final, chosen.objective, cat, options.seed, n_trees, **fit_kw)
        cv_metrics = _cv_metrics(chosen, spec, n_trees, results, picked, options, seeds, rep, cluster_cv, model)
        if picked["target_cv"]:
            cv_metrics["target_arch_cv"] = picked["target_cv"]
        if student_trees:
            cv_metrics["chosen"]["student_trees"] = int(final["distill_trees"])
            cv_metrics["chosen"]["student_leaves"] = int(final.get("distill_leaves", 15))
            cv_metrics["teacher"] = picked["teacher"]
        if budget is not None:
            cv_metrics["tree_budget"] = budget
        oof = {"oof": picked["oof"], "fold": picked["fold"]}
    tflops_booster = None
    if chosen.features == "ck" and chosen.objective == "relative":  # a companion CK's predictor can run
        from ckheur.formats import COMPANIONS, resolve

        tflops_booster = resolve(COMPANIONS["ck_companion"])(tb, booster, model, options.seed)
        spec["tflops_model"] = "ck_companion"
    elif chosen.objective != "regression_log":
        tflops_booster = fit_companion(tb, model, cat, options.seed)
    gains = booster.feature_importance(importance_type="gain")
    if warm is not None:
        gains = _warm_gains(gains, booster, warm, names)
    importances = dict(sorted(zip(names, map(float, gains)), key=lambda kv: -kv[1]))
    measured = sorted(set(tb.kid.tolist()))
    rep = {**rep, "train_seconds": round(time.perf_counter() - t0, 2)}
    return Trained(booster, tflops_booster, spec, [tb.kernels[i] for i in measured], cv_metrics, importances, tb, oof,
                   rep, chosen)


def _warm_gains(gains: np.ndarray, booster: Any, warm: Any, names: Sequence[str]) -> np.ndarray:
    """A warm-started booster's gain importances, its first trees' (the warm bundle's) taken from the
    bundle's feature_importances.json: a bundle's model text keeps no split gains
    (``bundle.compact_model_text``), so LightGBM counts them as 0 (a .gz bundle of an earlier
    version has them: they are replaced alike)."""
    import json

    try:
        recorded = json.loads((warm.path / "feature_importances.json").read_text())
    except (OSError, ValueError, RecursionError):
        recorded = {}
    recorded = recorded if isinstance(recorded, dict) else {}
    old = [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0
           for v in (recorded.get(n, 0.0) for n in names)]
    trees = warm.booster.num_trees()  # the booster's first trees (LightGBM reads iteration <= 0 as all)
    first = booster.feature_importance(importance_type="gain", iteration=trees) if trees else 0.0
    return gains - first + np.array(old)


def fit_companion(tb: Any, model: Mapping[str, Any], categorical: list[int], seed: int) -> Any:
    """The log-TFLOPS regressor that gives a ranking model its TFLOPS figures, on every row of
    ``tb``: ``model.companion_trees`` trees of ``model.companion_leaves`` leaves, one seed."""
    from ckheur.learn.training import fit

    companion = {**model, "bagging_seeds": 1, "distill_trees": 0,
                 "num_leaves": int(model.get("companion_leaves", model["num_leaves"]))}
    return fit(tb, np.arange(len(tb.X)), companion, "regression_log", categorical, seed, int(model["companion_trees"]))


def refit_companion(bundle_dir: str | Path, paths: Sequence[str | Path], *, leaves: int, trees: int | None = None,
                    log: Callable[[str], None] = print) -> dict:
    """Refit a bundle's TFLOPS companion on the datasets ``paths`` (its training data: the same
    measurements) with ``leaves`` leaves; the ranking model, its kernels and answers stay as they
    are, and the manifest records the refit. Returns what changed."""
    from ckheur.data.dataset import read_dataset
    from ckheur.learn.bundle import TFLOPS_MODEL, load_bundle, spec_engine, write_json, write_model
    from ckheur.learn.training import build_table
    from ckheur.parts import sha256_of

    b = load_bundle(bundle_dir)
    if b.tflops_booster is None or b.spec.get("tflops_model") or b.spec.get("hardware") or b.spec.get("analytic"):
        raise TrainingError(f"{b.path}: only a plain companion (no CK companion, hardware or simulator features) "
                            "is refitted here")
    engine, op = spec_engine(b.spec), dict(b.spec.get("op_config") or b.spec["op"])
    tb = build_table(read_dataset([Path(p) for p in paths]), op, b.spec["arch"], b.kernels, engine, None)
    model = {**b.manifest.get("config", {}).get("model", {}), "companion_leaves": leaves}
    model["companion_trees"] = int(trees or model.get("companion_trees", 100))
    cat = [tb.feature_names.index(n) for n in engine.CATEGORICAL]
    booster = fit_companion(tb, model, cat, int(b.manifest.get("config", {}).get("seed", 0)))
    timed = tb.tflops > 0  # the error of figures shown: rows with a time (a failed run's 0 is no figure)
    before = float(np.median(np.abs(b.tflops_booster.predict(tb.X[timed]) - np.log1p(tb.tflops[timed]))))
    after = float(np.median(np.abs(booster.predict(tb.X[timed]) - np.log1p(tb.tflops[timed]))))
    write_model(b.path, TFLOPS_MODEL, booster)
    refit = {"leaves": leaves, "trees": model["companion_trees"], "rows": int(len(tb.X)),
             "datasets": [{"path": str(p), "sha256": sha256_of(Path(p))} for p in paths],
             "median_abs_log_error": {"before": round(before, 4), "after": round(after, 4)}}
    write_json(b.path / "train_manifest.json", {**b.manifest, "companion_refit": refit})
    log(f"refit {b.path.name}: companion {leaves} leaves x {model['companion_trees']} trees on {len(tb.X)} rows; "
        f"median |log TFLOPS error| over the {int(timed.sum())} timed rows {before:.4f} -> {after:.4f}")
    return refit


def _report_table(rep: Mapping[str, Any], options: TrainOptions, model: Mapping[str, Any],
                  log: Callable[[str], None]) -> None:
    """Say what the training table holds and what was left out."""
    log(f"train: {rep['rows_used']} rows, {rep['problems']} problems, {rep['kernels_measured']} of {rep['pool']} "
        f"pool kernels measured (only those become candidates)")
    if rep.get("device"):
        log(f"train: {rep['device']}")
    if rep["rows_kernel_not_in_pool"]:
        log(f"train: {rep['rows_kernel_not_in_pool']} rows skipped: kernel not in the legal pool "
            f"(e.g. {', '.join(rep['kernels_not_in_pool'][:3])})")
    if rep["rows_not_used_by_status"]:
        log(f"train: rows skipped by status: {rep['rows_not_used_by_status']}")
    if rep["problems_partly_measured"] and not rep["problems_fully_measured"]:
        log("train: no problem is fully measured: CV efficiency is against each problem's best measured kernel "
            "(optimistic where the best kernel was not timed)")
    if rep["problems_partly_measured"]:
        log(f"train: {rep['problems_partly_measured']} of {rep['problems']} problems are partly measured "
            f"(tuning databases, interrupted sweeps); target for them: train.partial={options.partial}"
            + (" (applies to the relative objective)" if str(model["objective"]) != "relative" else ""))


def _cv_metrics(chosen: Candidate, spec: Mapping[str, Any], n_trees: int, results: Sequence[dict], picked: dict,
                options: TrainOptions, seeds: list[int], rep: Mapping[str, Any], cluster_cv: bool,
                model: Mapping[str, Any]) -> dict:
    """The bundle's record of how its model was scored and chosen (cv_metrics.json)."""
    def entry(r: dict) -> dict:
        c = r["candidate"]
        return {"candidate": c.name, "objective": c.objective, "analytic": c.analytic, "prior": c.prior,
                "features": c.features, "bagging": c.bagging, "leaves": c.leaves or None,
                "learning_rate": c.learning_rate or None, "leaky": r["leaky"],
                "fold_calibrated": r["fold_calibrated"], "best_iterations": r["best_iterations"], **r["metrics"],
                "grouped_cv_seed_mean": r["grouped_cv"], "cluster_cv_seed_mean": r["cluster_cv"],
                **({"regime_cv_seed_mean": r["regime_cv"]} if r.get("regime_cv") else {})}

    return {
        "chosen": {"candidate": chosen.name, "objective": chosen.objective, "analytic": chosen.analytic,
                   "features": chosen.features, "bagging": chosen.bagging,
                   "num_leaves": int(chosen.model(model)["num_leaves"]),
                   "learning_rate": float(chosen.model(model)["learning_rate"]),
                   "prior": spec["prior"] and {k: v for k, v in spec["prior"].items() if k != "params"},
                   "trees": n_trees},
        "choice_rule": options.choice if len(results) > 1 else None,
        "selected_by": (options.select_by if cluster_cv else "grouped_cv") if len(results) > 1 else None,
        "seeds": seeds, "folds": options.folds, "group_key": "full problem identity (every field) within one direction",
        "early_stopping": f"inner group split ({options.inner_valid_fraction:.0%}) of the training folds",
        "partial_target": options.partial, "problems_fully_measured": rep["problems_fully_measured"],
        "problems_partly_measured": rep["problems_partly_measured"], "cluster_cv": picked["cluster_cv_detail"],
        "cluster_cv_seed_mean": picked["cluster_cv"], "grouped_cv_seed_mean": picked["grouped_cv"],
        "candidates": [entry(r) for r in results]}


def _cut(picked: dict, n_trees: int, loss_pts: float, tb: Any, log: Any) -> tuple[dict, int, dict]:
    """The chosen candidate's CV record at its tree budget (train.budget_loss_pts), the final fit's
    tree count (a student's: the student's), and the budget's record: every cut's grouped-CV figures
    beside the uncut model's, or a student's beside its teacher's (the bound a student keeps)."""
    from ckheur.learn.training import tree_budget

    teacher = picked.get("teacher")
    reference, against = (teacher, "the teacher's") if teacher else (picked["metrics"], "the uncut model's")
    cut = tree_budget(reference, picked["cut_runs"][0], loss_pts)
    pick = lambda m: {"mean": m["efficiency"]["mean"], "p10": m["efficiency"]["p10"], "top1": m["top1"]}  # noqa: E731
    record = {"loss_pts": loss_pts, "uncut_trees": n_trees, "uncut_grouped_cv": picked["grouped_cv"],
              **({"teacher_grouped_cv": pick(teacher)} if teacher else {}),
              "curve": {str(k): pick(m) for k, m in picked["cut_runs"][0].items()}}
    if cut is None or cut >= n_trees:
        log(f"train: tree budget: no cut within {loss_pts} points of {against} grouped CV mean "
            f"({100 * reference['efficiency']['mean']:.2f}%); {n_trees} trees kept")
        return picked, n_trees, {**record, "trees": n_trees}
    runs = picked["cut_runs"]
    cut_picked = {**picked, "metrics": runs[0][cut], "grouped_cv": seed_summary([r[cut] for r in runs]),
                  "oof": picked["oof_cut"][cut], "per_problem": _oof_efficiency(tb, picked["oof_cut"][cut])}
    log(f"train: tree budget: {cut} trees (of {n_trees}), grouped CV mean {100 * runs[0][cut]['efficiency']['mean']:.2f}% "
        f"against {100 * reference['efficiency']['mean']:.2f}%, {against} (train.budget_loss_pts={loss_pts})")
    return cut_picked, cut, {**record, "trees": cut}


def _target_cv(tb: Any, oof: np.ndarray) -> dict | None:
    """A table across GPUs (features.hardware): the grouped CV of the target's own problems (the
    ``row_span`` of its devices, ``target`` in the table's report); None when the table has no
    other GPU or no row of the target."""
    from ckheur.learn.training import scored_rows
    from ckheur.metrics import selection_report

    devices = tb.report.get("archs") or {}
    spans = [v["row_span"] for v in devices.values() if v.get("target") and "row_span" in v]
    if len([v for v in devices.values() if "row_span" in v]) < 2 or not spans or all(a == b for a, b in spans):
        return None
    rows = scored_rows(tb, np.concatenate([np.arange(a, b) for a, b in spans]))
    # A sweep that timed a few kernels per problem (sweep.active.ranker) leaves none fully measured:
    # then each pick is judged against its problem's best measured kernel, and the report says so.
    partly = tb.full is not None and not tb.full[tb.pid[rows]].any()
    report = selection_report(tb.pid[rows], oof[rows], tb.tflops[rows])
    name = ", ".join(d for d, v in devices.items() if v.get("target"))
    return {"arch": name, "problems": int(len(np.unique(tb.pid[rows]))), "partly_measured": partly, **report}


def _oof_efficiency(tb: Any, oof: np.ndarray) -> np.ndarray:
    """Per problem, the out-of-fold pick's efficiency (the rows grouped CV scores)."""
    from ckheur.learn.training import scored_rows
    from ckheur.metrics import per_problem_efficiency

    scored = scored_rows(tb)
    return per_problem_efficiency(tb.pid[scored], oof[scored], tb.tflops[scored])


def _candidate_line(r: dict, n_seeds: int) -> str:
    """One line on a candidate's CV."""
    e, g, f = r["metrics"]["efficiency"], r["grouped_cv"], r["cluster_cv"]
    seeds = f" (mean of {n_seeds} seeds, sd {100 * g['mean_sd']:.2f} / {100 * g['p10_sd']:.2f})" if n_seeds > 1 else ""
    return (f"train: CV {r['candidate'].name}: grouped mean {100 * g['mean']:.2f}% P10 {100 * g['p10']:.2f}%{seeds}; "
            f"median {100 * e['median']:.2f}% min {100 * e['min']:.2f}% top-1 {100 * r['metrics']['top1']:.1f}%, "
            f"trees {r['best_iterations'][:5]}"
            + (f"; leave-cluster-out mean {100 * f['mean']:.2f}% P10 {100 * f['p10']:.2f}%"
               + (f" (sd {100 * f['mean_sd']:.2f} / {100 * f['p10_sd']:.2f})" if n_seeds > 1 else "") if f else "")
            + "".join(f"; {name.replace('_', ' ')} regimes held out mean {100 * v['mean']:.2f}% P10 {100 * v['p10']:.2f}%"
                      + (f" (sd {100 * v['mean_sd']:.2f} / {100 * v['p10_sd']:.2f})" if n_seeds > 1 else "")
                      for name, v in (r.get("regime_cv") or {}).items())
            + ("  [simulator calibrated on this data: optimistic, not selectable]" if r["leaky"] else "")
            + ("  [simulator recalibrated in each fold]" if r["fold_calibrated"] else ""))


def check_remember(job: Job, remember: bool) -> None:
    """Remembered answers are for MIOpen's solvers (find-db data); a TrainingError otherwise."""
    if remember and job.family.name != "miopen":
        raise TrainingError(f"train.remember: remembered answers are for MIOpen's solvers (find-db data, op=miopen/...), "
                            f"not the {job.family.name} family")


def train_bundle(paths: Sequence[str | Path], job: Job, output: str | Path, *, model: Mapping[str, Any],
                 candidates: Sequence[Candidate], options: TrainOptions, warm_start: str | Path | None = None,
                 shard: Mapping[str, Any] | None = None, exclude_suspect: bool = False, remember: bool = False,
                 mix_simulated: bool = False,
                 names: Sequence[str] | None = None, config: Mapping[str, Any] | None = None,
                 run_dir: str | Path | None = None, hardware: bool = False, across_gpus: bool = False,
                 log: Callable[[str], None] = print) -> dict:
    """Train (or warm-start from the bundle ``warm_start``) the job's model on the datasets or CK
    CSVs ``paths`` and save the bundle to ``output`` with a manifest of what it was trained on
    (``names``: the paths as the user wrote them; ``config``: the job's whole config). With
    ``run_dir``, the out-of-fold predictions and CV metrics are written there too. ``remember``
    (MIOpen's solvers): the bundle also keeps each training problem's fastest measured solver and
    ranks it first for that exact problem, so it answers at least as its own find-db would.
    ``hardware``: one model across the GPUs of the data (``train``); ``across_gpus``: for any GPU
    (``train``), without remembered answers. Simulated rows beside measured
    ones are refused unless ``mix_simulated``. Returns the bundle's path,
    the chosen candidate, its trees and the CV metrics."""
    import sys

    from ckheur.data.dataset import SIMULATED, keep_shard, read_dataset
    from ckheur.learn.bundle import load_bundle, save_bundle
    from ckheur.learn.fold_calibration import calibration_overlap
    from ckheur.data.tuning_db import digest
    from ckheur.parts import sha256_of
    from ckheur.threads import lightgbm

    paths = [p if isinstance(p, str) and "://" in p else Path(p) for p in paths]  # database URLs as they are
    check_remember(job, remember)
    if across_gpus and remember:
        raise TrainingError("train.across_gpus=true serves GPUs other than the ones measured: train.remember=true "
                            "would keep one GPU's fastest solvers as every GPU's; drop one of the two")
    warm = load_bundle(warm_start) if warm_start else None
    log(f"train: reading {', '.join(map(str, paths))}")
    df = read_dataset(paths)
    if shard is not None:
        df = keep_shard(df, dict(shard), job.family)
    hashes = {str(g): digest(p) if isinstance(p, str) else sha256_of(p) for g, p in zip(names or paths, paths)}
    backends = sorted(set(df.backend.dropna()))
    simulated = SIMULATED in backends
    if simulated and len(backends) > 1 and not mix_simulated:
        raise TrainingError(f"train: the data mixes simulated rows (backend {SIMULATED}) with rows measured by "
                           f"{', '.join(b for b in backends if b != SIMULATED)}; train on one kind (data.paths=[...]), "
                           "or pass data.mix_simulated=true to mix them on purpose (the bundle is then labeled simulated)")

    def leaky_data(table: Any) -> tuple[bool, int]:
        """Is the simulator calibrated on this data (the calibration file itself, an import of it
        (imports.json), or data holding its problems: a subset, a replay, a re-export), and on how
        many of its problems?"""
        fitted_with = _calibration_hashes()
        fitted_on = 0 if simulated else calibration_overlap(table.problems, job.op, job.arch, fitted_with)
        return bool(fitted_with & _origins(paths, hashes.values())) or fitted_on > 0, fitted_on

    result = train(df, job, model=model, candidates=candidates, options=options, warm=warm, leaky_data=leaky_data,
                   exclude_suspect=exclude_suspect, hardware=hardware, across_gpus=across_gpus, log=log)
    cv_metrics = {**result.cv_metrics, "data_backend": backends, "simulated": simulated} if warm is None \
        else result.cv_metrics
    if result.oof is not None and run_dir is not None:
        _write_oof(Path(run_dir), result.table, result.oof, result.cv_metrics)
    rep = result.report
    manifest = {
        "datasets": [{"path": p, "sha256": h} for p, h in hashes.items()], "rows": rep["rows_used"],
        "problems": rep["problems"], "kernels": len(result.kernels), "data_backend": backends,
        "data_kind": "simulated" if simulated else "real",
        "skipped": {k: v for k, v in rep.items() if k.startswith("rows_")},
        "config": dict(config or {}), "versions": _versions(lightgbm()),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "train_seconds": rep["train_seconds"],
        "command": sys.argv}
    if "trained_archs" in result.spec:
        manifest["trained_archs"] = result.spec["trained_archs"]
        manifest["trained_devices"] = result.spec["trained_devices"]
        manifest["archs"] = rep.get("archs", {})
    answers = None
    if remember:
        from ckheur.data.dataset import fastest_by_problem

        mine = (df.arch == job.arch_name) & (df.direction == job.direction) & (df.dtype == job.dtype)
        answers = fastest_by_problem(df[mine], job.family)  # the job's own GPU and op only
        manifest["remembered_problems"] = len(answers)
        log(f"train: remembers the fastest measured solver of its {len(answers)} problems (train.remember)")
    save_bundle(output, result.booster, result.tflops_booster, result.spec, result.kernels, cv_metrics,
                result.importances, manifest, answers)
    return {"bundle": str(output), "chosen": result.chosen.name, "trees": result.booster.current_iteration(),
            "simulated": simulated, "cv": cv_metrics}


def _origins(paths: Sequence[Path], hashes: Any) -> set[str]:
    """sha256 of the data read and of every file imported into the datasets read (imports.json)."""
    from ckheur.data.importing import read_record

    return set(hashes).union(*(read_record(p) for p in paths if isinstance(p, Path) and p.is_dir()))


def _calibration_hashes() -> set[str]:
    """sha256 of the data the shipped simulator parameters were calibrated on."""
    from ckheur.config import load_option

    return set(load_option("backend/sim").get("calibration_sha256") or [])


def _write_oof(out_dir: Path, tb: Any, oof: dict, cv_metrics: dict) -> None:
    """Out-of-fold predictions (oof.parquet) and the CV metrics of a training, into a run folder."""
    import json

    import pandas as pd

    from ckheur.files import make_folder, replacing, write_file

    make_folder(out_dir, "run folder")
    with replacing(out_dir / "oof.parquet", binary=True) as f:
        pd.DataFrame({"problem": tb.pid, "kernel": [tb.kernels[i].name for i in tb.kid], "tflops": tb.tflops,
                      "oof_score": oof["oof"], "fold": oof["fold"]}).to_parquet(f)
    write_file(out_dir / "cv_metrics.json", json.dumps(cv_metrics, indent=2))


def _versions(lgb: Any) -> dict:
    """Versions of what trained the bundle."""
    import platform

    import numpy
    import pandas

    return {"python": platform.python_version(), "lightgbm": lgb.__version__, "numpy": numpy.__version__,
            "pandas": pandas.__version__}
