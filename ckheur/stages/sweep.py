"""stage=sweep: measure every legal kernel on every problem (sweep.strategy=full), or a budget in
rounds (active, random, stratified: ckheur.stages.active_sweep); append, resume, lose nothing."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Sequence


from ckheur.files import write_file
from ckheur.stages import Context, StageError
from ckheur.stages.measuring import Progress, chunks, measure_batches, plan_sweep, print_skipped, record_batches


def _not_run(pairs: Sequence[tuple[Any, Any]]) -> Any:
    """Results for pairs the kernel cannot run: recorded as unsupported, never measured."""
    from ckheur.backends import Results

    res = Results()
    for p, k in pairs:
        res.add(float("nan"), "unsupported", f"{k.name} cannot run {p.describe()} (a tile does not divide "
                "a dimension the kernel does not pad, or a contiguous dimension is too short)")
    return res


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
    batches = [(b, _not_run) for b in chunks(unsupported, 50_000)] + \
        measure_batches(todo, measurer)
    try:
        statuses, interrupted = record_batches(out, batches, measurer, op, arch, pcols, kcols, progress)
    finally:
        progress.close()
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
    write_file(ctx.output_dir / "sweep_summary.json", json.dumps(summary, indent=2))
    if interrupted:
        print(f"sweep interrupted: {measured} attempts saved; run the same command again to resume", file=sys.stderr)
        raise SystemExit(130)
    return summary


def _print_summary(s: dict) -> None:
    from ckheur.display import format_table

    rows = [(k, v) for k, v in sorted(s["by_status"].items())] or [("(nothing to measure)", 0)]
    print(format_table(["status", "attempts"], rows))
    print(f"measured {s['attempts']} pairs in {s['wall_s']:.2f}s ({s['measurements_per_s'] or 0:,.0f}/s); "
          f"skipped {s['pairs_skipped_existing']} already measured; data: {s['dataset']}")
