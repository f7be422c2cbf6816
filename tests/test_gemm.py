"""The second operator (GEMM) through the same framework, and surrogate search."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ckheur.families.engines import get_engine
from ckheur.kernels import KernelError, enumerate_pool
from ckheur.families.gemm.kernels import GemmKernel, parse_name, support_arrays, support_mask
from ckheur.families import get_family
from ckheur.problems import ProblemError, load_named_set
from ckheur.families.gemm.problems import GemmProblem, problem_from_dict
from ckheur.stages import plain
from conftest import run_cli

ENGINE = get_engine("gemm")


@pytest.fixture(scope="module")
def _gemm_config():
    from ckheur.stages import compose_config

    cfg = compose_config(["op=gemm", "arch=gfx950"])
    return plain(cfg.op), plain(cfg.arch)


@pytest.fixture
def gemm(_gemm_config):
    """The op and arch configs, composed once per module; each test gets its own copy."""
    import copy

    return copy.deepcopy(_gemm_config)


def test_pool_reaches_ck_scale_and_every_kernel_is_legal(gemm):
    op, arch = gemm
    pool = enumerate_pool(op, arch)
    assert 4000 <= len(pool.kernels) <= 20000
    assert len({k.name for k in pool.kernels}) == len(pool.kernels)
    cg = arch["codegen"]
    for k in pool.kernels:
        assert k.tile_m % (k.wave_m * k.warp_tile_m) == 0 and k.tile_n % (k.wave_n * k.warp_tile_n) == 0
        assert k.tile_k % (k.wave_k * k.warp_tile_k) == 0
        assert [k.wave_m, k.wave_n, k.wave_k] in cg["wave_layouts"]
        assert [k.warp_tile_m, k.warp_tile_n, k.warp_tile_k] in cg["warp_tiles"]["fp16"]
        assert k.lds_bytes <= arch["lds_bytes"] * cg["lds_budget_fraction"].get(k.pipeline, 1.0)
        assert k.scheduler == "intrawave" or k.pipeline == "mem"
    reasons = dict(pool.rejected)
    assert any("budget" in r for r in reasons.values()) and any("divisible" in r for r in reasons.values())
    # A smaller LDS drops more kernels.
    assert len(enumerate_pool(op, plain_arch(gemm, "gfx942")).kernels) < len(pool.kernels)


def plain_arch(gemm, name):
    from ckheur.config import load_option

    return load_option(f"arch/{name}")


def test_names_round_trip_in_ck_style(gemm):
    op, arch = gemm
    for k in enumerate_pool(op, arch).kernels[::37]:
        assert parse_name(k.name) == k
    ck = "gemm_universal_fp8_rcr_compv3_cshuffle_intrawave_False_False_False_False_128x128x128_1x4x1_16x16x128"
    k = parse_name(ck)
    assert (k.dtype, k.layout, k.tile_k, k.wave_n, k.warp_tile_k, k.epilogue) == ("fp8", "rcr", 128, 4, 128, "cshuffle")
    assert k.name == ck
    assert parse_name("benchmark_" + ck) == k
    assert parse_name(ck.replace("gemm_universal_", "gemm_")) == k
    with pytest.raises(KernelError, match="not a CK gemm_universal name"):
        parse_name("gemm_fp16_rcr_128x128x32")


def test_problem_validation():
    for fields, msg in [({"M": 0, "N": 8, "K": 8}, "M=0: must be >= 1"),
                        ({"M": 8, "N": 8, "K": 8, "layout": "xyz"}, "layout='xyz': allowed values are rcr, rrr, crr, ccr"),
                        ({"M": 8, "N": 8, "K": 8, "split_k": 16}, "split_k=16: must be <= K=8"),
                        ({"M": 8, "N": 8}, "missing required field"), ({"M": 8, "N": 8, "K": 8, "C": 3}, "unknown")]:
        with pytest.raises(ProblemError, match=msg):
            problem_from_dict(fields)


def _row(p, k, arch, analytic=None):
    names = ENGINE.feature_names(analytic is not None)
    return dict(zip(names, ENGINE.features(ENGINE.problem_arrays([p]), ENGINE.kernel_arrays([k]), arch, "fwd", analytic)[0]))


def test_feature_formulas_hand_computed(gemm):
    op, arch = gemm
    assert len(ENGINE.feature_names()) == 58  # CK's 55 plus occupancy, wave_rounds, wave_eff
    k = GemmKernel("fp16", "rcr", 128, 64, 64, 2, 2, 1, 32, 32, 16, "compv4")
    p = GemmProblem(M=1000, N=640, K=100)
    r = _row(p, k, arch)
    assert r["tile_eff_m"] == pytest.approx(1000 / 1024)  # useful fraction, not the last tile's fill
    assert r["tile_eff_n"] == pytest.approx(1.0) and r["tile_eff_k"] == pytest.approx(100 / 128)
    assert r["overall_tile_efficiency"] == pytest.approx(1000 / 1024 * 100 / 128)
    assert r["num_tiles_m"] == 8 and r["num_tiles_n"] == 10 and r["total_output_tiles"] == 80
    assert r["lds_usage_bytes"] == (128 + 64) * 64 * 2
    assert r["lds_usage_ratio"] == pytest.approx((128 + 64) * 64 * 2 / (163840 * 0.5))  # compv4 budget on gfx950
    assert r["arithmetic_intensity"] == pytest.approx(2 * 1000 * 640 * 100 / ((1000 * 100 + 100 * 640 + 1000 * 640) * 2))
    assert r["cu_utilization"] == pytest.approx(80 / 256) and r["wave_m"] == 2 and r["warp_tile_m"] == 32
    assert r["hw_num_cus"] == 256 and r["hw_l2_kib"] == 4096


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (4093, 127, 509), (20480, 7168, 256), (1, 2, 2)])
def test_features_on_corner_shapes(gemm, shape):
    op, arch = gemm
    from ckheur.sim import load_params

    pool = enumerate_pool(op, arch).kernels
    p = GemmProblem(*shape)
    X = ENGINE.features(ENGINE.problem_arrays([p]), ENGINE.kernel_arrays(pool), arch, "fwd",
                        {**load_params(), "dtype": "fp16"})
    assert np.isfinite(X).all()
    names = ENGINE.feature_names(True)
    eff = X[:, names.index("tile_eff_m")]
    assert ((eff > 0) & (eff <= 1)).all()
    assert (X[:, names.index("cu_utilization")] <= 1).all()
    if shape == (20480, 7168, 256):
        assert X[:, names.index("cu_utilization")].min() == 1.0


def test_edge_shapes_are_filtered_with_a_reason(gemm, tmp_path):
    op, arch = gemm
    pool = enumerate_pool(op, arch).kernels
    sup = support_arrays(pool)
    mask, reason = support_mask(GemmProblem(4096, 1, 4096), sup, op)
    assert not mask.any() and "C (row-major) is contiguous in N=1" in reason
    mask, reason = support_mask(GemmProblem(4096, 4096, 1), sup, op)
    assert not mask.any() and "contiguous in K=1" in reason
    mask, _ = support_mask(GemmProblem(7, 3, 5), sup, op)
    padded = np.array([k.pad_m and k.pad_n and k.pad_k for k in pool])
    assert mask.any() and (mask == padded).all()  # only padding kernels handle 7x3x5
    r = run_cli("stage=sweep", "op=gemm", "problems=gemm_edge", "kernels.filter=\"tile_m == 64 and tile_n == 64\"",
                f"paths.data={tmp_path}/data", f"hydra.run.dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "run" / "sweep_summary.json").read_text())
    skipped = {d["problem"]: d["reason"] for d in s["problems_skipped"]}
    assert set(skipped) == {"rcr M4096 N1 K4096", "rcr M4096 N4096 K1", "rcr M1 N1 K1"}
    assert s["by_status"]["unsupported"] > 0 and s["by_status"]["ok"] > 0
    r = run_cli("stage=predict", "op=gemm", "problem.M=4096", "problem.N=1", "problem.K=4096",
                f"hydra.run.dir={tmp_path}/p")
    assert r.returncode == 2 and "no kernel supports rcr M4096 N1 K4096" in r.stderr


def test_llm_shapes_set():
    probs = load_named_set("gemm_llm", get_family("gemm"))
    assert {p.M for p in probs} >= {1, 16, 128, 1024, 4096, 16384}
    assert GemmProblem(M=1024, N=28672, K=4096).key() in {p.key() for p in probs}  # Llama-3 8B gate/up
    assert GemmProblem(M=64, N=4096, K=7168).key() in {p.key() for p in probs}  # DeepSeek-V3 expert
    from ckheur.problems import load_problem_set, set_node

    # the message lists the shipped sets of the family, without the network sets (their convolutions)
    with pytest.raises(ProblemError, match="has no gemm problems .*; shipped sets with gemm problems: gemm_edge, "
                                           "gemm_llm, gemm_train, holdout, smoke$"):
        load_problem_set(plain(set_node("nets")), get_family("gemm"))
    with pytest.raises(ProblemError, match="shipped sets with miopen problems: miopen_log, onnx, smoke$"):
        load_problem_set(plain(set_node("nets")), get_family("miopen"))


def _search(compose, **kw):
    from ckheur.selection.selector import Selector
    from ckheur.sweeping.search import SearchOptions, search_problem

    cfg = compose(["op=gemm"])
    op, arch = plain(cfg.op), plain(cfg.arch)
    pool = enumerate_pool(op, arch).kernels
    sel = Selector.analytic(pool, arch, "fwd", "fp16", op=op)
    return search_problem(sel, pool, GemmProblem(M=3000, N=6144, K=4096), SearchOptions(**kw)), pool, op


def test_search_is_deterministic_legal_and_within_budget(compose):
    a, pool, op = _search(compose, method="de", budget=200, seed=3)
    b, _, _ = _search(compose, method="de", budget=200, seed=3)
    assert a == b
    c, _, _ = _search(compose, method="de", budget=200, seed=4)
    assert c["evaluations"] <= 200 and a["evaluations"] <= 200
    legal = {k.name for k in pool}
    p = GemmProblem(M=3000, N=6144, K=4096)
    for r in (a, c):
        assert len(r["top"]) == 5
        for t in r["top"]:
            assert t["kernel"] in legal
            k = parse_name(t["kernel"])
            assert support_mask(p, support_arrays([k]), op)[0].all()
        assert r["full_pool"]["ratio"] <= 1.0 + 1e-9
    rnd, _, _ = _search(compose, method="random", budget=200, seed=3)
    assert rnd["evaluations"] == 200 and rnd != a


def test_simulated_gemm_pipeline_end_to_end(tmp_path):
    # 132 kernels: more than the 100 the manifest check and search.budget ask for, and a seventh of the
    # tile_m >= 128 pool's 876 (the sweep and evaluate's sweep of the holdout scale with it)
    flt = "kernels.filter=\"tile_m >= 256 and tile_n >= 256 and epilogue == 'cshuffle' and not persistent\""
    r = run_cli("-m", "stage=sweep,train,evaluate,search", "op=gemm", "backend=sim", "problems=smoke", flt,
                "train.folds=3", "model.max_trees=20", "search.budget=100", "problem.M=3000", "problem.N=6144",
                "problem.K=4096", "evaluate.plots=false", f"paths.data={tmp_path / 'data'}",
                f"paths.sim_models={tmp_path / 'sim'}", f"hydra.sweep.dir={tmp_path / 'multi'}")
    assert r.returncode == 0, r.stderr[-3000:]
    man = json.loads((tmp_path / "sim" / "gemm_universal_fp16_gfx950" / "train_manifest.json").read_text())
    assert man["data_kind"] == "simulated" and man["kernels"] > 100
    m = json.loads((tmp_path / "multi" / "2" / "metrics.json").read_text())
    assert m["problems_evaluated"] > 150 and m["efficiency"]["mean"] > m["baselines"]["random legal kernel"]["mean"]
    s = json.loads((tmp_path / "multi" / "3" / "search.json").read_text())
    assert "trained on simulated data" in s["surrogate"] and s["results"][0]["evaluations"] <= 100
