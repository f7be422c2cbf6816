"""Tuning: time a selector's top-k kernels of each problem into a tuning database.

Pairs already in the database are never measured again, so a killed run resumes where it
stopped; a problem whose top-k all failed gets the next k until one runs or the pool is
exhausted. Runs sharing a database claim problems, so each problem is measured once: in a folder
database with ``flock``, in a database URL (SQLite, PostgreSQL) as workers of its job queue,
each job (a problem and the kernels to time) claimed with a lease (``ckheur.data.database.work``)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ckheur.job import Job
from ckheur.progress import Progress
from ckheur.sweeping.measuring import SweepError, check_origin, measure_batches, record_batches


def tune(selector: Any, problems: Sequence[Any], db: str | Path, job: Job, *, backend: Mapping[str, Any],
         top_k: int = 3, progress: str = "auto", log_every_s: float = 10.0, claim_poll_s: float = 0.5,
         label: str | None = None, log: Callable[[str], None] = print, lease_s: float = 60.0,
         max_attempts: int = 3) -> dict:
    """Measure ``selector``'s top ``top_k`` kernels of each problem through ``backend`` into the
    tuning database folder ``db`` (created if new); returns the summary (``interrupted`` after Ctrl-C).
    For one problem the summary also lists its ranking with what was measured (``problem``).
    ``db`` a database URL: this run is one worker of its campaign's job queue, holding each job
    for ``lease_s`` (renewed while measuring), a job failing ``max_attempts`` times is given up."""
    from ckheur.backends import make_backend
    from ckheur.data.dataset import kernel_columns
    from ckheur.problems import ProblemError
    from ckheur.data.tuning_db import TuningDB

    k = top_k
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise SweepError(f"tune.top_k={k!r}: must be an integer >= 1")
    label = label or selector.label
    tdb = TuningDB.open(db, job.op, job.arch, create=True, writable=True)  # refused for another device
    if len(tdb):
        check_origin(tdb.frame(), str(backend["name"]), job.arch_name, tdb.path, stage="tune")
    log(f"tune: {job.label}: top-{k} of {label} for {len(problems)} problem(s) via backend={backend['name']} "
        f"into {tdb.path} ({len(tdb)} problems already there)")
    ranked: dict[tuple, list] = {}
    skipped = []
    for p in problems:
        try:
            ranked[p.key()] = selector._ranking(p)[0]
        except ProblemError as e:
            skipped.append({"problem": p.describe(), "reason": str(e)})
    by_key = {p.key(): p for p in problems}

    measurer = make_backend(backend, job.op, job.arch)
    kcols = {kern.name: kernel_columns(kern, job.family) for ks in ranked.values() for kern in ks}
    pcols = {key: by_key[key].to_dict() for key in ranked}
    already = sum(kern.name in tdb.runs(key) for key, ks in ranked.items() for kern in ks[:k])
    bar = Progress(sum(len(_wanted(tdb, ks, key, k)) for key, ks in ranked.items()), progress, log_every_s,
                   prefix="tune")
    statuses: Counter = Counter()
    t0 = time.perf_counter()
    rounds, waited, mine = 0, set(), set()
    claims: list = []
    todo: list = []

    def flush() -> bool:
        """Measure and record the claimed pairs, then give the claims back; True when interrupted."""
        got, stop = record_batches(tdb.path, measure_batches(todo, measurer), measurer, job, pcols, kcols, bar)
        statuses.update(got)
        mine.update(p.key() for p, _ in todo)
        for c in claims:
            c.release()
        claims.clear()
        todo.clear()
        return stop

    interrupted = False
    if tdb.store is not None:  # a database URL: one worker of its campaign's job queue
        had = {key for key in ranked if key in tdb}
        try:
            interrupted, mine, failed = _work_queue(tdb, ranked, by_key, k, measurer, job, bar, statuses, claim_poll_s,
                                                    lease_s, max_attempts, log)
        finally:
            bar.close()
            measurer.close()
        summary = _summary(tdb, ranked, k, skipped, statuses, already, int(bool(mine)), time.perf_counter() - t0,
                           interrupted, label)
        summary["problems_measured_by_other_processes"] = len({key for key in ranked if key in tdb} - mine - had)
        summary["jobs_failed"] = failed
        if len(problems) == 1 and not skipped:
            summary["problem"] = _one_problem(tdb, ranked, by_key, k)
        tdb.close()
        return summary
    try:
        while not interrupted:
            tdb.refresh()
            open_keys = [key for key, ks in ranked.items() if _wanted(tdb, ks, key, k)]
            if not open_keys:
                break
            before, held_elsewhere = len(mine), 0
            for key in open_keys:
                claim = tdb.claim(key)
                if claim is None:  # another live process is measuring it
                    held_elsewhere += 1
                    waited.add(key)
                    continue
                tdb.refresh()  # it may have been finished just before our claim
                want = _wanted(tdb, ranked[key], key, k)
                if not want:
                    claim.release()
                    continue
                claims.append(claim)
                todo.extend((by_key[key], kern) for kern in want)
                if len(todo) >= measurer.batch_pairs and (interrupted := flush()):
                    break
            if todo and not interrupted:
                interrupted = flush()
            rounds += len(mine) > before
            if len(mine) == before and held_elsewhere:
                time.sleep(claim_poll_s)  # every open problem is being measured elsewhere: wait for it
    finally:
        for c in claims:
            c.release()
        bar.close()
        measurer.close()  # rounds share one backend
    wall = time.perf_counter() - t0
    summary = _summary(tdb, ranked, k, skipped, statuses, already, rounds, wall, interrupted, label)
    summary["problems_measured_by_other_processes"] = len(waited - mine)
    if len(problems) == 1 and not skipped:
        summary["problem"] = _one_problem(tdb, ranked, by_key, k)
    return summary


def _work_queue(tdb: Any, ranked: dict, by_key: dict, k: int, measurer: Any, job: Job, bar: Any, statuses: Counter,
                poll_s: float, lease_s: float, max_attempts: int, log: Callable[[str], None]) -> tuple[bool, set, list]:
    """Queue a job per problem still wanting kernels timed, and work the campaign's queue with the
    other workers until nothing is left; then again for problems whose timed kernels all failed
    (their next k). Returns (interrupted, problem keys this worker measured, jobs out of attempts)."""
    from ckheur.data.database import work
    from ckheur.data.dataset import common_columns, kernel_columns, measurement_rows

    store, cid, fam = tdb.store, tdb.campaign_id, job.family
    fields = list(fam.problems.FIELDS)
    kernels = {kern.name: kern for kern in job.pool.kernels}
    kernels.update({kern.name: kern for ks in ranked.values() for kern in ks})
    common = common_columns(fam, job.direction, job.dtype, job.arch_name, measurer.name, measurer.warmup,
                            measurer.repeat, job.arch["num_cus"])
    mine: set = set()

    def measure(jobs: list) -> list[list[dict]]:
        missing = sorted({n for j in jobs for n in j.kernels if n not in kernels})
        if missing:  # another worker's pool (a different kernels.filter): this one cannot time them
            raise SweepError(f"kernels not in this worker's pool: {', '.join(missing[:5])}")
        probs = [fam.problems.problem_from_dict(dict(j.fields)) for j in jobs]
        pairs = [(p, kernels[n]) for p, j in zip(probs, jobs) for n in j.kernels]
        res = measurer.measure(pairs)
        rows = measurement_rows(pairs, res, common, {p.key(): p.to_dict() for p in probs},
                                {n: kernel_columns(kernels[n], fam) for j in jobs for n in j.kernels},
                                measurer.clock_mhz())
        statuses.update(res.status)
        bar.update(len(pairs))
        mine.update(p.key() for p in probs)
        out, i = [], 0
        for j in jobs:
            out.append(rows[i:i + len(j.kernels)])
            i += len(j.kernels)
        return out

    store.note_backend(cid, {"name": measurer.name, "warmup": measurer.warmup, "repeat": measurer.repeat})
    while True:
        tdb.refresh()
        gave_up = {(tuple(f["key"]), tuple(f["kernels"])) for f in store.failed_jobs(cid)}
        items = []
        for key, ks in ranked.items():
            names = tuple(kern.name for kern in _wanted(tdb, ks, key, k))
            if names and (key, names) not in gave_up:
                items.append((by_key[key].to_dict(), list(names)))
        if not items:
            break
        new = store.enqueue(cid, items, fields, max_attempts)
        stats = work(str(tdb.path), cid, measure, fields, batch_jobs=max(1, measurer.batch_pairs // k),
                     lease_s=lease_s, poll_s=poll_s, store=store, log=log)
        if stats.interrupted:
            return True, mine, []
        if not new and not stats.jobs_done and not stats.waits:
            break  # every job wanted is already there and finished: nothing more this worker can do
    failed = store.failed_jobs(cid)
    for f in failed[:10]:
        log(f"tune: gave up on {f['key']} after {f['attempts']} attempts: {f['last_error']}")
    return False, mine, [{**f, "key": list(f["key"])} for f in failed]


def _wanted(db: Any, ks: list, key: tuple, k: int) -> list:
    """Kernels still to time on a problem: its top-k not yet attempted; once those are all
    attempted and none ran, the next k not yet attempted."""
    tried = db.runs(key)
    want = [kern for kern in ks[:k] if kern.name not in tried]
    if want or any(lat is not None for _, lat in tried.values()):
        return want
    return [kern for kern in ks if kern.name not in tried][:k]


def _one_problem(db: Any, ranked: dict, by_key: dict, k: int) -> dict:
    """The single problem's ranking with each kernel's measured milliseconds (or status), and the pick."""
    key = next(iter(ranked))
    runs = db.runs(key)
    rows = [[i + 1, kern.name, None if kern.name not in runs else
             (runs[kern.name][1] if runs[kern.name][1] is not None else runs[kern.name][0])]
            for i, kern in enumerate(ranked[key][: max(k, len(runs))])]
    best = db.best(key)
    return {"problem": by_key[key].describe(), "ranking": rows, "selected": list(best) if best else None}


def _summary(db: Any, ranked: dict, k: int, skipped: list, statuses: Counter, already: int, rounds: int,
             wall: float, interrupted: bool, label: str) -> dict:
    """What was measured, and how the tuned picks compare with the model's first choice."""
    tuned, model_right, gains = 0, 0, []
    for key, ks in ranked.items():
        hit = db.best(key)
        if hit is None:
            continue
        tuned += 1
        runs = db.runs(key)
        first = runs.get(ks[0].name, (None, None))[1]
        model_right += hit[0] == ks[0].name
        if first:
            gains.append(first / hit[1])
    return {"database": str(db.path), "ranked_by": label, "top_k": k, "problems": len(ranked) + len(skipped),
            "problems_skipped": skipped, "problems_tuned": tuned,
            "problems_without_a_running_kernel": len(ranked) - tuned, "pairs_already_in_db": already,
            "attempts": sum(statuses.values()), "by_status": dict(statuses), "rounds": rounds,
            "model_top1_was_fastest": model_right,
            # Timing every candidate the family's rules admit (MIOpen's Find: every applicable solver;
            # here every solver the op ranks: the arch's table, less what op.applicability removes)
            "exhaustive_runs": sum(len(ks) for ks in ranked.values()),
            "mean_speedup_over_model_top1": (sum(gains) / len(gains)) if gains else None,
            "wall_s": round(wall, 3), "interrupted": interrupted}
