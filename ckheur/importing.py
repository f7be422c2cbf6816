"""Importing measurement files into datasets: CK tile_engine CSVs and MIOpen find-dbs.

    from ckheur.importing import import_file
    import_file("fwd_bf16_2d_miopen200.csv.gz", data_root="data", op=op, arch=arch)

The formats are read by ``ckheur.dataset`` (CK CSVs, which are also readable as datasets
directly) and ``ckheur.miopen_fdb`` (find-dbs); this module decides what an import writes and
writes it.

Each dataset folder records the sha256 of every source imported into it (``imports.json``),
with the part file holding its rows. Importing is idempotent by content: the same bytes again
do nothing. Another file of the same name (an edited source) is refused, before anything is
written, unless ``overwrite``; then every dataset the old file contributed to, in any direction
or data type, is kept aside (``<name>.replaced-<time>-<id>``, never deleted), and the rows other
sources had there are carried over.

One import is one transaction (:class:`ImportTransaction`): the datasets to replace are moved
aside, every new part is written under a hidden temporary name, and only when all are written
are they renamed into place and the records written. A failure before that undoes the moves and
removes the temporary files: nothing of the import is visible. (A process killed during the
final renames, a few milliseconds, can leave some datasets committed; importing again completes
the others and rewrites the committed ones' parts under the same names.)
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


class ImportTransaction:
    """Carry out an import plan: ``with ImportTransaction(plan) as txn: txn.add(target, rows)``.

    Entering moves the replaced datasets aside; each ``add`` writes its rows under a hidden
    temporary name; leaving the block without an error renames every part into place and writes
    the records; an error undoes it all (nothing of the import is visible)."""

    def __init__(self, plan: ImportPlan) -> None:
        self.plan = plan
        self.moved: dict[Path, Path] = {}  # dataset folder -> where its old version was kept aside
        self.rows: dict[Path, int] = {}
        self._created: list[Path] = []
        self._staged: list[Path] = []
        self._records: dict[Path, dict] = {}
        self._part = ""

    def __enter__(self) -> "ImportTransaction":
        from ckheur.files import aside_name
        from ckheur.parts import part_name

        self._part = part_name(f"import-{self.plan.sha[:16]}")
        try:
            for target in self.plan.aside:
                self.moved[target] = aside_name(target)
                os.rename(target, self.moved[target])
            for target in self.plan.aside:  # carry over what other sources contributed there
                others = [e for e in read_record(self.moved[target]).values() if e.get("source") != self.plan.source]
                if others or target in self.plan.targets:
                    self._open(target)
        except BaseException:
            self._undo()
            raise
        return self

    def _open(self, target: Path) -> dict:
        """The record of a dataset folder this import writes (created, or carried from its old version)."""
        from ckheur.files import make_folder, open_new

        if target in self._records:
            return self._records[target]
        if not target.exists():
            self._created.append(target)
        make_folder(target, "dataset folder")
        old = self.moved.get(target)
        record = {} if old is not None else read_record(target)
        if old is not None:
            for sha, entry in read_record(old).items():
                if entry.get("source") == self.plan.source:
                    continue
                for part in entry.get("parts", []):
                    tmp = target / f".tmp-{sha[:8]}-{part}"
                    with open_new(tmp, binary=True) as f, open(old / part, "rb") as src:
                        shutil.copyfileobj(src, f)
                    self._staged.append(tmp)
                record[sha] = entry
        self._records[target] = record
        return record

    def add(self, target: Path, rows: Any) -> None:
        """Stage an import's rows for one of the plan's dataset folders."""
        from ckheur.dataset import write_part

        if target not in self.plan.targets:
            raise ValueError(f"{target} is not a dataset folder this import writes")
        record = self._open(target)
        self._staged.append(write_part(target, rows, name=self._part, commit=False))
        record[self.plan.sha] = {"source": self.plan.source, "rows": int(len(rows)),
                                 "imported": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": [self._part],
                                 "complete": True}
        self.rows[target] = int(len(rows))

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        from ckheur.parts import commit_part

        if kind is not None:
            self._undo()
            return
        for tmp in self._staged:
            commit_part(tmp)
        for target, record in self._records.items():
            if record:
                save_record(target, record)

    def _undo(self) -> None:
        for tmp in self._staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        for target in self._created:
            for folder in (target, target.parent):  # the op folder too, when this import made it
                with contextlib.suppress(OSError):
                    folder.rmdir()
        for target, old in self.moved.items():
            with contextlib.suppress(OSError):
                os.rename(old, target)


def is_find_db(path: Path) -> bool:
    """Whether a path names a MIOpen find-db file (a system one, or a user find-db: ``.ufdb.txt``)."""
    return ".fdb.txt" in Path(path).name or ".ufdb.txt" in Path(path).name


def import_file(path: str | Path, *, data_root: str | Path, op: Mapping[str, Any], arch: Mapping[str, Any],
                dataset: str | None = None, find_db_arch: str | None = None, overwrite: bool = False,
                log: Callable[[str], None] = print) -> dict:
    """Import a CK tile_engine CSV (for ``op``'s family and tiles, on ``arch``) or a MIOpen find-db
    (every direction and dtype it holds; its arch from the file name, else ``find_db_arch``) into
    datasets under ``data_root``, as one transaction. ``dataset``: the datasets' name (default: the
    file name up to its first dot). Returns the datasets written or already holding the file,
    and where replaced ones were kept aside."""
    src = Path(path)
    if not src.is_file():
        raise ImportRefused(f"import.path={src}: " + ("not a file" if src.exists() else "not found"))
    if is_find_db(src):
        return _import_find_db(src, data_root, dataset, find_db_arch, arch, overwrite, log)
    return _import_ck_csv(src, data_root, op, arch, dataset, overwrite, log)


def _dataset_name(src: Path, dataset: str | None) -> str:
    from ckheur.files import check_name

    return check_name(dataset, "import.dataset") if dataset else \
        check_name(src.name.split(".")[0], "import.dataset (default: the file name up to its first dot)")


def _nothing_to_do(done: Sequence[Path], sha: str, log: Callable[[str], None]) -> dict:
    for target in done:
        log(f"import: {target} already holds this file (sha256 {sha[:12]}); nothing to do")
    return {"datasets": [str(t) for t in done], "kept_aside": {}}


def _import_ck_csv(src: Path, data_root: str | Path, op: Mapping[str, Any], arch: Mapping[str, Any],
                   dataset: str | None, overwrite: bool, log: Callable[[str], None]) -> dict:
    from ckheur.dataset import DatasetError, dataset_dir, import_ck_csv
    from ckheur.parts import sha256_of

    name = _dataset_name(src, dataset)
    try:
        sha = sha256_of(src)
        done = already_imported(data_root, name, sha, src.name)
        if done:
            return _nothing_to_do(done, sha, log)
        df, report = import_ck_csv(src, arch=arch["name"], tiles=op["tiles"])
    except (DatasetError, OSError, EOFError) as e:
        raise ImportRefused(str(e) if isinstance(e, DatasetError) else f"{src}: cannot be read ({e})") from None
    for column, value in report["defaults"].items():
        log(f"import: {src.name} has no column {column}: every row takes {column}={value}")
    if report["repeats"]:
        lines = "; ".join("lines " + ", ".join(map(str, r)) for r in report["repeats"][:3])
        log(f"import: {len(report['repeats'])} (problem, kernel) pairs are measured more than once ({lines}"
            f"{' ...' if len(report['repeats']) > 3 else ''}): each is one row with the median of its repeats, "
            "their range in latency_spread_ms")
    targets = {}
    for (direction, dtype), part in df.groupby(["direction", "dtype"]):
        targets[dataset_dir(data_root, {**op, "direction": direction, "dtype": dtype}, arch["name"], name,
                            field="import.dataset")] = part
    plan = plan_import(data_root, name, sha, src.name, list(targets), overwrite)
    with ImportTransaction(plan) as txn:
        for target in plan.targets:
            txn.add(target, targets[target])
    return _report(txn, log)


def _import_find_db(src: Path, data_root: str | Path, dataset: str | None, find_db_arch: str | None,
                    job_arch: Mapping[str, Any], overwrite: bool, log: Callable[[str], None]) -> dict:
    """One find-db: one dataset per direction and dtype it holds, every listed solver timed and every
    other solver of the arch's table ``censored``."""
    from ckheur.config import CONF_DIR, load_option
    from ckheur.dataset import dataset_dir
    from ckheur.miopen_fdb import FindDbError, arch_from_name, dataset_rows, read_find_db
    from ckheur.parts import sha256_of

    known = sorted(p.stem for p in (CONF_DIR / "arch").glob("*.yaml"))
    t0 = time.perf_counter()
    try:
        if find_db_arch:
            arch, cus = str(find_db_arch), None
            if arch not in known:
                raise ImportRefused(f"import.arch={arch!r}: allowed values are {', '.join(known)}")
        else:
            arch, cus = arch_from_name(src, known)
        name = _dataset_name(src, dataset)
        sha = sha256_of(src)
        done = already_imported(data_root, name, sha, src.name)
        if done:
            return _nothing_to_do(done, sha, log)
        fdb = read_find_db(src, arch)
    except FindDbError as e:
        raise ImportRefused(str(e)) from None
    except (OSError, EOFError) as e:
        raise ImportRefused(f"{src}: cannot be read ({e})") from None
    arch_cfg = dict(job_arch) if job_arch.get("name") == arch else load_option(f"arch/{arch}")
    if cus is not None and cus != arch_cfg.get("num_cus"):
        log(f"import: the file was measured on {arch} with {cus} CUs (conf/arch/{arch}.yaml says "
            f"{arch_cfg.get('num_cus')}): the datasets are labeled {arch}")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(src.stat().st_mtime)) + "+00:00"
    rep = fdb.report
    log(f"import: {src.name}: {rep['lines']} lines, {rep['problems']} problems, {rep['entries']} listed "
        f"solver times ({arch}{f', {cus} CUs' if cus else ''})")
    for reason, n in {**rep["skipped_keys"], **rep["skipped_entries"]}.items():
        log(f"import: skipped {n}: {reason}")
    if rep.get("problems_out_of_time_order"):
        log(f"import: {rep['problems_out_of_time_order']} problems listed their solvers out of time order (sorted)")
    if not rep["problems"]:
        raise ImportRefused(f"{src}: no problem left to import (every line was skipped, above); nothing was written")
    ops = {}
    for direction, dtype in sorted(tuple(k.split("/")) for k in rep["by_direction_dtype"]):
        op = {**load_option(f"op/miopen/{direction}"), "direction": direction, "dtype": dtype}
        if not (op.get("solvers") or {}).get(arch):
            raise ImportRefused(f"conf/op/miopen/{direction}.yaml has no solver table for {arch}; "
                                f"tools/miopen_solvers.py derives one from find-db files")
        ops[dataset_dir(data_root, op, arch, name, field="import.dataset")] = op
    plan = plan_import(data_root, name, sha, src.name, list(ops), overwrite)
    with ImportTransaction(plan) as txn:
        for target in plan.targets:  # one direction and dtype at a time: its rows are written, then freed
            op = ops[target]
            rows, left = dataset_rows(fdb, op["direction"], op["dtype"], arch, op["solvers"][arch], src.name, stamp)
            txn.add(target, rows)
            if left["listed_solvers_outside_pool"]:
                log(f"import: {op['direction']} {op['dtype']}: listed solvers not in the {arch} table, left out: "
                    f"{left['listed_solvers_outside_pool']}")
    out = _report(txn, log)
    log(f"import: done in {time.perf_counter() - t0:.1f}s")
    return out


def _report(txn: ImportTransaction, log: Callable[[str], None]) -> dict:
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
