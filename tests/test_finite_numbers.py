"""NaN and infinite numbers are refused where a number must compare: a NaN acceptance gate once
passed any model. One line naming the field, exit 2, before any work; infinity only where a field
gives it a meaning (op.remember_margin=inf: the remembered answer always)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import run_cli
from test_trust import one_error


def test_a_nan_gate_is_refused_in_one_line(tmp_path):
    one_error(run_cli("stage=evaluate", "evaluate.gate_mean_pts=nan", f"evaluate.model_dir={tmp_path / 'none'}",
                      f"hydra.run.dir={tmp_path / 'r'}"), "evaluate.gate_mean_pts=nan", "give a finite number")


@pytest.mark.parametrize("node,field", [
    ({"evaluate": {"gate_max_loss_pts": float("-inf"), "gate_p10_pts": 2.0}}, "evaluate.gate_max_loss_pts=-inf"),
    ({"arch": {"name": "gfx942", "hbm_bandwidth_gbps": float("nan")}}, "arch.hbm_bandwidth_gbps=nan"),
    ({"sweep": {"budget": float("inf")}}, "sweep.budget=inf"),
    ({"op": {"remember_margin": float("nan")}}, "op.remember_margin=nan"),
    ({"problems": {"sources": [{"max_gflop": float("nan")}]}}, "problems.sources[0].max_gflop=nan"),
])
def test_every_number_of_the_config_is_finite(node, field):
    """Whatever the section (arch, sweep, op, a list of sources): NaN and infinity are refused."""
    from ckheur.errors import UserError
    from ckheur.stages import check_numbers

    with pytest.raises(UserError) as e:
        check_numbers(OmegaConf.create(node))
    assert str(e.value).startswith(f"{field}: give a finite number"), str(e.value)


def test_infinity_where_it_has_a_meaning_and_the_gate_api():
    from ckheur.errors import UserError
    from ckheur.evaluation.scoring import Scored, acceptance_gate
    from ckheur.stages import check_numbers

    check_numbers(OmegaConf.create({"op": {"remember_margin": float("inf")}, "evaluate": {"gate_mean_pts": 0.5}}))
    with pytest.raises(UserError, match=r"evaluate.gate_mean_pts=nan: give a finite number"):
        acceptance_gate(Scored.__new__(Scored), Scored.__new__(Scored), mean_pts=float("nan"))
