#!/usr/bin/env python
"""Screens against their whole models, on measured problems: each screened bundle ranks the
problems of its own find-db (in-sample) and of the other GPU's (the keys its file lists too, and
the others; there it ranks the solvers of that GPU's file), with its screen and without
(``Selector.load(..., screen=False)``, the teacher); the picks are scored in MIOpen's terms (open
and listed protocols, ckheur.metrics.censored_choice_report).
Quality target (issue 36): no split loses more than 0.2 points of mean efficiency.

    python bench/bench_screen.py [--models models/miopen_fwd_fp32_gfx90a ...] [--max-problems N]

Reads the find-dbs as imported datasets under data/ (``python run.py stage=import
import.path=../shared/data/miopen_fdb/<file>``); selection speed is bench/bench_compiled_selector.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
FILES = {"gfx942": "gfx942130", "gfx90a": "gfx90a68"}


def picks(selector, table, problems: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the table's problems given, the selector's score of each row's solver (-inf:
    not ranked), and each problem's top-1 ("": none ranked)."""
    from ckheur.families.problem_base import ProblemError

    names = [k.name for k in table.kernels]
    scores = {}
    top = np.full(len(table.problems), "", dtype=object)
    for i in problems:
        try:
            ks, sc, _ = selector.scores(table.problems[i])
        except ProblemError:
            scores[int(i)] = {}
            continue
        scores[int(i)] = dict(zip((k.name for k in ks), sc))
        top[i] = ks[int(np.argmax(sc))].name
    rows = np.flatnonzero(np.isin(table.pid, problems))
    got = np.array([scores[int(table.pid[r])].get(names[table.kid[r]], -np.inf) for r in rows])
    return rows, got, top


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", type=Path)
    ap.add_argument("--data", type=Path, default=ROOT / "data")
    ap.add_argument("--max-problems", type=int, default=0, help="a seeded sample per file (0: every problem)")
    args = ap.parse_args()
    from bench_miopen_fdb import load_table

    from ckheur.metrics import censored_choice_report
    from ckheur.selection.selector import Selector

    folders = args.models or sorted(p for p in (ROOT / "models").glob("miopen_*")
                                    if json.loads((p / "feature_spec.json").read_text()).get("screen"))
    lines = ["| bundle | screen | on | problems | top-1 kept | open top-1 / eff, whole model | screened "
             "| listed top-1 / eff, whole model | screened |", "| --- " * 9 + "|"]
    for folder in folders:
        spec = json.loads((folder / "feature_spec.json").read_text())
        op, arch = spec["op"], spec["arch"]["name"]
        own = load_table(args.data, arch, op["direction"], op["dtype"], FILES[arch])[0]
        own_keys = {p.key() for p in own.problems}
        for other in FILES:
            table = own if other == arch else \
                load_table(args.data, other, op["direction"], op["dtype"], FILES[other])[0]
            # On another GPU a bundle ranks the solvers that run there (as predict serves one).
            names = None if other == arch else [k.name for k in table.kernels]
            screened = Selector.load(folder, cache_size=0, kernels=names)
            whole = Selector.load(folder, cache_size=0, screen=False, kernels=names)
            seen = np.array([p.key() in own_keys for p in table.problems])
            splits = {"in-sample": np.arange(len(table.problems))} if other == arch else \
                {f"{other}, keys both list": np.flatnonzero(seen),
                 f"{other}, keys only it lists": np.flatnonzero(~seen)}
            for label, problems in splits.items():
                if args.max_problems and len(problems) > args.max_problems:
                    problems = np.sort(np.random.default_rng(0).choice(problems, args.max_problems, replace=False))
                t0 = time.perf_counter()
                figures = []
                tops = []
                for sel in (whole, screened):
                    rows, sc, top = picks(sel, table, problems)
                    ms = np.where(table.tflops[rows] > 0, table.flops_over_tflops[rows], np.nan)
                    figures.append(censored_choice_report(table.pid[rows], sc, ms))
                    tops.append(top[problems])
                kept = float(np.mean(tops[0] == tops[1]))
                cells = [f"{100 * f[pr]['top1']:.2f}% / {100 * f[pr]['efficiency']['mean']:.3f}%"
                         for pr in ("open", "listed") for f in figures]
                screen = f"{spec['screen']['trees']} trees, top {spec['screen']['top']}"
                lines.append(f"| {folder.name} | {screen} | {label} | {len(problems):,} | {100 * kept:.2f}% | "
                             + " | ".join(cells) + " |")
                print(lines[-1], f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
