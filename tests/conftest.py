"""Shared fixtures: config composition without running, and the real CK measurements."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


def run_cli(*args: str, cwd: Path = ROOT, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run ``python run.py args...`` and capture its output."""
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
