"""Hydra entry point: compose the job config and dispatch to the selected stage."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from ckheur.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="pkg://ckheur.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from ckheur.stages import run_stage

    hc = HydraConfig.get()
    run_stage(cfg, output_dir=hc.runtime.output_dir, choices=dict(hc.runtime.choices))


# Free-text values that Hydra's override grammar cannot take unquoted (operators, quotes).
_FREE_TEXT_KEYS = ("kernels.filter=", "problem=", "backend.template=", "backend.regex=",
                   "backend.build_command=")


def quote_free_text(args: list[str]) -> list[str]:
    """Quote free-text override values so ``kernels.filter=tile_n >= 128 and x == 'y'`` works."""
    out = []
    for a in args:
        key = next((k for k in _FREE_TEXT_KEYS if a.lstrip("+~").startswith(k)), None)
        if key:
            head, val = a.split("=", 1)
            if key == "problem=":  # problem="convbfp16 -n ..." is the MIOpenDriver form
                head = head.replace("problem", "problem.miopen", 1)
            if val and val[0] not in "'\"" and val != "null":
                q = '"' if '"' not in val else "'"
                if q not in val:
                    a = f"{head}={q}{val}{q}"
        out.append(a)
    return out


def main() -> None:
    """Console script ``ckheur`` (same as ``python run.py``)."""
    sys.argv[1:] = quote_free_text(sys.argv[1:])
    _hydra_main()
