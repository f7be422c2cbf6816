"""What an import remembers in each dataset it writes (``imports.json``): the sha256 of every
source imported into it. Importing is idempotent by content: the same bytes again do nothing,
another file of the same name is refused unless ``import.overwrite=true`` (the old dataset is
then kept aside, never deleted). Shared by every importer."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ckheur.stages import StageError

RECORD = "imports.json"


def read_record(target: Path) -> dict:
    """{sha256: {source, rows, imported, ...}} of a dataset folder ({} when none)."""
    try:
        record = json.loads((target / RECORD).read_text())
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, OSError, UnicodeDecodeError) as e:
        raise StageError(f"{target / RECORD} is unreadable ({e}); move the dataset aside to import afresh") from None
    if not isinstance(record, dict) or not all(isinstance(v, dict) for v in record.values()):
        raise StageError(f"{target / RECORD} is not an import record (an object of sha256 -> object); "
                         f"move the dataset aside to import afresh")
    return record


def save_record(target: Path, record: dict) -> None:
    """Write a dataset's import record atomically."""
    from ckheur.parts import write_text_atomic

    write_text_atomic(target / RECORD, json.dumps(record, indent=1))


def legacy_sources(target: Path) -> set[str]:
    """Source names of imports written before records existed (rows whose host is ``import:<name>``)."""
    from ckheur.parts import read_parts

    if not any(target.glob("part-*.parquet")):
        return set()
    hosts = read_parts(target, columns=["host"])[0]
    return {h.split(":", 1)[1] for h in hosts.get("host", []) if str(h).startswith("import:")}


def prepare_target(target: Path, sha: str, source: str, overwrite: bool) -> dict | None:
    """The record of a dataset about to take an import of ``source`` (content ``sha``), or None
    when it already holds exactly this content. Another file of the same name already imported
    is refused unless ``overwrite``; then the old dataset is renamed aside and the record starts empty."""
    if not target.exists():
        return {}
    record = read_record(target)
    if sha in record:
        return None
    held = {v.get("source") for v in record.values()} | (legacy_sources(target) if not record else set())
    if source not in held:
        return record
    if not overwrite:
        shas = [k[:12] for k, v in record.items() if v.get("source") == source] or ["unrecorded"]
        raise StageError(f"{target} holds an import of another file named {source} (sha256 {shas[0]}, this one "
                         f"{sha[:12]}); import.overwrite=true replaces it (the old dataset is kept aside), "
                         f"import.dataset=<name> keeps both")
    aside = target.with_name(f"{target.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    target.rename(aside)
    print(f"import.overwrite: previous dataset kept aside as {aside}")
    return {}


def note_import(target: Path, record: dict, sha: str, source: str, rows: int, **extra) -> None:
    """Add an import to a dataset's record (after its rows are written)."""
    record[sha] = {"source": source, "rows": int(rows), "imported": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}
    save_record(target, record)
