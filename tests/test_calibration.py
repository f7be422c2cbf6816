"""The simulator's calibration (ckheur.sim_calibration) and training's leakage guard
(ckheur.learn.fold_calibration), on the real gfx950 forward data."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.stats import spearmanr

from ckheur.config import load_option
from ckheur.integrations.ck.tile_engine_csv import read_ck_csv
from ckheur.families.engines import get_engine
from ckheur.kernels import enumerate_pool
from ckheur.learn.fold_calibration import fold_calibrated, table_calibration_data
from ckheur.learn.prior import prior_spec
from ckheur.learn.training import build_table
from ckheur.families import get_family
from ckheur.sim import load_params, predicted_tflops
from ckheur.sim_calibration import SPACE, calibrate, calibration_data, fit_report, fit_score, neutral_params


@pytest.fixture(scope="module")
def real_table(ck_fwd_csv):
    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    engine = get_engine("grouped_conv")
    pool = enumerate_pool(op, arch).kernels
    return build_table(read_ck_csv(ck_fwd_csv, arch="gfx950"), op, arch, pool, engine, None), engine, arch


def _gapped(data):
    """The calibration data with gaps: every third problem half measured, one problem with two
    measured kernels (no Spearman), one with none (not counted). Equal measured times are set apart
    by 1e-9 of their value: the report ranks ties in kernel order, scipy gives them their mean rank."""
    real = data.real * (1 + 1e-9 * np.arange(data.real.shape[1]))
    real[::3, ::2] = np.nan
    real[1, 2:] = np.nan
    real[4, :] = np.nan
    return dataclasses.replace(data, real=real)


@pytest.mark.filterwarnings("ignore:An input array is constant")  # scipy, on a problem whose times all tie
def test_fit_report_matches_a_per_problem_loop_on_real_data(real_table):
    """Spearman by scipy and the simulator's pick, problem by problem, against the vectorized report
    (which reads the measurements once per search), on the whole real data and with gaps."""
    tb, engine, arch = real_table
    whole = table_calibration_data(tb, engine, arch, "fwd")
    params = load_params()
    # TFLOPS to the unit tie many measurements (all of some problems'), and a kernel twice ties the
    # simulator's times: both ranked as Spearman ranks ties (their mean rank)
    tied = dataclasses.replace(whole, real=np.round(np.concatenate([whole.real, whole.real[:, :1]], axis=1)),
                               kern={k: np.concatenate([v, v[:1]]) for k, v in whole.kern.items()})
    for data, problems, kernels in ((whole, 185, 20), (_gapped(whole), 184, 20), (tied, 185, 21)):
        sim = predicted_tflops(data.prob, data.kern, data.arch, params, data.direction)
        rhos, effs, fixed = [], [], []
        for i in range(len(data.real)):
            ok = ~np.isnan(data.real[i])
            if not ok.any():
                continue
            if ok.sum() >= 3:
                rhos.append(spearmanr(sim[i, ok], data.real[i, ok]).statistic)
            effs.append(data.real[i, ok][np.argmax(sim[i, ok])] / data.real[i, ok].max())
            fixed.append(np.where(ok, data.real[i] / data.real[i, ok].max(), np.nan))
        r = fit_report(params, data)
        assert r["problems"] == problems and r["kernels"] == kernels
        # a problem whose times all tie has no Spearman (scipy: NaN), and no part in the median
        assert r["median_spearman"] == pytest.approx(np.nanmedian(rhos), abs=1e-9)
        assert r["mean_eff_sim_pick"] == pytest.approx(np.mean(effs), abs=1e-12)
        assert r["p10_eff_sim_pick"] == pytest.approx(np.percentile(effs, 10), abs=1e-12)
        # the best single kernel: the highest mean efficiency over the problems that measured it
        assert r["best_fixed_kernel_eff"] == pytest.approx(np.nanmax(np.nanmean(fixed, axis=0)), abs=1e-12)
    # The shipped parameters' published fit (tools/calibrate_sim.py, conf/backend/sim.yaml).
    assert fit_report(params, whole)["median_spearman"] >= 0.8 and fit_report(params, whole)["mean_eff_sim_pick"] >= 0.9


def test_calibration_data_takes_the_median_of_repeats_and_skips_zeros():
    prob = {"flops": np.ones(2)}
    kern = {"x": np.zeros(3)}
    d = calibration_data(prob, kern, np.array([0, 0, 0, 0, 1, 1]), np.array([0, 0, 0, 2, 1, 2]),
                         np.array([3.0, 1.0, 2.0, 5.0, 0.0, 4.0]), {}, "fwd")
    np.testing.assert_array_equal(np.isnan(d.real), [[False, True, False], [True, True, False]])
    assert d.real[0, 0] == 2.0 and d.real[0, 2] == 5.0 and d.real[1, 2] == 4.0
    assert d.subset(np.array([1])).real.shape == (1, 3)


def test_calibration_from_the_neutral_start_improves_and_is_deterministic(real_table):
    tb, engine, arch = real_table
    data = table_calibration_data(tb, engine, arch, "fwd")
    start = neutral_params(load_params())
    for path, lo, hi, lg in SPACE:  # data-free: the middle of every searched range
        v = start
        for k in path:
            v = v[k]
        assert v == pytest.approx(np.sqrt(lo * hi) if lg else (lo + hi) / 2)
    a, ra = calibrate(start, data, 150, seed=3)
    b, rb = calibrate(start, data, 150, seed=3)
    assert a == b and ra == rb
    assert ra == fit_report(a, data)  # the search's report is its result's, measured data read once
    assert fit_score(ra) > fit_score(fit_report(start, data)) + 0.1
    assert a["pipelines"]["compv5"] == a["pipelines"]["compv3"] and a["pipelines"]["comp_async"] == a["pipelines"]["compv4"]


def test_fold_calibration_never_sees_the_held_out_problems(real_table):
    """A fold's simulator features and prior depend on its training problems only: changing the
    held-out problems' measurements changes nothing; changing a training problem's does."""
    tb, engine, arch = real_table
    prior = prior_spec({"prior": "analytic", "prior_scale": 0.5}, get_family("grouped_conv"), load_params())
    rng = np.random.default_rng(0)
    held_out = np.isin(tb.pid, rng.choice(len(tb.problems), 40, replace=False))
    train_rows = np.flatnonzero(~held_out)

    def fold_table(table):
        return fold_calibrated(table, engine, arch, "fwd", load_params(), True, prior, "relative", 60, seed=1)(
            0, train_rows)

    base = fold_table(tb)
    assert base.report["sim_calibration"]["problems"] == len(tb.problems) - 40
    shuffled = tb.tflops.copy()
    shuffled[held_out] = rng.permutation(shuffled[held_out])
    other = fold_table(dataclasses.replace(tb, tflops=shuffled))
    np.testing.assert_array_equal(other.X, base.X)
    np.testing.assert_array_equal(other.prior, base.prior)
    changed = tb.tflops.copy()
    changed[train_rows] = rng.permutation(changed[train_rows])
    assert not np.array_equal(fold_table(dataclasses.replace(tb, tflops=changed)).prior, base.prior)
    # The analytic features (the last two columns) come from the fold's parameters, not the shipped ones.
    assert base.X.shape[1] == tb.X.shape[1] + 2 and base.prior.min() > 0 and base.prior.max() <= 0.5 + 1e-12


def test_train_recalibrates_per_fold_on_the_calibration_data_and_can_choose_the_prior(tmp_path, ck_fwd_csv):
    """On the data the simulator was calibrated on (found by content, also through an imported
    dataset's record), prior candidates are either CV'd with per-fold calibration (the default:
    honest, choosable) or, with train.sim_calibration=shipped, marked leaky and never chosen."""
    import json

    from conftest import import_as_stage, run_cli

    common = ["stage=train", "op=fwd", "arch=gfx950", "model.max_trees=40", "train.folds=3", "train.cluster_cv=false",
              "train.seeds=1", "train.compare=[relative]", "train.calibration_iterations=30"]
    r = run_cli(*common, f"data.paths=[{ck_fwd_csv}]", f"train.output={tmp_path / 'fold'}",
                f"hydra.run.dir={tmp_path / 'r1'}")
    assert r.returncode == 0, r.stderr
    assert "recalibrates it on its training problems (30 steps" in r.stdout
    cands = json.loads((tmp_path / "fold" / "cv_metrics.json").read_text())["candidates"]
    with_prior = next(c for c in cands if c["prior"])
    assert with_prior["fold_calibrated"] and not with_prior["leaky"]
    assert not next(c for c in cands if not c["prior"])["fold_calibrated"]
    r = run_cli(*common, "train.calibration_iterations=0", f"data.paths=[{ck_fwd_csv}]",
                f"train.output={tmp_path / 'zero'}", f"hydra.run.dir={tmp_path / 'r0'}")
    assert r.returncode == 2 and "train.calibration_iterations=0: must be at least 1" in r.stderr
    r = run_cli(*common, "model.prior=analytic", "train.screen=true", f"data.paths=[{ck_fwd_csv}]",
                f"train.output={tmp_path / 'screen'}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 2 and "train.screen=true: a model with an analytic prior" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "screen").exists()

    import_as_stage(ck_fwd_csv, tmp_path / "data")
    (dataset,) = [p for p in (tmp_path / "data").glob("*/*") if p.is_dir()]
    r = run_cli(*common, f"data.paths=[{dataset}]", "train.sim_calibration=shipped",
                f"train.output={tmp_path / 'shipped'}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0, r.stderr
    assert "not selectable" in r.stdout and "recalibrates it" not in r.stdout
    m = json.loads((tmp_path / "shipped" / "cv_metrics.json").read_text())
    assert next(c for c in m["candidates"] if c["prior"])["leaky"]
    assert m["chosen"]["prior"] is None


def test_calibration_problems_are_found_by_content_for_their_op_only(ck_fwd_csv):
    """The problems the simulator was fitted on are recognized in any data (not only the file by
    its hash), for the op, dtype and arch they were measured on, while sim.yaml records that file."""
    from ckheur.config import load_option
    from ckheur.measurements import CK_GFX950_FWD_SHA256
    from ckheur.learn.fold_calibration import calibration_overlap
    from ckheur.families.grouped_conv.problems import problem_from_dict
    from ckheur.families import get_family
    from ckheur.problems.sources import read_csv

    real = list({p.key(): p for p in read_csv(ck_fwd_csv, get_family("grouped_conv"))}.values())
    other = problem_from_dict({"N": 3, "C": 24, "K": 40, "Hi": 17, "Wi": 19, "Y": 3, "X": 3})
    fwd, arch, sha = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950"), [CK_GFX950_FWD_SHA256]
    assert len(real) == 185 and calibration_overlap(real[:40] + [other], fwd, arch, sha) == 40
    assert calibration_overlap(real, {**fwd, "direction": "bwd_data"}, arch, sha) == 0
    assert calibration_overlap(real, {**fwd, "dtype": "fp16"}, arch, sha) == 0
    assert calibration_overlap(real, fwd, load_option("arch/gfx942"), sha) == 0
    assert calibration_overlap(real, fwd, arch, ["0" * 64]) == 0  # parameters fitted on other data


def test_train_guards_a_subset_of_the_calibration_data(tmp_path, ck_fwd_csv):
    """A file holding part of the calibration measurements (another name, another sha256) gets the
    leakage guard, and the message says how many of its problems the simulator was fitted on."""
    import re

    from conftest import run_cli

    lines = ck_fwd_csv.read_text().splitlines()
    subset = tmp_path / "my_sweep.csv"
    subset.write_text("\n".join(lines[:1 + 1600]) + "\n")  # the first 80 problems x 20 kernels
    r = run_cli("stage=train", "op=fwd", "arch=gfx950", f"data.paths=[{subset}]", "model.max_trees=20",
                "train.folds=3", "train.cluster_cv=false", "train.calibration_iterations=20",
                f"train.output={tmp_path / 'm'}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    got = re.search(r"calibrated on this data \((\d+) of its (\d+) problems\)", r.stdout)
    assert got and got.group(1) == got.group(2) and int(got.group(1)) >= 70, r.stdout


def test_simulator_parameters_are_read_once_per_file_content(tmp_path):
    """load_params keeps what it read (a selector, an export and a job each ask): each caller gets its
    own copy, equal to OmegaConf's reading of the file; a changed file is read anew."""
    from omegaconf import OmegaConf

    from ckheur.config import CONF_DIR

    shipped = CONF_DIR / "backend" / "sim.yaml"
    expected = OmegaConf.to_container(OmegaConf.load(shipped)["params"], resolve=True)
    first = load_params()
    assert first == expected
    first["pipelines"]["compv3"]["mfma_eff"] = -1.0  # a caller's change stays its own
    assert load_params() == expected
    copy = tmp_path / "sim.yaml"
    copy.write_text(shipped.read_text())
    assert load_params(copy) == expected
    copy.write_text(shipped.read_text().replace("launch_us:", "launch_us: 123.0 #", 1))
    assert load_params(copy) == {**expected, "launch_us": 123.0}
    assert load_params() == expected
