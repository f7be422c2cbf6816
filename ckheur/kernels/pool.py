"""Legal kernel pool: the cartesian product of an op's trait allow-lists, filtered by the
architecture's code-generation rules. Every rejected combination keeps its reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

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


def enumerate_pool(op: Mapping[str, Any], arch: Mapping[str, Any], filter_expr: str | None = None) -> Pool:
    """All legal kernels of an op on an arch (``op``/``arch`` are plain config dicts)."""
    from ckheur.families import get_family

    family = get_family(op["family"])
    cands, rejected = family.kernels.candidates(op, arch)
    kernels = []
    for k, why in zip(cands, family.kernels.rejections(cands, op, arch)):
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
