"""What every kernel family shares: the error type, element sizes, and the architecture's
code-generation rules for a block tile (wave layout x MFMA warp tile)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ckheur.errors import UserError

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "fp32": 4}
# No predicted latency is below this (a kernel launch's floor): the fastest real timing in the
# shipped data is 0.68 us (MI300X find-db), so the floor never undercuts a measurement.
LATENCY_FLOOR_MS = 5e-4


class KernelError(UserError):
    """A kernel name or trait is invalid; the message names it and the allowed values."""


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


def _lds_budget(arch: Mapping[str, Any], pipeline: str) -> int:
    cg = arch["codegen"]
    frac = cg.get("lds_budget_fraction", {}).get(pipeline, cg.get("default_lds_budget_fraction", 1.0))
    return int(arch["lds_bytes"] * frac)


def all_support_arrays(kernels: Sequence[Any]) -> dict:
    """Support data of a family whose every kernel is a candidate for every valid problem."""
    return {"n": len(kernels)}


def all_support_mask(problem: Any, kernels: Mapping, op: Mapping) -> tuple[Any, str]:
    """Every kernel is a candidate (see :func:`all_support_arrays`)."""
    import numpy as np

    return np.ones(kernels["n"], dtype=bool), ""


def tile_rejections(kernels: Sequence[Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> list[list[str]]:
    """Why each tile-based kernel (conv, GEMM) is illegal on the arch ([] if legal): the dtype's
    MFMA tiles, tile divisibility, the pipeline's LDS budget, intrawave-only compute pipelines,
    and trait combinations the op lists as unsupported."""
    dtype = op["dtype"]
    if not arch["codegen"]["warp_tiles"]:  # e.g. gfx908: MIOpen ops serve it, CK Tile kernels do not
        raise KernelError(f"arch={arch['name']}: no CK Tile code generation for it (its codegen declares no MFMA "
                          f"warp tiles); CK ops (grouped_conv, gemm) need an arch with CK Tile kernels; on "
                          f"{arch['name']} use op=miopen/<direction>")
    if dtype not in arch["codegen"]["warp_tiles"]:
        raise KernelError(f"op.dtype={dtype}: no warp tiles for it on {arch['name']}; "
                          f"allowed: {', '.join(arch['codegen']['warp_tiles'])}")
    intrawave_only = set(arch["codegen"].get("intrawave_only_pipelines", []))
    unsupported = [dict(u) for u in op.get("unsupported") or []]
    tile_why: dict[tuple, list[str]] = {}
    out = []
    for k in kernels:
        tkey = (k.tile_m, k.tile_n, k.tile_k, k.wave_m, k.wave_n, k.wave_k, k.warp_tile_m, k.warp_tile_n, k.warp_tile_k)
        if tkey not in tile_why:
            tile = {"tile_m": k.tile_m, "tile_n": k.tile_n, "tile_k": k.tile_k}
            tile_why[tkey] = tile_problems(tile, tkey[3:6], tkey[6:9], arch, dtype)
        why = list(tile_why[tkey])
        budget = _lds_budget(arch, k.pipeline)
        if k.lds_bytes > budget:
            why.append(f"LDS {k.lds_bytes} B > {k.pipeline} budget {budget} B on {arch['name']}")
        if k.scheduler != "intrawave" and k.pipeline in intrawave_only:
            why.append(f"{k.pipeline} is a compute pipeline: intrawave scheduler only")
        traits = k.traits()
        for u in unsupported:
            if all(traits.get(key) == val for key, val in u.items()):
                why.append(f"unsupported combination {u}")
        out.append(why)
    return out
