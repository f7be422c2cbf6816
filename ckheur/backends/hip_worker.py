"""Worker process for backend=hip: times kernels from shared libraries, one job per line.

Run as ``python -m ckheur.backends.hip_worker``. The parent never touches the GPU; a
crash, hang or GPU fault here costs only this process. Protocol: the worker prints
``{"ready": true}``, then for each JSON job line on stdin prints one JSON result line
``{"status", "latency_ms", "spread_ms", "error"}``.

Memory layers: ``hip`` (device buffers through hip-python, imported lazily) and ``host``
(float32 numpy buffers; lets tests run the real protocol without a GPU).
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from typing import Any

import numpy as np

from ckheur.backends.abi import DIRECTION_CODES, DTYPE_CODES, ConvProblemC
from ckheur.families.grouped_conv.problems import CONV_FIELDS, WRITTEN_TENSOR, problem_from_dict


def _shapes(p: dict) -> dict[str, tuple]:
    return problem_from_dict(p).tensor_shapes()


def _windows(p: dict, out_shape: tuple):
    """(z, y, x, slices into the padded input) of every filter tap, for NDHWGC tensors."""
    _, do, ho, wo, _, _ = out_shape
    for z in range(p["Z"]):
        for r in range(p["Y"]):
            for s in range(p["X"]):
                d0, h0, w0 = z * p["dilation_d"], r * p["dilation_h"], s * p["dilation_w"]
                yield z, r, s, (slice(None), slice(d0, d0 + p["stride_d"] * do, p["stride_d"]),
                                slice(h0, h0 + p["stride_h"] * ho, p["stride_h"]),
                                slice(w0, w0 + p["stride_w"] * wo, p["stride_w"]))


def _pad(p: dict) -> tuple:
    return ((0, 0), (p["pad_d"],) * 2, (p["pad_h"],) * 2, (p["pad_w"],) * 2, (0, 0), (0, 0))


def reference(direction: str, x: np.ndarray, w: np.ndarray, dy: np.ndarray, p: dict, out_shape: tuple) -> np.ndarray:
    """Direct grouped convolution in float64 (small problems only): the tensor the direction
    writes (fwd: y from x, w; bwd_data: dx from dy, w; bwd_weight: dw from x, dy)."""
    if direction == "bwd_data":
        dxp = np.zeros(np.pad(x, _pad(p)).shape)
        for z, r, s, win in _windows(p, out_shape):
            dxp[win] += np.einsum("ndhwgk,gkc->ndhwgc", dy.astype(np.float64), w[:, :, z, r, s, :].astype(np.float64))
        return dxp[:, p["pad_d"]:dxp.shape[1] - p["pad_d"], p["pad_h"]:dxp.shape[2] - p["pad_h"],
                   p["pad_w"]:dxp.shape[3] - p["pad_w"]]
    xp = np.pad(x.astype(np.float64), _pad(p))
    if direction == "bwd_weight":
        dw = np.zeros(w.shape)
        for z, r, s, win in _windows(p, out_shape):
            dw[:, :, z, r, s, :] = np.einsum("ndhwgk,ndhwgc->gkc", dy.astype(np.float64), xp[win])
        return dw
    y = np.zeros(out_shape)
    for z, r, s, win in _windows(p, out_shape):
        y += np.einsum("ndhwgc,gkc->ndhwgk", xp[win], w[:, :, z, r, s, :].astype(np.float64))
    return y


class HostMemory:
    """float32 host buffers (test mode); ``sets`` copies rotate to defeat caches."""

    def __init__(self, shapes: dict, sets: int, rng: np.random.Generator) -> None:
        self.sets = [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()} for _ in range(sets)]

    def ptrs(self, i: int) -> tuple:
        b = self.sets[i % len(self.sets)]
        return tuple(b[k].ctypes.data_as(ctypes.c_void_p) for k in ("in", "wei", "out"))

    def read(self, i: int, name: str) -> np.ndarray:
        return self.sets[i % len(self.sets)][name]

    def zero(self, i: int, name: str) -> None:
        self.sets[i % len(self.sets)][name][...] = 0

    def free(self) -> None:
        self.sets = []


class HipMemory:
    """Device buffers through hip-python (bf16/fp16 bits from float32 random data)."""

    def __init__(self, shapes: dict, sets: int, rng: np.random.Generator) -> None:
        from hip import hip  # lazy: only on machines with the hip extra

        self.hip = hip
        self.host = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        self.bits = {k: (v.view(np.uint32) >> 16).astype(np.uint16) for k, v in self.host.items()}
        self.sets = []
        for _ in range(sets):
            bufs = {}
            for k, arr in self.bits.items():
                bufs[k] = self._check(hip.hipMalloc(arr.nbytes))
                self._check(hip.hipMemcpy(bufs[k], arr, arr.nbytes, hip.hipMemcpyKind.hipMemcpyHostToDevice))
            self.sets.append(bufs)

    def _check(self, result: Any) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != self.hip.hipError_t.hipSuccess:
            raise RuntimeError(f"HIP error {err}")
        return rest[0] if rest else None

    def ptrs(self, i: int) -> tuple:
        b = self.sets[i % len(self.sets)]
        return tuple(ctypes.c_void_p(int(b[k])) for k in ("in", "wei", "out"))

    def read(self, i: int, name: str) -> np.ndarray:
        out = np.empty_like(self.bits[name])
        self._check(self.hip.hipMemcpy(out, self.sets[i % len(self.sets)][name], out.nbytes,
                                       self.hip.hipMemcpyKind.hipMemcpyDeviceToHost))
        return (out.astype(np.uint32) << 16).view(np.float32)

    def zero(self, i: int, name: str) -> None:
        self._check(self.hip.hipMemset(self.sets[i % len(self.sets)][name], 0, self.bits[name].nbytes))

    def free(self) -> None:
        for bufs in self.sets:
            for b in bufs.values():
                self.hip.hipFree(b)
        self.sets = []


def run_job(job: dict, libs: dict) -> dict:
    """Time one kernel on one problem as the job says; check its output."""
    lib = libs.get(job["lib"])
    if lib is None:
        lib = libs[job["lib"]] = ctypes.CDLL(job["lib"])
        lib.ckheur_conv_run.restype = ctypes.c_float
        lib.ckheur_conv_run.argtypes = [ctypes.c_char_p, ctypes.POINTER(ConvProblemC)] + [ctypes.c_void_p] * 4
    p = job["problem"]
    cp = ConvProblemC(**{f: int(p[f]) for f in CONV_FIELDS}, direction=DIRECTION_CODES[job["direction"]],
                      dtype=DTYPE_CODES[job["dtype"]])
    shapes = _shapes(p)
    written = WRITTEN_TENSOR[job["direction"]]
    # Rotate through enough buffer sets that each run finds its operands out of cache.
    nbytes = 4 * sum(int(np.prod(v)) for v in shapes.values())
    sets = min(64, max(2, -(-int(job.get("flush_bytes", 0)) // max(nbytes, 1)) + 1)) if job.get("flush_l2") else 1
    mem = (HostMemory if job.get("memory") == "host" else HipMemory)(shapes, sets, np.random.default_rng(0))
    name = job["kernel"].encode()
    try:
        def call(i: int) -> float:
            return float(lib.ckheur_conv_run(name, ctypes.byref(cp), *mem.ptrs(i), None))

        mem.zero(0, written)
        first = call(0)
        if first == -1:
            return {"status": "unsupported", "error": "kernel reports the problem unsupported"}
        if first < 0:
            return {"status": "failed", "error": f"kernel returned error code {first:g}"}
        result = mem.read(0, written)
        if job.get("check"):
            nz = float(np.count_nonzero(result)) / result.size
            if nz < 0.99:
                return {"status": "wrong_result", "error": f"non-zero fraction {nz:.3f} of the output"}
            if job.get("small"):
                ref = reference(job["direction"], mem.read(0, "in"), mem.read(0, "wei"), mem.read(0, "out"), p,
                                shapes["out"])
                err = np.max(np.abs(result - ref)) / (np.max(np.abs(ref)) + 1e-12)
                if err > job.get("rtol", 2e-2):
                    return {"status": "wrong_result", "error": f"max relative error {err:.3g} vs reference"}
        t_end = time.perf_counter() + job.get("warmup_ms", 0.0) / 1e3
        i, warm = 1, 0
        while warm < job.get("warmup", 0) or time.perf_counter() < t_end:
            call(i)
            i, warm = i + 1, warm + 1
        times = []
        for _ in range(max(1, job.get("repeat", 20))):
            t = call(i)
            i += 1
            if t < 0:
                return {"status": "failed", "error": f"kernel returned error code {t:g} while timing"}
            times.append(t)
        q1, med, q3 = np.percentile(times, [25, 50, 75])
        return {"status": "ok", "latency_ms": float(med), "spread_ms": float(q3 - q1), "error": ""}
    finally:
        mem.free()


def main() -> None:
    import os

    # Kernel libraries may print to stdout: keep the protocol on a private copy of fd 1 and
    # send fd 1 (C printf) to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    libs: dict = {}
    print(json.dumps({"ready": True}), file=proto, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            res = run_job(json.loads(line), libs)
        except Exception as e:  # report and keep serving: one bad job must not end the sweep
            res = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        print(json.dumps(res), file=proto, flush=True)


if __name__ == "__main__":
    main()
