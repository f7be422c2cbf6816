"""MIOpen's features with solvers described by their kind, not their id (``train.compare`` entries
with ``+kinds``; bundles record the engine ``miopen+kinds``).

The native features know a solver by its id: what a model learned of one solver says nothing of
another, so a solver no training GPU lists (MI50's MLIR non-xdlops implicit GEMMs, gfx908's own
Winograd binaries) is ranked blind. Here the id is left out and the solver is what its MIOpen name
says of it (:data:`ckheur.families.miopen.solvers.KIND_FEATURES`: matrix-core use, the layout,
filter and stride it is written for, its Winograd tile, implicit-GEMM generation, ...) beside its
algorithm and implementation. Opt-in: bundles of the native features load and rank as before.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.families.miopen import features as native
from ckheur.families.miopen.solvers import KIND_FEATURES, kind_of

NAME = "miopen+kinds"
ENCODING_VERSION = 1
ANALYTIC_MODEL = False
HARDWARE_FEATURES: tuple = ()
CATEGORICAL = ("algorithm", "implementation")
KERNEL_FEATURES = ("algorithm", "implementation", "workspace", *KIND_FEATURES)
problem_arrays = native.problem_arrays


def feature_names(analytic: bool = False) -> list[str]:
    """Column names of ``features`` output, in order (the problem's, then the solver's kind)."""
    native.feature_names(analytic)  # refuses analytic features as the native engine does
    return [*native.PROBLEM_FEATURES, *KERNEL_FEATURES]


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-solver arrays: the native ones and each kind column (computed once per pool)."""
    kinds = np.array([kind_of(k.name) for k in kernels], dtype=np.float64).reshape(len(kernels), len(KIND_FEATURES))
    return {**native.kernel_arrays(kernels), **dict(zip(KIND_FEATURES, kinds.T))}


def features(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
             direction: str, analytic_params: Mapping[str, Any] | None = None,
             analytic_log_tf: np.ndarray | None = None) -> np.ndarray:
    """Feature matrix [P*K, F] (problem-major), float32: the native problem columns, then the kind's."""
    X = native.features(prob, kern, arch, direction, analytic_params, analytic_log_tf)
    nP, nK = len(prob["N"]), len(kern["solver"])
    out = np.empty((nP, nK, len(native.PROBLEM_FEATURES) + len(KERNEL_FEATURES)), dtype=np.float32)
    out[:, :, : len(native.PROBLEM_FEATURES)] = X.reshape(nP, nK, -1)[:, :, : len(native.PROBLEM_FEATURES)]
    out[:, :, len(native.PROBLEM_FEATURES):] = np.array([kern[n] for n in KERNEL_FEATURES]).T[None, :, :]
    return out.reshape(nP * nK, out.shape[2])
