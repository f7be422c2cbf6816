"""Hydra entry point: compose the job config and dispatch to the selected stage."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from ckheur.config import quote_free_text, register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="pkg://ckheur.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from ckheur.stages import run_stage

    hc = HydraConfig.get()
    run_stage(cfg, output_dir=hc.runtime.output_dir, choices=dict(hc.runtime.choices))


def main() -> None:
    """Console script ``ckheur`` (same as ``python run.py``)."""
    sys.argv[1:] = quote_free_text(sys.argv[1:])
    _hydra_main()
