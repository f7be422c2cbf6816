#!/usr/bin/env python
"""Give shipped bundles a screen (``ckheur.selection.screening``), chosen on their own training
problems and on generated ones, in place; or take it away (``--off``).

    python tools/set_screen.py models/miopen_fwd_fp32_gfx90a [...] [--min-agreement 0.999]

The datasets the bundle's train_manifest.json lists are read at the paths written there (import
the find-dbs first: ``python run.py stage=import import.path=<find-db>``). The screen chosen is the
cheapest that keeps the whole model's top-1 on at least ``--min-agreement`` of the training
problems and ``--min-agreement-generated`` of the generated ones (shapes unlike the training data,
where a screen errs more often; where it does, its pick is one of the model's next best). The
model is not touched; feature_spec.json gets the screen and the manifest records
the choice (``screen_set``: the screen, its agreement and cost per set, the datasets by sha256).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--min-agreement", type=float, default=0.999)
    ap.add_argument("--min-agreement-generated", type=float, default=0.995)
    ap.add_argument("--problems", type=int, default=3000, help="training problems sampled per bundle")
    ap.add_argument("--generated", type=int, default=3000, help="generated problems per bundle")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--off", action="store_true", help="remove the screen")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from ckheur.data.dataset import read_dataset
    from ckheur.learn.bundle import load_bundle, write_json
    from ckheur.parts import sha256_of
    from ckheur.selection.screening import choose_screen
    from ckheur.selection.selector import Selector

    for folder in args.folders:
        b = load_bundle(folder)
        spec = {k: v for k, v in b.spec.items() if k != "screen"}
        manifest = {k: v for k, v in b.manifest.items() if k != "screen_set"}
        if args.off:
            write_json(b.path / "feature_spec.json", spec)
            write_json(b.path / "train_manifest.json", manifest)
            load_bundle(folder)
            print(f"{b.path.name}: no screen")
            continue
        paths = [Path(d["path"]) for d in b.manifest["datasets"]]
        df = read_dataset(paths)
        op = b.spec["op"]
        df = df[(df["direction"] == op["direction"]) & (df["dtype"] == op["dtype"])
                & (df["arch"] == b.spec["arch"]["name"])]
        fields = list(b.family.problems.FIELDS)
        keys = df[fields].drop_duplicates()
        rng = np.random.default_rng(args.seed)
        if len(keys) > args.problems:
            keys = keys.iloc[np.sort(rng.choice(len(keys), args.problems, replace=False))]
        training = [b.family.problems.problem_from_dict(r) for r in keys.to_dict("records")]
        generated = b.family.problems.generate(args.seed, args.generated)
        sel = Selector.load(folder, screen=False)
        bars = {"training": args.min_agreement, "generated": args.min_agreement_generated}
        choice = choose_screen(sel, {"training": training, "generated": generated}, bars)
        if choice is None:
            print(f"{b.path.name}: no screen keeps the top-1 on {bars}; left as is")
            continue
        figures = {name: {"problems": choice.problems[name], "agreement": round(r.agreement, 5),
                          "cost": round(r.cost, 4)} for name, r in choice.rows.items()}
        write_json(b.path / "feature_spec.json", {**spec, "screen": choice.spec()})
        write_json(b.path / "train_manifest.json", {**manifest, "screen_set": {
            **choice.spec(), "min_agreement": bars, "sets": figures,
            "datasets": [{"path": str(p), "sha256": sha256_of(p)} for p in paths]}})
        load_bundle(folder)  # still a sound bundle
        print(f"{b.path.name}: screen {choice.trees} trees, top {choice.top} of {b.booster.num_trees()} trees; "
              + "; ".join(f"{n}: {f['problems']} problems, top-1 kept on {f['agreement']:.2%}, "
                          f"{f['cost']:.0%} of the row x tree evaluations" for n, f in figures.items()))


if __name__ == "__main__":
    main()
