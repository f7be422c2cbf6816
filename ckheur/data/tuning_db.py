"""Tuning database: measured (problem, kernel) results for one op family, direction, dtype and arch.

It is an ordinary ckheur dataset folder (the same schema and atomic part files as sweeps and
imports, so any of them can train a model), plus ``tuning_db.json`` naming what it is for.
Several processes may record into it at once: each record is a new uniquely named part, so
nothing is lost. One load builds an in-memory index, after which a lookup is one dict access;
``refresh()`` reads only the parts written since. A corrupt part is skipped with a warning.
A database recorded for another arch, dtype, direction or operator family is refused, and so is one
recorded on another device of the arch (``tuning_db.json``'s ``device_cus``: MI50's for MI60, both
gfx906; a database of an earlier version records none: the arch's own device).

Processes that tune the same database split the work by claiming a problem before measuring
it (:meth:`TuningDB.claim`): a claim is an exclusive ``flock`` on ``claims/<problem>.lock``,
which the operating system drops when its process ends, however it ends, so a claim left by a
killed process has already expired. (On file systems without working ``flock``, such as some
network mounts, claims always succeed: concurrent runs then measure twice, and lose nothing.)

A database URL in place of the folder (``sqlite:///tuning/tuning.db``, ``postgresql://...``) keeps
the same measurements in a campaign of that database (``ckheur.data.database``), named as the
folder would be, or by ``?campaign=<name>``. Processes tuning it claim jobs with leases there
instead of problems with ``flock``: that holds across nodes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from ckheur.errors import UserError
from ckheur.files import make_folder, open_lock, open_new

META = "tuning_db.json"
CLAIMS = "claims"  # one lock file per problem being measured
IDENTITY = ("family", "direction", "dtype", "arch")  # as a database campaign's (``database.IDENTITY``)


class TuningDBError(UserError):
    """A tuning database is for another op or arch, or cannot be used; the message says which."""


@dataclass
class TuningDB:
    """A tuning database opened for one op family, direction, dtype and arch."""

    path: Path | str  # the folder, or the database URL (no password in it: ``database.check_url``)
    family: str  # the op family's name, as the database records it
    direction: str
    dtype: str
    arch: str
    device_cus: int = 0  # the measuring device's CU count (``hardware.device_or_own``; 0: an unshipped arch's)
    _best: dict = field(default_factory=dict)  # problem key -> (kernel name, latency_ms) of the fastest usable run
    _runs: dict = field(default_factory=dict)  # problem key -> {kernel name: (status, latency_ms or None)}
    _parts: set = field(default_factory=set)
    store: Any = None  # the open database (``database.Store``) when ``path`` is a URL
    campaign_id: int | None = None

    @property
    def family_modules(self) -> Any:
        """The recorded family's modules (``ckheur.families.Family``)."""
        from ckheur.families import get_family

        return get_family(self.family)

    @classmethod
    def open(cls, path: str | Path, op: Mapping[str, Any], arch: str | Mapping[str, Any], create: bool = False,
             writable: bool = False) -> "TuningDB":
        """Open the database at ``path`` for ``op`` (family, direction, dtype) on ``arch``: a device's
        config (its name and CU count), and one recorded on another device of the arch (MI50's, for
        MI60) is refused, as one of another arch is; or an arch's name: any device of it (the
        database's own; one created so is the arch's own device's). A missing
        one is an error unless ``create``. ``writable``: check that records can be written, before
        anything is measured. A database that is refused is never changed. Creation is atomic: of
        two processes creating one database, the first owns it and the other is refused when it
        wants another op or arch, before it writes anything."""
        from ckheur.families.hardware import device_or_own

        want, device = _identity(op, arch), _device(arch)
        if _is_url(path):
            return cls._open_url(str(path), want, device, create, writable)
        path = Path(path)
        meta_file = path / META
        if path.exists() and not path.is_dir():
            raise TuningDBError(f"tuning database {path} is a file; give a folder")
        present = [p.name for p in path.iterdir() if not p.name.startswith(".tmp-")] if path.is_dir() else []
        if META not in present:  # (listed, not tested first: another process may create it meanwhile)
            if present:
                raise TuningDBError(f"{path} holds files but no {META}: not a tuning database, or its {META} was "
                                    "lost (restore it, or give a new folder)")
            if not create:
                raise TuningDBError(f"tuning database {path} does not exist (stage=tune creates one; from Python "
                                    "TuningDB.open(path, op, arch, create=True))")
            _create_meta(path, {**want, "device_cus": device_or_own(want["arch"], device),
                                "created_by": socket.gethostname()})
        have = _read_meta(meta_file)
        _refuse_mismatch(path, have, want)
        _refuse_device(path, want["arch"], have["device_cus"], device)
        device = device or device_or_own(want["arch"], have["device_cus"])
        if writable:
            _check_writable(path)
        db = cls(path=path, **want, device_cus=device)
        db.refresh()
        return db

    @classmethod
    def _open_url(cls, url: str, want: dict, device: int, create: bool, writable: bool) -> "TuningDB":
        from ckheur.data.database import DatabaseError, Store, campaign_name, campaign_of
        from ckheur.families.hardware import device_or_own

        try:
            store = Store(url, create=create)
            try:
                cid = store.campaign(campaign_of(url) or campaign_name(want, device), want, create=create,
                                     device_cus=device_or_own(want["arch"], device))
                if not device:  # any device of the arch: the campaign's own
                    device = next(c["device_cus"] for c in store.campaigns() if c["id"] == cid)
                if writable:
                    with store.transaction():  # the write lock (SQLite) or a write: a read-only database fails here
                        store.execute("UPDATE campaigns SET name = name WHERE id = ?", (cid,))
            except BaseException:
                store.close()
                raise
        except DatabaseError as e:
            raise TuningDBError(str(e)) from None
        except Exception as e:  # noqa: BLE001 (the driver's own errors, as one line)
            raise TuningDBError(f"tuning database {url}: {type(e).__name__}: {str(e).strip()[:300]}") from None
        db = cls(path=url, store=store, campaign_id=cid, **want, device_cus=device)
        db.refresh()
        return db

    def frame(self) -> Any:
        """Every measurement of the database as a dataset DataFrame (newest row per pair)."""
        from ckheur.data.dataset import read_dataset

        if self.store is None:
            return read_dataset(self.path)
        df = self.store.frame(self.campaign_id)
        if not len(df):
            return df
        fields = list(self.family_modules.problems.FIELDS)
        return df.sort_values("timestamp", kind="stable").drop_duplicates(
            ["arch", "direction", "dtype", *fields, "kernel"], keep="last").reset_index(drop=True)

    def close(self) -> None:
        """Close the database connection (a folder database holds none)."""
        if self.store is not None:
            self.store.close()

    def check_serves(self, op: Mapping[str, Any], arch: str | Mapping[str, Any]) -> None:
        """Refuse (TuningDBError) unless this database is for ``op`` on ``arch`` (its device too)."""
        _refuse_mismatch(self.path, {k: getattr(self, k) for k in IDENTITY}, _identity(op, arch))
        _refuse_device(self.path, self.arch, self.device_cus, _device(arch))

    def refresh(self) -> int:
        """Read the parts written since the last load (by this or another process); rows read."""
        from ckheur.data.dataset import usable
        from ckheur.parts import read_parts

        if self.store is not None:
            import pandas as pd

            rows = self.store.retrying(lambda: self.store.rows(self.campaign_id, self._parts))
            df = pd.DataFrame(rows)
        else:
            df, names = read_parts(self.path, skip=self._parts)
            self._parts.update(names)
        if not len(df):
            return 0
        _refuse_mismatch(self.path, _identity_of(df), {k: getattr(self, k) for k in IDENTITY})
        from ckheur.families.hardware import row_devices

        for cus in sorted(set(row_devices(df).tolist()) - {self.device_cus}):  # rows another device wrote into it
            _refuse_device(self.path, self.arch, cus, self.device_cus)
        fields = list(self.family_modules.problems.FIELDS)
        df = df.sort_values("timestamp", kind="stable")  # newest row of a pair wins, as in read_dataset
        keys = list(df[fields].itertuples(index=False, name=None))
        good = usable(df)  # the one rule for stored times (dataset.time_refusals), held on every read
        for key, kernel, status, lat, good in zip(keys, df.kernel, df.status, df.latency_ms, good):
            self._runs.setdefault(key, {})[kernel] = (status, float(lat) if good else None)
        for key in set(keys):
            times = [(lat, k) for k, (_, lat) in self._runs[key].items() if lat is not None]
            if times:
                lat, k = min(times)
                self._best[key] = (k, lat)
            else:
                self._best.pop(key, None)
        return len(df)

    def best(self, key: tuple, kernels: Collection[str] | None = None) -> tuple[str, float] | None:
        """(kernel, latency_ms) of the fastest usable measurement of a problem key, or None;
        ``kernels``: only among these (the pool the answer is for)."""
        hit = self._best.get(key)
        if hit is None or kernels is None or hit[0] in kernels:
            return hit
        times = [(lat, k) for k, (_, lat) in self._runs[key].items() if lat is not None and k in kernels]
        return (min(times)[1], min(times)[0]) if times else None

    def runs(self, key: tuple) -> dict[str, tuple[str, float | None]]:
        """Kernels attempted on a problem key: {kernel: (status, latency_ms or None)}, newest attempt."""
        return dict(self._runs.get(key, {}))

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, key: tuple) -> bool:
        return key in self._best

    def claim(self, key: tuple) -> "Claim | None":
        """Claim a problem for measuring (release it with :meth:`Claim.release`); None while another
        live process holds it. (A database URL: workers claim jobs instead, ``database.work``.) The lock file is opened without following links, never written,
        and removed on release."""
        if self.store is not None:
            raise TuningDBError(f"{self.path}: a database claims jobs with leases (ckheur.data.database.work), "
                                "not problems")
        folder = make_folder(self.path / CLAIMS, "tuning database claims folder")
        lock = folder / f"{hashlib.sha256(repr(key).encode()).hexdigest()[:24]}.lock"
        try:
            import fcntl
        except ImportError:  # no flock on this platform: every claim succeeds
            return Claim(open_lock(lock), None)
        for _ in range(100):  # a holder removing the file between our open and our lock: open it again
            fd = open_lock(lock)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except OSError:  # flock unsupported by the file system: as above
                return Claim(fd, None)
            try:
                same = os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return Claim(fd, lock)
            os.close(fd)
        raise TuningDBError(f"cannot claim {lock}: it keeps being replaced")

    def record(self, problem: Any, kernels: Sequence[Any], results: Any, backend: str = "callable",
               warmup: int = 0, repeat: int = 1) -> Path | None:
        """Append measurements of ``kernels`` on ``problem`` (a backend Results, same order) as one part
        (a database: as rows of its campaign, None)."""
        from ckheur.data.dataset import common_columns, kernel_columns, measurement_rows, write_part

        common = common_columns(self.family_modules, self.direction, self.dtype, self.arch, backend, warmup, repeat,
                                self.device_cus)
        rows = measurement_rows([(problem, k) for k in kernels], results, common, {problem.key(): problem.to_dict()},
                                {k.name: kernel_columns(k, self.family_modules) for k in kernels})
        if self.store is not None:
            self.store.record(self.campaign_id, rows, list(self.family_modules.problems.FIELDS))
            self.refresh()
            return None
        part = write_part(self.path, rows)
        self.refresh()
        return part


@dataclass
class Claim:
    """A held claim on one problem of a tuning database."""

    fd: int
    path: Path | None  # the lock file, removed on release (None: no lock to remove)

    def release(self) -> None:
        """Give the problem back: remove the lock file while holding it, then close (which drops
        the lock); a process that opened the old file sees it is gone and opens a new one."""
        if self.fd >= 0:
            if self.path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            os.close(self.fd)
            self.fd = -1


def _is_url(path: Any) -> bool:
    from ckheur.data.database import is_url

    return is_url(path)


def _identity(op: Mapping[str, Any], arch: str | Mapping[str, Any]) -> dict[str, str]:
    name = arch if isinstance(arch, str) else str(arch["name"])
    return {"family": str(op["family"]), "direction": str(op["direction"]), "dtype": str(op["dtype"]), "arch": name}


def _device(arch: str | Mapping[str, Any]) -> int:
    """The CU count of the device a config names; an arch's name names none (0: any device of it)."""
    from ckheur.families.hardware import device_or_own

    return 0 if isinstance(arch, str) else device_or_own(arch["name"], arch.get("num_cus"))


def _refuse_device(path: Path | str, arch: str, have: Any, want: int) -> None:
    """Refuse a database recorded on another device of the arch than ``want`` (CU counts; a database
    of an earlier version recorded none: the arch's own device)."""
    from ckheur.families.hardware import device_name, device_or_own

    have = device_or_own(arch, have)
    if have and want and have != want:
        raise TuningDBError(f"tuning database {path} was recorded on {device_name(arch, have)}, not "
                            f"{device_name(arch, want)}: one device's measurements are never served for, or mixed "
                            "with, another's; give this device its own (tune.db=<folder>, or <URL>?campaign=<name>; "
                            "predict.tuning_db=...)")


def _read_meta(meta_file: Path) -> dict:
    """A database's identity record; refused when unreadable or not an object naming it."""
    try:
        have = json.loads(meta_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise TuningDBError(f"{meta_file}: corrupted ({e}); it should name {', '.join(IDENTITY)}") from None
    except OSError as e:
        raise TuningDBError(f"{meta_file}: cannot be read ({e.strerror or e})") from None
    if not isinstance(have, dict):
        raise TuningDBError(f"{meta_file}: a JSON {type(have).__name__}, not an object naming {', '.join(IDENTITY)}")
    cus = have.get("device_cus")
    if cus is not None and (isinstance(cus, bool) or not isinstance(cus, int) or cus < 0):
        raise TuningDBError(f"{meta_file}: device_cus={cus!r}: the CU count of the device it was recorded on, an "
                            "integer >= 0")
    return {**{k: have.get(k) for k in IDENTITY}, "device_cus": cus}


def _create_meta(path: Path, meta: dict) -> None:
    """Create a database's identity record exactly once: written whole under a temporary name, then
    hard-linked to its name, which fails if another process created it first (theirs then stands)."""
    try:
        make_folder(path, "tuning database")
    except UserError as e:
        raise TuningDBError(f"cannot create tuning database {path}: {e}") from None
    tmp = path / f".tmp-{uuid.uuid4().hex[:12]}-{META}"
    try:
        with open_new(tmp) as f:
            f.write(json.dumps(meta, indent=2) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path / META)
    except OSError as e:
        raise TuningDBError(f"cannot create tuning database {path}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _identity_of(df: Any) -> dict[str, Any]:
    """The single (family, direction, dtype, arch) of a dataset's rows; several values: refused."""
    out = {}
    for name, col in (("family", df["op"].astype(str).str.split("/").str[0]), ("direction", df["direction"]),
                      ("dtype", df["dtype"]), ("arch", df["arch"])):
        vals = sorted(set(map(str, col)))
        out[name] = vals[0] if len(vals) == 1 else vals
    return out


def _refuse_mismatch(path: Path, have: Mapping[str, Any], want: Mapping[str, Any]) -> None:
    bad = [f"{k} {have[k]!r} (wanted {want[k]!r})" for k in IDENTITY if have.get(k) != want[k]]
    if bad:
        raise TuningDBError(f"tuning database {path} was recorded for another configuration: {', '.join(bad)}; "
                            "it is never served for another arch, dtype, direction or op; use a separate folder")


def _check_writable(path: Path) -> None:
    """A TuningDBError unless a record part can be written in ``path`` (a real write, not a
    permission-bit guess: read-only mounts and quotas count too)."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as e:
        raise TuningDBError(f"tuning database {path} cannot be written ({e.strerror or e}); nothing was measured") \
            from None


# ------------------------------------------------- Parquet exchange with a database (``ckheur.data.database``)

def export_dataset(url: str, campaign: str, folder: str | Path) -> dict:
    """Write a campaign's measurements as a dataset folder (one part file, plus ``tuning_db.json``:
    it is also a Parquet tuning database), read as one snapshot. The folder must be new or empty."""
    from ckheur.data.database import DatabaseError, Store, mask_url
    from ckheur.data.dataset import write_part
    from ckheur.files import make_folder, write_file

    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise DatabaseError(f"export folder {folder} is not empty: give a new folder (nothing is overwritten)")
    with Store(url) as store:
        info = {c["name"]: c for c in store.campaigns()}
        if campaign not in info:
            raise DatabaseError(f"{mask_url(url)} has no campaign {campaign!r}; it has: {', '.join(info) or 'none'}")
        df = store.frame(info[campaign]["id"])
    make_folder(folder, "export folder")
    write_file(folder / META, json.dumps({**{k: info[campaign][k] for k in IDENTITY},
                                          "device_cus": info[campaign]["device_cus"], "campaign": campaign,
                                          "exported_from": mask_url(url)}, indent=2) + "\n")
    if len(df):
        write_part(folder, df)
    return {"campaign": campaign, "rows": len(df), "folder": str(folder)}


def import_dataset(url: str, path: str | Path, campaign: str | None = None) -> dict:
    """Load a dataset folder or file (a Parquet tuning database, a sweep, an import) into the
    database, every row as it is (rows already there are one row). Rows of several
    (family, direction, dtype, arch, device) go to one campaign each, named ``campaign`` or, by default,
    by them (as stage=tune names its campaign)."""
    import pandas as pd

    from ckheur.data.database import Store, campaign_name
    from ckheur.data.dataset import read_dataset
    from ckheur.families import get_family
    from ckheur.families.hardware import row_devices

    df = read_dataset(path, dedupe=False)
    if not len(df):
        return {"rows": 0, "campaigns": {}}
    fam = df["op"].astype(str).str.split("/").str[0]
    devices = pd.Series(row_devices(df), index=df.index)
    out: dict[str, int] = {}
    with Store(url, create=True) as store:
        for ident, part in df.groupby([fam, "direction", "dtype", "arch", devices], sort=True):
            identity = dict(zip(IDENTITY, map(str, ident[:4])))
            name = campaign or campaign_name(identity, int(ident[4]))
            cid = store.campaign(name, identity, create=True, device_cus=int(ident[4]))
            fields = list(get_family(identity["family"]).problems.FIELDS)
            rows = part.to_dict("records")
            for i in range(0, len(rows), 5000):
                store.record(cid, rows[i:i + 5000], fields)
            out[name] = out.get(name, 0) + len(rows)
    return {"rows": int(len(df)), "campaigns": out}


def digest(url: str) -> str:
    """sha256 of the rows a database URL serves (``read_dataset``), in a stable order: what a model
    manifest records of the data it was trained on."""
    import hashlib

    from ckheur.data.dataset import read_dataset

    df = read_dataset(url, dedupe=False)
    order = [c for c in ("timestamp", "kernel") if c in df.columns]
    text = (df.sort_values(order, kind="stable") if order else df).to_json(orient="records")
    return hashlib.sha256(text.encode()).hexdigest()
