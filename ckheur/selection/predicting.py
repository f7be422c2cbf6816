"""Predicting with a job's model: which bundle serves an op on an arch (a trained one, else a
simulated one, else the analytic model, labeled), predictions for a problem set written as
they come, and one problem's pick explained beside every candidate."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ckheur.errors import UserError
from ckheur.job import Job


def bundle_dir(job: Job, *, models: str | Path, sim_models: str | Path, explicit: str | Path | None = None) -> Path:
    """The bundle folder for the job: ``explicit`` if given, else ``models`` (or the shipped
    models), else ``sim_models`` when only a simulated model exists. It may not exist."""
    from ckheur.learn.bundle import resolve_model_dir

    model_dir = resolve_model_dir(explicit or Path(models) / job.model_name)
    if not explicit and not model_dir.is_dir() and (Path(sim_models) / job.model_name).is_dir():
        model_dir = Path(sim_models) / job.model_name
    return model_dir


def filtered_pool(job: Job) -> list[str] | None:
    """With kernels.filter, the names of the filtered pool, which a bundle's candidates are narrowed
    to (as a model across GPUs' and a nearest GPU's bundle always are); None without one."""
    if not job.kernel_filter:
        return None
    if not job.pool.kernels:
        raise UserError(f"kernels.filter={job.kernel_filter!r} leaves no kernel of the pool to rank")
    return [k.name for k in job.pool.kernels]


def check_bundle_op(theirs: tuple[str, str, str], job: Job, field: str) -> None:
    """UserError when a bundle given by path (``field``) is of another op or data type than the job's
    (``theirs``: its family, direction and dtype): its kernels and features would rank nothing of the
    job's, or rank it as another op."""
    if theirs != (job.family.name, job.direction, job.dtype):
        raise UserError(f"{field}: a bundle of {theirs[0]}/{theirs[1]} {theirs[2]}, the job is {job.family.name}/"
                        f"{job.direction} {job.dtype}: give that op's bundle, or set op= and op.dtype= to the bundle's")


def selector_for(job: Job, *, models: str | Path, sim_models: str | Path, model_dir: str | Path | None = None,
                 tuning_db: str | Path | None = None, find_db: str | Path | None = None) -> tuple[Any, str]:
    """The job's trained model (as ``bundle_dir`` finds it), or the analytic model when there is
    none; with the label that says which. ``tuning_db`` and ``find_db``: the exact tiers
    (``Selector.select``)."""
    from ckheur.selection.selector import Selector

    found = bundle_dir(job, models=models, sim_models=sim_models, explicit=model_dir)
    if found.is_dir():
        sel = bundle_selector(job, found, f"model dir {found}", tuning_db=tuning_db, find_db=find_db)
        return sel, sel.label
    if model_dir:
        raise UserError(f"model dir {found} not found")
    served = None if job.family.analytic else served_without_bundle(job, models, tuning_db=tuning_db)
    if served is not None:  # a GPU without a model of its own: the model across GPUs, else the nearest GPU's
        if find_db is not None:  # its answers may be solvers the other GPUs' model cannot rank
            raise UserError(f"predict.find_db: {job.arch_name} has no model of its own to serve a find-db beside; "
                            f"import it and train one (stage=import import.path={find_db}, then stage=train "
                            f"arch={job.arch_name})")
        return served[0], served[0].label
    if not job.family.analytic:  # (the miopen family: find_db serves only beside a model)
        raise UserError(f"no trained model {found} for {job.model_name}, and the {job.family.name} family has no "
                        f"analytic model to fall back on: train one (stage=train) or give predict.model_dir; for a "
                        f"GPU without data, one model across the GPUs that have it: stage=train "
                        f"arch={job.arch_name} features.hardware=true data.paths=[<their datasets>]")
    return (Selector.analytic(job.pool.kernels, job.arch, job.direction, job.dtype, op=job.op, tuning_db=tuning_db,
                              find_db=find_db),
            f"ANALYTIC MODEL (fallback: no trained model {found} for {job.model_name})")


def bundle_selector(job: Job, path: Path, field: str, **load: Any) -> Any:
    """The selector of the bundle folder ``path`` (given as ``field``) for the job's device, as every
    stage ranks with it: a model across GPUs, or a bundle with GPU descriptors made for another device
    of the job's arch, with the job's device's descriptors; a sibling's bundle labelled so
    (``sibling_words``). A UserError when the bundle is of another op or dtype. ``load``: Selector.load's options."""
    from ckheur.learn.bundle import family_of, load_spec
    from ckheur.selection.selector import Selector

    spec = load_spec(path)
    check_bundle_op((family_of(spec).name, spec["op"]["direction"], spec["op"]["dtype"]), job, field)
    if spec.get("across_gpus"):  # a model for any GPU named by path: for the job's device
        return across_gpus_selector(job, path, served=False, **load)
    device = {"arch": job.arch} if other_device_of_arch(spec, job) else {}
    sel = Selector.load(path, kernels=filtered_pool(job), **device, **load, **applicability_of(job.op))
    sel.label += sibling_words(job, sel.trained_devices, sel.trained_archs, bool(sel.answers))
    return sel


# What a GPU must share with the nearest GPU that has a bundle for that bundle to serve it rather than
# the op's model across GPUs (arch config fields). In the leave-one-GPU-out bench (bench/bench_logo.py,
# docs/miopen-results.md, row "zero-shot as served"), the CDNA sibling's bundle beat the model across
# GPUs on MI300X and MI210 (matrix cores, wave 64) by 1.45 and 3.44 points of mean efficiency (in 9
# of their 12 cells, within 0.8 points in the other 3), while the model across GPUs won by 15-29
# points on MI50, MI60 and Vega 56 (no matrix cores) and by 0.5 on RDNA2 (wave 32).
SERVING_TRAITS = ("matrix_cores", "wavefront_size")


def arch_traits(arch: Any) -> dict:
    """The arch config's SERVING_TRAITS; a field it does not write reads as ArchSchema's default
    (``matrix_cores: true``: the CDNA configs leave it out), as loading it through the schema does."""
    import dataclasses

    from ckheur.config import ArchSchema

    defaults = {f.name: f.default for f in dataclasses.fields(ArchSchema)}
    return {t: defaults[t] if arch.get(t) is None else arch[t] for t in SERVING_TRAITS}


def traits_apart(arch: Any, other: Any) -> list[str]:
    """The SERVING_TRAITS ``other`` does not share with ``arch``, in words ([] when it shares them all)."""
    a, b = arch_traits(arch), arch_traits(other)
    words = {"matrix_cores": lambda v: "matrix cores" if v else "no matrix cores",
             "wavefront_size": lambda v: f"wave {v}"}
    return [f"{words[t](b[t])} ({arch['name']}: {words[t](a[t])})" for t in SERVING_TRAITS if a[t] != b[t]]


@dataclass(frozen=True)
class Serving:
    """What serves a GPU without a bundle of its own (``serving``): ``path``, the nearest GPU's
    bundle (``nearest``: that GPU's arch) or the op's model across GPUs (``nearest`` None), and why."""

    path: Path
    nearest: str | None
    why: str

    @property
    def what(self) -> str:
        """Which model serves, in words."""
        return f"{self.nearest}'s bundle (the nearest GPU with one)" if self.nearest else "the model across GPUs"


def serving(job: Job, models: str | Path) -> Serving | None:
    """What serves a GPU that has no bundle of its own for the job's op and dtype: the nearest GPU's
    bundle (``nearest_bundle``) where that GPU shares the job's SERVING_TRAITS or the op has no model
    across GPUs, else the op's model across GPUs (``across_gpus_bundle``); None when neither exists."""
    from ckheur.config import load_arch

    near, cross = nearest_bundle(job, models), across_gpus_bundle(job, models)
    apart = traits_apart(job.arch, load_arch(near[1])) if near is not None else []
    if near is not None and cross is None:
        return Serving(near[0], near[1], f"no model across GPUs of {job.direction} {job.dtype} is shipped")
    if near is not None and not apart:
        return Serving(near[0], near[1], f"{near[1]} shares {job.arch_name}'s matrix cores and wave size; the "
                       "leave-one-GPU-out bench favours the nearest GPU's bundle there")
    if cross is None:
        return None
    return Serving(cross, None, "" if near is None else f"{near[1]}, the nearest GPU with a bundle, has "
                   f"{' and '.join(apart)}; the leave-one-GPU-out bench favours the model across GPUs there")


def served_without_bundle(job: Job, models: str | Path, **load: Any) -> tuple[Any, Path] | None:
    """What serves a GPU that has no bundle of its own for the job's op and dtype (``serving``: the
    nearest GPU's bundle where it shares the GPU's matrix cores and wave size, else the op's model
    across GPUs) as a selector labelled with why, and its folder; None when neither exists.
    ``load``: Selector.load's options."""
    served = serving(job, models)
    if served is None:
        return None
    if served.nearest is not None:
        return nearest_selector(job, served.path, served.nearest, why=served.why, **load), served.path
    return across_gpus_selector(job, served.path, why=served.why, **load), served.path


def other_device_of_arch(spec: Mapping[str, Any], job: Job) -> bool:
    """Whether a bundle (its feature ``spec``) of one arch with hardware descriptors as features
    (``features.hardware``) was made for another device of the job's arch (MI50's descriptors, the
    job's device MI60: ``arch.num_cus=64``)."""
    from ckheur.families.hardware import device_key

    return bool(spec.get("hardware")) and not spec.get("across_gpus") and spec["arch"]["name"] == job.arch["name"] \
        and device_key(spec["arch"]) != device_key(job.arch)


def sibling_words(job: Job, trained_devices: Sequence[str], trained_archs: Sequence[str], remembers: bool) -> str:
    """What a label adds when a bundle of one GPU's rows (``trained_devices``, its spec's) serves
    another device of its arch (MI210's gfx90a bundle for ``arch=gfx90a``, MI250X): that the device
    was not measured, which was, and whose measurements its remembered answers are; '' otherwise (a
    model of several GPUs, ``trained_archs``, says it in its own label)."""
    from ckheur.families.hardware import device_label

    device = device_label(job.arch)
    if not trained_devices or trained_archs or device in trained_devices:
        return ""
    return f"; {device} was NEVER MEASURED: learned from its sibling {', '.join(trained_devices)}" + (
        ", whose fastest solvers are its remembered answers" if remembers else "")


def across_gpus_bundle(job: Job, models: str | Path) -> Path | None:
    """The op's model across GPUs (``<op>_<direction>_<dtype>_gpus``, train.across_gpus) under
    ``models`` (or the shipped models), or None."""
    from ckheur.learn.bundle import resolve_model_dir

    name = job.across_gpus_model_name
    folder = resolve_model_dir(Path(models) / name) if name else None
    return folder if folder is not None and folder.is_dir() else None


def across_gpus_selector(job: Job, path: Path, served: bool = True, why: str = "", **load: Any) -> Any:
    """The model across GPUs (``path``) ranking for the job's device: its descriptors (the arch
    config, or its ``devices`` entry: ``arch=gfx906 arch.num_cus=64`` is MI60), the solvers of its
    table the model knows, no remembered answers; labelled with whether the device was measured
    (``served``: in place of a bundle the GPU does not have, for the reason ``why``; else named by the user)."""
    from ckheur.families.hardware import device_label
    from ckheur.selection.selector import Selector, unmeasured_words

    sel = Selector.load(path, kernels=[k.name for k in job.pool.kernels], arch=job.arch, **load,
                        **applicability_of(job.op))
    sel.answers = {}  # other GPUs' measurements: not this GPU's fastest
    device = device_label(job.arch)
    unknown = len({k.name for k in job.pool.kernels} - {k.name for k in sel.kernels})
    seen = device in sel.trained_devices
    sel.label = sel.label.replace(unmeasured_words(device), "")  # said once, below
    sel.label += (f"; MODEL ACROSS GPUS: {job.arch_name} has no bundle of its own{'; ' + why if why else ''}; "
                  if served else f"; MODEL ACROSS GPUS, ranking for {device}: ")
    sel.label += ((f"{device}'s data was among its training data" if seen else
                   f"{device} was NEVER MEASURED: ranked by its hardware descriptors")
                  + (f"; {unknown} solvers of {job.arch_name}'s table no trained GPU measured are not ranked"
                     if unknown else ""))
    return sel


def device_bundle(src: Path, job: Job, dst: Path, answers: bool = False) -> Path:
    """The bundle ``src`` that serves the job's GPU written to ``dst`` as a bundle of the job's device
    alone, as ``stage=predict`` ranks with it: the solvers of the device's table it knows, its
    remembered answers only with ``answers``; a model across GPUs, or a bundle with GPU descriptors
    made for another device of the job's arch (``other_device_of_arch``), with the job's device as
    its arch (its descriptors, constants of what is exported from it: a C package bakes them in),
    another GPU's bundle with that GPU's arch; the manifest names the device and the bundle it came from."""
    import json

    from ckheur.families.hardware import device_label
    from ckheur.learn.bundle import load_bundle, save_bundle

    b = load_bundle(src)
    names = {k.name for k in job.pool.kernels}
    importances = json.loads((b.path / "feature_importances.json").read_text()) \
        if (b.path / "feature_importances.json").is_file() else {}
    manifest = {**b.manifest, "served_device": device_label(job.arch), "served_from": str(b.path)}
    own = b.spec.get("across_gpus") or other_device_of_arch(b.spec, job)
    spec = {**b.spec, "arch": dict(job.arch)} if own else dict(b.spec)
    kept = [k for k in b.kernels if k.name in names]
    remembered = {key: k for key, k in (b.answers or {}).items() if k in names} if answers else None
    return save_bundle(dst, b.booster, b.tflops_booster, spec, kept, b.cv_metrics, importances, manifest,
                       answers=remembered or None)


def nearest_selector(job: Job, path: Path, arch: str, why: str = "", **load: Any) -> Any:
    """The selector of another GPU's bundle (``path``, of ``arch``: ``nearest_bundle``) serving the
    job's GPU as ``stage=predict`` serves it: the solvers of its table that run on the job's GPU,
    without the other GPU's remembered answers, labelled so, with the reason ``why`` it serves."""
    from ckheur.families.hardware import device_label
    from ckheur.selection.selector import Selector

    sel = Selector.load(path, kernels=[k.name for k in job.pool.kernels], **load, **applicability_of(job.op))
    sel.answers = {}  # another GPU's measurements: not this GPU's fastest
    unknown = len({k.name for k in job.pool.kernels} - {k.name for k in sel.kernels})
    sel.label += (f"; NEAREST GPU'S MODEL: {job.arch_name} has none, {arch} is the nearest GPU with one (by "
                  f"hardware descriptors){'; ' + why if why else ''}; {device_label(job.arch)} was NEVER MEASURED "
                  f"(none of its data is in {arch}'s bundle): {arch}'s solvers that run on {job.arch_name}, without "
                  f"{arch}'s remembered answers"
                  + (f"; {unknown} solvers of {job.arch_name}'s table it never measured are not ranked" if unknown
                     else ""))
    return sel


def nearest_bundle(job: Job, models: str | Path) -> tuple[Path, str] | None:
    """For an arch without a bundle of the job's op and dtype: the bundle of that op and dtype on
    the GPU nearest by hardware descriptors (``families.hardware``, each scaled by its spread over
    the arch configs), and that GPU; None when no other arch has one."""
    import numpy as np

    from ckheur.config import known_archs, load_arch
    from ckheur.families.hardware import descriptors
    from ckheur.learn.bundle import resolve_model_dir

    name, arch = job.model_name, job.arch_name
    if not name.endswith(f"_{arch}"):
        return None
    points, folders = {}, {}
    for other in known_archs():
        cfg = job.arch if other == arch else load_arch(other)
        if job.dtype not in cfg.get("peak_tflops", {}):
            continue
        points[other] = descriptors(cfg, job.dtype)
        folder = resolve_model_dir(Path(models) / f"{name[: -len(arch)]}{other}")
        if other != arch and folder.is_dir():
            folders[other] = folder
    if not folders or arch not in points:
        return None
    spread = np.std(np.array(list(points.values())), axis=0)
    spread[spread == 0] = 1.0
    nearest = min(folders, key=lambda a: float(np.linalg.norm((points[a] - points[arch]) / spread)))
    return folders[nearest], nearest


def applicability_of(op: Any) -> dict:
    """The job's ``op.applicability`` (and ``op.listed``), ``op.available`` and ``op.remember_margin`` as
    Selector.load options when set, so the command line reaches a bundle trained without them; {} keeps the bundle's own."""
    mode = op.get("applicability")
    out = {} if mode is None else {"applicability": str(mode), "listed": op.get("listed") or None}
    if op.get("available") is not None:  # MIOpen: the solvers the user's MIOpen ships
        out["available"] = op["available"]
    if op.get("remember_margin") is not None:
        out["remember_margin"] = op["remember_margin"]
    return out


RELATIVE_ONLY = ("the analytic model's figures rank kernels against each other; they are not calibrated to "
                 "measurements (too optimistic, about 3.3x on real gfx950 problems), so no latency is given: "
                 "train a model on measurements for absolute figures")


def relative_only(selector: Any) -> bool:
    """Whether a selector ranks with the analytic model alone (no trained model): its figures are relative."""
    return selector.booster is None


def earlier_predictions(path: Path, columns: Sequence[str]) -> bool:
    """Whether ``path`` is a regular file of predictions as write_predictions writes them with these
    ``columns`` (a CSV with their header, or a JSON list whose first record has them): the only kind
    of file predict.output replaces."""
    from ckheur.files import open_regular

    try:
        with open_regular(path) as f:
            head = f.read(1 << 16).decode("utf-8", errors="replace").split("\n")
    except OSError:  # a link, a folder, a FIFO: not a file ckheur wrote
        return False
    if path.suffix == ".csv":
        return head[0] == ",".join(columns)
    if head[0] != "[" or len(head) < 2:
        return False
    if head[1] == "]":
        return True
    try:
        first = json.loads(head[1].rstrip(","))
    except ValueError:
        return False
    return isinstance(first, dict) and set(first) <= set(columns) and {"rank", "kernel"} <= set(first)


def write_predictions(selector: Any, problems: Sequence[Any], out: str | Path, *, k: int = 5,
                      label: str | None = None, progress: Any = None) -> Counter:
    """Rank each problem's kernels and write the top ``k`` as CSV rows (``.csv``) or JSON records
    (``.json``) as they come: memory does not grow with the problems; the file appears whole
    when done. An earlier predictions file is replaced; any other file there is refused (UserError).
    Returns the tiers that selected (``Selector.select``), counted."""
    import csv

    from ckheur.files import make_folder, replacing

    out = Path(out)
    if out.suffix not in (".csv", ".json"):
        raise UserError(f"predict.output={out}: give a .csv or .json file")
    label = label or selector.label
    make_folder(out.parent, "predict.output folder")
    fields = list(selector.family.problems.FIELDS)
    columns = [*fields, "rank", "kernel", "pred_tflops", "pred_latency_ms", "ranked_by", "selected", "tier", "note"]
    if (out.exists() or out.is_symlink()) and not earlier_predictions(out, columns):
        raise UserError(f"predict.output={out}: a file is there that is not predictions ckheur wrote; it is never "
                        "replaced: give a new path")
    tiers: Counter = Counter()
    relative = relative_only(selector)
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
                                "pred_latency_ms": p.flops / (tf * 1e12) * 1e3 if tf > 0 and not relative else None,
                                "ranked_by": label, "selected": chosen.kernel, "tier": chosen.source,
                                "note": "analytic: pred_tflops relative only" if relative else None}
                               for j, (n, tf) in enumerate(ranked)]
                except ValueError as e:
                    records = [{**p.to_dict(), "rank": None, "kernel": None, "pred_tflops": None, "note": str(e)}]
                if writer is not None:
                    writer.writerows(records)
                else:
                    for rec in records:
                        f.write(("\n" if first else ",\n") + json.dumps(rec))
                        first = False
                if progress is not None and ((i + 1) % 256 == 0 or i + 1 == len(problems)):
                    progress.update((i % 256) + 1)
        finally:
            if progress is not None:
                progress.close()
        if writer is None:
            f.write("\n]\n")
    return tiers


@dataclass(frozen=True)
class ExplainedKernel:
    """One kernel of the pool for one problem, as :func:`explain` shows it."""

    kernel: str
    rank: int | None  # the model's rank among the candidates it scored (1: its first choice); None: not scored
    score: float | None  # the model's score (higher ranks first)
    pred_ms: float | None  # the predicted time, when the model predicts one
    tuned_ms: float | None  # measured in the tuning database (None: not there, or the run failed)
    tuned_status: str  # the tuning database's status for it ('' when never attempted)
    find_db_ms: float | None  # MIOpen's find-db time for the problem (MIOpen's solvers, with a find-db)
    applies: bool | None  # MIOpen: listed in the find-db; other families: legal and supports the problem
    why: str  # what ``applies`` rests on
    picked: bool  # the selector's pick
    tier: str  # on the picked row, the tier that decided (Selector.select); '' on the others


def explain(selector: Any, problem: Any, *, find_db: str | Path | None = None) -> list[ExplainedKernel]:
    """Every kernel of the selector's pool for one problem, the pick first, then by model rank:
    score, predicted time, measured times (tuning database, find-db) and whether it applies.
    ``find_db``: MIOpen's find-db file giving every listed solver's time (default: the selector's)."""
    import numpy as np

    from ckheur.formats import LISTINGS, resolve
    from ckheur.selection.selector import as_problem

    p = as_problem(problem, selector.family, selector.direction, selector.dtype)
    chosen = selector.select(p)
    scored, scores, tflops = selector.scores(p)
    order = np.argsort(-np.asarray(scores), kind="stable")
    rank = {scored[i].name: r + 1 for r, i in enumerate(order)}
    at = {k.name: i for i, k in enumerate(scored)}
    timed = selector.booster is None or selector.tflops_booster is not None or selector.objective == "regression_log"
    runs = selector.tuning_db.runs(p.key()) if selector.tuning_db is not None else {}
    if find_db is None and selector.find_db is not None:
        find_db = selector.find_db.path
    listed = None
    if find_db is not None:
        listed = resolve(LISTINGS["find_db"])(find_db, p, selector.direction, selector.dtype, selector.arch["name"])
    pool = selector._pools.get(p.group)
    mask, reason = selector.family.kernels.support_mask(p, pool.support, selector.op) if pool else (None, "")
    supported = {k.name: bool(ok) for k, ok in zip(pool.kernels, mask)} if pool else {}
    reasons = dict(zip((k.name for k in pool.kernels), selector.family.kernels.support_reasons(
        p, pool.support, selector.op))) if pool and not all(mask) else {}
    rows = []
    for k in selector.kernels:
        i = at.get(k.name)
        status, lat = runs.get(k.name, ("", None))
        if k.name not in supported:
            applies, why = False, f"for {k.group} problems, not {p.group}"
        elif not supported[k.name]:
            applies = False
            why = reasons.get(k.name) or reason or "the family's support rules exclude it for this problem"
        elif selector.family.name != "miopen":
            applies, why = True, "legal in the pool and supports the problem" + \
                ("" if i is not None else "; not scored: below the analytic pre-ranking's top (cascade)")
        elif listed is None:
            applies, why = None, "no find-db given" if find_db is None else "the find-db does not hold this problem"
        else:
            applies = k.name in listed or None
            why = "listed in the find-db" if applies else "not listed in the find-db: not applicable, or slower " \
                "than the slowest listed solver"
        rows.append(ExplainedKernel(
            kernel=k.name, rank=rank.get(k.name), score=None if i is None else float(scores[i]),
            pred_ms=float(p.flops / (tflops[i] * 1e12) * 1e3) if i is not None and timed and tflops[i] > 0 else None,
            tuned_ms=lat, tuned_status=status, find_db_ms=(listed or {}).get(k.name), applies=applies, why=why,
            picked=k.name == chosen.kernel, tier=chosen.source if k.name == chosen.kernel else ""))
    last = len(rows) + 1
    return sorted(rows, key=lambda r: (not r.picked, r.rank or last, r.kernel))
