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

from ckheur.files import write_file
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
    single = problem_from_cfg(cfg, op)
    problems = [single] if single is not None else load_problem_set(plain(cfg.problems), op["family"])
    db = TuningDB.open(db_dir(cfg, op, arch), op, arch["name"], create=True, writable=True)
    print(f"tune: {op['family']}/{op['direction']} {op['dtype']} on {arch['name']}: top-{k} of {label} for "
          f"{len(problems)} problem(s) via backend={bcfg['name']} into {db.path} ({len(db)} problems already there)")

    ranked: dict[tuple, list] = {}
    skipped = []
    for p in problems:
        try:
            ranked[p.key()] = selector._ranking(p)[0]
        except ProblemError as e:
            skipped.append({"problem": p.describe(), "reason": str(e)})
    by_key = {p.key(): p for p in problems}

    measurer = make_backend(bcfg, op, arch)
    kcols = {kern.name: kernel_columns(kern, op["family"]) for ks in ranked.values() for kern in ks}
    pcols = {key: by_key[key].to_dict() for key in ranked}
    already = sum(kern.name in db.runs(key) for key, ks in ranked.items() for kern in ks[:k])
    progress = Progress(sum(len(_wanted(db, ks, key, k)) for key, ks in ranked.items()), tc.progress,
                        tc.log_every_s, prefix="tune")
    statuses: Counter = Counter()
    t0 = time.perf_counter()
    rounds, waited, mine = 0, set(), set()
    claims: list = []
    todo: list = []

    def flush() -> bool:
        """Measure and record the claimed pairs, then give the claims back; True when interrupted."""
        got, stop = record_batches(db.path, measure_batches(todo, measurer), measurer, op, arch, pcols, kcols,
                                   progress)
        statuses.update(got)
        mine.update(p.key() for p, _ in todo)
        for c in claims:
            c.release()
        claims.clear()
        todo.clear()
        return stop

    interrupted = False
    try:
        while not interrupted:
            db.refresh()
            open_keys = [key for key, ks in ranked.items() if _wanted(db, ks, key, k)]
            if not open_keys:
                break
            before, held_elsewhere = len(mine), 0
            for key in open_keys:
                claim = db.claim(key)
                if claim is None:  # another live process is measuring it
                    held_elsewhere += 1
                    waited.add(key)
                    continue
                db.refresh()  # it may have been finished just before our claim
                want = _wanted(db, ranked[key], key, k)
                if not want:
                    claim.release()
                    continue
                claims.append(claim)
                todo.extend((by_key[key], kern) for kern in want)
                if len(todo) >= measurer.batch_pairs and (interrupted := flush()):
                    break
            if todo and not interrupted:
                interrupted = flush()
            rounds += len(mine) > before
            if len(mine) == before and held_elsewhere:
                time.sleep(float(tc.claim_poll_s))  # every open problem is being measured elsewhere: wait for it
    finally:
        for c in claims:
            c.release()
        progress.close()
        measurer.close()  # rounds share one backend
    wall = time.perf_counter() - t0
    summary = _summary(db, ranked, k, skipped, statuses, already, rounds, wall, interrupted, label)
    summary["problems_measured_by_other_processes"] = len(waited - mine)
    _print(summary, single is not None and not skipped, db, ranked, by_key, k)
    write_file(ctx.output_dir / "tune_summary.json", json.dumps(summary, indent=2))
    if interrupted:
        print(f"tune interrupted: {sum(statuses.values())} attempts saved; run the same command again to resume",
              file=sys.stderr)
        raise SystemExit(130)
    return summary


def _wanted(db: Any, ks: list, key: tuple, k: int) -> list:
    """Kernels still to time on a problem: its top-k not yet attempted; once those are all
    attempted and none ran, the next k not yet attempted."""
    tried = db.runs(key)
    want = [kern for kern in ks[:k] if kern.name not in tried]
    if want or any(lat is not None for _, lat in tried.values()):
        return want
    return [kern for kern in ks if kern.name not in tried][:k]


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
