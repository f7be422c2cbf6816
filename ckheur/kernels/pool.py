"""Legal kernel pool: the cartesian product of an op's trait allow-lists, filtered by the
architecture's code-generation rules. Every rejected combination keeps its reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ckheur.kernels.base import KernelError, tile_problems
from ckheur.kernels.filter import compile_filter


@dataclass
class Pool:
    """Legal kernels (in allow-list order) and the rejected combinations with reasons."""

    kernels: list
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (description, reason)
    filtered_out: int = 0

    def names(self) -> list[str]:
        return [k.name for k in self.kernels]

    def by_group(self) -> dict[Any, list]:
        """Kernels by the problem group they serve (conv: spatial dims; gemm: layout)."""
        out: dict[Any, list] = {}
        for k in self.kernels:
            out.setdefault(k.group, []).append(k)
        return out


def _lds_budget(arch: Mapping[str, Any], pipeline: str) -> int:
    cg = arch["codegen"]
    frac = cg.get("lds_budget_fraction", {}).get(pipeline, cg.get("default_lds_budget_fraction", 1.0))
    return int(arch["lds_bytes"] * frac)


def enumerate_pool(op: Mapping[str, Any], arch: Mapping[str, Any], filter_expr: str | None = None) -> Pool:
    """All legal kernels of an op on an arch (``op``/``arch`` are plain config dicts)."""
    from ckheur.ops import get_family

    dtype = op["dtype"]
    if dtype not in arch["codegen"]["warp_tiles"]:
        raise KernelError(f"op.dtype={dtype}: no warp tiles for it on {arch['name']}; "
                          f"allowed: {', '.join(arch['codegen']['warp_tiles'])}")
    family = get_family(op["family"])
    cands, rejected = family.kernels.candidates(op, arch)
    intrawave_only = set(arch["codegen"].get("intrawave_only_pipelines", []))
    unsupported = [dict(u) for u in op.get("unsupported") or []]
    kernels = []
    tile_why: dict[tuple, list[str]] = {}
    for k in cands:
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
        if why:
            rejected.append((k.name, "; ".join(why)))
        else:
            kernels.append(k)
    pool = Pool(kernels=kernels, rejected=rejected)
    if filter_expr and kernels:
        keep = compile_filter(filter_expr, kernels[0].traits().keys())
        before = len(pool.kernels)
        pool.kernels = [k for k in pool.kernels if keep(k.traits())]
        pool.filtered_out = before - len(pool.kernels)
    return pool
