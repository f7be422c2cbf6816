"""Remembered answers that do not cost time: a bundle's remembered solver (train.remember) stays
first unless its model predicts its own pick faster by more than the measurement noise
(op.remember_margin, default ckheur.learn.bundle.REMEMBERED_NOISE)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ckheur.errors import UserError
from ckheur.learn.bundle import REMEMBERED_NOISE, checked_margin, remembered_kept
from ckheur.selection.selector import Selector
from conftest import ROOT, run_cli

BUNDLE = ROOT / "models" / "miopen_bwd_weight_fp16_gfx942"  # a shipped bundle that remembers its file


def test_the_rule_keeps_an_answer_unless_the_model_predicts_a_gain_beyond_the_margin():
    """Relative scores (predicted fractions of the best): kept while the model's best is at most
    (1 + margin) times the remembered one's; both at the 1e-3 floor compare equal. log1p-TFLOPS
    scores compare by difference; lambdarank scores have no scale: always kept."""
    top = np.array([1.0, 1.0, 1.0, 0.5, 0.001])
    rem = np.array([1.0, 0.98, 0.9, -0.2, -0.5])
    assert remembered_kept(top, rem, "relative", 0.03).tolist() == [True, True, False, False, True]
    assert remembered_kept(top, rem, "relative", 0.0).tolist() == [True, False, False, False, True]
    assert remembered_kept(top, rem, "relative", math.inf).all()
    tops, rems = np.log1p([11.0, 11.0]), np.log1p([10.8, 10.0])  # predicted TFLOPS: +1.9%, +10%
    assert remembered_kept(tops, rems, "regression_log", 0.03).tolist() == [True, False]
    assert remembered_kept(tops, rems, "lambdarank", 0.0).all()


@pytest.mark.parametrize("bad", [-0.1, float("nan"), "fast", True, None])
def test_a_margin_must_be_a_fraction_of_at_least_zero(bad):
    with pytest.raises(UserError, match=r"op.remember_margin=.*give a fraction >= 0"):
        checked_margin(bad)
    assert checked_margin("0.25") == 0.25 and checked_margin(math.inf) == math.inf


def _disagreements(within: int, beyond: int) -> list:
    """Problems the shipped bundle remembers whose model (without its answers) ranks another solver
    first, in key order until ``within`` of them have a predicted gain within the default margin and
    ``beyond`` beyond it: [(problem, remembered solver, model's pick, predicted gain)]."""
    from ckheur.families.miopen.problems import problem_from_dict

    model = Selector.load(BUNDLE)
    answers, model.answers = model.answers, {}
    fields = model.family.problems.FIELDS
    out, counts = [], [0, 0]
    for key in sorted(answers, key=str):
        p = problem_from_dict(dict(zip(fields, key)))
        kernels, scores, _ = model.scores(p)
        names = [k.name for k in kernels]
        top = int(np.argmax(scores))
        if names[top] != answers[key] and answers[key] in names:
            gain = max(scores[top], 1e-3) / max(scores[names.index(answers[key])], 1e-3) - 1
            out.append((p, answers[key], names[top], gain))
            counts[int(gain > REMEMBERED_NOISE)] += 1
            if counts[0] >= within and counts[1] >= beyond:
                return out
    raise AssertionError(f"only {counts} disagreements within / beyond the margin in {BUNDLE.name}")


@pytest.fixture(scope="module")
def disagreements() -> list:
    """``_disagreements(within=3, beyond=3)``, found once for the tests that read it."""
    return _disagreements(within=3, beyond=3)


def test_a_bundle_overrides_its_remembered_answer_only_beyond_the_margin(disagreements):
    """On the problems the shipped bundle remembers where its model picks otherwise: margin inf is the
    lookup (tier training_data), 0 the model alone (tier model), and the default keeps the answer
    exactly where the model's predicted gain is within the noise."""
    found = disagreements
    always, model_alone, default = (Selector.load(BUNDLE, remember_margin=m) for m in (math.inf, 0.0, None))
    assert default.remember_margin == REMEMBERED_NOISE
    for p, remembered, pick, gain in found:
        assert (always.select(p).kernel, always.select(p).source) == (remembered, "training_data")
        assert (model_alone.select(p).kernel, model_alone.select(p).source) == (pick, "model")
        got = default.select(p)
        assert (got.kernel, got.source) == ((remembered, "training_data") if gain <= REMEMBERED_NOISE
                                            else (pick, "model")), (p.describe(), gain)
        assert default.rank(p, k=1)[0].kernel == got.kernel


def test_the_margin_is_a_config_key_that_reaches_a_shipped_bundle(tmp_path, disagreements):
    """op.remember_margin on the command line: a remembered problem the model would answer
    otherwise gets the model's pick at 0 and the remembered one at inf; a negative margin is
    refused with one line naming the key (exit 2)."""
    from ckheur.families.driver_line import DIRECTION_FLAG
    from ckheur.families.miopen.problems import to_driver_line

    p, remembered, pick, _ = next(f for f in disagreements if f[3] > 0)  # the model predicts its pick faster
    line = f"{to_driver_line(p, 'fp16')} -F {DIRECTION_FLAG['bwd_weight']}"
    for margin, want in (("0", f"selected: {pick} (tier: model"),
                         ("inf", f"selected: {remembered} (tier: training_data")):
        r = run_cli("stage=predict", "op=miopen/bwd_weight", "op.dtype=fp16", "arch=gfx942", f"problem={line}",
                    f"op.remember_margin={margin}", f"hydra.run.dir={tmp_path / margin}")
        assert r.returncode == 0, r.stderr
        assert want in r.stdout, r.stdout
    r = run_cli("stage=predict", "op=miopen/bwd_weight", "op.dtype=fp16", "arch=gfx942", f"problem={line}",
                "op.remember_margin=-0.5", f"hydra.run.dir={tmp_path / 'bad'}")
    assert r.returncode == 2 and "op.remember_margin=-0.5" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_compiled_selector_serves_only_the_bundles_margin():
    """The C package holds the bundle's margin: asked for another, the selector warns and ranks in Python."""
    with pytest.warns(UserWarning, match=r"remember_margin=0.5: the compiled selector uses the bundle's \(0.03\)"):
        sel = Selector.load(BUNDLE, compiled=True, remember_margin=0.5)
    assert sel.compiled is None and sel.remember_margin == 0.5
