"""stage=evaluate: efficiency of a model's picks against the measured oracle on unseen problems,
with slices, baselines, an optional acceptance gate, and a report (markdown, JSON, CSV, PNG)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ckheur.stages import Context, StageError, plain

def _eval_data(cfg: Any, ctx: Context, op: dict, arch: dict) -> list[Path]:
    """Datasets to evaluate on; the default set is swept first when the backend is the simulator."""
    from ckheur.dataset import dataset_dir

    if cfg.data.eval_paths:
        from ckheur.measurements import resolve

        paths = [resolve(p) for p in cfg.data.eval_paths]
    else:
        name = cfg.evaluate.problems
        paths = [dataset_dir(cfg.paths.data, op, arch["name"], name)]
        if not paths[0].exists() and cfg.backend.name == "sim":
            from omegaconf import open_dict

            from ckheur.problems import set_node
            from ckheur.stages import sweep

            print(f"evaluate: no dataset for problems={name}; measuring it through backend=sim first")
            sub = cfg.copy()
            with open_dict(sub):
                sub.problems = set_node(name)
            from ckheur.files import make_folder

            sweep.run(sub, Context(output_dir=make_folder(ctx.output_dir / "sweep_eval", "run folder"),
                                   choices=ctx.choices))
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise StageError(f"evaluation data not found: {', '.join(missing)}; sweep the problems first "
                         f"(stage=sweep problems={cfg.evaluate.problems}) or set data.eval_paths=[...]")
    return paths


def _scored(df: Any, selector: Any, direction: str, top_k: Sequence[int], exclude_suspect: bool,
            progress: Any = None) -> Any:
    """Each measured problem's pick by ``selector`` (``ckheur.models.evaluation``), counting progress."""
    from ckheur.models.evaluation import group_by_problem, score_problems

    rows = group_by_problem(df, selector.family.name, exclude_suspect)
    return score_problems(rows, selector, direction, top_k, progress=None if progress is None else progress.update)


def run(cfg: Any, ctx: Context) -> dict:
    """Evaluate the model for op/dtype/arch on held-out measurements; write the report."""
    from ckheur.dataset import keep_shard, read_dataset
    from ckheur.models.evaluation import COLUMNS, acceptance_gate, evaluation_metrics
    from ckheur.models.selector import Selector
    from ckheur.ops import get_family
    from ckheur.progress import Progress

    op, arch = plain(cfg.op), plain(cfg.arch)
    top_k = sorted({int(k) for k in cfg.evaluate.top_k})
    if any(k < 1 for k in top_k):
        raise StageError(f"evaluate.top_k={list(cfg.evaluate.top_k)}: each k must be >= 1")
    tol = float(cfg.evaluate.tie_tolerance)
    if not 0 <= tol < 1:
        raise StageError(f"evaluate.tie_tolerance={tol}: must be in [0, 1)")
    exclude_suspect = bool(cfg.data.exclude_suspect)
    paths = _eval_data(cfg, ctx, op, arch)
    # The model is found and checked before the data is read (which can take minutes).
    if cfg.evaluate.model_dir:
        model_dir = Path(cfg.evaluate.model_dir)
    else:  # the default bundle depends on the data's kind: read only that column first
        backends = read_dataset(paths, dedupe=False, columns=["backend"])["backend"]
        model_dir = Path(cfg.paths.sim_bundles if "sim" in set(backends) else cfg.paths.bundles) / op["model_name"]
    if cfg.evaluate.baseline and not Path(cfg.evaluate.baseline).is_dir():
        raise StageError(f"evaluate.baseline={cfg.evaluate.baseline}: no model bundle there")
    selector = Selector.load(model_dir, **({} if cfg.evaluate.cascade else {"cascade_threshold": 10**9}))
    ck_models = []
    if cfg.evaluate.ck_models:
        from ckheur.models.ck_format import CKModel, CKSelector

        if op["family"] != "grouped_conv":
            raise StageError(f"evaluate.ck_models: CK's dispatcher models rank grouped convolutions, not {op['family']}")
        ck_models = [CKSelector(CKModel.load(f, arch), selector) for f in cfg.evaluate.ck_models]
    fields = list(get_family(op["family"]).problems.FIELDS)
    df = keep_shard(read_dataset(paths, columns=[*COLUMNS, *fields]), plain(cfg.data.shard), op["family"])
    df = df[(df.arch == arch["name"]) & (df.direction == op["direction"]) & (df.dtype == op["dtype"])]
    if df.empty:
        raise StageError(f"no rows for {op['direction']} {op['dtype']} on {arch['name']} in {', '.join(map(str, paths))}")
    simulated = "sim" in set(df.backend)
    problems = int(df[fields].drop_duplicates().shape[0])
    runs = 1 + selector.family.analytic + bool(cfg.evaluate.baseline) + len(ck_models)
    progress = Progress(problems * runs, cfg.evaluate.progress, float(cfg.evaluate.log_every_s), prefix="evaluate",
                        unit="problem")
    try:
        scored = _scored(df, selector, op["direction"], top_k, exclude_suspect, progress)
        if not scored.rows:
            raise StageError(f"no problem could be evaluated: {scored.skipped[:3]}")
        others = {}  # the analytic model (for families ckheur.sim models) and CK model folders, as baselines
        if selector.family.analytic:
            others["analytic model"] = _scored(df, Selector.analytic(selector.kernels, arch, op["direction"],
                                                                     op["dtype"], op=op),
                                               op["direction"], (), exclude_suspect, progress)
        for ck in ck_models:
            others[ck.label] = _scored(df, ck, op["direction"], (), exclude_suspect, progress)
        gate = None
        if cfg.evaluate.baseline:
            ev = cfg.evaluate
            base = _scored(df, Selector.load(ev.baseline), op["direction"], (), exclude_suspect, progress)
            gate = {"baseline": str(ev.baseline), **acceptance_gate(scored, base, mean_pts=ev.gate_mean_pts,
                                                                     median_pts=ev.gate_median_pts, p10_pts=ev.gate_p10_pts,
                                                                     max_loss_pts=ev.gate_max_loss_pts)}
    finally:
        progress.close()
    metrics = {"model_dir": str(model_dir), "data": [str(p) for p in paths],
               "data_kind": "simulated" if simulated else "real",
               "cascade": bool(cfg.evaluate.cascade) and len(selector.kernels) > selector.cascade_threshold,
               **evaluation_metrics(scored, others, tie_tolerance=tol, top_k=top_k)}
    if gate is not None:
        metrics["gate"] = gate
    out = ctx.output_dir
    _write(out, scored, metrics, cfg.evaluate.plots)
    _print(metrics)
    if gate is not None and not gate["passed"]:
        print(f"evaluate: acceptance gate FAILED against {cfg.evaluate.baseline}: {'; '.join(gate['failures'])}")
        raise SystemExit(1)
    return metrics


def _write(out: Path, scored: Any, metrics: dict, plots: bool) -> None:
    import pandas as pd

    from ckheur.files import replacing, write_file

    table = pd.DataFrame([{**{k: v for k, v in r.items() if k != "hybrid"},
                           **{f"hybrid_top{k}_efficiency": h["efficiency"] for k, h in r["hybrid"].items()}}
                          for r in scored.rows])
    with replacing(out / "per_problem.csv") as f:
        table.to_csv(f, index=False)
    write_file(out / "metrics.json", json.dumps(metrics, indent=2, default=str))
    write_file(out / "report.md", _markdown(metrics))
    if plots:
        _plots(out, scored, metrics)


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _markdown(m: dict) -> str:
    lines = [f"# ckheur evaluation ({m['data_kind']} data)", "",
             f"Model: `{m['model_dir']}`  ", f"Data: {', '.join(f'`{d}`' for d in m['data'])}  ",
             f"Problems evaluated: {m['problems_evaluated']}, skipped: {m['problems_skipped']}", "",
             "| | mean | median | P10 | min | time-weighted | kernels timed per problem |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, *cells in _summary_rows(m)]
    lines += ["", f"Exact top-1: {_pct(m['top1'])}; tie-aware top-1 (within {_pct(m['tie_tolerance'])}): "
              f"{_pct(m['top1_tie_aware'])}; top-1 within 1% of the oracle: {_pct(m['within_1pct'])}; "
              f"oracle in predicted top-5: {_pct(m['oracle_in_top5'])}; failed picks (counted as 0): {_pct(m['pick_failed'])}.",
              "", "## Slices", "", "| slice | problems | mean | P10 |", "|---|---|---|---|"]
    for name, s in {**m["slices"], **{f"pick pipeline {k}": v for k, v in m["by_pick_pipeline"].items()}}.items():
        lines.append(f"| {name} | {s['n']} | {_pct(s['mean'])} | {_pct(s['p10'])} |")
    if "censored" in m:
        lines += ["", "## Censored candidates (find-db terms)", "",
                  "Unlisted candidates are censored: not applicable, or slower than every listed one. Open: the "
                  "pick among every candidate (a censored pick counts 0); listed: among the listed ones only.", "",
                  "| slice | protocol | problems | top-1 | tie-aware top-1 | mean slowdown | picks outside listed "
                  "| efficiency mean | P10 | time-weighted |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, rep in [("all", m["censored"]["all"]), *m["censored"]["slices"].items()]:
            lines += [f"| {name} | {proto} | " + " | ".join(_censored_cells(r)) + " |" for proto, r in rep.items()]
    if m["skipped"]:
        lines += ["", "## Skipped problems", ""] + [f"- {s['problem']}: {s['reason']}" for s in m["skipped"][:50]]
    if "gate" in m:
        g = m["gate"]
        lines += ["", f"## Acceptance gate against `{g['baseline']}`: {'PASSED' if g['passed'] else 'FAILED'}", ""]
        lines += [f"- {f}" for f in g["failures"]]
    return "\n".join(lines) + "\n"


PLOT_POINTS = 200_000  # the predicted-vs-measured plot draws a seeded sample of at most this many pairs


def _plots(out: Path, scored: Any, m: dict) -> None:
    import matplotlib

    from ckheur.files import save_png

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scored.rows
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, vals in [("model", [r["efficiency"] for r in rows])] + \
            [(n, [r[f"baseline: {n}"] for r in rows]) for n in m["baselines"]]:
        v = np.sort(vals)
        ax.step(100 * v, np.arange(1, len(v) + 1) / len(v), where="post", label=name)
    ax.set_xlabel("efficiency (% of the measured oracle)")
    ax.set_ylabel("fraction of problems")
    ax.set_title(f"Efficiency CDF ({m['data_kind']} data)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    save_png(fig, out / "efficiency_cdf.png")
    plt.close(fig)
    meas, pred = np.concatenate(scored.meas_tflops), np.concatenate(scored.pred_tflops)
    if len(meas) > PLOT_POINTS:
        keep = np.random.default_rng(0).choice(len(meas), PLOT_POINTS, replace=False)
        meas, pred = meas[keep], pred[keep]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.loglog(meas, pred, ".", alpha=0.3, markersize=3)
    lim = [max(1e-3, min(meas.min(), pred.min())), max(meas.max(), pred.max())]
    ax.plot(lim, lim, "k--", linewidth=0.8)
    ax.set_xlabel("measured TFLOPS")
    ax.set_ylabel("predicted TFLOPS")
    ax.set_title("Predicted vs measured")
    fig.tight_layout()
    save_png(fig, out / "predicted_vs_measured.png")
    plt.close(fig)
    names = list(m["slices"])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.barh(names, [100 * m["slices"][n]["mean"] for n in names])
    ax.set_xlabel("mean efficiency (%)")
    ax.set_xlim(min(50, min(100 * m["slices"][n]["mean"] for n in names) - 5), 100)
    ax.set_title("Efficiency by slice")
    fig.tight_layout()
    save_png(fig, out / "slices.png")
    plt.close(fig)


def _censored_cells(r: dict) -> list[str]:
    """Problems, top-1, tie-aware top-1, mean slowdown, outside listed, efficiency mean / P10, time-weighted."""
    return [str(r["problems"]), _pct(r["top1"]), _pct(r["top1_tie_aware"]), _pct(r["mean_slowdown"]),
            _pct(r["picks_outside_listed"]), _pct(r["efficiency"]["mean"]), _pct(r["efficiency"]["p10"]),
            _pct(r["time_weighted"])]


def _summary_rows(m: dict) -> list[tuple[str, ...]]:
    """Model, hybrid top-k and baselines: mean, median, P10, min, time-weighted, kernels timed."""
    def cells(name: str, s: dict, timed: str) -> tuple[str, ...]:
        return (name, _pct(s["mean"]), _pct(s["median"]), _pct(s["p10"]), _pct(s["min"]), _pct(s["time_weighted"]), timed)

    rows = [cells("model", m["efficiency"], "0")]
    rows += [cells(f"model top-{k} measured", h, f"{h['kernels_timed_per_problem']:.2f} "
                   f"({_pct(h['fraction_of_pool_timed'])} of pool)") for k, h in m["hybrid"].items()]
    rows += [cells(n, b, "0") for n, b in m["baselines"].items()]
    return rows


def _print(m: dict) -> None:
    from ckheur.display import format_table

    print(f"evaluate: {m['problems_evaluated']} problems ({m['problems_skipped']} skipped), {m['data_kind']} data, "
          f"model {m['model_dir']}")
    print(format_table(["", "mean", "median", "P10", "min", "time-weighted", "kernels timed"], _summary_rows(m)))
    print(f"top-1 exact {_pct(m['top1'])}, tie-aware (within {_pct(m['tie_tolerance'])}) {_pct(m['top1_tie_aware'])}, "
          f"within 1% {_pct(m['within_1pct'])}, oracle in top-5 {_pct(m['oracle_in_top5'])}, "
          f"failed picks {_pct(m['pick_failed'])}")
    if "censored" in m:
        print("censored candidates (find-db terms; open: pick among all, listed: among the listed only):")
        print(format_table(["", "problems", "top-1", "tie-aware", "mean slowdown", "outside listed", "eff mean", "P10",
                            "time-weighted"],
                           [(proto, *_censored_cells(r)) for proto, r in m["censored"]["all"].items()]))
