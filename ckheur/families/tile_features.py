"""Feature logic shared by operator engines: how a kernel's tiles cover an (implicit) GEMM.

Inputs are broadcastable arrays: problem columns shaped [P, 1], kernel columns [1, K].
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ckheur.sim import PIPELINES, predicted_tflops
from ckheur.sim import kernel_arrays as sim_kernel_arrays


def lds_budget(arch: Mapping[str, Any], pipe: np.ndarray) -> np.ndarray:
    """LDS bytes each kernel's pipeline may use on the arch (pipe: indices into PIPELINES)."""
    cg = arch["codegen"]
    per = np.array([float(arch["lds_bytes"]) * cg.get("lds_budget_fraction", {}).get(
        p, cg.get("default_lds_budget_fraction", 1.0)) for p in PIPELINES])
    return per[pipe]


def coverage_occupancy(kern: Mapping[str, np.ndarray], arch: Mapping[str, Any]) -> np.ndarray:
    """Workgroups per CU each kernel can hold (LDS and waves; at least 1): kernel-only."""
    return np.maximum(1.0, np.minimum(np.floor(float(arch["lds_bytes"]) / kern["lds"]),
                                      np.floor(float(arch["max_waves_per_cu"]) / kern["waves"])))


def coverage_kernel_terms(kern: Mapping[str, np.ndarray], arch: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The kernel-only part of :func:`tile_coverage` (occupancy, LDS budget fraction)."""
    return {"occupancy": coverage_occupancy(kern, arch), "lds_budget_frac": kern["lds"] / lds_budget(arch, kern["pipe"])}


def tile_coverage(M: np.ndarray, N: np.ndarray, K: np.ndarray, G: np.ndarray, kern: Mapping[str, np.ndarray],
                  arch: Mapping[str, Any], k_splits: np.ndarray | float = 1.0,
                  kernel_terms: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Tile and wave quantization of a batch-G GEMM by each kernel's tile_m/n/k.

    eff_* is the useful fraction of the padded work per dimension (M / (tiles_m * tile_m)),
    not the fill of the last tile; cu_util is the fraction of CUs with at least one workgroup.
    ``kernel_terms``: :func:`coverage_kernel_terms` of ``kern``, when the caller keeps them.
    """
    cus = float(arch["num_cus"])
    tm, tn, tk = kern["tm"], kern["tn"], kern["tk"]
    kt = coverage_kernel_terms(kern, arch) if kernel_terms is None else kernel_terms
    occ = kt["occupancy"]
    tiles_m, tiles_n = np.ceil(M / tm), np.ceil(N / tn)
    k_iters = np.ceil(np.ceil(K / k_splits) / tk)
    eff_m, eff_n = M / (tiles_m * tm), N / (tiles_n * tn)
    eff_k = K / (k_iters * k_splits * tk)
    wgs = G * tiles_m * tiles_n * k_splits
    slots = cus * occ
    rounds = np.ceil(wgs / slots)
    return {
        "tiles_m": tiles_m, "tiles_n": tiles_n, "k_iters": k_iters, "eff_m": eff_m, "eff_n": eff_n, "eff_k": eff_k,
        "eff_mnk": eff_m * eff_n * eff_k, "wgs": wgs, "occupancy": occ, "wave_rounds": rounds,
        "wave_eff": wgs / (rounds * slots), "wgs_per_cu": wgs / cus, "cu_util": np.minimum(1.0, wgs / cus),
        "m_over_tm": M / tm, "n_over_tn": N / tn, "k_over_tk": K / tk,
        "lds_budget_frac": kt["lds_budget_frac"],
        "padded_flops": 2.0 * G * tiles_m * tm * tiles_n * tn * k_iters * k_splits * tk,
    }


def kernel_arrays(kernels: Sequence[Any], traits: Sequence[str]) -> dict[str, np.ndarray]:
    """The simulator's kernel arrays plus numeric arrays of further kernel traits (by name)."""
    arrays = sim_kernel_arrays(kernels)
    arrays.update({t: np.array([getattr(k, t) for k in kernels], dtype=np.float64) for t in traits})
    return arrays


class FixedColumns(NamedTuple):
    """Columns of a feature matrix that are the same for every problem (kernel and arch traits):
    their positions, and their values [K, len(positions)] in float32, written at once."""

    at: np.ndarray
    positions: frozenset
    values: np.ndarray


def fixed_columns(cols: Mapping[str, Any], names: list[str], n_kernels: int, which: Sequence[str]) -> FixedColumns:
    """The columns of ``names`` that are in ``which``, as :class:`FixedColumns` (once per pool)."""
    at = [i for i, n in enumerate(names) if n in which]
    return FixedColumns(np.array(at, dtype=np.intp), frozenset(at), to_matrix(cols, [names[i] for i in at], 1, n_kernels))


def to_matrix(cols: Mapping[str, Any], names: list[str], n_problems: int, n_kernels: int,
              fixed: FixedColumns | None = None) -> np.ndarray:
    """Stack named [P, K]-broadcastable columns into a float32 [P*K, F] matrix (problem-major);
    ``fixed``: columns written from there instead (``cols`` need not have them)."""
    out = np.empty((n_problems, n_kernels, len(names)), dtype=np.float32)
    skip: frozenset = frozenset()
    if fixed is not None:
        out[:, :, fixed.at] = fixed.values
        skip = fixed.positions
    for i, n in enumerate(names):
        if i not in skip:
            out[:, :, i] = cols[n]
    return out.reshape(n_problems * n_kernels, len(names))


def analytic_log_tflops(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray] | None,
                        arch: Mapping[str, Any], params: Mapping[str, Any], direction: str,
                        terms: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """The simulator's log TFLOPS of every (problem, kernel), float64 [P, K] (``terms``: the
    kernels' precomputed ``ckheur.sim.kernel_terms``, when the caller keeps them)."""
    return np.log(predicted_tflops(prob, kern, arch, params, direction, terms))


def analytic_columns(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
                     params: Mapping[str, Any], direction: str,
                     log_tf: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The simulator's log TFLOPS per pair, absolute and relative to the problem's best kernel
    (``log_tf``: :func:`analytic_log_tflops` of these arguments, when the caller has it already)."""
    tf = analytic_log_tflops(prob, kern, arch, params, direction) if log_tf is None else log_tf
    return {"analytic_log_tflops": tf, "analytic_rel": tf - tf.max(axis=1, keepdims=True)}
