"""The report of an evaluation: per-problem CSV, metrics JSON, a markdown summary and PNG plots
(efficiency CDF against the baselines, predicted vs measured, slices)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def write_report(out: Path, scored: Any, metrics: dict, plots: bool = True) -> None:
    """per_problem.csv, metrics.json, report.md and (with ``plots``) PNG plots of an evaluation into ``out``."""
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


def pct(x: float) -> str:
    """A fraction as a percentage with two decimals."""
    return f"{100 * x:.2f}%"


def title_of(m: dict) -> str:
    """What an evaluation is about: op, dtype, arch and whether the data is real or simulated."""
    kind = "SIMULATED data (backend sim)" if m["data_kind"] == "simulated" else f"{m['data_kind']} data"
    train = ", ON ITS TRAINING DATA" if m.get("training_data") else ""
    return f"{m['subject']}, {kind}{train}" if m.get("subject") else f"{kind}{train}"


def _markdown(m: dict) -> str:
    from ckheur.display import markdown_text as md  # paths the user gave

    lines = [f"# ckheur evaluation: {title_of(m)}", ""]
    if m.get("training_data"):
        lines += [f"**Warning: evaluated on the model's own training data** ({', '.join(m['training_data'])}): "
                  "these figures are not held-out.", ""]
    lines += [f"Model: {md(m['model_dir'])}  ", f"Data: {', '.join(md(d) for d in m['data'])}  ",
             f"Problems evaluated: {m['problems_evaluated']}, skipped: {m['problems_skipped']}"
             + (f"; {m['remembered_problems']} of them in the model's training data, answered from its memory "
                "(train.remember) unless the model predicts a pick faster by more than op.remember_margin"
                if m.get("remembered_problems") else "")
             + (f"; {m['repeated_pairs']} repeated pair(s): {m['repeats_rule']}" if m.get("repeated_pairs") else ""), "",
             f"| | mean | median | P10 | min | time-weighted | kernels timed per problem | catastrophic (<50%) |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, *cells in summary_rows(m)]
    if "seen_unseen" in m:
        from ckheur.evaluation.seen import describe

        lines += ["", f"Seen (in the model's training data: {', '.join(m['seen_unseen']['from'])}) and unseen "
                  f"problems: {describe(m['seen_unseen'])}."]
    lines += ["", f"Exact top-1: {pct(m['top1'])}; tie-aware top-1 (within {pct(m['tie_tolerance'])}): "
              f"{pct(m['top1_tie_aware'])}; top-1 within 1% of the oracle: {pct(m['within_1pct'])}; "
              f"oracle in predicted top-5: {pct(m['oracle_in_top5'])}; failed picks (counted as 0): {pct(m['pick_failed'])}.",
              *_greedy_lines(m),
              "", "## Slices", "", "| slice | problems | mean | P10 |", "|---|---|---|---|"]
    for name, s in {**m["slices"], **{f"pick pipeline {k}": v for k, v in m["by_pick_pipeline"].items()}}.items():
        lines.append(f"| {name} | {s['n']} | {pct(s['mean'])} | {pct(s['p10'])} |")
    if "censored" in m:
        lines += ["", "## Censored candidates (find-db terms)", "",
                  "Unlisted candidates are censored: not applicable, or slower than every listed one. Open: the "
                  "pick among every candidate (a censored pick counts 0); listed: among the listed ones only.", "",
                  "| slice | protocol | problems | top-1 | tie-aware top-1 | mean slowdown | picks outside listed "
                  "| efficiency mean | P10 | time-weighted |", "|---|---|---|---|---|---|---|---|---|---|"]
        for name, rep in [("all", m["censored"]["all"]), *m["censored"]["slices"].items()]:
            lines += [f"| {name} | {proto} | " + " | ".join(censored_cells(r)) + " |" for proto, r in rep.items()]
    for other, beside in m.get("censored_beside", {}).items():
        lines += ["", f"## The model beside {other} (find-db terms)", "",
                  f"On the {beside['problems']} problems both ranked (for TunaNet: its domain).", "",
                  "| selector | protocol | problems | top-1 | tie-aware top-1 | mean slowdown | picks outside listed "
                  "| efficiency mean | P10 | time-weighted |", "|---|---|---|---|---|---|---|---|---|---|"]
        lines += beside_rows(beside, lambda who, proto, cells: f"| {who} | {proto} | " + " | ".join(cells) + " |")
    if m["skipped"]:
        lines += ["", "## Skipped problems", ""] + [f"- {s['problem']}: {s['reason']}" for s in m["skipped"][:50]]
    if "gate" in m:
        g = m["gate"]
        lines += ["", f"## Acceptance gate against `{g['baseline']}`: {'PASSED' if g['passed'] else 'FAILED'}", ""]
        lines += [f"- {f}" for f in g["failures"]]
    return "\n".join(lines) + "\n"


def _greedy_lines(m: dict) -> list[str]:
    g = m["baselines"].get("greedy coverage list")
    if not g:
        return []
    return ["", f"Greedy coverage list ({g['size']} kernels: {', '.join(f'`{k}`' for k in g['kernels'])}): it picks its "
            f"first kernel that ran the problem; the best within the list (an upper bound, not a selector) would give "
            f"{pct(g['oracle_within_list_mean'])} mean. Catastrophic: a pick below 50% of the oracle (random: the "
            "expected share)."]


PLOT_POINTS = 200_000  # the predicted-vs-measured plot draws a seeded sample of at most this many pairs


def _wrapped(head: str, title: str, width: int) -> str:
    """A plot title: ``head`` then ``title`` wrapped to ``width`` characters, so it fits its figure."""
    import textwrap

    return "\n".join([head, *textwrap.wrap(title, width)])


def _plots(out: Path, scored: Any, m: dict) -> None:
    import matplotlib

    from ckheur.files import save_png

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scored.rows
    title = title_of(m)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    # The model: a thick solid line under the baselines' thin dashed ones, so a baseline that
    # ranks as the model does (the analytic model on simulated data) shows on top of it, not instead.
    styles = ["--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 3))]
    curves = [("model", [r["efficiency"] for r in rows], dict(linewidth=3.0, alpha=0.6, zorder=1))]
    curves += [(n, [r[f"baseline: {n}"] for r in rows], dict(linewidth=1.3, linestyle=styles[i % len(styles)], zorder=2))
               for i, n in enumerate(m["baselines"])]
    for name, vals, style in curves:
        v = np.sort(vals)
        ax.step(100 * v, np.arange(1, len(v) + 1) / len(v), where="post", label=f"{name} (mean {pct(np.mean(v))})",
                **style)
    ax.set_xlabel("efficiency (% of the fastest measured kernel), of each pick's measured time")
    ax.set_ylabel("fraction of problems")
    ax.set_xlim(0, 101)
    ax.set_ylim(0, 1.02)
    ax.set_title(_wrapped("Efficiency CDF (measured)", title, 80), fontsize=9)
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
    ax.set_xlabel("measured TFLOPS (log scale)")
    ax.set_ylabel("predicted TFLOPS (log scale)")
    ax.set_title(_wrapped("Predicted vs measured TFLOPS", title, 55), fontsize=9)
    ok = (meas > 0) & (pred > 0)
    ratio = float(np.exp(np.median(np.log(pred[ok] / meas[ok])))) if ok.any() else float("nan")
    offset = "a systematic offset: the pick depends on the order of the predictions, not their scale" \
        if np.isfinite(ratio) and not 0.9 <= ratio <= 1.1 else "no systematic offset"
    fig.text(0.5, 0.01, f"median predicted / measured: {ratio:.2f}x ({offset}); dashed: equal", ha="center",
             fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_png(fig, out / "predicted_vs_measured.png")
    plt.close(fig)
    names = list(m["slices"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * len(names) + 1.8), sharey=True)
    labels = [f"{n} ({m['slices'][n]['n']})" for n in names]
    for ax, key, what in zip(axes, ("mean", "p10"), ("mean efficiency (%)", "P10 efficiency (%)")):
        vals = np.array([100 * m["slices"][n][key] for n in names])
        ax.barh(labels, vals, color="tab:blue" if key == "mean" else "tab:orange")
        ax.set_xlim(0, 100)  # from zero: small differences between slices look small; the labels give them
        for y, v in enumerate(vals):
            ax.text(v, y, f"{v:.2f} ", va="center", ha="right" if v > 15 else "left", fontsize=7,
                    color="white" if v > 15 else "black")
        ax.xaxis.set_major_locator(plt.MaxNLocator(5))
        ax.set_xlabel(what)
    axes[0].invert_yaxis()
    fig.suptitle(_wrapped("Efficiency by slice, of measured times (problems per slice in brackets)", title, 110),
                 fontsize=9)
    fig.tight_layout()
    save_png(fig, out / "slices.png")
    plt.close(fig)


def censored_cells(r: dict) -> list[str]:
    """Problems, top-1, tie-aware top-1, mean slowdown, outside listed, efficiency mean / P10, time-weighted."""
    return [str(r["problems"]), pct(r["top1"]), pct(r["top1_tie_aware"]), pct(r["mean_slowdown"]),
            pct(r["picks_outside_listed"]), pct(r["efficiency"]["mean"]), pct(r["efficiency"]["p10"]),
            pct(r["time_weighted"])]


def beside_rows(beside: dict, row: Any) -> list:
    """``row(selector, protocol, cells)`` for the model and the other selector of a
    ``censored_beside`` entry, both protocols."""
    return [row(who, proto, censored_cells(r)) for who, rep in beside.items() if who != "problems"
            for proto, r in rep.items()]


def summary_rows(m: dict) -> list[tuple[str, ...]]:
    """Model, hybrid top-k and baselines: mean, median, P10, min, time-weighted, kernels timed."""
    def cells(name: str, s: dict, timed: str, catastrophic: float | None) -> tuple[str, ...]:
        return (name, pct(s["mean"]), pct(s["median"]), pct(s["p10"]), pct(s["min"]), pct(s["time_weighted"]), timed,
                "-" if catastrophic is None else pct(catastrophic))

    rows = [cells("model", m["efficiency"], "0", m.get("catastrophic_rate"))]
    rows += [cells(f"model top-{k} measured", h, f"{h['kernels_timed_per_problem']:.2f} "
                   f"({pct(h['fraction_of_pool_timed'])} of pool)", h.get("catastrophic_rate"))
             for k, h in m["hybrid"].items()]
    rows += [cells(n + (f" ({b['problems_it_could_not_rank']} unranked, as 0)" if b.get("problems_it_could_not_rank")
                        else ""), b, "0", b.get("catastrophic_rate")) for n, b in m["baselines"].items()]
    return rows
