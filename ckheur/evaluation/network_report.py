"""A network's report: per layer (a distinct convolution and its weight, how often the network runs it)
ckheur's pick and the tier that decided it, MIOpen's own answer (its find-db, else TunaNet's first
choice), their times, the expected gain, and a tuning plan: the layers to measure first for the
largest expected saving per second of measuring.

Times are measured where a tier measured them (tuning database, find-db) and predicted by the model
otherwise; every time, total and gain says which. MIOpen's time is only ever measured (its find-db):
where none is, it is unknown, never estimated by ckheur's own model (which would score itself).
Totals add measured times apart from predicted ones. The plan's saving and cost models are in ``PlanModel``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

MEASURED_TIERS = ("tuning_db", "find_db", "measured")  # tiers whose time is a measurement
UNKNOWN = "unknown"  # MIOpen's time where nothing measured it
# Tiers whose pick is the fastest measured kernel (training_data: the bundle remembers the problem's
# fastest measured kernel): measuring again saves nothing.
KNOWN_BEST_TIERS = (*MEASURED_TIERS, "training_data")


@dataclass(frozen=True)
class PlanModel:
    """How the plan values measuring a layer.

    Saving: a model pick runs at the model's expected efficiency ``efficiency`` of the layer's best
    kernel on average (the bundle's cross-validated mean), so measuring recovers at most
    ``weight x predicted time x (1 - efficiency)`` per network run; a layer answered by a measurement
    (tuning database, find-db) or remembered from the bundle's training data saves nothing more. Cost: the model's ``candidates`` best kernels are
    each run ``repeats`` times at their predicted time, plus ``overhead_s`` per run of the driver
    (process start, kernel load)."""

    efficiency: float
    efficiency_source: str
    candidates: int = 3
    repeats: int = 10
    overhead_s: float = 1.0

    def cost_s(self, times_ms: Sequence[float]) -> float:
        """Seconds to measure a layer whose candidates' predicted times are ``times_ms`` (best first)."""
        return sum(self.overhead_s + self.repeats * t / 1e3 for t in list(times_ms)[: self.candidates])


def expected_efficiency(model_dir: str | Path | None) -> tuple[float | None, str]:
    """The bundle's cross-validated mean efficiency of its top-1 pick (leave-cluster-out when it has one,
    else grouped), and where it comes from; None when the bundle has no CV metrics."""
    path = Path(model_dir) / "cv_metrics.json" if model_dir else None
    if path is None or not path.is_file():
        return None, "no CV metrics"
    cv = json.loads(path.read_text())
    for key in ("cluster_cv_seed_mean", "grouped_cv_seed_mean"):
        if isinstance(cv.get(key), Mapping) and cv[key].get("mean") is not None:
            return float(cv[key]["mean"]), f"{path} {key}.mean"
    return None, f"{path} has no mean efficiency"


def _ms(problem: Any, tflops: float) -> float | None:
    return float(problem.flops / (tflops * 1e12) * 1e3) if tflops and tflops > 0 else None


def compares_miopen(family: Any) -> bool:
    """Whether the report compares with MIOpen's answers: they name MIOpen's solvers (its find-db,
    TunaNet), so only a report of the miopen family has them; another (CK's tile kernels, GEMM)
    shows none rather than a column of "unknown"."""
    return family.name == "miopen"


def driver_command(problem: Any, family: Any, direction: str, dtype: str) -> str:
    """The layer as a MIOpenDriver command of its direction (what MIOpen logs and what tuning runs);
    '' for a family MIOpenDriver does not run (GEMM)."""
    from ckheur.families.driver_line import DIRECTION_FLAG

    to_line = getattr(family.problems, "to_driver_line", None)
    return f"{to_line(problem, dtype)} -F {DIRECTION_FLAG[direction]}" if to_line is not None else ""


def layer_rows(selector: Any, weighted: Sequence[tuple[Any, int]], plan: PlanModel, tunanet: Any = None,
               names: Mapping[tuple, Sequence[str]] | None = None) -> list[dict]:
    """One row per distinct layer: the problem, its weight, the network's names for it (``names`` by
    problem key, from ``ckheur.problems.layer_names``), ckheur's pick (tier, time), MIOpen's
    answer (find-db, else TunaNet), the gain of the pick over MIOpen's answer (weight x ms), and the
    plan's expected saving and measuring cost."""
    rows = []
    for i, (p, weight) in enumerate(weighted):
        row = {"layer": i + 1, "problem": p.describe(), "weight": int(weight), "gflop": p.flops / 1e9,
               "names": " ".join((names or {}).get(p.key(), [])),
               "driver": driver_command(p, selector.family, selector.direction, selector.dtype)}
        try:
            ranked = selector.rank(p)
            chosen = selector.select(p)
        except ValueError as e:  # no kernel of the pool runs it (a 3D layer on a 2D pool): said, not dropped
            rows.append({**row, "pick": None, "tier": "unranked", "pick_ms": None, "pick_time": None, "miopen": None,
                         "miopen_source": None, "miopen_ms": None, "miopen_time": UNKNOWN, "gain_vs_miopen_ms": None,
                         "gain_time": None, "expected_saving_ms": 0.0, "measure_s": 0.0, "note": str(e)})
            continue
        pred = {name: _ms(p, tf) for name, tf in ranked}
        measured = chosen.source in MEASURED_TIERS
        pick_ms = chosen.latency_ms if chosen.latency_ms is not None else pred.get(chosen.kernel)
        miopen = miopen_ms = miopen_source = None
        hit = selector.find_db.best.get(p.key()) if selector.find_db is not None else None
        if hit is not None:
            miopen, miopen_ms, miopen_source = hit[0], hit[1], "find-db (measured)"
        elif tunanet is not None:
            try:
                ks, scores, _ = tunanet.scores(p)
            except ValueError:
                ks = []
            if len(ks):  # MIOpen's pick, but no measurement of it: its time stays unknown
                miopen, miopen_source = ks[int(scores.argmax())].name, "TunaNet (time unknown: not measured)"
        known = chosen.source in KNOWN_BEST_TIERS
        saving = 0.0 if known or pick_ms is None else weight * pick_ms * (1 - plan.efficiency)
        top = [t for _, t in zip(range(plan.candidates), (pred[n] for n, _ in ranked)) if t is not None]
        rows.append({
            **row, "pick": chosen.kernel, "tier": chosen.source, "pick_ms": pick_ms,
            "pick_time": "measured" if measured else "predicted",
            "miopen": miopen, "miopen_source": miopen_source, "miopen_ms": miopen_ms,
            "miopen_time": UNKNOWN if miopen_ms is None else "measured",
            "gain_vs_miopen_ms": None if miopen_ms is None or pick_ms is None else weight * (miopen_ms - pick_ms),
            "gain_time": None if miopen_ms is None or pick_ms is None else ("measured" if measured else "predicted"),
            "expected_saving_ms": saving, "measure_s": 0.0 if known else plan.cost_s(top), "note": "",
        })
    order = sorted((r for r in rows if r["expected_saving_ms"] > 0),
                   key=lambda r: (-r["expected_saving_ms"] / max(r["measure_s"], 1e-9), r["layer"]))
    for rank, r in enumerate(order, start=1):
        r["plan"] = rank
    return rows


def totals(rows: Sequence[Mapping[str, Any]], miopen: bool = True) -> dict:
    """Network totals: layers, their runs per network run (the weights), weighted time of ckheur's picks over
    the layers whose time is measured and, apart, over those whose time is predicted; MIOpen's
    measured answers and the gain over them where both times are measured (and, apart, where
    ckheur's is predicted); the plan's saving and cost. ``miopen``: whether MIOpen answers these
    layers (``compares_miopen``); without, the report leaves MIOpen's columns and lines out."""
    timed = [r for r in rows if r["pick_ms"] is not None]
    measured = [r for r in timed if r["pick_time"] == "measured"]
    predicted = [r for r in timed if r["pick_time"] != "measured"]
    answered = [r for r in timed if r["miopen_ms"] is not None]
    both = [r for r in answered if r["pick_time"] == "measured"]
    return {
        "layers": len(rows), "runs": sum(r["weight"] for r in rows), "compares_miopen": bool(miopen),
        "gflop": sum(r["weight"] * r["gflop"] for r in rows),
        "layers_pick_measured": len(measured), "pick_ms_measured": sum(r["weight"] * r["pick_ms"] for r in measured),
        "layers_pick_predicted": len(predicted),
        "pick_ms_predicted": sum(r["weight"] * r["pick_ms"] for r in predicted),
        "layers_miopen_measured": len(answered), "layers_miopen_unknown": len(rows) - len(answered),
        "miopen_ms_measured": sum(r["weight"] * r["miopen_ms"] for r in answered),
        "layers_gain_measured": len(both), "gain_ms_measured": sum(r["gain_vs_miopen_ms"] for r in both),
        "miopen_ms_where_gain_measured": sum(r["weight"] * r["miopen_ms"] for r in both),
        "layers_gain_predicted": len(answered) - len(both),
        "gain_ms_predicted": sum(r["gain_vs_miopen_ms"] for r in answered if r["pick_time"] != "measured"),
        "expected_saving_ms": sum(r["expected_saving_ms"] for r in rows),
        "measure_s": sum(r["measure_s"] for r in rows if r.get("plan")),
        "tiers": {t: sum(r["tier"] == t for r in rows) for t in sorted({r["tier"] for r in rows})},
    }


def runs_text(rows: Sequence[Mapping[str, Any]], tot: Mapping[str, Any]) -> str:
    """How many layer runs one network run makes, in words: convolutions where the layers have a
    MIOpenDriver line, problems otherwise (GEMM)."""
    return f"{tot['runs']} {'convolutions' if any(r['driver'] for r in rows) else 'problems'}"


def total_lines(tot: Mapping[str, Any], bullet: str = "") -> list[str]:
    """The totals in words, measured apart from predicted (the report's and stage=report's lines)."""
    n = tot["layers"]
    lines = [f"{bullet}ckheur's picks, measured ({tot['layers_pick_measured']} of {n} layers): "
             f"{tot['pick_ms_measured']:.4g} ms per network run (weight x time, summed)",
             f"{bullet}ckheur's picks, predicted by the model ({tot['layers_pick_predicted']} of {n} layers): "
             f"{tot['pick_ms_predicted']:.4g} ms per network run (a prediction, not a measurement)"]
    if not tot["compares_miopen"]:
        return lines
    lines += [f"{bullet}MIOpen's answers, measured ({tot['layers_miopen_measured']} of {n} layers): "
             f"{tot['miopen_ms_measured']:.4g} ms; unknown on {tot['layers_miopen_unknown']} layers (not measured, "
             "not estimated)"]
    lines.append(f"{bullet}gain over MIOpen, measured on both sides ({tot['layers_gain_measured']} layers): "
                 f"{tot['gain_ms_measured']:.4g} ms of MIOpen's {tot['miopen_ms_where_gain_measured']:.4g} ms")
    if tot["layers_gain_predicted"]:
        lines.append(f"{bullet}gain over MIOpen where ckheur's time is predicted ({tot['layers_gain_predicted']} "
                     f"layers): {tot['gain_ms_predicted']:.4g} ms (predicted)")
    return lines


def _f(v: Any, fmt: str = ".4g") -> str:
    return "-" if v is None else format(v, fmt)


def markdown(rows: Sequence[Mapping[str, Any]], tot: Mapping[str, Any], header: Mapping[str, str],
             plan: PlanModel) -> str:
    """The report as Markdown: header, totals, every layer, the tuning plan and how it was valued."""
    from ckheur.display import markdown_text as md  # names and paths come from the user's files

    rows = [{**r, "layer": md(r["layer"]), "names": " ".join(md(n) for n in r["names"].split())} for r in rows]
    header = {k: md(v) for k, v in header.items()}
    miopen = tot["compares_miopen"]
    drivers = any(r["driver"] for r in rows)  # convolutions: the MIOpenDriver line that times the layer
    lines = [f"# ckheur network report: {header['problems']}", ""]
    lines += [f"- {k}: {v}" for k, v in header.items() if k != "problems"]
    lines += ["", "## Totals", "",
              f"{tot['layers']} distinct layers, {runs_text(rows, tot)} per network run, "
              f"{tot['gflop']:.3g} GFLOP. Picks by tier: "
              f"{', '.join(f'{t} {n}' for t, n in tot['tiers'].items())}.", "",
              *total_lines(tot, "- "),
              f"- tuning every planned layer: expected saving (predicted) {tot['expected_saving_ms']:.4g} ms per run, "
              f"for {tot['measure_s']:.4g} s of measuring", "",
              "## Layers", "",
              "| layer | problem | weight | in the network | ckheur pick | tier | ms | "
              + ("MIOpen's answer | source | ms | gain ms (x weight) | " if miopen else "") + "plan |",
              "|---|---|---|---|---|---|---|" + ("---|---|---|---|" if miopen else "") + "---|"]
    for r in rows:
        names = r["names"].split()
        named = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "") or "-"
        if r["pick"] is None:
            lines.append(f"| {r['layer']} | {r['problem']} | {r['weight']} | {named} | - | unranked: {r['note']} "
                         "| - | " + ("- | - | - | - | " if miopen else "") + "- |")
            continue
        theirs = (f"{'`' + r['miopen'] + '`' if r['miopen'] else '-'} | {r['miopen_source'] or '-'} | "
                  f"{_f(r['miopen_ms']) + ' (m)' if r['miopen_ms'] is not None else UNKNOWN} | "
                  f"{_f(r['gain_vs_miopen_ms'])}{' (m)' if r['gain_time'] == 'measured' else ' (p)' if r['gain_time'] else ''} | ")
        lines.append(f"| {r['layer']} | {r['problem']} | {r['weight']} | {named} | `{r['pick']}` | {r['tier']} | "
                     f"{_f(r['pick_ms'])} {'(m)' if r['pick_time'] == 'measured' else '(p)'} | "
                     f"{theirs if miopen else ''}{r.get('plan', '-')} |")
    planned = sorted((r for r in rows if r.get("plan")), key=lambda r: r["plan"])
    lines += ["", "(m) measured, (p) predicted by the model" + (
              " (a gain is (p) when ckheur's time is); unknown: MIOpen's time was not measured (no find-db entry), "
              "and is not estimated." if miopen else "."), "", "## Tuning plan", "",
              "Measure the layers in this order: the largest expected saving per second of measuring first.", "",
              "| order | layer | problem | expected saving ms per run | measuring s | saving per s | cumulative s |"
              + (" MIOpenDriver command |" if drivers else ""), "|---|---|---|---|---|---|---|" + ("---|" if drivers else "")]
    spent = 0.0
    for r in planned:
        spent += r["measure_s"]
        lines.append(f"| {r['plan']} | {r['layer']} | {r['problem']} | {r['expected_saving_ms']:.4g} | "
                     f"{r['measure_s']:.3g} | {r['expected_saving_ms'] / max(r['measure_s'], 1e-9):.3g} | {spent:.3g} |"
                     + (f" `{r['driver']}` |" if drivers else ""))
    if not planned:
        lines.append("| - | every layer is answered by a measurement | | | | | |" + (" |" if drivers else ""))
    lines += ["", f"Saving model: a model pick runs at {plan.efficiency:.1%} of the layer's best kernel on average "
              f"({plan.efficiency_source}); measuring recovers at most weight x predicted time x (1 - that). "
              f"Cost model: the model's {plan.candidates} best kernels x {plan.repeats} runs at their predicted time, "
              f"plus {plan.overhead_s:g} s per driver run. Layers answered by a measurement (tiers tuning_db, find_db, "
              "training_data: the bundle's fastest measured kernel) are not planned."]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[Mapping[str, Any]], path: Path, title: str, miopen: bool = True) -> None:
    """Two panels: weighted time per layer (ckheur's pick, measured or predicted, and, with ``miopen``,
    MIOpen's answer where measured), and the plan's cumulative expected saving against cumulative
    measuring seconds. ``title``: what the plot is about (op, dtype, arch, the model's data); wrapped to fit."""
    import textwrap

    import matplotlib

    from ckheur.files import save_png

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, max(3.5, 0.18 * len(rows) + 1)))
    y = list(range(len(rows)))
    for kind, style in (("measured", {"color": "C0"}), ("predicted", {"color": "none", "edgecolor": "C0", "hatch": "///"})):
        ax1.barh([v + 0.2 for v in y], [r["weight"] * (r["pick_ms"] or 0) if r["pick_time"] == kind else 0 for r in rows],
                 height=0.4, label=f"ckheur's pick ({kind})", **style)
    if miopen:
        ax1.barh([v - 0.2 for v in y], [r["weight"] * (r["miopen_ms"] or 0) for r in rows], height=0.4, color="C1",
                 label=f"MIOpen's answer (measured; {sum(r['miopen_ms'] is None for r in rows)} layers unknown)")
    ax1.set_xlim(left=0)
    ax1.set_yticks(y, [f"{r['layer']}" for r in rows], fontsize=6)
    ax1.invert_yaxis()
    ax1.set_xlabel("weight x time per network run (ms)")
    ax1.set_ylabel("layer")
    ax1.legend(fontsize=8)
    planned = sorted((r for r in rows if r.get("plan")), key=lambda r: r["plan"])
    cost, gain = [0.0], [0.0]
    for r in planned:
        cost.append(cost[-1] + r["measure_s"])
        gain.append(gain[-1] + r["expected_saving_ms"])
    ax2.plot(cost, gain, marker=".")
    if not planned:
        ax2.text(0.5, 0.5, "nothing to measure:\nevery pick is already a measurement", ha="center", va="center",
                 transform=ax2.transAxes, fontsize=9)
    ax2.set_xlabel("measuring (s), in plan order")
    ax2.set_ylabel("expected saving per network run (ms)")
    ax2.set_title("tuning plan (predicted saving)", fontsize=9)
    ax2.set_xlim(left=0)
    ax2.set_ylim(bottom=0)
    fig.suptitle("\n".join(textwrap.wrap(title, 110)), fontsize=9)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def write_report(out: Path, rows: Sequence[Mapping[str, Any]], tot: Mapping[str, Any], header: Mapping[str, str],
                 plan: PlanModel) -> list[Path]:
    """network_report.md, network_layers.csv, network_report.json and network_report.png into ``out``."""
    import csv

    from ckheur.display import spreadsheet_cell
    from ckheur.files import replacing, write_file

    written = [write_file(out / "network_report.md", markdown(rows, tot, header, plan))]
    columns = list(rows[0]) + (["plan"] if "plan" not in rows[0] else [])
    with replacing(out / "network_layers.csv") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: spreadsheet_cell(v) for k, v in r.items()} for r in rows)
    written.append(out / "network_layers.csv")
    written.append(write_file(out / "network_report.json", json.dumps(
        {"header": dict(header), "plan_model": asdict(plan), "totals": dict(tot), "layers": list(rows)}, indent=2)))
    subject = ", ".join(f"{k} {v}" for k, v in header.items() if k != "problems")
    plot(rows, out / "network_report.png", f"{header['problems']}: {subject}", tot["compares_miopen"])
    return [*written, out / "network_report.png"]
