"""stage=tune: time the model's top-k kernels of each problem into a tuning database.

For one problem (problem.<field>=... or problem="<MIOpenDriver line>") or a problem set.
Pairs already in the database are never measured again, so a killed run resumes where it
stopped; a problem whose top-k all failed gets the next k until one runs or the pool is
exhausted. Progress, failure recording and the part files are the sweep stage's.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain


def db_dir(cfg: Any, op: dict, arch: dict) -> Path:
    """The tuning database of this op/dtype/arch: tune.db, else under paths.tuning."""
    if cfg.tune.db:
        return Path(cfg.tune.db)
    return Path(cfg.paths.tuning) / f"{op['family']}_{op['direction']}_{op['dtype']}_{arch['name']}"


def run(cfg: Any, ctx: Context) -> dict:
    """Measure the model's top-k kernels per problem through the backend into the tuning database."""
    from ckheur.backends import make_backend
    from ckheur.dataset import kernel_columns
    from ckheur.problems import ProblemError, load_problem_set
    from ckheur.stages.predict import load_selector, problem_from_cfg
    from ckheur.stages.measuring import Progress, measure_batches, record_batches
    from ckheur.tuning_db import TuningDB

    op, arch, bcfg, tc = plain(cfg.op), plain(cfg.arch), plain(cfg.backend), cfg.tune
    k = int(tc.top_k)
    if k < 1:
        raise StageError(f"tune.top_k={k}: must be >= 1")
    selector, label = load_selector(cfg, op, arch, tc.model_dir)
    single = problem_from_cfg(cfg, op["family"])
    problems = [single] if single is not None else load_problem_set(plain(cfg.problems), op["family"])
    db = TuningDB.open(db_dir(cfg, op, arch), op, arch["name"], create=True, writable=True)
    print(f"tune: {op['family']}/{op['direction']} {op['dtype']} on {arch['name']}: top-{k} of {label} for "
          f"{len(problems)} problem(s) via backend={bcfg['name']} into {db.path} ({len(db)} problems already there)")

    ranked: dict[tuple, list] = {}
    skipped = []
    for p in problems:
        try:
            ranked[p.key()] = selector.ranking(p)[0]
        except ProblemError as e:
            skipped.append({"problem": p.describe(), "reason": str(e)})
    by_key = {p.key(): p for p in problems}

    measurer = make_backend(bcfg, op, arch)
    kcols = {kern.name: kernel_columns(kern, op["family"]) for ks in ranked.values() for kern in ks}
    pcols = {key: by_key[key].to_dict() for key in ranked}
    statuses: Counter = Counter()
    t0 = time.perf_counter()
    interrupted, rounds = False, 0
    already = 0
    try:
        while True:
            # Round 1: the top-k not yet attempted. Later rounds: the next k for problems with no usable run.
            todo = []
            for key, ks in ranked.items():
                tried = db.runs(key)
                if rounds and (any(lat is not None for _, lat in tried.values()) or len(tried) >= len(ks)):
                    continue
                want = ks[:k] if not rounds else [kern for kern in ks if kern.name not in tried][:k]
                todo += [(by_key[key], kern) for kern in want if kern.name not in tried]
                if not rounds:
                    already += sum(kern.name in tried for kern in want)
            if not todo:
                break
            rounds += 1
            progress = Progress(len(todo), tc.progress, tc.log_every_s, prefix="tune")
            batches = measure_batches(todo, measurer)
            got, interrupted = record_batches(db.path, batches, measurer, op, arch, pcols, kcols, progress)
            progress.close()
            statuses.update(got)
            db.refresh()
            if interrupted:
                break
    finally:
        measurer.close()  # rounds share one backend
    wall = time.perf_counter() - t0
    summary = _summary(db, ranked, k, skipped, statuses, already, rounds, wall, interrupted, label)
    _print(summary, single is not None and not skipped, db, ranked, by_key, k)
    ctx.output_dir.mkdir(parents=True, exist_ok=True)
    (ctx.output_dir / "tune_summary.json").write_text(json.dumps(summary, indent=2))
    if interrupted:
        print(f"tune interrupted: {sum(statuses.values())} attempts saved; run the same command again to resume",
              file=sys.stderr)
        raise SystemExit(130)
    return summary


def _summary(db: Any, ranked: dict, k: int, skipped: list, statuses: Counter, already: int, rounds: int,
             wall: float, interrupted: bool, label: str) -> dict:
    """What was measured, and how the tuned picks compare with the model's first choice."""
    tuned, model_right, gains = 0, 0, []
    for key, ks in ranked.items():
        hit = db.best(key)
        if hit is None:
            continue
        tuned += 1
        runs = db.runs(key)
        first = runs.get(ks[0].name, (None, None))[1]
        model_right += hit[0] == ks[0].name
        if first:
            gains.append(first / hit[1])
    return {"database": str(db.path), "ranked_by": label, "top_k": k, "problems": len(ranked) + len(skipped),
            "problems_skipped": skipped, "problems_tuned": tuned,
            "problems_without_a_running_kernel": len(ranked) - tuned, "pairs_already_in_db": already,
            "attempts": sum(statuses.values()), "by_status": dict(statuses), "rounds": rounds,
            "model_top1_was_fastest": model_right,
            "mean_speedup_over_model_top1": (sum(gains) / len(gains)) if gains else None,
            "wall_s": round(wall, 3), "interrupted": interrupted}


def _print(s: dict, single: bool, db: Any, ranked: dict, by_key: dict, k: int) -> None:
    from ckheur.display import format_table

    if single:
        key = next(iter(ranked))
        runs = db.runs(key)
        rows = [(i + 1, kern.name, "-" if kern.name not in runs else
                 (f"{runs[kern.name][1]:.4g}" if runs[kern.name][1] is not None else runs[kern.name][0]))
                for i, kern in enumerate(ranked[key][: max(k, len(runs))])]
        print(f"tune: {by_key[key].describe()}")
        print(format_table(["model rank", "kernel", "measured ms"], rows))
        best = db.best(key)
        print(f"tune: selected {best[0]} ({best[1]:.4g} ms, measured)" if best else "tune: no kernel ran")
    rows = [(st, n) for st, n in sorted(s["by_status"].items())] or [("(nothing to measure)", 0)]
    print(format_table(["status", "attempts"], rows))
    speed = s["mean_speedup_over_model_top1"]
    print(f"tune: {s['problems_tuned']}/{s['problems']} problems have a measured pick; {s['attempts']} pairs timed "
          f"in {s['wall_s']:.2f}s, {s['pairs_already_in_db']} already in the database; the model's first choice "
          f"was the fastest measured on {s['model_top1_was_fastest']}"
          + (f"; measured picks are {speed:.3f}x faster than it on average" if speed else "")
          + f"; database: {s['database']}")
