"""CK drop-in: CK's own features reproduced exactly, bundles written as CK dispatcher model folders
that rank as the bundle does when loaded the way CK's predictor loads them, CK folders scored beside
a model, bagged models, and the rule that chooses among candidates."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, run_cli

ORACLE = ROOT.parent / "shared" / "data" / "ck_dispatcher" / "feature_oracle.csv.gz"
REAL = "measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz"
QUICK = ["train.folds=2", "train.cluster_cv=false", "model.max_trees=60", "model=relative_prior", "model.prior=none",
         "features.engine=ck"]


@pytest.mark.skipif(not ORACLE.exists(), reason="../shared/data/ck_dispatcher is absent: CK's feature oracle "
                                                "(values CK's own engine computed) is not here to compare with")
def test_ck_features_equal_ck_engine_on_every_oracle_row():
    """All 97 features of all 25,210 (problem, kernel) pairs, 2D and 3D, three directions: exact."""
    from ckheur.config import load_option
    from ckheur.integrations.ck import features as ck_conv
    from ckheur.kernels import parse_name
    from ckheur.families.grouped_conv.problems import CONV_FIELDS, problem_from_dict

    df = pd.read_csv(ORACLE, float_precision="round_trip")  # the oracle's 17 digits, read back exactly
    assert len(df) == 25210
    tiles = load_option("op/grouped_conv/fwd")["tiles"]
    names = ck_conv.feature_names()
    assert len(names) == 97 and [n for n in names if n in df.columns or n in CONV_FIELDS] == names
    got = np.empty((len(df), len(names)))
    for kernel, rows in df.groupby("kernel").groups.items():  # one call per kernel over its problems
        probs = [problem_from_dict({f: int(v) for f, v in zip(CONV_FIELDS, r) if not pd.isna(v)})
                 for r in df.loc[rows, list(CONV_FIELDS)].itertuples(index=False)]
        got[rows] = ck_conv.features(ck_conv.problem_arrays(probs, "fwd"), ck_conv.kernel_arrays(
            [parse_name(kernel, {"tiles": tiles})]), {"name": "gfx950"}, "fwd")
    given = {f: df[f].fillna({"Di": 1, "Z": 1, "stride_d": 1, "pad_d": 0}.get(f, 1 if "dilation" in f else 0))
             for f in CONV_FIELDS}
    for j, n in enumerate(names):
        want = (given[n] if n in CONV_FIELDS else df[n]).to_numpy(dtype=float)
        assert np.array_equal(got[:, j], want), (n, np.flatnonzero(got[:, j] != want)[:5])


@pytest.fixture(scope="module")
def ck_bundles(tmp_path_factory):
    """CK-feature bundles of the three directions on the shipped real shapes: forward on their real
    measurements (relative), bwd_data (relative) and bwd_weight (regression_log) on the simulator's
    (backend sim, labeled so), each exported as a CK model folder."""
    import contextlib
    import io

    from ckheur.stages import run_overrides

    root = tmp_path_factory.mktemp("ck")
    out = {}
    for op, model in (("fwd", []), ("bwd_data", []), ("bwd_weight", ["model.objective=regression_log"])):
        data = [f"data.paths=[{REAL}]"] if op == "fwd" else []
        # The stages alone (compose + run, no command line): the CLI's own checks are the tests below.
        if op != "fwd":
            run_overrides(["stage=sweep", f"op={op}", "problems=ck_gfx950_fwd", "op.ndims=[2]",
                           f"paths.data={root / 'data'}", "sweep.progress=none"], root / f"s_{op}", quiet=True)
        run_overrides(["stage=train", f"op={op}", *QUICK, *model, *data, "problems=ck_gfx950_fwd", "op.ndims=[2]",
                       f"paths.data={root / 'data'}", f"train.output={root / op}"], root / f"t_{op}", quiet=True)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            run_overrides(["stage=export", f"op={op}", "export.format=ck", f"export.model_dir={root / op}",
                           f"export.output={root / ('ck_' + op)}", "export.check_problems=100"], root / f"e_{op}")
        assert "the same order as the Python selector on 100/100" in printed.getvalue()
        out[op] = (root / op, root / f"ck_{op}")
    return out


def test_exported_folders_rank_as_the_bundle_on_every_shared_problem(ck_bundles, ck_fwd_csv):
    """Loaded as CK's predictor loads it (LightGBM from model_tflops.lgbm, CK's features in
    feature_spec.json's order, expm1, sorted), each folder orders every candidate of every shared
    problem as the bundle's selector does, in all three directions."""
    import lightgbm as lgb

    from ckheur.integrations.ck import features as ck_conv
    from ckheur.selection.selector import Selector
    from ckheur.families import get_family
    from ckheur.problems.sources import read_csv

    problems = list({p.key(): p for p in read_csv(ck_fwd_csv, get_family("grouped_conv"))}.values())
    assert len(problems) == 185
    for op, (bundle, folder) in ck_bundles.items():
        spec = json.loads((folder / "feature_spec.json").read_text())
        assert sorted(p.name for p in folder.iterdir()) == ["feature_spec.json", "kernels.json", "model_tflops.lgbm", "train_manifest.json"]
        assert spec["feature_names"] == ck_conv.feature_names() and spec["categorical_features"] == ["pipeline"]
        assert spec["targets"] == spec["log_targets"] == ["tflops"] and spec["op_type"] == "grouped_conv"
        booster = lgb.Booster(model_file=str(folder / "model_tflops.lgbm"))  # CK's predictor's way
        sel = Selector.load(bundle)
        same = 0
        for p in problems:
            ks = sel._ranking(p)[0]
            X = ck_conv.features(ck_conv.problem_arrays([p], op), ck_conv.kernel_arrays(ks), {"name": "gfx950"}, op)
            pred = np.expm1(booster.predict(X[:, [ck_conv.feature_names().index(n) for n in spec["feature_names"]]]))
            ranked = [ks[i].name for i in sorted(range(len(ks)), key=lambda i: -pred[i])]
            same += ranked == [k.name for k in ks]
        assert same == len(problems), (op, same)
        tflops = np.expm1(booster.predict(X))
        assert np.all(tflops > 0) and np.max(tflops) < 2500  # TFLOPS on a gfx950 scale, not a relative score


def test_what_ck_cannot_run_is_refused_with_what_to_train(ck_bundles, tmp_path):
    from ckheur.integrations.ck.model_folder import CKFormatError, export_ck

    r = run_cli("stage=export", "export.format=ck", f"export.output={tmp_path / 'a'}", f"hydra.run.dir={tmp_path / 'r1'}")
    assert r.returncode == 2 and "trained on ckheur's grouped_conv features" in r.stderr
    assert "features.engine=ck" in r.stderr and not (tmp_path / "a").exists()
    r = run_cli("stage=train", "op=fwd", *QUICK, "model.objective=lambdarank", "model.max_trees=5",
                f"data.paths=[{REAL}]", f"train.output={tmp_path / 'rank'}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0, r.stderr
    r = run_cli("stage=export", "export.format=ck", f"export.model_dir={tmp_path / 'rank'}",
                f"export.output={tmp_path / 'b'}", f"hydra.run.dir={tmp_path / 'r3'}")
    assert r.returncode == 2 and "objective lambdarank has no log1p(TFLOPS) model" in r.stderr
    r = run_cli("stage=export", f"export.model_dir={ck_bundles['fwd'][0]}", f"export.output={tmp_path / 'c'}",
                f"hydra.run.dir={tmp_path / 'r4'}")
    assert r.returncode == 2 and "export.format=ck" in r.stderr
    screened = shutil.copytree(ck_bundles["fwd"][0], tmp_path / "screened")  # CK's predictor has no screen
    spec = json.loads((screened / "feature_spec.json").read_text())
    (screened / "feature_spec.json").write_text(json.dumps({**spec, "screen": {"trees": 10, "top": 3}}))
    with pytest.raises(CKFormatError, match="has a screen .* tools/set_screen.py .* --off"):
        export_ck(screened, tmp_path / "d")
    assert not (tmp_path / "d").exists()
    r = run_cli("stage=train", "op=fwd", *QUICK, "features.analytic=true", f"data.paths=[{REAL}]",
                f"hydra.run.dir={tmp_path / 'r5'}")
    assert r.returncode == 2 and "takes neither +analytic nor +prior" in r.stderr


def test_evaluate_scores_ck_folders_beside_the_model(ck_bundles, ck_fwd_csv, tmp_path):
    """A CK folder scored as a baseline picks what its bundle picks: the same efficiency per problem."""
    bundle, folder = ck_bundles["fwd"]
    from ckheur.stages import run_overrides

    run_overrides(["stage=evaluate", f"data.eval_paths=[{ck_fwd_csv}]", f"evaluate.model_dir={bundle}",
                   f"evaluate.ck_models=[{folder}]", "evaluate.plots=false"], tmp_path, quiet=True)  # the stage alone
    m = json.loads((tmp_path / "metrics.json").read_text())
    ck = m["baselines"][f"CK model {folder}"]
    assert ck["n"] == m["problems_evaluated"] == 185 and ck["problems_it_could_not_rank"] == 0
    per = pd.read_csv(tmp_path / "per_problem.csv")
    assert np.array_equal(per[f"baseline: CK model {folder}"], per["efficiency"])
    r = run_cli("stage=evaluate", "op=miopen/fwd", "arch=gfx942", f"evaluate.ck_models=[{folder}]",
                f"data.eval_paths=[{ck_fwd_csv}]", f"hydra.run.dir={tmp_path / 'm'}")
    assert r.returncode == 2 and "rank grouped convolutions" in r.stderr


def test_bagged_model_is_the_mean_of_its_members():
    import lightgbm as lgb

    from ckheur.learn.training import average_boosters

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    y = X[:, 0] + np.sin(X[:, 1]) + rng.normal(scale=0.1, size=400)
    members = [lgb.train({"objective": "regression", "seed": s, "bagging_fraction": 0.7, "bagging_freq": 1,
                          "verbose": -1, "num_leaves": 7}, lgb.Dataset(X, y), 40) for s in range(4)]
    mean = average_boosters(members, [10, 20, 30, 40])
    want = np.mean([m.predict(X, num_iteration=n) for m, n in zip(members, [10, 20, 30, 40])], axis=0)
    assert mean.num_trees() == 100 and np.allclose(mean.predict(X), want, rtol=0, atol=1e-12)


def test_choice_prefers_the_simpler_candidate_unless_evidence_is_beyond_the_seed_spread():
    from ckheur.learn.trainer import choose

    def r(mean_f, sd_f, mean_g, sd_g, complexity, leaky=False):
        return {"cluster_cv": {"mean": mean_f, "mean_sd": sd_f, "p10": 0.0},
                "grouped_cv": {"mean": mean_g, "mean_sd": sd_g, "p10": 0.0}, "complexity": complexity, "leaky": leaky}

    simple, rich = r(0.960, 0.002, 0.985, 0.001, (52, -1)), r(0.965, 0.003, 0.987, 0.001, (55, -1))
    assert choose([rich, simple]) == 0  # wins both, beyond its spread on both: chosen...
    noisy = r(0.965, 0.006, 0.987, 0.001, (55, -1))  # ...but not when the family margin is within its spread
    assert choose([noisy, simple]) == 1 and choose([noisy, simple], "best") == 0
    one_sided = r(0.975, 0.002, 0.984, 0.001, (55, -1))  # better on cluster CV, worse on grouped: not evidence
    assert choose([one_sided, simple]) == 1
    assert choose([rich, simple, r(0.99, 0.0, 0.99, 0.0, (40, -1), leaky=True)]) == 0  # leaky never chosen
    no_family = [{**x, "cluster_cv": None} for x in (rich, simple)]
    assert choose(no_family) == 0  # grouped CV alone decides without cluster CV


def test_recipes_are_candidates_chosen_beyond_the_paired_spread_with_one_seed():
    """train.compare=[relative+leaves63+lr0.1]: a recipe is a candidate; with one seed a richer one
    must beat the simpler by more than twice the standard error of their per-problem differences."""
    from ckheur.metrics import per_problem_efficiency
    from ckheur.learn.trainer import Candidate, TrainingError, choose

    c = Candidate.parse("relative+leaves63+lr0.1")
    assert (c.leaves, c.learning_rate, c.name) == (63, 0.1, "relative+leaves63+lr0.1")
    assert c.model({"num_leaves": 15, "learning_rate": 0.15, "max_trees": 9})["num_leaves"] == 63
    for bad in ("relative+leaves1", "relative+lr2", "relative+leaves7+leaves9", "relative+lrfast"):
        with pytest.raises(TrainingError, match="leavesN"):
            Candidate.parse(bad)
    # per problem: the best-scored candidate's TFLOPS over the problem's best; a censored pick is 0
    eff = per_problem_efficiency(np.array([1, 1, 0, 0, 0, 2]), np.array([.9, .1, .2, .8, .5, 1.]),
                                 np.array([5., 10., 8., 4., np.nan, 0.]))
    assert eff.tolist() == [0.5, 0.5, 0.0]

    def r(per, complexity):
        per = np.asarray(per, dtype=float)
        return {"grouped_cv": {"mean": per.mean(), "mean_sd": 0.0, "p10": 0.0, "seeds": 1}, "cluster_cv": None,
                "complexity": complexity, "leaky": False, "per_problem": per}

    base = np.tile([1.0, 0.9, 0.95, 0.8], 50)
    consistent = r(base + 0.01, (40, 63, -1))  # +1 point on every problem: far beyond its standard error
    noisy = r(base + np.tile([0.2, -0.19, 0.0, 0.0], 50), (40, 63, -1))  # +0.25 points on average, all noise
    assert choose([r(base, (40, 15, -1)), consistent]) == 1
    assert choose([r(base, (40, 15, -1)), noisy]) == 0 and choose([r(base, (40, 15, -1)), noisy], "best") == 1


def test_bagged_bundles_train_warm_start_and_rank(tmp_path):
    """model.bagging_seeds through stage=train (CV and the final fit), a warm start (the new trees of
    each seed averaged and appended) and the selector."""
    from ckheur.learn.bundle import load_bundle
    from ckheur.selection.selector import Selector

    common = ["stage=train", "op=fwd", f"data.paths=[{REAL}]", "train.folds=2", "train.cluster_cv=false",
              "model.max_trees=20", "model.prior=none", "model.bagging_seeds=3"]
    from ckheur.stages import run_overrides

    run_overrides([*common, f"train.output={tmp_path / 'b'}"], tmp_path / "r1", quiet=True)  # the stage alone
    first = load_bundle(tmp_path / "b")
    cv = first.cv_metrics
    assert first.spec["bagging_seeds"] == 3 and cv["chosen"]["bagging"] == 3
    assert len(cv["candidates"][0]["best_iterations"]) == 2 * 3  # 2 folds x 3 members
    assert first.booster.num_trees() == 3 * cv["chosen"]["trees"]
    run_overrides([*common, f"train.warm_start={tmp_path / 'b'}", "train.warm_start_trees=5", "model.bagging_seeds=1",
                   f"train.output={tmp_path / 'w'}"], tmp_path / "r2", quiet=True)
    warm = load_bundle(tmp_path / "w")
    assert warm.spec["bagging_seeds"] == 3 and warm.booster.num_trees() == first.booster.num_trees() + 3 * 5
    sel = Selector.load(tmp_path / "w")
    assert len(sel.rank("convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1", k=None)) == 20
