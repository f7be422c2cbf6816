"""Fitting the simulator's free parameters to real measurements: one calibration function for
``tools/calibrate_sim.py`` (the shipped parameters) and for training's leakage guard (each CV
fold calibrates on its training problems only, so simulator-based candidates are scored on
problems the simulator never saw).

The fit is a random local search (perturb a few parameters, keep improvements) of
``mean efficiency of the simulator's pick + 0.5 x median per-problem Spearman`` between
simulated and measured TFLOPS.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.sim import predicted_tflops

# (path, low, high, log-scale) of each searched parameter
SPACE = [
    (("launch_us",), 0.5, 20, True), (("warp16_eff",), 0.4, 1.2, False),
    (("l2_bytes_per_cycle_cu",), 8, 256, True), (("gather_penalty",), 0.0, 2.0, False),
    (("overlap_loss",), 0.0, 1.0, False), (("store_bytes_per_cycle_cu",), 4, 256, True),
    (("wg_overhead_cycles",), 100, 20000, True), (("l2_reuse",), 1, 32, True), (("hbm_eff",), 0.3, 1.0, False),
] + [(("pipelines", p, f), lo, hi, lg) for p in ("compv3", "compv4")
     for f, lo, hi, lg in (("mfma_eff", 0.3, 1.0, False), ("prologue_iters", 0.0, 8.0, False),
                           ("occupancy_cap", 1.0, 4.0, False))]


@dataclass
class CalibrationData:
    """Measured TFLOPS of problems x kernels (NaN: not measured) with the simulator's inputs."""

    prob: dict  # problem arrays (ckheur.sim.problem_arrays or a feature engine's)
    kern: dict  # kernel arrays
    real: np.ndarray  # [problems, kernels] measured TFLOPS, NaN where not measured
    arch: Mapping[str, Any]
    direction: str

    def subset(self, problems: np.ndarray) -> "CalibrationData":
        """The same data restricted to some problems (indices into the rows of ``real``)."""
        return CalibrationData({k: v[problems] for k, v in self.prob.items()}, self.kern, self.real[problems],
                               self.arch, self.direction)


def calibration_data(prob: dict, kern: dict, pid: np.ndarray, kid: np.ndarray, tflops: np.ndarray,
                     arch: Mapping[str, Any], direction: str) -> CalibrationData:
    """Calibration data from measured pairs (problem index, kernel index, TFLOPS); repeats of a
    pair take their median, and zero TFLOPS (censored, failed) count as not measured."""
    n_p, n_k = len(next(iter(prob.values()))), len(next(iter(kern.values())))
    cell = np.asarray(pid, dtype=np.int64) * n_k + np.asarray(kid, dtype=np.int64)
    tflops = np.asarray(tflops, dtype=np.float64)
    keep = tflops > 0
    cell, tflops = cell[keep], tflops[keep]
    real = np.full(n_p * n_k, np.nan)
    order = np.lexsort((tflops, cell))
    cell, tflops = cell[order], tflops[order]
    starts = np.flatnonzero(np.r_[True, np.diff(cell) > 0])
    counts = np.diff(np.r_[starts, len(cell)])
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    real[cell[starts]] = (tflops[lo] + tflops[hi]) / 2
    return CalibrationData(prob, kern, real.reshape(n_p, n_k), arch, direction)


def _ranks(a: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Per row, the rank (0..n-1) of each measured entry among the row's measured entries, tied
    entries sharing their mean rank (as Spearman's rho ranks them)."""
    from scipy.stats import rankdata  # scikit-learn's own dependency

    return rankdata(np.where(ok, a, np.inf), axis=1, method="average") - 1.0


@dataclass(frozen=True)
class _Measured:
    """What ``fit_report`` reads of the measurements alone, computed once per calibration (a search
    scores thousands of parameter sets against the same measurements)."""

    measured: np.ndarray  # problems with at least one measurement
    real: np.ndarray  # their measured TFLOPS
    ok: np.ndarray  # which of those are measured
    best: np.ndarray  # each problem's fastest
    rows: np.ndarray  # problems with at least 3 measurements (a Spearman each)
    mean: np.ndarray  # their mean rank
    db: np.ndarray  # their measured ranks less the mean (0 where not measured)
    db2: np.ndarray  # per row, the sum of db squared
    best_fixed: float
    shape: tuple


def _measured(data: CalibrationData) -> _Measured:
    ok = ~np.isnan(data.real)
    measured = ok.any(axis=1)  # a problem with no measurement has nothing to rank
    real, ok = data.real[measured], ok[measured]
    best = np.nanmax(real, axis=1)
    rows = ok.sum(axis=1) >= 3
    rb = _ranks(real[rows], ok[rows])
    n = ok[rows].sum(axis=1)
    mean = (n - 1) / 2  # ranks 0..n-1 of the measured entries
    db = np.where(ok[rows], rb - mean[:, None], 0.0)
    rel = np.where(ok, real / best[:, None], 0.0)
    fixed = rel.sum(axis=0) / np.maximum(ok.sum(axis=0), 1)
    return _Measured(measured, real, ok, best, rows, mean, db, (db * db).sum(axis=1), float(fixed.max()), real.shape)


def _report(sim: np.ndarray, m: _Measured) -> dict:
    """``fit_report`` of the simulated TFLOPS ``sim`` [problems x kernels] against ``m``."""
    sim, real, ok = sim[m.measured], m.real, m.ok
    pick = np.where(ok, sim, -np.inf).argmax(axis=1)
    effs = real[np.arange(len(real)), pick] / m.best
    ra = _ranks(sim[m.rows], ok[m.rows])
    da = np.where(ok[m.rows], ra - m.mean[:, None], 0.0)
    spread = (da * da).sum(axis=1) * m.db2
    # a problem whose measured or simulated times all tie has no Spearman: left out of the median
    rhos = (da * m.db).sum(axis=1)[spread > 0] / np.sqrt(spread[spread > 0])
    return {"median_spearman": float(np.median(rhos)) if len(rhos) else float("nan"),
            "mean_eff_sim_pick": float(np.mean(effs)), "p10_eff_sim_pick": float(np.percentile(effs, 10)),
            "best_fixed_kernel_eff": m.best_fixed, "problems": int(m.shape[0]), "kernels": int(m.shape[1])}


def fit_report(params: Mapping[str, Any], data: CalibrationData) -> dict:
    """How well the simulator ranks the measured kernels: median per-problem Spearman, and the
    mean / P10 efficiency of picking the simulator's best measured kernel."""
    return _report(predicted_tflops(data.prob, data.kern, data.arch, params, data.direction), _measured(data))


def fit_score(report: Mapping[str, float]) -> float:
    """What the search maximizes."""
    return report["mean_eff_sim_pick"] + 0.5 * report["median_spearman"]


def _get(d: Mapping, path: Sequence[str]) -> Any:
    for k in path:
        d = d[k]
    return d


def _set(d: dict, path: Sequence[str], v: float) -> None:
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = v


def neutral_params(params: Mapping[str, Any]) -> dict:
    """A data-free start: every searched parameter at the middle of its range (geometric middle
    on log scales), the rest as given. Fold-wise calibration starts here, since starting from
    parameters fitted on all the data would carry the held-out problems in."""
    out = copy.deepcopy(dict(params))
    for path, lo, hi, lg in SPACE:
        _set(out, path, float(math.sqrt(lo * hi) if lg else (lo + hi) / 2))
    return _tie_pipelines(out)


def _tie_pipelines(params: dict) -> dict:
    # Pipelines without real measurements follow their measured relatives: compv5 times like
    # compv3 in CK; compv6/comp_async are double-buffered like compv4. mem keeps its prior.
    params["pipelines"]["compv5"] = dict(params["pipelines"]["compv3"])
    for p in ("compv6", "comp_async"):
        params["pipelines"][p] = dict(params["pipelines"]["compv4"])
    return params


def _copied(v: Any) -> Any:
    """A deep copy of parameters (nested dicts of numbers) without copy.deepcopy's per-object
    bookkeeping (a search copies them once per step)."""
    if type(v) is dict:
        return {k: _copied(x) for k, x in v.items()}
    return v if type(v) in (int, float, str, bool, type(None)) else copy.deepcopy(v)


def calibrate(params: Mapping[str, Any], data: CalibrationData, iterations: int, seed: int = 0) -> tuple[dict, dict]:
    """Random local search from ``params``: (best parameters, their fit report)."""
    rng = random.Random(seed)
    measured = _measured(data)

    def report(p: Mapping[str, Any]) -> dict:
        return _report(predicted_tflops(data.prob, data.kern, data.arch, p, data.direction), measured)

    best = copy.deepcopy(dict(params))
    best_r = report(best)
    for i in range(iterations):
        cand = _copied(best)
        scale = 0.5 if i < iterations // 2 else 0.15
        for path, lo, hi, lg in rng.sample(SPACE, rng.randint(1, 3)):
            v = _get(cand, path)
            if lg:
                v = math.exp(math.log(v) + rng.gauss(0, scale * math.log(hi / lo) / 3))
            else:
                v = v + rng.gauss(0, scale * (hi - lo) / 3)
            _set(cand, path, float(min(hi, max(lo, v))))
        r = report(cand)
        if fit_score(r) > fit_score(best_r):
            best, best_r = cand, r
    return _tie_pipelines(best), best_r
