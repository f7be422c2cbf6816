"""Shared fixtures: config composition without running, and the real CK measurements."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
CK_FWD_CSV = SHARED_DATA / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv"


@pytest.fixture
def compose():
    """compose(overrides) -> DictConfig, through the packaged config module."""
    from hydra import compose as hcompose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from ckheur.config import register_configs

    register_configs()

    def _compose(overrides=()):
        GlobalHydra.instance().clear()
        with initialize_config_module("ckheur.conf", version_base="1.3"):
            return hcompose(config_name="config", overrides=list(overrides))

    yield _compose
    GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def ck_fwd_csv() -> Path:
    if not CK_FWD_CSV.exists():
        pytest.skip(f"real CK data not found at {CK_FWD_CSV} (the shared/ folder beside the repo)")
    return CK_FWD_CSV


def run_cli(*args: str, cwd: Path = ROOT, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run ``python run.py args...`` and capture its output."""
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
