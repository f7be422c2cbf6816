"""The analytic model as a prior (residual learning): each pair's score starts from the
simulator's opinion and the trees learn corrections to it, so where training data is thin
(shape clusters never seen) the model falls back towards physics instead of extrapolating.

For the ``relative`` and ``lambdarank`` objectives the prior is ``scale * simulated TFLOPS /
the best simulated TFLOPS among the problem's candidates`` (the scale of the relative label);
for ``regression_log`` it is ``scale * log1p(simulated TFLOPS)``. It is LightGBM's
``init_score`` in training and is added to the trees' raw score wherever a model scores (CV,
the Python selector, the compiled C selector). Only families with an analytic model have one.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError

PRIORS = ("none", "analytic")


class PriorError(UserError):
    """The prior cannot be used as configured; the message says why."""


def prior_spec(model: Mapping[str, Any], family: Any, sim_params: Mapping[str, Any]) -> dict | None:
    """The bundle's record of the prior a model config asks for (None: no prior)."""
    kind = str(model.get("prior", "none"))
    if kind not in PRIORS:
        raise PriorError(f"model.prior={kind!r}: allowed values are {', '.join(PRIORS)}")
    if kind == "none":
        return None
    if not family.analytic:
        raise PriorError(f"model.prior=analytic: the {family.name} family has no analytic model to start from "
                         f"(families with one: those whose feature engine sets ANALYTIC_MODEL); use model.prior=none")
    scale = float(model.get("prior_scale", 0.5))
    if not 0 < scale < float("inf"):
        raise PriorError(f"model.prior_scale={scale}: must be a finite number > 0")
    return {"kind": kind, "scale": scale, "params": dict(sim_params)}


def prior_from_log_tflops(log_tf: np.ndarray, pid: np.ndarray | None, prior: Mapping[str, Any],
                          objective: str) -> np.ndarray:
    """The prior of pairs from their simulated log TFLOPS; ``pid`` groups the pairs by problem
    (the best of a problem is over its pairs here; None: all pairs are one problem's candidates)."""
    log_tf = np.asarray(log_tf, dtype=np.float64)
    if objective == "regression_log":
        return prior["scale"] * np.log1p(np.exp(log_tf))
    if pid is None:  # a selector's query: no grouping to do
        return prior["scale"] * np.exp(log_tf - (log_tf.max() if len(log_tf) else 0.0))
    best = np.full(int(pid.max()) + 1 if len(pid) else 0, -np.inf)
    np.maximum.at(best, pid, log_tf)
    return prior["scale"] * np.exp(log_tf - best[pid])


def pair_prior(engine: Any, problems: Sequence[Any], kernels: Sequence[Any], pid: np.ndarray, kid: np.ndarray,
               arch: Mapping[str, Any], direction: str, prior: Mapping[str, Any], objective: str,
               max_grid_rows: int = 2_000_000) -> np.ndarray:
    """The prior of training pairs (problems[pid[i]], kernels[kid[i]]), relative to each problem's
    pairs (the grid whole when it fits, else problem by problem, as ``pair_features``)."""
    from ckheur.families.tile_features import analytic_log_tflops

    pid, kid = np.asarray(pid, dtype=np.int64), np.asarray(kid, dtype=np.int64)
    kern = engine.kernel_arrays(kernels)
    if len(problems) * len(kernels) <= max_grid_rows:
        grid = analytic_log_tflops(engine.problem_arrays(problems, direction), kern, arch, prior["params"], direction)
        log_tf = grid[pid, kid]
    else:
        log_tf = np.empty(len(pid))
        order = np.argsort(pid, kind="stable")
        for rows in np.split(order, np.flatnonzero(np.diff(pid[order])) + 1):
            if len(rows):
                sub = {k: v[kid[rows]] for k, v in kern.items()}
                log_tf[rows] = analytic_log_tflops(engine.problem_arrays([problems[pid[rows[0]]]], direction), sub,
                                                   arch, prior["params"], direction)[0]
    return prior_from_log_tflops(log_tf, pid, prior, objective)
