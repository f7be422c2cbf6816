"""Stages: each is a function ``run(cfg, ctx)`` in its own module, imported only when selected."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

STAGES = {"list": "ckheur.stages.list_stage", "sweep": "ckheur.stages.sweep", "import": "ckheur.stages.import_stage",
          "train": "ckheur.stages.train", "evaluate": "ckheur.stages.evaluate", "predict": "ckheur.stages.predict",
          "search": "ckheur.stages.search"}


class StageError(RuntimeError):
    """A stage cannot run with the given config; the message says what to change."""


@dataclass
class Context:
    """What a stage needs besides its config: where to write and which options were chosen."""

    output_dir: Path
    choices: dict[str, Any] = field(default_factory=dict)


def run_stage(cfg: DictConfig, output_dir: str | Path, choices: dict[str, Any] | None = None) -> Any:
    """Validate the composed config and run its stage; user errors exit with a clear message."""
    from ckheur.dataset import DatasetError
    from ckheur.kernels import FilterError, KernelError
    from ckheur.models.bundle import BundleError
    from ckheur.problems import ProblemError

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
    except (StageError, ProblemError, KernelError, FilterError, DatasetError, BundleError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def plain(node: Any) -> Any:
    """A config node as plain Python containers (enums as strings, interpolations resolved)."""
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
