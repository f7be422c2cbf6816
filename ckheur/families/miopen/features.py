"""MIOpen solver-choice features, vectorized over problems x solvers.

The problem as MIOpen keys it (TunaNet's inputs: channels, sizes, filter, pads, strides,
dilations, batch, groups, layout, bias, spatial dimensions) plus what follows from it (the
implicit GEMM of the direction, FLOPs, bytes, per-group channels, depthwise, 1x1), and the solver
(its stable id as a categorical, algorithm, implementation kind, workspace need). No analytic
model exists for MIOpen's solvers: ``analytic`` features are refused.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError
from ckheur.families.miopen.solvers import ALGORITHMS, IMPLEMENTATIONS

ENCODING_VERSION = 1
ANALYTIC_MODEL = False  # no performance model of MIOpen's solvers

PROBLEM_FEATURES = (
    "log_N", "log_C", "log_K", "G", "log_G", "log_Di", "log_Hi", "log_Wi", "Z", "Y", "X", "pad_d", "pad_h", "pad_w",
    "stride_d", "stride_h", "stride_w", "dilation_d", "dilation_h", "dilation_w", "layout_nhwc", "bias", "ndim",
    "log_M", "log_Ngemm", "log_Kgemm", "log_flops", "log_bytes", "intensity", "log_c_per_group", "log_k_per_group",
    "is_depthwise", "is_1x1", "log_out_pixels", "log_Ho", "log_Wo",
    # Solvers apply to channel counts and sizes by divisibility (vector widths, tiles): the power of
    # two dividing each, capped at 2^10.
    "pow2_c_per_group", "pow2_k_per_group", "pow2_N", "pow2_Hi", "pow2_Wi", "pow2_out_pixels",
)
KERNEL_FEATURES = ("solver", "algorithm", "implementation", "workspace")
HARDWARE_FEATURES: tuple = ()  # one model per arch: nothing of the arch is a feature
CATEGORICAL = ("solver", "algorithm", "implementation")
# Other feature sets of this family (ckheur.families.engines.get_engine("miopen+kinds"), +kinds in train.compare)
FEATURE_SETS = {"kinds": "ckheur.families.miopen.kind_features"}
DTYPE_BYTES = 2  # bytes scale log_bytes; one op is one dtype, so only the shape matters


class AnalyticFeatureError(UserError):
    """MIOpen's solvers have no analytic model."""


def feature_names(analytic: bool = False) -> list[str]:
    """Column names of ``features`` output, in order."""
    if analytic:
        raise AnalyticFeatureError("the miopen family has no analytic model: features.analytic must be false")
    return [*PROBLEM_FEATURES, *KERNEL_FEATURES]


# The problem's own numbers, then what follows from it: one column each of problem_arrays.
_FIELDS = ("N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "pad_d", "pad_h", "pad_w", "stride_d", "stride_h",
           "stride_w", "dilation_d", "dilation_h", "dilation_w", "bias", "ndim", "flops")
_DERIVED = ("nhwc", "depthwise", "elems", "out_pixels", "M", "Ng", "Kg", "Ho", "Wo")


def problem_arrays(problems: Sequence[Any], direction: str) -> dict[str, np.ndarray]:
    """Per-problem arrays (computed once per problem), columns of one float64 matrix."""
    def row(p: Any) -> tuple:
        g = p.gemm(direction)
        return (*[getattr(p, n) for n in _FIELDS], p.layout in ("NHWC", "NDHWC"), p.is_depthwise, p.bytes_moved(1),
                p.Do * p.Ho * p.Wo, float(g[1]) * float(g[0]), g[2], g[3], p.Ho, p.Wo)

    table = np.array([row(p) for p in problems], dtype=np.float64).reshape(len(problems), -1)
    return dict(zip(_FIELDS + _DERIVED, table.T))


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-solver arrays (computed once per pool)."""
    return {"solver": np.asarray([k.solver_id for k in kernels], dtype=np.float64),
            "algorithm": np.asarray([ALGORITHMS.index(k.algorithm) for k in kernels], dtype=np.float64),
            "implementation": np.asarray([IMPLEMENTATIONS.index(k.implementation) for k in kernels], dtype=np.float64),
            "workspace": np.asarray([k.workspace for k in kernels], dtype=np.float64)}


def _pow2(v: np.ndarray) -> np.ndarray:
    """Exponent of the largest power of two dividing each (integral, positive) value, at most 10."""
    iv = v.astype(np.int64)
    return np.log2((iv & -iv).clip(1, 1024)).astype(np.float64)


def _log2(v: np.ndarray) -> np.ndarray:
    """log2 of each value, values below 1 read as 1."""
    return np.log2(np.maximum(v, 1.0))


# Problem features by how they are computed, each block in one numpy call (one problem's
# features cost a few calls, not one per column): log2 of at least 1, the power of two dividing
# (_pow2), and the values as they are.
_LOG2 = {"log_N": "N", "log_C": "C", "log_K": "K", "log_G": "G", "log_Di": "Di", "log_Hi": "Hi", "log_Wi": "Wi",
         "log_M": "M", "log_Ngemm": "Ng", "log_Kgemm": "Kg", "log_flops": "flops", "log_bytes": "bytes",
         "log_c_per_group": "c_per_group", "log_k_per_group": "k_per_group", "log_out_pixels": "out_pixels",
         "log_Ho": "Ho", "log_Wo": "Wo"}
_POW2 = {"pow2_c_per_group": "c_div_group", "pow2_k_per_group": "k_div_group", "pow2_N": "N", "pow2_Hi": "Hi",
         "pow2_Wi": "Wi", "pow2_out_pixels": "out_pixels"}
_AS_IS = {**{n: n for n in ("G", "Z", "Y", "X", "pad_d", "pad_h", "pad_w", "stride_d", "stride_h", "stride_w",
                            "dilation_d", "dilation_h", "dilation_w", "bias", "ndim")},
          "layout_nhwc": "nhwc", "intensity": "intensity", "is_depthwise": "depthwise", "is_1x1": "is_1x1"}
_BLOCKS = [(np.array([PROBLEM_FEATURES.index(n) for n in block]), list(block.values()), compute)
           for block, compute in ((_LOG2, _log2), (_POW2, _pow2), (_AS_IS, None))]
assert sorted(_LOG2.keys() | _POW2.keys() | _AS_IS.keys()) == sorted(PROBLEM_FEATURES)


def features(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
             direction: str, analytic_params: Mapping[str, Any] | None = None,
             analytic_log_tf: np.ndarray | None = None) -> np.ndarray:
    """Feature matrix [P*K, F] (problem-major: row p*K + k), float32 (no analytic model:
    ``analytic_params`` is refused, ``analytic_log_tf`` unused)."""
    names = feature_names(analytic_params is not None)
    nP, nK = len(prob["N"]), len(kern["solver"])
    v = dict(prob)
    v["bytes"] = prob["elems"] * DTYPE_BYTES
    v["c_per_group"], v["k_per_group"] = prob["C"] / prob["G"], prob["K"] / prob["G"]
    v["c_div_group"], v["k_div_group"] = prob["C"] // prob["G"], prob["K"] // prob["G"]
    v["intensity"] = prob["flops"] / np.maximum(v["bytes"], 1.0)
    v["is_1x1"] = ((prob["Z"] * prob["Y"] * prob["X"]) == 1).astype(np.float64)
    row = np.empty((nP, len(PROBLEM_FEATURES)))
    for at, sources, compute in _BLOCKS:
        values = np.array([v[src] for src in sources]).T  # [P, block]
        row[:, at] = values if compute is None else compute(values)
    out = np.empty((nP, nK, len(names)), dtype=np.float32)
    out[:, :, : len(PROBLEM_FEATURES)] = row[:, None, :]
    out[:, :, len(PROBLEM_FEATURES):] = np.array([kern[n] for n in KERNEL_FEATURES]).T[None, :, :]
    return out.reshape(nP * nK, len(names))
