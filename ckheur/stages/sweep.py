"""stage=sweep: measure every legal kernel on every problem (sweep.strategy=full), or a budget in
rounds (active, random, stratified: ckheur.stages.active_sweep); append, resume, lose nothing."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ckheur.stages import Context, StageError, plain


class Progress:
    """A bar with rate and ETA on a terminal; plain periodic log lines otherwise."""

    def __init__(self, total: int, mode: str = "auto", every_s: float = 10.0, stream: Any = None,
                 prefix: str = "sweep") -> None:
        self.prefix = prefix
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "log"
        self.mode, self.total, self.every_s = mode, total, every_s
        self.done, self.t0, self.last = 0, time.perf_counter(), 0.0

    def update(self, n: int, note: str = "") -> None:
        self.done += n
        now = time.perf_counter()
        if self.mode == "none" or (self.mode == "log" and now - self.last < self.every_s and self.done < self.total):
            return
        self.last = now
        el = now - self.t0
        rate = self.done / el if el > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        frac = self.done / self.total if self.total else 1.0
        msg = f"{self.done}/{self.total} pairs ({100 * frac:.0f}%) {rate:,.0f}/s ETA {eta:,.0f}s {note}"
        if self.mode == "bar":
            bar = "#" * int(30 * frac)
            self.stream.write(f"\r[{bar:<30}] {msg}")
            if self.done >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"{self.prefix}: {msg}\n")
        self.stream.flush()


def _chunks(seq: Sequence[Any], size: int):
    for i in range(0, len(seq), max(1, size)):
        yield seq[i:i + size]


def measure_batches(pairs: Sequence[tuple[Any, Any]], measurer: Any) -> list[tuple[Sequence, Callable]]:
    """The pairs cut into the measurer's batch size, each with its measure call (for record_batches)."""
    return [(b, measurer.measure) for b in _chunks(pairs, measurer.batch_pairs)]


def _not_run(pairs: Sequence[tuple[Any, Any]]) -> Any:
    """Results for pairs the kernel cannot run: recorded as unsupported, never measured."""
    from ckheur.backends import Results

    res = Results()
    for p, k in pairs:
        res.add(float("nan"), "unsupported", f"{k.name} cannot run {p.describe()} (a tile does not divide "
                "a dimension the kernel does not pad, or a contiguous dimension is too short)")
    return res


def record_batches(out: Path, batches: Sequence[tuple[Sequence, Callable]], measurer: Any, op: dict, arch: dict,
                   pcols: dict, kcols: dict, progress: Progress) -> tuple[Counter, bool]:
    """Measure batches of pairs and append each as a part file of the dataset ``out``.

    Shared by sweeps and tuning: a kill loses at most the batch in flight, and Ctrl-C stops
    cleanly after saving what was measured. Returns the attempts by status and whether the
    run was interrupted. The caller owns (and closes) the measurer."""
    from ckheur.dataset import common_columns, measurement_rows, write_part

    common = common_columns(op["family"], op["direction"], op["dtype"], arch["name"], measurer.name,
                            measurer.warmup, measurer.repeat)
    statuses: Counter = Counter()
    try:
        for batch, measure in batches:
            res = measure(batch)
            write_part(out, measurement_rows(batch, res, common, pcols, kcols, measurer.clock_mhz()))
            statuses.update(res.status)
            progress.update(len(batch), f"(last batch: {dict(Counter(res.status))})")
    except KeyboardInterrupt:
        return statuses, True
    return statuses, False


@dataclass
class SweepPlan:
    """What a sweep works on: the problems, each with the pool kernels it can run, and what is done."""

    op: dict
    arch: dict
    backend: dict
    pool: Any
    problems: list
    out: Path  # the dataset folder
    done: set  # (*problem key, kernel) already in the dataset
    groups: dict  # kernel group -> its pool kernels
    masks: dict  # problem key -> which kernels of its group can run it (bool array)
    skipped: list  # (problem description, reason): no kernel can run it
    total_pairs: int  # problems x the kernels of their group (runnable or not)


def plan_sweep(cfg: Any) -> SweepPlan:
    """Pool, problems and the dataset's existing pairs for a sweep config (moves the old dataset
    aside with sweep.overwrite)."""
    from ckheur.dataset import USABLE, dataset_dir, read_dataset
    from ckheur.kernels import enumerate_pool
    from ckheur.ops import get_family
    from ckheur.problems import load_problem_set

    op, arch, bcfg, st = plain(cfg.op), plain(cfg.arch), plain(cfg.backend), cfg.sweep
    family = get_family(op["family"])
    pool = enumerate_pool(op, arch, cfg.kernels.filter)
    if not pool.kernels:
        raise StageError("the kernel pool is empty (check kernels.filter and the op's allow-lists)")
    problems = load_problem_set(plain(cfg.problems), op["family"])
    out = Path(st.output) if st.output else dataset_dir(cfg.paths.data, op, arch["name"], cfg.problems.name)
    if st.overwrite and out.exists():
        aside = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
        out.rename(aside)
        print(f"sweep.overwrite: previous dataset kept aside as {aside}")
    done: set[tuple] = set()
    old = read_dataset(out) if out.exists() else None
    if old is not None and len(old):
        old = old[(old.arch == arch["name"]) & (old.direction == op["direction"]) & (old.dtype == op["dtype"])]
        if st.retry_failed:
            old = old[old.status.isin([*USABLE, "unsupported"])]
        done = set(old[[*family.problems.FIELDS, "kernel"]].itertuples(index=False, name=None))
    groups = pool.by_group()
    support = {g: family.kernels.support_arrays(ks) for g, ks in groups.items()}
    masks, skipped, total = {}, [], 0
    for p in problems:
        ks = groups.get(p.group, [])
        mask, reason = family.kernels.support_mask(p, support[p.group], op) if ks else \
            ([], f"no kernel for its group {p.group!r} in the pool")
        if not np.any(mask):
            skipped.append((p.describe(), reason))
            continue
        total += len(ks)
        masks[p.key()] = np.asarray(mask, dtype=bool)
    return SweepPlan(op, arch, bcfg, pool, [p for p in problems if p.key() in masks], out, done, groups, masks,
                     skipped, total)


def run(cfg: Any, ctx: Context) -> dict:
    """Measure the pool on the problem set through the backend and append to the dataset
    (``sweep.strategy=full``; other strategies measure a budget in rounds)."""
    from ckheur.backends import make_backend
    from ckheur.dataset import kernel_columns

    plan = plan_sweep(cfg)
    if str(cfg.sweep.strategy) != "full":
        from ckheur.stages.active_sweep import run_rounds

        return run_rounds(cfg, ctx, plan)
    if cfg.sweep.budget is not None:
        raise StageError("sweep.budget applies to sweep.strategy=active, random or stratified; "
                         "sweep.strategy=full measures every pair")
    op, arch, bcfg, st, out = plan.op, plan.arch, plan.backend, cfg.sweep, plan.out
    todo, unsupported = [], []
    for p in plan.problems:
        key = p.key()
        for k, ok in zip(plan.groups[p.group], plan.masks[key]):
            if (*key, k.name) not in plan.done:
                (todo if ok else unsupported).append((p, k))
    total_pairs, skipped = plan.total_pairs, plan.skipped
    print(f"sweep: {op['family']}/{op['direction']} {op['dtype']} on {arch['name']} via backend={bcfg['name']}: "
          f"{len(plan.problems) + len(skipped)} problems x pool {len(plan.pool.kernels)} -> {total_pairs} pairs; "
          f"{total_pairs - len(todo) - len(unsupported)} already in {out}, {len(todo)} to measure"
          + (f", {len(unsupported)} unsupported by their kernel (recorded, not measured)" if unsupported else ""))
    print_skipped(skipped)

    measurer = make_backend(bcfg, op, arch)
    pcols = {p.key(): p.to_dict() for p in plan.problems}
    kcols = {k.name: kernel_columns(k, op["family"]) for k in plan.pool.kernels}
    progress = Progress(len(todo) + len(unsupported), st.progress, st.log_every_s)
    t0 = time.perf_counter()
    batches = [(b, _not_run) for b in _chunks(unsupported, 50_000)] + \
        measure_batches(todo, measurer)
    try:
        statuses, interrupted = record_batches(out, batches, measurer, op, arch, pcols, kcols, progress)
    finally:
        measurer.close()
    wall = time.perf_counter() - t0
    measured = sum(statuses.values())
    summary = {"dataset": str(out), "strategy": "full", "backend": measurer.name,
               "problems": len(plan.problems) + len(skipped),
               "problems_skipped": [{"problem": d, "reason": r} for d, r in skipped],
               "pool": len(plan.pool.kernels), "pairs_total": total_pairs,
               "pairs_skipped_existing": total_pairs - len(todo) - len(unsupported),
               "attempts": measured, "by_status": dict(statuses), "wall_s": round(wall, 3),
               "measurements_per_s": round(measured / wall, 1) if wall > 0 else None,
               "interrupted": interrupted}
    _print_summary(summary)
    ctx.output_dir.mkdir(parents=True, exist_ok=True)
    (ctx.output_dir / "sweep_summary.json").write_text(json.dumps(summary, indent=2))
    if interrupted:
        print(f"sweep interrupted: {measured} attempts saved; run the same command again to resume", file=sys.stderr)
        raise SystemExit(130)
    return summary


def print_skipped(skipped: list) -> None:
    """Print the problems no kernel can run (the first ten)."""
    for desc, reason in skipped[:10]:
        print(f"sweep: skipped {desc}: {reason}")
    if len(skipped) > 10:
        print(f"sweep: ... {len(skipped) - 10} more problems skipped (sweep_summary.json lists them)")


def _print_summary(s: dict) -> None:
    from ckheur.display import format_table

    rows = [(k, v) for k, v in sorted(s["by_status"].items())] or [("(nothing to measure)", 0)]
    print(format_table(["status", "attempts"], rows))
    print(f"measured {s['attempts']} pairs in {s['wall_s']:.2f}s ({s['measurements_per_s'] or 0:,.0f}/s); "
          f"skipped {s['pairs_skipped_existing']} already measured; data: {s['dataset']}")
