"""Measuring pairs, shared by sweeps and tuning: what a sweep works on (its plan), pairs cut
into the backend's batches, each batch appended to a dataset as it completes."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError
from ckheur.job import Job
from ckheur.progress import Progress, counts_text


class SweepError(UserError):
    """A sweep or tuning run cannot start as asked; the message says what to change."""


def chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``seq`` in consecutive slices of at most ``size``."""
    for i in range(0, len(seq), max(1, size)):
        yield seq[i:i + size]


def measure_batches(pairs: Sequence[tuple[Any, Any]], measurer: Any) -> list[tuple[Sequence, Callable]]:
    """The pairs cut into the measurer's batch size, each with its measure call (for record_batches)."""
    return [(b, measurer.measure) for b in chunks(pairs, measurer.batch_pairs)]


def record_batches(out: Path, batches: Sequence[tuple[Sequence, Callable]], measurer: Any, job: Job,
                   pcols: Mapping, kcols: Mapping, progress: Progress) -> tuple[Counter, bool]:
    """Measure batches of pairs and append each as a part file of the dataset ``out``.

    A kill loses at most the batch in flight, and Ctrl-C stops cleanly after saving what was
    measured. Returns the attempts by status and whether the run was interrupted. The caller
    owns (and closes) the measurer."""
    from ckheur.data.dataset import common_columns, measurement_rows, write_part

    common = common_columns(job.family, job.direction, job.dtype, job.arch_name, measurer.name,
                            measurer.warmup, measurer.repeat, job.arch["num_cus"])
    statuses: Counter = Counter()
    try:
        for batch, measure in batches:
            res = measure(batch)
            write_part(out, measurement_rows(batch, res, common, pcols, kcols, measurer.clock_mhz()))
            statuses.update(res.status)
            progress.update(len(batch), f"last batch: {counts_text(res.status)}")
    except KeyboardInterrupt:
        return statuses, True
    return statuses, False


@dataclass
class SweepPlan:
    """What a sweep works on: the problems, each with the pool kernels it can run, and what is done."""

    job: Job
    backend: Mapping[str, Any]  # conf/backend
    problems: list  # those some kernel of the pool can run
    out: Path  # the dataset folder
    done: set  # (*problem key, kernel) already in the dataset
    groups: dict  # kernel group -> its pool kernels
    masks: dict  # problem key -> which kernels of its group can run it (bool array)
    skipped: list  # (problem description, reason): no kernel can run it
    total_pairs: int  # problems x the kernels of their group (runnable or not)

    @property
    def pool(self) -> Any:
        return self.job.pool

    def columns(self) -> tuple[dict, dict]:
        """Dataset columns of the plan's problems (by key) and kernels (by name)."""
        from ckheur.data.dataset import kernel_columns

        return ({p.key(): p.to_dict() for p in self.problems},
                {k.name: kernel_columns(k, self.job.family) for k in self.pool.kernels})


def plan_sweep(job: Job, problems: Sequence[Any], out: str | Path, *, backend: Mapping[str, Any],
               overwrite: bool = False, retry_failed: bool = False,
               log: Callable[[str], None] = print) -> SweepPlan:
    """The pool's kernels that can run each problem and the pairs already in the dataset ``out``;
    ``overwrite`` moves an old dataset aside first, ``retry_failed`` plans failed pairs again.
    ``out`` a database URL: the sweep is one worker of the job's campaign there (:func:`sweep_all`)."""
    from ckheur.data.database import is_url
    from ckheur.data.dataset import USABLE, read_dataset

    url = str(out) if is_url(str(out)) else None
    if url and overwrite:
        raise SweepError("sweep.overwrite=true with a database URL: a database never drops measurements; name a "
                         "new campaign with ?campaign=<name> or another database")
    pool, family, out = job.pool, job.family, (url or Path(out))
    if not pool.kernels:
        raise SweepError("the kernel pool is empty (check kernels.filter and the op's allow-lists)")
    if overwrite and out.exists():
        from ckheur.files import aside_name

        aside = aside_name(out)
        out.rename(aside)
        log(f"sweep.overwrite: previous dataset kept aside as {aside}")
    done: set[tuple] = set()
    old = _campaign_rows(url, job) if url else read_dataset(out) if out.exists() else None
    if old is not None and len(old):
        check_origin(old, str(backend["name"]), job.arch_name, out)
        old = old[own_device_rows(old, job.arch) & (old.direction == job.direction) & (old.dtype == job.dtype)]
        if retry_failed:
            old = old[old.status.isin([*USABLE, "unsupported"])]
        done = set(old[[*family.problems.FIELDS, "kernel"]].itertuples(index=False, name=None))
    groups = pool.by_group()
    support = {g: family.kernels.support_arrays(ks) for g, ks in groups.items()}
    masks, skipped, total = {}, [], 0
    for p in problems:
        ks = groups.get(p.group, [])
        mask, reason = family.kernels.support_mask(p, support[p.group], job.op) if ks else \
            ([], f"no kernel for its group {p.group!r} in the pool")
        if not np.any(mask):
            skipped.append((p.describe(), reason))
            continue
        total += len(ks)
        masks[p.key()] = np.asarray(mask, dtype=bool)
    return SweepPlan(job, dict(backend), [p for p in problems if p.key() in masks], out, done, groups, masks,
                     skipped, total)


def own_device_rows(df: Any, arch: Mapping[str, Any]) -> Any:
    """Mask of the rows of ``df`` measured on the device ``arch`` (its arch, its CU count: MI60's
    rows in a gfx906 dataset that MI50 swept too; ``hardware.row_devices``): what a sweep of it has done."""
    from ckheur.families.hardware import row_devices

    devices = row_devices(df)
    return (df["arch"].astype(str) == str(arch["name"])).to_numpy() & np.isin(devices, [0, int(arch["num_cus"])])


def _campaign_rows(url: str, job: Job) -> Any:
    """The rows of the job's campaign in the database ``url`` (created when new)."""
    from ckheur.data.tuning_db import TuningDB

    tdb = TuningDB.open(url, job.op, job.arch, create=True, writable=True)
    try:
        return tdb.frame()
    finally:
        tdb.close()


def sweep_queue(plan: SweepPlan, *, progress: str = "auto", log_every_s: float = 10.0, lease_s: float = 60.0,
                max_attempts: int = 3, poll_s: float = 0.5, log: Callable[[str], None] = print) -> dict:
    """A full sweep into a database: one job per problem and slice of its group's kernels (the
    backend's batch), queued by every worker alike, so any number of workers on any number of nodes
    split it; a job's pairs already in the campaign are not measured again."""
    from ckheur.backends import make_backend
    from ckheur.data.database import work
    from ckheur.data.dataset import common_columns, measurement_rows
    from ckheur.data.tuning_db import TuningDB

    job = plan.job
    tdb = TuningDB.open(plan.out, job.op, job.arch, create=True, writable=True)
    store, cid, fam = tdb.store, tdb.campaign_id, job.family
    fields = list(fam.problems.FIELDS)
    measurer = make_backend(plan.backend, job.op, job.arch)
    pcols, kcols = plan.columns()
    kernels = {k.name: k for k in plan.pool.kernels}
    size = max(1, int(measurer.batch_pairs))
    items = []
    for p in plan.problems:
        names = [k.name for k in plan.groups[p.group]]
        for i in range(0, len(names), size):
            chunk = names[i:i + size]
            if any((*p.key(), n) not in plan.done for n in chunk):
                items.append((p.to_dict(), chunk))
    log(f"sweep: {job.label} via backend={plan.backend['name']} into {plan.out} (campaign {tdb.campaign_id}): "
        f"{len(plan.problems)} problems, {len(items)} jobs of up to {size} pairs to measure or already queued")
    for line in skipped_lines(plan.skipped):
        log(line)
    common = common_columns(fam, job.direction, job.dtype, job.arch_name, measurer.name, measurer.warmup,
                            measurer.repeat, job.arch["num_cus"])
    statuses: Counter = Counter()
    bar = Progress(sum(len(ks) for _, ks in items), progress, log_every_s)

    def measure(jobs: list) -> list[list[dict]]:
        out = []
        for j in jobs:
            p = fam.problems.problem_from_dict(dict(j.fields))
            key, mask = p.key(), plan.masks.get(p.key())
            group = {k.name: ok for k, ok in zip(plan.groups.get(p.group, []), mask if mask is not None else [])}
            pairs = [(p, kernels[n]) for n in j.kernels if n in kernels and (*key, n) not in plan.done]
            run = [(q, k) for q, k in pairs if group.get(k.name)]
            skip = [(q, k) for q, k in pairs if not group.get(k.name)]
            rows = []
            if run:
                res = measurer.measure(run)
                rows += measurement_rows(run, res, common, pcols, kcols, measurer.clock_mhz())
                statuses.update(res.status)
            if skip:
                res = not_run(skip)
                rows += measurement_rows(skip, res, common, pcols, kcols)
                statuses.update(res.status)
            bar.update(len(j.kernels))
            out.append(rows)
        return out

    t0 = time.perf_counter()
    try:
        store.enqueue(cid, items, fields, max_attempts)
        stats = work(str(plan.out), cid, measure, fields, batch_jobs=1, lease_s=lease_s, poll_s=poll_s, store=store,
                     log=log)
    finally:
        bar.close()
        measurer.close()
        failed = store.failed_jobs(cid)
        tdb.close()
    wall = time.perf_counter() - t0
    measured = sum(statuses.values())
    return {"dataset": str(plan.out), "strategy": "full", "backend": measurer.name,
            "problems": len(plan.problems) + len(plan.skipped),
            "problems_skipped": [{"problem": d, "reason": r} for d, r in plan.skipped],
            "pool": len(plan.pool.kernels), "pairs_total": plan.total_pairs,
            "pairs_skipped_existing": len(plan.done), "jobs_done_here": stats.jobs_done,
            "jobs_failed": [{**f, "key": list(f["key"])} for f in failed],
            "attempts": measured, "by_status": dict(statuses), "wall_s": round(wall, 3),
            "measurements_per_s": round(measured / wall, 1) if wall > 0 else None,
            "interrupted": stats.interrupted}


def check_origin(old: Any, backend: str, arch: str, out: Path | str, stage: str = "sweep") -> None:
    """Refuse to add rows to a dataset measured elsewhere: simulated rows beside real ones (either
    way), or rows of another device (arch). A dataset's rows record the backend, arch and host that
    measured them; a sweep (or a tune: ``stage``) that mixed them would count simulated pairs as measured."""
    from ckheur.data.dataset import SIMULATED

    backends = set(map(str, old["backend"].dropna().unique()))
    archs = sorted(set(map(str, old["arch"].dropna().unique())) - {arch})
    what = ""
    if backend != SIMULATED and SIMULATED in backends:  # replay counts as measured: it serves measurements
        what = f"{int((old['backend'].astype(str) == SIMULATED).sum())} simulated rows (backend {SIMULATED})"
    elif backend == SIMULATED and backends - {SIMULATED}:
        what = f"rows measured by backend {', '.join(sorted(backends - {SIMULATED}))}"
    elif archs:
        what = f"rows of another device ({', '.join(archs)})"
    if what:
        if stage != "sweep":
            todo = f"name another database ({stage}.db=<folder or URL>)"
        elif isinstance(out, Path):
            todo = "give sweep.output=<new dataset folder>, or sweep.overwrite=true to move the old one aside"
        else:
            todo = "name another campaign (sweep.output=<URL>?campaign=<name>) or database"
        raise SweepError(f"{stage}: {out} holds {what}; a backend={backend} {stage} on {arch} does not mix with them: "
                         f"{todo}")


def skipped_lines(skipped: Sequence[tuple[str, str]]) -> list[str]:
    """Lines naming the problems no kernel can run (the first ten)."""
    lines = [f"sweep: skipped {desc}: {reason}" for desc, reason in skipped[:10]]
    if len(skipped) > 10:
        lines.append(f"sweep: ... {len(skipped) - 10} more problems skipped (sweep_summary.json lists them)")
    return lines


def not_run(pairs: Sequence[tuple[Any, Any]]) -> Any:
    """Results for pairs the kernel cannot run: recorded as unsupported, never measured."""
    from ckheur.backends import Results

    res = Results()
    for p, k in pairs:
        res.add(float("nan"), "unsupported", f"{k.name} cannot run {p.describe()} (a tile does not divide "
                "a dimension the kernel does not pad, or a contiguous dimension is too short)")
    return res


def sweep_all(plan: SweepPlan, *, progress: str = "auto", log_every_s: float = 10.0,
              log: Callable[[str], None] = print, **queue: Any) -> dict:
    """Measure every pair of the plan not yet in its dataset (pairs the kernel cannot run are
    recorded as unsupported); returns the summary (``interrupted`` after Ctrl-C). A plan into a
    database URL runs as a worker of its job queue (:func:`sweep_queue`, ``queue``: its options)."""
    from ckheur.backends import make_backend

    job, out = plan.job, plan.out
    if isinstance(out, str):  # a database URL
        return sweep_queue(plan, progress=progress, log_every_s=log_every_s, log=log, **queue)
    todo, unsupported = [], []
    for p in plan.problems:
        key = p.key()
        for k, ok in zip(plan.groups[p.group], plan.masks[key]):
            if (*key, k.name) not in plan.done:
                (todo if ok else unsupported).append((p, k))
    total_pairs, skipped = plan.total_pairs, plan.skipped
    log(f"sweep: {job.label} via backend={plan.backend['name']}: "
        f"{len(plan.problems) + len(skipped)} problems x pool {len(plan.pool.kernels)} -> {total_pairs} pairs; "
        f"{total_pairs - len(todo) - len(unsupported)} already in {out}, {len(todo)} to measure"
        + (f", {len(unsupported)} unsupported by their kernel (recorded, not measured)" if unsupported else ""))
    for line in skipped_lines(skipped):
        log(line)
    measurer = make_backend(plan.backend, job.op, job.arch)
    pcols, kcols = plan.columns()
    bar = Progress(len(todo) + len(unsupported), progress, log_every_s)
    t0 = time.perf_counter()
    batches = [(b, not_run) for b in chunks(unsupported, 50_000)] + measure_batches(todo, measurer)
    try:
        statuses, interrupted = record_batches(out, batches, measurer, job, pcols, kcols, bar)
    finally:
        bar.close()
        measurer.close()
    wall = time.perf_counter() - t0
    measured = sum(statuses.values())
    return {"dataset": str(out), "strategy": "full", "backend": measurer.name,
            "problems": len(plan.problems) + len(skipped),
            "problems_skipped": [{"problem": d, "reason": r} for d, r in skipped],
            "pool": len(plan.pool.kernels), "pairs_total": total_pairs,
            "pairs_skipped_existing": total_pairs - len(todo) - len(unsupported),
            "attempts": measured, "by_status": dict(statuses), "wall_s": round(wall, 3),
            "measurements_per_s": round(measured / wall, 1) if wall > 0 else None,
            "interrupted": interrupted}
