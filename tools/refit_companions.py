#!/usr/bin/env python
"""Refit the TFLOPS companions of bundles with fewer leaves (``model.companion_leaves``), in place.

    python tools/refit_companions.py [FOLDER ...] [--leaves 15]

Default: every MIOpen bundle of this checkout's ``models/`` whose companion has more leaves. Each
is refitted on the datasets its train_manifest.json lists, at the paths written there (import the
find-dbs first: ``python run.py stage=import import.path=<find-db>``); the ranking model, kernels
and remembered answers are left as they are (rankings unchanged), and the manifest records the
refit (``companion_refit``: datasets by sha256, the median |log TFLOPS error| before and after).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def companion_leaves(folder: Path) -> int:
    """The most leaves of a tree of the folder's companion."""
    from ckheur.learn.bundle import TFLOPS_MODEL, bundle_file
    from ckheur.files import read_compressed

    text = read_compressed(bundle_file(folder, TFLOPS_MODEL)).decode()
    return max(map(int, re.findall(r"^num_leaves=(\d+)$", text, re.M)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--leaves", type=int, default=15)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from ckheur.learn.trainer import refit_companion

    folders = args.folders or sorted(p for p in (ROOT / "models").glob("miopen_*") if p.is_dir())
    for folder in folders:
        if companion_leaves(folder) <= args.leaves:
            print(f"{folder.name}: companion already has at most {args.leaves} leaves")
            continue
        manifest = json.loads((folder / "train_manifest.json").read_text())
        refit_companion(folder, [d["path"] for d in manifest["datasets"]], leaves=args.leaves)


if __name__ == "__main__":
    main()
