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
from ckheur.families.tile_features import to_matrix
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
DTYPE_BYTES = 2  # bytes scale log_bytes; one op is one dtype, so only the shape matters


class AnalyticFeatureError(UserError):
    """MIOpen's solvers have no analytic model."""


def feature_names(analytic: bool = False) -> list[str]:
    """Column names of ``features`` output, in order."""
    if analytic:
        raise AnalyticFeatureError("the miopen family has no analytic model: features.analytic must be false")
    return [*PROBLEM_FEATURES, *KERNEL_FEATURES]


def problem_arrays(problems: Sequence[Any], direction: str) -> dict[str, np.ndarray]:
    """Per-problem arrays (computed once per problem)."""
    f = lambda get: np.asarray([get(p) for p in problems], dtype=np.float64)  # noqa: E731
    gemm = np.asarray([p.gemm(direction) for p in problems], dtype=np.float64).reshape(len(problems), 4)
    out = {name: f(lambda p, n=name: getattr(p, n)) for name in (
        "N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "pad_d", "pad_h", "pad_w", "stride_d", "stride_h",
        "stride_w", "dilation_d", "dilation_h", "dilation_w", "bias", "ndim", "flops")}
    out.update(nhwc=f(lambda p: p.layout in ("NHWC", "NDHWC")), depthwise=f(lambda p: p.is_depthwise),
               elems=f(lambda p: p.bytes_moved(1)), out_pixels=f(lambda p: p.Do * p.Ho * p.Wo),
               M=gemm[:, 1] * gemm[:, 0], Ng=gemm[:, 2], Kg=gemm[:, 3], Ho=f(lambda p: p.Ho), Wo=f(lambda p: p.Wo))
    return out


def _pow2(v: np.ndarray) -> np.ndarray:
    """Exponent of the largest power of two dividing each (integral, positive) value, at most 10."""
    iv = v.astype(np.int64)
    return np.log2((iv & -iv).clip(1, 1024)).astype(np.float64)


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-solver arrays (computed once per pool)."""
    return {"solver": np.asarray([k.solver_id for k in kernels], dtype=np.float64),
            "algorithm": np.asarray([ALGORITHMS.index(k.algorithm) for k in kernels], dtype=np.float64),
            "implementation": np.asarray([IMPLEMENTATIONS.index(k.implementation) for k in kernels], dtype=np.float64),
            "workspace": np.asarray([k.workspace for k in kernels], dtype=np.float64)}


def features(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
             direction: str, analytic_params: Mapping[str, Any] | None = None,
             analytic_log_tf: np.ndarray | None = None) -> np.ndarray:
    """Feature matrix [P*K, F] (problem-major: row p*K + k), float32 (no analytic model:
    ``analytic_params`` is refused, ``analytic_log_tf`` unused)."""
    names = feature_names(analytic_params is not None)
    nP, nK = len(prob["N"]), len(kern["solver"])
    P = {k: v[:, None] for k, v in prob.items()}
    log = lambda v: np.log2(np.maximum(v, 1.0))  # noqa: E731
    cols = {
        **{f"log_{n}": log(P[n]) for n in ("N", "C", "K", "G", "Di", "Hi", "Wi")}, "G": P["G"],
        **{n: P[n] for n in ("Z", "Y", "X", "pad_d", "pad_h", "pad_w", "stride_d", "stride_h", "stride_w",
                             "dilation_d", "dilation_h", "dilation_w", "bias", "ndim")},
        "layout_nhwc": P["nhwc"], "log_M": log(P["M"]), "log_Ngemm": log(P["Ng"]), "log_Kgemm": log(P["Kg"]),
        "log_flops": log(P["flops"]), "log_bytes": log(P["elems"] * DTYPE_BYTES),
        "intensity": P["flops"] / np.maximum(P["elems"] * DTYPE_BYTES, 1.0),
        "log_c_per_group": log(P["C"] / P["G"]), "log_k_per_group": log(P["K"] / P["G"]),
        "is_depthwise": P["depthwise"], "is_1x1": ((P["Z"] * P["Y"] * P["X"]) == 1).astype(np.float64),
        "log_out_pixels": log(P["out_pixels"]), "log_Ho": log(P["Ho"]), "log_Wo": log(P["Wo"]),
        "pow2_c_per_group": _pow2(P["C"] // P["G"]), "pow2_k_per_group": _pow2(P["K"] // P["G"]), "pow2_N": _pow2(P["N"]),
        "pow2_Hi": _pow2(P["Hi"]), "pow2_Wi": _pow2(P["Wi"]), "pow2_out_pixels": _pow2(P["out_pixels"]),
        **{k: v[None, :] for k, v in kern.items()},
    }
    return to_matrix(cols, names, nP, nK)
