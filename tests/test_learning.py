"""Features, metrics, CV, bundles, warm start, Selector, and the train/evaluate/predict stages."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest

from ckheur.families.engines import get_engine
from ckheur.kernels import enumerate_pool, parse_name
from ckheur.metrics import pick_efficiency, selection_report, summarize
from ckheur.families import get_family
from ckheur.problems import ConvProblem, load_named_set
from ckheur.stages import plain
from conftest import ROOT, cut_forest, run_cli

SHIPPED = ROOT / "models" / "grouped_conv_fwd_bf16_gfx950"
ENGINE = get_engine("grouped_conv")


@pytest.fixture(scope="module")
def _fwd_config():
    from ckheur.stages import compose_config

    cfg = compose_config(["op=fwd", "arch=gfx950"])
    return plain(cfg.op), plain(cfg.arch)


@pytest.fixture
def fwd(_fwd_config):
    """The op and arch configs, composed once per module; each test gets its own copy."""
    import copy

    return copy.deepcopy(_fwd_config)


# ---------------------------------------------------------------- features
@pytest.mark.parametrize("analytic", [False, True])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_single_and_batch_features_agree_exactly(fwd, direction, analytic):
    from ckheur.sim import load_params

    op, arch = fwd
    kernels = enumerate_pool(op, arch).by_group()[2]
    probs = [p for p in load_named_set("smoke", get_family("grouped_conv")) if p.ndim == 2]
    params = {**load_params(), "dtype": "bf16"} if analytic else None
    kern = ENGINE.kernel_arrays(kernels)
    batch = ENGINE.features(ENGINE.problem_arrays(probs, direction), kern, arch, direction, params)
    assert batch.shape == (len(probs) * len(kernels), len(ENGINE.feature_names(analytic)))
    kept = ENGINE.kernel_columns(kern, arch)  # what a selector keeps per pool
    for i, p in enumerate(probs):
        single = ENGINE.features(ENGINE.problem_arrays([p], direction), kern, arch, direction, params)
        assert np.array_equal(single, batch[i * len(kernels):(i + 1) * len(kernels)])
        assert np.array_equal(ENGINE.features(ENGINE.problem_arrays([p], direction), kern, arch, direction, params,
                                              kernel_cols=kept), single)
    assert np.isfinite(batch).all()


def test_features_of_parsed_and_enumerated_kernels_are_equal(fwd, ck_fwd_csv):
    import csv

    op, arch = fwd
    enumerated = {k.name: k for k in enumerate_pool(op, arch).kernels}
    with open(ck_fwd_csv) as f:
        names = sorted({r["kernel"] for r in csv.DictReader(f)})
    parsed = [parse_name(n, op) for n in names]
    probs = load_named_set("smoke", get_family("grouped_conv"))[:5]
    prob = ENGINE.problem_arrays(probs, "fwd")
    a = ENGINE.features(prob, ENGINE.kernel_arrays(parsed), arch, "fwd")
    b = ENGINE.features(prob, ENGINE.kernel_arrays([enumerated[k.name] for k in parsed]), arch, "fwd")
    assert np.array_equal(a, b)


def test_features_use_the_directions_gemm_and_true_tiles(fwd):
    op, arch = fwd
    p = ConvProblem(N=2, C=64, K=256, Hi=10, Wi=10, Y=3, X=3, pad_h=1, pad_w=1)
    k = next(k for k in enumerate_pool(op, arch).kernels if k.name.endswith("_2d_32x128x64_compv3_intrawave"))
    names = ENGINE.feature_names()
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        row = dict(zip(names, ENGINE.features(ENGINE.problem_arrays([p], direction), ENGINE.kernel_arrays([k]),
                                              arch, direction)[0]))
        g, m, n, kk = p.gemm(direction)
        assert row["tiles_m"] == np.ceil(m / 32) and row["tiles_n"] == np.ceil(n / 128)
        assert row["k_iters"] == np.ceil(kk / 64)
        assert row["eff_m"] == pytest.approx(m / (np.ceil(m / 32) * 32))
    assert row["lds_budget_frac"] == pytest.approx((32 + 128) * 64 * 2 / 163840)


# ---------------------------------------------------------------- metrics
def test_pick_efficiency_hand_computed():
    m = pick_efficiency(np.array([0.1, 0.9, 0.5]), np.array([100.0, 80.0, 90.0]))
    assert m == {"efficiency": 0.8, "top1": 0.0, "within_1pct": 0.0, "oracle_in_top5": 1.0, "pick_failed": 0.0}
    # Ties: either tied oracle counts as exact top-1.
    m = pick_efficiency(np.array([0.0, 1.0]), np.array([50.0, 50.0]))
    assert m["efficiency"] == 1.0 and m["top1"] == 1.0
    # A failed pick counts as 0.
    m = pick_efficiency(np.array([5.0, 1.0]), np.array([np.nan, 40.0]))
    assert m["efficiency"] == 0.0 and m["pick_failed"] == 1.0
    # Within 1%: 99.5 of 100.
    assert pick_efficiency(np.array([1.0, 0.0]), np.array([99.5, 100.0]))["within_1pct"] == 1.0
    with pytest.raises(ValueError, match="no successful measurement"):
        pick_efficiency(np.array([1.0]), np.array([np.nan]))


def test_selection_report_and_summary():
    pid = np.array([0, 0, 1, 1, 1])
    scores = np.array([1.0, 0.0, 0.0, 2.0, 1.0])
    meas = np.array([10.0, 20.0, 5.0, 4.0, 1.0])
    r = selection_report(pid, scores, meas)
    assert r["efficiency"]["mean"] == pytest.approx((0.5 + 0.8) / 2)
    assert r["top1"] == 0.0 and r["oracle_in_top5"] == 1.0
    s = summarize([1.0, 0.5, 0.9, 0.8])
    assert s["min"] == 0.5 and s["median"] == pytest.approx(0.85) and s["n"] == 4


# ---------------------------------------------------------------- CV groups
def test_cv_groups_never_split_a_problem_and_key_includes_stride_pad_dilation(fwd, tmp_path):
    import pandas as pd

    from ckheur.learn.training import build_table, cross_validate

    op, arch = fwd
    pool = enumerate_pool(op, arch).by_group()[2]
    base = dict(N=4, C=64, K=64, Hi=14, Wi=14, Y=3, X=3, pad_h=1, pad_w=1)
    variants = [base, {**base, "stride_h": 2, "stride_w": 2}, {**base, "pad_h": 0, "pad_w": 0},
                {**base, "dilation_h": 2, "dilation_w": 2, "pad_h": 2, "pad_w": 2}]
    probs = [ConvProblem(**v) for v in variants] + [p for p in load_named_set("smoke", get_family("grouped_conv")) if p.ndim == 2]
    rng = np.random.default_rng(0)
    rows = [{"arch": "gfx950", "direction": "fwd", "dtype": "bf16", "status": "ok", "kernel": k.name,
             "tflops": float(rng.uniform(1, 100)), **p.to_dict()} for p in probs for k in pool]
    tb = build_table(pd.DataFrame(rows), op, arch, pool, ENGINE, None)
    assert len(tb.problems) == len(probs)  # stride/pad/dilation variants are distinct groups
    model = plain_model()
    cv = cross_validate(tb, model, "relative", [tb.feature_names.index("pipeline")], 4, 0.2, 0)
    for p in np.unique(tb.pid):
        assert len(np.unique(cv["fold"][tb.pid == p])) == 1
    assert np.isfinite(cv["oof"]).all()


def test_span_problems_take_each_field_block_from_the_set():
    """New problems for a distilled student: valid, new, and every field (or block of fields that
    belong together) is a value some problem of the set has."""
    from ckheur.families.grouped_conv.problems import SPAN_BLOCKS, problem_from_dict
    from ckheur.problems.space import span_problems

    probs = [p for p in load_named_set("smoke", get_family("grouped_conv")) if p.ndim == 2]
    new = span_problems(probs, 40, 0, problem_from_dict, SPAN_BLOCKS)
    keys = [p.key() for p in new]
    assert len(new) == 40 and len(set(keys)) == 40 and not set(keys) & {p.key() for p in probs}
    for block in (("Hi", "Wi"), ("Y", "X"), ("stride_h", "stride_w"), ("pad_h", "pad_w"), ("N",), ("C",), ("K",)):
        have = {tuple(getattr(p, f) for f in block) for p in probs}
        assert {tuple(getattr(p, f) for f in block) for p in new} <= have, block
    assert span_problems(probs, 40, 0, problem_from_dict, SPAN_BLOCKS) == new  # seeded


def test_a_distilled_student_ranks_like_its_teacher_with_fewer_trees(fwd, ck_fwd_csv):
    """model.distill_trees: the student regresses the teacher's scores over the training problems
    and new ones drawn from their span; it has the trees asked for and its picks are (nearly) the
    teacher's best by the teacher's own scores, including on problems neither was trained on."""
    from ckheur.data.dataset import read_dataset
    from ckheur.learn.training import build_table, distill, fit
    from ckheur.problems.space import span_problems
    from ckheur.threads import predict

    op, arch = fwd
    pool = enumerate_pool(op, arch).by_group()[2]
    tb = build_table(read_dataset([ck_fwd_csv]), op, arch, pool, ENGINE, None)
    rows = np.arange(len(tb.X))
    cat = [tb.feature_names.index("pipeline")]
    model = plain_model(max_trees=120, distill_trees=60, distill_problems=300)
    teacher = fit(tb, rows, {**model, "distill_trees": 0}, "relative", cat, 0, 120)
    student = distill(teacher, tb, rows, model, 0)
    assert student.num_trees() == 60 and teacher.num_trees() == 120 and student.distilled
    unseen = span_problems(tb.problems, 100, 1, tb.build_problem, tb.span_blocks)
    for X, pid in ((tb.X, tb.pid), tb.featurize(unseen)):
        t, s = predict(teacher, X, raw_score=True), predict(student, X, raw_score=True)
        # the teacher's own score (relative TFLOPS) of the student's pick, against the teacher's best
        regret = [t[pid == i].max() - t[pid == i][np.argmax(s[pid == i])] for i in np.unique(pid)]
        assert np.mean(regret) <= 0.01 and np.mean(np.asarray(regret) <= 0.02) >= 0.85, regret
    # through fit (as CV and the final fit call it): the student, counting the teacher's trees
    via_fit = fit(tb, rows, model, "relative", cat, 0, 120)
    assert via_fit.num_trees() == 60 and via_fit.member_iterations == [120]


def test_a_tree_budget_cuts_the_model_at_the_fewest_trees_within_the_loss(fwd, ck_fwd_csv, tmp_path):
    """train.budget_loss_pts: CV also scores each fold's model cut at fewer trees (a cut at or above
    a fold's tree count is that fold's whole model); the bundle keeps the fewest trees whose CV mean
    efficiency is within the loss of the uncut model's, and its CV record is the cut model's."""
    from ckheur.data.dataset import read_dataset
    from ckheur.learn.bundle import load_bundle
    from ckheur.learn.training import build_table, cross_validate, tree_budget

    op, arch = fwd
    pool = enumerate_pool(op, arch).by_group()[2]
    tb = build_table(read_dataset([ck_fwd_csv]), op, arch, pool, ENGINE, None)
    cv = cross_validate(tb, plain_model(max_trees=40), "relative", [tb.feature_names.index("pipeline")], 3, 0.2, 0,
                        cuts=[2, 400])
    assert np.array_equal(cv["oof_cut"][400], cv["oof"])  # above every fold's count: the whole model
    assert not np.allclose(cv["oof_cut"][2], cv["oof"])
    assert cv["cut_metrics"][400]["efficiency"] == cv["metrics"]["efficiency"]
    mean = lambda m: {"efficiency": {"mean": m}}  # noqa: E731
    curve = {25: mean(0.90), 50: mean(0.948), 100: mean(0.951)}
    assert tree_budget(mean(0.95), curve, 0.25) == 50 and tree_budget(mean(0.95), curve, 5.0) == 25
    assert tree_budget(mean(0.96), curve, 0.5) is None
    r = run_cli("stage=train", "op=fwd", "model=relative", f"data.paths=[{ck_fwd_csv}]", "model.max_trees=60",
                "train.folds=3", "train.cluster_cv=false", "train.budget_loss_pts=100", f"train.output={tmp_path / 'b'}")
    assert r.returncode == 0, r.stderr
    b = load_bundle(tmp_path / "b")
    budget = b.cv_metrics["tree_budget"]
    assert b.booster.num_trees() == budget["trees"] == 25 < budget["uncut_trees"]
    assert b.cv_metrics["grouped_cv_seed_mean"]["mean"] == budget["curve"]["25"]["mean"]
    assert "train: tree budget: 25 trees" in r.stdout
    # A student is cut, not its teacher, and is held to its teacher's CV (each fold's teacher scored)
    student = plain_model(max_trees=40, distill_trees=30, distill_problems=0)
    cv = cross_validate(tb, student, "relative", [tb.feature_names.index("pipeline")], 3, 0.2, 0, cuts=[2, 400])
    assert np.array_equal(cv["oof_cut"][400], cv["oof"]) and not np.allclose(cv["oof_cut"][2], cv["oof"])
    assert cv["teacher_metrics"]["efficiency"]["mean"] != cv["cut_metrics"][2]["efficiency"]["mean"]
    r = run_cli("stage=train", "op=fwd", "model=relative", f"data.paths=[{ck_fwd_csv}]", "model.max_trees=60",
                "model.distill_trees=30", "model.distill_problems=0", "train.folds=3", "train.cluster_cv=false",
                "train.budget_loss_pts=100", f"train.output={tmp_path / 's'}")
    assert r.returncode == 0, r.stderr
    b = load_bundle(tmp_path / "s")
    budget = b.cv_metrics["tree_budget"]
    assert b.booster.num_trees() == b.cv_metrics["chosen"]["student_trees"] == budget["trees"] == 25
    assert budget["uncut_trees"] == 30 and b.cv_metrics["chosen"]["trees"] >= 10  # the teacher's, early-stopped
    assert budget["teacher_grouped_cv"]["mean"] == b.cv_metrics["teacher"]["efficiency"]["mean"]
    assert "the teacher's (train.budget_loss_pts=100" in r.stdout


def test_size_regimes_split_problems_by_thirds_of_their_size(ck_fwd_csv, tmp_path):
    """train.regime_cv holds out the smallest, middle and largest thirds of the problems (by FLOPs
    or output size), each a CV fold: a regime the training data does not reach."""
    from ckheur.problems.space import regime_groups

    sizes = [(1, 7), (2, 7), (4, 7), (8, 7), (16, 7), (32, 7), (64, 7), (128, 7), (256, 7)]  # (N, Hi=Wi)
    probs = [ConvProblem(N=n, C=16, K=16, Hi=h, Wi=h, Y=1, X=1) for n, h in sizes]
    assert regime_groups(probs, "flops").tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    by_output = [ConvProblem(N=1, C=16, K=16, Hi=h, Wi=h, Y=1, X=1) for h in (64, 1, 8, 2, 32, 4)]
    assert regime_groups(by_output, "output_size").tolist() == [2, 0, 1, 0, 2, 1]
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{ck_fwd_csv}]", "train.regime_cv=[flops,width]",
                f"train.output={tmp_path / 'b'}")
    assert r.returncode == 2 and "train.regime_cv=['flops', 'width']: allowed values are flops, output_size" in r.stderr


def plain_model(**kw):
    from omegaconf import OmegaConf

    from ckheur.config import ModelSchema

    node = OmegaConf.merge(OmegaConf.structured(ModelSchema), {"objective": "relative", "max_trees": 20,
                                                               "early_stopping_rounds": 5, **kw})
    return plain(node)


# ---------------------------------------------------------------- stages and bundles
@pytest.fixture(scope="module")
def small_model(tmp_path_factory, ck_fwd_csv):
    out = tmp_path_factory.mktemp("model")
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{ck_fwd_csv}]", "train.calibration_iterations=100", "model.max_trees=60", "train.folds=3",
                f"train.output={out / 'bundle'}", f"hydra.run.dir={out / 'run'}")
    assert r.returncode == 0, r.stderr
    return out / "bundle"


def test_bundle_has_every_file_and_round_trips(small_model):
    from ckheur.learn.bundle import load_bundle

    files = {p.name for p in small_model.iterdir()}
    assert files == {"model.txt.xz", "tflops_model.txt.xz", "feature_spec.json", "kernels.json", "cv_metrics.json",
                     "feature_importances.json", "train_manifest.json"}
    b = load_bundle(small_model)
    man = json.loads((small_model / "train_manifest.json").read_text())
    assert man["data_kind"] == "real" and man["data_backend"] == ["ck_csv"]
    assert man["datasets"][0]["sha256"] == "5dd4d711115c082d5f748354161f989f4f592a47d0f6cfc37551880b34f5c09b"
    assert man["rows"] == 3700 and man["problems"] == 185 and len(b.kernels) == 20
    assert {"lightgbm", "numpy", "pandas", "python"} <= set(man["versions"])
    assert b.spec["feature_names"] == ENGINE.feature_names(False)


def test_bundle_errors_are_precise(small_model, tmp_path):
    from ckheur.learn.bundle import BundleError, load_bundle

    broken = tmp_path / "b"
    shutil.copytree(small_model, broken)
    (broken / "kernels.json").unlink()
    with pytest.raises(BundleError, match="incomplete: missing kernels.json"):
        load_bundle(broken)
    shutil.copy(small_model / "kernels.json", broken / "kernels.json")
    (broken / "feature_spec.json").write_text("{not json")
    with pytest.raises(BundleError, match="feature_spec.json: corrupted JSON"):
        load_bundle(broken)
    spec = json.loads((small_model / "feature_spec.json").read_text())
    (broken / "feature_spec.json").write_text(json.dumps({**spec, "encoding_version": 0}))
    with pytest.raises(BundleError, match="encoded with version 0.*retrain"):
        load_bundle(broken)
    (broken / "feature_spec.json").write_text(json.dumps(spec))
    with lzma.open(broken / "model.txt.xz", "wt") as f:
        f.write("garbage")
    with pytest.raises(BundleError, match="model.txt.xz: not a whole LightGBM model"):
        load_bundle(broken)
    with pytest.raises(BundleError, match="not found"):
        load_bundle(tmp_path / "nothing")


def test_compact_model_text_predicts_the_same_and_old_gz_bundles_still_load(tmp_path):
    """(a) The compact text a bundle stores predicts bit-identically to LightGBM's full text;
    (b) a folder with the .gz names of earlier versions (full texts) loads, and saving over it
    leaves only the new names; (c) a folder holding both names is refused, named."""
    from ckheur.learn.bundle import TRAINING_ONLY, BundleError, compact_model_text, load_bundle, save_bundle
    from ckheur.threads import lightgbm

    lgb = lightgbm()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 4))
    X[:, 3] = rng.integers(0, 5, 600)  # a categorical feature: category-set splits too
    y = X[:, 0] * 2 + (X[:, 3] % 2) + rng.normal(scale=0.1, size=600)
    booster = lgb.train({"objective": "regression", "num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1,
                         "num_threads": 1}, lgb.Dataset(X, y, categorical_feature=[3]), 20)
    full = booster.model_to_string()
    text = compact_model_text(full)
    assert len(text) < len(full) and compact_model_text(text) == text
    assert not any(line.startswith((*TRAINING_ONLY, "tree_sizes", "feature_importances")) for line in text.splitlines())
    T = np.vstack([X, rng.normal(scale=3, size=(2000, 4))])
    assert np.array_equal(lgb.Booster(model_str=text).predict(T), booster.predict(T))

    new = Path(shutil.copytree(ROOT / "models" / "miopen_fwd_bf16_gfx942", tmp_path / "new"))
    old = Path(shutil.copytree(new, tmp_path / "old"))
    for name in ("model.txt", "tflops_model.txt", "answers.json"):  # as earlier versions wrote them
        data = lzma.decompress((old / f"{name}.xz").read_bytes())
        if name != "answers.json":
            data = lightgbm().Booster(model_str=data.decode()).model_to_string().encode()  # full, with tree_sizes
        (old / f"{name}.gz").write_bytes(gzip.compress(data))
        (old / f"{name}.xz").unlink()
    a, b = load_bundle(new), load_bundle(old)
    T = rng.uniform(0, 8, size=(2000, a.booster.num_feature()))
    assert np.array_equal(a.booster.predict(T), b.booster.predict(T)) and a.answers == b.answers
    assert np.array_equal(a.tflops_booster.predict(T), b.tflops_booster.predict(T))

    both = Path(shutil.copytree(old, tmp_path / "both"))
    shutil.copy(new / "model.txt.xz", both / "model.txt.xz")
    with pytest.raises(BundleError, match=rf"{both} holds both model.txt.xz and model.txt.gz"):
        load_bundle(both)
    save_bundle(old, b.booster, b.tflops_booster, b.spec, b.kernels, b.cv_metrics, {}, b.manifest, b.answers)
    assert not list(old.glob("*.gz")) and (old / "model.txt.xz").read_bytes() == (new / "model.txt.xz").read_bytes()


def test_warm_start_adds_trees_and_refuses_mismatches(small_model, tmp_path, ck_fwd_csv):
    from ckheur.learn.bundle import load_bundle

    before = load_bundle(small_model).booster.current_iteration()
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{ck_fwd_csv}]", f"train.warm_start={small_model}",
                "train.warm_start_trees=7", f"train.output={tmp_path / 'warm'}", f"hydra.run.dir={tmp_path / 'r1'}")
    assert r.returncode == 0, r.stderr
    assert load_bundle(tmp_path / "warm").booster.current_iteration() == before + 7
    # The old trees' gains (not in a bundle's compact model text) come from the bundle's record: gains only add.
    gains = [json.loads((folder / "feature_importances.json").read_text()) for folder in (small_model, tmp_path / "warm")]
    assert all(gains[1][n] >= gains[0][n] for n in gains[0]) and sum(gains[1].values()) > sum(gains[0].values())
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{ck_fwd_csv}]", f"train.warm_start={small_model}",
                "model=lambdarank", f"train.output={tmp_path / 'w2'}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 2 and "objective: bundle has relative, this run has lambdarank" in r.stderr
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{ck_fwd_csv}]", f"train.warm_start={small_model}",
                "features.analytic=true", f"train.output={tmp_path / 'w3'}", f"hydra.run.dir={tmp_path / 'r3'}")
    assert r.returncode == 2 and "analytic: bundle has False, this run has True" in r.stderr


def test_analytic_prior_in_training_selection_c_export_and_warm_start(tmp_path, ck_fwd_csv):
    """model.prior=analytic: the bundle records the prior; the selector's scores are the trees'
    raw scores plus the prior training started from; the C export equals Python exactly; a warm
    start keeps the prior and appends trees."""
    from ckheur.learn.bundle import load_bundle
    from ckheur.c_export.compiled import find_compiler, load_compiled
    from ckheur.learn.prior import pair_prior
    from ckheur.selection.selector import Selector
    from ckheur.problems import problem_from_dict, random_problems
    from ckheur.families import get_family
    from ckheur.threads import predict

    out = tmp_path / "prior"
    r = run_cli("stage=train", "op=fwd", "arch=gfx950", f"data.paths=[{ck_fwd_csv}]", "model.prior=analytic",
                "model.prior_scale=0.7", "train.calibration_iterations=100", "model.max_trees=40", "train.folds=3", "train.cluster_cv=false",
                f"train.output={out}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    b = load_bundle(out)
    assert b.spec["prior"]["kind"] == "analytic" and b.spec["prior"]["scale"] == 0.7
    sel = Selector.load(out, cache_size=0)
    engine, arch = get_engine("grouped_conv"), b.spec["arch"]
    p = problem_from_dict({"N": 16, "C": 256, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    ks, scores, _ = sel._score(p)
    X = engine.features(engine.problem_arrays([p], "fwd"), engine.kernel_arrays(ks), arch, "fwd", None)
    want_prior = pair_prior(engine, [p], ks, np.zeros(len(ks), int), np.arange(len(ks)), arch, "fwd", b.spec["prior"],
                            "relative")
    np.testing.assert_allclose(scores - predict(b.booster, X), want_prior, rtol=1e-12)
    assert 0.69 < want_prior.max() <= 0.7 + 1e-12 and want_prior.min() > 0
    if find_compiler() is not None:
        c = load_compiled(out)
        assert c is not None and c.info["prior"]
        n = 0
        for q in random_problems(get_family("grouped_conv"), [2], 200, seed=5):
            try:
                k1, s1, _ = sel._score(q)
            except ValueError:
                continue
            idx, s2, _ = c.predict(q)
            assert [k.name for k in k1] == [sel._all_kernels[i].name for i in idx]
            np.testing.assert_allclose(s2, s1, rtol=1e-12, atol=1e-12)
            n += 1
        assert n > 100
    # Warm start: the old trees, then new ones trained from (prior + old trees); the raw score is their sum.
    r = run_cli("stage=train", "op=fwd", "arch=gfx950", f"data.paths=[{ck_fwd_csv}]", "model.prior=analytic",
                "model.prior_scale=0.7", f"train.warm_start={out}", "train.warm_start_trees=5",
                f"train.output={tmp_path / 'warm'}", f"hydra.run.dir={tmp_path / 'w'}")
    assert r.returncode == 0, r.stderr
    warm = load_bundle(tmp_path / "warm")
    assert warm.booster.num_trees() == b.booster.num_trees() + 5
    head = predict(warm.booster, X, num_iteration=b.booster.num_trees())
    np.testing.assert_allclose(head, predict(b.booster, X), rtol=1e-12)
    r = run_cli("stage=train", "op=fwd", "arch=gfx950", f"data.paths=[{ck_fwd_csv}]", f"train.warm_start={out}",
                f"train.output={tmp_path / 'w2'}", f"hydra.run.dir={tmp_path / 'w2r'}")
    assert r.returncode == 2 and "prior: bundle has" in r.stderr


def test_selector_api_without_hydra(small_model):
    from ckheur import Selector

    sel = Selector.load(small_model)
    prob = {"N": 16, "C": 256, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1}
    ranked = sel.rank(prob, k=5)
    assert len(ranked) == 5 and all(tf > 0 for _, tf in ranked)
    assert [tf for _, tf in ranked] == sorted([tf for _, tf in ranked], reverse=True)
    assert sel.select(ConvProblem(**prob)).kernel == ranked[0][0] == ranked[0].kernel
    assert [f for f in dir(sel) if not f.startswith("_") and callable(getattr(sel, f))] == \
        ["analytic", "load", "rank", "scores", "select"]  # one way to rank, one to pick, the unsorted
    # scores every ranker gives evaluations (the CK and TunaNet rankers too); two ways to build
    assert len(sel.rank(prob, k=None)) == 20
    assert sel.rank("convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1", k=5) == ranked
    with pytest.raises(ValueError, match="no kernel for 3D problems"):
        sel.rank({"N": 1, "C": 8, "K": 8, "Di": 4, "Hi": 4, "Wi": 4})


def test_shipped_model_reproduces_its_cv_metrics(tmp_path, ck_fwd_csv):
    """The shipped forward model: the simulator's ranking as prior, small trees, one seed, scored
    with the simulator recalibrated in each fold (the leakage guard), beside splits that hold out
    shape clusters and size regimes; its recorded CV reproduces from its recipe."""
    recorded = json.loads((SHIPPED / "cv_metrics.json").read_text())
    chosen = recorded["chosen"]
    [rec] = recorded["candidates"]
    assert rec["candidate"] == chosen["candidate"] == "relative+prior" and chosen["bagging"] == 1
    assert rec["fold_calibrated"] and not rec["leaky"] and not chosen["analytic"]
    assert rec["grouped_cv_seed_mean"]["mean"] >= 0.98 and rec["cluster_cv_seed_mean"]["mean"] >= 0.97
    regimes = rec["regime_cv_seed_mean"]
    assert set(regimes) == {"flops", "output_size"} and regimes["output_size"]["mean"] >= 0.9
    model = json.loads((SHIPPED / "train_manifest.json").read_text())["config"]["model"]
    recipe = [f"model.{k}={v}" for k, v in model.items()]
    r = run_cli("stage=train", "op=fwd", "arch=gfx950", f"data.paths=[{ck_fwd_csv}]", *recipe, "train.cluster_cv=false",
                f"train.output={tmp_path / 'm'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr
    now = json.loads((tmp_path / "m" / "cv_metrics.json").read_text())["candidates"][0]
    for k in ("mean", "median", "p10"):
        assert abs(now["efficiency"][k] - rec["efficiency"][k]) <= 0.005, k
    assert json.loads((SHIPPED / "train_manifest.json").read_text())["data_kind"] == "real"


def test_evaluate_writes_report_and_gate_fails_on_a_worse_model(small_model, tmp_path, ck_fwd_csv):
    weak = tmp_path / "weak"  # the same model cut to its first tree: worse, without a training of its own
    shutil.copytree(small_model, weak)
    cut_forest(weak, 1)
    out = tmp_path / "ev"
    r = run_cli("stage=evaluate", "op=fwd", f"evaluate.model_dir={small_model}", f"data.eval_paths=[{ck_fwd_csv}]",
                f"evaluate.baseline={small_model}", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "metrics.json").read_text())
    assert m["problems_evaluated"] == 185 and m["gate"]["passed"]
    assert set(m["baselines"]) == {"best fixed kernel", "greedy coverage list", "analytic model", "random legal kernel"}
    assert abs(m["baselines"]["best fixed kernel"]["mean"] - 0.818) < 0.01  # data README: about 82%
    greedy = m["baselines"]["greedy coverage list"]
    assert greedy["kernels"][0] == m["baselines"]["best fixed kernel"]["kernel"]
    assert greedy["mean"] >= m["baselines"]["best fixed kernel"]["mean"] and greedy["oracle_within_list_mean"] >= greedy["mean"]
    assert all(0 <= b["catastrophic_rate"] <= 1 for b in m["baselines"].values()) and "catastrophic (<50%)" in (
        out / "report.md").read_text()
    assert {"1x1", "strided", "small batch (N<=2)"} <= set(m["slices"])
    for f in ("report.md", "per_problem.csv", "efficiency_cdf.png", "predicted_vs_measured.png", "slices.png"):
        assert (out / f).stat().st_size > 0
    r = run_cli("stage=evaluate", "op=fwd", f"evaluate.model_dir={weak}", f"data.eval_paths=[{ck_fwd_csv}]",
                f"evaluate.baseline={small_model}", "evaluate.plots=false", f"hydra.run.dir={tmp_path / 'ev2'}")
    assert r.returncode == 1 and "acceptance gate FAILED" in r.stdout
    # a bundle of another op or data type, as the model or the gate's baseline: refused naming both
    other = ROOT / "models" / "miopen_fwd_fp16_gfx942"
    for field in ("evaluate.model_dir", "evaluate.baseline"):
        r = run_cli("stage=evaluate", "op=fwd", f"{field}={other}", f"data.eval_paths=[{ck_fwd_csv}]",
                    "evaluate.plots=false", f"hydra.run.dir={tmp_path / field}")
        assert r.returncode == 2 and f"{field}={other}: a bundle of miopen/fwd fp16, the job is grouped_conv/fwd bf16" \
            in r.stderr, r.stderr
    r = run_cli("stage=predict", "op=bwd_data", f"predict.model_dir={small_model}", "problem.N=2", "problem.C=16",
                "problem.K=8", f"hydra.run.dir={tmp_path / 'p'}")
    assert r.returncode == 2 and "a bundle of grouped_conv/fwd bf16, the job is grouped_conv/bwd_data bf16" in r.stderr


def test_predict_cli_with_model_and_analytic_fallback(tmp_path):
    r = run_cli("stage=predict", "op=fwd", "arch=gfx950", "problem.N=16", "problem.C=256", "problem.K=128",
                "problem.Hi=28", "problem.Wi=28", "problem.Y=3", "problem.X=3", "problem.pad_h=1", "problem.pad_w=1",
                f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    assert "ranked by: model models/grouped_conv_fwd_bf16_gfx950 (trained on real data)" in r.stdout
    assert r.stdout.count("grouped_conv_forward_bf16_2d_") == 6  # the top 5, then the selected kernel and its tier
    top1 = next(line for line in r.stdout.splitlines() if line.startswith("1 ")).split()[1]  # the table's first row
    assert f"selected: {top1} (tier: model)" in r.stdout
    r2 = run_cli("stage=predict", "op=fwd", "arch=gfx950",
                 "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1", f"hydra.run.dir={tmp_path / 'b'}")
    assert r2.returncode == 0 and r2.stdout.splitlines()[3:-1] == r.stdout.splitlines()[3:-1]  # the last: the run folder
    # kernels.filter narrows the bundle's candidates as it narrows a pool; a filter that keeps none is refused
    line = "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1"
    r3 = run_cli("stage=predict", line, "kernels.filter=pipeline == 'compv4'", f"hydra.run.dir={tmp_path / 'f'}")
    ranked = [ln.split()[1] for ln in r3.stdout.splitlines() if ln[:1].isdigit()]
    assert r3.returncode == 0 and len(ranked) == 5 and all("_compv4_" in k for k in ranked), r3.stdout
    r3 = run_cli("stage=predict", line, "kernels.filter=tile_m > 100000", f"hydra.run.dir={tmp_path / 'g'}")
    assert r3.returncode == 2 and "kernels.filter='tile_m > 100000' leaves no kernel of the pool" in r3.stderr
    r = run_cli("stage=predict", "op=fwd", "arch=gfx942", "problem=convbfp16 -n 1 -c 64 -H 56 -W 56 -k 64 -y 1 -x 1",
                f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 0 and "ANALYTIC MODEL (fallback: no trained model" in r.stdout
    r = run_cli("stage=predict", "problems=smoke", "predict.k=2", f"predict.output={tmp_path / 'p.csv'}",
                f"hydra.run.dir={tmp_path / 'd'}")
    assert r.returncode == 0, r.stderr
    import pandas as pd

    df = pd.read_csv(tmp_path / "p.csv")
    assert len(df[df["rank"].notna()]) == 16 * 2 and df["note"].notna().sum() == 4  # 3D: no 3D kernel in the model
    # the same output again replaces the earlier predictions, saying so (.json too); a file of the
    # user's there is refused and kept as it was
    (tmp_path / "mine.csv").write_text("my,own\n1,2\n")
    for name, code, replaced in (("p.csv", 0, True), ("q.json", 0, False), ("q.json", 0, True), ("mine.csv", 2, False)):
        r = run_cli("stage=predict", "problems=smoke", "predict.k=2", f"predict.output={tmp_path / name}")
        assert r.returncode == code and ("(the earlier predictions there replaced)" in r.stdout) == replaced, r.stderr
    assert "is not predictions ckheur wrote; it is never replaced" in r.stderr
    assert (tmp_path / "mine.csv").read_text() == "my,own\n1,2\n"
    assert len(json.loads((tmp_path / "q.json").read_text())) == 16 * 2 + 4


def test_train_without_data_says_what_to_do(tmp_path):
    r = run_cli("stage=train", "problems=smoke", f"paths.data={tmp_path}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "run stage=sweep (problems=smoke) first" in r.stderr


def test_simulated_pipeline_end_to_end(tmp_path):
    r = run_cli("-m", "stage=sweep,train,evaluate", "op=bwd_weight", "problems=smoke", "evaluate.problems=holdout",
                "train.folds=3", "model.max_trees=30", f"paths.data={tmp_path / 'data'}",
                f"paths.sim_models={tmp_path / 'sim_models'}", f"paths.models={tmp_path / 'no_models'}",
                "evaluate.plots=false", f"hydra.sweep.dir={tmp_path / 'multi'}")
    assert r.returncode == 0, r.stderr
    bundle = tmp_path / "sim_models" / "grouped_conv_bwd_weight_bf16_gfx950"
    man = json.loads((bundle / "train_manifest.json").read_text())
    assert man["data_kind"] == "simulated" and man["data_backend"] == ["sim"]
    assert not (tmp_path / "no_models").exists()  # simulated models never land in models/
    m = json.loads((tmp_path / "multi" / "2" / "metrics.json").read_text())
    assert m["data_kind"] == "simulated" and m["problems_evaluated"] > 250
    assert m["efficiency"]["mean"] > m["baselines"]["random legal kernel"]["mean"]


def test_selector_kept_kernel_columns_score_a_cascade_subset_as_computed_fresh():
    """A pool restricted per problem (here by the analytic cascade, set low) scores with the pool's
    kept kernel columns exactly as with the subset's columns computed anew."""
    from ckheur.selection.selector import Selector
    from ckheur.families.grouped_conv.problems import generate
    from ckheur.sim import kernel_arrays as sim_kernel_arrays
    from conftest import ROOT

    sel = Selector.load(ROOT / "models" / "grouped_conv_fwd_bf16_gfx950", cache_size=0, cascade_threshold=10,
                        cascade_top=7)
    pool = sel._pools[2]
    assert pool.kernel_cols is not None and len(pool.kernels) > 10
    for p in generate(5, 8, ndim=2):
        kernels, scores, tflops = sel._score(p)
        assert len(kernels) == 7
        idx = [pool.kernels.index(k) for k in kernels]
        fresh = sel._predict_arrays(p, {k: v[idx] for k, v in pool.feats.items()}, sim_kernel_arrays(kernels))
        assert np.array_equal(scores, fresh[0]) and np.array_equal(tflops, fresh[1])


def test_training_settings_out_of_range_are_one_line_naming_them(tmp_path, ck_fwd_csv):
    """model.* and train.* numbers LightGBM or scikit-learn would refuse with a traceback (fold
    count 1, no trees, a negative rate, a fraction past 1) exit 2 naming the setting and its range."""
    from ckheur.config import load_option
    from ckheur.learn.trainer import TrainOptions, check_settings
    from ckheur.learn.training import TrainingError

    model = load_option("model/relative")
    check_settings(model, TrainOptions())  # the shipped settings pass
    for bad, said in (({"learning_rate": -1.0}, "model.learning_rate=-1.0: must be a number > 0"),
                      ({"max_trees": 0}, "model.max_trees=0: must be a number >= 1"),
                      ({"subsample": 1.5}, "model.subsample=1.5: must be a number > 0 and <= 1"),
                      ({"num_leaves": float("nan")}, "model.num_leaves=nan")):
        with pytest.raises(TrainingError, match=said.replace("(", r"\(").replace(".", r"\.")):
            check_settings({**model, **bad}, TrainOptions())
    with pytest.raises(TrainingError, match=r"train\.inner_valid_fraction=1\.0: must be a number > 0 and < 1"):
        check_settings(model, TrainOptions(inner_valid_fraction=1.0))
    r = run_cli("stage=train", "train.folds=1", f"data.paths=[{ck_fwd_csv}]", f"train.output={tmp_path / 'm'}")
    assert r.returncode == 2 and "train.folds=1: must be a number >= 2" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m").exists()


def test_training_on_another_op_s_data_says_what_the_data_holds(tmp_path, ck_fwd_csv):
    r = run_cli("stage=train", "op=bwd_data", f"data.paths=[{ck_fwd_csv}]", f"train.output={tmp_path / 'm'}")
    assert r.returncode == 2 and "no rows of grouped_conv/bwd_data bf16 on gfx950 in the data" in r.stderr
    assert "rows of grouped_conv/fwd bf16 on gfx950)" in r.stderr and not (tmp_path / "m").exists()
