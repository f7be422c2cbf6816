"""GEMM features: CK gemm_universal heuristic's 55 features at their correct meaning, plus
three shared quantization features. Vectorized over problems x kernels.

Corrections to CK's engine: wave_m/n/k are waves per block (CK names them warp_m/n/k);
tile_eff_* is the useful fraction of the padded dimension, M / (ceil(M / tile_m) * tile_m)
(CK computes the fill of the last tile only); cu_utilization is the fraction of CUs given a
workgroup, capped at 1 (CK: uncapped tiles / CUs); lds_usage_ratio is against the arch's
budget for the kernel's pipeline (CK hard-codes 32 KiB for compv4 on every arch).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.families.tile_features import analytic_columns, tile_coverage, to_matrix
from ckheur.families.gemm.problems import LAYOUTS
from ckheur.families.tile_features import kernel_arrays as common_kernel_arrays
from ckheur.sim import problem_arrays as _sim_problem_arrays

ENCODING_VERSION = 1
ANALYTIC_MODEL = True  # ckheur.sim models these kernels
EPILOGUES = ("default", "cshuffle")

PROBLEM_FEATURES = ("M", "N", "K", "split_k", "log2_M", "log2_N", "log2_K", "log2_MNK", "arithmetic_intensity",
                    "aspect_ratio_mn", "aspect_ratio_mk", "aspect_ratio_nk", "layout")
KERNEL_FEATURES = ("tile_m", "tile_n", "tile_k", "wave_m", "wave_n", "wave_k", "warp_tile_m", "warp_tile_n",
                   "warp_tile_k", "pipeline", "scheduler", "epilogue", "pad_m", "pad_n", "pad_k", "persistent",
                   "num_waves", "tile_volume", "tile_mn", "lds_usage_bytes", "lds_usage_ratio")
INTERACTION_FEATURES = ("num_tiles_m", "num_tiles_n", "num_tiles_k", "total_output_tiles", "tile_eff_m",
                        "tile_eff_n", "tile_eff_k", "overall_tile_efficiency", "cu_utilization")
HARDWARE_FEATURES = ("hw_num_cus", "hw_simds_per_cu", "hw_total_simds", "hw_shader_engines", "hw_max_clock_mhz",
                     "hw_max_waves_per_cu", "hw_wavefront_size", "hw_lds_bytes", "hw_l1_kib", "hw_l2_kib",
                     "hw_l3_kib", "hw_num_xcds")
EXTRA_FEATURES = ("occupancy", "wave_rounds", "wave_eff")
ANALYTIC_FEATURES = ("analytic_log_tflops", "analytic_rel")
CATEGORICAL = ("layout", "pipeline", "scheduler", "epilogue")


def feature_names(analytic: bool = False) -> list[str]:
    """Column names of ``features`` output, in order (55 CK features, then 3 shared ones)."""
    names = [*PROBLEM_FEATURES, *KERNEL_FEATURES, *INTERACTION_FEATURES, *HARDWARE_FEATURES, *EXTRA_FEATURES]
    return names + list(ANALYTIC_FEATURES) if analytic else names


def problem_arrays(problems: Sequence[Any], direction: str = "fwd") -> dict[str, np.ndarray]:
    """Per-problem arrays (computed once per problem)."""
    base = _sim_problem_arrays(problems, direction)
    base["layout"] = np.array([LAYOUTS.index(p.layout) for p in problems], dtype=np.float64)
    return base


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-kernel arrays (computed once per pool)."""
    k = common_kernel_arrays(kernels, ("wave_m", "wave_n", "wave_k", "warp_tile_n", "warp_tile_k", "pad_m", "pad_n",
                                       "pad_k"))
    k["epi"] = np.array([EPILOGUES.index(x.epilogue) for x in kernels], dtype=np.float64)
    return k


def features(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
             direction: str = "fwd", analytic_params: Mapping[str, Any] | None = None,
             analytic_log_tf: np.ndarray | None = None) -> np.ndarray:
    """Feature matrix [P*K, F] (problem-major: row p*K + k), float32 (``analytic_log_tf``: the
    simulator's log TFLOPS of these arguments when the caller computed it already)."""
    nP, nK = len(prob["M"]), len(kern["tm"])
    P = {k: v[:, None] for k, v in prob.items()}
    Kn = {k: v[None, :] for k, v in kern.items()}
    M, N, K = P["M"], P["N"], P["K"]
    cov = tile_coverage(M, N, K, P["G"], Kn, arch, k_splits=P["split_k"])
    eb = Kn["dtype_bytes"]
    cols = {
        "M": M, "N": N, "K": K, "split_k": P["split_k"], "log2_M": np.log2(M), "log2_N": np.log2(N),
        "log2_K": np.log2(K), "log2_MNK": np.log2(M * N * K),
        "arithmetic_intensity": 2.0 * M * N * K / ((M * K + K * N + M * N) * eb),
        "aspect_ratio_mn": M / N, "aspect_ratio_mk": M / K, "aspect_ratio_nk": N / K, "layout": P["layout"],
        "tile_m": Kn["tm"], "tile_n": Kn["tn"], "tile_k": Kn["tk"], "wave_m": Kn["wave_m"], "wave_n": Kn["wave_n"],
        "wave_k": Kn["wave_k"], "warp_tile_m": Kn["warp_m"], "warp_tile_n": Kn["warp_tile_n"],
        "warp_tile_k": Kn["warp_tile_k"], "pipeline": Kn["pipe"].astype(np.float64), "scheduler": Kn["inter"],
        "epilogue": Kn["epi"], "pad_m": Kn["pad_m"], "pad_n": Kn["pad_n"], "pad_k": Kn["pad_k"],
        "persistent": Kn["persistent"], "num_waves": Kn["waves"], "tile_volume": Kn["tm"] * Kn["tn"] * Kn["tk"],
        "tile_mn": Kn["tm"] * Kn["tn"], "lds_usage_bytes": Kn["lds"], "lds_usage_ratio": cov["lds_budget_frac"],
        "num_tiles_m": cov["tiles_m"], "num_tiles_n": cov["tiles_n"], "num_tiles_k": cov["k_iters"],
        "total_output_tiles": cov["tiles_m"] * cov["tiles_n"], "tile_eff_m": cov["eff_m"], "tile_eff_n": cov["eff_n"],
        "tile_eff_k": cov["eff_k"], "overall_tile_efficiency": cov["eff_mnk"], "cu_utilization": cov["cu_util"],
        "hw_num_cus": float(arch["num_cus"]), "hw_simds_per_cu": float(arch["simds_per_cu"]),
        "hw_total_simds": float(arch["num_cus"] * arch["simds_per_cu"]),
        "hw_shader_engines": float(arch["shader_engines"]), "hw_max_clock_mhz": float(arch["max_clock_mhz"]),
        "hw_max_waves_per_cu": float(arch["max_waves_per_cu"]), "hw_wavefront_size": float(arch["wavefront_size"]),
        "hw_lds_bytes": float(arch["lds_bytes"]), "hw_l1_kib": arch["l1_bytes"] / 1024.0,
        "hw_l2_kib": arch["l2_bytes"] / 1024.0, "hw_l3_kib": arch["l3_bytes"] / 1024.0,
        "hw_num_xcds": float(arch["num_xcds"]),
        "occupancy": cov["occupancy"], "wave_rounds": cov["wave_rounds"], "wave_eff": cov["wave_eff"],
    }
    if analytic_params is not None:
        cols.update(analytic_columns(prob, kern, arch, analytic_params, direction, analytic_log_tf))
    return to_matrix(cols, feature_names(analytic_params is not None), nP, nK)
