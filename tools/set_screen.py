#!/usr/bin/env python
"""Give bundles a screen (``ckheur.selection.screening``), chosen on their own training problems
and on generated ones, in place; or take it away (``--off``).

    python tools/set_screen.py models/miopen_fwd_fp32_gfx90a [...] [--min-agreement 0.999]

The datasets the bundle's train_manifest.json lists are read at the paths written there (import
the find-dbs first: ``python run.py stage=import import.path=<find-db>``). The screen chosen is the
cheapest that keeps the whole model's top-1 on at least ``--min-agreement`` of the training
problems and ``--min-agreement-generated`` of the generated ones (``screening.BARS``); ``stage=train
train.screen=true`` does the same for the bundle it trains. The model is not touched;
feature_spec.json gets the screen and the manifest records the choice (``screen_set``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from ckheur.errors import UserError
    from ckheur.selection.screening import BARS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--min-agreement", type=float, default=BARS["training"])
    ap.add_argument("--min-agreement-generated", type=float, default=BARS["generated"])
    ap.add_argument("--problems", type=int, default=3000, help="training problems sampled per bundle")
    ap.add_argument("--generated", type=int, default=3000, help="generated problems per bundle")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--off", action="store_true", help="remove the screen")
    args = ap.parse_args()
    from ckheur.selection.screening import remove_screen, screen_bundle

    bars = {"training": args.min_agreement, "generated": args.min_agreement_generated}
    for option, bar in (("--min-agreement", args.min_agreement),
                        ("--min-agreement-generated", args.min_agreement_generated)):
        if not 0 < bar <= 1:
            print(f"error: {option}={bar}: a share of problems, in (0, 1]", file=sys.stderr)
            return 2
    try:
        for folder in args.folders:
            if args.off:
                remove_screen(folder)
                print(f"{Path(folder).name}: no screen")
                continue
            choice = screen_bundle(folder, problems=args.problems, generated=args.generated, seed=args.seed,
                                   bars=bars)
            print(f"{Path(folder).name}: " + (choice.describe() if choice else f"no screen keeps the top-1 on {bars}"))
    except (UserError, ValueError) as e:  # a folder that is no bundle, its data missing, a bar outside (0, 1]
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
