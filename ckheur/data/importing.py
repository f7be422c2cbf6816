"""Importing measurement files into datasets: CK tile_engine CSVs and MIOpen find-dbs.

    from ckheur.data.importing import import_file
    import_file("fwd_bf16_2d_miopen200.csv.gz", data_root="data", op=op, arch=arch)

The formats are read by ``ckheur.data.dataset`` (CK CSVs, which are also readable as datasets
directly) and ``ckheur.integrations.miopen.find_db`` (find-dbs); this module decides what an import writes and
writes it.

Each dataset folder records the sha256 of every source imported into it (``imports.json``),
with the part file holding its rows. Importing is idempotent by content: the same bytes again
do nothing. Another file of the same name (an edited source) is refused, before anything is
written, unless ``overwrite``; then every dataset the old file contributed to, in any direction
or data type, is kept aside (``<name>.replaced-<time>-<id>``, never deleted), and the rows other
sources had there are carried over.

One import is one transaction (:class:`ImportTransaction`): every new part is written under a
hidden temporary name, and a dataset to replace is rebuilt whole in a hidden staging folder
beside it while the old one stays in place; only when all are written are the parts renamed
into place, the records written and the replaced datasets swapped (old aside, new in place). A
failure before that removes what was written: nothing of the import is visible. A kill at any
point leaves every dataset old or new, never empty: the next import of that name completes a
commit that was under way (its staging folders were marked complete) and removes staging
folders of an import that never finished writing. (A process killed during the final renames,
a few milliseconds, can leave some datasets committed; importing again completes the others and
rewrites the committed ones' parts under the same names.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ckheur.errors import UserError


class ImportRefused(UserError):
    """A file cannot be imported as asked; the message says why and what to do."""


RECORD = "imports.json"


def read_record(target: Path) -> dict:
    """{sha256: {source, rows, imported, parts, ...}} of a dataset folder ({} when none)."""
    try:
        record = json.loads((target / RECORD).read_text())
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, OSError, UnicodeDecodeError, RecursionError) as e:
        raise ImportRefused(f"{target / RECORD} is unreadable ({e}); move the dataset aside to import afresh") from None
    if not isinstance(record, dict) or not all(isinstance(v, dict) for v in record.values()):
        raise ImportRefused(f"{target / RECORD} is not an import record (an object of sha256 -> object); "
                         f"move the dataset aside to import afresh")
    return record


def save_record(target: Path, record: dict) -> None:
    """Write a dataset's import record atomically."""
    from ckheur.files import write_file

    write_file(target / RECORD, json.dumps(record, indent=1))


def legacy_sources(target: Path) -> set[str]:
    """Source names of imports written before records existed (rows whose host is ``import:<name>``)."""
    from ckheur.parts import read_parts

    if not any(target.glob("part-*.parquet")):
        return set()
    hosts = read_parts(target, columns=["host"])[0]
    return {h.split(":", 1)[1] for h in hosts.get("host", []) if str(h).startswith("import:")}


def datasets_named(data_root: str | Path, name: str) -> list[Path]:
    """Every dataset folder of this name under ``data_root``, whatever its op, dtype or arch."""
    return sorted(p for p in Path(data_root).glob(f"*/{name}.parquet") if p.is_dir())


def _conflict(target: Path, record: dict, sha: str, source: str) -> str | None:
    """The sha256 (or "unrecorded") of another file named ``source`` imported into ``target``."""
    if sha in record:
        return None
    if not record and source in legacy_sources(target):
        return "unrecorded"
    return next((k for k, v in record.items() if v.get("source") == source), None)


def already_imported(data_root: str | Path, name: str, sha: str, source: str) -> list[Path]:
    """The datasets of this name holding exactly this content, when the file was imported whole
    and nothing conflicts; [] when it must be (re)imported or refused (plan_import decides)."""
    found = []
    for target in datasets_named(data_root, name):
        record = read_record(target)
        if _conflict(target, record, sha, source):
            return []
        if sha in record:
            found.append(target)
    return found


@dataclass
class ImportPlan:
    """What one import changes: the dataset folders it writes, those that already hold this
    content (skipped), and (overwrite) the folders of the replaced file, to be set aside."""

    sha: str
    source: str  # the file's name
    targets: list = field(default_factory=list)  # dataset folders to write
    held: list = field(default_factory=list)  # dataset folders already holding this content
    aside: list = field(default_factory=list)  # dataset folders replaced (overwrite), kept aside


def plan_import(data_root: str | Path, name: str, sha: str, source: str, targets: Sequence[Path],
                overwrite: bool) -> ImportPlan:
    """Decide an import of a file ``source`` (content ``sha``) into ``targets``, dataset folders
    named ``name``, writing nothing; a StageError when another file of that name was imported and
    ``overwrite`` is off."""
    plan = ImportPlan(sha, source)
    wanted = set(targets)
    for target in sorted(set(datasets_named(data_root, name)) | {t for t in wanted if t.exists()}):
        record = read_record(target)
        if sha in record and target in wanted:
            plan.held.append(target)
            continue
        other = _conflict(target, record, sha, source)
        if other is None:
            continue
        if not overwrite:
            raise ImportRefused(f"{target} holds an import of another file named {source} (sha256 {other[:12]}, this "
                             f"one {sha[:12]}); import.overwrite=true replaces everything that file contributed "
                             f"(kept aside), import.dataset=<name> keeps both; nothing was written")
        plan.aside.append(target)
    plan.targets = [t for t in targets if t not in plan.held]
    return plan


STAGED = ".staged"  # in a staging folder: every dataset of its import is written; commit may proceed
STAGING_LOCK = ".lock"  # in a staging folder: held by the import writing it (the OS drops it on a kill)


def staging_name(target: Path) -> Path:
    """A new hidden folder beside a dataset, where an overwrite builds its replacement."""
    import uuid

    return target.with_name(f".{target.name}.staging-{uuid.uuid4().hex[:12]}")


class ImportTransaction:
    """Carry out an import plan: ``with ImportTransaction(plan) as txn: txn.add(target, rows)``.

    Each ``add`` writes its rows under a hidden temporary name; a dataset the import replaces
    (overwrite) is rebuilt whole in a hidden staging folder beside it, what other sources had
    there included, while the old one stays in place. Leaving the block without an error marks
    every staging folder complete, renames every part into place, writes the records, and only
    then swaps each replaced dataset: the old one aside, the staged one into its place. An error
    before that undoes it all (nothing of the import is visible); a kill leaves the old datasets
    in place, or marked staging folders that the next import of that name commits
    (:func:`recover_staging`)."""

    def __init__(self, plan: ImportPlan) -> None:
        self.plan = plan
        self.moved: dict[Path, Path] = {}  # dataset folder -> where its old version was kept aside
        self.rows: dict[Path, int] = {}
        self._created: list[Path] = []
        self._staged: list[Path] = []
        self._staging: dict[Path, Path] = {}  # replaced dataset folder -> the staging folder of its new version
        self._locks: list[int] = []
        self._records: dict[Path, dict] = {}
        self._part = ""

    def __enter__(self) -> "ImportTransaction":
        from ckheur.parts import part_name

        self._part = part_name(f"import-{self.plan.sha[:16]}")
        try:
            for target in self.plan.aside:  # carry over what other sources contributed there
                others = [e for e in read_record(target).values() if e.get("source") != self.plan.source]
                if others or target in self.plan.targets:
                    self._open(target)
        except BaseException:
            self._undo()
            raise
        return self

    def _open(self, target: Path) -> dict:
        """The record of a dataset folder this import writes (created, or carried from the version
        it replaces into a staging folder)."""
        from ckheur.files import make_folder, open_lock, open_new

        if target in self._records:
            return self._records[target]
        if target not in self.plan.aside:
            if not target.exists():
                self._created.append(target)
            make_folder(target, "dataset folder")
            self._records[target] = record = read_record(target)
            return record
        staging = make_folder(staging_name(target), "import staging folder")
        self._staging[target] = staging
        fd = open_lock(staging / STAGING_LOCK)
        self._locks.append(fd)
        _lock(fd, block=True)
        record = {}
        for sha, entry in read_record(target).items():
            if entry.get("source") == self.plan.source:
                continue
            for part in entry.get("parts", []):
                with open_new(staging / part, binary=True) as f, open(target / part, "rb") as src:
                    shutil.copyfileobj(src, f)
            record[sha] = entry
        self._records[target] = record
        return record

    def add(self, target: Path, rows: Any) -> None:
        """Stage an import's rows for one of the plan's dataset folders."""
        from ckheur.data.dataset import write_part

        if target not in self.plan.targets:
            raise ValueError(f"{target} is not a dataset folder this import writes")
        record = self._open(target)
        if target in self._staging:  # a staging folder is invisible until the swap: parts take their names
            write_part(self._staging[target], rows, name=self._part)
        else:
            self._staged.append(write_part(target, rows, name=self._part, commit=False))
        record[self.plan.sha] = {"source": self.plan.source, "rows": int(len(rows)),
                                 "imported": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": [self._part],
                                 "complete": True}
        self.rows[target] = int(len(rows))

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        from ckheur.files import aside_name, write_file
        from ckheur.parts import commit_part

        if kind is not None:
            self._undo()
            return
        try:
            for target, staging in self._staging.items():
                save_record(staging, self._records[target])
            for staging in self._staging.values():  # the commit point: from here on, the next import completes it
                write_file(staging / STAGED, self.plan.sha + "\n")
        except BaseException:
            self._undo()
            raise
        for tmp in self._staged:
            commit_part(tmp)
        for target, record in self._records.items():
            if record and target not in self._staging:
                save_record(target, record)
        try:
            for target in self.plan.aside:
                self.moved[target] = aside_name(target)
                _swap(target, self.moved[target], self._staging.get(target))
        finally:
            self._release()

    def _release(self) -> None:
        for fd in self._locks:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._locks.clear()

    def _undo(self) -> None:
        for tmp in self._staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for staging in self._staging.values():  # this import's own folders: never datasets
            shutil.rmtree(staging, ignore_errors=True)
        self._release()
        for target in self._created:
            for folder in (target, target.parent):  # the op folder too, when this import made it
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _swap(target: Path, aside: Path, staging: Path | None) -> None:
    """Keep a replaced dataset aside and put its staged replacement (if any) in its place. Where
    the system can (Linux), the two folders trade places in one atomic step, so the dataset is
    never absent: the old one then sits under the staging name, unmarked, while the new one holds
    the marker, and :func:`recover_staging` knows it as the old one. Elsewhere two renames; a kill
    between them leaves the marked staging folder, which :func:`recover_staging` moves into place."""
    if staging is not None and target.exists() and _exchange(staging, target):
        os.rename(staging, aside)
    else:
        if target.exists():
            os.rename(target, aside)
        if staging is not None:
            os.rename(staging, target)
    if staging is not None:
        _unmark(target)


def _unmark(target: Path) -> None:
    for name in (STAGED, STAGING_LOCK):
        with contextlib.suppress(OSError):
            (target / name).unlink()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where the
    system or the file system cannot, and nothing was changed."""
    import ctypes
    import errno

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _lock(fd: int, block: bool) -> bool:
    """flock a staging folder's lock; False when another live process holds it (``block`` off).
    Without flock (some platforms and network mounts) every lock succeeds."""
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except (ImportError, OSError):
        pass
    return True


def _marked(folder: Path) -> bool:
    """Whether a staging folder (or a dataset just swapped in) is marked complete: its marker names
    an import its record holds."""
    marker = folder / STAGED
    try:
        return not marker.is_symlink() and marker.is_file() and marker.read_text().strip() in read_record(folder)
    except (OSError, UnicodeDecodeError, ImportRefused):
        return False


def recover_staging(data_root: str | Path, name: str, log: Callable[[str], None] = print) -> list[str]:
    """Finish or clean up what an import of datasets ``name`` killed midway left: a marked staging
    folder (every dataset of its import was written) replaces its dataset, the old one kept aside,
    as the import would have; an unmarked one beside a marked dataset is the old dataset of a swap
    that had just happened (kept aside); any other unmarked one (its import never finished writing)
    is removed. A folder whose import is still running (its lock held), or that another user
    made, is left alone. Returns what was done."""
    from ckheur.files import aside_name, open_lock

    done = []
    for staging in sorted(Path(data_root).glob(f"*/.{name}.parquet.staging-*")):
        if staging.is_symlink() or not staging.is_dir() or staging.stat().st_uid != os.getuid():
            continue  # not a folder this user's imports made: never used
        fd = open_lock(staging / STAGING_LOCK)
        try:
            if not _lock(fd, block=False):
                continue
            target = staging.with_name(f"{name}.parquet")
            if _marked(staging):
                aside = aside_name(target)
                _swap(target, aside, staging)
                done.append(f"import: completed an overwrite killed before its commit finished: {target} now holds "
                            f"the staged datasets" + (f" (the previous one kept aside as {aside})"
                                                      if aside.exists() else ""))
            elif _marked(target):  # swapped in one step just before the kill: this is the old dataset
                aside = aside_name(target)
                os.rename(staging, aside)
                with contextlib.suppress(OSError):
                    (aside / STAGING_LOCK).unlink()
                done.append(f"import: kept the dataset an overwrite replaced aside as {aside} (the import was killed "
                            "as it finished)")
            else:
                shutil.rmtree(staging, ignore_errors=True)
                done.append(f"import: removed {staging}, left by an import killed before it had written everything "
                            f"(the datasets it would have replaced are unchanged)")
        finally:
            os.close(fd)
    for target in Path(data_root).glob(f"*/{name}.parquet"):  # a commit killed as it cleaned up
        if not target.is_symlink() and target.is_dir() and _marked(target):
            _unmark(target)
    for line in done:
        log(line)
    return done


def import_file(path: str | Path, *, data_root: str | Path, op: Mapping[str, Any], arch: Mapping[str, Any],
                dataset: str | None = None, find_db_arch: str | None = None, overwrite: bool = False,
                log: Callable[[str], None] = print) -> dict:
    """Import a measurement file into datasets under ``data_root``, as one transaction, by the
    importer ``ckheur.formats`` names for its file name: a CK tile_engine CSV (for ``op``'s family
    and tiles, on ``arch``) or a MIOpen find-db (every direction and dtype it holds; its arch from
    the file name, else ``find_db_arch``). ``dataset``: the datasets' name (default: the file name
    up to its first dot). Returns the datasets written or already holding the file, and where
    replaced ones were kept aside."""
    from ckheur.formats import importer_for

    from ckheur.files import held_lock, make_folder

    src = Path(path)
    if not src.is_file():
        raise ImportRefused(f"import.path={src}: " + ("not a file" if src.exists() else "not found"))
    name = dataset_name(src, dataset)
    log(f"import: reading {src.name} ({src.stat().st_size / 1e6:.1f} MB) and writing its datasets ...")
    # One import of a name at a time, from planning to commit: two at once would both plan against
    # the datasets as they were and write two files' rows under one record.
    new_root = not Path(data_root).exists()
    try:
        with held_lock(make_folder(data_root, "data folder") / f".{name}.import.lock", f"import of {name}"):
            return importer_for(src.name)(src, data_root=data_root, op=op, arch=arch, dataset=dataset,
                                          find_db_arch=find_db_arch, overwrite=overwrite, log=log)
    finally:
        if new_root:  # a refused first import leaves no empty data folder (rmdir refuses one with files)
            with contextlib.suppress(OSError):
                Path(data_root).rmdir()


def dataset_name(src: Path, dataset: str | None) -> str:
    """The datasets' name: ``dataset``, else the file name up to its first dot."""
    from ckheur.files import check_name

    return check_name(dataset, "import.dataset") if dataset else \
        check_name(src.name.split(".")[0], "import.dataset (default: the file name up to its first dot)")


def begin_import(src: Path, data_root: str | Path, dataset: str | None, log: Callable[[str], None],
                 data: bytes | None = None) -> tuple[str, str, dict | None]:
    """What every importer does first: the datasets' name, what a killed import left recovered, the
    file's sha256 (of ``data``, its bytes as the importer read them to parse, when given), and the
    import's result when the datasets already hold this file (else None)."""
    from ckheur.parts import sha256_of

    name = dataset_name(src, dataset)
    recover_staging(data_root, name, log)
    sha = sha256_of(src, data)
    done = already_imported(data_root, name, sha, src.name)
    for target in done:
        log(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
    return name, sha, {"datasets": [str(t) for t in done], "kept_aside": {}} if done else None


def import_report(txn: ImportTransaction, log: Callable[[str], None]) -> dict:
    """Say what an import did."""
    plan = txn.plan
    for target, old in txn.moved.items():
        log(f"import.overwrite: previous dataset {target} kept aside as {old}")
    for target in plan.held:
        log(f"import: {target} already holds this file (sha256 {plan.sha[:12]}); nothing to do")
    for target, n in txn.rows.items():
        log(f"import: {n} rows from {plan.source} -> {target}")
    return {"datasets": sorted(str(t) for t in [*txn.rows, *plan.held]),
            "kept_aside": {str(k): str(v) for k, v in txn.moved.items()}}
