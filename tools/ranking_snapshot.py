"""Snapshot of how the shipped bundles rank real problems, so a refactor can prove it changed nothing.

    python tools/ranking_snapshot.py problems OUT.json [--per-bundle 120]   # real problems per bundle (needs ../shared)
    python tools/ranking_snapshot.py rank PROBLEMS.json OUT.json [--bundles DIR] [--top 10]

``problems`` draws, per shipped bundle, distinct real problems of its op, dtype and arch: the
CK gfx950 sweep's shapes for the CK bundle, a seeded sample of the MIOpen find-db's problems for
the MIOpen ones. ``rank`` ranks them with the bundles in DIR (default: this checkout's
``models/``) through only ``Selector.load`` and ``Selector.rank``, the calls every version of
ckheur has, so the same command run in an older checkout records that version's rankings.
``tests/test_shipped_rankings.py`` compares today's rankings with the recorded ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def real_problems(per_bundle: int, seed: int = 0) -> dict[str, dict]:
    """Per shipped bundle: its family and a list of real problems (dicts of the family's fields)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from ckheur.measurements import CK_GFX950_FWD
    from ckheur.integrations.miopen.find_db import read_find_db
    from ckheur.families import get_family
    from ckheur.problems.sources import read_csv

    out: dict[str, dict] = {}
    fdbs: dict[str, object] = {}
    for folder in sorted((ROOT / "models").iterdir()):
        spec = json.loads((folder / "feature_spec.json").read_text())
        family, op = spec["op"]["family"], spec["op"]
        fields = list(get_family(family).problems.FIELDS)
        if family == "grouped_conv":
            probs = read_csv(CK_GFX950_FWD, get_family(family))
            rows = sorted({tuple(p.to_dict()[f] for f in fields) for p in probs})
        else:
            arch = spec["arch"]["name"]
            name = {"gfx942": "gfx942130", "gfx90a": "gfx90a68"}[arch]
            if name not in fdbs:
                fdbs[name] = read_find_db(SHARED / "miopen_fdb" / f"{name}.HIP.fdb.txt.bz2")
            p = fdbs[name].problems
            p = p[(p.direction == op["direction"]) & (p.dtype == op["dtype"])]
            rows = sorted(set(p[fields].itertuples(index=False, name=None)))
        pick = np.random.default_rng(seed).choice(len(rows), size=min(per_bundle, len(rows)), replace=False)
        out[folder.name] = {"family": family,
                            "problems": [{f: _plain(v) for f, v in zip(fields, rows[i])} for i in sorted(pick)]}
    return out


def _plain(v: object) -> object:
    """A JSON value of a numpy scalar."""
    return v.item() if hasattr(v, "item") else v


def rankings(problems: dict[str, dict], bundles: Path, top: int) -> dict[str, dict]:
    """The problems of each bundle with its top kernels: [[name, predicted TFLOPS], ...]."""
    from ckheur.selection.selector import Selector
    from ckheur.families import get_family

    out = {}
    for name, entry in problems.items():
        sel = Selector.load(bundles / name)
        make = get_family(entry["family"]).problems.problem_from_dict
        out[name] = {**entry, "top": [[[str(k), float(t)] for k, t in sel.rank(make(p), top)]
                                      for p in entry["problems"]]}
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: the two steps above."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("problems")
    p.add_argument("out", type=Path)
    p.add_argument("--per-bundle", type=int, default=120)
    r = sub.add_parser("rank")
    r.add_argument("problems", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--bundles", type=Path, default=ROOT / "models")
    r.add_argument("--top", type=int, default=10)
    a = ap.parse_args(argv)
    if a.cmd == "problems":
        a.out.write_text(json.dumps(real_problems(a.per_bundle), indent=None, separators=(",", ":")))
    else:
        sys.path.insert(0, str(Path.cwd()))  # the checkout the command runs in ranks
        got = rankings(json.loads(a.problems.read_text()), a.bundles, a.top)
        a.out.write_text(json.dumps(got, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
