#!/usr/bin/env python
"""Selection latency of Selector.rank, beside a pandas-DataFrame path with the same model.

Pools: the shipped forward model's 20-30 kernel pool, and a ~5,000-kernel generated pool
(the same model scoring unseen kernels: a latency measurement only), with and without the
analytic cascade. The DataFrame path mirrors CK's approach: per query, build a DataFrame of
candidate features with pandas, then call the model on it. Targets on 2 cores: p50 <= 0.5 ms
(30 kernels), <= 20 ms (5,000), and >= 10x faster than the DataFrame path.
Each query is a new problem (the LRU cache is bypassed). ``--baseline DIR`` also times another
bundle in the same process, interleaved (e.g. the previous shipped model, to see what the
simulator's features and prior cost per selection).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def time_queries(fn, problems) -> list[float]:
    out = []
    for p in problems:
        t = time.perf_counter()
        fn(p)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def dataframe_path(sel):
    """CK's approach with the same features and model: per query, one feature row (a dict) per
    candidate kernel, a pandas DataFrame of those rows, then the model on the DataFrame (the
    simulator's relative column and the prior, when the model has them, computed in pandas)."""
    import pandas as pd

    from ckheur.families.tile_features import analytic_log_tflops
    from ckheur.learn.prior import prior_from_log_tflops
    from ckheur.threads import predict

    eng = sel.engine
    analytic = {**sel.analytic_params, "dtype": sel.dtype} if sel.analytic_params else None
    names = eng.feature_names(analytic is not None)
    singles = {g: [(k, eng.kernel_arrays([k])) for k in pool.kernels] for g, pool in sel._pools.items()}
    groups = {g: pool.feats for g, pool in sel._pools.items()}

    def rank(p):
        prob = eng.problem_arrays([p], sel.direction)
        rows = []
        for k, karr in singles[p.group]:
            row = dict(zip(names, eng.features(prob, karr, sel.arch, sel.direction, analytic)[0]))
            row["kernel"] = k.name
            rows.append(row)
        df = pd.DataFrame(rows)
        if analytic:
            df["analytic_rel"] = df.analytic_log_tflops - df.analytic_log_tflops.max()
        df["score"] = predict(sel.booster, df[names])  # the thread policy, as every prediction
        if sel.prior is not None:
            log_tf = analytic_log_tflops(prob, groups[p.group], sel.arch, sel.prior["params"], sel.direction)[0]
            df["score"] += prior_from_log_tflops(log_tf, None, sel.prior, sel.objective)
        return df.nlargest(5, "score")[["kernel", "score"]].to_records(index=False).tolist()

    return rank


def main() -> int:
    from ckheur.config import load_option

    from ckheur import Selector
    from ckheur.kernels import enumerate_pool
    from ckheur.families import get_family
    from ckheur.problems import load_named_set

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "grouped_conv_fwd_bf16_gfx950")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another bundle timed in the same process, interleaved (e.g. the previous shipped model)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds over the problems for --baseline")
    args = ap.parse_args()
    model = args.model
    for m in (model, args.baseline):
        if m is not None and not m.is_dir():
            print(f"model {m} not found", file=sys.stderr)
            return 2
    problems = [p for p in load_named_set("holdout", get_family("grouped_conv")) if p.ndim == 2][:200]
    sel = Selector.load(model, cache_size=0)
    if args.baseline is not None:
        against_baseline(sel, Selector.load(args.baseline, cache_size=0), problems, args.rounds)
    small = time_queries(lambda p: sel.rank(p, k=5), problems)
    df_rank = dataframe_path(sel)
    df_times = time_queries(df_rank, problems[:100])
    n_small = len(sel.kernels)
    print(f"{n_small}-kernel pool, {len(problems)} distinct problems, 1 thread:")
    print(f"  Selector.rank      p50 {statistics.median(small):.3f} ms  p99 {_pct(small, 0.99):.3f} ms "
          f"(target p50 <= 0.5 ms: {'MET' if statistics.median(small) <= 0.5 else 'NOT MET'})")
    print(f"  DataFrame path     p50 {statistics.median(df_times):.3f} ms  p99 {_pct(df_times, 0.99):.3f} ms")
    ratio = statistics.median(df_times) / statistics.median(small)
    print(f"  speed-up {ratio:.1f}x (target >= 10x: {'MET' if ratio >= 10 else 'NOT MET'})")
    db_hit(model, problems)

    op = load_option("op/grouped_conv/fwd")
    op.update(tile_space="generated", pipelines=["compv3", "compv4", "compv5", "mem"],
              schedulers=["intrawave", "interwave"], dsb=[False, True], si=[False, True], ndims=[2],
              generated_tiles={"tile_m": [16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256],
                               "tile_n": [16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256],
                               "tile_k": [16, 32, 64, 128, 256]})
    arch = sel.arch
    big_pool = enumerate_pool(op, arch).kernels
    b = Selector.load(model, cache_size=0)
    for label, kw in (("full model on every kernel", {"cascade_threshold": 10**9}),
                      ("cascade: analytic top-256, then the model", {"cascade_threshold": 512, "cascade_top": 256})):
        big = Selector(big_pool, arch, b.direction, b.dtype, engine=b.engine, booster=b.booster,
                       tflops_booster=b.tflops_booster, analytic_params=b.analytic_params, sim_params=b.sim_params,
                       objective=b.objective, cache_size=0, prior=b.prior, **kw)
        t = time_queries(lambda p: big.rank(p, k=5), problems[:40])
        print(f"{len(big_pool)}-kernel generated pool, {label}: p50 {statistics.median(t):.2f} ms "
              f"p99 {_pct(t, 0.99):.2f} ms (target p50 <= 20 ms: {'MET' if statistics.median(t) <= 20 else 'NOT MET'})")
    return 0


def against_baseline(sel, base, problems: list, rounds: int) -> None:
    """Selector.rank time of two bundles, rounds interleaved so load drifts hit both alike: the
    median of per-round p50s, and the median over problems of each one's fastest call (robust to load)."""
    mine, theirs = [], []
    for _ in range(rounds):
        theirs.append(time_queries(lambda p: base.rank(p, k=5), problems))
        mine.append(time_queries(lambda p: sel.rank(p, k=5), problems))
    for what, stat in (("median of per-round p50s", lambda rs: statistics.median(map(statistics.median, rs))),
                       ("median over problems of the fastest call", lambda rs: statistics.median(map(min, zip(*rs))))):
        a, b = stat(mine), stat(theirs)
        print(f"against the baseline bundle ({rounds} interleaved rounds), {what}: this model {a:.3f} ms, "
              f"baseline {b:.3f} ms, ratio {a / b:.2f}")


def db_hit(model: Path, problems: list) -> None:
    """Selector.select on problems already in a tuning database (dicts, as a caller passes them),
    beside Selector.select that ranks with the model (no database)."""
    import tempfile

    from ckheur import Selector
    from ckheur.backends import measure_function

    with tempfile.TemporaryDirectory() as tmp:
        sel = Selector.load(model, tuning_db=tmp, cache_size=0, create_tuning_db=True)
        m = measure_function({"name": "sim", "seed": 0, "batch_pairs": 100, "params": sel.sim_params}, sel.op,
                             sel.arch, sel.kernels)
        for p in problems:
            sel.select(p, measure=m, k=3)  # simulated timings fill the database; only lookups are timed
        dicts = [p.to_dict() for p in problems]
        hits = time_queries(sel.select, dicts * 5)
        pure = Selector.load(model, cache_size=0)
        model_t = time_queries(pure.select, dicts)
    assert all(sel.select(d).source == "tuning_db" for d in dicts)
    print(f"  Selector.select, tuning-database hit (problem as a dict): p50 {1e3 * statistics.median(hits):.1f} us "
          f"p99 {1e3 * _pct(hits, 0.99):.1f} us (target p50 <= 20 us: "
          f"{'MET' if statistics.median(hits) <= 0.020 else 'NOT MET'}); model tier p50 "
          f"{statistics.median(model_t):.3f} ms, {statistics.median(model_t) / statistics.median(hits):.0f}x slower")


if __name__ == "__main__":
    sys.exit(main())
