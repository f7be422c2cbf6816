"""Selection metrics: how good is the kernel a model picks, per problem, against the oracle."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def pick_efficiency(scores: np.ndarray, measured: np.ndarray, best: float | None = None) -> dict[str, float]:
    """Metrics for one problem.

    ``scores``: model scores of the candidates (higher is better); ``measured``: their measured
    TFLOPS (NaN or <= 0: a failed run, efficiency 0); ``best``: the oracle's TFLOPS when it
    may be a kernel outside the candidates (default: the best candidate). Returns the pick's
    efficiency, exact top-1, top-1 within 1% of the oracle, and whether the oracle is in the
    predicted top-5. The pick is the first highest score (``np.argmax(scores)``).
    """
    measured = np.asarray(measured, dtype=float)
    ok = np.isfinite(measured) & (measured > 0)
    if best is None:
        if not ok.any():
            raise ValueError("no successful measurement for this problem: cannot define the oracle")
        best = measured[ok].max()
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    pick = order[0]
    eff = float(measured[pick] / best) if ok[pick] else 0.0
    oracle = np.flatnonzero(ok & (measured == best))
    return {"efficiency": eff, "top1": float(pick in oracle), "within_1pct": float(eff >= 0.99),
            "oracle_in_top5": float(bool(np.isin(order[:5], oracle).any())), "pick_failed": float(not ok[pick])}


def hybrid_pick(scores: np.ndarray, measured: np.ndarray, k: int) -> tuple[int, int]:
    """Hybrid selection on one problem: time the k best-scored candidates, keep the fastest that ran.

    Returns (index of the chosen candidate, kernels timed). When none of the k ran, the
    chosen one is the top-scored (a failed pick, efficiency 0)."""
    measured = np.asarray(measured, dtype=float)
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")[:k]
    vals = np.where(np.isfinite(measured[order]) & (measured[order] > 0), measured[order], -np.inf)
    return int(order[int(np.argmax(vals))]) if np.isfinite(vals).any() else int(order[0]), len(order)


def time_weighted(effs: Sequence[float], oracle_latency_ms: Sequence[float]) -> float:
    """Sum of oracle latencies over sum of picked latencies (picked = oracle / efficiency): the
    share of the best possible run time a network of these problems sees. Failed picks (0) are
    left out; count them with ``pick_failed``."""
    e, lat = np.asarray(effs, dtype=float), np.asarray(oracle_latency_ms, dtype=float)
    ok = e > 0
    return float(lat[ok].sum() / (lat[ok] / e[ok]).sum()) if ok.any() else float("nan")


def summarize(effs: Sequence[float]) -> dict[str, float]:
    """Mean, median, P10 and min of per-problem efficiencies."""
    e = np.asarray(effs, dtype=float)
    if not len(e):
        return {"mean": float("nan"), "median": float("nan"), "p10": float("nan"), "min": float("nan"), "n": 0}
    return {"mean": float(e.mean()), "median": float(np.median(e)), "p10": float(np.percentile(e, 10)),
            "min": float(e.min()), "n": int(len(e))}


def selection_report(problem_ids: np.ndarray, scores: np.ndarray, measured: np.ndarray) -> dict:
    """Per-problem metrics over a long table (one row per problem x candidate), summarized."""
    rows = []
    order = np.argsort(problem_ids, kind="stable")
    pid, sc, me = problem_ids[order], scores[order], measured[order]
    bounds = np.flatnonzero(np.diff(pid)) + 1
    for s, m in zip(np.split(sc, bounds), np.split(me, bounds)):
        if np.isfinite(m).any() and (m[np.isfinite(m)] > 0).any():
            rows.append(pick_efficiency(s, m))
    effs = [r["efficiency"] for r in rows]
    out = {"efficiency": summarize(effs)}
    for key in ("top1", "within_1pct", "oracle_in_top5", "pick_failed"):
        out[key] = float(np.mean([r[key] for r in rows])) if rows else float("nan")
    return out


def per_problem_efficiency(problem_ids: np.ndarray, scores: np.ndarray, tflops: np.ndarray) -> np.ndarray:
    """Each problem's pick (its best score) as a fraction of its fastest measured candidate, in
    problem-id order; a pick that did not run or is censored (TFLOPS NaN or 0) counts 0."""
    order, start = best_first(problem_ids, scores)
    tf = np.nan_to_num(np.asarray(tflops, dtype=float)[order], nan=0.0)
    best = np.maximum.reduceat(tf, start)
    return np.where(best > 0, tf[start] / np.where(best > 0, best, 1.0), 0.0)


def best_first(problem_ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows in problem-id order, each problem's by score, best first (ties in row order), and
    where each problem starts in that order: ``order[start]`` are the picks."""
    pid = np.asarray(problem_ids)
    order = np.lexsort((-np.asarray(scores, dtype=float), pid))
    ordered = pid[order]
    return order, np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])


def censored_choice_report(problem_ids: np.ndarray, scores: np.ndarray, time_ms: np.ndarray,
                           tie_tolerance: float = 0.02) -> dict:
    """A pick per problem judged in MIOpen's terms and ours when unlisted candidates are censored
    (``time_ms`` NaN: not applicable, or slower than every listed one), as in a find-db.

    Two protocols: ``open`` picks among every candidate (as a real fallback must; a censored pick
    counts as efficiency 0 and has no slowdown), ``listed`` among the listed ones only. Each gives
    top-1 (pick = fastest listed), tie-aware top-1 (within ``tie_tolerance`` of it), mean slowdown
    (t_pick / t_best - 1 over problems whose pick is listed), the share of picks outside the
    listed ones, efficiency t_best / t_pick (mean, median, P10, min) and time-weighted efficiency
    (sum of best times over sum of picked times, listed picks). A score of -inf marks a row the
    selector does not rank (a solver it does not know): it counts for the fastest listed time but is
    never picked, in either protocol."""
    scores = np.asarray(scores, dtype=float)
    order, start = best_first(problem_ids, scores)
    t, ranked = np.asarray(time_ms, dtype=float)[order], np.isfinite(scores[order])
    listed = np.isfinite(t)
    best = np.fmin.reduceat(np.where(listed, t, np.inf), start)
    has = np.isfinite(best)
    out = {}
    for protocol in ("open", "listed"):
        if protocol == "open":
            pick_t = np.where(ranked[start], t[start], np.nan)
        else:  # the first listed row of each problem in score order
            idx = np.where(listed & ranked, np.arange(len(t)), len(t))
            first_listed = np.minimum.reduceat(idx, start)
            pick_t = np.where(first_listed < len(t), t[np.minimum(first_listed, len(t) - 1)], np.nan)
        pick_t, b = pick_t[has], best[has]
        ok = np.isfinite(pick_t)
        eff = np.where(ok, b / np.where(ok, pick_t, 1.0), 0.0)
        out[protocol] = {
            "problems": int(has.sum()),
            "top1": float(np.mean(ok & (pick_t == b))),
            "top1_tie_aware": float(np.mean(ok & (pick_t <= b * (1 + tie_tolerance)))),
            "mean_slowdown": float(np.mean(pick_t[ok] / b[ok] - 1)) if ok.any() else float("nan"),
            "picks_outside_listed": float(np.mean(~ok)),
            "efficiency": summarize(eff),
            "time_weighted": float(b[ok].sum() / pick_t[ok].sum()) if ok.any() else float("nan"),
        }
    return out
