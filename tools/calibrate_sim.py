#!/usr/bin/env python
"""Fit the simulator's free parameters to real CK measurements and report the fit.

    python tools/calibrate_sim.py                  # report the fit of conf/backend/sim.yaml
    python tools/calibrate_sim.py --search 3000    # search, report, and write the best params

Targets (on the real gfx950 forward data): median per-problem Spearman rank correlation
between simulated and measured TFLOPS >= 0.5, and picking the simulator's best kernel
reaches >= 88% mean efficiency of the measured oracle (the best fixed kernel: about 82%).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "ckheur" / "measurements" / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv.gz"  # shipped copy


def load_real(csv_path: Path):
    """Calibration data (problems x kernels, measured TFLOPS) of a real CK forward CSV."""
    from ckheur.config import load_option
    from ckheur.integrations.ck.tile_engine_csv import read_ck_csv
    from ckheur.kernels import parse_name
    from ckheur.problems import problem_from_dict
    from ckheur.families.grouped_conv.problems import CONV_FIELDS
    from ckheur.sim import kernel_arrays, problem_arrays
    from ckheur.sim_calibration import calibration_data

    df = read_ck_csv(csv_path, arch="gfx950")
    df = df[df.status == "ok"]
    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    keys = list(df[list(CONV_FIELDS)].itertuples(index=False, name=None))
    pkeys, names = sorted(set(keys)), sorted(df.kernel.unique())
    index = {k: i for i, k in enumerate(pkeys)}
    pid = np.array([index[k] for k in keys])
    kid = df.kernel.map({n: i for i, n in enumerate(names)}).to_numpy()
    problems = [problem_from_dict(dict(zip(CONV_FIELDS, k))) for k in pkeys]
    kernels = [parse_name(n, op) for n in names]
    return calibration_data(problem_arrays(problems, "fwd"), kernel_arrays(kernels), pid, kid,
                            df.tflops.to_numpy(), arch, "fwd")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--search", type=int, default=0, help="search iterations (0: only report)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.csv.exists():
        print(f"real data not found: {args.csv}", file=sys.stderr)
        return 2
    from ckheur.sim import load_params
    from ckheur.sim_calibration import calibrate, fit_report

    data = load_real(args.csv)
    params = load_params()
    r = fit_report(params, data)
    print("current conf/backend/sim.yaml:", _fmt(r))
    if args.search:
        params, r = calibrate(params, data, args.search, args.seed)
        print("after search:", _fmt(r))
        _write_params(params, args.csv)
    ok = r["median_spearman"] >= 0.5 and r["mean_eff_sim_pick"] >= 0.88
    print(f"targets (median Spearman >= 0.50, sim-pick efficiency >= 88%): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


def _fmt(r: dict) -> str:
    return (f"median Spearman {r['median_spearman']:.3f}; sim-pick efficiency mean "
            f"{100 * r['mean_eff_sim_pick']:.1f}% P10 {100 * r['p10_eff_sim_pick']:.1f}%; best fixed kernel "
            f"{100 * r['best_fixed_kernel_eff']:.1f}% ({r['problems']} problems x {r['kernels']} kernels, real gfx950)")


def _write_params(params: dict, csv_path: Path) -> None:
    """Replace the ``params:`` block (the file's last) of conf/backend/sim.yaml, keeping comments,
    and record the data fitted on (its sha256 as training computes it: a gzipped copy hashes as
    the original) so training's leakage guard recognizes it."""
    import yaml  # PyYAML comes with omegaconf

    from ckheur.parts import sha256_of
    from ckheur.sim import load_params

    path = ROOT / "conf" / "backend" / "sim.yaml"
    head = path.read_text().split("\nparams:\n")[0]
    digest = sha256_of(Path(csv_path))
    head = "\n".join(f"calibration_sha256: [{digest}]" if l.startswith("calibration_sha256:") else l
                     for l in head.splitlines())
    rounded = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in params.items() if k != "pipelines"}
    rounded["pipelines"] = {p: {f: round(v, 4) for f, v in d.items()} for p, d in params["pipelines"].items()}
    rounded["pipelines"]["mem"] = load_params(path)["pipelines"]["mem"]  # the prior stays as written
    body = yaml.safe_dump({"params": rounded}, sort_keys=False, default_flow_style=None)
    path.write_text(head + "\n" + body)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
