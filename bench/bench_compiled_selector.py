"""Selection speed per bundle, honestly: distinct real problems, each problem's median over
repeats, then the median over problems (p50), in C (``ckheur_select``), through ctypes
(``Selector.load(..., compiled=True)``) and in Python (``Selector.rank``); with each model's tree
count (the ranking model's; ranking does not run the TFLOPS companion) and the ratio to the floor
(kernels x trees x 1 ns; a bundle with a screen, ckheur.selection.screening, evaluates fewer:
its screen is printed). A baseline bundle (a folder, or the
shipped forward bundle at an earlier commit) is measured in the same run, interleaved.

    python bench/bench_compiled_selector.py [--problems 100] [--repeat 50] [--runs 3]
        [--model DIR ...] [--baseline DIR | --baseline-commit REV] [--baseline-code REV] [--gemm]

``--baseline-code REV`` times the same bundles with ckheur's code as it was at REV first (its own
bench, run from a copy of that revision), so that a speed-up of the code is measured in one run.

Default models: the shipped CK forward bundle (real gfx950 data; problems: the distinct shapes of
the shipped CSV) and two MIOpen bundles, forward FP16 MI300X (12 solvers) and backward-weights
FP32 MI210/250 (34 solvers) (problems: the distinct keys of their find-db, ../shared's file when
present, else the repo's slice). ``--gemm`` adds a GEMM model trained here on SIMULATED data.
Targets (issue 36): CK forward C <= 8 us, Python rank <= 0.3 ms, compiled <= 30 us; MIOpen C <= 10
us (12 solvers) / <= 25 us (34), Python rank <= 0.5 ms.
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
FIND_DBS = {"gfx942": "gfx942130.HIP.fdb.txt.bz2", "gfx90a": "gfx90a68.HIP.fdb.txt.bz2"}
DEFAULT_MODELS = ("grouped_conv_fwd_bf16_gfx950", "miopen_fwd_fp16_gfx942", "miopen_bwd_weight_fp32_gfx90a")


def c_timings_ns(binary: Path, csv_text: str, repeat: int) -> dict[str, int]:
    """One ckheur_select run's timings (selection_ns_p50, _min_p50, _row_p50): it times every rank
    call itself, in rounds over the problems."""
    r = subprocess.run([str(binary), "--repeat", str(repeat)], input=csv_text, capture_output=True, text=True,
                       check=False)
    got = {k: int(v) for k, v in (ln.split("=") for ln in r.stderr.splitlines() if ln.startswith("selection_ns_"))}
    if "selection_ns_row_p50" not in got:
        raise SystemExit(f"{binary}: no timing ({r.stderr[-300:]})")
    return got


def per_problem_p50_us(fn, problems, rounds: int) -> float:
    """Median over problems of each problem's median call of fn(problem), in rounds over the problems
    (each call follows a different problem, as when a framework selects for a network's layers)."""
    times = [[0.0] * rounds for _ in problems]
    for r in range(rounds):
        for i, p in enumerate(problems):
            t0 = time.perf_counter_ns()
            fn(p)
            times[i][r] = (time.perf_counter_ns() - t0) / 1e3
    return statistics.median(statistics.median(ts) for ts in times)


def distinct(problems: list, n: int) -> list:
    """The first n distinct problems, in order."""
    seen, out = set(), []
    for p in problems:
        key = tuple(sorted(p.to_dict().items()))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out[:n]


def bundle_problems(bundle: Path, n: int) -> tuple[list, list[str]]:
    """Distinct real problems for a bundle's family and the C program's field names."""
    import json

    from ckheur.families import get_family

    spec = json.loads((bundle / "feature_spec.json").read_text())
    family = get_family(spec["engine"])
    fields = list(family.problems.FIELDS)
    if spec["engine"] == "miopen":
        from ckheur.selection.selector import Selector

        name = FIND_DBS[spec["arch"]["name"]]
        shared = ROOT.parent / "shared" / "data" / "miopen_fdb" / name
        path = shared if shared.exists() else ROOT / "tests" / "data" / "miopen_fdb" / name
        keys = list(Selector.load(bundle, find_db=path).find_db.best)
        step = max(1, len(keys) // n)  # spread over the file, not its first block
        return [family.problems.problem_from_dict(dict(zip(fields, k))) for k in keys[::step][:n]], fields
    from ckheur.measurements import CK_GFX950_FWD
    from ckheur.families import get_family
    from ckheur.problems.sources import read_csv

    return distinct(read_csv(CK_GFX950_FWD, get_family("grouped_conv")), n), fields


def extract_bundle(rev: str, bundle: str, into: Path) -> Path:
    """A shipped bundle's folder as it was at a git revision (the previous model, for side by side)."""
    out = into / f"{bundle}@{rev}"
    names = []
    for folder in ("models", "bundles"):  # shipped bundles: models/ (and bundles/ from f6a535f to issue 34)
        names = names or subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, f"{folder}/{bundle}/"],
                                        capture_output=True, text=True, check=True).stdout.split()
    if not names:
        raise SystemExit(f"no shipped bundle {bundle} at {rev}")
    out.mkdir(parents=True)
    for name in names:
        data = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{name}"], capture_output=True,
                              check=True).stdout
        (out / Path(name).name).write_bytes(data)
    return out


def old_code_rows(rev: str, models: list[Path], tmp: Path, args) -> list[str]:
    """The table rows of this bench run with ckheur's code (and this bench) as they were at a git
    revision, on the same bundles: a copy of that revision's code, run in a subprocess."""
    src = tmp / f"code@{rev}"
    src.mkdir()
    paths = [p for p in ("ckheur", "bench", "conf", "tests/data/miopen_fdb")
             if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{p}"], check=False).returncode == 0]
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *paths], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=tar, check=True)
    if (ROOT.parent / "shared").is_dir():  # the same find-db files as this code reads
        (tmp / "shared").symlink_to(ROOT.parent / "shared")
    cmd = [sys.executable, str(src / "bench" / "bench_compiled_selector.py"), "--problems", str(args.problems),
           "--repeat", str(args.repeat), "--runs", str(args.runs), "--rounds", str(args.rounds)]
    r = subprocess.run(cmd + [a for m in models for a in ("--model", str(m.resolve()))], capture_output=True,
                       text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"the bench at {rev} failed:\n{r.stderr[-2000:]}")
    return [f"{line}  [code at {rev}]" for line in r.stdout.splitlines()[1:] if line.strip()]


def measure(bundle: Path, problems: list, fields: list[str], tmp: Path, cc: str, args) -> dict:
    """Export and build one bundle, then time it in C, through ctypes and in Python."""
    import json

    from ckheur.c_export.compiled import CompiledModel, build
    from ckheur.c_export.generate import export_bundle
    from ckheur.c_export.checked import problems_csv
    from ckheur.selection.selector import Selector

    res = export_bundle(bundle, tempfile.mkdtemp(prefix=f"c-{bundle.name}-", dir=tmp))  # same names: old and new
    binary = build(res.path, res.name, cc, shared=False)
    lib = build(res.path, res.name, cc, shared=True)
    csv_text = problems_csv(problems, fields)
    c_us = statistics.median(c_timings_ns(binary, csv_text, args.repeat)["selection_ns_row_p50"]
                             for _ in range(args.runs)) / 1e3
    py = Selector.load(bundle, cache_size=0)
    compiled = Selector.load(bundle, cache_size=0)
    compiled.compiled = CompiledModel(lib, json.loads((res.path / "export.json").read_text()))
    from ckheur.learn.bundle import load_bundle

    b = load_bundle(bundle)
    trees = b.booster.num_trees()  # ranking scores these; the TFLOPS companion is not run to rank
    return {"bundle": bundle.name, "kernels": res.num_kernels, "trees": trees, "c_us": c_us,
            "screen": b.spec.get("screen"),
            "floor_us": res.num_kernels * trees / 1e3,
            "py_us": per_problem_p50_us(lambda p: py.rank(p, 5), problems, args.rounds),
            "compiled_us": per_problem_p50_us(lambda p: compiled.rank(p, 5), problems, args.rounds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, action="append", default=None,
                    help="a bundle folder to time (repeatable; default: the shipped CK forward and two MIOpen bundles)")
    ap.add_argument("--baseline", type=Path, default=None, help="another bundle timed in the same run")
    ap.add_argument("--baseline-commit", default=None,
                    help="time the shipped CK forward bundle as it was at this git revision too (e.g. the previous model)")
    ap.add_argument("--baseline-code", default=None,
                    help="time the same bundles with ckheur's code at this git revision first (e.g. before a speed-up)")
    ap.add_argument("--problems", type=int, default=100, help="distinct problems per bundle")
    ap.add_argument("--repeat", type=int, default=50, help="rank calls per problem in C")
    ap.add_argument("--runs", type=int, default=3, help="C runs (median of their per-problem p50s)")
    ap.add_argument("--rounds", type=int, default=5, help="Python/ctypes rounds over the problems")
    ap.add_argument("--gemm", action="store_true", help="also a GEMM model trained here on SIMULATED data")
    args = ap.parse_args()

    from ckheur.c_export.compiled import find_compiler

    cc = find_compiler()
    if cc is None:
        raise SystemExit("no C compiler: nothing to measure")
    models = args.model or [ROOT / "models" / m for m in DEFAULT_MODELS]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.baseline is not None:
            models.append(args.baseline)
        if args.baseline_commit:
            models.append(extract_bundle(args.baseline_commit, DEFAULT_MODELS[0], tmp))
        old_rows = old_code_rows(args.baseline_code, models, tmp, args) if args.baseline_code else []
        print(f"{'bundle':<46} {'kernels':>7} {'trees':>6} {'C us':>7} {'floor us':>8} {'x floor':>7} "
              f"{'compiled us':>11} {'Python us':>9}  (p50 over distinct problems)")
        for line in old_rows:
            print(line)
        for bundle in models:
            problems, fields = bundle_problems(bundle, args.problems)
            m = measure(bundle, problems, fields, tmp, cc, args)
            print(f"{m['bundle']:<46} {m['kernels']:>7} {m['trees']:>6} {m['c_us']:>7.1f} {m['floor_us']:>8.1f} "
                  f"{m['c_us'] / m['floor_us']:>7.1f} {m['compiled_us']:>11.1f} {m['py_us']:>9.0f}  "
                  f"({len(problems)} problems)"
                  + (f"  screen: {m['screen']['trees']} trees, top {m['screen']['top']}" if m.get("screen") else ""))
        if args.gemm:
            gemm(tmp, cc, args)


def gemm(tmp: Path, cc: str, args) -> None:
    """A GEMM model trained here on SIMULATED data (5,216-kernel pool, analytic cascade to 256)."""
    from ckheur.config import plain
    from ckheur.c_export.compiled import build
    from ckheur.c_export.generate import export_bundle
    from ckheur.c_export.checked import problems_csv
    from ckheur.learn.quick import train_quick_bundle
    from ckheur.selection.selector import Selector
    from ckheur.families import get_family
    from ckheur.problems import random_problems
    from ckheur.families.gemm.problems import FIELDS as GEMM_FIELDS
    from ckheur.stages import compose_config

    cfg = compose_config(["op=gemm/universal"])
    op, arch = plain(cfg.op), plain(cfg.arch)
    gdir = train_quick_bundle(tmp / "gemm_bundle", op, arch, kernel_sample=300, n_problems=60, trees=100)
    g = export_bundle(gdir, tmp / "gemm")
    gbin = build(g.path, g.name, cc, shared=False)
    gprobs = random_problems(get_family("gemm"), ["rcr"], 100, seed=1)
    g_us = statistics.median(c_timings_ns(gbin, problems_csv(gprobs, list(GEMM_FIELDS)), max(5, args.repeat // 10))
                             ["selection_ns_row_p50"] for _ in range(args.runs)) / 1e3
    gpy = Selector.load(gdir, cache_size=0)
    gpy_us = per_problem_p50_us(lambda p: gpy.rank(p, 5), gprobs[:20], 1)
    print(f"GEMM model (SIMULATED data, trained here): {g.num_kernels} kernels, {g.num_trees} trees, cascade to 256: "
          f"C p50 {g_us:.0f} us (target <= 1000); Python rank p50 {gpy_us:.0f} us")


if __name__ == "__main__":
    main()
