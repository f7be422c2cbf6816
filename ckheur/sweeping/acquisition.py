"""Which problems to measure next: distances in log problem space, bootstrap ensembles and their
uncertainty about each unmeasured problem's pick.

Plain functions on arrays; the round driver is ``ckheur.sweeping.rounds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

ACQUISITIONS = ("combined", "regret", "disagreement", "distance")


def nearest_distance(Z: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Euclidean distance from each row of Z to its nearest row of ref (inf when ref is empty)."""
    if not len(ref):
        return np.full(len(Z), np.inf)
    out = np.empty(len(Z))
    step = max(1, 2_000_000 // max(1, ref.size))  # rows per chunk: bounded memory for large sets
    for i in range(0, len(Z), step):
        d2 = ((Z[i:i + step, None, :] - ref[None, :, :]) ** 2).sum(axis=2)
        out[i:i + step] = np.sqrt(d2.min(axis=1))
    return out


def farthest_points(Z: np.ndarray, count: int, measured: np.ndarray, seed: int) -> list[int]:
    """Greedy max-min (farthest-point) sampling of ``count`` rows of Z, away from ``measured``
    points; with nothing measured, the first pick is seeded at random."""
    if count <= 0 or not len(Z):
        return []
    d = nearest_distance(Z, measured)
    chosen: list[int] = []
    if not np.isfinite(d).any():
        first = int(np.random.default_rng(seed).integers(len(Z)))
        chosen.append(first)
        d = np.linalg.norm(Z - Z[first], axis=1)
    while len(chosen) < min(count, len(Z)):
        d[chosen] = -1.0
        nxt = int(np.argmax(d))
        chosen.append(nxt)
        d = np.minimum(d, np.linalg.norm(Z - Z[nxt], axis=1))
    return chosen


def stratified_order(clusters: np.ndarray, seed: int) -> np.ndarray:
    """An order of problems in which every prefix is spread over their shape clusters
    (``ckheur.problems.space.cluster_shapes`` labels) in proportion to cluster size: each problem sits at a
    seeded random position within its cluster."""
    rng = np.random.default_rng(seed)
    pos = np.empty(len(clusters))
    for c in np.unique(clusters):
        idx = np.flatnonzero(clusters == c)
        pos[idx] = (rng.permutation(len(idx)) + rng.random()) / len(idx)
    return np.argsort(pos, kind="stable")


@dataclass
class Uncertainty:
    """Per candidate problem: the consensus pick and how unsure the ensemble is of it."""

    pick: np.ndarray  # row (into the candidate rows) of the ensemble-mean best kernel
    regret: np.ndarray  # mean over members of (their best score - their score of the pick): expected loss
    disagreement: np.ndarray  # share of members whose own top-1 is not the consensus pick


def uncertainty(S: np.ndarray, pid: np.ndarray, n_problems: int) -> Uncertainty:
    """Ensemble uncertainty from member scores S [members, rows] of candidate rows grouped by pid
    (scores on the `relative` scale, so a score gap is a fraction of the best kernel)."""
    E = S.shape[0]
    mean = S.mean(axis=0)
    pick = np.full(n_problems, -1, dtype=np.int64)
    regret = np.zeros(n_problems)
    disagree = np.zeros(n_problems)
    order = np.argsort(pid, kind="stable")
    bounds = np.flatnonzero(np.diff(pid[order])) + 1
    for rows in np.split(order, bounds):
        if not len(rows):
            continue
        p = pid[rows[0]]
        c = rows[int(np.argmax(mean[rows]))]
        pick[p] = c
        sub = S[:, rows]
        regret[p] = float(np.mean(sub.max(axis=1) - S[:, c]))
        disagree[p] = float(np.mean(rows[np.argmax(sub, axis=1)] != c)) if E else 0.0
    return Uncertainty(pick, regret, disagree)


def acquisition_scores(kind: str, u: Uncertainty | None, distance: np.ndarray) -> np.ndarray:
    """Score of each candidate problem (higher: measure sooner) for an acquisition kind."""
    if kind == "distance" or u is None:
        return distance.copy()
    if kind == "regret":
        return u.regret.copy()
    if kind == "disagreement":
        return u.disagreement + 1e-3 * u.regret / max(u.regret.max(), 1e-12)  # regret breaks ties
    if kind == "combined":
        return u.regret / max(u.regret.mean(), 1e-12) + distance / max(distance.mean(), 1e-12)
    raise ValueError(f"acquisition {kind!r}: allowed values are {', '.join(ACQUISITIONS)}")


def choose_batch(kind: str, u: Uncertainty | None, Z: np.ndarray, measured: np.ndarray, costs: np.ndarray,
                 budget: int) -> tuple[list[int], list[dict]]:
    """Greedy batch of candidate rows of Z within ``budget`` pairs (``costs``: pairs per problem).

    Acquisitions that use distance update it after each pick, so a batch spreads out instead
    of piling onto one uncertain region. Returns the chosen rows and, per pick, why."""
    distance = nearest_distance(Z, measured)
    if not np.isfinite(distance).any():
        distance = np.ones(len(Z))
    scale = float(np.median(distance[np.isfinite(distance)])) or 1.0
    chosen: list[int] = []
    why: list[dict] = []
    left = int(budget)
    alive = costs <= left
    while alive.any():
        score = acquisition_scores(kind, u, distance / scale)
        score = np.where(alive, score, -np.inf)
        i = int(np.argmax(score))
        chosen.append(i)
        why.append({"score": round(float(score[i]), 5), "distance": round(float(distance[i] / scale), 4),
                    **({"regret": round(float(u.regret[i]), 5), "disagreement": round(float(u.disagreement[i]), 3)}
                       if u is not None else {})})
        left -= int(costs[i])
        alive[i] = False
        alive &= costs <= left
        if kind in ("combined", "distance") or u is None:
            distance = np.minimum(distance, np.linalg.norm(Z - Z[i], axis=1))
    return chosen, why


def train_ensemble(table: Any, model: Mapping[str, Any], members: int, trees: int, categorical: list[int],
                   seed: int, partial: str = "naive") -> tuple[list, list[np.ndarray]]:
    """Bootstrap ensemble of small `relative` models: each member trains on problems drawn with
    replacement; returns the boosters and, per member, the problems it did not see (out of bag).

    Members are small: each trains on one thread unless ``model.threads`` says otherwise."""
    from ckheur.learn.training import fit

    n = len(table.problems)
    rows_of = np.split(np.arange(len(table.pid)), np.flatnonzero(np.diff(table.pid)) + 1)  # rows sorted by pid
    rng = np.random.default_rng(seed)
    model = {**model, "threads": int(model.get("threads", 0)) or 1}
    boosters, oob = [], []
    for m in range(members):
        draw = rng.integers(0, n, n)
        rows = np.concatenate([rows_of[i] for i in np.sort(draw)])
        boosters.append(fit(table, rows, model, "relative", categorical, seed + m, trees, partial=partial))
        oob.append(np.setdiff1d(np.arange(n), draw))
    return boosters, oob


def oob_efficiency(table: Any, boosters: Sequence[Any], oob: Sequence[np.ndarray]) -> dict:
    """Out-of-bag selection efficiency: each measured problem is scored by the mean of the
    members that did not train on it, and its pick among the measured kernels is compared with
    the best measured one (the oracle on fully measured problems; on partly measured ones, as
    large pools are, an optimistic estimate). An estimate of the model's quality so far."""
    from ckheur.metrics import summarize
    from ckheur.threads import predict

    total = np.zeros(len(table.pid))
    count = np.zeros(len(table.pid))
    for b, out in zip(boosters, oob):
        rows = np.flatnonzero(np.isin(table.pid, out))
        if len(rows):
            total[rows] += predict(b, table.X[rows])
            count[rows] += 1
    effs = []
    rows = np.flatnonzero(count > 0)
    for g in np.split(rows, np.flatnonzero(np.diff(table.pid[rows])) + 1):
        if len(g):
            t = table.tflops[g]
            effs.append(float(t[int(np.argmax(total[g] / count[g]))] / t.max()))
    full = table.full if table.full is not None else np.ones(len(table.problems), dtype=bool)
    return {**summarize(effs), "fully_measured": int(full[np.unique(table.pid[rows])].sum()) if len(rows) else 0}


def expected_improvement(S: np.ndarray, pid: np.ndarray, best_row: np.ndarray) -> np.ndarray:
    """Per row: the mean over members of how much its score exceeds the member's score of the
    problem's best measured kernel (row ``best_row[pid]``): the expected gain of timing it."""
    base = S[:, best_row[pid]]
    return np.maximum(S - base, 0.0).mean(axis=0)
