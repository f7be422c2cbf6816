"""The database behind tuning databases (ckheur.data.database), on SQLite and on PostgreSQL: jobs
with leases split among worker processes, faults (a killed worker, a dropped connection, a
retried commit), Parquet export and import, the stages through a database URL, and security.

PostgreSQL tests run against CKHEUR_TEST_PG_URL (``eval "$(sudo bash .ci/postgres.sh)"`` starts
one); without it they skip here and fail in CI."""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from ckheur.data.database import DatabaseError, Store, TEST_URL_ENV, mask_url, work
from ckheur.data.tuning_db import export_dataset, import_dataset
from tests.conftest import ROOT, run_cli

REAL = ROOT / "ckheur" / "measurements" / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv.gz"
FIELDS = ["N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "stride_d", "stride_h", "stride_w", "pad_d", "pad_h",
          "pad_w", "dilation_d", "dilation_h", "dilation_w"]

IDENT = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16", "arch": "gfx950"}
EVIL = "x'); DROP TABLE jobs;--"


def _pg_url() -> str:
    url = os.environ.get(TEST_URL_ENV)
    if url:
        return url
    if os.environ.get("CI") == "true":
        pytest.fail(f"{TEST_URL_ENV} is not set: .ci/run starts PostgreSQL with .ci/postgres.sh, and it did not")
    pytest.skip(f"no PostgreSQL for the tests: start one with eval \"$(sudo bash .ci/postgres.sh)\" ({TEST_URL_ENV})")


@contextlib.contextmanager
def _pg_schema():
    """A URL of a new schema of its own on the test PostgreSQL, dropped afterwards."""
    import psycopg

    base = _pg_url()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=10) as c:
            c.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {mask_url(base)} does not answer: {e}")
        pytest.skip(f"PostgreSQL at {mask_url(base)} does not answer ({e}); start one with .ci/postgres.sh")
    sep = "&" if "?" in base else "?"
    # its own application_name too: the test that cuts connections cuts only its own
    yield f"{base}{sep}options=-csearch_path%3D{schema}&application_name={schema}"
    with psycopg.connect(base, autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A fresh, empty database: a SQLite file, or a schema of its own on the test PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tuning.db'}"
        return
    with _pg_schema() as u:
        yield u


@functools.lru_cache(maxsize=1)
def _template() -> tuple[dict, tuple]:
    """A real measurement row (its problem varied by N below), and the family's problem fields."""
    from ckheur.data.dataset import read_dataset
    from ckheur.families import get_family

    fields = tuple(get_family("grouped_conv").problems.FIELDS)
    return read_dataset(REAL, dedupe=False).iloc[0].to_dict(), fields


def _problem(n: int) -> dict:
    row, fields = _template()
    return {**{f: row[f] for f in fields}, "N": n}


def _campaign(url: str, jobs: int, kernels: int = 2, name: str = "c") -> int:
    with Store(url, create=True) as s:
        cid = s.campaign(name, IDENT, create=True)
        s.enqueue(cid, [(_problem(i + 1), [f"k{j}" for j in range(kernels)]) for i in range(jobs)], FIELDS,
                  max_attempts=3)
    return cid


def _rows(jobs) -> list:
    """Each job's result: a dataset row per kernel, stamped uniquely, its time a function of the problem."""
    row = _template()[0]
    return [[{**row, **j.fields, "kernel": k, "timestamp": f"{time.time():.6f}-{uuid.uuid4().hex[:4]}",
              "latency_ms": 1.0 + j.fields["N"]} for k in j.kernels] for j in jobs]


def _worker(url: str, cid: int, sleep_s: float = 0.0, marker: str | None = None) -> None:
    def measure(jobs):
        if marker:
            Path(marker).write_text("measuring")
        time.sleep(sleep_s)
        return _rows(jobs)

    work(url, cid, measure, FIELDS, batch_jobs=4, lease_s=1.5, poll_s=0.05, log=lambda s: None)


def _state(url: str, cid: int) -> tuple[dict, list]:
    with Store(url) as s:
        counts = s.job_counts(cid)
        rows = s.execute("SELECT p.key, m.kernel FROM measurements m JOIN problems p ON p.id = m.problem_id "
                         "WHERE m.campaign_id = ?", (cid,)).fetchall()
    return counts, rows


def test_workers_split_a_campaign_each_job_once_while_exports_and_an_import_run(url, tmp_path):
    """Six worker processes on 240 jobs: every job done once, every result kept; meanwhile two
    exports at once (each a consistent snapshot) and an import into another campaign."""
    from ckheur.data.dataset import read_dataset, write_part

    cid = _campaign(url, 240)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(url, cid, 0.002)) for _ in range(6)]
    for p in procs:
        p.start()
    ds = tmp_path / "ds"
    write_part(ds, read_dataset(REAL, dedupe=False).head(300))
    out = {}

    def export(name):
        out[name] = export_dataset(url, "c", tmp_path / name)

    threads = [threading.Thread(target=export, args=(n,)) for n in ("e1", "e2")]
    for t in threads:
        t.start()
    got = import_dataset(url, ds)
    for t in threads:
        t.join(timeout=300)
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * 6
    counts, rows = _state(url, cid)
    assert counts == {"done": 240}
    assert len(rows) == 480 and len(set(rows)) == 480  # each (problem, kernel) once
    assert got["rows"] == 300 and list(got["campaigns"].values()) == [300]
    for name in ("e1", "e2"):  # a snapshot: whole jobs only, no pair twice
        df = read_dataset(tmp_path / name, dedupe=False) if out[name]["rows"] else None
        if df is not None:
            assert not df.duplicated(["N", "kernel"]).any()
            assert (df.groupby("N").size() == 2).all()


def test_a_killed_worker_s_job_runs_exactly_once_more_after_its_lease(url, tmp_path):
    cid = _campaign(url, 1, kernels=3)
    marker = tmp_path / "started"
    p = multiprocessing.get_context("fork").Process(target=_worker, args=(url, cid, 600, str(marker)))
    p.start()
    deadline = time.time() + 120  # a hang guard
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.02)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    _worker(url, cid)  # waits for the lease to run out, then measures it
    counts, rows = _state(url, cid)
    assert counts == {"done": 1} and sorted(k for _, k in rows) == ["k0", "k1", "k2"]
    with Store(url) as s:
        attempts, error = s.execute("SELECT attempts, last_error FROM jobs WHERE campaign_id = ?", (cid,)).fetchone()
    assert attempts == 2 and "expired" in error


def test_a_lease_is_renewed_while_measuring_and_a_job_out_of_attempts_keeps_its_error(url):
    cid = _campaign(url, 1)
    t = threading.Thread(target=_worker, args=(url, cid, 3.5))  # 3.5 s on a 1.5 s lease
    t.start()
    time.sleep(0.3)
    with Store(url) as s:
        stolen = []
        while t.is_alive():
            stolen += s.claim(cid, "thief", 5, 1.0)
            time.sleep(0.2)
    t.join()
    assert stolen == [] and _state(url, cid)[0] == {"done": 1}

    cid = _campaign(url, 0, name="broken")
    with Store(url) as s:
        s.enqueue(cid, [(_problem(1), ["bad"])], FIELDS, max_attempts=2)

    def broken(jobs):
        raise RuntimeError("the GPU hung")

    stats = work(url, cid, broken, FIELDS, lease_s=5, poll_s=0.01, log=lambda s: None)
    with Store(url) as s:
        assert s.job_counts(cid) == {"failed": 1}
        [f] = s.failed_jobs(cid)
    assert stats.jobs_retried == 2 and f["attempts"] == 2 and f["last_error"] == "RuntimeError: the GPU hung"


def test_a_retried_commit_and_a_dropped_connection_lose_nothing_and_add_nothing(url):
    """The commit of a result landed but its answer was lost: the retry records nothing twice. On
    PostgreSQL the worker's connection is also cut by the server before its commit: it reconnects."""
    cid = _campaign(url, 3)
    with Store(url) as s:
        jobs = s.claim(cid, "w", 3, 30)
        rows = _rows(jobs)
        assert sorted(s.complete(cid, jobs, rows, FIELDS, "w")) == [j.id for j in jobs]
        assert sorted(s.complete(cid, jobs, rows, FIELDS, "w")) == [j.id for j in jobs]  # the retry
        assert s.complete(cid, jobs, rows, FIELDS, "other") == []  # another worker's late result: dropped
    counts, got = _state(url, cid)
    assert counts == {"done": 3} and len(got) == 6
    if not url.startswith("postgresql"):
        return
    cid = _campaign(url, 0, name="cut")
    with Store(url) as s:
        s.enqueue(cid, [(_problem(i + 1), ["k"]) for i in range(4)], FIELDS)
    killer, name = Store(url), url.rsplit("application_name=", 1)[1]

    def measure_then_cut(jobs):  # the server drops the worker's connections before its commit
        killer.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = ? "
                       "AND pid <> pg_backend_pid()", (name,))
        return _rows(jobs)

    stats = work(url, cid, measure_then_cut, FIELDS, batch_jobs=2, lease_s=5, poll_s=0.01, log=lambda s: None)
    killer.close()
    counts, got = _state(url, cid)
    assert counts == {"done": 4} and len(got) == 4 == len(set(got)) and stats.jobs_done == 4


def test_hostile_names_are_only_ever_bound_parameters(url):
    with Store(url, create=True) as s:
        cid = s.campaign(EVIL, {**IDENT, "arch": EVIL}, create=True)
        s.enqueue(cid, [({"M": EVIL, "N": 1}, [EVIL])], ["M", "N"])
        [job] = s.claim(cid, EVIL, 1, 30)
        assert job.fields["M"] == EVIL and job.kernels == [EVIL]
        s.complete(cid, [job], [[{"M": EVIL, "N": 1, "kernel": EVIL, "timestamp": EVIL, "status": "ok",
                                  "latency_ms": 1.0}]], ["M", "N"], EVIL)
        assert s.job_counts(cid) == {"done": 1} and s.rows(cid)[0]["kernel"] == EVIL
        assert [c["name"] for c in s.campaigns()] == [EVIL]


def test_export_then_import_is_lossless(url, tmp_path):
    """Real measurements (the shipped gfx950 CSV) and a tuning database folder go into the database
    and come back out as dataset folders, row for row and type for type."""
    import pandas as pd

    from ckheur.data.dataset import read_dataset, write_part

    ds = tmp_path / "ds"
    real = read_dataset(REAL, dedupe=False)
    write_part(ds, real)
    write_part(ds, real.head(5).assign(timestamp="2030-01-01T00:00:00+00:00", latency_ms=9.0))  # later attempts
    got = import_dataset(url, ds)
    assert got["rows"] == len(real) + 5
    assert import_dataset(url, ds)["rows"] == len(real) + 5  # again: already there, one row each
    [name] = got["campaigns"]
    export_dataset(url, name, tmp_path / "out")
    key = [c for c in real.columns if c not in ("latency_ms", "latency_spread_ms", "tflops", "clock_mhz")]
    a = read_dataset(ds, dedupe=False).sort_values(key).reset_index(drop=True)
    b = read_dataset(tmp_path / "out", dedupe=False).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
    assert json.loads((tmp_path / "out" / "tuning_db.json").read_text())["arch"] == "gfx950"
    with pytest.raises(DatabaseError, match="not empty"):
        export_dataset(url, name, tmp_path / "out")


def test_stage_tune_and_sweep_through_a_database_url(url, tmp_path):
    """stage=tune into the database (real measurements replayed): its pick is the fastest of the
    kernels it timed, at the recorded time; predict's tier reads it; stage=sweep into it measures
    every pair once."""
    from ckheur.data.dataset import read_dataset
    from ckheur.families import get_family

    line = "problem=convbfp16 -n 1 -c 128 -H 32 -W 32 -k 256 -y 2 -x 2 -u 2 -v 2"
    r = run_cli("stage=tune", "op=fwd", "backend=replay", f"backend.paths=[{REAL}]", line, "tune.progress=none",
                f"tune.db='{url}'", f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    one = json.loads((tmp_path / "a" / "tune_summary.json").read_text())["problem"]
    from ckheur.selection.selector import as_problem

    one_key = as_problem(line.split("=", 1)[1], get_family("grouped_conv"), "fwd", "bf16").to_dict()
    fields = get_family("grouped_conv").problems.FIELDS
    real = read_dataset(REAL)
    real = real[(real[list(fields)] == [one_key[f] for f in fields]).all(axis=1)].set_index("kernel").latency_ms
    assert one["selected"] == list(min((real[k], k) for _, k, _ in one["ranking"]))[::-1]
    r = run_cli("stage=predict", "op=fwd", line, f"predict.tuning_db='{url}'", f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 0 and "(tier: tuning_db, measured" in r.stdout, r.stderr
    r = run_cli("stage=sweep", "problems=smoke", f"sweep.output='{url}'", "sweep.progress=none",
                f"hydra.run.dir={tmp_path / 'd'}")  # simulated rows never join the replayed campaign
    assert r.returncode == 2 and "holds rows measured by backend replay" in r.stderr and "?campaign=" in r.stderr
    sim = url + ("&" if "?" in url else "?") + "campaign=smoke_sim"
    r = run_cli("stage=sweep", "problems=smoke", f"sweep.output='{sim}'", "sweep.progress=none",
                f"hydra.run.dir={tmp_path / 'e'}")
    assert r.returncode == 0, r.stderr
    df = read_dataset(sim, dedupe=False)
    assert len(df) == 600 and not df.duplicated([*get_family("grouped_conv").problems.FIELDS, "kernel"]).any()
    assert len(read_dataset(url + ("&" if "?" in url else "?") + "campaign=grouped_conv_fwd_bf16_gfx950")) == 3


def test_schema_versions_files_and_passwords(tmp_path):
    url = f"sqlite:///{tmp_path / 'db' / 'a.db'}"
    Store(url, create=True).close()
    assert (tmp_path / "db" / "a.db").stat().st_mode & 0o777 == 0o600
    with Store(url) as s:
        s.execute("UPDATE ckheur_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(DatabaseError, match="schema version 99, newer than this ckheur's 1") as e:
        Store(url)
    assert "\n" not in str(e.value)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(DatabaseError, match="writable by every user"):
        Store(f"sqlite:///{shared / 'b.db'}", create=True)
    assert not (shared / "b.db").exists()
    secret = "postgresql://me:hunter2@db.example:5432/tuning"
    assert mask_url(secret) == "postgresql://me:***@db.example:5432/tuning"
    r = run_cli("stage=list", f"db.url={secret}", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2 and "PGPASSWORD" in r.stderr and "hunter2" not in r.stderr + r.stdout
    assert not (tmp_path / "run").exists()  # nothing written: no .hydra/ holding the password
    # a URL of another scheme is refused naming the field, never read as a folder "mysql:/..."
    r = run_cli("stage=sweep", "problems=smoke", "sweep.output=mysql://tuner@dbhost/x",
                f"hydra.run.dir={tmp_path / 'r2'}", cwd=tmp_path)
    assert r.returncode == 2 and "sweep.output='mysql://tuner@dbhost/x': not a database URL" in r.stderr
    assert not (tmp_path / "mysql:").exists() and not (tmp_path / "r2").exists()
    from ckheur.data.dataset import read_dataset

    with pytest.raises(DatabaseError, match="not a database ckheur opens"):
        read_dataset("http://dbhost/x")


def test_stage_tune_s_database_is_the_db_url_unless_an_earlier_folder_database_is_there(compose, tmp_path):
    from ckheur.job import Job
    from ckheur.stages.common import db_dir

    cfg = compose(["stage=tune", f"paths.tuning={tmp_path}"])
    job = Job.from_config(cfg)
    assert db_dir(cfg, job) == f"sqlite:///{tmp_path}/tuning.db"
    (tmp_path / job.slug).mkdir()
    (tmp_path / job.slug / "tuning_db.json").write_text("{}")
    assert db_dir(cfg, job) == tmp_path / job.slug
    cfg = compose(["stage=tune", "db=postgresql", "db.url=postgresql://tuner@dbhost:5432/ckheur"])
    assert db_dir(cfg, Job.from_config(cfg)) == "postgresql://tuner@dbhost:5432/ckheur"


def test_a_killed_stage_tune_worker_leaves_the_campaign_as_an_unkilled_run_does(tmp_path):
    """stage=tune into SQLite with a slow command backend: the first worker is SIGKILLed after its
    first committed job, a second one finishes the campaign once its lease runs out. Every pair is
    measured once and the tuned picks are those of a run without the kill."""
    import subprocess
    import sys

    from ckheur.data.dataset import read_dataset
    from ckheur.families import get_family

    fields = list(get_family("grouped_conv").problems.FIELDS)
    bench = ROOT / "tests" / "data" / "fake_bench.py"
    args = ["stage=tune", "op=fwd", f"problems.sources=[{{kind: csv, path: {REAL}}}]", "problems.shard.count=40",
            "backend=command", f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}} 0.05",
            "backend.regex='Elapsed: ([0-9.]+) us'", "backend.time_unit=us", "backend.batch_pairs=3",
            "tune.top_k=3", "tune.progress=none", "db.lease_s=1", "tune.claim_poll_s=0.1"]
    killed, clean = f"sqlite:///{tmp_path / 'killed.db'}", f"sqlite:///{tmp_path / 'clean.db'}"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args, f"tune.db='{killed}'",
                             f"hydra.run.dir={tmp_path / 'a'}"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600  # a hang guard
    while time.time() < deadline and proc.poll() is None:
        if (tmp_path / "killed.db").exists():
            with Store(killed) as s:
                if s.execute("SELECT count(*) FROM jobs WHERE state = 'done'").fetchone()[0]:
                    break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for db, run in ((killed, "b"), (clean, "c")):
        r = run_cli(*args, f"tune.db='{db}'", f"hydra.run.dir={tmp_path / run}")
        assert r.returncode == 0, r.stderr
    a, b = (read_dataset(db, dedupe=False) for db in (killed, clean))
    assert not a.duplicated([*fields, "kernel"]).any() and len(a) == len(b)  # every pair once, none lost
    picks = [df[df.status == "ok"].sort_values(["latency_ms", "kernel"]).drop_duplicates(fields)
             .sort_values(fields)[[*fields, "kernel", "latency_ms"]].reset_index(drop=True) for df in (a, b)]
    assert picks[0].equals(picks[1]) and len(picks[0]) > 0
    with Store(killed) as s:  # at most the killed worker's job in flight ran once more
        most, extra = s.execute("SELECT max(attempts), sum(attempts) - count(*) FROM jobs").fetchone()
    assert most <= 2 and extra <= 1


def test_two_submitit_jobs_are_workers_of_one_postgresql_campaign_and_a_failed_job_is_reported(tmp_path):
    """docs/cluster.md's SLURM command on submitit's local executor (each job its own process, as
    an array task is): two stage=tune jobs of a multirun split one campaign on PostgreSQL. Every
    pair is measured once, and the picks are those of a single worker on SQLite. A third job fails
    (a bad problem): the others still run, the end names it, the exit status says so (the submitit
    launcher's failed-job report, once test_trust's own multirun)."""
    import sys

    from ckheur.data.dataset import read_dataset
    from ckheur.families import get_family

    fields = list(get_family("grouped_conv").problems.FIELDS)
    bench = ROOT / "tests" / "data" / "fake_bench.py"
    args = ["stage=tune", "op=fwd", f"problems.sources=[{{kind: csv, path: {REAL}}}]", "problems.shard.count=80",
            "backend=command", f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}}",
            "backend.regex='Elapsed: ([0-9.]+) us'", "backend.time_unit=us", "backend.batch_pairs=3",
            "tune.top_k=3", "tune.progress=none", "tune.claim_poll_s=0.1"]
    with _pg_schema() as pg:
        r = run_cli("-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", *args, "db=postgresql",
                    f"db.url='{pg}'", "problem.N=null,null,-1", f"hydra.sweep.dir={tmp_path / 'm'}",
                    in_process=False)  # jobs 0 and 1: the campaign's workers; job 2: a bad problem
        assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
        assert "multirun: 1 job(s) failed" in r.stderr and "job 2 (" in r.stderr \
            and "problem is missing required field(s) C, K" in r.stderr
        assert json.loads((tmp_path / "m" / "2" / "job_failed.json").read_text())["exit_code"] == 2
        assert not [j for j in "01" if (tmp_path / "m" / j / "job_failed.json").exists()]
        a = read_dataset(pg, dedupe=False)
        with Store(pg) as s:
            attempts = s.execute("SELECT attempts, state FROM jobs").fetchall()
    single = f"sqlite:///{tmp_path / 'single.db'}"
    r = run_cli(*args, f"tune.db='{single}'", f"hydra.run.dir={tmp_path / 's'}")
    assert r.returncode == 0, r.stderr
    b = read_dataset(single, dedupe=False)
    assert len(a) == len(b) > 0 and not a.duplicated([*fields, "kernel"]).any()  # every pair once, none lost
    assert attempts and all(n == 1 and st == "done" for n, st in attempts)
    timed = [json.loads((tmp_path / "m" / j / "tune_summary.json").read_text())["attempts"] for j in "01"]
    assert sum(timed) == len(b)  # the two jobs' own counts: each pair timed by exactly one of them
    assert (tmp_path / "m" / ".submitit").is_dir()  # the launcher's folder is in the multirun's
    picks = [df[df.status == "ok"].sort_values(["latency_ms", "kernel"]).drop_duplicates(fields)
             .sort_values(fields)[[*fields, "kernel", "latency_ms"]].reset_index(drop=True) for df in (a, b)]
    assert picks[0].equals(picks[1]) and len(picks[0]) > 0


def test_stage_import_loads_a_dataset_folder_and_stage_export_writes_one(tmp_path):
    """stage=import import.path=<dataset folder> loads it into the tuning database (db.url), and
    stage=export export.format=dataset writes the job's campaign back out, row for row; a second
    export into the same folder is refused, exit 2."""
    import pandas as pd

    from ckheur.data.dataset import read_dataset, write_part

    real = read_dataset(REAL, dedupe=False).head(40)
    write_part(tmp_path / "ds", real)
    tuning = f"paths.tuning={tmp_path / 'tuning'}"
    r = run_cli("stage=import", f"import.path={tmp_path / 'ds'}", tuning, f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0 and "import: 40 measurements" in r.stdout, r.stderr
    assert len(read_dataset(f"sqlite:///{tmp_path / 'tuning' / 'tuning.db'}", dedupe=False)) == 40
    out = ["stage=export", "op=fwd", "export.format=dataset", f"export.output={tmp_path / 'out'}", tuning]
    r = run_cli(*out, f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode == 0 and "40 measurements of campaign grouped_conv_fwd_bf16_gfx950" in r.stdout, r.stderr
    key = [c for c in real.columns if c not in ("latency_ms", "latency_spread_ms", "tflops", "clock_mhz")]
    a, b = (read_dataset(p, dedupe=False).sort_values(key).reset_index(drop=True) for p in (tmp_path / "ds",
                                                                                           tmp_path / "out"))
    pd.testing.assert_frame_equal(a, b)
    r = run_cli(*out, f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 2 and "is not empty" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("stage=import", f"import.path={tmp_path / 'a'}", tuning, f"hydra.run.dir={tmp_path / 'd'}")
    assert r.returncode == 2 and "a folder, but not a dataset" in r.stderr  # a run folder: no parts in it
