"""stage=tune: time the model's top-k kernels of each problem into a tuning database
(``ckheur.sweeping.tune``), for one problem (problem.<field>=... or problem="<MIOpenDriver
line>") or a problem set."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ckheur.files import write_file
from ckheur.stages import Context, plain

OUTPUTS = ("tune_summary.json",)


def run(cfg: Any, ctx: Context) -> dict:
    """Measure the model's top-k kernels per problem through the backend into the tuning database."""
    from ckheur.data.dataset import SIMULATED
    from ckheur.job import Job
    from ckheur.problems import load_problem_set
    from ckheur.stages.common import db_dir, problem_from_cfg, selector_from_cfg
    from ckheur.sweeping import tune

    job, tc = Job.from_config(cfg), cfg.tune
    selector, label = selector_from_cfg(cfg, job, tc.model_dir)
    single = problem_from_cfg(cfg, job)
    problems = [single] if single is not None else load_problem_set(plain(cfg.problems), job.family, job.direction, job.dtype)
    db = db_dir(cfg, job)
    simulated = str(cfg.backend.name) == SIMULATED
    if simulated and not tc.db:  # simulated times go beside the op's database, never served as measurements by default
        db = Path(cfg.paths.tuning) / "simulated" / job.slug
    summary = tune(selector, problems, db, job, backend=plain(cfg.backend), top_k=int(tc.top_k),
                   progress=str(tc.progress), log_every_s=float(tc.log_every_s), claim_poll_s=float(tc.claim_poll_s),
                   label=label, lease_s=float(cfg.db.lease_s), max_attempts=int(cfg.db.max_attempts))
    _print(summary)
    if simulated:
        print(f"tune: SIMULATED times (backend {SIMULATED}) in {summary['database']}: not measurements, so stage=predict "
              f"and stage=report do not serve them unless named (predict.tuning_db={summary['database']}); a real "
              "backend (backend=hip, command, miopen_driver, replay) writes the op's database, which they serve")
    else:
        print(f"tune: measurements in {summary['database']}: stage=predict and stage=report of this op answer these "
              "problems from them (tier tuning_db; predict.tuning_db=none turns that off); stage=train can learn "
              f"from them (data.paths=[{summary['database']}])")
    write_file(ctx.output_dir / "tune_summary.json", json.dumps(summary, indent=2))
    if summary["interrupted"]:
        print(f"tune interrupted: {summary['attempts']} attempts saved; run the same command again to resume",
              file=sys.stderr)
        raise SystemExit(130)
    return summary


def _print(s: dict) -> None:
    from ckheur.display import format_table

    if "problem" in s:
        one = s["problem"]
        rows = [(rank, name, "-" if got is None else (f"{got:.4g}" if isinstance(got, float) else got))
                for rank, name, got in one["ranking"]]
        print(f"tune: {one['problem']}")
        print(format_table(["model rank", "kernel", "measured ms"], rows))
        best = one["selected"]
        print(f"tune: selected {best[0]} ({best[1]:.4g} ms, measured)" if best else "tune: no kernel ran")
    rows = [(st, n) for st, n in sorted(s["by_status"].items())] or [("(nothing to measure)", 0)]
    print(format_table(["status", "attempts"], rows))
    speed = s["mean_speedup_over_model_top1"]
    print(f"tune: {s['problems_tuned']}/{s['problems']} problems have a measured pick; {s['attempts']} pairs timed "
          f"in {s['wall_s']:.2f}s, {s['pairs_already_in_db']} already in the database; the model's first choice "
          f"was the fastest measured on {s['model_top1_was_fastest']}"
          + (f"; measured picks are {speed:.3f}x faster than it on average" if speed else "")
          + f"; database: {s['database']}")
    if s["attempts"]:
        print(f"tune: {s['attempts']} runs against {s['exhaustive_runs']} for an exhaustive search of the same "
              f"problems (every candidate of the pool: {s['exhaustive_runs'] / s['attempts']:.1f}x as many)")
