#!/usr/bin/env python
"""The shipped bundles as a markdown table, from their own records (cv_metrics.json,
train_manifest.json, the files' sizes): what docs/miopen.md shows.

    python tools/bundle_table.py [--bundles bundles] [--family miopen] [--baseline DIR]

``--baseline DIR`` (the bundles of an earlier commit: ``git archive REV bundles | tar -x -C DIR/..``)
prints instead each bundle beside the baseline's of the same name: trees, model size, grouped-CV
mean efficiency and top-1 (the same folds: same data, same train.folds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPUS = {"gfx942": "MI300X", "gfx90a": "MI210/250"}


def rows(folder: Path, family: str) -> list[str]:
    """One markdown row per bundle of the family."""
    out = []
    order = {"fwd": 0, "bwd_data": 1, "bwd_weight": 2, "fp32": 0, "fp16": 1, "bf16": 2}
    found = []
    for b in sorted(folder.iterdir()):
        spec = json.loads((b / "feature_spec.json").read_text())
        if spec["op"]["family"] != family:
            continue
        cv = json.loads((b / "cv_metrics.json").read_text())
        manifest = json.loads((b / "train_manifest.json").read_text())
        arch, direction, dtype = spec["arch"]["name"], spec["op"]["direction"], spec["op"]["dtype"]
        chosen, g = cv["chosen"], cv["grouped_cv_seed_mean"]
        compared = ", ".join(c["candidate"] for c in cv["candidates"])
        recipe = f"{chosen.get('num_leaves', '?')} / {chosen.get('learning_rate', '?')} / {chosen['trees']}"
        if chosen.get("student_trees"):  # a distilled student ships: its trees, then its teacher's recipe
            recipe = f"student {student_leaves(chosen, manifest)} x {chosen['student_trees']} of {recipe}"
        size = sum(f.stat().st_size for f in b.iterdir()) / 2**20
        found.append(((arch != "gfx942", order[direction], order[dtype]),
                      f"| {GPUS.get(arch, arch)} | {direction} | {dtype} | {manifest['problems']:,} | "
                      f"{recipe} (of: {compared}) | "
                      f"{100 * g['mean']:.2f} / {100 * g['p10']:.2f} / {100 * g['top1']:.1f}% | "
                      f"{manifest.get('remembered_problems', 0):,} | {manifest['train_seconds']:.0f} s | {size:.1f} MB |"))
    out += [r for _, r in sorted(found)]
    return out


def student_leaves(chosen: dict, manifest: dict) -> object:
    """A distilled student's leaves: its CV record's, else its training config's (model.distill_leaves)."""
    return chosen.get("student_leaves") or manifest["config"]["model"].get("distill_leaves", "?")


def against(folder: Path, baseline: Path, family: str) -> list[str]:
    """One markdown row per bundle of the family that the baseline folder has too: old -> new."""
    sys.path.insert(0, str(ROOT))
    from ckheur.files import read_compressed
    from ckheur.learn.bundle import model_file

    def facts(b: Path) -> tuple:
        cv = json.loads((b / "cv_metrics.json").read_text())
        model = model_file(b)  # model.txt.xz, or model.txt.gz in a bundle of an earlier version
        text = read_compressed(model).decode()
        g, chosen = cv["grouped_cv_seed_mean"], cv["chosen"]
        manifest = json.loads((b / "train_manifest.json").read_text())
        budget = manifest["config"]["train"].get("budget_loss_pts", 0)
        leaves = student_leaves(chosen, manifest) if chosen.get("student_trees") else chosen.get("num_leaves", "?")
        return (text.count("\nTree="), leaves, model.stat().st_size / 2**20, 100 * g["mean"], 100 * g["top1"], budget)

    order = {"fwd": 0, "bwd_data": 1, "bwd_weight": 2, "fp32": 0, "fp16": 1, "bf16": 2}
    found = []
    for b in sorted(folder.iterdir()):
        spec = json.loads((b / "feature_spec.json").read_text())
        if spec["op"]["family"] != family or not (baseline / b.name).is_dir():
            continue
        arch, direction, dtype = spec["arch"]["name"], spec["op"]["direction"], spec["op"]["dtype"]
        (t0, l0, s0, m0, k0, _), (t1, l1, s1, m1, k1, budget) = facts(baseline / b.name), facts(b)
        found.append(((arch != "gfx942", order[direction], order[dtype]),
                      f"| {GPUS.get(arch, arch)} | {direction} | {dtype} | {budget or 'none'} | "
                      f"{t0} x {l0} -> {t1} x {l1} | "
                      f"{s0:.2f} -> {s1:.2f} MB | {m0:.2f} -> {m1:.2f} ({m1 - m0:+.2f}) | {k0:.1f} -> {k1:.1f}% |"))
    return [r for _, r in sorted(found)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=ROOT / "models")
    ap.add_argument("--family", default="miopen")
    ap.add_argument("--baseline", type=Path, default=None, help="bundles to set beside these (old -> new)")
    args = ap.parse_args()
    if args.baseline is not None:
        print("| GPU | direction | dtype | budget (points) | trees x leaves | model file "
              "| grouped 3-fold CV mean efficiency | top-1 |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        print("\n".join(against(args.bundles, args.baseline, args.family)))
        return
    print("| GPU | direction | dtype | problems | leaves / learning rate / trees (compared) "
          "| grouped 3-fold CV: mean / P10 / top-1 | remembered | train | size |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows(args.bundles, args.family)))


if __name__ == "__main__":
    main()
