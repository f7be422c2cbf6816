"""Screens (ckheur.selection.screening): a shipped MIOpen bundle given a screen ranks as its
definition says (the first trees for every candidate, the whole model for their best and the
remembered answer), the compiled C computes the same scores to the bit, and the chooser's
agreement is the one the selectors show."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from ckheur.c_export.compiled import find_compiler, load_compiled
from ckheur.families import get_family
from ckheur.families.problem_base import ProblemError
from ckheur.learn.bundle import SCREEN_OFFSET, BundleError, load_bundle, write_json
from ckheur.selection.screening import choose_screen, screen_table
from ckheur.selection.selector import Selector
from conftest import ROOT, cut_forest

BUNDLE = ROOT / "models" / "miopen_fwd_fp16_gfx942"  # 400 trees, 12 solvers, remembered answers
TREES, TOP = 60, 2  # a small screen, so that many problems are screened and some answers are forced in


def _screened(folder, trees=TREES, top=TOP):
    """A copy of the bundle with a screen written into its spec."""
    shutil.copytree(BUNDLE, folder)
    spec = load_bundle(folder).spec
    write_json(folder / "feature_spec.json", {**spec, "screen": {"trees": trees, "top": top}})
    return folder


@pytest.fixture(scope="module")
def screened(tmp_path_factory):
    """The screened copy, its forest cut to twice the screen's trees (the screen's first trees are the
    shipped model's; the rest still make the whole model differ from them)."""
    folder = _screened(tmp_path_factory.mktemp("screen") / "bundle")
    cut_forest(folder, 2 * TREES)
    return folder


@pytest.fixture(scope="module")
def problems():
    """Real problems of the test find-db slice (the bundle remembers answers for them) and generated ones."""
    fdb = next((ROOT / "tests" / "data" / "miopen_fdb").glob("gfx942*"))
    family = get_family("miopen")
    keys = list(Selector.load(BUNDLE, find_db=fdb).find_db.best)
    real = [family.problems.problem_from_dict(dict(zip(family.problems.FIELDS, k))) for k in keys]
    return real, family.problems.generate_varied(7, 300) + family.problems.generate(8, 300)


def test_screen_ranks_first_trees_then_the_whole_model_for_the_best(screened, problems):
    sel = Selector.load(screened, cache_size=0)
    whole = Selector.load(screened, cache_size=0, screen=False)
    assert sel.screen == (TREES, TOP) and whole.screen is None
    booster = sel.booster
    real, generated = problems
    screened_problems = forced = 0
    for p in real + generated:
        try:
            pool = sel._candidates(p)
        except ProblemError:
            continue
        X = sel._rows(p, pool)[0]
        first = booster.predict(X, num_iteration=TREES)
        every = booster.predict(X)
        at = sel._remembered_at(p, pool.kernels)
        scores, estimate, scored = sel._tree_scores(X, at)
        if len(X) <= TOP:
            np.testing.assert_array_equal(scores, every)
            assert scored is None
            continue
        screened_problems += 1
        full = np.zeros(len(X), dtype=bool)
        full[np.argsort(-first, kind="stable")[:TOP]] = True
        forced += at is not None and not full[at]
        if at is not None:
            full[at] = True
        np.testing.assert_array_equal(scored, full)
        np.testing.assert_allclose(scores[full], every[full], rtol=1e-12)  # first + other trees, not one sum
        np.testing.assert_array_equal(scores[~full], first[~full] - SCREEN_OFFSET)
        np.testing.assert_array_equal(estimate[~full], first[~full])
        # Ranked: the whole model's order over those it scored, then the first trees' order.
        names = [k.name for k in pool.kernels]
        order = [r.kernel for r in sel.rank(p)]
        m = int(full.sum())
        assert set(order[:m]) == {names[i] for i in np.flatnonzero(full)}
        rest = [names[i] for i in sorted(np.flatnonzero(~full), key=lambda i: (-first[i], i))]
        assert order[m:] == rest
        if at is None:  # nothing raised: the whole model's own order among them
            assert order[:m] == [r.kernel for r in whole.rank(p) if r.kernel in set(order[:m])]
    assert screened_problems > 300 and forced >= 1


@pytest.mark.skipif(find_compiler() is None, reason="no C compiler")
def test_compiled_screen_equals_python_to_the_bit(screened, problems, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckheur_cache"))
    py = Selector.load(screened, cache_size=0)
    compiled = load_compiled(screened)
    assert compiled is not None and compiled.info["screen"] == [TREES, TOP]
    unscreened = load_compiled(screened, screen=False)
    assert unscreened.info["screen"] is None
    real, generated = problems
    ranked = 0
    for p in real + generated:
        try:
            kernels, scores, tflops = py._score(p)
        except ProblemError:
            with pytest.raises(ProblemError):
                compiled.predict(p)
            continue
        idx, c_scores, c_tflops = compiled.predict(p)
        assert [py._all_kernels[i].name for i in idx] == [k.name for k in kernels]
        np.testing.assert_array_equal(c_scores, scores, err_msg=p.describe())
        np.testing.assert_allclose(c_tflops, tflops, rtol=1e-12, err_msg=p.describe())
        ranked += 1
    assert ranked > 500


def test_chooser_agreement_is_what_the_selectors_show(tmp_path, problems):
    whole = Selector.load(BUNDLE, cache_size=0, screen=False)
    _, generated = problems
    table, n = screen_table(whole, generated, trees=(50, 100), tops=(2, 3))
    assert n > 400 and [(r.trees, r.top) for r in table] == [(50, 2), (50, 3), (100, 2), (100, 3)]
    choice = choose_screen(whole, {"generated": generated}, {"generated": 0.9}, trees=(50, 100), tops=(2, 3))
    assert choice is not None and choice.rows["generated"].agreement >= 0.9
    cheaper = [r for r in table if r.agreement >= 0.9 and r.cost < choice.rows["generated"].cost]
    assert not cheaper
    # The chooser's figure is the share of problems whose top-1 the screened selector keeps.
    sel = Selector.load(_screened(tmp_path / "b", choice.trees, choice.top), cache_size=0)
    same = total = 0
    for p in generated:
        try:
            top1 = whole.rank(p, 1)[0].kernel
        except ProblemError:
            continue
        same += sel.rank(p, 1)[0].kernel == top1
        total += 1
    assert total == n and abs(same / n - choice.rows["generated"].agreement) <= 1 / n
    assert choose_screen(whole, {"generated": generated}, {"generated": 1.0}, trees=(50,), tops=(2,)) is None


def test_a_screen_the_model_cannot_serve_is_refused(tmp_path):
    folder = _screened(tmp_path / "b", trees=400)  # the model has 400 trees
    with pytest.raises(BundleError, match="screen.trees=400"):
        load_bundle(folder)
    spec = load_bundle(BUNDLE).spec
    write_json(folder / "feature_spec.json", {**spec, "screen": {"trees": 10, "top": 0}})
    with pytest.raises(BundleError, match="screen must be null or an object with integers trees >= 1 and top >= 1"):
        load_bundle(folder)
