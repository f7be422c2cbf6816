"""Problems as points: standardized log problem space, shape clusters (k-means clusters in it),
and new problems drawn from the space a set spans. Shared by training (leave-cluster-out CV,
distillation) and active sweeps (distances, strata)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


def log_space(problems: Sequence[Any]) -> np.ndarray:
    """Problems as points: log2(1 + field) of their numeric fields, standardized per field
    (fields without spread are dropped)."""
    rows = [[float(v) for v in p.key() if isinstance(v, (int, float)) and not isinstance(v, bool)] for p in problems]
    Z = np.log2(np.maximum(np.asarray(rows, dtype=float).reshape(len(problems), -1), 0.0) + 1.0)
    Z = Z[:, Z.std(axis=0) > 0] if len(Z) else Z
    return (Z - Z.mean(axis=0)) / Z.std(axis=0) if Z.size else np.zeros((len(problems), 0))


def cluster_shapes(problems: Sequence[Any], clusters: int, seed: int) -> np.ndarray:
    """Cluster labels of problems in log problem space (k-means on standardized log2 of the
    numeric fields): folds made of whole clusters test on shapes unlike the training ones."""
    from sklearn.cluster import KMeans

    Z = log_space(problems)
    if not Z.shape[1]:
        return np.zeros(len(problems), dtype=np.int64)
    k = max(1, min(clusters, len(problems)))
    return KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(Z).astype(np.int64)


def span_problems(problems: Sequence[Any], count: int, seed: int, build: Callable[[dict], Any],
                  blocks: Sequence[Sequence[str]] = ()) -> list:
    """Up to ``count`` new valid problems from the space ``problems`` span: each takes every field
    (or block of fields that belong together, such as a stride's two values) from a randomly
    drawn problem of the set, so values stay ones the data has and new combinations appear.
    ``build`` makes a problem from a dict (raising on an invalid one, which is skipped); problems
    of the set itself are not returned."""
    rng = np.random.default_rng(seed)
    rows = [p.to_dict() for p in problems]
    if not rows or count <= 0:
        return []
    blocked = {f for b in blocks for f in b}
    groups = [tuple(b) for b in blocks if set(b) <= set(rows[0])] + [(f,) for f in rows[0] if f not in blocked]
    seen = {tuple(sorted(r.items())) for r in rows}
    out: list = []
    for _ in range(count * 20):  # invalid draws (a group count that does not divide C, ...) are skipped
        if len(out) >= count:
            break
        draw = {}
        for g in groups:
            src = rows[int(rng.integers(len(rows)))]
            draw.update({f: src[f] for f in g})
        key = tuple(sorted(draw.items()))
        if key in seen:
            continue
        try:
            problem = build(draw)
        except ValueError:  # ProblemError and the families' own refusals
            continue
        seen.add(key)
        out.append(problem)
    return out


SIZE_REGIMES = ("flops", "output_size")  # what regime_groups can hold out


def regime_groups(problems: Sequence[Any], regime: str, parts: int = 3) -> np.ndarray:
    """Per problem, its part (0 .. parts-1) of the sorted values of a size: ``flops`` (the work) or
    ``output_size`` (the output's spatial extent, Do x Ho x Wo; GEMM: M x N). Folds made of whole
    parts test on sizes the training data does not reach (the largest, the smallest)."""
    if regime == "flops":
        values = [float(p.flops) for p in problems]
    elif regime == "output_size":
        values = [float(getattr(p, "Do", 1) * p.Ho * p.Wo) if hasattr(p, "Ho") else float(p.M * p.N)
                  for p in problems]
    else:
        raise ValueError(f"size regime {regime!r}: allowed values are {', '.join(SIZE_REGIMES)}")
    logs = np.log(np.maximum(np.asarray(values, dtype=float), 1.0))
    cuts = np.quantile(logs, np.arange(1, parts) / parts) if len(logs) else []
    return np.searchsorted(cuts, logs, side="right").astype(np.int64)
