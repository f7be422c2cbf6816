"""Analytic performance model of CK tile kernels (in the spirit of AMD's Origami model).

Vectorized over problems x kernels. A problem is seen through its implicit GEMM
(G x M x N x K, see ckheur.families.grouped_conv.problems). For each kernel the model accounts for:

- tile quantization in M/N/K (padded work of the last tile in each dimension);
- wave quantization: workgroups run in rounds of num_cus x occupancy slots;
- occupancy limited by LDS use and waves per CU;
- per-pipeline behaviour: compute pipelines (compv3/4/5) overlap loads with MFMA at an
  efficiency of their own plus a prologue; mem prefetches through registers (cheap prologue,
  lower peak); double-buffered pipelines halve occupancy;
- intra/interwave scheduling; split-K over the GEMM K for bwd_weight (CK's k_batch) with
  the reduction traffic it costs;
- memory traffic (operands re-read per tile row/column, L2 reuse) against HBM bandwidth;
- launch overhead;
- a deterministic per-kernel effect and seeded multiplicative measurement noise.

Free parameters live in conf/backend/sim.yaml (calibrated on real gfx950 data by
tools/calibrate_sim.py); ``load_params()`` reads them so this module needs no Hydra.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.families.kernel_base import DTYPE_BYTES

PIPELINES = ("mem", "compv3", "compv4", "compv5", "compv6", "comp_async")
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")

# The selection cascade (the selector, its C export, active sweeps): pools larger than
# CASCADE_THRESHOLD are pre-ranked by this analytic model, and the learned model scores only
# its top CASCADE_TOP candidates.
CASCADE_THRESHOLD = 512
CASCADE_TOP = 256


# Parameters read before in this process, by (file, its text): a selector, an export and a job
# each read them, and OmegaConf's YAML reader takes ~7 ms; a changed file is read anew.
_PARAMS: dict[tuple, dict] = {}


def load_params(path: str | Path | None = None) -> dict[str, Any]:
    """Simulator parameters from conf/backend/sim.yaml (the ``params`` node)."""
    import copy
    import io

    from omegaconf import OmegaConf

    from ckheur.config import CONF_DIR

    path = Path(path or CONF_DIR / "backend" / "sim.yaml")
    text = path.read_text()
    key = (str(path.resolve()), text)
    if key not in _PARAMS:
        _PARAMS.clear()  # one file's parameters are kept: the one every caller reads
        _PARAMS[key] = OmegaConf.to_container(OmegaConf.load(io.StringIO(text))["params"], resolve=True)
    return copy.deepcopy(_PARAMS[key])


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def problem_arrays(problems: Sequence[Any], direction: str) -> dict[str, np.ndarray]:
    """Per-problem arrays: implicit-GEMM sizes, FLOPs, tensor bytes (per element)."""
    # One array for every numeric column (a selector asks for one problem at a time: one numpy call).
    cols = np.array([(*p.gemm(direction), p.flops, p.bytes_moved(1), p.filter_size, p.channels_per_group,
                      p.split_k, getattr(p, "transposed_operands", 0)) for p in problems],
                    dtype=np.float64).reshape(-1, 10).T.copy()
    return dict(zip(("G", "M", "N", "K", "flops", "elems", "filt", "cpg", "split_k", "transposed"), cols))


def problem_hashes(problems: Sequence[Any]) -> np.ndarray:
    """Each problem's 64-bit hash (what seeds its measurement noise)."""
    return np.array([_stable_hash(repr(p.key())) for p in problems], dtype=np.uint64)


def kernel_arrays(kernels: Sequence[Any]) -> dict[str, np.ndarray]:
    """Per-kernel arrays of the traits the model uses."""
    def col(attr: str) -> np.ndarray:
        return np.array([getattr(k, attr) for k in kernels], dtype=np.float64)

    return {
        "tm": col("tile_m"), "tn": col("tile_n"), "tk": col("tile_k"),
        "waves": np.array([k.num_waves for k in kernels], dtype=np.float64),
        "warp_m": col("warp_tile_m"), "lds": np.array([k.lds_bytes for k in kernels], dtype=np.float64),
        "pipe": np.array([PIPELINES.index(k.pipeline) for k in kernels]),
        "inter": np.array([k.scheduler == "interwave" for k in kernels], dtype=np.float64),
        "dsb": col("dsb"), "si": col("si"),
        "epi_default": np.array([getattr(k, "epilogue", "cshuffle") == "default" for k in kernels], dtype=np.float64),
        "persistent": np.array([getattr(k, "persistent", False) for k in kernels], dtype=np.float64),
        "padded": np.array([any(getattr(k, f, False) for f in ("pad_m", "pad_n", "pad_k")) for k in kernels],
                           dtype=np.float64),
        "dtype_bytes": np.array([DTYPE_BYTES[k.dtype] for k in kernels], dtype=np.float64),
        "hash": np.array([_stable_hash(k.name) for k in kernels], dtype=np.uint64),
    }


def _unit_normal(h: np.ndarray) -> np.ndarray:
    """Deterministic standard normal draws from 64-bit hashes (Box-Muller on two halves)."""
    h = h * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(31)
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) / 2.0**32
    u2 = ((h & np.uint64(0xFFFFFFFF)).astype(np.float64) + 0.5) / 2.0**32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def kernel_terms(kern: Mapping[str, np.ndarray], arch: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The parts of the latency model that depend on the kernel alone (one value per kernel).

    ``predict_latency_ms`` combines them with the problem; the C export writes them as constants."""
    cus = float(arch["num_cus"])
    clock_hz = float(arch["max_clock_mhz"]) * 1e6
    dtype = params.get("dtype", "bf16")
    peak = float(arch["peak_tflops"].get(dtype, max(arch["peak_tflops"].values()))) * 1e12
    flop_per_cycle_cu = peak / (cus * clock_hz)
    pipe = kern["pipe"]
    pp = {name: np.array([float(params["pipelines"].get(p, params["pipelines"]["compv3"])[name])
                          for p in PIPELINES])[pipe]
          for name in ("mfma_eff", "prologue_iters", "occupancy_cap")}
    # Occupancy: workgroups per CU limited by LDS, waves, and the pipeline's register use.
    lds_total = float(arch["lds_bytes"])
    occ = np.minimum(np.floor(lds_total / kern["lds"]), np.floor(float(arch["max_waves_per_cu"]) / kern["waves"]))
    occ = np.maximum(1.0, np.minimum(occ, pp["occupancy_cap"] / (1.0 + kern["dsb"])))
    # Per k-iteration: MFMA cycles on a CU shared by `occ` workgroups, and operand loads.
    warp_eff = np.where(kern["warp_m"] >= 32, 1.0, float(params["warp16_eff"]))
    sched = 1.0 - float(params["interwave_penalty"]) * kern["inter"]
    mfma_cycles = 2.0 * kern["tm"] * kern["tn"] * kern["tk"] / (flop_per_cycle_cu * pp["mfma_eff"] * warp_eff * sched)
    # GEMM traits (zero for conv kernels): padded tiles; the default epilogue; persistent kernels.
    mfma_cycles = mfma_cycles * (1.0 + float(params.get("pad_overhead", 0.0)) * kern["padded"])
    load_cycles = (kern["tm"] + kern["tn"]) * kern["tk"] * kern["dtype_bytes"] / float(params["l2_bytes_per_cycle_cu"])
    epilogue_cycles = kern["tm"] * kern["tn"] * kern["dtype_bytes"] / float(params["store_bytes_per_cycle_cu"])
    epilogue_cycles = epilogue_cycles * (1.0 + float(params.get("default_epilogue_penalty", 0.0)) * kern["epi_default"])
    overhead = float(params["wg_overhead_cycles"]) * (1.0 - float(params.get("persistent_saving", 0.0)) * kern["persistent"])
    effect = np.exp(float(params["kernel_effect_sigma"]) * _unit_normal(kern["hash"] ^ np.uint64(0xA5A5)))
    return {"occ": occ, "slots": cus * occ, "mfma_cycles": mfma_cycles, "load_cycles": load_cycles,
            "prologue_iters": pp["prologue_iters"], "epilogue_cycles": epilogue_cycles, "overhead": overhead,
            "effect": effect,
            "tm": kern["tm"], "tn": kern["tn"], "tk": kern["tk"], "dtype_bytes": kern["dtype_bytes"]}


_LATENCY_PROBLEM_COLUMNS = ("G", "M", "N", "K", "split_k", "transposed", "filt", "cpg")  # what it reads of a problem


def predict_latency_ms(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray] | None,
                       arch: Mapping[str, Any], params: Mapping[str, Any], direction: str,
                       terms: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """Noise-free latency [problems x kernels] in ms, including the per-kernel effect.

    ``terms``: :func:`kernel_terms` of ``kern`` with these ``arch`` and ``params``, when the caller
    keeps them (a selector scores one pool many times); ``kern`` is then not read."""
    P = {k: prob[k][:, None] for k in _LATENCY_PROBLEM_COLUMNS}
    Kn = {k: v[None, :] for k, v in (kernel_terms(kern, arch, params) if terms is None else terms).items()}
    cus = float(arch["num_cus"])
    clock_hz = float(arch["max_clock_mhz"]) * 1e6
    tiles_m = np.ceil(P["M"] / Kn["tm"])
    tiles_n = np.ceil(P["N"] / Kn["tn"])
    k_iters = np.ceil(P["K"] / Kn["tk"])
    occ, slots = Kn["occ"], Kn["slots"]
    wgs = P["G"] * tiles_m * tiles_n
    if direction == "bwd_weight":
        # CK splits the long GEMM K (N*Do*Ho*Wo) over k_batch workgroups to fill the GPU.
        k_batch = np.clip(np.floor(slots / wgs), 1.0, np.maximum(1.0, np.floor(k_iters / 4.0)))
        wgs = wgs * k_batch
        k_iters = np.ceil(k_iters / k_batch)
    else:
        k_batch = P["split_k"]  # GEMM: the problem's split-K; conv fwd/bwd_data: 1
        wgs = wgs * k_batch
        k_iters = np.ceil(k_iters / k_batch)
    rounds = np.ceil(wgs / slots)
    mfma_cycles = Kn["mfma_cycles"]
    # Transposed operand loads (GEMM layouts; zero for conv).
    load_cycles = Kn["load_cycles"] * (1.0 + float(params.get("layout_penalty", 0.0)) * P["transposed"])
    # Implicit-GEMM gather: small channel runs (C/G) break vector loads of the A operand.
    gather = 1.0 + float(params["gather_penalty"]) * (P["filt"] > 1) / np.minimum(P["cpg"] / 8.0, 8.0).clip(1.0)
    iter_cycles = np.maximum(mfma_cycles, load_cycles * gather) + float(params["overlap_loss"]) * np.minimum(
        mfma_cycles, load_cycles * gather)
    wg_cycles = (k_iters + Kn["prologue_iters"]) * iter_cycles + Kn["epilogue_cycles"] + Kn["overhead"]
    # A round runs `occ` workgroups per CU concurrently; they share the MFMA units.
    compute_s = rounds * wg_cycles * np.minimum(occ, np.ceil(wgs / cus)) / clock_hz
    # HBM: A re-read per tile column, B per tile row (L2 absorbs part), C written once.
    eb = Kn["dtype_bytes"]
    a_bytes = P["G"] * P["M"] * P["K"] * eb
    b_bytes = P["G"] * P["N"] * P["K"] * eb
    c_bytes = P["G"] * P["M"] * P["N"] * eb * (1.0 + 2.0 * (k_batch > 1))
    reuse = float(params["l2_reuse"])
    hbm_bytes = a_bytes * np.maximum(1.0, tiles_n / reuse) + b_bytes * np.maximum(1.0, tiles_m / reuse) + c_bytes
    mem_s = hbm_bytes / (float(arch["hbm_bandwidth_gbps"]) * 1e9 * float(params["hbm_eff"]))
    seconds = np.maximum(compute_s, mem_s) + float(params["launch_us"]) * 1e-6
    return seconds * 1e3 * Kn["effect"]


def predicted_tflops(prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray] | None, arch: Mapping[str, Any],
                     params: Mapping[str, Any], direction: str,
                     terms: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """The simulator's noise-free TFLOPS [problems x kernels] (``terms``: as :func:`predict_latency_ms`)."""
    return prob["flops"][:, None] / (predict_latency_ms(prob, kern, arch, params, direction, terms) * 1e-3) / 1e12


def simulate(problems: Sequence[Any], kernels: Sequence[Any], arch: Mapping[str, Any],
             params: Mapping[str, Any], direction: str, seed: int = 0,
             noise: float | None = None) -> np.ndarray:
    """Simulated measured latency [problems x kernels] in ms: model x seeded lognormal noise.

    The noise of a (problem, kernel) pair depends only on the seed and the pair, so results
    do not depend on batching or order.
    """
    prob, kern = problem_arrays(problems, direction), kernel_arrays(kernels)
    lat = predict_latency_ms(prob, kern, arch, params, direction)
    sigma = float(params["noise_sigma"] if noise is None else noise)
    if sigma > 0:
        h = problem_hashes(problems)[:, None] * np.uint64(31) ^ kern["hash"][None, :] ^ np.uint64(seed * 0x1F3D5B79 + 1)
        lat = lat * np.exp(sigma * _unit_normal(h))
    return lat
