"""stage=predict: ranked kernels for a problem (fields or a MIOpenDriver line) or a whole set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain
from ckheur.stages.common import problem_from_cfg, selector_from_cfg, tuning_db_from_cfg

OUTPUTS = ("predictions.csv",)  # for a problem set without predict.output


def set_named_on_command_line() -> bool:
    """Whether the command line chose the problem set (problems=..., problems.*=...): without it a
    command-line predict refuses rather than rank the op's whole default set. Outside a Hydra run
    (Python callers composing their own config) the composed set is what was asked for."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return True
    return any(o.lstrip("+~").startswith("problems") for o in HydraConfig.get().overrides.task)


def run(cfg: Any, ctx: Context) -> dict:
    """Print the top-k kernels for one problem, or write predictions for a problem set."""
    from ckheur.display import format_table
    from ckheur.job import Job
    from ckheur.selection.predicting import RELATIVE_ONLY, relative_only, write_predictions
    from ckheur.problems import load_problem_set
    from ckheur.progress import Progress

    job = Job.from_config(cfg)
    k = int(cfg.predict.k)
    if k < 1:
        raise StageError(f"predict.k={k}: the number of kernels to print must be >= 1")
    single = problem_from_cfg(cfg, job)  # a bad problem line is refused before anything is loaded
    tuning_db, db_line = tuning_db_from_cfg(cfg, job, cfg.predict.tuning_db)
    if cfg.predict.find_db:
        print(f"predict: loading the model and the find-db {cfg.predict.find_db} ...", flush=True)
    selector, label = selector_from_cfg(cfg, job, tuning_db=tuning_db, find_db=cfg.predict.find_db)
    print(f"predict: {db_line}")
    refused = selector.find_db.refused if selector.find_db is not None else {}
    if refused:
        named = ", ".join(f"{s} {n}" for s, n in sorted(refused.items())[:5]) + (" ..." if len(refused) > 5 else "")
        print(f"predict.find_db: {sum(refused.values())} entries of solvers outside this model's pool are never "
              f"answered ({named})")
    if cfg.predict.explain:
        if single is None:
            raise StageError("predict.explain=true explains one problem: give problem=\"<MIOpenDriver line>\" or "
                             "problem.<field>=...")
        return _explain(selector, single, label, cfg.predict.find_db, job)
    if single is not None:
        ranked = selector.rank(single, k=k)
        chosen = selector.select(single)
        relative = relative_only(selector)
        rows = [(i + 1, name, f"{tf:.2f}", f"{single.flops / (tf * 1e12) * 1e3:.4g}" if tf > 0 and not relative else "-")
                for i, (name, tf) in enumerate(ranked)]
        print(f"{job.label}: {single.describe()} ({single.flops / 1e9:.3f} GFLOP)")
        print(f"ranked by: {label}")
        print(format_table(["rank", "kernel", "analytic TFLOPS (relative only)" if relative else "pred TFLOPS",
                            "pred latency ms"], rows))
        if relative:
            print(f"note: {RELATIVE_ONLY}")
        where = {"tuning_db": selector.tuning_db, "find_db": selector.find_db}.get(chosen.source)
        print(f"selected: {chosen.kernel} (tier: {chosen.source}"
              + (f", measured {chosen.latency_ms:.4g} ms in {where.path}" if where is not None else "") + ")")
        return {"problem": single.to_dict(), "ranking": ranked, "ranked_by": label, "selected": chosen.kernel,
                "tier": chosen.source}
    if not set_named_on_command_line():
        example = "problem=\"convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1\" or " \
            if hasattr(job.family.problems, "from_text") else ""
        raise StageError(f"stage=predict needs a problem: give one as {example}problem.<field>=..., or a whole set "
                         f"as problems=<set> (e.g. problems={cfg.problems.name}, this op's default)")
    problems = load_problem_set(plain(cfg.problems), job.family, job.direction, job.dtype)
    out = Path(cfg.predict.output) if cfg.predict.output else ctx.output_dir / "predictions.csv"
    earlier = out.exists()  # (write_predictions refuses any file there but earlier predictions)
    tiers = write_predictions(selector, problems, out, k=k, label=label, progress=Progress(
        len(problems), cfg.predict.progress, float(cfg.predict.log_every_s), prefix="predict", unit="problem"))
    print(f"predict: top-{k} kernels for {len(problems)} problems of {cfg.problems.name} (ranked by {label}) -> {out}"
          + (" (the earlier predictions there replaced)" if earlier else ""))
    print(f"predict: selected by tier: {', '.join(f'{t} {n}' for t, n in sorted(tiers.items())) or 'none'}")
    if relative_only(selector):
        print(f"note: {RELATIVE_ONLY}")
    return {"output": str(out), "problems": len(problems), "ranked_by": label, "tiers": dict(tiers)}


def _explain(selector: Any, problem: Any, label: str, find_db: str | None, job: Any) -> dict:
    """Print every candidate of one problem beside the pick (``ckheur.selection.predicting.explain``)."""
    from dataclasses import asdict

    from ckheur.display import format_table
    from ckheur.selection.predicting import explain

    rows = explain(selector, problem, find_db=find_db)
    ms = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    applies = {True: "yes", False: "no", None: "?"}
    print(f"{job.label}: {problem.describe()} ({problem.flops / 1e9:.3f} GFLOP)")
    print(f"ranked by: {label}")
    print(format_table(["", "kernel", "model rank", "score", "pred ms", "tuning db ms", "find-db ms", "applies", "why"],
                       [("*" if r.picked else "", r.kernel, r.rank or "-", "-" if r.score is None else f"{r.score:.4g}",
                         ms(r.pred_ms), ms(r.tuned_ms) if r.tuned_status in ("", "ok") else r.tuned_status,
                         ms(r.find_db_ms), applies[r.applies], r.why) for r in rows]))
    print(f"selected: {rows[0].kernel} (tier: {rows[0].tier})")
    return {"problem": problem.to_dict(), "ranked_by": label, "selected": rows[0].kernel, "tier": rows[0].tier,
            "candidates": [asdict(r) for r in rows]}
