"""stage=sweep: measure every legal kernel on every problem (sweep.strategy=full), or a budget in
rounds (active, random, stratified); append, resume, lose nothing (``ckheur.sweeping``)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

from ckheur.files import write_file
from ckheur.stages import Context, StageError, plain
from ckheur.stages.common import plan_from_cfg

OUTPUTS = ("sweep_summary.json", "active_sweep.png")


def run(cfg: Any, ctx: Context) -> dict:
    """Measure the pool on the problem set through the backend and append to the dataset."""
    from ckheur.sweeping import RoundOptions, plot_learning_curve, sweep_all, sweep_rounds
    from ckheur.sweeping.rounds import SERVED, served_ranker

    st = cfg.sweep
    strategy = str(st.strategy)
    for key, value in (("sweep.budget", st.budget), ("sweep.active.ranker", st.active.ranker)):
        if strategy == "full" and value is not None:  # given, it would be silently ignored
            raise StageError(f"{key} applies to sweep.strategy=active, random or stratified; "
                             "sweep.strategy=full measures every pair")
    options = None if strategy == "full" else RoundOptions(
        strategy=strategy, budget=st.budget, min_gain=float(st.min_gain), **plain(st.active),
        threads=int(cfg.model.threads), partial=str(cfg.train.partial))
    if options is not None:
        options.check()
    plan = plan_from_cfg(cfg)
    if options is not None and options.ranker == SERVED:  # what stage=predict serves this device
        path, why = served_ranker(plan.job, models=cfg.paths.models, sim_models=cfg.paths.sim_models)
        print(f"sweep: sweep.active.ranker={SERVED} ranks with {why}")
        options = replace(options, ranker=path)
    if options is not None and isinstance(plan.out, str):
        raise StageError(f"sweep.strategy={strategy} keeps its rounds in a dataset folder; into a database "
                         "(sweep.output=<URL>) use sweep.strategy=full")
    if options is None:
        queue = {"lease_s": float(cfg.db.lease_s), "max_attempts": int(cfg.db.max_attempts)} \
            if isinstance(plan.out, str) else {}
        summary = sweep_all(plan, progress=str(st.progress), log_every_s=float(st.log_every_s), **queue)
        _print_summary(summary)
    else:
        summary = sweep_rounds(plan, options, progress=str(st.progress), log_every_s=float(st.log_every_s))
        plot_learning_curve(ctx.output_dir / "active_sweep.png", summary, plan.job.label)
        print(f"sweep: {summary['pairs_measured']} pairs measured this run in {summary['wall_s']:.1f}s; "
              f"{summary['pairs_spent']} of {summary['budget_pairs']} budget pairs spent over "
              f"{len(summary['rounds'])} rounds" + (f"; stopped: {summary['stopped']}" if summary["stopped"] else ""))
    write_file(ctx.output_dir / "sweep_summary.json", json.dumps(summary, indent=2))
    if summary["interrupted"]:
        print(f"sweep interrupted: {summary.get('attempts', summary.get('pairs_measured'))} attempts saved; run the "
              "same command again to resume", file=sys.stderr)
        raise SystemExit(130)
    return summary


def _print_summary(s: dict) -> None:
    from ckheur.display import format_table

    rows = [(k, v) for k, v in sorted(s["by_status"].items())] or [("(nothing to measure)", 0)]
    print(format_table(["status", "attempts"], rows))
    ok = s["by_status"].get("ok", 0)
    print(f"measured {ok} of {s['attempts']} pairs in {s['wall_s']:.2f}s ({s['measurements_per_s'] or 0:,.0f}/s"
          f"{'; the others: their status above' if ok < s['attempts'] else ''}); "
          f"skipped {s['pairs_skipped_existing']} already measured; data: {s['dataset']}")
