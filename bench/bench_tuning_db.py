#!/usr/bin/env python
"""The tuning database's job queue: throughput and faults, on SQLite, PostgreSQL and today's
Parquet folder with flock claims, in one run.

Throughput: workers (processes) claim one job at a time, "measure" it (no GPU: the database's
own cost is what is timed) and record its result with the job's completion; cycles/s is jobs
done per second of wall time, claim latency the time of each claim transaction. The Parquet
baseline does the same with ``TuningDB.claim`` (flock) and a part file per result.
Targets: PostgreSQL, 8 workers: >= 1,000 cycles/s, p99 claim < 50 ms; SQLite, 4 workers: >= 1,000/s.

Faults, each ``--repeats`` times, counting lost and duplicated results:
  kill    a worker is SIGKILLed mid-measurement; after its lease the job runs once more;
  many    8 workers on ``--fault-jobs`` jobs;
  drop    (PostgreSQL) the server cuts every worker connection mid-campaign, repeatedly;
  restart (PostgreSQL, root, the cluster .ci/postgres.sh started) the server restarts mid-campaign.

    eval "$(sudo bash .ci/postgres.sh)"      # CKHEUR_TEST_PG_URL, PGPASSWORD, CKHEUR_TEST_PG_CLUSTER
    python bench/bench_tuning_db.py                        # full sizes: 8,000 jobs, 2,000-job faults x 20
    python bench/bench_tuning_db.py --jobs 2000 --repeats 2 --fault-jobs 400   # quick
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ckheur.data.database import Store, TEST_URL_ENV, work  # noqa: E402

FIELDS = ["M", "N"]
IDENT = {"family": "gemm", "direction": "fwd", "dtype": "bf16", "arch": "gfx950"}


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _fresh(kind: str, tmp: Path) -> str:
    """A new empty database: a SQLite file, or a new schema on the PostgreSQL of CKHEUR_TEST_PG_URL."""
    if kind == "sqlite":
        return f"sqlite:///{tmp / f'{uuid.uuid4().hex[:8]}.db'}"
    import psycopg

    base = os.environ[TEST_URL_ENV]
    schema = f"b_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"CREATE SCHEMA {schema}")
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"


def _campaign(url: str, jobs: int, kernels: int = 1) -> int:
    with Store(url, create=True) as s:
        cid = s.campaign("bench", IDENT, create=True)
        for i in range(0, jobs, 1000):
            s.enqueue(cid, [({"M": m, "N": 1}, [f"k{j}" for j in range(kernels)]) for m in range(i, min(jobs, i + 1000))],
                      FIELDS, max_attempts=5)
    return cid


def _rows(jobs: list) -> list:
    return [[{"M": j.fields["M"], "N": 1, "kernel": k, "timestamp": f"{time.time():.6f}-{uuid.uuid4().hex[:6]}",
              "status": "ok", "latency_ms": 1.0 + j.fields["M"]} for k in j.kernels] for j in jobs]


class TimedStore(Store):
    """A store that keeps the wall time of each claim transaction."""

    claims: list

    def claim(self, *a, **k):
        t = time.perf_counter()
        try:
            return super().claim(*a, **k)
        finally:
            self.claims.append((time.perf_counter() - t) * 1e3)


def _worker(url: str, cid: int, out: str, sleep_s: float = 0.0, marker: str | None = None, lease_s: float = 2.0) -> None:
    store = TimedStore(url)
    store.claims = []

    def measure(jobs):
        if marker:
            Path(marker).write_text("x")
        if sleep_s:
            time.sleep(sleep_s)
        return _rows(jobs)

    work(url, cid, measure, FIELDS, batch_jobs=1, lease_s=lease_s, poll_s=0.05, store=store, log=lambda s: None)
    Path(out).write_text("\n".join(f"{x:.4f}" for x in store.claims))
    store.close()


def _start(n: int, url: str, cid: int, tmp: Path, **kw) -> list:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(url, cid, str(tmp / f"lat-{i}-{uuid.uuid4().hex[:4]}.txt")), kwargs=kw)
             for i in range(n)]
    for p in procs:
        p.start()
    return procs


def _check(url: str, cid: int, jobs: int, kernels: int = 1) -> tuple[int, int, dict]:
    """(lost, duplicated) results and the job states."""
    with Store(url) as s:
        got = s.execute("SELECT p.key, m.kernel FROM measurements m JOIN problems p ON p.id = m.problem_id "
                        "WHERE m.campaign_id = ?", (cid,)).fetchall()
        counts = s.job_counts(cid)
    return jobs * kernels - len(set(got)), len(got) - len(set(got)), counts


def throughput(kind: str, workers: int, jobs: int, tmp: Path) -> dict:
    url = _fresh(kind, tmp)
    cid = _campaign(url, jobs)
    lat_dir = Path(tempfile.mkdtemp(dir=tmp))
    t0 = time.perf_counter()
    procs = _start(workers, url, cid, lat_dir)
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    lats = [float(x) for f in lat_dir.glob("lat-*.txt") for x in f.read_text().split()]
    lost, dup, _ = _check(url, cid, jobs)
    return {"store": kind, "workers": workers, "jobs": jobs, "cycles_s": jobs / wall,
            "p50_ms": _pct(lats, 0.5), "p99_ms": _pct(lats, 0.99), "lost": lost, "dup": dup}


def _parquet_worker(folder: str, keys: list, out: str) -> None:
    from ckheur.data.dataset import write_part
    from ckheur.data.tuning_db import TuningDB

    op = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}
    db = TuningDB.open(folder, op, "gfx950")
    row = _template_row()
    lats = []
    for key in keys:
        t = time.perf_counter()
        claim = db.claim(key)
        lats.append((time.perf_counter() - t) * 1e3)
        if claim is None:
            continue
        if not db._parts or key not in db._runs:
            db.refresh()
        if key not in db._runs:
            write_part(folder, [{**row, "N": key[0], "timestamp": f"{time.time():.6f}"}])
            db._runs[key] = {}
        claim.release()
    Path(out).write_text("\n".join(f"{x:.4f}" for x in lats))


def _template_row() -> dict:
    from ckheur.data.dataset import read_dataset

    return read_dataset(ROOT / "ckheur" / "measurements" / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv.gz").iloc[0].to_dict()


def throughput_parquet(workers: int, jobs: int, tmp: Path) -> dict:
    """Today's folder database: flock claim, a part per result, release (a refresh only when a
    problem may be new: reading every part per cycle would be slower still)."""
    from ckheur.data.dataset import read_dataset
    from ckheur.data.tuning_db import TuningDB

    folder = tmp / f"pq-{uuid.uuid4().hex[:6]}"
    TuningDB.open(folder, {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}, "gfx950", create=True)
    keys = [(n + 1,) for n in range(jobs)]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_parquet_worker, args=(str(folder), keys[i::workers], str(tmp / f"pql-{i}.txt")))
             for i in range(workers)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    lats = [float(x) for i in range(workers) for x in (tmp / f"pql-{i}.txt").read_text().split()]
    n = len(read_dataset(folder, dedupe=False))
    return {"store": "parquet+flock", "workers": workers, "jobs": jobs, "cycles_s": jobs / wall,
            "p50_ms": _pct(lats, 0.5), "p99_ms": _pct(lats, 0.99), "lost": jobs - n, "dup": 0}


def fault_kill(kind: str, tmp: Path) -> tuple[int, int]:
    url = _fresh(kind, tmp)
    cid = _campaign(url, 3, kernels=3)
    marker = tmp / f"m-{uuid.uuid4().hex[:6]}"
    [p] = _start(1, url, cid, tmp, sleep_s=600, marker=str(marker), lease_s=1.0)
    while not marker.exists():
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    for q in _start(2, url, cid, tmp, lease_s=1.0):
        q.join()
    lost, dup, counts = _check(url, cid, 3, 3)
    with Store(url) as s:
        extra = sum(a - 1 for (a,) in s.execute("SELECT attempts FROM jobs WHERE campaign_id = ?", (cid,)).fetchall())
    assert counts == {"done": 3}, counts
    return lost, dup + max(0, extra - 1)  # exactly one job ran twice (the one killed)


def fault_many(kind: str, jobs: int, tmp: Path) -> tuple[int, int]:
    url = _fresh(kind, tmp)
    cid = _campaign(url, jobs, kernels=2)
    for p in _start(8, url, cid, tmp, sleep_s=0.001):
        p.join()
    lost, dup, counts = _check(url, cid, jobs, 2)
    return lost, dup


def fault_server(kind: str, jobs: int, tmp: Path, how: str) -> tuple[int, int]:
    """PostgreSQL cuts the workers' connections (drop), or restarts (restart), mid-campaign."""
    import psycopg

    url = _fresh(kind, tmp)
    cid = _campaign(url, jobs)
    procs = _start(4, url, cid, tmp, sleep_s=0.004)
    time.sleep(0.5)
    if how == "restart":
        ver, name = os.environ["CKHEUR_TEST_PG_CLUSTER"].split()
        subprocess.run(["pg_ctlcluster", ver, name, "restart", "-m", "fast"], check=True)
    else:
        for _ in range(5):
            with psycopg.connect(os.environ[TEST_URL_ENV], autocommit=True) as c:
                c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'ckheur' "
                          "AND pid <> pg_backend_pid()")
            time.sleep(0.2)
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * 4, [p.exitcode for p in procs]
    lost, dup, counts = _check(url, cid, jobs)
    assert counts == {"done": jobs}, counts
    return lost, dup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=8000, help="jobs of each throughput run")
    ap.add_argument("--fault-jobs", type=int, default=2000, help="jobs of the 8-worker fault run")
    ap.add_argument("--repeats", type=int, default=20, help="runs of each fault")
    ap.add_argument("--skip-faults", action="store_true")
    args = ap.parse_args()
    kinds = ["sqlite"] + (["postgresql"] if os.environ.get(TEST_URL_ENV) else [])
    if len(kinds) == 1:
        print(f"(no {TEST_URL_ENV}: PostgreSQL left out; eval \"$(sudo bash .ci/postgres.sh)\" starts one)")
    with tempfile.TemporaryDirectory(prefix="bench-tuning-db-") as t:
        tmp = Path(t)
        rows = [throughput_parquet(4, min(args.jobs, 2000), tmp), throughput("sqlite", 4, args.jobs, tmp)]
        if "postgresql" in kinds:
            rows.append(throughput("postgresql", 8, args.jobs, tmp))
        print(f"{'store':<15}{'workers':>8}{'jobs':>7}{'cycles/s':>10}{'claim p50 ms':>14}{'p99 ms':>8}{'lost':>6}{'dup':>5}")
        for r in rows:
            print(f"{r['store']:<15}{r['workers']:>8}{r['jobs']:>7}{r['cycles_s']:>10,.0f}{r['p50_ms']:>14.2f}"
                  f"{r['p99_ms']:>8.2f}{r['lost']:>6}{r['dup']:>5}")
        base = rows[0]["cycles_s"]
        print("ratio to parquet+flock: " + ", ".join(f"{r['store']} {r['cycles_s'] / base:.1f}x" for r in rows[1:]))
        if args.skip_faults:
            return
        faults = [("kill", k, lambda k=k: fault_kill(k, tmp)) for k in kinds]
        faults += [("many", k, lambda k=k: fault_many(k, args.fault_jobs, tmp)) for k in kinds]
        if "postgresql" in kinds:
            faults.append(("drop", "postgresql", lambda: fault_server("postgresql", 400, tmp, "drop")))
            if os.environ.get("CKHEUR_TEST_PG_CLUSTER") and os.geteuid() == 0:
                faults.append(("restart", "postgresql", lambda: fault_server("postgresql", 400, tmp, "restart")))
        print(f"\n{'fault':<9}{'store':<12}{'runs':>5}{'lost':>6}{'dup':>5}{'median s':>10}")
        for name, kind, fn in faults:
            lost = dup = 0
            secs = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                lo, du = fn()
                secs.append(time.perf_counter() - t0)
                lost, dup = lost + lo, dup + du
            print(f"{name:<9}{kind:<12}{args.repeats:>5}{lost:>6}{dup:>5}{statistics.median(secs):>10.2f}")


if __name__ == "__main__":
    main()
