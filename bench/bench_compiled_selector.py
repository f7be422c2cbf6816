"""Compiled selector: export + build time, source size, and ranking latency in C, via ctypes and in
Python, measured in one process (medians of repeats; ratios against the Python selector).

    python bench/bench_compiled_selector.py [--repeat 200] [--runs 5] [--model DIR] [--baseline DIR] [--forward-only]

Forward model: the shipped bundle (real gfx950 data), ranking its 20-kernel pool for the problems
of the shipped real CSV. GEMM: a small model trained here on SIMULATED data (5,216-kernel pool,
analytic cascade to 256 candidates), since no measured GEMM data ships.
Targets: C p50 <= 25 us (stretch 10), ctypes p50 <= 50 us, GEMM cascade p50 <= 1 ms in C,
export + build < 30 s, generated source < 2 MB.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def c_timings_ns(binary: Path, csv_text: str, repeat: int) -> tuple[int, int]:
    """One ckheur_select run's (per-call p50, median over problems of each one's fastest call);
    it times every rank call itself, in rounds over the problems."""
    r = subprocess.run([str(binary), "--repeat", str(repeat)], input=csv_text, capture_output=True, text=True,
                       check=False)
    got = dict(ln.split("=") for ln in r.stderr.splitlines() if ln.startswith("selection_ns_"))
    if "selection_ns_p50" not in got:
        raise SystemExit(f"{binary}: no timing ({r.stderr[-300:]})")
    return int(got["selection_ns_p50"]), int(got["selection_ns_min_p50"])


def c_p50_ns(binary: Path, csv_text: str, repeat: int, runs: int) -> float:
    """Median over runs of ckheur_select's per-call p50."""
    return statistics.median(c_timings_ns(binary, csv_text, repeat)[0] for _ in range(runs))


def against_baseline(binary: Path, base: Path, csv_text: str, repeat: int, runs: int) -> None:
    """C selection time of two models' programs, runs interleaved so load drifts hit both alike."""
    mine, theirs = [], []
    for _ in range(runs):
        theirs.append(c_timings_ns(base, csv_text, repeat))
        mine.append(c_timings_ns(binary, csv_text, repeat))
    for j, what in enumerate(("per-call p50", "median over problems of the fastest call")):
        a, b = statistics.median(m[j] for m in mine) / 1e3, statistics.median(t[j] for t in theirs) / 1e3
        print(f"  against the baseline ({runs} interleaved runs), {what}: this model {a:.1f} us, baseline "
              f"{b:.1f} us, ratio {a / b:.2f}")


def py_p50_us(fn, problems, repeat_rounds: int) -> float:
    """Median per-call time of fn(problem) over rounds of all problems."""
    times = []
    for _ in range(repeat_rounds):
        for p in problems:
            t0 = time.perf_counter_ns()
            fn(p)
            times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200, help="rank calls per problem in C")
    ap.add_argument("--runs", type=int, default=5, help="C runs (median of their p50s)")
    ap.add_argument("--model", type=Path, default=ROOT / "bundles" / "grouped_conv_fwd_bf16_gfx950",
                    help="the forward bundle (default: the shipped one), e.g. an older one to compare")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another bundle whose C program is timed interleaved with the model's (e.g. the previous "
                         "shipped model)")
    ap.add_argument("--forward-only", action="store_true", help="skip the GEMM part")
    ap.add_argument("--rounds", type=int, default=5, help="Python/ctypes rounds over the problems")
    args = ap.parse_args()

    from ckheur.config import plain
    from ckheur.models.compiled import CompiledModel, build, find_compiler
    from ckheur.models.export_c import export_bundle
    from ckheur.models.selector import Selector
    from ckheur.measurements import CK_GFX950_FWD
    from ckheur.problems.conv import CONV_FIELDS
    from ckheur.problems.gemm import FIELDS as GEMM_FIELDS
    from ckheur.problems.sources import read_csv
    from ckheur.problems import random_problems
    from ckheur.models.exporting import problems_csv

    cc = find_compiler()
    if cc is None:
        raise SystemExit("no C compiler: nothing to measure")
    shipped = args.model
    problems = read_csv(CK_GFX950_FWD)[:100]
    fields = list(CONV_FIELDS)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        res = export_bundle(shipped, tmp / "fwd")
        t_export = time.perf_counter() - t0
        binary = build(res.path, res.name, cc, shared=False)
        lib = build(res.path, res.name, cc, shared=True)
        t_total = time.perf_counter() - t0
        print(f"forward model (shipped, real gfx950 data): {res.num_kernels} kernels, {res.num_trees} trees")
        print(f"  export {t_export:.2f} s + build (program and shared library) = {t_total:.2f} s (target < 30 s); "
              f"source {res.source_bytes / 1e6:.2f} MB (target < 2 MB)")
        c_us = c_p50_ns(binary, problems_csv(problems, fields), args.repeat, args.runs) / 1e3
        if args.baseline is not None:
            base = export_bundle(args.baseline, tmp / "baseline")
            against_baseline(binary, build(base.path, base.name, cc, shared=False), problems_csv(problems, fields),
                             args.repeat, args.runs)
        import json

        compiled = CompiledModel(lib, json.loads((res.path / "export.json").read_text()))
        py = Selector.load(shipped, cache_size=0)
        sel_c = Selector.load(shipped, cache_size=0)
        sel_c.compiled = compiled
        py_us = py_p50_us(lambda p: py.rank(p, 5), problems, args.rounds)
        ctypes_us = py_p50_us(compiled.predict, problems, args.rounds)
        sel_us = py_p50_us(lambda p: sel_c.rank(p, 5), problems, args.rounds)
        print(f"  C rank p50 {c_us:.1f} us (target <= 25, stretch 10); ctypes predict p50 {ctypes_us:.1f} us, "
              f"Selector(compiled=True).rank p50 {sel_us:.1f} us (target <= 50); Python Selector.rank p50 "
              f"{py_us:.1f} us")
        print(f"  speed-up over the Python selector: C {py_us / c_us:.1f}x, ctypes {py_us / ctypes_us:.1f}x")
        if args.forward_only:
            return

        from ckheur.models.quick import train_quick_bundle
        from ckheur.ops import get_family
        from ckheur.stages import compose_config

        cfg = compose_config(["op=gemm/universal"])
        op, arch = plain(cfg.op), plain(cfg.arch)
        gdir = train_quick_bundle(tmp / "gemm_bundle", op, arch, kernel_sample=300, n_problems=60, trees=100)
        g = export_bundle(gdir, tmp / "gemm")
        gbin = build(g.path, g.name, cc, shared=False)
        gprobs = random_problems(get_family("gemm"), ["rcr"], 100, seed=1)
        g_us = c_p50_ns(gbin, problems_csv(gprobs, list(GEMM_FIELDS)), max(5, args.repeat // 20),
                        args.runs) / 1e3
        gpy = Selector.load(gdir, cache_size=0)
        gpy_us = py_p50_us(lambda p: gpy.rank(p, 5), gprobs[:20], 1)
        print(f"GEMM model (SIMULATED data, trained here): {g.num_kernels} kernels, {g.num_trees} trees, "
              f"cascade to 256")
        print(f"  C rank p50 {g_us:.0f} us (target <= 1000); Python Selector.rank p50 {gpy_us:.0f} us "
              f"({gpy_us / g_us:.1f}x)")


if __name__ == "__main__":
    main()
