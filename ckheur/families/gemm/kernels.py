"""CK gemm_universal kernel instances and their names.

Name (CK tile_engine): gemm_universal_{dtype}_{layout}_{pipeline}_{epilogue}_{scheduler}_
{pad_m}_{pad_n}_{pad_k}_{persistent}_{tile_m}x{tile_n}x{tile_k}_{wave_m}x{wave_n}x{wave_k}_
{warp_tile_m}x{warp_tile_n}x{warp_tile_k}, flags as True/False. Parsing also accepts the
``gemm_`` and ``benchmark_gemm_universal_`` prefixes. Here wave_* are waves per block and
warp_tile_* the MFMA tile (CK's feature engine calls the former warp_*; we do not).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.families.kernel_base import (DTYPE_BYTES, TILE_MAX, WARP_TILE_MAX, WAVE_MAX, KernelError, checked_traits,
                                        field_values)
from ckheur.families.kernel_base import tile_rejections as rejections  # noqa: F401 - the family's legality rules

# Dataset kernel columns; the layout is the problem's column (a kernel only runs its layout).
COLUMNS = ("tile_m", "tile_n", "tile_k", "wave_m", "wave_n", "wave_k", "warp_tile_m", "warp_tile_n",
           "warp_tile_k", "pipeline", "scheduler", "epilogue", "pad_m", "pad_n", "pad_k", "persistent")
TABLE = ("name", "layout", "tile_m", "tile_n", "tile_k", "wave", "warp_tile", "pipeline", "scheduler", "epilogue",
         "pads", "persistent", "lds_bytes")

_B = r"(True|False)"
_NAME_RE = re.compile(
    r"^(?:benchmark_)?gemm(?:_universal)?_(?P<dtype>[a-z0-9]+)_(?P<layout>[rc]{3})_(?P<pipeline>[a-z0-9_]+?)_"
    r"(?P<epilogue>default|cshuffle)_(?P<scheduler>intrawave|interwave)_" + "_".join([_B] * 4) +
    r"_(\d+)x(\d+)x(\d+)_(\d+)x(\d+)x(\d+)_(\d+)x(\d+)x(\d+)$")


@dataclass(frozen=True)
class GemmKernel:
    """One CK gemm_universal kernel instance."""

    dtype: str
    layout: str
    tile_m: int
    tile_n: int
    tile_k: int
    wave_m: int
    wave_n: int
    wave_k: int
    warp_tile_m: int
    warp_tile_n: int
    warp_tile_k: int
    pipeline: str
    scheduler: str = "intrawave"
    epilogue: str = "cshuffle"
    pad_m: bool = False
    pad_n: bool = False
    pad_k: bool = False
    persistent: bool = False

    direction = "fwd"
    dsb = False  # double buffering is the pipeline's (compv4), not a separate trait here
    si = False

    @cached_property  # the fields are frozen; the selector's hot path reads names
    def name(self) -> str:
        f = lambda b: "True" if b else "False"  # noqa: E731
        return (f"gemm_universal_{self.dtype}_{self.layout}_{self.pipeline}_{self.epilogue}_{self.scheduler}_"
                f"{f(self.pad_m)}_{f(self.pad_n)}_{f(self.pad_k)}_{f(self.persistent)}_"
                f"{self.tile_m}x{self.tile_n}x{self.tile_k}_{self.wave_m}x{self.wave_n}x{self.wave_k}_"
                f"{self.warp_tile_m}x{self.warp_tile_n}x{self.warp_tile_k}")

    @property
    def group(self) -> str:
        return self.layout

    @property
    def num_waves(self) -> int:
        return self.wave_m * self.wave_n * self.wave_k

    @property
    def lds_bytes(self) -> int:
        """LDS for one A+B tile pair."""
        return (self.tile_m + self.tile_n) * self.tile_k * DTYPE_BYTES[self.dtype]

    def traits(self) -> dict:
        d = field_values(self)
        d.update(name=self.name, num_waves=self.num_waves, lds_bytes=self.lds_bytes)
        return d

    def table_row(self) -> tuple:
        return (self.name, self.layout, self.tile_m, self.tile_n, self.tile_k,
                f"{self.wave_m}x{self.wave_n}x{self.wave_k}", f"{self.warp_tile_m}x{self.warp_tile_n}x{self.warp_tile_k}",
                self.pipeline, self.scheduler, self.epilogue,
                "".join("MNK"[i] if p else "-" for i, p in enumerate((self.pad_m, self.pad_n, self.pad_k))),
                int(self.persistent), self.lds_bytes)


def parse_name(name: str, op: Mapping[str, Any] | None = None, arch: Mapping[str, Any] | None = None) -> GemmKernel:
    """Parse a CK gemm_universal kernel name (``op`` and ``arch``: the families' common signature;
    the name says everything)."""
    m = _NAME_RE.match(name.strip())
    if not m:
        raise KernelError(f"kernel name {name!r} is not a CK gemm_universal name; expected gemm_universal_"
                          "{dtype}_{layout}_{pipeline}_{epilogue}_{scheduler}_{padM}_{padN}_{padK}_{persistent}_"
                          "{M}x{N}x{K}_{waves}_{warp tile}")
    g = m.groups()
    flags = [v == "True" for v in g[5:9]]
    nums = list(map(int, g[9:]))
    return GemmKernel(dtype=g[0], layout=g[1], pipeline=g[2], epilogue=g[3], scheduler=g[4],
                      pad_m=flags[0], pad_n=flags[1], pad_k=flags[2], persistent=flags[3],
                      tile_m=nums[0], tile_n=nums[1], tile_k=nums[2], wave_m=nums[3], wave_n=nums[4],
                      wave_k=nums[5], warp_tile_m=nums[6], warp_tile_n=nums[7], warp_tile_k=nums[8])


def trait_rules() -> dict:
    """What each trait may be (``kernel_base.checked_traits``): the op schema's choices, bounded sizes."""
    from ckheur.config import Epilogue, Layout, Pipeline, Scheduler

    return {"dtype": tuple(DTYPE_BYTES), "layout": tuple(x.value for x in Layout),
            **{f"tile_{d}": (1, TILE_MAX) for d in "mnk"}, **{f"wave_{d}": (1, WAVE_MAX) for d in "mnk"},
            **{f"warp_tile_{d}": (1, WARP_TILE_MAX) for d in "mnk"},
            "pipeline": tuple(p.value for p in Pipeline), "scheduler": tuple(s.value for s in Scheduler),
            "epilogue": tuple(e.value for e in Epilogue)}


def from_traits(d: Mapping[str, Any], op: Mapping[str, Any] | None = None) -> GemmKernel:
    """A kernel from its traits (a kernels.json object), each checked (``kernel_base.checked_traits``;
    ``op``: the bundle's, whose dtype it must have)."""
    return checked_traits(GemmKernel, d, trait_rules(), op, derived=("name", "num_waves", "lds_bytes"))


def candidates(op: Mapping[str, Any], arch: Mapping[str, Any]) -> tuple[list, list]:
    """Every trait combination of the allow-lists (legality is checked by the pool)."""
    cg = arch["codegen"]
    waves = op.get("wave_layouts") or cg["wave_layouts"]
    warps = op.get("warp_tiles") or cg["warp_tiles"].get(op["dtype"], [])
    out = []
    for (layout, tm, tn, tk, wave, warp, pipeline, scheduler, epilogue, pads, persistent) in itertools.product(
            op["layouts"], op["tile_m"], op["tile_n"], op["tile_k"], waves, warps, op["pipelines"],
            op["schedulers"], op["epilogues"], op["pads"], op["persistent"]):
        out.append(GemmKernel(dtype=op["dtype"], layout=layout, tile_m=tm, tile_n=tn, tile_k=tk,
                              wave_m=wave[0], wave_n=wave[1], wave_k=wave[2], warp_tile_m=warp[0],
                              warp_tile_n=warp[1], warp_tile_k=warp[2], pipeline=pipeline, scheduler=scheduler,
                              epilogue=epilogue, pad_m=pads[0], pad_n=pads[1], pad_k=pads[2],
                              persistent=persistent))
    return out, []


def support_arrays(kernels: Sequence[GemmKernel]) -> dict[str, np.ndarray]:
    """Kernel traits the support check needs, precomputed once per pool."""
    return {f: np.array([getattr(k, f) for k in kernels]) for f in ("tile_m", "tile_n", "tile_k", "pad_m", "pad_n", "pad_k")}


def support_mask(problem: Any, kernels: Mapping[str, np.ndarray], op: Mapping[str, Any]) -> tuple[np.ndarray, str]:
    """Which kernels can run the problem, and the reason when none can.

    A dimension not a multiple of its tile needs a kernel that pads it; every contiguous
    dimension (A: K if row-major else M; B: N if row-major else K; C: N if row-major else M)
    needs at least ``op.min_contiguous_elems`` elements for the vector loads and stores.
    """
    tm, tn, tk = kernels["tile_m"], kernels["tile_n"], kernels["tile_k"]
    pm, pn, pk = kernels["pad_m"], kernels["pad_n"], kernels["pad_k"]
    p = problem
    ok = (pm | (p.M % tm == 0)) & (pn | (p.N % tn == 0)) & (pk | (p.K % (tk * p.split_k) == 0))
    lay = p.layout
    contiguous = {"A": ("K" if lay[0] == "r" else "M"), "B": ("N" if lay[1] == "r" else "K"),
                  "C": ("N" if lay[2] == "r" else "M")}
    need = int(op.get("min_contiguous_elems", 2))
    short = [f"{t} ({'row' if lay['ABC'.index(t)] == 'r' else 'column'}-major) is contiguous in {d}={getattr(p, d)}"
             for t, d in contiguous.items() if getattr(p, d) < need]
    if short:
        return np.zeros(len(tm), dtype=bool), (
            f"no kernel supports {p.describe()}: {'; '.join(short)}, below the {need} contiguous elements "
            "vector loads need (op.min_contiguous_elems)")
    reason = "" if ok.any() else f"no kernel in the pool pads {p.describe()} where its tiles do not divide it"
    return ok, reason


def support_reasons(problem: Any, kernels: Mapping[str, np.ndarray], op: Mapping[str, Any]) -> list[str]:
    """Why each kernel cannot run the problem ('' where it can), by :func:`support_mask`'s rules."""
    ok, reason = support_mask(problem, kernels, op)
    p = problem
    sizes = {"M": p.M, "N": p.N, "K": p.K}
    steps = {"M": kernels["tile_m"], "N": kernels["tile_n"], "K": kernels["tile_k"] * p.split_k}
    out = []
    for i, fine in enumerate(ok):
        why = [] if fine else [
            f"{d}={sizes[d]} is no multiple of its {'tile_k x split_k' if d == 'K' else 'tile_' + d.lower()}="
            f"{steps[d][i]} and it does not pad {d}" for d in "MNK" if not kernels[f"pad_{d.lower()}"][i]
            and sizes[d] % steps[d][i]]
        out.append("; ".join(why) or ("" if fine else reason))
    return out
