"""Legal kernel pool: the cartesian product of an op's trait allow-lists, filtered by the
architecture's code-generation rules. Every rejected combination keeps its reason."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ckheur.kernels.conv import ConvKernel, KernelError
from ckheur.kernels.filter import compile_filter


@dataclass
class Pool:
    """Legal kernels (in allow-list order) and the rejected combinations with reasons."""

    kernels: list[ConvKernel]
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (description, reason)
    filtered_out: int = 0

    def names(self) -> list[str]:
        return [k.name for k in self.kernels]

    def by_ndim(self, ndim: int) -> list[ConvKernel]:
        return [k for k in self.kernels if k.ndim == ndim]


def _lds_budget(arch: Mapping[str, Any], pipeline: str) -> int:
    cg = arch["codegen"]
    frac = cg.get("lds_budget_fraction", {}).get(pipeline, cg.get("default_lds_budget_fraction", 1.0))
    return int(arch["lds_bytes"] * frac)


def tile_problems(tile: Mapping[str, Any], wave: Sequence[int], warp: Sequence[int],
                  arch: Mapping[str, Any], dtype: str) -> list[str]:
    """Reasons a tile with this wave layout and warp tile is illegal on the arch ([] if legal)."""
    cg = arch["codegen"]
    why = []
    if [list(w) for w in cg["wave_layouts"]].count(list(wave)) == 0:
        why.append(f"wave layout {list(wave)} not allowed on {arch['name']}")
    allowed_warp = [list(w) for w in cg["warp_tiles"].get(dtype, [])]
    if list(warp) not in allowed_warp:
        why.append(f"warp tile {list(warp)} not allowed for {dtype} on {arch['name']}")
    for dim, w, t in zip("mnk", wave, warp):
        size = tile[f"tile_{dim}"]
        if w * t == 0 or size % (w * t):
            why.append(f"tile_{dim}={size} not divisible by wave_{dim} x warp_tile_{dim} = {w}x{t}")
    waves = wave[0] * wave[1] * wave[2]
    if waves > cg.get("max_waves_per_block", 16):
        why.append(f"{waves} waves per block > max {cg.get('max_waves_per_block', 16)}")
    return why


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


def enumerate_pool(op: Mapping[str, Any], arch: Mapping[str, Any], filter_expr: str | None = None) -> Pool:
    """All legal kernels of an op on an arch (``op``/``arch`` are plain config dicts)."""
    dtype = op["dtype"]
    if dtype not in arch["codegen"]["warp_tiles"]:
        raise KernelError(f"op.dtype={dtype}: no warp tiles for it on {arch['name']}; "
                          f"allowed: {', '.join(arch['codegen']['warp_tiles'])}")
    if op.get("tile_space", "production") == "generated":
        tiles, rejected = _resolve_generated(op, arch)
    else:
        tiles, rejected = [dict(t) for t in op["tiles"]], []
    intrawave_only = set(arch["codegen"].get("intrawave_only_pipelines", []))
    unsupported = [dict(u) for u in op.get("unsupported") or []]
    kernels: list[ConvKernel] = []
    for ndim in op["ndims"]:
        for t in tiles:
            tile_why = tile_problems(t, t["wave"], t["warp_tile"], arch, dtype)
            for pipeline, scheduler, dsb, si in itertools.product(
                    op["pipelines"], op["schedulers"], op["dsb"], op["si"]):
                k = ConvKernel(
                    direction=op["direction"], dtype=dtype, ndim=ndim,
                    tile_m=t["tile_m"], tile_n=t["tile_n"], tile_k=t["tile_k"],
                    wave_m=t["wave"][0], wave_n=t["wave"][1], wave_k=t["wave"][2],
                    warp_tile_m=t["warp_tile"][0], warp_tile_n=t["warp_tile"][1],
                    warp_tile_k=t["warp_tile"][2],
                    pipeline=pipeline, scheduler=scheduler, dsb=dsb, si=si)
                why = list(tile_why)
                budget = _lds_budget(arch, pipeline)
                if k.lds_bytes > budget:
                    why.append(f"LDS {k.lds_bytes} B > {pipeline} budget {budget} B on {arch['name']}")
                if scheduler != "intrawave" and pipeline in intrawave_only:
                    why.append(f"{pipeline} is a compute pipeline: intrawave scheduler only")
                traits = k.traits()
                for u in unsupported:
                    if all(traits.get(key) == val for key, val in u.items()):
                        why.append(f"unsupported combination {u}")
                if why:
                    rejected.append((k.name, "; ".join(why)))
                else:
                    kernels.append(k)
    pool = Pool(kernels=kernels, rejected=rejected)
    if filter_expr:
        keep = compile_filter(filter_expr, ConvKernel.__dataclass_fields__.keys() | {"name", "num_waves", "lds_bytes"})
        before = len(pool.kernels)
        pool.kernels = [k for k in pool.kernels if keep(k.traits())]
        pool.filtered_out = before - len(pool.kernels)
    return pool
