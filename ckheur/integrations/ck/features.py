"""CK's own grouped-convolution features, as CK's dispatcher computes them.

CK's dispatcher (``dispatcher/heuristics`` in AMD's Composable Kernel) ranks grouped-convolution
kernels with a LightGBM model over 97 features of a (problem, kernel) pair. A model trained on
this engine's output can be written as a CK model folder (``ckheur.integrations.ck.model_folder``) and runs
unchanged in CK's predictor. The values are CK's, reproduced here (tested against
``feature_oracle.csv.gz``, values CK's engine computed), including what a reader might not expect:

- the kernel is read from its CK name ``{a}x{b}x{c}`` as CK's parser does: ``block_size = a``,
  ``gemm_m_per_block = b``, ``gemm_n_per_block = c`` (ckheur's tile_m, tile_n, tile_k);
- every direction gets the forward view (GEMM M = N * Ho * Wo, N = K, K = C/G * filter);
- a problem is 3D only when Di > 1, Z > 1 or pad_d > 0; otherwise depth is ignored (Do = 1);
- ``tile_eff_*`` is the fill of the last tile (1 when the tile divides the dimension);
- the LDS estimate is (tile b + tile c) * a * element bytes, against 64 KiB (32 KiB for compv4);
- the hardware constants are CK's per-arch table (``CK_HARDWARE``), not ckheur's arch configs.

Values are float64 (CK's predictor feeds float64 to LightGBM): training and ranking use the same
matrix, so a model's ranking here and in CK's predictor is the same.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

ENCODING_VERSION = 1
ANALYTIC_MODEL = False  # CK's features have no simulator columns
NAME = "ck_grouped_conv"  # the engine's name in a bundle's feature_spec.json

# CK's dispatcher's codes and constants (feature_engine.py, convert_csv_to_parquet.py).
PIPELINE_CODES = {"compv3": 0, "compv4": 1, "compv5": 2, "mem": 3, "preshufflev2": 4}
DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "bf8": 1.0, "int8": 1.0, "int4": 0.5}
CK_HARDWARE = {  # num_cus, simds_per_cu, shader_engines, max_clock_mhz, max_waves_per_cu, wavefront_size,
    # lds_capacity, l1_cache_kb, l2_cache_kb, l3_cache_kb, num_xcd: CK's table per arch
    "gfx950": (256, 4, 32, 2400, 32, 64, 65536, 32, 4096, 262144, 8),
    "gfx942": (228, 4, 28, 2100, 32, 64, 65536, 32, 4096, 262144, 8),
    "gfx90a": (110, 4, 8, 1700, 32, 64, 65536, 16, 8192, 131072, 1),
}
COMPV4_LDS = 32768.0

PROBLEM_FEATURES = (
    "N", "C", "K", "G", "Hi", "Wi", "Y", "X", "stride_h", "stride_w", "pad_h", "pad_w", "Ho", "Wo",
    "log2_N", "log2_C", "log2_K", "log2_G", "log2_Hi", "log2_Wi", "log2_spatial", "log2_filter", "log2_output",
    "arithmetic_intensity", "filter_area", "is_1x1_conv", "is_3x3_conv", "channels_per_group", "aspect_ratio_hw",
    "aspect_ratio_filter", "is_3d", "Di", "Z", "Do", "stride_d", "pad_d", "dilation_h", "dilation_w",
    "log2_channels_per_group", "log2_output_channels_per_group", "is_depthwise", "group_density", "is_small_group",
    "channels_product_per_group", "batch_group_product", "is_small_batch_grouped",
)
KERNEL_FEATURES = (
    "block_size", "gemm_m_per_block", "gemm_n_per_block", "pipeline", "num_warps", "tile_volume", "tile_mn",
    "lds_usage_estimate", "lds_usage_ratio", "block_tile_ratio_m", "block_tile_ratio_n", "block_efficiency",
    "is_compv3", "is_compv4", "is_compv5", "is_intrawave", "has_dsb", "has_si", "is_basic", "is_compv6", "is_mem",
)
INTERACTION_FEATURES = (
    "gemm_m_output", "gemm_n_output", "gemm_k_output", "num_tiles_m", "num_tiles_n", "num_tiles_k",
    "total_output_tiles", "tile_eff_m", "tile_eff_n", "tile_eff_k", "overall_tile_efficiency", "cu_utilization",
    "ratio_gemm_m_to_tile_m", "ratio_gemm_n_to_tile_n", "ratio_gemm_k_to_tile_k", "problem_smaller_than_tile_m",
    "problem_smaller_than_tile_n", "problem_smaller_than_tile_k",
)
HARDWARE_FEATURES = (
    "hw_num_cus", "hw_simds_per_cu", "hw_total_simds", "hw_shader_engines", "hw_max_clock_mhz",
    "hw_max_waves_per_cu", "hw_wavefront_size", "hw_lds_capacity", "hw_l1_cache_kb", "hw_l2_cache_kb",
    "hw_l3_cache_kb", "hw_num_xcd",
)
CATEGORICAL = ("pipeline",)
_FIELDS = ("N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "stride_d", "stride_h", "stride_w", "pad_d", "pad_h",
           "pad_w", "dilation_d", "dilation_h", "dilation_w")


def feature_names(analytic: bool = False) -> list[str]:
    """CK's 97 feature names, in CK's order (no analytic features: refused)."""
    if analytic:
        raise ValueError("CK's feature set has no analytic (simulator) features: set features.analytic=false")
    return [*PROBLEM_FEATURES, *KERNEL_FEATURES, *INTERACTION_FEATURES, *HARDWARE_FEATURES]


def hardware(arch: Mapping[str, Any] | str) -> tuple:
    """CK's hardware constants of an arch (by name)."""
    name = arch if isinstance(arch, str) else arch["name"]
    if name not in CK_HARDWARE:
        raise ValueError(f"CK's feature engine has hardware constants for {', '.join(CK_HARDWARE)}, not {name}")
    return CK_HARDWARE[name]


def problem_arrays(problems: Sequence[Any], direction: str) -> dict[str, np.ndarray]:
    """The problems' fields as float64 arrays (every direction is seen in forward terms)."""
    return {f: np.array([getattr(p, f) for p in problems], dtype=np.float64) for f in _FIELDS}


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """The kernels as CK's name parser reads them (block_size is ckheur's tile_m, and so on)."""
    def col(values: Sequence[Any]) -> np.ndarray:
        return np.asarray(values, dtype=np.float64)

    pipes = [k.pipeline for k in kernels]
    return {"block": col([k.tile_m for k in kernels]), "gm": col([k.tile_n for k in kernels]),
            "gn": col([k.tile_k for k in kernels]),
            "pipe_code": col([PIPELINE_CODES.get(p, 0) for p in pipes]),
            "bpe": col([DTYPE_BYTES.get(k.dtype, 2.0) for k in kernels]),
            "compv3": col([p == "compv3" for p in pipes]), "compv4": col([p == "compv4" for p in pipes]),
            "compv5": col([p == "compv5" for p in pipes]), "compv6": col([p == "compv6" for p in pipes]),
            "mem": col([p == "mem" for p in pipes]), "basic": col([p.startswith("basic_v") for p in pipes]),
            "intra": col([k.scheduler == "intrawave" for k in kernels]),
            "dsb": col([bool(k.dsb) for k in kernels]), "si": col([bool(k.si) for k in kernels])}


def features(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
             direction: str, analytic_params: Mapping[str, Any] | None = None,
             analytic_log_tf: np.ndarray | None = None) -> np.ndarray:
    """CK's feature matrix [P*K, 97] (problem-major: row p*K + k), float64."""
    if analytic_params is not None:
        feature_names(True)  # refused with its reason
    cus, simds, engines, clock, waves, wave_size, lds, l1, l2, l3, xcds = hardware(arch)
    nP, nK = len(prob["N"]), len(kern["block"])
    p = {k: v[:, None] for k, v in prob.items()}
    k = {n: v[None, :] for n, v in kern.items()}
    N, C, K, G = p["N"], p["C"], p["K"], p["G"]
    Hi, Wi, Di, Y, X, Z = p["Hi"], p["Wi"], p["Di"], p["Y"], p["X"], p["Z"]
    is_3d = ((Di > 1) | (Z > 1) | (p["pad_d"] > 0)).astype(np.float64)
    Ho = (Hi + 2 * p["pad_h"] - ((Y - 1) * p["dilation_h"] + 1)) // p["stride_h"] + 1
    Wo = (Wi + 2 * p["pad_w"] - ((X - 1) * p["dilation_w"] + 1)) // p["stride_w"] + 1
    Do = np.where(is_3d > 0, (Di + 2 * p["pad_d"] - ((Z - 1) * p["dilation_d"] + 1)) // p["stride_d"] + 1, 1.0)
    spatial = np.where(is_3d > 0, Di * Hi * Wi, Hi * Wi)
    filt = np.where(is_3d > 0, Z * Y * X, Y * X)
    out = np.where(is_3d > 0, Do * Ho * Wo, Ho * Wo)
    G1 = np.maximum(G, 1)
    cpg, kpg = C / G1, K / G1
    bpe = k["bpe"]
    flops = N * K * out * cpg * filt * 2
    moved = N * C * spatial * bpe + K * cpg * filt * bpe + N * K * out * bpe
    block, gm, gn = k["block"], k["gm"], k["gn"]
    lds_est = (gm * block + gn * block) * bpe
    gemm_m, gemm_n = N * out, K
    gemm_k = (cpg * filt).astype(np.int64)
    tiles_m, tiles_n = np.ceil(gemm_m / np.maximum(gm, 1)), np.ceil(gemm_n / np.maximum(gn, 1))
    tiles_k = np.ceil(gemm_k / np.maximum(block, 1))

    def fill(dim: np.ndarray, tile: np.ndarray) -> np.ndarray:  # the last tile's fill; 1 when it divides
        rem = np.where(tile > 0, dim % tile, 0)
        return np.where(rem > 0, rem / tile, 1.0)

    eff_m, eff_n, eff_k = fill(gemm_m, gm), fill(gemm_n, gn), fill(gemm_k, block)
    three = (Y == 3) & (X == 3)
    cols = {
        "N": N, "C": C, "K": K, "G": G, "Hi": Hi, "Wi": Wi, "Y": Y, "X": X, "stride_h": p["stride_h"],
        "stride_w": p["stride_w"], "pad_h": p["pad_h"], "pad_w": p["pad_w"], "Ho": Ho, "Wo": Wo,
        "log2_N": np.log2(np.maximum(N, 1)), "log2_C": np.log2(np.maximum(C, 1)), "log2_K": np.log2(np.maximum(K, 1)),
        "log2_G": np.log2(G1), "log2_Hi": np.log2(np.maximum(Hi, 1)), "log2_Wi": np.log2(np.maximum(Wi, 1)),
        "log2_spatial": np.log2(np.maximum(spatial, 1)), "log2_filter": np.log2(np.maximum(filt, 1)),
        "log2_output": np.log2(np.maximum(out, 1)), "arithmetic_intensity": flops / np.maximum(moved, 1),
        "filter_area": filt, "is_1x1_conv": ((Y == 1) & (X == 1) & ((Z == 1) | (is_3d == 0))).astype(np.float64),
        "is_3x3_conv": np.where(is_3d > 0, three & (Z == 3), three).astype(np.float64), "channels_per_group": cpg,
        "aspect_ratio_hw": Hi / np.maximum(Wi, 1), "aspect_ratio_filter": Y / np.maximum(X, 1), "is_3d": is_3d,
        "Di": Di, "Z": Z, "Do": Do, "stride_d": p["stride_d"], "pad_d": p["pad_d"], "dilation_h": p["dilation_h"],
        "dilation_w": p["dilation_w"], "log2_channels_per_group": np.log2(np.maximum(cpg, 1)),
        "log2_output_channels_per_group": np.log2(np.maximum(kpg, 1)),
        "is_depthwise": ((G == C) & (G == K)).astype(np.float64), "group_density": G / np.maximum(C, 1),
        "is_small_group": ((cpg < 16) | (kpg < 16)).astype(np.float64), "channels_product_per_group": cpg * kpg,
        "batch_group_product": N * G, "is_small_batch_grouped": ((N < 8) & (G > 1)).astype(np.float64),
        "block_size": block, "gemm_m_per_block": gm, "gemm_n_per_block": gn, "pipeline": k["pipe_code"],
        "num_warps": block / 4.0, "tile_volume": gm * gn * block, "tile_mn": gm * gn, "lds_usage_estimate": lds_est,
        "lds_usage_ratio": lds_est / np.maximum(np.where(k["compv4"] > 0, COMPV4_LDS, float(lds)), 1),
        "block_tile_ratio_m": gm / np.maximum(block, 1), "block_tile_ratio_n": gn / np.maximum(block, 1),
        "block_efficiency": np.minimum(gm, gn) / np.maximum(np.maximum(gm, gn), 1),
        "is_compv3": k["compv3"], "is_compv4": k["compv4"], "is_compv5": k["compv5"], "is_intrawave": k["intra"],
        "has_dsb": k["dsb"], "has_si": k["si"], "is_basic": k["basic"], "is_compv6": k["compv6"], "is_mem": k["mem"],
        "gemm_m_output": gemm_m, "gemm_n_output": gemm_n, "gemm_k_output": gemm_k, "num_tiles_m": tiles_m,
        "num_tiles_n": tiles_n, "num_tiles_k": tiles_k, "total_output_tiles": tiles_m * tiles_n,
        "tile_eff_m": eff_m, "tile_eff_n": eff_n, "tile_eff_k": eff_k, "overall_tile_efficiency": eff_m * eff_n * eff_k,
        "cu_utilization": tiles_m * tiles_n / max(cus, 1), "ratio_gemm_m_to_tile_m": gemm_m / np.maximum(gm, 1),
        "ratio_gemm_n_to_tile_n": gemm_n / np.maximum(gn, 1), "ratio_gemm_k_to_tile_k": gemm_k / np.maximum(block, 1),
        "problem_smaller_than_tile_m": (gemm_m < gm).astype(np.float64),
        "problem_smaller_than_tile_n": (gemm_n < gn).astype(np.float64),
        "problem_smaller_than_tile_k": (gemm_k < block).astype(np.float64),
        "hw_num_cus": cus, "hw_simds_per_cu": simds, "hw_total_simds": cus * simds, "hw_shader_engines": engines,
        "hw_max_clock_mhz": clock, "hw_max_waves_per_cu": waves, "hw_wavefront_size": wave_size,
        "hw_lds_capacity": lds, "hw_l1_cache_kb": l1, "hw_l2_cache_kb": l2, "hw_l3_cache_kb": l3, "hw_num_xcd": xcds,
    }
    names = feature_names()
    matrix = np.empty((nP, nK, len(names)), dtype=np.float64)
    for i, name in enumerate(names):
        matrix[:, :, i] = cols[name]
    return matrix.reshape(nP * nK, len(names))
