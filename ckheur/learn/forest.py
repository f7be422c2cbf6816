"""LightGBM models as arrays for the C export: each tree's leaves numbered left to right and each
split with the masks of its subtrees' leaves (QuickScorer), and LightGBM's own decision rule
at a node, so Python can check what C will decide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ckheur.errors import UserError

# LightGBM objectives whose prediction is the raw score (no link function to reproduce).
RAW_OBJECTIVES = ("regression", "regression_l1", "huber", "fair", "quantile", "mape", "lambdarank",
                  "rank_xendcg", "custom", "none")
ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold
MAX_LEAVES = 64  # leaves of a tree the C evaluator handles (one 64-bit mask)
MAX_TREES = 65535  # trees a C forest numbers (uint16_t tree indices)


class ExportError(UserError):
    """A model cannot be exported; the message says why."""


def goes_left(values: np.ndarray, node: Mapping[str, Any]) -> np.ndarray:
    """LightGBM's decision for float32 feature values at a node of ``Booster.dump_model()``."""
    x = np.asarray(values, dtype=np.float32).astype(np.float64)
    x = np.where(np.abs(x) <= ZERO, 0.0, x)  # LightGBM reads these as zero
    if node["decision_type"] == "==":
        cats = {int(c) for c in str(node["threshold"]).split("||")}
        out = np.zeros(len(x), dtype=bool)
        for i, v in enumerate(x):
            if np.isnan(v) or v >= 2.0**31 or v <= -(2.0**31) - 1:
                continue
            iv = int(v)  # truncation toward zero, as a C cast
            out[i] = iv >= 0 and iv in cats
        return out
    miss = node["missing_type"]
    if miss != "NaN":
        x = np.where(np.isnan(x), 0.0, x)
    with np.errstate(invalid="ignore"):
        missing = ((miss == "Zero") & (np.abs(x) <= ZERO)) | ((miss == "NaN") & np.isnan(x))
        return np.where(missing, bool(node["default_left"]), x <= float(node["threshold"]))


@dataclass
class Forest:
    """A LightGBM model as QuickScorer arrays (one per feature class)."""

    ntree: int
    leaves: list[list[float]]
    nodes: list[tuple[int, dict, int, int]]  # (tree, dump node, masks of the left and right subtrees' leaves)
    max_leaves: int


def read_forest(booster: Any) -> Forest:
    """The trees of a booster, leaves numbered left to right, with each split's left-leaf mask."""
    d = booster.dump_model()
    if d.get("num_class", 1) != 1 or d.get("num_tree_per_iteration", 1) != 1:
        raise ExportError("multiclass models cannot be exported (one score per kernel is needed)")
    objective = str(d.get("objective", "none")).split()[0]
    if objective not in RAW_OBJECTIVES:
        raise ExportError(f"LightGBM objective {objective!r} transforms its raw score; exportable objectives: "
                          f"{', '.join(RAW_OBJECTIVES)}")
    if d.get("average_output"):
        raise ExportError("random-forest models (average_output) cannot be exported")
    if len(d["tree_info"]) > MAX_TREES:
        raise ExportError(f"the model has {len(d['tree_info'])} trees; the C export numbers trees in 16 bits, at "
                          f"most {MAX_TREES} (train with fewer: model.max_trees, or distil it: model.distill_trees)")
    leaves: list[list[float]] = []
    nodes: list[tuple[int, dict, int, int]] = []
    for t, info in enumerate(d["tree_info"]):
        if info.get("is_linear"):
            raise ExportError("linear trees cannot be exported")
        if int(info.get("num_leaves", 1)) > MAX_LEAVES:
            raise ExportError(f"tree {t} has {info['num_leaves']} leaves; the C export evaluates trees of at most "
                              f"{MAX_LEAVES} leaves (train with model.num_leaves <= {MAX_LEAVES})")
        vals: list[float] = []

        def walk(n: Mapping[str, Any]) -> int:
            """Visit a subtree; return the bit mask of its leaves."""
            if "leaf_value" in n or "split_feature" not in n:
                vals.append(float(n.get("leaf_value", 0.0)))
                return 1 << (len(vals) - 1)
            if n.get("leaf_coeff"):
                raise ExportError("linear trees cannot be exported")
            i = len(nodes)
            nodes.append((t, dict(n), 0, 0))
            left = walk(n["left_child"])
            right = walk(n["right_child"])
            nodes[i] = (t, nodes[i][1], left, right)
            return left | right

        walk(info["tree_structure"])
        if len(vals) > MAX_LEAVES:
            raise ExportError(f"tree {t} has {len(vals)} leaves; the C export evaluates trees of at most "
                              f"{MAX_LEAVES} leaves (train with model.num_leaves <= {MAX_LEAVES})")
        leaves.append(vals)
    return Forest(len(leaves), leaves, nodes, max((len(v) for v in leaves), default=1))
