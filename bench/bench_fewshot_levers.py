#!/usr/bin/env python
"""Levers for the few-shot bring-up's gap to the ceiling (issue 49, item 4's target), measured on
chosen held-out cells with bench_logo's tables, models, sweep and open protocol.

Per cell (direction, dtype, held-out device), side by side on the same problems:

- **current**: bench_logo's few-shot 5% row: ``sweep.active.ranker``'s sweep (problems at random,
  each on the zero-shot (adopted) model's floor(sqrt(n)) best solvers plus half that drawn from the
  rest) times 5% of the device's pairs; a model across the five other devices plus those rows (x20)
  is trained from scratch;
- **prior-all**: the same rows, the new trees boosted from the zero-shot model's scores (LightGBM's
  init score, ``train.warm_start``'s mechanism), so they learn the device's correction to it;
- **prior-new**: trees boosted from the zero-shot model on the sweep's rows only (early stopping on
  15% of the swept problems); **prior-new lr 0.05**: the same with smaller steps;
- **full problems**: the sweep's allocation changed, at the same number of pairs: whole problems
  fully timed (every solver MIOpen's rules keep), fewer of them; then the current retrain, and
  **full problems, prior-new**;
- checks and other levers, each a variation of the current recipe: another seed (the noise
  floor), at most 2,000 trees instead of 500, 3 seeds averaged (``model.bagging_seeds``), the
  current model's and prior-new's per-problem ranks averaged, a listed-or-not classifier (trained on
  the five and the sweep's rows x20) whose "listed" solvers rank first, the swept problems whose
  every timed solver reads censored left out (as ``stage=train`` leaves them out; bench_logo keeps
  them, their rows label 0), the sweep's problems as partly measured (``train.partial=pairwise``);
- **served ranker** (a CDNA device held out: MI300X, MI210): the same budget, problems and seed, the
  sweep ranked by what ``sweep.active.ranker=served`` ranks with there, the nearest GPU's shipped
  bundle (bench_logo's "today's fallback", as ``ckheur.selection.predicting.serving`` picks it:
  its GPU shares the device's matrix cores and wave size); then the current retrain, and
  **served ranker, nearest + sweep**: retrained on that nearest device's rows and the sweep's (x20)
  instead of the five's; **current ranker, nearest + sweep** separates the two;
- **rounds**: the current sweep (the same problems, in the same order, and as many pairs) spent in
  rounds as ``stage=sweep sweep.strategy=active`` splits its budget by default (``first_round`` 25%,
  then ``round_size`` 12.5%: 7 rounds). The first round is ranked by the zero-shot (adopted) model,
  as the current sweep; each later round by the current recipe retrained on the rows timed so far
  (five + those x20); the final model is the current recipe on the whole sweep. **rounds, sweep-only
  ranker**: later rounds ranked by a model of the sweep's rows so far alone (closer to the product's
  ensemble, which also learns from the measured rows only; it picks problems by its acquisition, not
  at random, and averages 5 bootstrap models of 100 trees); three variations of it:
  ``rounds-own-narrow`` (2 ranked solvers + 1 at random per problem, ``sweep.active.top=2``: the
  same pairs over more problems, swept first so that no row is scored on them),
  ``rounds-own-ranked`` (as many solvers per problem, all from the ranking),
  ``rounds-own-bagged`` (its final model 3 seeds averaged) and ``rounds-own-flag`` (its final model
  given a "target" column: 1 on the held-out device's rows, in training and scoring, 0 on the
  five's, so that one split can set the new device apart) and ``rounds-own-affinity`` (its final
  model given each row's solver affinity on its device: the solver's mean throughput relative to the
  fastest timed solver of each problem a 5% sweep timed it on, NaN under 5 such problems; the
  held-out device's from its rounds' rows, each of the five's from a one-round sweep of its own
  table ranked by the zero-shot model, as the held-out device's first round is) and
  ``rounds-own-wide`` (its final model with 63 leaves instead of the recipe's 15: more room for six
  devices in one model; ``ceiling-wide`` gives the ceiling the same), ``rounds-own-more`` (at most
  2,000 trees, not 500) and ``rounds-own-wide-more`` (both; ``ceiling-wide-more``);
- **device weights** (``devweights``): after the current sweep, each of the five training devices'
  own model (bench_logo's "nearest device's own model": trained on that device's rows alone,
  ranking the solvers both tables have) picks a solver for each swept problem among its timed
  solvers; its score q_d is the mean efficiency of those picks (the fastest timed listed solver
  over the pick's time; a censored pick, or none, reads 0; problems with no listed time left out).
  The current recipe is then retrained with each device's rows weighted
  w_d = exp((q_d - max q) / 0.05), rescaled to mean 1 over the five's rows (the sweep's rows stay
  x20): the devices whose own choices fit the new GPU's measurements count more. The rule was fixed
  before any result. **device weights, sweep-only rounds** (``devweights-rounds-own``): the same
  retrain on the sweep of ``rounds, sweep-only ranker`` (its rows score the devices);
- **ceiling**: the device's own model on a random 80% of its problems (bench_logo's), also with at
  most 2,000 trees and with 3 seeds averaged;
- **the ceiling's learning curve** (``ceiling-at-5`` ... ``ceiling-at-40``): the same model with 63
  leaves and at most 2,000 trees (``ceiling-wide-more``'s), on a random 5%, 10%, 20% or 40% of the
  device's problems (nested: each share's problems hold the smaller shares'), drawn from the
  ceiling's 80%; and **the sweep's problems whole** (``ceiling-swept``): that model on the problems
  the sweep timed, with every solver of theirs the file lists, and nothing else. These are not
  levers: they say how much of the device's own data the few-shot rows stand for.

Every row is scored on the ceiling's 20% that no sweep here measured. The whole-problem sweep
takes its problems in the ranked sweep's order, so it measures a subset of them and the scored
problems are bench_logo's; "current, bench_logo's problems" scores the current model on
bench_logo's own set, to check that it reproduces bench_logo's figure.

    LOGO_DATA=<bench_logo.py's --data> python bench/bench_fewshot_levers.py --cells fwd:fp32:Vega56+MI60 \
        [--max-problems 1500] [--threads 1] [--rows current prior-all ... (default every row)] [--out levers.json]
    python bench/bench_fewshot_levers.py --table levers1.json levers2.json   # the tables of runs
    python bench/bench_fewshot_levers.py --gap rounds-own-wide-more ceiling-wide-more \
        --table seed0_a.json seed0_b.json --table seed1_a.json seed1_b.json   # a row's gap to a ceiling, per seed
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_logo import (BUNDLED, DEVICES, TARGET_WEIGHT, ceiling_split, device_tables, held_out,  # noqa: E402
                        nearest, problem_ranks, rows_of, sweep_rows, with_hw)
from bench_miopen_fdb import ROOT  # noqa: E402
from bench_unseen import bundle_scores, fit_on, predict_rows, ranked_rows, report  # noqa: E402

CURRENT = "current: five + the sweep's rows x20, retrained"
CEILING = "ceiling: its own model, random split"
ROWS = (CURRENT, "prior-all: five + sweep x20, boosted from the zero-shot model",
        "prior-new: sweep's rows only, boosted from the zero-shot model", "prior-new, lr 0.05",
        "full problems: same pairs, whole problems, retrained", "full problems, prior-new", CEILING)
CURRENT_SEED = "current, another seed (the noise floor)"
CURRENT_MORE = "current, at most 2,000 trees"
CEILING_MORE = "ceiling, at most 2,000 trees"
BAGGED = "current, 3 seeds averaged (model.bagging_seeds=3)"
CEILING_BAGGED = "ceiling, 3 seeds averaged"
ENSEMBLE = "current and prior-new, ranks averaged"
PAIRWISE = "current, the sweep's problems as partly measured (train.partial=pairwise)"
ANSWERED = "current, swept problems with no listed time left out (as training does)"
LISTED = "current, listed first (a listed-or-not classifier on the five + the sweep x20)"
SERVED = "served ranker (the nearest CDNA GPU's bundle): five + the sweep's rows x20, retrained"
SERVED_NEAR = "served ranker, nearest + sweep: the nearest CDNA device's rows + the sweep's x20, retrained"
NEAR = "current ranker, nearest + sweep: the nearest CDNA device's rows + the sweep's x20, retrained"
ROUNDS = "rounds: 25% then 12.5% per round, each later round ranked by five + the sweep so far x20, retrained"
ROUNDS_OWN = "rounds, sweep-only ranker: later rounds ranked by a model of the sweep's rows so far alone"
NARROW_TOP = 2  # rounds-own-narrow: sweep.active.top=2 (explore: half of it, rounded up: 1)
ROUNDS_NARROW = ("rounds, sweep-only ranker, 2 best + 1 at random per problem (sweep.active.top=2): the same pairs "
                 "over more problems")
ROUNDS_RANKED = ("rounds, sweep-only ranker, as many solvers per problem, all from the ranking (none at random): "
                 "floor(sqrt(n)) + half that")
ROUNDS_BAGGED = "rounds, sweep-only ranker, its final model 3 seeds averaged (model.bagging_seeds=3)"
ROUNDS_FLAG = ("rounds, sweep-only ranker, its final model with a target column (1 on the held-out device's rows, "
               "0 else)")
ROUNDS_AFFINITY = ("rounds, sweep-only ranker, its final model with a solver-affinity column (per device and solver: "
                   "the mean throughput relative to the fastest timed solver over the problems a 5% sweep timed it on)")
AFFINITY_MIN = 5  # timed problems a solver needs for an affinity (else missing); fixed before any result
WIDE_LEAVES = 63  # rounds-own-wide and ceiling-wide: num_leaves instead of the recipe's 15; fixed before any result
ROUNDS_WIDE = f"rounds, sweep-only ranker, its final model with {WIDE_LEAVES} leaves (not 15)"
CEILING_WIDE = f"ceiling, {WIDE_LEAVES} leaves"
ROUNDS_MORE = "rounds, sweep-only ranker, its final model at most 2,000 trees (not 500)"
ROUNDS_WIDE_MORE = f"rounds, sweep-only ranker, its final model with {WIDE_LEAVES} leaves and at most 2,000 trees"
CEILING_WIDE_MORE = f"ceiling, {WIDE_LEAVES} leaves and at most 2,000 trees"
CEILING_SHARES = (5, 10, 20, 40)  # % of the device's problems for the ceiling's learning curve
CEILING_AT = {p: f"ceiling, {WIDE_LEAVES} leaves and at most 2,000 trees, on {p}% of the problems" for p in CEILING_SHARES}
CEILING_SWEPT = (f"the sweep's problems whole: its own model, {WIDE_LEAVES} leaves and at most 2,000 trees, on the "
                 "problems the sweep timed, every listed solver")
DEV_WEIGHTS = ("device weights: five (each device's rows weighted by how well its own model picks among the sweep's "
               "timed solvers) + the sweep's rows x20, retrained")
DEV_WEIGHTS_ROUNDS = "device weights on the sweep of rounds, sweep-only ranker"
DEV_TEMPERATURE = 0.05  # w_d = exp((q_d - max q) / DEV_TEMPERATURE), fixed before any result
EVERY = (*ROWS[:-1], CURRENT_SEED, CURRENT_MORE, ENSEMBLE, LISTED, ANSWERED, PAIRWISE, BAGGED, SERVED, SERVED_NEAR,
         NEAR, ROUNDS, ROUNDS_OWN, ROUNDS_NARROW, ROUNDS_RANKED, ROUNDS_BAGGED, ROUNDS_FLAG, ROUNDS_AFFINITY,
         ROUNDS_WIDE, ROUNDS_MORE, ROUNDS_WIDE_MORE, DEV_WEIGHTS, DEV_WEIGHTS_ROUNDS, CEILING, CEILING_MORE,
         CEILING_BAGGED, CEILING_WIDE, CEILING_WIDE_MORE, CEILING_SWEPT, *CEILING_AT.values())
KEYS = dict(zip(("current", "prior-all", "prior-new", "prior-new-lr", "full", "full-prior", "seed", "more", "ensemble",
                 "listed", "answered", "pairwise", "bagged", "served", "served-near", "near", "rounds", "rounds-own",
                 "rounds-own-narrow", "rounds-own-ranked", "rounds-own-bagged", "rounds-own-flag",
                 "rounds-own-affinity", "rounds-own-wide", "rounds-own-more", "rounds-own-wide-more", "devweights",
                 "devweights-rounds-own", "ceiling", "ceiling-more", "ceiling-bagged", "ceiling-wide",
                 "ceiling-wide-more", "ceiling-swept", *(f"ceiling-at-{p}" for p in CEILING_SHARES)), EVERY,
                strict=True))
# where each round of stage=sweep's active strategy ends, in shares of the budget (RoundOptions' defaults:
# first_round 0.25, then round_size 0.125: 7 rounds)
ROUND_ENDS = tuple(0.25 + 0.125 * i for i in range(6))


def full_rows(tb, kept: np.ndarray, pairs: int, seed: int) -> np.ndarray:
    """Whole problems (every kept solver) in sweep_rows' random problem order, until ``pairs`` rows."""
    rng = np.random.default_rng(seed)
    by_problem = np.split(np.arange(len(tb.pid)), np.flatnonzero(np.diff(tb.pid)) + 1)
    out: list = []
    for p in rng.permutation(len(by_problem)):
        rows = by_problem[p]
        out.extend(rows[kept[rows]] if kept[rows].any() else rows)
        if len(out) >= pairs:
            break
    return np.sort(np.array(out, dtype=np.int64))


def solver_affinity(t, rows: np.ndarray) -> np.ndarray:
    """Per solver of ``t``'s kernels: its mean throughput relative to the fastest timed solver of each
    problem of ``rows`` it was timed on (a censored row reads 0); NaN where it was timed on fewer than
    AFFINITY_MIN problems with a time."""
    tf, pid, kid = t.tflops[rows], t.pid[rows], t.kid[rows]
    best = np.zeros(len(t.problems))
    np.maximum.at(best, pid, tf)
    ok = best[pid] > 0
    count = np.bincount(kid[ok], minlength=len(t.kernels))
    total = np.bincount(kid[ok], weights=tf[ok] / best[pid[ok]], minlength=len(t.kernels))
    return np.where(count >= AFFINITY_MIN, total / np.maximum(count, 1), np.nan)


def with_affinity(t, affinity: np.ndarray):
    """The table with each row's solver affinity appended as a column."""
    return dataclasses.replace(t, X=np.hstack([t.X, affinity[t.kid][:, None].astype(t.X.dtype)]),
                               feature_names=[*t.feature_names, "affinity"])


def found_best(tb, rows: np.ndarray) -> float:
    """The share of the problems of ``rows`` with a listed time whose fastest listed solver is among ``rows``."""
    t = np.where(tb.tflops > 0, tb.flops_over_tflops, np.inf)
    best = np.full(len(tb.problems), np.inf)
    np.minimum.at(best, tb.pid, t)
    hit = np.zeros(len(tb.problems), dtype=bool)
    hit[tb.pid[rows][t[rows] == best[tb.pid[rows]]]] = True
    timed = np.unique(tb.pid[rows])
    timed = timed[np.isfinite(best[timed])]
    return float(hit[timed].mean()) if len(timed) else float("nan")


def served_sweep(tb, held: str, cfgs: dict, direction: str, dtype: str, kept: np.ndarray) -> tuple | None:
    """Where ``sweep.active.ranker=served`` ranks a held-out device's sweep with the nearest GPU's
    shipped bundle (its GPU shares the device's matrix cores and wave size: bench_logo's AS_SERVED):
    that GPU's device and the bundle's scores of the rows (-inf where the rules leave a solver out);
    None where it ranks with the model across GPUs (the current ranker)."""
    from ckheur.selection.predicting import traits_apart

    near = nearest(held, [d for d in DEVICES if d != held and DEVICES[d][0] in BUNDLED], cfgs, dtype)
    if traits_apart(cfgs[held], cfgs[near]):
        return None
    scores = bundle_scores(ROOT / "models" / f"miopen_{direction}_{dtype}_{DEVICES[near][0]}", tb)[0]
    return near, np.where(kept, scores, -np.inf)


def one_op(data: Path, direction: str, dtype: str, helds: list, max_problems: int, seed: int, threads: int,
           rows_wanted: tuple = EVERY, budget: float = 0.05, on_cell=None) -> dict:
    """The levers on each held-out device of one direction and dtype (``on_cell(cell, rows)`` after each)."""
    from ckheur.learn.training import concat_tables
    from ckheur.threads import lightgbm as lgb

    t0 = time.perf_counter()
    model, cfgs, tables, union_list, hw, trained = device_tables(data, direction, dtype, max_problems, seed, threads)
    kinds = {d: with_hw(tb, cfgs[d], dtype, union_list, kinds=True) for d, tb in tables.items()}
    own_models: dict = {}  # each device's own model (its rows alone), fitted once per direction and dtype
    out = {}
    for held in helds:
        tb, mine, others, rows, kept = held_out(tables, hw, held)
        # the zero-shot (adopted) ranker, as bench_logo builds it
        zero, _ = fit_on(concat_tables([trained[d] for d in others]), None, model, seed)
        z_id = np.where(kept, predict_rows(zero, mine, rows), -np.inf)
        # the prior as it ranks: its trees up to early stopping's best (LightGBM would add to all of them)
        prior = lgb().Booster(model_str=zero.model_to_string(num_iteration=zero.best_iteration or None))
        by_kind = concat_tables([rows_of(kinds[d], np.flatnonzero(tables[d].listed[tables[d].kid])) for d in others])
        by_kind_model, _ = fit_on(by_kind, None, model, seed)
        seen = np.zeros(len(union_list), dtype=bool)
        for d in others:
            seen[np.unique(trained[d].kid[trained[d].tflops > 0])] = True
        z = np.where(seen[mine.kid], z_id, np.where(kept, predict_rows(by_kind_model, kinds[held], rows), -np.inf))

        swept = sweep_rows(tb, kept, z, budget, seed)
        whole = full_rows(tb, kept, len(swept), seed)
        served = served_sweep(tb, held, cfgs, direction, dtype, kept) if {SERVED, SERVED_NEAR, NEAR} & {
            *rows_wanted} else None
        s_swept = swept[:0] if served is None else sweep_rows(tb, kept, served[1], budget, seed)
        rounds_swept: dict = {}

        def sweep_in_rounds(name, top=None, explore=0.5):  # the current sweep's budget and problem order, in rounds
            def rerank(so_far):
                m = one(so_far) if name == ROUNDS else fit_on(rows_of(mine, so_far), None, model, seed)[0]
                return np.where(kept, predict_rows(m, mine, rows), -np.inf)

            rounds_swept[name] = sweep_rows(tb, kept, z, budget, seed, explore, rounds=ROUND_ENDS, rerank=rerank,
                                            top=top)
            return rounds_swept[name]

        five = [trained[d] for d in others]
        one = lambda swept_rows, m=model, s=seed, init=None, base=five: fit_on(  # noqa: E731
            concat_tables([*base, rows_of(mine, swept_rows, TARGET_WEIGHT)]), None, m, s, init_model=init)[0]
        # the narrow sweep covers more problems than the others: swept first, so that no row is scored on them
        narrow = sweep_in_rounds(ROUNDS_NARROW, NARROW_TOP) if ROUNDS_NARROW in rows_wanted else swept[:0]
        ranked_only = sweep_in_rounds(ROUNDS_RANKED, lambda n: math.isqrt(n) + math.ceil(math.isqrt(n) / 2), 0.0) \
            if ROUNDS_RANKED in rows_wanted else swept[:0]
        test = ceiling_split(len(tb.problems), seed)
        measured = np.zeros(len(tb.problems), dtype=bool)
        measured[tb.pid[swept]] = True
        logo_set = np.flatnonzero(test[tb.pid] & ~measured[tb.pid])  # bench_logo's scored rows
        measured[tb.pid[whole]] = True
        measured[tb.pid[s_swept]] = True  # the same problems as the ranked sweep's (same draw, same counts)
        measured[tb.pid[narrow]] = True
        measured[tb.pid[ranked_only]] = True
        scored = np.flatnonzero(test[tb.pid] & ~measured[tb.pid])  # no sweep here measured them
        res: dict = {}
        trees: dict = {}  # each row's tree count, in the JSON

        def add(name, booster, on=scored, rank_all=False, table=mine):
            trees[name] = int(booster.best_iteration or booster.current_iteration())
            s = predict_rows(booster, table, on)
            s = s if rank_all else np.where(kept[on], s, -np.inf)
            res[name] = report(tb, on, np.where(tb.listed[tb.kid[on]], s, -np.inf))

        own = lambda swept_rows, m=model: fit_on(  # noqa: E731
            rows_of(mine, swept_rows), None, m, seed, init_model=prior)[0]
        more = {**model, "max_trees": 2000}
        fits = {CURRENT: lambda: one(swept), ROWS[1]: lambda: one(swept, init=prior), ROWS[2]: lambda: own(swept),
                ROWS[3]: lambda: own(swept, {**model, "learning_rate": 0.05}), ROWS[4]: lambda: one(whole),
                ROWS[5]: lambda: own(whole), CURRENT_SEED: lambda: one(swept, s=seed + 1),
                CURRENT_MORE: lambda: one(swept, more), BAGGED: lambda: one(swept, {**model, "bagging_seeds": 3})}
        # the swept problems with a listed time: a problem whose every timed solver reads censored has no
        # measurement to rank against, and training leaves it out (ckheur.learn.training; bench_logo keeps it)
        timed = np.zeros(len(tb.problems), dtype=bool)
        timed[tb.pid[swept[tb.tflops[swept] > 0]]] = True
        answered = swept[timed[tb.pid[swept]]]

        def pairwise():
            # the sweep's problems marked partly measured: pairs of their timed solvers, not "the best
            # timed is the best" (the naive target); early stopping as fit_on's. Only the answered ones: a
            # problem whose timed solvers all read censored has no best, and its pairs' targets would be NaN
            from sklearn.model_selection import GroupShuffleSplit

            from ckheur.learn.training import fit

            part = rows_of(mine, answered, TARGET_WEIGHT)
            joined = concat_tables([*five, dataclasses.replace(part, full=np.zeros(len(part.problems), dtype=bool))])
            every = np.arange(len(joined.pid))
            a, b = next(GroupShuffleSplit(n_splits=1, test_size=0.15, random_state=seed + 1)
                        .split(every, groups=joined.pid))
            cat = [joined.feature_names.index(c) for c in ("solver", "algorithm", "implementation", "dtype")
                   if c in joined.feature_names]
            return fit(joined, np.sort(every[a]), model, "relative", cat, seed, model["max_trees"],
                       valid_rows=np.sort(every[b]), partial="pairwise")

        fits[PAIRWISE] = pairwise
        fits[ANSWERED] = lambda: one(answered)
        if served is not None:  # a CDNA device: the served ranker's sweep, and the nearest CDNA device as the base
            fits[SERVED] = lambda: one(s_swept)
            fits[SERVED_NEAR] = lambda: one(s_swept, base=[trained[served[0]]])
            fits[NEAR] = lambda: one(swept, base=[trained[served[0]]])
        boosters: dict = {}

        def booster(name):  # each row's model is fitted once, whichever rows need it
            if name not in boosters:
                boosters[name] = fits[name]()
            return boosters[name]

        def rounds_of(name):  # the same problems and pairs as the current sweep, spent in rounds (swept once)
            if name not in rounds_swept:
                r = sweep_in_rounds(name)
                assert np.array_equal(np.unique(tb.pid[r]), np.unique(tb.pid[swept])) and len(r) == len(swept)
            return rounds_swept[name]

        def in_rounds(name):
            return one(rounds_of(name))

        fits[ROUNDS] = lambda: in_rounds(ROUNDS)
        fits[ROUNDS_OWN] = lambda: in_rounds(ROUNDS_OWN)
        fits[ROUNDS_NARROW] = lambda: one(narrow)
        fits[ROUNDS_RANKED] = lambda: one(ranked_only)

        def bagged_rounds():
            return one(rounds_of(ROUNDS_OWN), {**model, "bagging_seeds": 3})

        fits[ROUNDS_BAGGED] = bagged_rounds
        wide = {**model, "num_leaves": WIDE_LEAVES}
        fits[ROUNDS_WIDE] = lambda: one(rounds_of(ROUNDS_OWN), wide)
        fits[ROUNDS_MORE] = lambda: one(rounds_of(ROUNDS_OWN), more)
        fits[ROUNDS_WIDE_MORE] = lambda: one(rounds_of(ROUNDS_OWN), {**wide, "max_trees": 2000})

        def flagged(t, value):  # a table with the target column appended
            return dataclasses.replace(t, X=np.hstack([t.X, np.full((len(t.X), 1), value, dtype=t.X.dtype)]),
                                       feature_names=[*t.feature_names, "target"])

        def flag_rounds():
            return fit_on(concat_tables([*(flagged(t, 0.0) for t in five),
                                         flagged(rows_of(mine, rounds_of(ROUNDS_OWN), TARGET_WEIGHT), 1.0)]),
                          None, model, seed)[0]

        fits[ROUNDS_FLAG] = flag_rounds
        affinities: dict = {}

        def affinity_rounds():
            # each of the five: a one-round sweep of its own table at the same budget, ranked by the zero-shot
            # model (trained on the five), as the held-out device's first round is; the held-out device: its rounds
            for d in others:
                t_d, h_d = tables[d], hw[d]
                every = np.arange(len(t_d.pid))
                kept_d = ranked_rows(t_d, t_d.op, every)
                z_d = np.where(kept_d, predict_rows(zero, h_d, every), -np.inf)
                affinities[d] = solver_affinity(h_d, sweep_rows(t_d, kept_d, z_d, budget, seed))
            affinities[held] = solver_affinity(mine, rounds_of(ROUNDS_OWN))
            return fit_on(concat_tables([*(with_affinity(trained[d], affinities[d]) for d in others),
                                         with_affinity(rows_of(mine, rounds_of(ROUNDS_OWN), TARGET_WEIGHT),
                                                       affinities[held])]), None, model, seed)[0]

        fits[ROUNDS_AFFINITY] = affinity_rounds
        device_weights: dict = {}

        def weighted(name, swept_rows):  # the current recipe, each training device's rows weighted by its score
            q = {}
            for d in others:  # its own model's picks among the sweep's timed solvers (as bench_logo's nearest)
                if d not in own_models:
                    own_models[d] = fit_on(trained[d], None, model, seed)[0]
                theirs = {k.name for k in tables[d].kernels}
                known = np.array([k.name in theirs for k in tb.kernels])
                s = np.where(kept[swept_rows] & known[tb.kid[swept_rows]],
                             predict_rows(own_models[d], mine, swept_rows), -np.inf)
                q[d] = report(tb, swept_rows, s)["efficiency"]
            w = {d: float(np.exp((q[d] - max(q.values())) / DEV_TEMPERATURE)) for d in others}
            n = {d: len(trained[d].pid) for d in others}
            scale = sum(n.values()) / sum(w[d] * n[d] for d in others)  # mean 1 over the five's rows
            w = {d: w[d] * scale for d in others}
            device_weights[name] = {d: [round(q[d], 4), round(w[d], 4)] for d in others}
            base = [dataclasses.replace(trained[d], weight=np.full(n[d], w[d])) for d in others]
            return one(swept_rows, base=base)

        fits[DEV_WEIGHTS] = lambda: weighted(DEV_WEIGHTS, swept)

        def weighted_rounds():
            return weighted(DEV_WEIGHTS_ROUNDS, rounds_of(ROUNDS_OWN))

        fits[DEV_WEIGHTS_ROUNDS] = weighted_rounds
        for name in rows_wanted:
            if name == ROUNDS_FLAG:
                add(name, booster(name), table=flagged(mine, 1.0))
            elif name == ROUNDS_AFFINITY:
                fitted = booster(name)  # fills affinities[held]
                add(name, fitted, table=with_affinity(mine, affinities[held]))
            elif name in fits:
                add(name, booster(name))
            if name == CURRENT:
                add("current, bench_logo's problems", booster(name), logo_set)
        if ENSEMBLE in rows_wanted:  # the current model and prior-new, their scores' per-problem ranks averaged
            a, b = booster(CURRENT), booster(ROWS[2])
            ra, rb = (problem_ranks(tb.pid[scored], np.where(kept[scored], predict_rows(x, mine, scored), -np.inf))
                      for x in (a, b))
            res[ENSEMBLE] = report(tb, scored, np.where(tb.listed[tb.kid[scored]] & kept[scored], ra + rb, -np.inf))
        if LISTED in rows_wanted:  # P(the device's file lists the solver for the problem), the sweep's rows x20
            joined = concat_tables([*five, rows_of(mine, swept, TARGET_WEIGHT)])
            cat = [joined.feature_names.index(c) for c in ("solver", "algorithm", "implementation")
                   if c in joined.feature_names]
            clf = lgb().train({"objective": "binary", "num_leaves": 15, "learning_rate": 0.15, "verbose": -1,
                               "num_threads": threads, "seed": seed, "min_data_in_leaf": 20},
                              lgb().Dataset(joined.X, (joined.tflops > 0).astype(float), weight=joined.weight,
                                            categorical_feature=cat), 200)
            a = booster(CURRENT)
            sc = np.where(kept[scored], predict_rows(a, mine, scored), -np.inf)
            sc = sc + 1e3 * (clf.predict(mine.X[scored]) > 0.5)
            res[LISTED] = report(tb, scored, np.where(tb.listed[tb.kid[scored]], sc, -np.inf))
        for name, m in ((CEILING, model), (CEILING_MORE, more), (CEILING_BAGGED, {**model, "bagging_seeds": 3}),
                        (CEILING_WIDE, wide), (CEILING_WIDE_MORE, {**wide, "max_trees": 2000})):
            if name in rows_wanted:
                ceiling, _ = fit_on(mine, np.flatnonzero(~test[tb.pid] & tb.listed[tb.kid]), m, seed)
                add(name, ceiling, rank_all=True)  # as bench_logo scores it: every solver of the table
        wide_more = {**wide, "max_trees": 2000}
        train_problems = np.random.default_rng(seed + 11).permutation(np.flatnonzero(~test))
        for p, name in CEILING_AT.items():  # nested shares of the device's problems, from the ceiling's 80%
            if name in rows_wanted:
                share = np.zeros(len(tb.problems), dtype=bool)
                share[train_problems[:round(p / 100 * len(tb.problems))]] = True
                add(name, fit_on(mine, np.flatnonzero(share[tb.pid] & tb.listed[tb.kid]), wide_more, seed)[0],
                    rank_all=True)
        if CEILING_SWEPT in rows_wanted:  # the problems the sweep timed, whole
            add(CEILING_SWEPT, fit_on(mine, np.flatnonzero(np.isin(tb.pid, tb.pid[swept]) & tb.listed[tb.kid]),
                                      wide_more, seed)[0], rank_all=True)
        res["_meta"] = {"pairs": int(len(swept)), "problems_swept": int(len(np.unique(tb.pid[swept]))),
                        "pairs_full": int(len(whole)), "problems_full": int(len(np.unique(tb.pid[whole]))),
                        "scored_problems": int(len(np.unique(tb.pid[scored]))), "prior_trees": prior.num_trees(),
                        "served_pairs": int(len(s_swept)), "served_problems": int(len(np.unique(tb.pid[s_swept]))),
                        "served_by": None if served is None else served[0], "found_best": found_best(tb, swept),
                        "served_found_best": found_best(tb, s_swept),
                        "narrow_pairs": int(len(narrow)), "narrow_problems": int(len(np.unique(tb.pid[narrow]))),
                        **{f"found_best {k}": found_best(tb, r) for k, r in rounds_swept.items()},
                        **({"device_weights (q, w)": device_weights} if device_weights else {}),
                        "trees": trees}
        out[f"{direction} {dtype} {held}"] = res
        if on_cell is not None:
            on_cell(f"{direction} {dtype} {held}", res)
        line = "; ".join(f"{n.split(':')[0]}: {100 * r['top1']:.1f} / {100 * r['efficiency']:.2f} / "
                         f"{100 * r['not_listed']:.2f}" for n, r in res.items() if n != "_meta")
        print(f"{direction} {dtype} {held} ({time.perf_counter() - t0:.0f} s) {res['_meta']}: {line}", flush=True)
    return out


def tables_md(results: dict) -> list[str]:
    """Per cell the current recipe and the ceiling; each row's efficiency minus the current recipe's
    per cell; each row's means, with the spread of its per-cell difference."""
    seen = {n for r in results.values() for n in r}
    names = [n for n in EVERY if n in seen]
    cells = list(results)
    short = lambda c: c.replace("bwd_weight", "bwd_w")  # noqa: E731
    fig = lambda x: f"{100 * x['top1']:.1f} / {100 * x['efficiency']:.2f} / {100 * x['not_listed']:.2f}"  # noqa: E731
    found = lambda m, k: f"{100 * m[k]:.1f}" if k in m and np.isfinite(m[k]) else ""  # noqa: E731
    lines = ["| cell | pairs timed (problems; whole problems: problems) | current | ceiling | swept problems whose "
             "fastest was timed, %: ranked sweep (served ranker's) [rounds'] |", "| --- | --- | --- | --- | --- |"]
    for c, r in results.items():
        m = r["_meta"]
        lines.append(f"| {c} | {m['pairs']} ({m['problems_swept']}; {m['problems_full']}) | "
                     f"{fig(r[CURRENT]) if CURRENT in r else ''} | {fig(r[CEILING]) if CEILING in r else ''} | "
                     f"{found(m, 'found_best')} ({found(m, 'served_found_best')}) "
                     f"[{found(m, f'found_best {ROUNDS}')}] |")
    for what in ("efficiency", "top1"):
        lines += ["", f"| row: {what.replace('top1', 'top-1')} minus current's (points) | "
                  + " | ".join(short(c) for c in cells) + " |", "| --- | " + " | ".join("---" for _ in cells) + " |"]
        for n in names:
            if n != CURRENT:
                lines.append(f"| {n} | " + " | ".join(f"{100 * (r[n][what] - r[CURRENT][what]):+.2f}"
                                                       if n in r and CURRENT in r else "" for r in results.values())
                             + " |")
    lines += ["", "| row | cells | mean top-1 | mean efficiency | mean unlisted | efficiency minus current: mean, "
              "spread (sd), better in | top-1 minus current: mean, spread (sd), better in | gap to the ceiling "
              "(efficiency / top-1, the cells with both) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for n in names:
        cells_n = [r for r in results.values() if n in r and CURRENT in r]
        if not cells_n:  # a run without the current recipe: --gap compares its rows
            continue
        both = [r for r in cells_n if CEILING in r]
        gap = lambda k: 100 * np.mean([r[CEILING][k] - r[n][k] for r in both])  # noqa: E731
        e = np.array([r[n]["efficiency"] - r[CURRENT]["efficiency"] for r in cells_n]) * 100
        t = np.array([r[n]["top1"] - r[CURRENT]["top1"] for r in cells_n]) * 100
        mean = lambda k: 100 * np.mean([r[n][k] for r in cells_n])  # noqa: E731
        lines.append(f"| {n} | {len(cells_n)} | {mean('top1'):.1f} | {mean('efficiency'):.2f} | "
                     f"{mean('not_listed'):.2f} | "
                     f"{e.mean():+.2f}, {e.std(ddof=1) if len(e) > 1 else 0:.2f}, {(e > 0).sum()} of {len(e)} | "
                     f"{t.mean():+.2f}, {t.std(ddof=1) if len(t) > 1 else 0:.2f}, {(t > 0).sum()} of {len(t)} | "
                     + (f"{gap('efficiency'):.2f} / {gap('top1'):.2f} ({len(both)}) |" if both else " |"))
    return lines


CDNA = ("MI300X", "MI210")  # the gap's groups: the CDNA GPUs and the four older ones


def gap_md(groups: list[dict], row: str, ceiling: str) -> list[str]:
    """``row``'s gap to ``ceiling`` (efficiency / top-1 points) over the cells of each group of runs
    (a seed): means over all cells, the CDNA GPUs' and the older ones', per held-out GPU, the run's
    pairs and problems; with several groups, their mean over the cells they share."""
    pct = lambda rs, n, k: 100 * np.mean([r[n][k] for r in rs])  # noqa: E731
    gaps = lambda rs, k: np.array([100 * (r[ceiling][k] - r[row][k]) for r in rs])  # noqa: E731
    se = lambda x: x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else 0.0  # noqa: E731
    lines = [f"row: {row}; ceiling: {ceiling}", "", "| seed (group) | cells | row: top-1 / efficiency / unlisted % | "
             "ceiling | gap: efficiency / top-1 (standard error) | cells within 1 / 3 | worst efficiency gap |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, results in enumerate(groups):
        both = {c: r for c, r in results.items() if row in r and ceiling in r}
        for name, keep in (("all", lambda c: True), ("MI300X and MI210", lambda c: c.endswith(CDNA)),
                           ("the four older GPUs", lambda c: not c.endswith(CDNA))):
            rs = [r for c, r in both.items() if keep(c)]
            if not rs:
                continue
            e, t = gaps(rs, "efficiency"), gaps(rs, "top1")
            lines.append(f"| {i} ({name}) | {len(rs)} | " + " | ".join(
                f"{pct(rs, n, 'top1'):.1f} / {pct(rs, n, 'efficiency'):.2f} / {pct(rs, n, 'not_listed'):.2f}"
                for n in (row, ceiling)) + f" | {e.mean():.2f} ({se(e):.2f}) / {t.mean():.2f} ({se(t):.2f}) | "
                f"{(e <= 1).sum()} / {(t <= 3).sum()} | {e.max():.2f} |")
        per = {d: [r for c, r in both.items() if c.endswith(" " + d)] for d in DEVICES}
        lines.append(f"| {i}, per GPU: efficiency / top-1 gap | | " + ", ".join(
            f"{d} {gaps(rs, 'efficiency').mean():.2f} / {gaps(rs, 'top1').mean():.1f}" for d, rs in per.items() if rs)
            + " | | | | |")
        metas = [r["_meta"] for r in both.values()]
        if metas:
            lines.append(f"| {i}, per cell: pairs timed, problems swept, problems scored | | " + ", ".join(
                f"{np.mean([m[k] for m in metas]):.0f}" for k in ("pairs", "problems_swept", "scored_problems"))
                + " | | | | |")
    shared = [c for c in groups[0] if all(row in g.get(c, {}) and ceiling in g.get(c, {}) for g in groups)]
    if len(groups) > 1 and shared:
        e = np.array([[100 * (g[c][ceiling]["efficiency"] - g[c][row]["efficiency"]) for c in shared] for g in groups])
        t = np.array([[100 * (g[c][ceiling]["top1"] - g[c][row]["top1"]) for c in shared] for g in groups])
        lines += ["", f"{len(groups)} groups, the {len(shared)} cells they share: gap {e.mean():.2f} / {t.mean():.2f} "
                  f"(per group {', '.join(f'{x:.2f}' for x in e.mean(1))} / {', '.join(f'{x:.2f}' for x in t.mean(1))}); "
                  f"standard error of the cells' means {se(e.mean(0)):.2f} / {se(t.mean(0)):.2f}; cells whose mean is "
                  f"within 1 / 3: {(e.mean(0) <= 1).sum()} / {(t.mean(0) <= 3).sum()}"]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("LOGO_DATA", "/tmp/ckheur_logo_data"),
                    help="bench_logo.py's --data (the six find-dbs imported once)")
    ap.add_argument("--cells", nargs="+", default=[], help="DIRECTION:DTYPE:DEVICE[+DEVICE...]")
    ap.add_argument("--max-problems", type=int, default=1500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=0.05, help="the share of the held-out device's pairs the sweep "
                    "times (issue 49's few-shot target: 0.05)")
    ap.add_argument("--rows", nargs="+", default=None, choices=list(KEYS), help="only these rows (default every row)")
    ap.add_argument("--out", default=None, help="write the results as JSON (kept after each cell)")
    ap.add_argument("--table", nargs="+", action="append", default=None, help="print the tables of these JSON "
                    "results, run nothing; given again, another group of runs (another seed, for --gap)")
    ap.add_argument("--gap", nargs=2, default=None, choices=list(KEYS), metavar=("ROW", "CEILING"),
                    help="with --table: ROW's gap to CEILING per group, not the tables against the current recipe")
    args = ap.parse_args()
    wanted = EVERY if args.rows is None else tuple(KEYS[r] for r in args.rows)
    results: dict = {}
    groups: list[dict] = []
    for files in args.table or []:
        groups.append({})
        for f in files:  # rows of the same cell from several runs side by side (each row is one fit)
            for cell, rows in json.loads(Path(f).read_text()).items():
                groups[-1].setdefault(cell, {}).update(rows)
                results.setdefault(cell, {}).update(rows)
    if args.gap:
        for line in gap_md(groups, KEYS[args.gap[0]], KEYS[args.gap[1]]):
            print(line)
        return

    def keep(cell: str, rows: dict) -> None:
        results[cell] = rows
        if args.out:  # after each cell: a run stopped early keeps the cells it finished
            Path(args.out).write_text(json.dumps(results, indent=1, default=float))

    for spec in args.cells:
        direction, dtype, helds = spec.split(":")
        one_op(Path(args.data), direction, dtype, helds.split("+"), args.max_problems, args.seed, args.threads, wanted,
               args.budget, on_cell=keep)
    for line in tables_md(results):
        print(line)


if __name__ == "__main__":
    main()
