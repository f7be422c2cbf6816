"""stage=predict: ranked kernels for a problem (fields or a MIOpenDriver line) or a whole set."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ckheur.stages import Context, StageError, plain


def default_model_dir(cfg: Any, op: dict, explicit: str | None = None) -> Path:
    """The bundle folder for op/dtype/arch: ``explicit`` if given, else paths.bundles (or the shipped
    bundles), else paths.sim_bundles when only a simulated model exists. It may not exist."""
    from ckheur.models.bundle import resolve_model_dir

    model_dir = resolve_model_dir(explicit or Path(cfg.paths.bundles) / op["model_name"])
    if not explicit and not model_dir.is_dir() and (Path(cfg.paths.sim_bundles) / op["model_name"]).is_dir():
        model_dir = Path(cfg.paths.sim_bundles) / op["model_name"]
    return model_dir


def load_selector(cfg: Any, op: dict, arch: dict, model_dir: str | None = None,
                  tuning_db: str | None = None) -> tuple[Any, str]:
    """The trained model for op/dtype/arch, or the analytic model when there is none (labeled).

    Looks in ``model_dir`` if given, else in paths.bundles, then (for an op with no real-data
    model) in paths.sim_bundles, saying which it used."""
    from ckheur.kernels import enumerate_pool
    from ckheur.models.selector import Selector

    explicit = model_dir or cfg.predict.model_dir
    model_dir = default_model_dir(cfg, op, explicit)
    if model_dir.is_dir():
        sel = Selector.load(model_dir, tuning_db=tuning_db)
        return sel, sel.label
    if explicit:
        raise StageError(f"model dir {model_dir} not found")
    from ckheur.ops import get_family

    if not get_family(op["family"]).analytic:
        raise StageError(f"no trained model {model_dir} for {op['model_name']}, and the {op['family']} family has no "
                         f"analytic model to fall back on: train one (stage=train) or give predict.model_dir")
    pool = enumerate_pool(op, arch, cfg.kernels.filter).kernels
    return (Selector.analytic(pool, arch, op["direction"], op["dtype"], op=op, tuning_db=tuning_db),
            f"ANALYTIC MODEL (fallback: no trained model {model_dir} for {op['model_name']})")


def problem_from_cfg(cfg: Any, op: dict) -> Any:
    """The single problem given as problem.<field>=... or problem="<MIOpenDriver line>" (refused
    when it contradicts the op's direction or data type), or None."""
    from ckheur.models.selector import as_problem

    node = plain(cfg.problem)
    line = node.pop("miopen", None)
    fields = {k: v for k, v in node.items() if v is not None}
    if line and fields:
        raise StageError("give the problem either as problem=\"<MIOpenDriver line>\" or as problem.<field>=..., not both")
    family = op["family"]
    if line:
        from ckheur.ops import get_family

        if not hasattr(get_family(family).problems, "from_text"):
            raise StageError(f"problem=<MIOpenDriver line> is for convolutions; give {family} fields as problem.<field>=...")
        return as_problem(str(line), family, op["direction"], op["dtype"])
    return as_problem(fields, family) if fields else None


def run(cfg: Any, ctx: Context) -> dict:
    """Print the top-k kernels for one problem, or write predictions for a problem set."""
    from ckheur.display import format_table
    from ckheur.problems import load_problem_set
    from ckheur.stages.measuring import Progress

    op, arch = plain(cfg.op), plain(cfg.arch)
    k = int(cfg.predict.k)
    if k < 1:
        raise StageError(f"predict.k={k}: the number of kernels to print must be >= 1")
    selector, label = load_selector(cfg, op, arch, tuning_db=cfg.predict.tuning_db)
    single = problem_from_cfg(cfg, op)
    if single is not None:
        ranked = selector.rank(single, k=k)
        chosen = selector.select(single)
        rows = [(i + 1, name, f"{tf:.2f}", f"{single.flops / (tf * 1e12) * 1e3:.4g}" if tf > 0 else "-")
                for i, (name, tf) in enumerate(ranked)]
        print(f"{op['direction']} {op['dtype']} on {arch['name']}: {single.describe()} ({single.flops / 1e9:.3f} GFLOP)")
        print(f"ranked by: {label}")
        print(format_table(["rank", "kernel", "pred TFLOPS", "pred latency ms"], rows))
        print(f"selected: {chosen.kernel} (tier: {chosen.source}"
              + (f", measured {chosen.latency_ms:.4g} ms in {selector.tuning_db.path}" if chosen.source == "tuning_db" else "")
              + ")")
        return {"problem": single.to_dict(), "ranking": ranked, "ranked_by": label, "selected": chosen.kernel,
                "tier": chosen.source}
    problems = load_problem_set(plain(cfg.problems), op["family"])
    out = Path(cfg.predict.output) if cfg.predict.output else ctx.output_dir / "predictions.csv"
    if out.suffix not in (".csv", ".json"):
        raise StageError(f"predict.output={out}: give a .csv or .json file")
    tiers = write_predictions(selector, problems, k, label, out, Progress(
        len(problems), cfg.predict.progress, float(cfg.predict.log_every_s), prefix="predict", unit="problem"))
    print(f"predict: top-{k} kernels for {len(problems)} problems of {cfg.problems.name} (ranked by {label}) -> {out}")
    print(f"predict: selected by tier: {', '.join(f'{t} {n}' for t, n in sorted(tiers.items())) or 'none'}")
    return {"output": str(out), "problems": len(problems), "ranked_by": label, "tiers": dict(tiers)}


def write_predictions(selector: Any, problems: list, k: int, label: str, out: Path, progress: Any) -> Counter:
    """Rank each problem's kernels and write the top k as CSV rows (or JSON records) as they come:
    memory does not grow with the problems; the file appears whole when done. Returns the tiers
    that selected, counted."""
    import csv

    from ckheur.files import make_folder, replacing

    make_folder(out.parent, "predict.output folder")
    fields = list(selector.family.problems.FIELDS)
    columns = [*fields, "rank", "kernel", "pred_tflops", "pred_latency_ms", "ranked_by", "selected", "tier", "note"]
    tiers: Counter = Counter()
    with replacing(out) as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n") if out.suffix == ".csv" else None
        if writer is not None:
            writer.writeheader()
        else:
            f.write("[")
        first = True
        try:
            for i, p in enumerate(problems):
                try:
                    ranked = selector.rank(p, k=k)
                    chosen = selector.select(p)
                    tiers[chosen.source] += 1
                    records = [{**p.to_dict(), "rank": j + 1, "kernel": n, "pred_tflops": tf,
                                "pred_latency_ms": p.flops / (tf * 1e12) * 1e3 if tf > 0 else None, "ranked_by": label,
                                "selected": chosen.kernel, "tier": chosen.source} for j, (n, tf) in enumerate(ranked)]
                except ValueError as e:
                    records = [{**p.to_dict(), "rank": None, "kernel": None, "pred_tflops": None, "note": str(e)}]
                if writer is not None:
                    writer.writerows(records)
                else:
                    for rec in records:
                        f.write(("\n" if first else ",\n") + json.dumps(rec))
                        first = False
                if (i + 1) % 256 == 0 or i + 1 == len(problems):
                    progress.update((i % 256) + 1)
        finally:
            progress.close()
        if writer is None:
            f.write("\n]\n")
    return tiers
