"""Shared fixtures: config composition without running, and the real CK measurements."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# The folder of the test session that run_cli makes its run folders in (session_caches sets it).
RUN_FOLDERS: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def session_caches(tmp_path_factory):
    """Parsed find-dbs and built compiled selectors are cached in folders of the test session, not
    the user's ~/.cache (a test that needs its own cache sets the variable itself); run_cli's run
    folders are made in one too, so the tests leave nothing in /tmp. The caches are shared by the
    xdist workers (the session's folder above theirs): a find-db or a bundle is parsed or built once
    per session, not once per worker, as processes share ~/.cache (each entry is written whole,
    then renamed into place)."""
    import os

    names = {"CKHEUR_FIND_DB_CACHE": "find_db_cache", "CKHEUR_CACHE_DIR": "compiled_cache"}
    old = {key: os.environ.get(key) for key in names}
    base = tmp_path_factory.getbasetemp()
    session = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    for key, name in names.items():
        folder = session / name
        folder.mkdir(mode=0o700, exist_ok=True)
        os.environ[key] = str(folder)
    RUN_FOLDERS[:] = [tmp_path_factory.mktemp("cli_runs")]
    yield
    RUN_FOLDERS.clear()
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# A small problem set of three convolutions (a padded 3x3, a grouped 1x1, a strided 3x3) as a
# problems config: the sweep tests' (``tiny_overrides``), and a user's config folder's (``confdir``).
TINY = """defaults:
  - /schema/problems@_here_: problems
  - _self_
name: tiny
sources:
  - kind: inline
    problems:
      - {N: 1, C: 8, K: 8, Hi: 5, Wi: 5, Y: 3, X: 3, pad_h: 1, pad_w: 1}
      - {N: 2, C: 16, K: 8, G: 2, Hi: 4, Wi: 6, Y: 1, X: 1}
      - {N: 1, C: 8, K: 16, Hi: 6, Wi: 6, Y: 3, X: 3, stride_h: 2, stride_w: 2}
"""


def tiny_overrides() -> tuple[str, str]:
    """``TINY`` as command-line overrides (problems.name, problems.sources): the same set without
    --config-dir, whose extra Hydra composition every run would pay (``confdir`` is for the tests
    of a user's own config folder)."""
    import yaml

    problems = yaml.safe_load(TINY)["sources"][0]["problems"]
    inline = ",".join("{" + ",".join(f"{k}:{v}" for k, v in p.items()) + "}" for p in problems)
    return "problems.name=tiny", f"problems.sources=[{{kind:inline,problems:[{inline}]}}]"


@pytest.fixture
def confdir(tmp_path):
    """A config folder holding conf/problems/tiny.yaml (``TINY``): give it as --config-dir."""
    d = tmp_path / "conf" / "problems"
    d.mkdir(parents=True)
    (d / "tiny.yaml").write_text(TINY)
    return tmp_path / "conf"


@pytest.fixture
def compose():
    """compose(overrides) -> DictConfig, through the packaged config module."""
    from hydra.core.global_hydra import GlobalHydra

    from ckheur.stages import compose_config

    yield compose_config
    GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def ck_fwd_csv(tmp_path_factory) -> Path:
    """The real gfx950 forward CSV, uncompressed from the copy shipped in the package (checked
    against the published sha256), so the tests never depend on ../shared."""
    import gzip
    import hashlib

    from ckheur.measurements import CK_GFX950_FWD, CK_GFX950_FWD_SHA256

    raw = gzip.decompress(CK_GFX950_FWD.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == CK_GFX950_FWD_SHA256
    path = tmp_path_factory.mktemp("ck_gfx950") / "fwd_bf16_2d_miopen200.csv"
    path.write_bytes(raw)
    return path


@pytest.fixture(scope="session")
def miopen_slices(tmp_path_factory) -> Path:
    """The MI300X and MI210/250 find-db slices (tests/data/miopen_fdb) imported once by stage=import
    into one data folder (paths.data) shared by the tests that only read the datasets, e.g.
    ``miopen_slices / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet"``. Tests of the import itself
    run their own; a test that writes must not write here."""
    data = tmp_path_factory.mktemp("miopen_slices")
    for name in ("gfx942130.HIP.fdb.txt.bz2", "gfx90a68.HIP.fdb.txt.bz2"):
        r = run_cli("stage=import", f"import.path={ROOT / 'tests' / 'data' / 'miopen_fdb' / name}",
                    f"paths.data={data}", f"hydra.run.dir={tmp_path_factory.mktemp('import')}")
        assert r.returncode == 0, r.stderr
    return data


def import_as_stage(path: Path, data_root: Path, **kw) -> dict:
    """What stage=import does with ``path`` and its default op and arch (grouped_conv fwd bf16 on
    gfx950): ``import_file``, without the command line (for tests whose point is not the CLI)."""
    from ckheur.config import load_option
    from ckheur.data.importing import import_file

    return import_file(path, data_root=data_root, op=load_option("op/grouped_conv/fwd"),
                       arch=load_option("arch/gfx950"), log=lambda _: None, **kw)


def cut_forest(folder: Path, trees: int) -> None:
    """Rewrite the ranking model of a bundle folder (a test's copy) as its first ``trees`` trees, for
    tests whose behaviour does not depend on the forest's size (reading, checking and exporting whole
    shipped forests is most of their time)."""
    from ckheur import files
    from ckheur.learn.bundle import MODEL, model_file, write_model
    from ckheur.threads import lightgbm

    booster = lightgbm().Booster(model_str=files.read_compressed(model_file(folder)).decode())
    assert booster.num_trees() > trees
    write_model(folder, MODEL, booster, trees)


def run_cli(*args: str, cwd: Path = ROOT, timeout: int = 1800, in_process: bool = True) -> subprocess.CompletedProcess:
    """Run the command line ``run.py args...`` and capture its output and exit status.

    In this process by default (the console script's own entry point, with argv, stdout, stderr
    and the working directory swapped): the same code path without paying Python's and Hydra's
    start-up for every call. ``in_process=False`` runs ``python run.py`` in a subprocess, for the
    few end-to-end runs that must prove the real process (``timeout`` is then a hang guard).
    A run that names no run folder gets a new one in the test session's folder (pytest's basetemp):
    tests never write into the checkout, nor leave folders in /tmp."""
    if not any(a.startswith(("hydra.run.dir=", "hydra.sweep.dir=")) for a in args):
        import tempfile

        if not RUN_FOLDERS:
            raise RuntimeError("run_cli makes its run folders in the test session's folder: call it from a test")
        key = "hydra.sweep.dir" if "-m" in args or "--multirun" in args else "hydra.run.dir"
        args = (*args, f"{key}={tempfile.mkdtemp(prefix='run-', dir=RUN_FOLDERS[0])}")
    if not in_process:
        return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout)
    import contextlib
    import io
    import os

    from hydra.core.global_hydra import GlobalHydra

    from ckheur import cli

    out, err = io.StringIO(), io.StringIO()
    argv, here, code = sys.argv, os.getcwd(), 0
    sys.argv = [str(ROOT / "run.py"), *args]
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if not isinstance(e.code, (int, type(None))):
                    print(e.code, file=sys.stderr)  # SystemExit("message") prints it, as Python does
    finally:
        sys.argv = argv
        os.chdir(here)
        GlobalHydra.instance().clear()
    return subprocess.CompletedProcess([sys.executable, "run.py", *args], code, out.getvalue(), err.getvalue())
