"""Problems as points: standardized log problem space, and shape clusters (k-means clusters
in it). Shared by training (leave-cluster-out CV) and active sweeps (distances, strata)."""

from __future__ import annotations

from typing import Any, Sequence

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
