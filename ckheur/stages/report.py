"""stage=report: a network's layers (any problem set; an ONNX model, a MIOpen log, a PyTorch module)
with ckheur's pick and tier, MIOpen's own answer, their times, the gain and a tuning plan."""

from __future__ import annotations

from typing import Any

from ckheur.stages import Context, StageError, plain

OUTPUTS = ("network_report.md", "network_layers.csv", "network_report.json", "network_report.png")


def run(cfg: Any, ctx: Context) -> dict:
    """Write network_report.md / .csv / .json / .png into the run folder and print the totals and plan."""
    from ckheur.display import format_table
    from ckheur.job import Job
    from ckheur.evaluation.network_report import (PlanModel, compares_miopen, expected_efficiency, layer_rows,
                                                  runs_text, total_lines, totals, write_report)
    from ckheur.selection.predicting import bundle_dir
    from ckheur.problems import layer_names, load_weighted_set
    from ckheur.stages.common import selector_from_cfg, tuning_db_from_cfg

    rc = cfg.report
    job = Job.from_config(cfg)
    if rc.candidates < 1 or rc.repeats < 1 or rc.overhead_s < 0:
        raise StageError(f"report.candidates={rc.candidates}, report.repeats={rc.repeats}: each must be >= 1, and "
                         f"report.overhead_s={rc.overhead_s} >= 0")
    miopen = compares_miopen(job.family)
    for key in ("find_db", "tunanet"):
        if rc[key] and not miopen:
            raise StageError(f"report.{key}: MIOpen's answers name MIOpen's solvers (op=miopen/<direction>); "
                             f"{job.label} ranks {job.family.name} kernels")
    tunanet = None
    if rc.tunanet:
        from ckheur.integrations.miopen.tunanet import TunaNetRanker, load_tunanet

        tunanet_net = load_tunanet(rc.tunanet, job.arch_name)
    weighted = load_weighted_set(plain(cfg.problems), job.family, job.direction, job.dtype)
    print(f"report: {len(weighted)} layers of {cfg.problems.name}; loading the model"
          + (f" and the find-db {rc.find_db} (a first read of a whole file takes a while; later ones are cached)"
             if rc.find_db else "") + " ...", flush=True)
    tuning_db, db_line = tuning_db_from_cfg(cfg, job, rc.tuning_db)
    selector, label = selector_from_cfg(cfg, job, model_dir=rc.model_dir, tuning_db=tuning_db, find_db=rc.find_db)
    print(f"report: {db_line}")
    if rc.tunanet:
        tunanet = TunaNetRanker(tunanet_net, selector.kernels, job.direction, job.dtype)
    model_dir = bundle_dir(job, models=cfg.paths.models, sim_models=cfg.paths.sim_models,
                           explicit=rc.model_dir or cfg.predict.model_dir)
    eff, source = expected_efficiency(model_dir if selector.booster is not None else None)
    if eff is None:
        eff, source = float(rc.assumed_efficiency), f"assumed (report.assumed_efficiency; {source})"
    plan = PlanModel(eff, source, int(rc.candidates), int(rc.repeats), float(rc.overhead_s))
    names = layer_names(plain(cfg.problems), job.family, job.direction, job.dtype)
    rows = layer_rows(selector, weighted, plan, tunanet, names)
    tot = totals(rows, miopen)
    paths = [str(s.get("path") or s.get("module")) for s in plain(cfg.problems)["sources"] if s.get("path") or s.get("module")]
    header = {"problems": f"{cfg.problems.name} ({', '.join(paths)})" if paths else str(cfg.problems.name),
              "op": job.label, "ranked by": label}
    if miopen:
        header["MIOpen's answer"] = ", ".join(s for s in (f"find-db {rc.find_db}" if rc.find_db else "",
                                                           f"TunaNet {rc.tunanet}" if rc.tunanet else "") if s) or "none given"
    written = write_report(ctx.output_dir, rows, tot, header, plan)
    print(f"report: {job.label}, {tot['layers']} layers ({runs_text(rows, tot)} per run) of "
          f"{cfg.problems.name}, ranked by {label}")
    print("report: ms: m measured, p predicted by the model" + ("; MIOpen's time is measured or unknown" if miopen else ""))
    theirs = ["MIOpen", "ms", "gain ms"] if miopen else []
    print(format_table(["layer", "problem", "weight", "pick", "tier", "ms", *theirs, "plan"],
                       [(r["layer"], r["problem"], r["weight"], r["pick"] or "-", r["tier"],
                         f"{r['pick_ms']:.4g} {r['pick_time'][0]}" if r["pick_ms"] is not None else "-",
                         *([r["miopen"] or "-", f"{r['miopen_ms']:.4g} m" if r["miopen_ms"] is not None else r["miopen_time"],
                            f"{r['gain_vs_miopen_ms']:.4g} {r['gain_time'][0]}" if r["gain_vs_miopen_ms"] is not None
                            else "-"] if miopen else []),
                         r.get("plan", "-")) for r in rows]))
    for line in total_lines(tot):
        print(f"report: {line}")
    print(f"report: tuning plan: {sum(1 for r in rows if r.get('plan'))} layers, expected (predicted) saving "
          f"{tot['expected_saving_ms']:.4g} ms per run for {tot['measure_s']:.4g} s of measuring")
    print(f"report: -> {', '.join(str(p) for p in written)}")
    return {"totals": tot, "layers": rows, "files": [str(p) for p in written]}
