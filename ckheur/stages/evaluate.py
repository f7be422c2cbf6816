"""stage=evaluate: efficiency of a model's picks against the measured oracle on unseen problems,
with slices, baselines, an optional acceptance gate, and a report (markdown, JSON, CSV, PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain

OUTPUTS = ("per_problem.csv", "metrics.json", "report.md", "efficiency_cdf.png", "predicted_vs_measured.png",
           "slices.png")


def _eval_data(cfg: Any, job: Any) -> list[Path]:
    """Datasets to evaluate on; the default set is swept first when the backend is the simulator
    and it models the family's kernels."""
    from ckheur.data.dataset import dataset_dir

    if cfg.data.eval_paths:
        from ckheur.measurements import resolve

        paths = [resolve(p) for p in cfg.data.eval_paths]
    else:
        name = cfg.evaluate.problems
        paths = [dataset_dir(cfg.paths.data, job.op, job.arch_name, name)]
        if not paths[0].exists() and cfg.backend.name == "sim" and job.family.analytic:
            from omegaconf import open_dict

            from ckheur.problems import set_node
            from ckheur.stages.common import plan_from_cfg
            from ckheur.sweeping import sweep_all

            print(f"evaluate: no dataset for problems={name}; measuring it through backend=sim first")
            sub = cfg.copy()
            with open_dict(sub):
                sub.problems = set_node(name)
            summary = sweep_all(plan_from_cfg(sub), progress=str(cfg.sweep.progress))
            print(f"evaluate: measured {summary['attempts']} pairs through backend=sim into {summary['dataset']}")
    missing = [str(p) for p in paths if not p.exists()]
    if missing and not job.family.analytic:  # no simulator measures them: real data only
        raise StageError(f"evaluation data not found: {', '.join(missing)}; {job.family.name} ops evaluate on "
                         "measurements (no simulator times their kernels): set data.eval_paths=[...], a dataset "
                         "stage=import wrote from a find-db or one a sweep with a real backend measured")
    if missing:
        raise StageError(f"evaluation data not found: {', '.join(missing)}; sweep the problems first "
                         f"(stage=sweep problems={cfg.evaluate.problems}) or set data.eval_paths=[...]")
    return paths


def training_data_evaluated(model_dir: Path, paths: list[Path]) -> list[str]:
    """The evaluation datasets that the bundle was trained on: same content (sha256) as a dataset its
    train_manifest.json lists."""
    from ckheur.learn.bundle import resolve_model_dir
    from ckheur.evaluation.seen import manifest_datasets
    from ckheur.parts import sha256_of

    trained = {d["sha256"] for d in manifest_datasets(resolve_model_dir(model_dir))}
    return [str(p) for p in paths if trained and sha256_of(p) in trained]


def _seen_unseen(model_dir: Path, selector: Any, job: Any, scored: Any, paths: list, tol: float) -> dict:
    """{"seen_unseen": ...} when some evaluated problems are in the bundle's training data, else {}."""
    from ckheur.learn.bundle import resolve_model_dir
    from ckheur.evaluation.seen import seen_mask, seen_unseen, training_keys

    keys, sources = training_keys(resolve_model_dir(model_dir), job.family, (selector.answers or {}).keys(), paths,
                                  job.arch_name)
    mask = seen_mask(scored.rows, job.family, keys)
    return {"seen_unseen": seen_unseen(scored, mask, sources, tol)} if mask.any() else {}


def run(cfg: Any, ctx: Context) -> dict:
    """Evaluate the model for op/dtype/arch on held-out measurements; write the report."""
    from ckheur.data.dataset import keep_shard, read_dataset
    from ckheur.job import Job
    from ckheur.evaluation.scoring import COLUMNS, check_options, evaluate
    from ckheur.evaluation.report import write_report
    from ckheur.learn.bundle import resolve_model_dir
    from ckheur.selection.predicting import bundle_selector, nearest_bundle, served_without_bundle
    from ckheur.selection.selector import Selector
    from ckheur.stages.common import note_available

    job, ev = Job.from_config(cfg), cfg.evaluate
    note_available(job)
    top_k = check_options(list(ev.top_k), float(ev.tie_tolerance))
    if ev.tunanet:  # checked and read before any data is swept or read
        from ckheur.integrations.miopen.tunanet import load_tunanet

        if job.family.name != "miopen":
            raise StageError(f"evaluate.tunanet: TunaNet ranks MIOpen's solvers (op=miopen/...), not {job.family.name}")
        net = load_tunanet(ev.tunanet, job.arch_name)
    paths = _eval_data(cfg, job)
    # The model is found and checked before the data is read (which can take minutes).
    if ev.model_dir:
        model_dir = Path(ev.model_dir)
    else:  # the default bundle depends on the data's kind: read only that column first
        backends = read_dataset(paths, dedupe=False, columns=["backend"])["backend"]
        model_dir = Path(cfg.paths.sim_models if "sim" in set(backends) else cfg.paths.models) / job.model_name
    if ev.baseline and not Path(ev.baseline).is_dir():
        raise StageError(f"evaluate.baseline={ev.baseline}: no model bundle there")
    cascade = {} if ev.cascade else {"cascade_threshold": 10**9}
    served = None
    if not ev.model_dir and not job.family.analytic and not resolve_model_dir(model_dir).is_dir():
        # what stage=predict serves a GPU without a bundle: the nearest GPU's or the model across GPUs
        served = served_without_bundle(job, cfg.paths.models, **cascade)
    if served is not None:
        selector, model_dir = served
        print(f"evaluate: {job.arch_name} has no bundle of its own: evaluating what stage=predict serves it, "
              f"{selector.label}")
    else:
        selector = bundle_selector(job, resolve_model_dir(model_dir), f"evaluate.model_dir={model_dir}", **cascade)
    baselines = {}  # the analytic model (for families ckheur.sim models) and CK model folders
    if selector.family.analytic:
        baselines["analytic model"] = Selector.analytic(selector.kernels, job.arch, job.direction, job.dtype, op=job.op)
    if ev.ck_models:
        from ckheur.integrations.ck.model_folder import CKModel, CKSelector

        if job.family.name != "grouped_conv":
            raise StageError(f"evaluate.ck_models: CK's dispatcher models rank grouped convolutions, not {job.family.name}")
        for folder in ev.ck_models:
            ck = CKSelector(CKModel.load(folder, job.arch), selector)
            baselines[ck.label] = ck
    if ev.tunanet:
        from ckheur.integrations.miopen.tunanet import TunaNetRanker

        baselines["TunaNet"] = TunaNetRanker(net, selector.kernels, job.direction, job.dtype)
    served_near = served is not None and not selector.across_gpus  # the nearest GPU's bundle serves
    near = nearest_bundle(job, cfg.paths.models) if ev.nearest_gpu and not served_near else None
    if near is not None:
        baselines[f"{near[1]} bundle as is (the nearest other GPU with one)"] = Selector.load(
            near[0], kernels=[k.name for k in selector.kernels])
    gate_against = (bundle_selector(job, resolve_model_dir(ev.baseline), f"evaluate.baseline={ev.baseline}", **cascade)
                    if ev.baseline else None)  # ranked as the model it gates is, for the job's device
    fields = list(job.family.problems.FIELDS)
    df = keep_shard(read_dataset(paths, columns=[*COLUMNS, *fields]), plain(cfg.data.shard), job.family)
    metrics, scored = evaluate(
        selector, df, job, top_k=top_k, tie_tolerance=float(ev.tie_tolerance),
        exclude_suspect=bool(cfg.data.exclude_suspect), baselines=baselines, gate_against=gate_against,
        gate={"mean_pts": ev.gate_mean_pts, "median_pts": ev.gate_median_pts, "p10_pts": ev.gate_p10_pts,
              "max_loss_pts": ev.gate_max_loss_pts}, progress=str(ev.progress), log_every_s=float(ev.log_every_s))
    metrics = {"model_dir": str(model_dir), "data": [str(p) for p in paths], **metrics,
               "subject": job.label,
               "training_data": training_data_evaluated(model_dir, paths)}
    if metrics["training_data"]:
        print(f"evaluate: WARNING: {', '.join(metrics['training_data'])} is the model's own training data "
              "(same sha256 as in its train_manifest.json): these figures are not held-out")
    if "gate" in metrics:
        metrics["gate"] = {"baseline": str(ev.baseline), **metrics["gate"]}
    metrics.update(_seen_unseen(model_dir, selector, job, scored, paths, float(ev.tie_tolerance)))
    write_report(ctx.output_dir, scored, metrics, bool(ev.plots))
    _print(metrics)
    if "gate" in metrics and not metrics["gate"]["passed"]:
        print(f"evaluate: acceptance gate FAILED against {ev.baseline}: {'; '.join(metrics['gate']['failures'])}")
        raise SystemExit(1)
    return metrics


def _print(m: dict) -> None:
    from ckheur.display import format_table
    from ckheur.evaluation.report import beside_rows, censored_cells, pct, summary_rows

    print(f"evaluate: {m['problems_evaluated']} problems ({m['problems_skipped']} skipped), {m['data_kind']} data, "
          f"model {m['model_dir']}")
    print(format_table(["", "mean", "median", "P10", "min", "time-weighted", "kernels timed", "catastrophic (<50%)"],
                       summary_rows(m)))
    print(f"top-1 exact {pct(m['top1'])}, tie-aware (within {pct(m['tie_tolerance'])}) {pct(m['top1_tie_aware'])}, "
          f"within 1% {pct(m['within_1pct'])}, oracle in top-5 {pct(m['oracle_in_top5'])}, "
          f"failed picks {pct(m['pick_failed'])}")
    if m["data_kind"] == "simulated" and "analytic model" in m["baselines"]:
        print("evaluate: note: the simulator is the analytic model plus noise, so on simulated data the analytic "
              "model is the ceiling; a learned model can only tie it here (real data: docs/results.md)")
    if m.get("remembered_problems"):
        print(f"evaluate: {m['remembered_problems']} of these problems are in the model's training data: it ranks "
              f"their fastest measured solver first (train.remember), so on them it scores as a lookup does")
    if "seen_unseen" in m:
        from ckheur.evaluation.seen import describe

        print(f"evaluate: problems in the model's training data ({', '.join(m['seen_unseen']['from'])}) and not: "
              f"{describe(m['seen_unseen'])}")
    if "censored" in m:
        print("censored candidates (find-db terms; open: pick among all, listed: among the listed only):")
        print(format_table(["", "problems", "top-1", "tie-aware", "mean slowdown", "outside listed", "eff mean", "P10",
                            "time-weighted"],
                           [(proto, *censored_cells(r)) for proto, r in m["censored"]["all"].items()]))
    for other, beside in m.get("censored_beside", {}).items():
        print(f"beside {other}, on the {beside['problems']} problems both ranked:")
        print(format_table(["", "protocol", "problems", "top-1", "tie-aware", "mean slowdown", "outside listed",
                            "eff mean", "P10", "time-weighted"],
                           beside_rows(beside, lambda who, proto, cells: (who, proto, *cells))))
