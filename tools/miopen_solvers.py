#!/usr/bin/env python
"""The solver tables of conf/op/miopen/*.yaml, derived from MIOpen find-db files.

Per direction and arch: every solver the file lists, its algorithm (the entries' MIOpen algo),
implementation kind (from MIOpen's naming: ckheur.kernels.miopen_solvers.implementation_of)
and whether it ever asked for a workspace. Ids are stable across arches and runs: a solver keeps
the id the op files give it (shipped models use ids as categorical codes), a new one takes the
next free id, in name order. Prints YAML to paste into the op files (or writes them with --write).

    python tools/miopen_solvers.py ../shared/data/miopen_fdb/gfx942130.HIP.fdb.txt.bz2 \
        ../shared/data/miopen_fdb/gfx90a68.HIP.fdb.txt.bz2 [--write]
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tables(paths: list[str]) -> dict:
    """{direction: {arch: [solver entries]}} from the files."""
    from ckheur.kernels.miopen_solvers import implementation_of
    from ckheur.miopen_fdb import arch_from_name, read_find_db

    per: dict = {}
    names: set = set()
    for path in paths:
        arch, _ = arch_from_name(path, ["gfx90a", "gfx942", "gfx950"])
        fdb = read_find_db(path)
        e = fdb.entries.assign(direction=fdb.problems["direction"].to_numpy()[fdb.entries["problem"].to_numpy()])
        for (direction, solver), g in e.groupby(["direction", "solver"]):
            per.setdefault(direction, {}).setdefault(arch, []).append(
                {"name": solver, "algorithm": g["algorithm"].mode().iloc[0], "implementation": implementation_of(solver),
                 "workspace": bool((g["workspace"] > 0).any()), "problems": int(len(g))})
            names.add(solver)
    ids = declared_ids()
    for n in sorted(names - set(ids)):
        ids[n] = max(ids.values(), default=-1) + 1
    for direction in per:
        for arch in per[direction]:
            per[direction][arch] = sorted(({**s, "id": ids[s["name"]]} for s in per[direction][arch]),
                                          key=lambda s: -s["problems"])
    return per


def declared_ids() -> dict:
    """{solver name: id} as conf/op/miopen/*.yaml declare them."""
    from omegaconf import OmegaConf

    ids: dict = {}
    for path in sorted((ROOT / "conf" / "op" / "miopen").glob("*.yaml")):
        for table in (OmegaConf.load(path).get("solvers") or {}).values():
            for s in table:
                if ids.setdefault(s["name"], int(s["id"])) != int(s["id"]):
                    raise SystemExit(f"{path}: solver {s['name']} has id {s['id']}, elsewhere {ids[s['name']]}")
    return ids


def as_yaml(table: dict) -> str:
    """The ``solvers:`` node of one direction's op file."""
    lines = ["solvers:"]
    for arch in sorted(table):
        lines.append(f"  {arch}:")
        for s in table[arch]:
            lines.append(f"    - {{name: {s['name']}, id: {s['id']}, algorithm: {s['algorithm']}, "
                         f"implementation: {s['implementation']}, workspace: {str(s['workspace']).lower()}}}"
                         f"  # listed for {s['problems']} problems")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--write", action="store_true", help="replace the solvers node of conf/op/miopen/*.yaml")
    args = ap.parse_args()
    for direction, table in sorted(tables(args.paths).items()):
        text = as_yaml(table)
        target = ROOT / "conf" / "op" / "miopen" / f"{direction}.yaml"
        if args.write and target.exists():
            head = target.read_text().split("solvers:\n")[0]
            target.write_text(head + text)
            print(f"wrote {target}")
        else:
            print(f"# {direction}\n{text}")


if __name__ == "__main__":
    main()
