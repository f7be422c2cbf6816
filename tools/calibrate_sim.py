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
import copy
import math
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CSV_USED = None
DEFAULT_CSV = ROOT / "ckheur" / "measurements" / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv.gz"  # shipped copy


def load_real(csv_path: Path):
    """(problems, kernels, measured TFLOPS matrix with NaN where not measured, arch)."""
    from ckheur.dataset import read_ck_csv
    from ckheur.kernels import parse_name
    from ckheur.problems import problem_from_dict
    from ckheur.problems.conv import CONV_FIELDS
    from ckheur.config import load_option

    df = read_ck_csv(csv_path, arch="gfx950")
    df = df[df.status == "ok"]
    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    keys = df[list(CONV_FIELDS)].apply(tuple, axis=1)
    df = df.assign(pkey=keys).groupby(["pkey", "kernel"], as_index=False).tflops.median()
    pkeys = sorted(df.pkey.unique())
    names = sorted(df.kernel.unique())
    problems = [problem_from_dict(dict(zip(CONV_FIELDS, k))) for k in pkeys]
    kernels = [parse_name(n, op["tiles"]) for n in names]
    t = np.full((len(pkeys), len(names)), np.nan)
    t[[pkeys.index(k) for k in df.pkey], [names.index(n) for n in df.kernel]] = df.tflops.to_numpy()
    return problems, kernels, t, arch


def _rank(a: np.ndarray) -> np.ndarray:
    order = a.argsort()
    r = np.empty_like(order, dtype=float)
    r[order] = np.arange(len(a))
    return r


def _report(sim_tflops: np.ndarray, real: np.ndarray) -> dict:
    rhos, effs = [], []
    best = np.nanmax(real, axis=1)
    for i in range(real.shape[0]):
        ok = ~np.isnan(real[i])
        if ok.sum() >= 3:
            a, b = _rank(sim_tflops[i, ok]), _rank(real[i, ok])
            rhos.append(np.corrcoef(a, b)[0, 1])
        pick = np.where(ok, sim_tflops[i], -np.inf).argmax()
        effs.append(real[i, pick] / best[i])
    fixed = np.nanmean(real / best[:, None], axis=0)
    return {"median_spearman": float(np.median(rhos)), "mean_eff_sim_pick": float(np.mean(effs)),
            "p10_eff_sim_pick": float(np.percentile(effs, 10)), "best_fixed_kernel_eff": float(np.nanmax(fixed)),
            "problems": int(real.shape[0]), "kernels": int(real.shape[1])}


def evaluate(params, problems, kernels, real, arch) -> dict:
    from ckheur.sim import predict_latency_ms, problem_arrays, kernel_arrays
    lat = predict_latency_ms(problem_arrays(problems, "fwd"), kernel_arrays(kernels), arch, params, "fwd")
    flops = np.array([p.flops for p in problems], dtype=float)[:, None]
    return _report(flops / (lat * 1e-3) / 1e12, real)


# (path, low, high, log-scale) of each searched parameter
SPACE = [
    (("launch_us",), 0.5, 20, True), (("warp16_eff",), 0.4, 1.2, False),
    (("l2_bytes_per_cycle_cu",), 8, 256, True), (("gather_penalty",), 0.0, 2.0, False),
    (("overlap_loss",), 0.0, 1.0, False), (("store_bytes_per_cycle_cu",), 4, 256, True),
    (("wg_overhead_cycles",), 100, 20000, True), (("l2_reuse",), 1, 32, True), (("hbm_eff",), 0.3, 1.0, False),
] + [((("pipelines", p, f)), lo, hi, lg) for p in ("compv3", "compv4")
     for f, lo, hi, lg in (("mfma_eff", 0.3, 1.0, False), ("prologue_iters", 0.0, 8.0, False),
                           ("occupancy_cap", 1.0, 4.0, False))]


def _get(d, path):
    for k in path:
        d = d[k]
    return d


def _set(d, path, v):
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = v


def score(r: dict) -> float:
    return r["mean_eff_sim_pick"] + 0.5 * r["median_spearman"]


def search(params, n, problems, kernels, real, arch, seed=0):
    """Random local search (perturb a few parameters, keep improvements)."""
    rng = random.Random(seed)
    best, best_r = copy.deepcopy(params), evaluate(params, problems, kernels, real, arch)
    for i in range(n):
        cand = copy.deepcopy(best)
        scale = 0.5 if i < n // 2 else 0.15
        for path, lo, hi, lg in rng.sample(SPACE, rng.randint(1, 3)):
            v = _get(cand, path)
            if lg:
                v = math.exp(math.log(v) + rng.gauss(0, scale * math.log(hi / lo) / 3))
            else:
                v = v + rng.gauss(0, scale * (hi - lo) / 3)
            _set(cand, path, float(min(hi, max(lo, v))))
        r = evaluate(cand, problems, kernels, real, arch)
        if score(r) > score(best_r):
            best, best_r = cand, r
    # Pipelines without real measurements follow their measured relatives: compv5 times like
    # compv3 in CK; compv6/comp_async are double-buffered like compv4. mem keeps its prior.
    best["pipelines"]["compv5"] = dict(best["pipelines"]["compv3"])
    for p in ("compv6", "comp_async"):
        best["pipelines"][p] = dict(best["pipelines"]["compv4"])
    return best, best_r


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

    problems, kernels, real, arch = load_real(args.csv)
    params = load_params()
    r = evaluate(params, problems, kernels, real, arch)
    print("current conf/backend/sim.yaml:", _fmt(r))
    if args.search:
        params, r = search(params, args.search, problems, kernels, real, arch, args.seed)
        print("after search:", _fmt(r))
        global CSV_USED
        CSV_USED = args.csv
        _write_params(params)
    ok = r["median_spearman"] >= 0.5 and r["mean_eff_sim_pick"] >= 0.88
    print(f"targets (median Spearman >= 0.50, sim-pick efficiency >= 88%): {'MET' if ok else 'NOT MET'}")
    return 0 if ok else 1


def _fmt(r: dict) -> str:
    return (f"median Spearman {r['median_spearman']:.3f}; sim-pick efficiency mean "
            f"{100 * r['mean_eff_sim_pick']:.1f}% P10 {100 * r['p10_eff_sim_pick']:.1f}%; best fixed kernel "
            f"{100 * r['best_fixed_kernel_eff']:.1f}% ({r['problems']} problems x {r['kernels']} kernels, real gfx950)")


def _write_params(params: dict) -> None:
    """Replace the ``params:`` block (the file's last) of conf/backend/sim.yaml, keeping comments."""
    import yaml  # PyYAML comes with omegaconf

    from ckheur.sim import load_params

    path = ROOT / "conf" / "backend" / "sim.yaml"
    head = path.read_text().split("\nparams:\n")[0]
    import hashlib
    digest = hashlib.sha256(Path(CSV_USED).read_bytes()).hexdigest()
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
