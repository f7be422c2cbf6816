"""The one registry of other tools' formats: what reads them in, serves them, and writes them out.

Each entry names a function or module of ``ckheur.integrations`` by its path (``module:name``),
imported on first use, so that the core (data, learn, selection, ...) never imports another
tool's code: a format in or out is its module under ``ckheur/integrations/<tool>/`` plus one line
here. ``tests/test_layers.py`` checks that every entry resolves."""

from __future__ import annotations

import importlib
from typing import Any

# Files imported into datasets (stage=import), first match on the file name wins; the last,
# matching any name, is the default. Each function: (src, *, data_root, op, arch, dataset,
# find_db_arch, overwrite, log) -> {"datasets", "kept_aside"}.
IMPORTERS = (
    ((".fdb.txt", ".ufdb.txt"), "ckheur.integrations.miopen.find_db_import:import_find_db_file"),  # MIOpen find-db
    (("",), "ckheur.integrations.ck.tile_engine_csv:import_csv_file"),  # CK tile_engine CSV
)
# Measurement files read as datasets as they are (replay, train, evaluate), by name ending:
# (path) -> DataFrame of dataset rows.
READERS = {(".csv", ".csv.gz"): "ckheur.integrations.ck.tile_engine_csv:read_ck_csv"}
# Feature engines besides each family's own, by the name bundles record (feature_spec.json "engine").
ENGINES = {"ck_grouped_conv": "ckheur.integrations.ck.features"}  # CK's dispatcher features
# Exact tiers a Selector serves before its model, by its keyword: (selector, file or answers) -> a
# tier with ``best`` (problem key -> (kernel, time ms)), ``path`` and ``refused``.
EXACT_TIERS = {"find_db": "ckheur.integrations.miopen.find_db:serve_find_db"}
# Every listed kernel's time for one problem, where a file lists several (stage=predict's explain):
# (path, problem, direction, dtype, arch) -> {kernel: time ms} or None.
LISTINGS = {"find_db": "ckheur.integrations.miopen.find_db:find_db_listing"}
# The solver names a tool's files list, by family (``op.available`` given as a path): (path) -> sorted names.
SOLVER_NAMES = {"miopen": "ckheur.integrations.miopen.find_db:solver_names"}
# Companion models some feature engines ask for: (table, booster, model, seed) -> booster.
COMPANIONS = {"ck_companion": "ckheur.integrations.ck.model_folder:ck_companion"}


def resolve(ref: str) -> Any:
    """The object a registry entry names (``module`` or ``module:name``)."""
    module, _, name = ref.partition(":")
    mod = importlib.import_module(module)
    return getattr(mod, name) if name else mod


def import_only_endings() -> list[str]:
    """The name endings of the files stage=import reads into datasets but no stage reads as one
    (a MIOpen find-db's: every importer's but the default one's)."""
    return [e for endings, _ in IMPORTERS[:-1] for e in endings]


def import_only(name: str) -> bool:
    """Whether a file by this name is one of :func:`import_only_endings`' (plain or compressed)."""
    return any(e in name for e in import_only_endings())


def reader_for(name: str) -> Any:
    """The reader of a measurement file by its name, or None (then it is a Parquet dataset)."""
    for endings, ref in READERS.items():
        if name.endswith(endings):
            return resolve(ref)
    return None


def importer_for(name: str) -> Any:
    """The importer of a file by its name (the default importer when no other matches)."""
    return next(resolve(ref) for endings, ref in IMPORTERS if any(e in name for e in endings))
