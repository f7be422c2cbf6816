#!/usr/bin/env python
"""Record, in shipped bundles of one GPU trained before bundles named them, the devices their rows
were measured on (``trained_devices`` in feature_spec.json), in place.

    python tools/record_trained_devices.py [FOLDER ...] [--data DIR]

Default: every bundle of this checkout's ``models/`` without ``trained_devices`` and not trained
across GPUs. The datasets its train_manifest.json lists are read at the paths written there, or
under ``--data`` (the folder those paths start in, ``data/`` of ``stage=import``; import the
find-dbs first: ``python run.py stage=import import.path=<find-db>``). The devices are read from
their rows of the bundle's arch, direction and dtype as ``stage=train`` reads them now
(``ckheur.families.hardware.devices_of``: an import's rows are the device its find-db file name
says, gfx90a68 is MI210). The model is not touched; the manifest records the change
(``trained_devices_set``: the datasets by sha256). A bundle that names them, or whose datasets are
not there, is left as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--data", type=Path, default=None, help="the folder the manifest's data/... paths are under")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from ckheur.data.dataset import read_dataset
    from ckheur.families.hardware import devices_of
    from ckheur.learn.bundle import load_bundle, write_json
    from ckheur.parts import sha256_of

    for folder in args.folders or sorted(p for p in (ROOT / "models").iterdir() if p.is_dir()):
        b = load_bundle(folder)
        if b.spec.get("trained_devices") or b.spec.get("trained_archs"):
            print(f"{b.path.name}: names its devices already ({', '.join(b.spec.get('trained_devices') or [])})")
            continue
        written = [Path(d["path"]) for d in b.manifest["datasets"]]
        paths = [args.data / p.relative_to("data") if args.data and p.parts[:1] == ("data",) else p for p in written]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            print(f"{b.path.name}: left as it is: its datasets {', '.join(missing)} are not there (import them, or "
                  "give --data)")
            continue
        df = read_dataset(paths, dedupe=False, columns=["arch", "direction", "dtype", "host", "device_cus"])
        op, arch = b.spec["op"], b.spec["arch"]
        rows = df[(df.arch == arch["name"]) & (df.direction == op["direction"]) & (df.dtype == op["dtype"])]
        devices = devices_of(rows, arch)
        write_json(b.path / "feature_spec.json", {**b.spec, "trained_devices": devices})
        write_json(b.path / "train_manifest.json", {**b.manifest, "trained_devices_set": {
            "datasets": [{"path": str(w), "sha256": sha256_of(p)} for w, p in zip(written, paths)]}})
        load_bundle(folder)  # still a sound bundle
        print(f"{b.path.name}: trained on {', '.join(devices)} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
