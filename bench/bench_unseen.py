#!/usr/bin/env python
"""MIOpen where nothing was measured: splits that imitate the hidden cases, each beside the random split.

On the two real find-dbs (../shared/data/miopen_fdb: MI300X gfx942 and MI210/250 gfx90a), per
direction and dtype:

1. Leave-one-GPU-out, both ways: every selector trained on (or made from) GPU A, scored on all of
   GPU B's problems. Rows:
   - random split: a model trained on 80% of B's own problems, scored on the other 20% (the ceiling);
   - A's shipped bundle used as it is (models/miopen_<dir>_<dtype>_<A>), with its remembered
     answers (A's fastest listed solver for every problem A's file lists) and without them;
   - the bundle's model with B's batch sizes times sqrt(CUs of A / CUs of B): the same work per CU;
   - a model trained here on A's whole file (no remembered answers), and batch-scaled as above,
     ranking the solvers MIOpen's rules keep, as a model trained without op.applicability does;
   - the same model, ranking first the solvers A's file lists for that exact problem ("A-listed
     first"; other problems: the model alone);
   - A's file as a lookup: A's listed solvers in A's time order where A lists the problem, the
     model elsewhere;
   - the best single solver of A's data (highest mean efficiency on A), always picked;
   - B's own TunaNet (MIOpen's MLP, ../shared/data/miopen_tunanet) on the problems in its domain.
2. Leave-shape-family-out, on each file: one structural family held out at a time (depthwise
   G == C == K > 1; other grouped G > 1; 1xN / Nx1 filters; single-channel inputs C == 1; strided;
   dilated; 3D; extreme sizes: input pixels in the top or bottom 2%), trained on the rest, scored on it.
   With --across, also one model across GPUs (hardware descriptors as features) on the rest of the
   file plus the other GPU's whole file (family included; the file's rows x20, train.target_weight's
   default): what training on every GPU's data does for shapes only another GPU measured.

3. Remembered answers (--splits remember): how much faster the model must predict its own pick
   before it overrides a remembered answer (op.remember_margin).
   - The noise: solver pairs of one file that time as one kernel (listed together for >= 100
     problems, median |log time ratio| <= 0.01 both as a median and a spread): the 95th
     percentile of their time ratio minus 1, pooled; ckheur's default (REMEMBERED_NOISE) is this
     figure. No file here lists a problem twice, so such pairs are the only repeats.
   - The proxy of a re-measurement: A's bundle on the problems of B's file that A's file lists too
     (B measured them independently, on another GPU: its differences are far larger than the
     noise). Rows: remembered answers always (the bundle as is), the model alone, and the rule
     at each margin of --margins; and on A's own file, the share of its answers each margin
     overrides (there the remembered answer is the measurement, so every override costs).

Metrics (open protocol, ckheur.metrics.censored_choice_report): top-1 (the pick is the fastest
listed solver), mean efficiency (fastest listed time / the pick's; a pick the file does not list
counts 0) and the share of picks the file does not list.

Models here use a small recipe to stay cheap on a shared 2-core machine (15 leaves, at most 500
trees, learning rate 0.15, early stopping on 15% of the training problems); --recipe shipped
trains the shipped bundles' compact recipe instead (63 leaves, lr 0.25, up to 1,000 trees).

    python bench/bench_unseen.py [--directions fwd bwd_data bwd_weight] [--dtypes fp32 fp16]
                                 [--splits gpu family remember] [--families depthwise 3D ...] [--data DIR]
                                 [--margins 0 0.03 0.1 ...]

With --bundles DIR [DIR ...] the GPU split scores only the bundles of each folder (as is and
without remembered answers), no model is trained: old and new bundles side by side, e.g. the
bundles of an earlier commit (``git archive REV models | tar -x -C /tmp/old``) beside today's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_miopen_fdb import FILES, ROOT, TUNANET, import_file, load_table, split_rows, train  # noqa: E402

RECIPE = {"num_leaves": 15, "max_trees": 500, "learning_rate": 0.15}
# --recipe shipped: the shipped MIOpen bundles' compact recipe (before their cut to a tree budget)
RECIPES = {"small": RECIPE, "shipped": {"num_leaves": 63, "max_trees": 1000, "learning_rate": 0.25,
                                        "min_data_in_leaf": 10, "feature_fraction": 0.9, "lambda_l2": 0.0,
                                        "subsample": 0.8}}


def _pixels(p) -> int:
    return p.Di * p.Hi * p.Wi


FAMILIES = {  # name -> is the problem in the family (problems of one table), vectorized over them
    "depthwise": lambda ps: np.array([p.G > 1 and p.G == p.C == p.K for p in ps]),
    "grouped (not depthwise)": lambda ps: np.array([p.G > 1 and not p.G == p.C == p.K for p in ps]),
    "1xN / Nx1 filters": lambda ps: np.array([(p.Y == 1) != (p.X == 1) for p in ps]),
    "single-channel input": lambda ps: np.array([p.C == 1 for p in ps]),
    "strided": lambda ps: np.array([max(p.stride_d, p.stride_h, p.stride_w) > 1 for p in ps]),
    "dilated": lambda ps: np.array([max(p.dilation_d, p.dilation_h, p.dilation_w) > 1 for p in ps]),
    "3D": lambda ps: np.array([p.ndim == 3 for p in ps]),
    "extreme sizes": lambda ps: _extreme([_pixels(p) for p in ps]),
}


def _extreme(pixels: list) -> np.ndarray:
    """Input sizes in the top or bottom 2% of the table's problems."""
    v = np.asarray(pixels, dtype=float)
    lo, hi = np.percentile(v, [2, 98])
    return (v < lo) | (v > hi)


def report(tb, rows: np.ndarray, scores: np.ndarray) -> dict:
    """Open-protocol top-1, mean efficiency and unlisted-pick rate of ``scores`` on some rows, and
    the share of problems whose unlisted pick lost its algorithm's slot (``slot_lost``: the file
    lists another solver of the pick's algorithm for the problem; MIOpen's older find-db entries
    keep one solver per algorithm, so such a pick would run, at an unknown time). ``mlir_only``: the
    share of problems whose entry lists an MLIR implicit GEMM and nothing else (MI50's file: no other
    solver, not even a GEMM, so it says nothing of the others), and ``without_mlir_only`` the three
    figures on the other problems."""
    from ckheur.metrics import best_first, censored_choice_report

    time_ms = np.where(tb.tflops[rows] > 0, tb.flops_over_tflops[rows], np.nan)
    o = censored_choice_report(tb.pid[rows], scores, time_ms)["open"]
    order, start = best_first(tb.pid[rows], scores)  # the open picks, as censored_choice_report takes them
    pid, algo = tb.pid[rows], np.array([k.algorithm for k in tb.kernels])[tb.kid[rows]]
    listed = np.isfinite(time_ms)
    slots = set(zip(pid[listed].tolist(), algo[listed].tolist()))
    has = {int(p) for p in pid[listed]}
    lost = [not listed[r] and np.isfinite(scores[r]) and (int(pid[r]), algo[r]) in slots
            for r in order[start] if int(pid[r]) in has]
    mlir = np.array([k.name.startswith("ConvMlirIgemm") for k in tb.kernels])[tb.kid[rows]]
    other = np.zeros(int(pid.max()) + 1 if len(pid) else 0, dtype=bool)
    other[pid[listed & ~mlir]] = True  # problems whose entry lists a solver that is no MLIR GEMM
    only = np.array(sorted(has))
    only = only[~other[only]] if len(only) else only
    out = {"problems": o["problems"], "top1": o["top1"], "efficiency": o["efficiency"]["mean"],
           "not_listed": o["picks_outside_listed"], "slot_lost": float(np.mean(lost)) if lost else float("nan"),
           "mlir_only": len(only) / max(1, len(has))}
    keep = ~np.isin(pid, only)
    if len(only) and keep.any():
        w = censored_choice_report(pid[keep], scores[keep], time_ms[keep])["open"]
        out["without_mlir_only"] = {"problems": w["problems"], "top1": w["top1"], "efficiency": w["efficiency"]["mean"],
                                    "not_listed": w["picks_outside_listed"]}
    return out


def predict_rows(booster, tb, rows: np.ndarray) -> np.ndarray:
    from ckheur.threads import predict

    return predict(booster, tb.X[rows], num_iteration=booster.best_iteration or None)


def fit_on(tb, rows: np.ndarray | None, model: dict, seed: int, init_model=None):
    """A booster on some rows of a table (None: all), early stopping on 15% of their problems
    (trees added to ``init_model``'s, when given)."""
    from sklearn.model_selection import GroupShuffleSplit

    rows = np.arange(len(tb.pid)) if rows is None else rows

    fit, valid = next(GroupShuffleSplit(n_splits=1, test_size=0.15, random_state=seed + 1)
                      .split(rows, groups=tb.pid[rows]))
    booster, seconds = train(tb, np.sort(rows[fit]), np.sort(rows[valid]), model, "relative", seed, init_model)
    return booster, seconds


def random_split(tb, model: dict, seed: int, across=None) -> dict:
    """The reference: trained on 80% of the table's problems, scored on the other 20%. With
    ``across`` (:func:`across_gpus`), also ``"across"``: on those 20%, ranking what
    ``op.applicability=both`` keeps, the same model (``both``) and a model across GPUs on the 80%
    plus the other GPU's file (``across``)."""
    fit_rows, valid_rows, te = split_rows(tb, "random", seed)
    booster, _ = train(tb, fit_rows, valid_rows, model, "relative", seed)
    scores = predict_rows(booster, tb, te)
    out = report(tb, te, scores)
    if across is not None:
        trained = np.concatenate([fit_rows, valid_rows])
        joined, mine = across(np.unique(tb.pid[trained]))
        pooled, _ = fit_on(joined, None, model, seed)
        out["across"] = {"both": report(tb, te, masked_both(tb, trained, te, scores)),
                         "across": report(tb, te, masked_both(tb, trained, te, predict_rows(pooled, mine, te)))}
    return out


def time_lookup(tb) -> dict:
    """(problem key, solver name) -> the listed time (ms) of a table's listed rows."""
    out = {}
    for r in np.flatnonzero(tb.tflops > 0):
        out[(tb.problems[tb.pid[r]].key(), tb.kernels[tb.kid[r]].name)] = tb.flops_over_tflops[r]
    return out


def best_single_solver(tb) -> str:
    """The solver with the highest mean efficiency over the table's problems (unlisted: 0)."""
    t = np.where(tb.tflops > 0, tb.flops_over_tflops, np.inf)
    best = np.full(len(tb.problems), np.inf)
    np.minimum.at(best, tb.pid, t)
    eff = np.where(np.isfinite(t), best[tb.pid] / t, 0.0)
    per_solver = np.bincount(tb.kid, weights=eff, minlength=len(tb.kernels))
    return tb.kernels[int(np.argmax(per_solver))].name


def bundle_scores(bundle_dir: Path, tb, X: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A shipped bundle's scores of every row of ``tb`` (features ``X``, default the table's), as its
    selector ranks: only its own solvers that its ``op.applicability`` keeps for the problem (the
    others -inf: unranked), through its screen where it has one (among the table's solvers: a
    bundle serving another GPU ranks the solvers that run there); without and with its remembered
    answers (the remembered solver of a problem raised above all)."""
    from ckheur import Selector
    from ckheur.selection.screening import screened_scores
    from ckheur.threads import predict

    sel = Selector.load(bundle_dir)
    # MIOpen bundles have no analytic prior or simulator features: the booster alone scores the rows
    assert sel.prior is None and sel._sim_sets["features"] is None, bundle_dir
    own = {k.name for k in sel.kernels}
    names = [k.name for k in tb.kernels]
    rows = np.arange(len(tb.pid))
    X = tb.X if X is None else X
    plain = ranked_only(tb, sel.op, rows, predict(sel.booster, X), np.array([n in own for n in names]))
    remembered = np.array([sel.answers.get(tb.problems[p].key()) == names[k] for p, k in zip(tb.pid, tb.kid)])
    if sel.screen is None:
        return plain, np.where(remembered, plain[np.isfinite(plain)].max() + 1.0, plain)
    first = predict(sel.booster, X, num_iteration=sel.screen[0])
    with_answers = screened_scores(tb.pid, first, plain, sel.screen[1], remembered)
    plain = screened_scores(tb.pid, first, plain, sel.screen[1])
    return plain, np.where(remembered, with_answers[np.isfinite(with_answers)].max() + 1.0, with_answers)


def ranked_rows(tb, op: dict, rows: np.ndarray, known: np.ndarray | None = None) -> np.ndarray:
    """Which of some rows of a MIOpen table a selector ranks: not the solvers ``op.applicability``
    leaves out for the row's problem (a step that would leave none is skipped, as the selector does)
    nor, with ``known`` (per kernel of the table), the kernels a selector does not have."""
    from ckheur.families.miopen import solvers as miopen_solvers

    support = miopen_solvers.support_arrays(tb.kernels)
    keep = np.ones((len(tb.problems), len(tb.kernels)), dtype=bool)
    for i in np.unique(tb.pid[rows]):
        mask, _ = miopen_solvers.support_mask(tb.problems[i], support, op)
        keep[i] = mask if mask.any() else True
    if known is not None:
        keep &= known
    return keep[tb.pid[rows], tb.kid[rows]]


def ranked_only(tb, op: dict, rows: np.ndarray, scores: np.ndarray, known: np.ndarray | None = None) -> np.ndarray:
    """``scores`` of some rows, -inf (unranked) where :func:`ranked_rows` says a selector does not rank them."""
    return np.where(ranked_rows(tb, op, rows, known), scores, -np.inf)


def batch_scaled(tb, arch: dict, direction: str, ratio: float) -> np.ndarray:
    """Feature rows of ``tb`` with every problem's batch size times ``ratio`` (at least 1)."""
    import dataclasses

    from ckheur.families.engines import get_engine, pair_features

    scaled = [dataclasses.replace(p, N=max(1, int(round(p.N * ratio)))) for p in tb.problems]
    return pair_features(get_engine("miopen"), scaled, tb.kernels, tb.pid, tb.kid, arch, direction, None)


def leave_gpu_out(ta, tb, arch_a: str, arch_b: str, direction: str, dtype: str, model: dict, seed: int,
                  tunanet: str | None, arch_cfgs: dict) -> list[dict]:
    """Every selector made from GPU A's data, scored on all of GPU B's problems (see 1. above)."""
    from ckheur.threads import predict

    rows_b = np.arange(len(tb.pid))
    out = []

    def add(name, scores, rows=rows_b, **extra):
        out.append({"selector": name, **report(tb, rows, scores), **extra})
        r = out[-1]
        print(f"  {arch_a}->{arch_b} {direction} {dtype} {name:42s} {r['problems']:6d} problems: top-1 "
              f"{100 * r['top1']:5.1f}%, eff {100 * r['efficiency']:6.2f}%, not listed {100 * r['not_listed']:5.2f}%",
              flush=True)

    out.append({"selector": f"random split on {arch_b} (its own data)", **random_split(tb, model, seed)})
    print(f"  {arch_b} {direction} {dtype} random split: top-1 {100 * out[0]['top1']:5.1f}%, eff "
          f"{100 * out[0]['efficiency']:6.2f}%", flush=True)
    shipped = ROOT / "models" / f"miopen_{direction}_{dtype}_{arch_a}"
    # the same work per CU: B's batch times sqrt(CUs of A / CUs of B) (the square root measured
    # better than the full ratio on forward fp16, both ways)
    ratio = (arch_cfgs[arch_a]["num_cus"] / arch_cfgs[arch_b]["num_cus"]) ** 0.5
    X_scaled = batch_scaled(tb, arch_cfgs[arch_b], direction, ratio)
    scaled = f"batch x {ratio:.2f} (sqrt of the CU ratio)"
    if shipped.is_dir():
        plain, with_answers = bundle_scores(shipped, tb)
        add(f"{arch_a} bundle as is (remembered answers)", with_answers)
        add(f"{arch_a} bundle without remembered answers", plain)
        add(f"{arch_a} bundle's model, {scaled}", bundle_scores(shipped, tb, X_scaled)[0])
    booster, _ = fit_on(ta, np.arange(len(ta.pid)), model, seed)
    # the model ranks B's solvers by B's rows, as a model trained without op.applicability ranks: the
    # solvers MIOpen's rules keep (the default); a solver A never had scores as the model says
    kept = ranked_rows(tb, tb.op, rows_b)
    model_b = np.where(kept, predict_rows(booster, tb, rows_b), -np.inf)
    add(f"model trained on {arch_a}", model_b)
    add(f"model trained on {arch_a}, {scaled}",
        np.where(kept, predict(booster, X_scaled, num_iteration=booster.best_iteration or None), -np.inf))
    times_a = time_lookup(ta)
    pair = [(tb.problems[tb.pid[r]].key(), tb.kernels[tb.kid[r]].name) for r in rows_b]
    t_a = np.array([times_a.get(k, np.nan) for k in pair])
    keys_a = {p.key() for p in ta.problems}
    shared = np.array([tb.problems[i].key() in keys_a for i in tb.pid])
    # ranks: A-listed first (by the model, or by A's time), then the rest by the model
    top = model_b[kept].max() - model_b[kept].min() + 1.0
    add(f"model trained on {arch_a}, {arch_a}-listed first", np.where(np.isfinite(t_a), model_b + top, model_b))
    by_time = np.where(np.isfinite(t_a) & kept, model_b[kept].max() + 1.0 + 1.0 / (1.0 + np.nan_to_num(t_a, nan=0.0)),
                       model_b)
    add(f"{arch_a} file lookup, else model", by_time)
    out[-1]["shared_problems"] = int(len(np.unique(tb.pid[shared])))
    single = best_single_solver(ta)
    add(f"best single solver of {arch_a} ({single})",
        np.array([1.0 if tb.kernels[k].name == single else 0.0 for k in tb.kid]))
    if tunanet:
        out.extend(tunanet_rows(tb, arch_b, direction, dtype, tunanet, add))
    return out


def with_descriptors(tb, arch: dict, dtype: str) -> np.ndarray:
    """The table's feature rows with the GPU's hardware descriptors appended (features.hardware)."""
    from ckheur.families.hardware import descriptors

    hw = descriptors(arch, dtype).astype(tb.X.dtype)
    return np.hstack([tb.X, np.broadcast_to(hw, (len(tb.X), len(hw)))])


def problem_subset(tb, problems: np.ndarray):
    """The table of some of its problems (every row of each), problems renumbered in order."""
    import dataclasses

    keep = np.sort(np.asarray(problems))
    rows = np.flatnonzero(np.isin(tb.pid, keep))
    return dataclasses.replace(tb, X=tb.X[rows], tflops=tb.tflops[rows], pid=np.searchsorted(keep, tb.pid[rows]),
                               kid=tb.kid[rows], problems=[tb.problems[i] for i in keep], full=tb.full[keep])


def few_shot_problems(tb, budget: float, how: str, seed: int) -> np.ndarray:
    """Problems of B to measure: at most ``budget`` of B's (problem, solver) pairs, whole problems
    (every listed solver), drawn at random or by farthest points in problem-feature space."""
    from ckheur.families.miopen.features import PROBLEM_FEATURES
    from ckheur.sweeping.acquisition import farthest_points

    rows_per = np.bincount(tb.pid, minlength=len(tb.problems))
    count = max(1, int(budget * len(tb.pid) / max(rows_per.mean(), 1.0)))
    if how == "random":
        return np.random.default_rng(seed).choice(len(tb.problems), size=count, replace=False)
    first = np.unique(tb.pid, return_index=True)[1]
    Z = tb.X[first][:, [tb.feature_names.index(n) for n in PROBLEM_FEATURES]].astype(np.float64)
    Z = (Z - Z.mean(axis=0)) / np.maximum(Z.std(axis=0), 1e-9)
    return np.asarray(farthest_points(Z, count, np.empty((0, Z.shape[1])), seed), dtype=np.int64)


def few_shot(ta, tb, arch_a: str, arch_b: str, direction: str, dtype: str, model: dict, seed: int,
             arch_cfgs: dict, budgets: list, ways: list, weights: tuple = (1.0,)) -> list[dict]:
    """Bring-up of GPU B, few-shot: one model across GPUs (hardware descriptors as features) on all
    of A's data plus a few of B's problems (each budget a share of B's pairs), B's rows weighing each
    of ``weights`` (train.target_weight), scored on B's other problems; beside it, a model on those
    few B problems alone, A's model with trees added on them (fine-tuned), A's bundle as is and A's
    best single solver, on the same held-out problems."""
    import dataclasses

    from ckheur.families.hardware import DESCRIPTORS
    from ckheur.learn.training import concat_tables

    names = [*ta.feature_names, *DESCRIPTORS]
    hw_a = dataclasses.replace(ta, X=with_descriptors(ta, arch_cfgs[arch_a], dtype), feature_names=names)
    hw_b = dataclasses.replace(tb, X=with_descriptors(tb, arch_cfgs[arch_b], dtype), feature_names=names)
    shipped = ROOT / "models" / f"miopen_{direction}_{dtype}_{arch_a}"
    bundle = bundle_scores(shipped, tb)[1] if shipped.is_dir() else None
    single = best_single_solver(ta)
    single_scores = np.array([1.0 if tb.kernels[k].name == single else 0.0 for k in tb.kid])
    model_a, _ = fit_on(hw_a, None, model, seed)  # the model of A alone, fine-tuned on B's few below
    out = []

    def add(name, rows, scores, **extra):
        out.append({"selector": name, **report(tb, rows, scores), **extra})
        r = out[-1]
        print(f"  {arch_a}->{arch_b} {direction} {dtype} {name:52s} {r['problems']:6d} problems: top-1 "
              f"{100 * r['top1']:5.1f}%, eff {100 * r['efficiency']:6.2f}%, not listed {100 * r['not_listed']:5.2f}%",
              flush=True)

    for budget in budgets:
        for how in ways:
            picked = few_shot_problems(tb, budget, how, seed)
            held = np.flatnonzero(~np.isin(tb.pid, picked))
            tag = f"{100 * budget:g}% of {arch_b}'s pairs ({how}, {len(picked)} problems)"
            shot_b = problem_subset(hw_b, picked)
            for w in weights:
                weighed = shot_b if w == 1 else dataclasses.replace(shot_b, weight=np.full(len(shot_b.X), float(w)))
                booster, _ = fit_on(concat_tables([hw_a, weighed]), None, model, seed)
                add(f"across GPUs: {arch_a} + {tag}" + (f", {arch_b}'s rows x{w:g}" if w != 1 else ""), held,
                    predict_rows(booster, hw_b, held), budget=budget, how=how, weight=w)
            booster_b, _ = fit_on(shot_b, None, model, seed)
            add(f"{arch_b} alone: {tag}", held, predict_rows(booster_b, hw_b, held), budget=budget, how=how)
            tuned, _ = fit_on(shot_b, None, model, seed, init_model=model_a)
            add(f"{arch_a}'s model + trees on {tag}", held, predict_rows(tuned, hw_b, held), budget=budget, how=how)
            if bundle is not None:
                add(f"{arch_a} bundle as is (same held-out problems)", held, bundle[held], budget=budget, how=how)
            add(f"best single solver of {arch_a} ({single})", held, single_scores[held], budget=budget, how=how)
    return out


def repeat_pairs(tb, min_problems: int = 100, tie: float = 0.01) -> list[dict]:
    """Solver pairs of a table that time as one kernel: listed together for at least
    ``min_problems`` problems, with a median |log time ratio| and a median absolute deviation
    both at most ``tie``; each with its per-problem ratios (slower / faster)."""
    listed = tb.tflops > 0
    times = np.full((len(tb.problems), len(tb.kernels)), np.nan)
    times[tb.pid[listed], tb.kid[listed]] = tb.flops_over_tflops[listed]
    out = []
    for i in range(len(tb.kernels)):
        for j in range(i + 1, len(tb.kernels)):
            both = np.isfinite(times[:, i]) & np.isfinite(times[:, j])
            if both.sum() < min_problems:
                continue
            r = np.log(times[both, i] / times[both, j])
            med = np.median(r)
            if abs(med) <= tie and np.median(np.abs(r - med)) <= tie:
                out.append({"pair": f"{tb.kernels[i].name} / {tb.kernels[j].name}", "ratios": np.exp(np.abs(r))})
    return out


def remembered_rule(plain: np.ndarray, tb, rows: np.ndarray, answers: dict, objective: str,
                    margin: float) -> np.ndarray:
    """Scores of ``rows`` (plain: the model's) with each problem's remembered solver raised above
    all where the selector keeps it (ckheur.learn.bundle.remembered_kept at ``margin``)."""
    from ckheur.learn.bundle import remembered_kept

    pid = tb.pid[rows]
    names = [k.name for k in tb.kernels]
    at = np.array([answers.get(tb.problems[p].key()) == names[k] for p, k in zip(pid, tb.kid[rows])])
    top = np.full(len(tb.problems), -np.inf)
    np.maximum.at(top, pid, plain)
    kept = np.zeros(len(tb.problems), dtype=bool)
    kept[pid[at]] = remembered_kept(top[pid[at]], plain[at], objective, margin)
    return np.where(at & kept[pid], plain.max() + 1.0, plain)


def remembered_answers(tables: dict, direction: str, dtype: str, margins: list) -> list[dict]:
    """Each GPU's bundle on the other file's problems its own file lists (the proxy of a
    re-measurement) and on its own file: remembered always, the model alone, the rule per margin."""
    from ckheur import Selector
    from ckheur.threads import predict

    out = []
    for a, b in ((a, b) for a in tables for b in tables if a != b):
        shipped = ROOT / "models" / f"miopen_{direction}_{dtype}_{a}"
        if not shipped.is_dir():
            continue
        sel = Selector.load(shipped)
        ta, tb = tables[a], tables[b]
        for place, t in (("other GPU", tb), ("own file", ta)):
            seen = np.array([p.key() in sel.answers for p in t.problems])
            rows = np.flatnonzero(seen[t.pid])
            plain = predict(sel.booster, t.X[rows])
            label = f"{a} bundle on {b}'s keys {a} lists" if place == "other GPU" else f"{a} bundle on its own file"
            rep = {"from": a, "on": b if place == "other GPU" else a, "place": place, "direction": direction,
                   "dtype": dtype, "rows": []}
            for name, scores in [("remembered always", remembered_rule(plain, t, rows, sel.answers, sel.objective,
                                                                        np.inf)),
                                 ("model alone", plain),
                                 *[(f"margin {m:g}", remembered_rule(plain, t, rows, sel.answers, sel.objective, m))
                                   for m in margins]]:
                r = {"selector": name, **report(t, rows, scores)}
                rep["rows"].append(r)
                print(f"  {label} {direction} {dtype} {name:18s} {r['problems']:6d} problems: top-1 "
                      f"{100 * r['top1']:5.1f}%, eff {100 * r['efficiency']:6.2f}%", flush=True)
            out.append(rep)


def bundle_rows(tb, arch_a: str, arch_b: str, direction: str, dtype: str, folders: list[Path]) -> list[dict]:
    """GPU A's bundle of each folder scored on all of GPU B's problems, with and without its
    remembered answers (--bundles)."""
    out = []
    for folder in folders:
        bundle = folder / f"miopen_{direction}_{dtype}_{arch_a}"
        if not bundle.is_dir():
            continue
        plain, with_answers = bundle_scores(bundle, tb)
        for name, scores in (("as is (remembered answers)", with_answers), ("without remembered answers", plain)):
            out.append({"selector": f"{arch_a} bundle of {folder}, {name}",
                        **report(tb, np.arange(len(tb.pid)), scores)})
            r = out[-1]
            print(f"  {arch_a}->{arch_b} {direction} {dtype} {r['selector']:60s} {r['problems']:6d} problems: top-1 "
                  f"{100 * r['top1']:5.1f}%, eff {100 * r['efficiency']:6.2f}%, not listed "
                  f"{100 * r['not_listed']:5.2f}%", flush=True)
    return out


def tunanet_rows(tb, arch: str, direction: str, dtype: str, folder: str, add) -> list:
    """B's own TunaNet on B's problems in its domain (added through ``add``)."""
    from ckheur.integrations.miopen.tunanet import TunaNetRanker, in_domain, load_tunanet

    try:
        ranker = TunaNetRanker(load_tunanet(folder, arch), tb.kernels, direction, dtype)
    except Exception as e:  # noqa: BLE001 - a missing file is a row that says so
        print(f"  TunaNet {arch}: not scored ({e})")
        return []
    inside = np.array([in_domain(p, dtype, arch) for p in tb.problems])
    rows = np.flatnonzero(inside[tb.pid])
    if not len(rows):
        return []
    position = np.cumsum(inside) - 1
    matrix = ranker.score_matrix([p for p, i in zip(tb.problems, inside) if i])
    add(f"{arch} TunaNet (its domain)", matrix[position[tb.pid[rows]], tb.kid[rows]], rows)
    return []


def masked_both(tb, train_rows: np.ndarray, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``scores`` of some rows, the solvers ``op.applicability=both`` does not rank for their problem
    unranked: MIOpen's rules, and ``op.listed`` learned from the listed rows of ``train_rows`` alone (as
    ``stage=train op.applicability=both`` learns it from its training data)."""
    import pandas as pd

    from ckheur.families.miopen.solvers import listed_kinds

    timed = train_rows[tb.tflops[train_rows] > 0]
    frame = pd.DataFrame([{"layout": p.layout, "dtype": tb.op["dtype"], "G": p.G, "C": p.C, "Z": p.Z, "Y": p.Y,
                           "X": p.X} for p in (tb.problems[i] for i in tb.pid[timed])])
    frame["kernel"] = [tb.kernels[k].name for k in tb.kid[timed]]
    return ranked_only(tb, {**tb.op, "applicability": "both", "listed": listed_kinds(frame)}, rows, scores)


def across_gpus(tb, other, arch_cfgs: dict, arch: str, other_arch: str, dtype: str, weight: float = 20.0):
    """A function of the problems to keep of ``tb``: the table of those (rows x ``weight``) and all of
    ``other``'s, hardware descriptors appended to both (a model across GPUs), and ``tb`` with them."""
    import dataclasses

    from ckheur.families.hardware import DESCRIPTORS
    from ckheur.learn.training import concat_tables

    names = [*tb.feature_names, *DESCRIPTORS]
    mine = dataclasses.replace(tb, X=with_descriptors(tb, arch_cfgs[arch], dtype), feature_names=names)
    theirs = dataclasses.replace(other, X=with_descriptors(other, arch_cfgs[other_arch], dtype), feature_names=names)

    def joined(keep: np.ndarray):
        sub = problem_subset(mine, keep)
        return concat_tables([dataclasses.replace(sub, weight=np.full(len(sub.X), weight)), theirs]), mine
    return joined


def leave_family_out(tb, arch: str, direction: str, dtype: str, model: dict, seed: int, names: list,
                     across=None) -> list[dict]:
    """Each family held out in turn: trained on the rest of the table, scored on it as it ranks
    every solver (open) and ranking only those ``op.applicability=both`` leaves (``"both"``); with
    ``across`` (:func:`across_gpus`), also a model across GPUs on the rest plus the other GPU's file
    (``"across"``, ranking what ``both`` leaves)."""
    out = []
    for name in names:
        member = FAMILIES[name](tb.problems)
        n = int(member.sum())
        if n < 20 or n > 0.8 * len(member):
            print(f"  {arch} {direction} {dtype} family {name}: {n} problems, not held out (too few or too many)")
            continue
        held = member[tb.pid]
        t0 = time.perf_counter()
        booster, _ = fit_on(tb, np.flatnonzero(~held), model, seed)
        rows = np.flatnonzero(held)
        scores = predict_rows(booster, tb, rows)
        r = {"family": name, **report(tb, rows, scores),
             "both": report(tb, rows, masked_both(tb, np.flatnonzero(~held), rows, scores))}
        if across is not None:
            joined, mine = across(np.flatnonzero(~member))
            pooled, _ = fit_on(joined, None, model, seed)
            r["across"] = report(tb, rows, masked_both(tb, np.flatnonzero(~held), rows,
                                                       predict_rows(pooled, mine, rows)))
        r["seconds"] = round(time.perf_counter() - t0, 1)
        out.append(r)
        print(f"  {arch} {direction} {dtype} family {name:24s} {r['problems']:6d} problems: top-1 "
              f"{100 * r['top1']:5.1f}%, eff {100 * r['efficiency']:6.2f}%, not listed {100 * r['not_listed']:5.2f}%; "
              f"applicability both {cell(r['both'])}"
              + (f"; across GPUs {cell(r['across'])}" if "across" in r else "") + f" ({r['seconds']} s)", flush=True)
    return out


def cell(r: dict) -> str:
    return f"{100 * r['top1']:.1f}% / {100 * r['efficiency']:.2f}% / {100 * r['not_listed']:.2f}%"


def print_remember(results: dict) -> None:
    """The noise estimate from repeats, and the remembered-answer rows, as markdown."""
    from ckheur.learn.bundle import REMEMBERED_NOISE

    print("\nRepeats (solver pairs that time as one kernel): time ratio slower / faster")
    print("| GPU | direction | dtype | pair | problems | median | P90 | P95 | P99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results["repeats"]:
        q = np.percentile(r["ratios"], [50, 90, 95, 99]) - 1
        print(f"| {r['arch']} | {r['direction']} | {r['dtype']} | {r['pair']} | {len(r['ratios']):,} | "
              + " | ".join(f"{100 * v:.2f}%" for v in q) + " |")
    if results["repeats"]:
        pooled = np.concatenate([r["ratios"] for r in results["repeats"]])
        noise = float(np.percentile(pooled, 95) - 1)
        results["noise"] = {"problems": int(len(pooled)), "p95": noise}
        print(f"noise (P95 of the pooled ratios minus 1, {len(pooled):,} problems): {100 * noise:.2f}% "
              f"(ckheur.learn.bundle.REMEMBERED_NOISE: {100 * REMEMBERED_NOISE:.2f}%)")
    else:
        print(f"no repeats in these tables (ckheur.learn.bundle.REMEMBERED_NOISE: {100 * REMEMBERED_NOISE:.2f}%)")
    print("\nRemembered answers: top-1 / mean efficiency (open protocol) on the problems the bundle remembers")
    names = [row["selector"] for row in results["remember"][0]["rows"]] if results["remember"] else []
    print("| bundle | on | direction | dtype | problems | " + " | ".join(names) + " |")
    print("| --- " * (5 + len(names)) + "|")
    for r in results["remember"]:
        cells = [f"{100 * row['top1']:.1f}% / {100 * row['efficiency']:.2f}%" for row in r["rows"]]
        print(f"| {r['from']} | {r['on']} ({r['place']}) | {r['direction']} | {r['dtype']} | "
              f"{r['rows'][0]['problems']:,} | " + " | ".join(cells) + " |")
    for place in ("other GPU", "own file"):
        rs = [r for r in results["remember"] if r["place"] == place]
        if rs:
            print(f"mean over {len(rs)} ({place}): " + ", ".join(
                f"{name} {100 * np.mean([r['rows'][i]['top1'] for r in rs]):.2f}% / "
                f"{100 * np.mean([r['rows'][i]['efficiency'] for r in rs]):.3f}%" for i, name in enumerate(names)))
    rs = [r for r in results["remember"] if r["place"] == "other GPU"]
    if rs:  # the hidden target's shape: the lookup's top-1 and the model's efficiency at once
        def reach(i: int) -> int:
            return sum(r["rows"][i]["top1"] >= r["rows"][0]["top1"] and
                       r["rows"][i]["efficiency"] >= r["rows"][1]["efficiency"] for r in rs)

        print(f"reaching both the lookup's top-1 and the model's efficiency, of {len(rs)} (other GPU): "
              + ", ".join(f"{name} {reach(i)}" for i, name in enumerate(names)))
    for r in results["repeats"]:
        r["ratios"] = int(len(r["ratios"]))  # the JSON keeps the count


def print_transfer(groups: list, title: str) -> None:
    """A markdown table of selectors moved from one GPU to another (one row per selector and pair)."""
    if not groups:
        return
    print(f"\n{title}")
    print("| direction | dtype | from -> to | selector | problems | top-1 / efficiency / not listed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for g in groups:
        for r in g["rows"]:
            print(f"| {g['direction']} | {g['dtype']} | {g['from']} -> {g['to']} | {r['selector']} | "
                  f"{r['problems']:,} | {cell(r)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", nargs=2, default=[str(f) for f in FILES])
    ap.add_argument("--directions", nargs="+", default=["fwd", "bwd_data", "bwd_weight"])
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16"])
    ap.add_argument("--splits", nargs="+", default=["gpu", "family"], choices=["gpu", "family", "remember", "fewshot"])
    ap.add_argument("--margins", nargs="+", type=float, default=[0.0, 0.01, 0.03, 0.1, 0.3, 1.0],
                    help="remember margins scored (--splits remember)")
    ap.add_argument("--family-dtypes", nargs="+", default=["fp16"], help="dtypes of the family splits")
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--recipe", choices=list(RECIPES), default="small",
                    help="the models' recipe: small (15 leaves, at most 500 trees) or the shipped bundles'")
    ap.add_argument("--across", action="store_true",
                    help="family split: also a model across GPUs, the other GPU's whole file added")
    ap.add_argument("--budgets", nargs="+", type=float, default=[0.01, 0.05],
                    help="few-shot: shares of the target GPU's pairs measured (--splits fewshot)")
    ap.add_argument("--target-weights", nargs="+", type=float, default=[1.0, 20.0],
                    help="few-shot: weights of the target's rows in the model across GPUs (train.target_weight)")
    ap.add_argument("--ways", nargs="+", default=["random", "farthest"], choices=["random", "farthest"],
                    help="few-shot: how the target's problems are drawn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="outputs/bench/unseen_data", help="imported datasets (made when absent)")
    ap.add_argument("--tunanet", default=str(TUNANET) if TUNANET.is_dir() else None)
    ap.add_argument("--out", default="outputs/bench/unseen.json")
    ap.add_argument("--bundles", nargs="+", type=Path, default=None,
                    help="GPU split: score only the bundles of these folders (as is and without remembered answers)")
    args = ap.parse_args()
    from ckheur.integrations.miopen.find_db import arch_from_name
    from ckheur.stages import compose_config, plain

    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        print(f"bench_unseen: skipped, no find-db at {', '.join(missing)} (the shared data folder is absent)")
        return
    data = (ROOT / args.data) if not Path(args.data).is_absolute() else Path(args.data)
    for f in files:
        rep = import_file(f, data)
        print(f"import {rep['file']}: {rep['wall_s']} s", flush=True)
    arches = [arch_from_name(f, ["gfx90a", "gfx942", "gfx950"])[0] for f in files]
    names = [f.name.split(".")[0] for f in files]
    arch_cfgs = {a: plain(compose_config([f"arch={a}"]).arch) for a in arches}
    recipe = RECIPES[args.recipe]
    results = {"recipe": recipe, "gpu": [], "family": [], "random": {}, "remember": [], "repeats": [], "fewshot": []}
    t_start = time.perf_counter()
    for direction in args.directions:
        for dtype in args.dtypes:
            families = "family" in args.splits and dtype in args.family_dtypes
            if not {"gpu", "remember", "fewshot"} & set(args.splits) and not families:
                continue
            tabs = []
            for arch, name in zip(arches, names):
                tb, model = load_table(data, arch, direction, dtype, name)
                tabs.append((tb, {**model, **recipe}))
            if "remember" in args.splits:
                for arch, (tb, _) in zip(arches, tabs):
                    results["repeats"] += [{"arch": arch, "direction": direction, "dtype": dtype, "pair": r["pair"],
                                            "ratios": r["ratios"]} for r in repeat_pairs(tb)]
                results["remember"] += remembered_answers({a: tb for a, (tb, _) in zip(arches, tabs)}, direction,
                                                          dtype, args.margins)
            for i, j in ((0, 1), (1, 0)) if "gpu" in args.splits and args.bundles else ():
                results["gpu"].append({"from": arches[i], "to": arches[j], "direction": direction, "dtype": dtype,
                                       "rows": bundle_rows(tabs[j][0], arches[i], arches[j], direction, dtype,
                                                           args.bundles)})
            for i, j in ((0, 1), (1, 0)) if "gpu" in args.splits and not args.bundles else ():
                rows = leave_gpu_out(tabs[i][0], tabs[j][0], arches[i], arches[j], direction, dtype, tabs[i][1],
                                     args.seed, args.tunanet, arch_cfgs)
                results["gpu"].append({"from": arches[i], "to": arches[j], "direction": direction, "dtype": dtype,
                                       "rows": rows})
                results["random"][f"{arches[j]} {direction} {dtype}"] = rows[0]
            for i, j in ((0, 1), (1, 0)) if "fewshot" in args.splits else ():
                results["fewshot"].append({"from": arches[i], "to": arches[j], "direction": direction, "dtype": dtype,
                                           "rows": few_shot(tabs[i][0], tabs[j][0], arches[i], arches[j], direction,
                                                            dtype, tabs[i][1], args.seed, arch_cfgs, args.budgets,
                                                            args.ways, tuple(args.target_weights))})
            if families:
                for i, (arch, (tb, model)) in enumerate(zip(arches, tabs)):
                    key = f"{arch} {direction} {dtype}"
                    j = 1 - i
                    across = across_gpus(tb, tabs[j][0], arch_cfgs, arch, arches[j], dtype) if args.across else None
                    if key not in results["random"] or across is not None:
                        rand = random_split(tb, model, args.seed, across)
                        results["random"].setdefault(key, {"selector": "random split", **rand})
                        if across is not None:
                            results["random"][key]["across"] = rand["across"]
                    results["family"].append({"arch": arch, "direction": direction, "dtype": dtype,
                                              "rows": leave_family_out(tb, arch, direction, dtype, model, args.seed,
                                                                       args.families, across)})
            print(f"  ({time.perf_counter() - t_start:.0f} s so far)", flush=True)
    print_transfer(results["gpu"], "Leave-one-GPU-out (open protocol): top-1 / mean efficiency / picks not listed, "
                   "on all of the target's problems (TunaNet: its domain)")
    if results["family"]:
        print("\nLeave-shape-family-out (open protocol): top-1 / mean efficiency / picks not listed; ranking every "
              "solver, and only those op.applicability=both leaves (op.listed learned without the family); the "
              "random split of the same file beside it")
        across = args.across
        extra = (" held out, across GPUs | random split, applicability both | random split, across GPUs |"
                 if across else "")
        print("| GPU | direction | dtype | held-out family | problems | held out | held out, applicability both | "
              f"random split |{extra}")
        print("| --- " * (8 + 3 * across) + "|")
        for g in results["family"]:
            rand = results["random"][f"{g['arch']} {g['direction']} {g['dtype']}"]
            for r in g["rows"]:
                more = (f" {cell(r['across'])} | {cell(rand['across']['both'])} | {cell(rand['across']['across'])} |"
                        if across else "")
                print(f"| {g['arch']} | {g['direction']} | {g['dtype']} | {r['family']} | {r['problems']:,} | "
                      f"{cell(r)} | {cell(r['both'])} | {cell(rand)} |{more}")
    print_transfer(results["fewshot"], "Bring-up few-shot (open protocol): top-1 / mean efficiency / picks not "
                   "listed, on the target's problems not measured")
    if results["remember"]:
        print_remember(results)
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"figures -> {out} ({time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
