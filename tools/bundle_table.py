#!/usr/bin/env python
"""The shipped bundles as a markdown table, from their own records (cv_metrics.json,
train_manifest.json, the files' sizes): what docs/miopen.md shows.

    python tools/bundle_table.py [--bundles bundles] [--family miopen]
"""

from __future__ import annotations

import argparse
import json
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
        size = sum(f.stat().st_size for f in b.iterdir()) / 2**20
        found.append(((arch != "gfx942", order[direction], order[dtype]),
                      f"| {GPUS.get(arch, arch)} | {direction} | {dtype} | {manifest['problems']:,} | "
                      f"{chosen.get('num_leaves', '?')} / {chosen.get('learning_rate', '?')} / {chosen['trees']} "
                      f"(of: {compared}) | {100 * g['mean']:.2f} / {100 * g['p10']:.2f} / {100 * g['top1']:.1f}% | "
                      f"{manifest.get('remembered_problems', 0):,} | {manifest['train_seconds']:.0f} s | {size:.1f} MB |"))
    out += [r for _, r in sorted(found)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=ROOT / "models")
    ap.add_argument("--family", default="miopen")
    args = ap.parse_args()
    print("| GPU | direction | dtype | problems | leaves / learning rate / trees (compared) "
          "| grouped 3-fold CV: mean / P10 / top-1 | remembered | train | size |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows(args.bundles, args.family)))


if __name__ == "__main__":
    main()
