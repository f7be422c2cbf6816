"""Stages: each is a function ``run(cfg, ctx)`` in its own module, imported only when selected."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ckheur.config import plain
from ckheur.errors import UserError

STAGES = {"list": "ckheur.stages.list_stage", "sweep": "ckheur.stages.sweep", "import": "ckheur.stages.import_stage",
          "train": "ckheur.stages.train", "evaluate": "ckheur.stages.evaluate", "predict": "ckheur.stages.predict",
          "search": "ckheur.stages.search", "tune": "ckheur.stages.tune",
          "export": "ckheur.stages.export"}


class StageError(UserError):
    """A stage cannot run with the given config; the message says what to change."""


@dataclass
class Context:
    """What a stage needs besides its config: where to write and which options were chosen."""

    output_dir: Path
    choices: dict[str, Any] = field(default_factory=dict)


def run_stage(cfg: DictConfig, output_dir: str | Path, choices: dict[str, Any] | None = None) -> Any:
    """Validate the composed config and run its stage; user errors exit with a clear message."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise SystemExit(f"error: mandatory config values are missing: {', '.join(missing)}")
    name = cfg.stage.name
    if name not in STAGES:
        raise SystemExit(f"error: stage={name!r} unknown; allowed: {', '.join(STAGES)}")
    module = importlib.import_module(STAGES[name])
    ctx = Context(output_dir=Path(output_dir), choices=dict(choices or {}))
    try:
        return module.run(cfg, ctx)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None

__all__ = ["STAGES", "Context", "StageError", "plain", "run_stage"]
