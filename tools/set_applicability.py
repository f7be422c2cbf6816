#!/usr/bin/env python
"""Set which solvers shipped MIOpen bundles rank (``op.applicability``), learning ``op.listed``
from each bundle's own training data, in place.

    python tools/set_applicability.py [FOLDER ...] [--mode both]

Default: every MIOpen bundle of this checkout's ``models/``. The datasets its train_manifest.json
lists are read at the paths written there (import the find-dbs first: ``python run.py
stage=import import.path=<find-db>``), and ``op.listed`` is learned from them as ``stage=train
op.applicability=both`` learns it (``ckheur.families.miopen.solvers.learned_op``). The model is
not touched; feature_spec.json's op_config gets the mode and the table, and the manifest records
the change (``op_config_set``: the mode and the datasets by sha256).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--mode", default="both", choices=["none", "rules", "listed", "both"])
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from ckheur.data.dataset import read_dataset
    from ckheur.families.miopen.solvers import learned_op
    from ckheur.learn.bundle import load_bundle, write_json
    from ckheur.parts import sha256_of

    for folder in args.folders or sorted(p for p in (ROOT / "models").glob("miopen_*") if p.is_dir()):
        b = load_bundle(folder)
        paths = [Path(d["path"]) for d in b.manifest["datasets"]]
        op = {k: v for k, v in dict(b.spec.get("op_config") or b.spec["op"]).items() if k != "listed"}
        op = learned_op(read_dataset(paths), {**op, "applicability": args.mode})
        write_json(b.path / "feature_spec.json", {**b.spec, "op_config": op})
        write_json(b.path / "train_manifest.json", {**b.manifest, "op_config_set": {
            "applicability": args.mode, "datasets": [{"path": str(p), "sha256": sha256_of(p)} for p in paths]}})
        load_bundle(folder)  # still a sound bundle
        print(f"{b.path.name}: op.applicability={args.mode}, op.listed of {len(op.get('listed', {}))} solvers")


if __name__ == "__main__":
    main()
