"""Screens: a model's first trees rank every candidate, and only their best get the other trees.

A boosted model's first trees carry most of its ranking. A bundle with a screen
(``feature_spec.json``'s ``screen``: ``{"trees": N, "top": k}``) sums the first N trees for
every candidate of a problem, then adds the other trees' sum for the k best of those (and the
remembered answer, which ``remember_margin`` compares with the whole model's score); the
others rank after them, in the first trees' order. The Python selector and the exported C
compute it alike, to the bit.

A screen changes the top-1 only where the whole model's best is not among the k best by the
first N trees. :func:`screen_table` counts that on problems (no measurement needed: the
reference is the whole model), and :func:`choose_screen` takes the cheapest screen that keeps
the top-1 on at least a given share of the problems of every set given.

    sel = Selector.load("models/miopen_fwd_fp32_gfx90a", screen=False)
    choice = choose_screen(sel, {"training": problems, "generated": family.problems.generate(0, 1000)},
                           {"training": 0.999, "generated": 0.995})
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError
from ckheur.families.problem_base import ProblemError
from ckheur.threads import predict

TREES = (100, 150, 200, 300, 400, 500, 750)  # first trees tried (those below the model's count) ...
SHARES = (0.1, 0.2, 0.3, 0.5)  # ... and these shares of its trees (a small model's screens)
TOPS = (2, 3, 4, 5, 6)  # candidates the whole model scores
# The share of problems whose top-1 a screen must keep: the bundle's training problems, and
# generated ones (shapes unlike the training data, where a screen errs more often; where it
# does, its pick is one of the model's next best).
BARS = {"training": 0.999, "generated": 0.995}


def trees_tried(total: int) -> list[int]:
    """The first-tree counts tried for a model of ``total`` trees."""
    return sorted({t for t in TREES if t < total} | {max(1, round(total * s)) for s in SHARES} - {total})


@dataclass(frozen=True)
class ScreenRow:
    """One screen on a set of problems: the share whose top-1 is the whole model's, and the row x
    tree evaluations per problem as a share of the whole model's."""

    trees: int
    top: int
    agreement: float
    cost: float


@dataclass(frozen=True)
class ScreenChoice:
    """The screen chosen, its figures per set of problems, and every screen tried."""

    trees: int
    top: int
    rows: dict  # set name -> ScreenRow of the chosen screen
    problems: dict  # set name -> problems scored
    table: dict  # set name -> [ScreenRow] of every screen tried

    def spec(self) -> dict:
        """What ``feature_spec.json`` records."""
        return {"trees": self.trees, "top": self.top}

    def describe(self) -> str:
        """The screen and its figures per set, in words."""
        return f"screen: the first {self.trees} trees, the whole model for the best {self.top}; " + "; ".join(
            f"{n}: top-1 kept on {r.agreement:.2%} of {self.problems[n]} problems, {r.cost:.0%} of the row x "
            "tree evaluations" for n, r in self.rows.items())


def _candidate_rows(selector: Any, problems: Sequence[Any]) -> list[np.ndarray]:
    """The feature rows of each problem's candidates, as the selector ranks them (problems it
    cannot rank are left out)."""
    out = []
    for p in problems:
        try:
            pool = selector._candidates(p)
        except ProblemError:
            continue
        out.append(selector._rows(p, pool)[0])
    return out


def _top1(groups: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each group's (rows sorted by group) first row of the highest score, as a stable ranking picks it."""
    order = np.lexsort((np.arange(len(scores)), -scores, groups))
    return order[np.r_[True, groups[order][1:] != groups[order][:-1]]]


def screen_table(selector: Any, problems: Sequence[Any], trees: Sequence[int] | None = None,
                 tops: Sequence[int] = TOPS) -> tuple[list[ScreenRow], int]:
    """Every screen (first trees x top) on the problems, beside the whole model (the selector's
    booster, scored without a screen), and the number of problems scored (``trees``: default
    :func:`trees_tried`)."""
    booster = selector.booster
    total = booster.num_trees()
    trees = trees_tried(total) if trees is None else trees
    rows = _candidate_rows(selector, problems)
    if not rows:
        raise ProblemError("none of the problems has a candidate to rank")
    X = np.concatenate(rows)
    sizes = np.array([len(r) for r in rows])
    groups = np.repeat(np.arange(len(rows)), sizes)
    whole = predict(booster, X)
    best = _top1(groups, whole)
    out = []
    for n in [t for t in trees if 0 < t < total]:
        first = predict(booster, X, num_iteration=n)
        for top in tops:
            agree = _top1(groups, screened_scores(groups, first, whole, top)) == best
            cost = np.where(sizes <= top, 1.0, (sizes * n + top * (total - n)) / (sizes * total))
            out.append(ScreenRow(n, top, float(agree.mean()), float(cost.mean())))
    return out, len(rows)


def choose_screen(selector: Any, problem_sets: Mapping[str, Sequence[Any]], min_agreement: Mapping[str, float],
                  trees: Sequence[int] | None = None, tops: Sequence[int] = TOPS) -> ScreenChoice | None:
    """The cheapest screen (by row x tree evaluations on the first set) that keeps the whole
    model's top-1 on at least ``min_agreement[name]`` of the problems of every set; None when
    none does, or none saves work."""
    for name in problem_sets:
        if not 0 < min_agreement[name] <= 1:
            raise ValueError(f"min_agreement[{name!r}]={min_agreement[name]}: a share in (0, 1]")
    tables, counts = {}, {}
    for name, problems in problem_sets.items():
        tables[name], counts[name] = screen_table(selector, problems, trees, tops)
    first = next(iter(tables))
    ok = [i for i, r in enumerate(tables[first]) if r.cost < 1.0
          and all(t[i].agreement >= min_agreement[name] for name, t in tables.items())]
    if not ok:
        return None
    i = min(ok, key=lambda i: (tables[first][i].cost, -tables[first][i].agreement))
    r = tables[first][i]
    return ScreenChoice(r.trees, r.top, {n: t[i] for n, t in tables.items()}, counts, tables)


def screened_scores(groups: np.ndarray, first: np.ndarray, whole: np.ndarray, top: int,
                    forced: np.ndarray | None = None) -> np.ndarray:
    """A screen applied to the rows of many problems at once (a table: ``groups`` the problem of
    each row; rows a selector does not rank have ``whole`` -inf and stay so): the whole model's
    score for each problem's ``top`` best rows by the first trees (ties: the earlier row) and the
    ``forced`` ones, the first trees' sum less ``SCREEN_OFFSET`` for the others, as the selector
    ranks them (its whole-model scores differ from ``whole`` in the last bits: a sum in two parts)."""
    from ckheur.learn.bundle import SCREEN_OFFSET

    ranked = np.isfinite(whole)
    order = np.lexsort((np.arange(len(first)), -np.where(ranked, first, -np.inf), ~ranked, groups))
    g = groups[order]
    start = np.r_[True, g[1:] != g[:-1]]
    position = np.arange(len(order)) - np.maximum.accumulate(np.where(start, np.arange(len(order)), 0))
    problem = np.unique(g, return_inverse=True)[1]
    count = np.bincount(problem, weights=ranked[order])  # rows ranked per problem
    keep = np.empty(len(order), dtype=bool)
    keep[order] = (position < top) | (count[problem] <= top)
    if forced is not None:
        keep |= forced
    return np.where(~ranked, -np.inf, np.where(keep, whole, first - SCREEN_OFFSET))


def training_problems(bundle: Any, limit: int, seed: int = 0) -> list:
    """Up to ``limit`` distinct problems (a seeded sample) of a loaded bundle's op and arch in the
    datasets its manifest lists, read at the paths written there."""
    from ckheur.data.dataset import read_dataset

    op, fields = bundle.spec["op"], list(bundle.family.problems.FIELDS)
    df = read_dataset([Path(d["path"]) for d in bundle.manifest["datasets"]])
    df = df[(df["direction"] == op["direction"]) & (df["dtype"] == op["dtype"])
            & (df["arch"] == bundle.spec["arch"]["name"])]
    keys = df[fields].drop_duplicates()
    if len(keys) > limit:
        keys = keys.iloc[np.sort(np.random.default_rng(seed).choice(len(keys), limit, replace=False))]
    return [bundle.family.problems.problem_from_dict(r) for r in keys.to_dict("records")]


class NeedsEveryTree(UserError):
    """A bundle whose model cannot be screened (an analytic prior: every tree scores every candidate)."""


def screen_bundle(folder: str | Path, *, problems: int = 3000, generated: int = 3000, seed: int = 0,
                  bars: Mapping[str, float] = BARS) -> ScreenChoice | None:
    """Choose a screen for a bundle (:func:`choose_screen` on up to ``problems`` of its training
    problems and ``generated`` generated ones) and write it into its feature_spec.json, the choice
    into its manifest (``screen_set``: the screen, the bars, its agreement and cost per set, the
    datasets by sha256); None, and the bundle unchanged but for any earlier screen removed, when
    no screen keeps the bars."""
    from ckheur.learn.bundle import load_bundle
    from ckheur.parts import sha256_of
    from ckheur.selection.selector import Selector

    b = load_bundle(folder)
    if b.spec.get("prior") is not None:
        raise NeedsEveryTree(f"{b.path}: a model with an analytic prior needs every tree for every candidate: no screen")
    sets = {"training": training_problems(b, problems, seed), "generated": b.family.problems.generate(seed, generated)}
    choice = choose_screen(Selector.load(folder, screen=False), sets, bars)
    record = None if choice is None else {
        **choice.spec(), "min_agreement": dict(bars),
        "sets": {n: {"problems": choice.problems[n], "agreement": round(r.agreement, 5), "cost": round(r.cost, 4)}
                 for n, r in choice.rows.items()},
        "datasets": [{"path": d["path"], "sha256": sha256_of(Path(d["path"]))} for d in b.manifest["datasets"]]}
    _write_screen(b, record)
    return choice


def remove_screen(folder: str | Path) -> None:
    """Take a bundle's screen away (its whole model then scores every candidate)."""
    from ckheur.learn.bundle import load_bundle

    _write_screen(load_bundle(folder), None)


def _write_screen(bundle: Any, record: Mapping[str, Any] | None) -> None:
    """Write a screen (``record``: the manifest's ``screen_set``, its trees and top the spec's
    ``screen``; None: none) into a loaded bundle's files, and check the bundle still loads."""
    from ckheur.learn.bundle import load_bundle, write_json

    spec = {k: v for k, v in bundle.spec.items() if k != "screen"}
    manifest = {k: v for k, v in bundle.manifest.items() if k != "screen_set"}
    if record is not None:
        spec["screen"] = {"trees": record["trees"], "top": record["top"]}
        manifest["screen_set"] = dict(record)
    write_json(bundle.path / "feature_spec.json", spec)
    write_json(bundle.path / "train_manifest.json", manifest)
    load_bundle(bundle.path)
