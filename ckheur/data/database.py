"""The database behind a tuning database: campaigns, problems, jobs with leases, measurements.

One URL names it. ``sqlite:///path.db`` (relative; ``sqlite:////abs/path.db`` absolute) is the
embedded default: Python's own sqlite3, in WAL mode, every claim a ``BEGIN IMMEDIATE``
transaction. ``postgresql://user@host:port/dbname`` serves many GPU nodes (psycopg 3, the
``postgres`` extra): claims take rows with ``FOR UPDATE SKIP LOCKED``. A password never goes in
the URL (it would reach the run folder's ``.hydra/`` files and logs): libpq takes it from
``PGPASSWORD`` or ``~/.pgpass``. URLs are printed masked (:func:`mask_url`).

Tables (schema version :data:`SCHEMA_VERSION`, migrated forward on open; a database of a newer
version is refused):

- ``campaigns``: what measurements are for (family, direction, dtype, arch, and the device,
  software versions and backend settings of whoever created it), unique by name;
- ``problems``: a campaign's problems, unique by key;
- ``jobs``: (problem, kernels) to measure, unique by both; a worker claims a batch, holds it for a
  lease stamped by the database server's clock and renews it while measuring; an expired lease
  returns the job to the queue (its claims count as attempts); after ``max_attempts`` it is
  failed with the last error kept;
- ``measurements``: one dataset row per attempt, unique by (problem, kernel, timestamp), so a
  result recorded twice is one row. A job's results and its completion commit in one transaction.

Parquet stays the training snapshot and exchange format: ``tuning_db.export_dataset`` writes a
campaign as a dataset folder (which is also a Parquet tuning database), ``import_dataset`` loads one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import socket
import stat
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ckheur.errors import UserError

SCHEMA_VERSION = 1
IDENTITY = ("family", "direction", "dtype", "arch")  # what a campaign is for (as a tuning database)
SCHEMES = ("sqlite", "postgresql", "postgres")
TEST_URL_ENV = "CKHEUR_TEST_PG_URL"  # the tests' PostgreSQL (.ci/postgres.sh prints it)


class DatabaseError(UserError):
    """A database URL or database cannot be used as asked; the message says why."""


def is_url(value: Any) -> bool:
    """Whether ``value`` names a database (a URL of a scheme in :data:`SCHEMES`), not a folder. A URL
    of another scheme (``mysql://...``) is a DatabaseError: read as a folder it would be ``mysql:/...``."""
    if not isinstance(value, str) or "://" not in value:
        return False
    scheme = value.split("://", 1)[0]
    if scheme in SCHEMES:
        return True
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        raise DatabaseError(f"{mask_url(value)}: not a database ckheur opens (sqlite:///<file> or "
                            "postgresql://<user>@<host>/<database>), nor a folder")
    return False


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***``: what is printed and recorded."""
    parts = urlsplit(str(url))
    if parts.password is None:
        return str(url)
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def check_url(url: str, field: str = "db.url") -> str:
    """Refuse (DatabaseError, naming ``field``) a URL of another scheme, or one holding a password."""
    try:
        known = is_url(url)
    except DatabaseError:  # another scheme: said below, naming the field
        known = False
    if not known:
        raise DatabaseError(f"{field}={mask_url(url)!r}: not a database URL; allowed: sqlite:///<path>.db, "
                            "postgresql://<user>@<host>:<port>/<database>")
    if urlsplit(url).password is not None:
        raise DatabaseError(f"{field}={mask_url(url)}: a password in the URL would be written to run folders and "
                            "logs; set PGPASSWORD or a ~/.pgpass line instead and leave it out of the URL")
    return url


def campaign_of(url: str) -> str | None:
    """The campaign a URL names with ``?campaign=<name>`` (train's data.paths), or None."""
    got = parse_qs(urlsplit(url).query).get("campaign")
    return got[-1] if got else None


def _sqlite_path(url: str) -> Path:
    rest = url.split("://", 1)[1]
    if not rest.startswith("/") or len(rest) < 2:
        raise DatabaseError(f"{url}: a SQLite URL is sqlite:///<relative path> or sqlite:////<absolute path>")
    return Path(rest[1:].split("?", 1)[0])


# --------------------------------------------------------------------------------------- schema

def _ddl(serial: str) -> list[str]:
    return [
        f"""CREATE TABLE campaigns (id {serial}, name TEXT NOT NULL UNIQUE, family TEXT NOT NULL,
            direction TEXT NOT NULL, dtype TEXT NOT NULL, arch TEXT NOT NULL, device TEXT, software TEXT,
            backend TEXT, created_at DOUBLE PRECISION, created_by TEXT)""",
        f"""CREATE TABLE problems (id {serial}, campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
            key TEXT NOT NULL, fields TEXT NOT NULL, UNIQUE (campaign_id, key))""",
        f"""CREATE TABLE jobs (id {serial}, campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
            problem_id INTEGER NOT NULL REFERENCES problems (id), kernels TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'queued', attempts INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL, worker TEXT, lease_until DOUBLE PRECISION, last_error TEXT,
            created_at DOUBLE PRECISION, done_at DOUBLE PRECISION, UNIQUE (campaign_id, problem_id, kernels))""",
        "CREATE INDEX jobs_by_state ON jobs (campaign_id, state, id)",
        f"""CREATE TABLE measurements (id {serial}, campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
            problem_id INTEGER NOT NULL REFERENCES problems (id), kernel TEXT NOT NULL, stamp TEXT NOT NULL,
            status TEXT NOT NULL, latency_ms DOUBLE PRECISION, job_id INTEGER, row TEXT NOT NULL,
            UNIQUE (campaign_id, problem_id, kernel, stamp))""",
        "CREATE INDEX measurements_by_campaign ON measurements (campaign_id, id)",
    ]


# version -> statements that bring a database of the version before to it
MIGRATIONS: dict[int, Callable[[str], list[str]]] = {1: _ddl}


# ------------------------------------------------------------------------------------ the store

@dataclass
class Job:
    """A claimed job: measure ``kernels`` on the problem ``fields``."""

    id: int
    problem_id: int
    key: tuple
    fields: dict
    kernels: list
    attempts: int


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON")


def _dumps(v: Any) -> str:
    return json.dumps(v, default=_plain, sort_keys=True, separators=(",", ":"))


def _key_text(key: Sequence[Any]) -> str:
    return _dumps([_plain(v) if hasattr(v, "item") else v for v in key])


def transient(e: BaseException) -> bool:
    """Whether a database error is worth retrying (a lost connection, a busy or restarting server)."""
    import sqlite3

    if isinstance(e, sqlite3.OperationalError):
        return "locked" in str(e) or "busy" in str(e)
    try:
        import psycopg
    except ImportError:
        return False
    if isinstance(e, DatabaseError) or (isinstance(e, AttributeError) and "NoneType" in str(e)):
        e = e.__cause__ if isinstance(e, DatabaseError) else psycopg.OperationalError("not connected")
    return isinstance(e, (psycopg.OperationalError, psycopg.errors.SerializationFailure,
                          psycopg.errors.DeadlockDetected))


class Store:
    """An open database (SQLite or PostgreSQL) holding campaigns, jobs and measurements."""

    def __init__(self, url: str, create: bool = False) -> None:
        self.url = check_url(url)
        self.kind = "sqlite" if url.startswith("sqlite") else "postgresql"
        self.conn: Any = None
        self._create = create
        self.retrying(lambda: None, attempts=8)  # connect, waiting with backoff for a server that is (re)starting
        self._migrate(create)
        self._create = False  # only the first open creates; a reconnect finds it there

    # -- connections
    def connect(self) -> None:
        """(Re)open the connection."""
        self.close()
        if self.kind == "sqlite":
            self.conn = _open_sqlite(_sqlite_path(self.url), self._create)
        else:
            self.conn = _open_postgresql(self.url)

    def close(self) -> None:
        """Close the connection (a later call reopens it through :meth:`connect`)."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def now(self) -> str:
        """SQL for the database server's clock, in seconds since the epoch."""
        return ("((julianday('now') - 2440587.5) * 86400.0)" if self.kind == "sqlite"
                else "extract(epoch from clock_timestamp())::double precision")

    def _sql(self, sql: str) -> str:
        return sql if self.kind == "sqlite" else sql.replace("?", "%s")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement with bound parameters (written with ``?``); its cursor."""
        cur = self.conn.cursor()
        cur.execute(self._sql(sql), tuple(params)) if params else cur.execute(sql)
        return cur

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        cur = self.conn.cursor()
        cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Store"]:
        """One transaction: on SQLite ``BEGIN IMMEDIATE`` (the write lock first, so two claims never
        interleave); on PostgreSQL an ordinary one. Committed at the end, rolled back on an error."""
        if self.kind == "sqlite":
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self
            except BaseException:
                with contextlib.suppress(Exception):
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        else:
            with self.conn.transaction():
                yield self

    def retrying(self, fn: Callable[[], Any], attempts: int = 12, first_s: float = 0.05, max_s: float = 5.0,
                 log: Callable[[str], None] | None = None) -> Any:
        """``fn()``, retried with exponential backoff (and a new connection) while the database is
        unreachable or busy: a restarting server or a dropped connection costs a wait, not the run."""
        delay = first_s
        for i in range(attempts):
            try:
                if self.conn is None:  # the last reconnect failed: try again now
                    self.connect()
                return fn()
            except Exception as e:  # noqa: BLE001 (only transient ones are retried)
                if not transient(e) or i == attempts - 1:
                    raise
                if log:
                    log(f"database {mask_url(self.url)}: {type(e).__name__}: {str(e).strip()[:200]}; retrying in "
                        f"{delay:.2f}s")
                time.sleep(delay * (0.5 + random.random()))
                delay = min(max_s, delay * 2)
                with contextlib.suppress(Exception):
                    self.close()
                    self.connect()

    # -- schema
    def _version(self) -> int:
        have = self.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'ckheur_meta' "
                            "AND table_schema = current_schema()"
                            if self.kind == "postgresql" else
                            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'ckheur_meta'"
                            ).fetchone()[0]
        if not have:
            return 0
        row = self.execute("SELECT value FROM ckheur_meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self, create: bool) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise DatabaseError(f"database {mask_url(self.url)} has schema version {version}, newer than this "
                                f"ckheur's {SCHEMA_VERSION}: upgrade ckheur to use it")
        if version == SCHEMA_VERSION:
            return
        serial = "INTEGER PRIMARY KEY AUTOINCREMENT" if self.kind == "sqlite" else "BIGSERIAL PRIMARY KEY"
        with self.transaction():
            if self.kind == "postgresql":  # one migrating process at a time; the others wait, then see it done
                self.execute("SELECT pg_advisory_xact_lock(728514)")
            version = self._version()
            if version > SCHEMA_VERSION:
                raise DatabaseError(f"database {mask_url(self.url)} has schema version {version}, newer than "
                                    f"this ckheur's {SCHEMA_VERSION}: upgrade ckheur to use it")
            self.execute("CREATE TABLE IF NOT EXISTS ckheur_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            for v in range(version + 1, SCHEMA_VERSION + 1):
                for stmt in MIGRATIONS[v](serial):
                    self.execute(stmt)
            self.execute("DELETE FROM ckheur_meta WHERE key = 'schema_version'")
            self.execute("INSERT INTO ckheur_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    # -- campaigns
    def campaign(self, name: str, identity: Mapping[str, str], create: bool = False,
                 info: Mapping[str, Any] | None = None, device_cus: int | None = None) -> int:
        """The id of campaign ``name`` for ``identity`` (family, direction, dtype, arch) measured on the
        device of ``device_cus`` CUs (None: any); a missing one is created when ``create``; one recorded
        for another identity or device is refused (a campaign that records no device: the arch's own)."""
        def get() -> Any:
            return self.execute("SELECT id, family, direction, dtype, arch, device FROM campaigns WHERE name = ?",
                                (name,)).fetchone()

        row = get()
        if row is None:
            if not create:
                raise DatabaseError(f"database {mask_url(self.url)} has no campaign {name!r} (stage=tune creates it)")
            info = dict(info or {})
            with self.transaction():
                self.execute("INSERT INTO campaigns (name, family, direction, dtype, arch, device, software, backend, "
                             f"created_at, created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, {self.now}, ?) "
                             "ON CONFLICT (name) DO NOTHING",
                             (name, *(str(identity[k]) for k in IDENTITY),
                              str(device_cus) if device_cus else info.get("device"),
                              _dumps(info.get("software") or software_versions()), _dumps(info.get("backend") or {}),
                              socket.gethostname()))
            row = get()
        have = dict(zip(IDENTITY, row[1:5]))
        bad = [f"{k} {have[k]!r} (wanted {identity[k]!r})" for k in IDENTITY if have[k] != str(identity[k])]
        if not bad and device_cus is not None:
            from ckheur.families.hardware import device_name, device_or_own

            got, want = device_or_own(have["arch"], row[5]), device_or_own(have["arch"], device_cus)
            if got and want and got != want:
                bad = [f"the device {device_name(have['arch'], got)} (wanted {device_name(have['arch'], want)})"]
        if bad:
            raise DatabaseError(f"campaign {name!r} of {mask_url(self.url)} was recorded for another configuration: "
                                f"{', '.join(bad)}; it is never served for another device, arch, dtype, direction or "
                                "op: name another campaign (tune.db=<URL>?campaign=<name>) or database")
        return int(row[0])

    def note_backend(self, campaign_id: int, backend: Mapping[str, Any]) -> None:
        """Record a campaign's backend settings when none are recorded yet."""
        with self.transaction():
            self.execute("UPDATE campaigns SET backend = ? WHERE id = ? AND (backend IS NULL OR backend = '{}')",
                         (_dumps(dict(backend)), campaign_id))

    def campaigns(self) -> list[dict]:
        """Every campaign: id, name, family, direction, dtype, arch, device_cus (its device's CU count)."""
        from ckheur.families.hardware import device_or_own

        rows = self.execute("SELECT id, name, family, direction, dtype, arch, device FROM campaigns ORDER BY id"
                            ).fetchall()
        return [{**dict(zip(("id", "name", "family", "direction", "dtype", "arch"), r[:6])),
                 "device_cus": device_or_own(r[5], r[6])} for r in rows]

    # -- problems and measurements
    def _problem_ids(self, campaign_id: int, problems: Mapping[str, str]) -> dict[str, int]:
        """Ids of problems (key text -> fields JSON), inserted when new (inside the caller's transaction)."""
        self.executemany("INSERT INTO problems (campaign_id, key, fields) VALUES (?, ?, ?) "
                         "ON CONFLICT (campaign_id, key) DO NOTHING",
                         [(campaign_id, k, f) for k, f in problems.items()])
        out: dict[str, int] = {}
        keys = list(problems)
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ", ".join("?" * len(chunk))
            for pid, key in self.execute(f"SELECT id, key FROM problems WHERE campaign_id = ? AND key IN ({marks})",
                                         (campaign_id, *chunk)).fetchall():
                out[key] = int(pid)
        return out

    def _insert_rows(self, campaign_id: int, rows: Sequence[Mapping[str, Any]], fields: Sequence[str],
                     job_ids: Sequence[int | None] | None = None) -> None:
        keys = [_key_text([r[f] for f in fields]) for r in rows]
        pids = self._problem_ids(campaign_id, {k: _dumps({f: r[f] for f in fields}) for k, r in zip(keys, rows)})
        job_ids = job_ids or [None] * len(rows)
        self.executemany(
            "INSERT INTO measurements (campaign_id, problem_id, kernel, stamp, status, latency_ms, job_id, row) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (campaign_id, problem_id, kernel, stamp) DO NOTHING",
            [(campaign_id, pids[k], str(r["kernel"]), str(r["timestamp"]), str(r["status"]), _real(r["latency_ms"]),
              j, _dumps(dict(r))) for k, r, j in zip(keys, rows, job_ids)])

    def record(self, campaign_id: int, rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> None:
        """Add dataset rows (``fields``: the family's problem fields) in one transaction."""
        if rows:
            self.retrying(lambda: self._in_tx(lambda: self._insert_rows(campaign_id, rows, fields)))

    def _in_tx(self, fn: Callable[[], Any]) -> Any:
        with self.transaction():
            return fn()

    def count(self, campaign_id: int, upto: int | None = None) -> int:
        """Measurements of a campaign (with ids up to ``upto``)."""
        sql, params = "SELECT count(*) FROM measurements WHERE campaign_id = ?", [campaign_id]
        if upto is not None:
            sql, params = sql + " AND id <= ?", [*params, upto]
        return int(self.execute(sql, params).fetchone()[0])

    def rows(self, campaign_id: int | None = None, seen: set | None = None) -> list[dict]:
        """Dataset rows of a campaign (None: of every campaign) not among the ids in ``seen``, which
        is updated. Ids are assigned at insert and commits may land out of order, so rows below the
        highest id seen are looked for whenever the count says some arrived late."""
        where, params = ("WHERE campaign_id = ?", [campaign_id]) if campaign_id is not None else ("WHERE 1 = 1", [])
        seen = set() if seen is None else seen
        top = max(seen, default=0)
        late = bool(seen) and campaign_id is not None and self.count(campaign_id, top) != len(seen)
        sql = f"SELECT id, row FROM measurements {where} AND id > ? ORDER BY id"
        params.append(0 if late else top)
        got = self.execute(sql, params).fetchall()
        out = []
        for i, text in got:
            if i not in seen:
                seen.add(i)
                out.append(json.loads(text))
        return out

    def frame(self, campaign_id: int | None = None) -> Any:
        """A campaign's rows (None: every campaign's) as a dataset DataFrame, read in one transaction."""
        import pandas as pd

        def read() -> list:
            if self.kind == "postgresql":
                with self.conn.transaction():
                    self.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    return self.rows(campaign_id)
            return self.rows(campaign_id)

        rows = self.retrying(read)
        return pd.DataFrame(rows)

    # -- jobs
    def enqueue(self, campaign_id: int, items: Sequence[tuple[Mapping[str, Any], Sequence[str]]],
                fields: Sequence[str], max_attempts: int = 3) -> int:
        """Queue (problem fields, kernel names) jobs; one already there (any state) is left as it is.
        Returns how many were new."""
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise DatabaseError(f"db.max_attempts={max_attempts!r}: must be an integer >= 1")
        if not items:
            return 0

        def go() -> int:
            with self.transaction():
                keyed = [(_key_text([p[f] for f in fields]), p, ks) for p, ks in items]
                pids = self._problem_ids(campaign_id, {k: _dumps({f: p[f] for f in fields}) for k, p, _ in keyed})
                before = self.execute("SELECT count(*) FROM jobs WHERE campaign_id = ?", (campaign_id,)).fetchone()[0]
                self.executemany(f"INSERT INTO jobs (campaign_id, problem_id, kernels, max_attempts, created_at) "
                                 f"VALUES (?, ?, ?, ?, {self.now}) ON CONFLICT (campaign_id, problem_id, kernels) "
                                 "DO NOTHING", [(campaign_id, pids[k], _dumps(list(ks)), max_attempts)
                                                for k, _, ks in keyed])
                after = self.execute("SELECT count(*) FROM jobs WHERE campaign_id = ?", (campaign_id,)).fetchone()[0]
                return int(after - before)

        return self.retrying(go)

    EXPIRE_EVERY_S = 0.5  # a worker looks for expired leases at most this often while it finds jobs

    def _expire(self, campaign_id: int, lock: str) -> None:
        self.execute(
            "UPDATE jobs SET state = CASE WHEN attempts >= max_attempts THEN 'failed' ELSE 'queued' END, "
            "last_error = 'lease of ' || coalesce(worker, 'a worker') || ' expired (the worker stopped renewing it)', "
            f"worker = NULL, lease_until = NULL WHERE id IN (SELECT id FROM jobs WHERE campaign_id = ? AND "
            f"state = 'running' AND lease_until < {self.now}{lock})", (campaign_id,))
        self._expired_at = time.monotonic()

    def claim(self, campaign_id: int, worker: str, n: int, lease_s: float) -> list[Job]:
        """Claim up to ``n`` queued jobs for ``lease_s`` seconds of the server's clock, in one
        transaction; expired leases are returned to the queue (or failed, out of attempts) first
        (every :attr:`EXPIRE_EVERY_S`, and whenever nothing else is queued)."""
        pg = self.kind == "postgresql"
        lock = " FOR UPDATE SKIP LOCKED" if pg else ""
        update = (f"UPDATE jobs SET state = 'running', worker = ?, attempts = attempts + 1, lease_until = {self.now} + ? "
                  f"WHERE id IN (SELECT id FROM jobs WHERE campaign_id = ? AND state = 'queued' ORDER BY id LIMIT ?{lock}) "
                  "RETURNING id, problem_id, kernels, attempts")
        if pg:  # one round trip: the claimed jobs with their problems
            update = (f"WITH c AS ({update}) SELECT c.id, c.problem_id, c.kernels, c.attempts, p.key, p.fields "
                      "FROM c JOIN problems p ON p.id = c.problem_id")
        params = (worker, float(lease_s), campaign_id, int(n))
        due = time.monotonic() - getattr(self, "_expired_at", 0.0) > self.EXPIRE_EVERY_S
        with self.transaction():
            if due:
                self._expire(campaign_id, lock)
            got = self.execute(update, params).fetchall()
            if not got and not due:
                self._expire(campaign_id, lock)
                got = self.execute(update, params).fetchall()
            if not got:
                return []
            if not pg:
                pids = sorted({int(r[1]) for r in got})
                marks = ", ".join("?" * len(pids))
                probs = {int(i): (k, f) for i, k, f in
                         self.execute(f"SELECT id, key, fields FROM problems WHERE id IN ({marks})", pids).fetchall()}
                got = [(*r, *probs[int(r[1])]) for r in got]
        return sorted((Job(int(i), int(p), tuple(json.loads(k)), json.loads(f), json.loads(ks), int(a))
                       for i, p, ks, a, k, f in got), key=lambda j: j.id)

    def renew(self, job_ids: Sequence[int], worker: str, lease_s: float) -> int:
        """Extend this worker's leases on ``job_ids``; how many it still held."""
        if not job_ids:
            return 0
        marks = ", ".join("?" * len(job_ids))
        with self.transaction():
            cur = self.execute(f"UPDATE jobs SET lease_until = {self.now} + ? WHERE worker = ? AND state = 'running' "
                               f"AND id IN ({marks})", (float(lease_s), worker, *job_ids))
            return int(cur.rowcount)

    def complete(self, campaign_id: int, jobs: Sequence[Job], rows: Sequence[Sequence[Mapping[str, Any]]],
                 fields: Sequence[str], worker: str) -> list[int]:
        """Record each job's result rows and mark it done, all in one transaction; a job another
        worker already completed keeps that result (its rows here are dropped). Returns the ids of
        the jobs completed by this call (or by an earlier try of it whose commit was not confirmed)."""
        ids = [j.id for j in jobs]
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        with self.transaction():
            # Done now, by this call: the jobs not done before (by anyone); their rows go in with them.
            now_done = {int(r[0]) for r in self.execute(
                f"UPDATE jobs SET state = 'done', worker = ?, lease_until = NULL, done_at = {self.now} "
                f"WHERE id IN ({marks}) AND state <> 'done' RETURNING id", (worker, *ids)).fetchall()}
            again = []
            if len(now_done) < len(ids):  # a retried commit that had landed is this worker's too
                again = [int(i) for (i,) in self.execute(f"SELECT id FROM jobs WHERE id IN ({marks}) AND state = 'done' "
                                                         "AND worker = ?", (*ids, worker)).fetchall()
                         if int(i) not in now_done]
            mine = [(j, rs) for j, rs in zip(jobs, rows) if j.id in now_done]
            same = all(_key_text([r[f] for f in fields]) == _key_text(j.key) for j, rs in mine for r in rs)
            flat = [(r, j) for j, rs in mine for r in rs]
            if flat and same:  # the rows are of the jobs' own problems: their ids are known
                self.executemany(
                    "INSERT INTO measurements (campaign_id, problem_id, kernel, stamp, status, latency_ms, job_id, row) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (campaign_id, problem_id, kernel, stamp) DO NOTHING",
                    [(campaign_id, j.problem_id, str(r["kernel"]), str(r["timestamp"]), str(r["status"]),
                      _real(r["latency_ms"]), j.id, _dumps(dict(r))) for r, j in flat])
            elif flat:
                self._insert_rows(campaign_id, [r for r, _ in flat], fields, [j.id for _, j in flat])
        return [j.id for j in jobs if j.id in now_done] + again

    def fail(self, jobs: Sequence[Job], worker: str, error: str, count: bool = True) -> None:
        """An attempt of these jobs ended without a result: back to the queue, or failed once out of
        attempts, with ``error`` kept. ``count`` False (an interrupted worker): the attempt is given back."""
        ids = [j.id for j in jobs]
        if not ids:
            return
        marks = ", ".join("?" * len(ids))
        back = "" if count else "attempts = attempts - 1, "
        with self.transaction():
            self.execute(f"UPDATE jobs SET {back}state = CASE WHEN attempts >= max_attempts AND ? THEN 'failed' "
                         "ELSE 'queued' END, last_error = ?, worker = NULL, lease_until = NULL "
                         f"WHERE worker = ? AND state = 'running' AND id IN ({marks})",
                         (bool(count), str(error)[:2000], worker, *ids))

    def job_counts(self, campaign_id: int) -> dict[str, int]:
        """Jobs of a campaign by state (queued, running, done, failed)."""
        return {s: int(n) for s, n in self.execute("SELECT state, count(*) FROM jobs WHERE campaign_id = ? GROUP BY "
                                                   "state", (campaign_id,)).fetchall()}

    def failed_jobs(self, campaign_id: int) -> list[dict]:
        """Jobs out of attempts: problem key, kernels, attempts, last error."""
        rows = self.execute("SELECT p.key, j.kernels, j.attempts, j.last_error FROM jobs j JOIN problems p ON "
                            "p.id = j.problem_id WHERE j.campaign_id = ? AND j.state = 'failed' ORDER BY j.id",
                            (campaign_id,)).fetchall()
        return [{"key": tuple(json.loads(k)), "kernels": json.loads(ks), "attempts": int(a), "last_error": e}
                for k, ks, a, e in rows]


def _real(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def software_versions() -> dict[str, str]:
    """Versions recorded with a new campaign."""
    import platform
    import sqlite3

    from ckheur.version import __version__

    return {"ckheur": __version__, "python": platform.python_version(), "sqlite": sqlite3.sqlite_version}


def _open_sqlite(path: Path, create: bool) -> Any:
    """A SQLite connection in WAL mode (autocommit: transactions are explicit). A new file is created
    0600 in a folder only this user can change (``ckheur.files``); an existing one must be a regular file."""
    import sqlite3

    from ckheur.files import check_folder, make_folder

    try:
        if not path.exists():
            if not create:
                raise DatabaseError(f"database sqlite:///{path} does not exist (stage=tune creates it)")
            make_folder(path.parent if str(path.parent) else Path("."), "database folder")
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
        else:
            check_folder(path.parent if str(path.parent) else Path("."), "database folder")
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise DatabaseError(f"database {path} is not a regular file (a link is never followed)")
    except UserError as e:
        raise DatabaseError(str(e)) from None
    conn = sqlite3.connect(str(path), timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=60000")
    return conn


def _open_postgresql(url: str) -> Any:
    try:
        import psycopg
    except ImportError:
        raise DatabaseError(f"{mask_url(url)}: PostgreSQL needs psycopg 3: pip install 'ckheur[postgres]'") from None
    from urllib.parse import urlencode

    parts = urlsplit(url)  # ?campaign= is ckheur's; other parameters (options=..., sslmode=...) are libpq's
    query = [(k, v) for k, vs in parse_qs(parts.query).items() if k != "campaign" for v in vs]
    u = urlunsplit(parts._replace(query=urlencode(query)))
    named = {} if any(k == "application_name" for k, _ in query) else {"application_name": "ckheur"}
    try:
        return psycopg.connect(u.replace("postgres://", "postgresql://", 1), autocommit=True, connect_timeout=10,
                               **named)
    except psycopg.OperationalError as e:
        raise DatabaseError(f"cannot connect to {mask_url(url)}: {str(e).strip().splitlines()[-1][:300]}") from e


def open_store(url: str, create: bool = False) -> Store:
    """The database at ``url``, its schema migrated to this version (a missing SQLite file is created
    when ``create``)."""
    return Store(url, create=create)


# ----------------------------------------------------------------------------- lease renewal

class Lease:
    """Renews a worker's leases on claimed jobs from a thread of its own (its own connection)
    every third of the lease, until closed: a worker that measures for a long time keeps its jobs,
    one that dies loses them when the lease runs out."""

    def __init__(self, url: str, job_ids: Sequence[int], worker: str, lease_s: float) -> None:
        self.url, self.ids, self.worker, self.lease_s = url, list(job_ids), worker, lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        store = None
        while not self._stop.wait(self.lease_s / 3):
            try:
                store = store or Store(self.url)
                store.renew(self.ids, self.worker, self.lease_s)
            except Exception:  # noqa: BLE001 (a failed renewal is retried at the next tick)
                if store is not None:
                    store.close()
                store = None
        if store is not None:
            store.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def worker_name() -> str:
    """A worker's name in the jobs table: host, process id and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerStats:
    """What one worker did."""

    jobs_done: int = 0
    jobs_retried: int = 0  # attempts that ended without a result (back to the queue or failed)
    results_dropped: int = 0  # jobs another worker completed first (their result stands)
    waits: int = 0
    interrupted: bool = False


def work(url: str, campaign_id: int, measure: Callable[[list[Job]], list[list[dict]]], fields: Sequence[str], *,
         batch_jobs: int = 1, lease_s: float = 60.0, poll_s: float = 0.5, worker: str | None = None,
         log: Callable[[str], None] = print, store: Store | None = None) -> WorkerStats:
    """Work a campaign's job queue until it is empty and no other worker holds a job: claim up to
    ``batch_jobs`` jobs, ``measure`` them under a renewed lease (a list of dataset rows per job), commit
    results and completions in one transaction. An exception from ``measure`` returns the jobs to the
    queue with the error kept; Ctrl-C gives them back and stops (``interrupted``), and so does a
    UserError (this worker's settings are wrong: it is raised, the attempt not counted). Database errors
    that pass (a restart, a dropped connection) are retried with backoff."""
    if not lease_s > 0 or batch_jobs < 1:
        raise DatabaseError(f"db.lease_s={lease_s} must be > 0 and the batch of jobs >= 1 (got {batch_jobs})")
    own = store is None
    store = store or Store(url)
    worker = worker or worker_name()
    stats = WorkerStats()
    try:
        while True:
            jobs = store.retrying(lambda: store.claim(campaign_id, worker, batch_jobs, lease_s), log=log)
            if not jobs:
                counts = store.retrying(lambda: store.job_counts(campaign_id), log=log)
                if not counts.get("running") and not counts.get("queued"):
                    return stats
                stats.waits += 1
                time.sleep(poll_s)  # others hold the rest: wait for them, or for their leases to expire
                continue
            try:
                with Lease(url, [j.id for j in jobs], worker, lease_s):
                    rows = measure(jobs)
            except KeyboardInterrupt:
                store.retrying(lambda: store.fail(jobs, worker, "interrupted (Ctrl-C)", count=False), log=log)
                stats.interrupted = True
                return stats
            except UserError as e:  # this worker's settings (a benchmark not installed): every attempt would fail
                store.retrying(lambda: store.fail(jobs, worker, f"{type(e).__name__}: {e}", count=False), log=log)
                raise
            except Exception as e:  # noqa: BLE001 (the job's attempt failed: kept as its last error)
                store.retrying(lambda: store.fail(jobs, worker, f"{type(e).__name__}: {e}"), log=log)
                stats.jobs_retried += len(jobs)
                log(f"worker {worker}: {len(jobs)} job(s) failed this attempt: {type(e).__name__}: {str(e)[:200]}")
                continue
            done = store.retrying(lambda: store.complete(campaign_id, jobs, rows, fields, worker), log=log)
            stats.jobs_done += len(done)
            stats.results_dropped += len(jobs) - len(done)
    finally:
        if own:
            store.close()


def campaign_name(identity: Mapping[str, str], device_cus: int = 0) -> str:
    """The default campaign name of a (family, direction, dtype, arch): as a Parquet tuning database's
    folder; on another device of the arch than its own, with its CU count (``..._gfx906_64cu``: MI60)."""
    from ckheur.families.hardware import device_or_own

    name = f"{identity['family']}_{identity['direction']}_{identity['dtype']}_{identity['arch']}"
    own = device_or_own(identity["arch"], 0)
    return f"{name}_{device_cus}cu" if device_cus and own and device_cus != own else name
