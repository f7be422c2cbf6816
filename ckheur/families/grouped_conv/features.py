"""Grouped-convolution features (2D/3D, all directions), vectorized over problems x kernels.

The problem is seen through the implicit GEMM of its direction (table in
ckheur.families.grouped_conv.problems) with the kernel's true tile_m/tile_n/tile_k: tile and wave
quantization per dimension, tiles per CU, LDS use against the pipeline budget, arithmetic
intensity, group/depthwise traits, pipeline/scheduler/dsb/si, and the arch's profile.
With ``analytic`` the noise-free simulator's log TFLOPS is a feature too.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.families.tile_features import analytic_columns, coverage_kernel_terms, fixed_columns, tile_coverage, to_matrix
from ckheur.families.tile_features import kernel_arrays as common_kernel_arrays
from ckheur.sim import problem_arrays as _sim_problem_arrays

ENCODING_VERSION = 1
ANALYTIC_MODEL = True  # ckheur.sim models these kernels

PROBLEM_FEATURES = (
    "log_M", "log_N", "log_K", "G", "log_G", "log_flops", "log_bytes", "intensity", "filter_size",
    "c_per_group", "k_per_group", "is_grouped", "is_depthwise", "ndim", "batch", "max_stride",
    "max_dilation", "log_out_pixels",
)
KERNEL_FEATURES = (
    "tile_m", "tile_n", "tile_k", "num_waves", "warp_tile_m", "warp_tile_n", "warp_tile_k",
    "pipeline", "scheduler", "dsb", "si", "lds_bytes", "lds_budget_frac", "tile_intensity",
)
INTERACTION_FEATURES = (
    "tiles_m", "tiles_n", "k_iters", "eff_m", "eff_n", "eff_k", "eff_mnk", "log_wgs", "occupancy",
    "wave_rounds", "wave_eff", "wgs_per_cu", "log_padded_flops", "cu_util", "m_over_tm", "n_over_tn",
)
HARDWARE_FEATURES = ("num_cus", "peak_tflops", "hbm_tbps", "lds_kib")
ANALYTIC_FEATURES = ("analytic_log_tflops", "analytic_rel")
CATEGORICAL = ("pipeline", "scheduler")


def feature_names(analytic: bool = False) -> list[str]:
    """Column names of ``features`` output, in order."""
    names = [*PROBLEM_FEATURES, *KERNEL_FEATURES, *INTERACTION_FEATURES, *HARDWARE_FEATURES]
    return names + list(ANALYTIC_FEATURES) if analytic else names


def problem_arrays(problems: Sequence[Any], direction: str) -> dict[str, np.ndarray]:
    """Per-problem arrays the features need (computed once per problem)."""
    base = _sim_problem_arrays(problems, direction)
    extra = np.array([(p.N, p.ndim, p.K // p.G, p.is_depthwise, max(p.stride_d, p.stride_h, p.stride_w),
                       max(p.dilation_d, p.dilation_h, p.dilation_w), p.Do * p.Ho * p.Wo) for p in problems],
                     dtype=np.float64).reshape(-1, 7).T.copy()
    base.update(zip(("N_batch", "ndim", "kpg", "depthwise", "stride", "dilation", "out_pixels"), extra))
    return base


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-kernel arrays (computed once per pool)."""
    return common_kernel_arrays(kernels, ("warp_tile_n", "warp_tile_k"))


def kernel_columns(kern: Mapping[str, np.ndarray], arch: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The columns of ``features`` that depend on the kernels and arch alone ([1, K] or scalars),
    with the [1, K] kernel arrays the others read: once per pool for a caller that scores it often."""
    Kn = {k: v[None, :] for k, v in kern.items()}
    cols = {
        **Kn, **coverage_kernel_terms(Kn, arch),
        "tile_m": Kn["tm"], "tile_n": Kn["tn"], "tile_k": Kn["tk"], "num_waves": Kn["waves"],
        "warp_tile_m": Kn["warp_m"], "warp_tile_n": Kn["warp_tile_n"], "warp_tile_k": Kn["warp_tile_k"],
        "pipeline": Kn["pipe"].astype(np.float64), "scheduler": Kn["inter"], "dsb": Kn["dsb"], "si": Kn["si"],
        "lds_bytes": Kn["lds"], "tile_intensity": Kn["tm"] * Kn["tn"] / (Kn["tm"] + Kn["tn"]),
        "num_cus": float(arch["num_cus"]), "peak_tflops": float(max(arch["peak_tflops"].values())),
        "hbm_tbps": float(arch["hbm_bandwidth_gbps"]) / 1e3, "lds_kib": float(arch["lds_bytes"]) / 1024,
    }
    # The matrix columns these are, as one block (the analytic columns come after every one of them).
    cols["fixed"] = fixed_columns(cols, feature_names(False), len(kern["tm"]),
                                  (*KERNEL_FEATURES, *HARDWARE_FEATURES, "occupancy"))
    return cols


def features(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
             direction: str, analytic_params: Mapping[str, Any] | None = None,
             analytic_log_tf: np.ndarray | None = None,
             kernel_cols: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """Feature matrix [P*K, F] (problem-major: row p*K + k), float32 (``analytic_log_tf``: the
    simulator's log TFLOPS of these arguments when the caller computed it already;
    ``kernel_cols``: :func:`kernel_columns` of ``kern`` and ``arch``, when the caller keeps them)."""
    nP, nK = len(prob["M"]), len(kern["tm"])
    P = {k: v[:, None] for k, v in prob.items()}
    Kn = kernel_columns(kern, arch) if kernel_cols is None else kernel_cols
    cov = tile_coverage(P["M"], P["N"], P["K"], P["G"], Kn, arch, kernel_terms=Kn)
    eb = Kn["dtype_bytes"]
    cols = {
        **Kn,
        "log_M": np.log2(P["M"]), "log_N": np.log2(P["N"]), "log_K": np.log2(P["K"]), "G": P["G"], "log_G": np.log2(P["G"]),
        "log_flops": np.log2(P["flops"]), "log_bytes": np.log2(P["elems"] * eb),
        "intensity": P["flops"] / (P["elems"] * eb), "filter_size": P["filt"], "c_per_group": P["cpg"],
        "k_per_group": P["kpg"], "is_grouped": (P["G"] > 1).astype(np.float64), "is_depthwise": P["depthwise"],
        "ndim": P["ndim"], "batch": P["N_batch"], "max_stride": P["stride"], "max_dilation": P["dilation"],
        "log_out_pixels": np.log2(P["out_pixels"]),
        **cov, "log_wgs": np.log2(cov["wgs"]), "log_padded_flops": np.log2(cov["padded_flops"]),
    }
    if analytic_params is not None:
        cols.update(analytic_columns(prob, kern, arch, analytic_params, direction, analytic_log_tf))
    return to_matrix(cols, feature_names(analytic_params is not None), nP, nK, Kn["fixed"])
