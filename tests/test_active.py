"""Active sweeps: budgets, rounds, determinism, resume after SIGKILL, acquisition."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ckheur.data.dataset import read_dataset
from ckheur.errors import UserError
from ckheur.problems import CONV_FIELDS
from conftest import ROOT, run_cli

GEN = "problems.sources=[{kind: generate, seed: 3, count: 30, ndim: 2}]"
SMALL = ["op=fwd", "op.ndims=[2]", "kernels.filter=tile_m == 64 and pipeline != 'compv5'", GEN,
         "problems.name=gen30", "sweep.progress=none", "sweep.active.ensemble=3", "sweep.active.trees=30"]


def _active(tmp_path: Path, name: str, *extra: str, cli: bool = False) -> tuple[dict, Path]:
    """Run an active sweep into tmp_path/name; (summary, dataset folder)."""
    from ckheur.stages import run_overrides

    out = tmp_path / name
    args = [*SMALL, "stage=sweep", "sweep.strategy=active", f"sweep.output={out / 'data'}", *extra]
    if cli:
        r = run_cli(*args, f"hydra.run.dir={out / 'run'}")
        assert r.returncode == 0, r.stderr
        return json.loads((out / "run" / "sweep_summary.json").read_text()), out / "data"
    return run_overrides(args, out / "run", quiet=True), out / "data"


def _pairs(ds: Path) -> list[tuple]:
    df = read_dataset(ds, dedupe=False)
    return sorted(df[[*CONV_FIELDS, "kernel"]].itertuples(index=False, name=None))


def test_budget_never_exceeded_and_rounds_recorded(tmp_path):
    # 30 problems x 6 kernels = 180 pairs; a budget of 62 pairs is not a multiple of 6.
    s, ds = _active(tmp_path, "a", "sweep.budget=62", "sweep.active.first_round=0.5", "sweep.active.all_kernels_max=64",
                    cli=True)
    pairs = _pairs(ds)
    assert s["budget_pairs"] == 62 and s["pairs_spent"] == len(pairs) == 60  # 10 whole problems fit
    assert len(set(pairs)) == len(pairs)
    assert s["rounds"][0]["acquisition"] == "farthest point" and s["rounds"][1]["acquisition"] == "combined"
    assert sum(r["pairs"] for r in s["rounds"]) == 60
    assert s["learning_curve"] and all(0 < c["oob_mean"] <= 1 for c in s["learning_curve"])
    assert (tmp_path / "a" / "run" / "active_sweep.png").stat().st_size > 1000
    # A fraction of the pairs; the default times a few kernels per problem (top 2 + 1 at random here).
    s, ds = _active(tmp_path, "b", "sweep.budget=0.2", "sweep.active.top=2", "sweep.active.explore=1")
    df = read_dataset(ds)
    assert s["budget_pairs"] == 36 and len(df) == 36 and df.groupby(list(CONV_FIELDS)).size().eq(3).all()


def test_deepening_after_every_problem_is_measured(tmp_path):
    # 30 problems x 3 kernels = 90 pairs cover the set; the rest of 126 goes to expected improvement.
    s, ds = _active(tmp_path, "a", "sweep.budget=0.7", "sweep.active.top=2", "sweep.active.explore=1")
    pairs = _pairs(ds)
    assert len(pairs) == len(set(pairs)) == s["pairs_spent"] and 90 < len(pairs) <= 126
    deep = [r for r in s["rounds"] if r["acquisition"] == "expected improvement (deepening)"]
    assert deep and all(p["expected_improvement"] > 0 for r in deep for p in r["problems"])
    assert sum(r["pairs"] for r in deep) == len(pairs) - 90


def test_deterministic_for_a_seed(tmp_path):
    a = _active(tmp_path, "a", "sweep.budget=0.3")
    b = _active(tmp_path, "b", "sweep.budget=0.3")
    c = _active(tmp_path, "c", "sweep.budget=0.3", "sweep.active.seed=7")
    assert _pairs(a[1]) == _pairs(b[1])
    assert [r["problems"] for r in a[0]["rounds"]] == [r["problems"] for r in b[0]["rounds"]]
    assert _pairs(c[1]) != _pairs(a[1])


def test_full_budget_measures_what_strategy_full_does(tmp_path):
    from ckheur.stages import run_overrides

    _, active = _active(tmp_path, "a", "sweep.budget=1.0", "sweep.active.all_kernels_max=64")
    full = tmp_path / "full"
    s = run_overrides([*SMALL, "stage=sweep", f"sweep.output={full}"], tmp_path / "full_run", quiet=True)
    assert s["strategy"] == "full" and s["attempts"] == 180
    ok = read_dataset(full)
    ok = ok[ok.status != "unsupported"]
    assert sorted(ok[[*CONV_FIELDS, "kernel"]].itertuples(index=False, name=None)) == _pairs(active)


def test_strategy_errors_are_clear(tmp_path, capsys):
    """Each error once through the command line where it is the stage's (one line, exit 2); the
    others where they are raised: the config's composition, the options' check, the config's numbers."""
    from ckheur.stages import check_numbers, compose_config, run_overrides
    from ckheur.sweeping.rounds import RoundOptions, SweepError, budget_pairs

    r = run_cli(*SMALL, "stage=sweep", "sweep.strategy=active", f"sweep.output={tmp_path}/d")
    assert r.returncode == 2 and "sweep.budget is required" in r.stderr and "Traceback" not in r.stderr
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:  # the stage as the command line runs it, without Hydra's run
        run_overrides([*SMALL, "stage=sweep", "sweep.budget=0.5", f"sweep.output={tmp_path}/d"], tmp_path / "r2")
    err = capsys.readouterr().err
    assert e.value.code == 2 and "sweep.strategy=active, random or stratified" in err and len(err.splitlines()) == 1
    with pytest.raises(SystemExit) as e:  # a ranker, too, is not silently ignored by the full sweep
        run_overrides([*SMALL, "stage=sweep", "sweep.active.ranker=served", f"sweep.output={tmp_path}/d"],
                      tmp_path / "r3")
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: sweep.active.ranker applies to sweep.strategy=active")
    with pytest.raises(Exception) as e:  # the schema's enum: a config error, one line on the command line
        compose_config([*SMALL, "stage=sweep", "sweep.strategy=clever", "sweep.budget=0.5"])
    text = str(e.value) + str(e.value.__cause__)
    assert "sweep.strategy" in text and "stratified" in text
    with pytest.raises(SweepError, match=r"sweep.active.first_round=0.0: must be in \(0, 1\]"):
        RoundOptions(strategy="active", budget=0.5, first_round=0.0).check()  # what the stage checks first
    r = run_cli(*SMALL, "stage=sweep", "sweep.strategy=active", "sweep.budget=0.5", "sweep.active.ensemble_model=big",
                f"sweep.output={tmp_path}/d")
    assert r.returncode == 2 and "sweep.active.ensemble_model='big': allowed values are lambdarank" in r.stderr
    # Non-finite budgets: the config's numbers checked (what the stage does first), then the budget's own check.
    for budget in ("inf", "-inf", "nan"):
        with pytest.raises(UserError, match=rf"sweep\.budget={budget}: give a finite number"):
            check_numbers(compose_config([*SMALL, "stage=sweep", "sweep.strategy=active", f"sweep.budget={budget}"]))
        with pytest.raises(SweepError, match=rf"sweep\.budget={budget}: must be a finite number"):
            budget_pairs(float(budget), 100)
    # A record of rounds that is JSON but not the shape the sweep writes: one line, nothing measured
    # (the stage once; each shape through the record's reader).
    from ckheur.sweeping.rounds import load_state

    out = tmp_path / "rec"
    out.mkdir()
    (out / "active_sweep.json").write_text("[]")
    r = run_cli(*SMALL, "stage=sweep", "sweep.strategy=active", "sweep.budget=0.5", f"sweep.output={out}")
    assert r.returncode == 2 and "is not an active-sweep record" in r.stderr and "Traceback" not in r.stderr
    assert not list(out.glob("part-*"))
    for bad in ("[]", '{"rounds": 5}', '{"rounds": [{"pairs": [7]}]}', '{"rounds": [{"pairs": [[1, 2]]}]}',
                '{"rounds": [], "final": []}', '"rounds"'):
        (out / "active_sweep.json").write_text(bad)
        with pytest.raises(SweepError, match="is not an active-sweep record"):
            load_state(out)


def test_min_gain_stops_early(tmp_path):
    s, ds = _active(tmp_path, "a", "sweep.budget=1.0", "sweep.min_gain=0.5")
    assert "sweep.min_gain" in s["stopped"] and s["pairs_spent"] < 180
    assert len(_pairs(ds)) == s["pairs_spent"]


def test_random_and_stratified_baselines(tmp_path):
    r, _ = _active(tmp_path, "r", "sweep.strategy=random", "sweep.budget=0.3")
    t, _ = _active(tmp_path, "t", "sweep.strategy=stratified", "sweep.budget=0.3")
    assert r["pairs_spent"] == t["pairs_spent"] == 54
    assert r["rounds"][0]["acquisition"] == "random" and t["rounds"][0]["acquisition"] == "stratified"
    assert [p["problem"] for x in r["rounds"] for p in x["problems"]] != \
        [p["problem"] for x in t["rounds"] for p in x["problems"]]


def test_sigkill_mid_round_resumes_without_measuring_twice(tmp_path):
    """A slow command backend is killed after the first model-chosen round started; the rerun
    finishes that round's plan and goes on: no pair measured twice, and the same pairs as a run
    that was never killed."""
    bench = ROOT / "tests" / "data" / "fake_bench.py"
    base = [*SMALL, "stage=sweep", "sweep.strategy=active", "sweep.budget=72",
            "sweep.active.first_round=0.5", "sweep.active.round_size=0.25", "backend=command",
            f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}} 0.01",
            "backend.regex='Elapsed: ([0-9.]+) us'", "backend.time_unit=us", "backend.batch_pairs=3"]
    ds = tmp_path / "killed"
    args = [*base, f"sweep.output={ds}"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path}/a"], cwd=ROOT,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 600  # a hang guard: the loop ends when the parts appear
    # Round 0 is 36 pairs (12 parts of 3); kill once round 1 has started measuring.
    while time.time() < deadline and len(list(ds.glob("part-*.parquet"))) < 13:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    state = json.loads((ds / "active_sweep.json").read_text())
    saved = _pairs(ds)
    assert len(state["rounds"]) == 2 and 36 < len(saved) < 72
    r = run_cli(*args, f"hydra.run.dir={tmp_path}/b")  # the resume through the command line, in this process
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "b" / "sweep_summary.json").read_text())
    pairs = _pairs(ds)
    assert len(pairs) == len(set(pairs)) == 72 and s["pairs_measured"] == 72 - len(saved)
    from ckheur.stages import run_overrides

    run_overrides([*base, f"sweep.output={tmp_path / 'whole'}"], tmp_path / "c", quiet=True)  # the stage alone
    assert _pairs(tmp_path / "whole") == pairs


def test_acquisition_prefers_shapes_far_from_measured_ones():
    from ckheur.sweeping.acquisition import Uncertainty, choose_batch, farthest_points

    rng = np.random.default_rng(0)
    measured = rng.normal(0, 0.1, (20, 3))
    near = rng.normal(0, 0.3, (10, 3))
    far = np.array([[4.0, 0.0, 0.0], [0.0, -4.0, 0.0]])
    Z = np.vstack([near, far])
    costs = np.ones(len(Z), dtype=int)
    flat = Uncertainty(np.zeros(len(Z), dtype=int), np.full(len(Z), 0.01), np.zeros(len(Z)))
    for kind in ("distance", "combined"):
        picks, why = choose_batch(kind, flat, Z, measured, costs, 2)
        assert sorted(picks) == [10, 11], kind  # both far shapes, before any near one
        assert why[0]["distance"] > 5
    # Regret alone follows the model, not the distance; combined weighs both.
    unsure = Uncertainty(flat.pick, np.r_[np.full(10, 0.01), 0.0, 0.0], flat.disagreement)
    unsure.regret[3] = 0.2
    assert choose_batch("regret", unsure, Z, measured, costs, 1)[0] == [3]
    assert choose_batch("combined", unsure, Z, measured, costs, 1)[0] == [3]
    # Farthest-point sampling: the second far shape comes before any near one.
    assert sorted(farthest_points(Z, 2, measured, seed=0)) == [10, 11]


def test_uncertainty_of_an_ensemble():
    from ckheur.sweeping.acquisition import uncertainty

    # two problems, three kernels each; members agree on problem 0, split on problem 1
    S = np.array([[0.9, 0.5, 0.1, 0.9, 0.8, 0.1],
                  [0.8, 0.4, 0.2, 0.7, 0.9, 0.1],
                  [0.9, 0.6, 0.1, 0.6, 0.9, 0.2]])
    u = uncertainty(S, np.array([0, 0, 0, 1, 1, 1]), 2)
    assert u.pick.tolist() == [0, 4]  # consensus: mean scores 0.867 vs 0.733 / 0.867
    assert u.disagreement.tolist() == pytest.approx([0.0, 1 / 3])
    assert u.regret.tolist() == pytest.approx([0.0, (0.1 + 0 + 0) / 3])


def test_pair_features_per_problem_equals_the_grid():
    from ckheur.config import load_option
    from ckheur.families.engines import get_engine, pair_features
    from ckheur.kernels import enumerate_pool
    from ckheur.families import get_family
    from ckheur.problems import load_named_set

    arch = load_option("arch/gfx950")
    op = {**load_option("op/grouped_conv/fwd"), "ndims": [2]}
    pool = enumerate_pool(op, arch).kernels
    probs = [p for p in load_named_set("smoke", get_family("grouped_conv")) if p.ndim == 2][:8]
    eng = get_engine("grouped_conv")
    rng = np.random.default_rng(1)
    pid, kid = rng.integers(0, len(probs), 60), rng.integers(0, len(pool), 60)
    grid = pair_features(eng, probs, pool, pid, kid, arch, "fwd")
    one_by_one = pair_features(eng, probs, pool, pid, kid, arch, "fwd", max_grid_rows=0)
    assert grid.shape == (60, len(eng.feature_names())) and np.array_equal(grid, one_by_one)


def test_expected_improvement_over_the_best_measured_kernel():
    from ckheur.sweeping.acquisition import expected_improvement

    # one problem, kernel 0 measured best; member 1 thinks kernel 2 beats it by 0.2, member 0 does not
    S = np.array([[0.9, 0.5, 0.8],
                  [0.7, 0.6, 0.9]])
    ei = expected_improvement(S, np.array([0, 0, 0]), np.array([0]))
    assert ei.tolist() == pytest.approx([0.0, 0.0, 0.1])
