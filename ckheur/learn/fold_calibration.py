"""The leakage guard of simulator-based candidates: when the shipped simulator parameters were
fitted on the training data itself, CV would score the simulator on problems it was fitted to.
Here each CV fold calibrates the simulator afresh on its training problems only (from a
data-free start, ``sim_calibration.neutral_params``) and recomputes the simulator's features
and prior with those parameters, so the held-out fold is unseen by trees and simulator alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ckheur.families.engines import pair_features
from ckheur.learn.prior import pair_prior
from ckheur.learn.training import Table
from ckheur.sim_calibration import calibrate, calibration_data, neutral_params


def calibration_overlap(problems: Sequence[Any], op: Mapping[str, Any], arch: Mapping[str, Any],
                        calibration_sha256: Iterable[str]) -> int:
    """How many of ``problems`` (measured, for this op and arch) the simulator's parameters were
    fitted on. Found by content: the shipped calibration file's problems, when the parameters
    record that file (``calibration_sha256``) and the op, dtype and arch are the ones it measures;
    so a subset, a replay or a re-export of those measurements is recognized too."""
    from ckheur.measurements import CK_GFX950_FWD, CK_GFX950_FWD_OP, CK_GFX950_FWD_SHA256
    from ckheur.families import get_family
    from ckheur.problems.sources import read_csv

    mine = {"family": op["family"], "direction": op["direction"], "dtype": op["dtype"], "arch": arch["name"]}
    if CK_GFX950_FWD_SHA256 not in set(calibration_sha256) or mine != CK_GFX950_FWD_OP or not problems:
        return 0
    fitted = {p.key() for p in read_csv(CK_GFX950_FWD, get_family("grouped_conv"))}  # the shipped CSV (checked above)
    return sum(p.key() in fitted for p in problems)


def table_calibration_data(table: Table, engine: Any, arch: Mapping[str, Any], direction: str) -> Any:
    """The table's measurements as calibration data (its measured kernels only)."""
    used, kid = np.unique(table.kid, return_inverse=True)
    return calibration_data(engine.problem_arrays(table.problems, direction),
                            engine.kernel_arrays([table.kernels[i] for i in used]), table.pid, kid, table.tflops,
                            arch, direction)


def with_sim_params(table: Table, engine: Any, arch: Mapping[str, Any], direction: str, params: Mapping[str, Any],
                    analytic: bool, prior: Mapping[str, Any] | None, objective: str) -> Table:
    """The table with its simulator features (when ``analytic``) and prior (when given) computed
    with ``params``."""
    X = table.X
    if analytic:
        X = pair_features(engine, table.problems, table.kernels, table.pid, table.kid, arch, direction, params)
    pr = None
    if prior is not None:
        pr = pair_prior(engine, table.problems, table.kernels, table.pid, table.kid, arch, direction,
                        {**prior, "params": dict(params)}, objective)
    return dataclasses.replace(table, X=X, prior=pr)


def fold_calibrated(table: Table, engine: Any, arch: Mapping[str, Any], direction: str, params: Mapping[str, Any],
                    analytic: bool, prior: Mapping[str, Any] | None, objective: str, iterations: int,
                    seed: int) -> Callable[[int, np.ndarray], Table]:
    """``cross_validate``'s per-fold table: the simulator calibrated on the fold's training rows
    (``iterations`` search steps from the neutral start of ``params``)."""
    data = table_calibration_data(table, engine, arch, direction)
    start = neutral_params(params)

    def fold_table(fold: int, train_rows: np.ndarray) -> Table:
        fitted, report = calibrate(start, data.subset(np.unique(table.pid[train_rows])), iterations,
                                   seed * 1000 + fold)
        tb = with_sim_params(table, engine, arch, direction, fitted, analytic, prior, objective)
        return dataclasses.replace(tb, report={**tb.report, "sim_calibration": report})

    return fold_table
