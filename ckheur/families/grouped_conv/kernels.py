"""Grouped-convolution kernel instances and their CK names.

Name: grouped_conv_{variant}_{dtype}_{ndim}d_{tile_m}x{tile_n}x{tile_k}_{pipeline}_{scheduler}[_dsb][_si]
with variant forward / bwd_data / bwd_weight. The older form without the scheduler suffix
(as in CK's tile_engine CSVs, e.g. grouped_conv_forward_bf16_2d_16x64x64_compv3) is
parsed too, with scheduler intrawave. Wave layout and warp tile are not part of the name:
they come from the op's tile table (the production set maps each tile to one of each).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from ckheur.families.kernel_base import (DTYPE_BYTES, TILE_MAX, WARP_TILE_MAX, WAVE_MAX, KernelError,
                                        all_support_arrays, all_support_mask, all_support_reasons, checked_traits,
                                        field_values, tile_problems)
from ckheur.families.kernel_base import tile_rejections as rejections  # noqa: F401 - the family's legality rules

VARIANTS = {"fwd": "forward", "bwd_data": "bwd_data", "bwd_weight": "bwd_weight"}
_DIRECTION_OF = {v: k for k, v in VARIANTS.items()}

_NAME_RE = re.compile(
    r"^grouped_conv_(?P<variant>forward|bwd_data|bwd_weight)_(?P<dtype>[a-z0-9]+)_(?P<ndim>[23])d_"
    r"(?P<tile_m>\d+)x(?P<tile_n>\d+)x(?P<tile_k>\d+)_(?P<pipeline>[a-z0-9_]+?)"
    r"(?:_(?P<scheduler>intrawave|interwave))?(?P<dsb>_dsb)?(?P<si>_si)?$"
)


@dataclass(frozen=True)
class ConvKernel:
    """One CK grouped-convolution kernel instance (its traits)."""

    direction: str
    dtype: str
    ndim: int
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
    dsb: bool = False
    si: bool = False

    @cached_property  # the fields are frozen; the selector's hot path reads names
    def name(self) -> str:
        """CK's current kernel name (with scheduler suffix)."""
        return format_name(self)

    @property
    def group(self) -> int:
        """Problems this kernel can run have this spatial dimensionality."""
        return self.ndim

    @property
    def num_waves(self) -> int:
        return self.wave_m * self.wave_n * self.wave_k

    @property
    def lds_bytes(self) -> int:
        """LDS for one A+B tile pair (twice that with a double smem buffer)."""
        one = (self.tile_m + self.tile_n) * self.tile_k * DTYPE_BYTES[self.dtype]
        return one * (2 if self.dsb else 1)

    def traits(self) -> dict:
        """Plain dict of every trait plus name, num_waves and lds_bytes (for filters and tables)."""
        d = field_values(self)
        d.update(name=self.name, num_waves=self.num_waves, lds_bytes=self.lds_bytes)
        return d


    def table_row(self) -> tuple:
        return (self.name, self.tile_m, self.tile_n, self.tile_k, f"{self.wave_m}x{self.wave_n}x{self.wave_k}",
                f"{self.warp_tile_m}x{self.warp_tile_n}x{self.warp_tile_k}", self.pipeline, self.scheduler,
                int(self.dsb), int(self.si), self.lds_bytes)


COLUMNS = ("ndim", "tile_m", "tile_n", "tile_k", "wave_m", "wave_n", "wave_k", "warp_tile_m", "warp_tile_n",
           "warp_tile_k", "pipeline", "scheduler", "dsb", "si")
TABLE = ("name", "tile_m", "tile_n", "tile_k", "wave", "warp_tile", "pipeline", "scheduler", "dsb", "si", "lds_bytes")


def format_name(k: ConvKernel, legacy: bool = False) -> str:
    """CK name of a kernel; ``legacy=True`` gives the older form without scheduler/flags."""
    base = (f"grouped_conv_{VARIANTS[k.direction]}_{k.dtype}_{k.ndim}d_"
            f"{k.tile_m}x{k.tile_n}x{k.tile_k}_{k.pipeline}")
    if legacy:
        return base
    return base + f"_{k.scheduler}" + ("_dsb" if k.dsb else "") + ("_si" if k.si else "")


def trait_rules() -> dict:
    """What each trait may be (``kernel_base.checked_traits``): the op schema's choices, bounded sizes."""
    from ckheur.config import Pipeline, Scheduler

    return {"direction": tuple(VARIANTS), "dtype": tuple(DTYPE_BYTES), "ndim": (2, 3),
            **{f"tile_{d}": (1, TILE_MAX) for d in "mnk"}, **{f"wave_{d}": (1, WAVE_MAX) for d in "mnk"},
            **{f"warp_tile_{d}": (1, WARP_TILE_MAX) for d in "mnk"},
            "pipeline": tuple(p.value for p in Pipeline), "scheduler": tuple(s.value for s in Scheduler)}


def from_traits(d: Mapping, op: Mapping[str, Any] | None = None) -> ConvKernel:
    """A kernel from its traits (a kernels.json object), each checked (``kernel_base.checked_traits``;
    ``op``: the bundle's, whose direction and dtype it must have)."""
    return checked_traits(ConvKernel, d, trait_rules(), op, derived=("name", "num_waves", "lds_bytes"))


# Every kernel of the problem's dimensionality runs every valid problem (CK pads internally).
support_arrays, support_mask, support_reasons = all_support_arrays, all_support_mask, all_support_reasons


def parse_name(name: str, op: Mapping[str, Any] | None = None, arch: Mapping[str, Any] | None = None) -> ConvKernel:
    """Parse a CK kernel name (current or older form); wave/warp tile come from the op's tiles.

    ``op["tiles"]`` is the op's tile table (dicts with tile_m/n/k, wave, warp_tile). A tile absent
    from it gets zeros for wave and warp tile, which pool membership checks then reject. (``arch``:
    the families' common signature; a CK name does not depend on it.)
    """
    tiles = (op or {}).get("tiles")
    m = _NAME_RE.match(name.strip())
    if not m:
        raise KernelError(
            f"kernel name {name!r} is not a CK grouped-conv name; expected "
            "grouped_conv_{forward|bwd_data|bwd_weight}_{dtype}_{2|3}d_{M}x{N}x{K}_{pipeline}"
            "[_{intrawave|interwave}][_dsb][_si]")
    g = m.groupdict()
    tm, tn, tk = int(g["tile_m"]), int(g["tile_n"]), int(g["tile_k"])
    wave, warp = (0, 0, 0), (0, 0, 0)
    for t in tiles or ():
        if (t["tile_m"], t["tile_n"], t["tile_k"]) == (tm, tn, tk):
            wave, warp = tuple(t["wave"]), tuple(t["warp_tile"])
            break
    return ConvKernel(
        direction=_DIRECTION_OF[g["variant"]], dtype=g["dtype"], ndim=int(g["ndim"]),
        tile_m=tm, tile_n=tn, tile_k=tk,
        wave_m=wave[0], wave_n=wave[1], wave_k=wave[2],
        warp_tile_m=warp[0], warp_tile_n=warp[1], warp_tile_k=warp[2],
        pipeline=g["pipeline"], scheduler=g["scheduler"] or "intrawave",
        dsb=bool(g["dsb"]), si=bool(g["si"]),
    )



def _resolve_generated(op: Mapping[str, Any], arch: Mapping[str, Any]) -> tuple[list[dict], list[tuple[str, str]]]:
    """Tiles of the generated space, each with its first legal wave layout and warp tile.

    Production tiles keep their production mapping; others prefer about 4 waves and the
    largest MFMA warp tile, so each tile (and so each CK name) maps to one instance.
    """
    prod = {(t["tile_m"], t["tile_n"], t["tile_k"]): t for t in op["tiles"]}
    gen = op["generated_tiles"]
    cg = arch["codegen"]
    warps = sorted(cg["warp_tiles"].get(op["dtype"], []), key=lambda w: (-w[0] * w[1], -w[2]))
    waves = sorted(cg["wave_layouts"], key=lambda w: (abs(w[0] * w[1] * w[2] - 4), w[0] * w[1] * w[2]))
    tiles, rejected = [], []
    for tm, tn, tk in itertools.product(gen["tile_m"], gen["tile_n"], gen["tile_k"]):
        t = {"tile_m": tm, "tile_n": tn, "tile_k": tk}
        if (tm, tn, tk) in prod:
            tiles.append(dict(prod[(tm, tn, tk)]))
            continue
        for wave, warp in itertools.product(waves, warps):
            if not tile_problems(t, wave, warp, arch, op["dtype"]):
                tiles.append({**t, "wave": list(wave), "warp_tile": list(warp)})
                break
        else:
            rejected.append((f"tile {tm}x{tn}x{tk}", "no allowed wave layout x warp tile divides it"))
    return tiles, rejected


def candidates(op: Mapping[str, Any], arch: Mapping[str, Any]) -> tuple[list, list]:
    """Every trait combination of the op's allow-lists (legality is checked by the pool)."""
    if op.get("tile_space", "production") == "generated":
        tiles, rejected = _resolve_generated(op, arch)
    else:
        tiles, rejected = [dict(t) for t in op["tiles"]], []
    out = []
    for ndim in op["ndims"]:
        for t in tiles:
            for pipeline, scheduler, dsb, si in itertools.product(op["pipelines"], op["schedulers"], op["dsb"], op["si"]):
                out.append(ConvKernel(
                    direction=op["direction"], dtype=op["dtype"], ndim=ndim,
                    tile_m=t["tile_m"], tile_n=t["tile_n"], tile_k=t["tile_k"],
                    wave_m=t["wave"][0], wave_n=t["wave"][1], wave_k=t["wave"][2],
                    warp_tile_m=t["warp_tile"][0], warp_tile_n=t["warp_tile"][1], warp_tile_k=t["warp_tile"][2],
                    pipeline=pipeline, scheduler=scheduler, dsb=dsb, si=si))
    return out, rejected
