"""C export: the compiled selector equals the Python one (scores to 1e-5, same top-1), errors are
codes with messages, the CLI reads CK-named CSVs, and the ctypes path falls back without a compiler."""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import warnings

import numpy as np
import pytest

from ckheur.config import plain
from ckheur.backends.abi import ConvProblemC, GemmProblemC
from ckheur.c_export.compiled import build, find_compiler, load_compiled
from ckheur.c_export.generate import ExportError, export_bundle
from ckheur.learn.forest import goes_left, read_forest
from ckheur.learn.quick import train_quick_bundle
from ckheur.selection.selector import Selector
from ckheur.families.problem_base import ProblemError
from ckheur.problems import random_problems
from ckheur.c_export.checked import problems_csv
from conftest import ROOT, run_cli

SHIPPED = ROOT / "models" / "grouped_conv_fwd_bf16_gfx950"
pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckheur_cache"))


def train_small_bundle(out, compose, op_name, overrides=(), **kw):
    """A small model trained here on simulated data (labeled sim), saved as a bundle."""
    cfg = compose([f"op={op_name}", *overrides])
    return train_quick_bundle(out, plain(cfg.op), plain(cfg.arch), **kw)


def assert_parity(py: Selector, compiled, problems) -> dict:
    """Every problem: the same candidates in the same order, scores and TFLOPS to 1e-5, same top-1."""
    ranked = rejected = 0
    names = names_of(compiled)
    for p in problems:
        try:
            k1, s1, t1 = py._score(p)
        except ProblemError:
            with pytest.raises(ProblemError):
                compiled.predict(p)
            rejected += 1
            continue
        idx, s2, t2 = compiled.predict(p)
        assert [k.name for k in k1] == [names[i] for i in idx], p.describe()
        np.testing.assert_allclose(s2, s1, rtol=1e-5, atol=0, err_msg=p.describe())
        np.testing.assert_allclose(t2, t1, rtol=1e-5, atol=0, err_msg=p.describe())
        assert int(np.argmax(s1)) == int(np.argmax(s2)), p.describe()
        ranked += 1
    return {"ranked": ranked, "rejected": rejected}


def names_of(compiled) -> list[str]:
    fn = getattr(compiled._lib, f"{compiled.info['prefix']}_kernel_name")
    fn.restype = ctypes.c_char_p
    return [fn(i).decode() for i in range(compiled.num_kernels)]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    import os

    os.environ.setdefault("CKHEUR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "ckheur_cache"))
    return Selector.load(SHIPPED, cache_size=0), load_compiled(SHIPPED)


def test_shipped_model_parity_on_real_and_shipped_sets_and_random_problems(shipped, ck_fwd_csv, compose):
    from ckheur.families import get_family
    from ckheur.problems import load_named_set
    from ckheur.families.grouped_conv.problems import generate
    from ckheur.families import get_family
    from ckheur.problems.sources import read_csv

    py, compiled = shipped
    real = list({p.key(): p for p in read_csv(ck_fwd_csv, get_family("grouped_conv"))}.values())  # its 185 shapes (one row per kernel)
    sets = [p for name in ("nets", "holdout", "smoke") for p in load_named_set(name, get_family("grouped_conv"))]
    rand = generate(5, 1500) + generate(6, 200, ndim=3)
    got = assert_parity(py, compiled, real + sets + rand)
    assert len(real) == 185 and got["ranked"] >= len(real) + 1500
    assert got["rejected"] >= 200  # the shipped pool is 2D only: 3D problems are unsupported on both sides


def test_small_models_of_every_family_objective_and_split_kind(tmp_path, compose):
    """Conv fwd 2D+3D (relative, categorical splits, zero-as-missing branches), bwd_data (lambdarank,
    NaN-trained missing-value branches), bwd_weight (regression_log with analytic features, three seeds
    averaged into one model: model.bagging_seeds), GEMM
    (5,216 kernels: cascade, kernel-feature nodes tested at run time)."""
    from ckheur.families import get_family

    cases = [
        ("grouped_conv/fwd", dict(objective="relative", lgb_params={"zero_as_missing": True}), ["op.ndims=[2,3]"]),
        ("grouped_conv/bwd_data", dict(objective="lambdarank", nan_fraction=0.05), []),
        ("grouped_conv/bwd_weight", dict(objective="regression_log", analytic=True, bagging=3), []),
        ("gemm/universal", dict(objective="relative", kernel_sample=200, n_problems=30, trees=60), []),
    ]
    for op_name, kw, overrides in cases:
        out = train_small_bundle(tmp_path / op_name.replace("/", "_"), compose, op_name, overrides=overrides, **kw)
        py = Selector.load(out, cache_size=0)
        forest = read_forest(py.booster)
        kinds = {(n["decision_type"], n["missing_type"]) for _, n, _, _ in forest.nodes}
        if kw.get("lgb_params"):
            assert ("<=", "Zero") in kinds
        if kw.get("nan_fraction"):
            assert ("<=", "NaN") in kinds
        assert any(d == "==" for d, _ in kinds) or op_name.startswith("gemm")
        compiled = load_compiled(out)
        assert compiled is not None
        family = get_family(py.family.name)
        groups = sorted({k.group for k in py.kernels}, key=str)
        n = 120 if family.name == "gemm" else 400
        got = assert_parity(py, compiled, random_problems(family, groups, n, seed=3))
        assert got["ranked"] >= n // 2, (op_name, got)
        if family.name == "gemm":
            assert compiled.info["cascade"] and len(py.kernels) > 5000


def test_goes_left_follows_lightgbm_on_missing_zero_and_categorical_values():
    """The Python decision rule (used for kernel-feature nodes) against LightGBM's own predictions."""
    import lightgbm as lgb

    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 3))
    X[:, 2] = rng.integers(0, 6, 3000)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[rng.random(X.shape) < 0.1] = 0.0
    y = np.nan_to_num(X[:, 0]) * 2 + (np.nan_to_num(X[:, 2]) % 3) + np.isnan(X[:, 1])
    for params in ({}, {"zero_as_missing": True}):
        b = lgb.train({"objective": "regression", "num_leaves": 15, "verbose": -1, "min_data_in_leaf": 5, **params},
                      lgb.Dataset(X, y, categorical_feature=[2]), 20)
        T = np.vstack([X[:500], [[np.nan, np.nan, np.nan], [1e-36, -1e-36, 0.5], [0.0, 0.0, -0.5], [1e9, 1e9, 3e9]]])
        T32 = T.astype(np.float32)
        forest = read_forest(b)
        pred = np.zeros(len(T))
        for t in range(forest.ntree):
            mask = np.full(len(T), (1 << 64) - 1, dtype=object)
            for tree, n, left, right in forest.nodes:
                if tree == t:
                    go = goes_left(T32[:, n["split_feature"]], n)
                    mask = np.where(go, mask & ~right, mask & ~left)
            leaf = [(int(m) & -int(m)).bit_length() - 1 for m in mask]
            pred += np.array(forest.leaves[t])[leaf]
        np.testing.assert_allclose(pred, b.predict(T32), rtol=1e-12)


def test_error_codes_name_each_invalid_field(shipped):
    from ckheur.families.grouped_conv.problems import CONV_FIELDS, _MIN_ONE

    _, compiled = shipped
    lib, pre = compiled._lib, compiled.info["prefix"]
    rank, err = getattr(lib, f"{pre}_rank"), getattr(lib, f"{pre}_error")
    err.restype = ctypes.c_char_p
    idx, score = (ctypes.c_int * 4)(), (ctypes.c_float * 4)()
    good = dict(N=4, C=64, K=64, G=1, Di=1, Hi=14, Wi=14, Z=1, Y=3, X=3, stride_d=1, stride_h=1, stride_w=1,
                pad_d=0, pad_h=1, pad_w=1, dilation_d=1, dilation_h=1, dilation_w=1)

    def call(direction=0, dtype=1, k=4, **over):
        s = ConvProblemC(*[{**good, **over}[f] for f in CONV_FIELDS], direction, dtype)
        code = rank(ctypes.byref(s), k, idx, score)
        return code, (err(code).decode() if code < 0 else "")

    assert call()[0] == 4
    for i, f in enumerate(CONV_FIELDS):
        lo = 1 if f in _MIN_ONE else 0
        code, msg = call(**{f: lo - 1})
        assert code == -100 - i and f"field {f}" in msg and f">= {lo}" in msg
        code, msg = call(**{f: 2**31})
        assert code == -200 - i and f"field {f}" in msg
    assert call(C=63, G=2, K=64)[0] == -5 and "divisible" in call(C=63, G=2, K=64)[1]
    assert call(C=64, G=2, K=63)[0] == -6
    assert call(Hi=2, Y=5, pad_h=0)[0] == -7 and "output" in call(Hi=2, Y=5, pad_h=0)[1]
    assert call(direction=1)[0] == -3 and call(dtype=0)[0] == -4
    assert call(Di=4, Z=3, pad_d=1)[0] == -8  # a 3D problem: the shipped pool has no 3D kernel
    assert call(k=0)[0] == -2
    assert rank(None, 1, idx, score) == -1


def test_python_and_c_share_one_validity_rule_and_a_latency_floor(shipped):
    """The same problems both ways: what the C selector refuses as invalid, Python refuses too
    (field ranges, 2^31 sizes, FLOPs and elements at 2^53), and both accept the rest; no
    predicted latency is below the launch floor on either side."""
    from ckheur.families.kernel_base import LATENCY_FLOOR_MS
    from ckheur.families.grouped_conv.problems import CONV_FIELDS, problem_from_dict

    py, compiled = shipped
    lib, pre = compiled._lib, compiled.info["prefix"]
    rank = getattr(lib, f"{pre}_rank")
    idx, score = (ctypes.c_int * 4)(), (ctypes.c_float * 4)()
    base = dict(N=1, C=1, K=1, G=1, Di=1, Hi=1, Wi=1, Z=1, Y=1, X=1, stride_d=1, stride_h=1, stride_w=1,
                pad_d=0, pad_h=0, pad_w=0, dilation_d=1, dilation_h=1, dilation_w=1)
    cases = [
        dict(N=16, C=256, K=128, Hi=28, Wi=28, Y=3, X=3, pad_h=1, pad_w=1),
        dict(N=2**31 - 1), dict(N=2**31), dict(Hi=2**31, Wi=7), dict(pad_w=2**31 - 1, Wi=1),
        dict(N=2**30, K=2**22 - 1), dict(N=2**30, K=2**22),  # FLOPs just below / at 2^53
        dict(N=2**30, C=2**23, Hi=1),  # input elements 2^53
        dict(N=2**20, C=2**15, K=2**15, Hi=2**10, Wi=2**10, Y=3, X=3, pad_h=1, pad_w=1),  # exa-scale
        dict(N=4, C=64, K=64, Hi=2**31 - 1, Wi=2**31 - 1),
        dict(N=8, C=8, K=8, Hi=1, Wi=1),  # tiny: the latency floor applies
    ]
    invalid = {-3, -4, -5, -6, -7, -9} | set(range(-218, -199)) | set(range(-118, -99))
    verdicts = []
    for over in cases:
        d = {**base, **over}
        code = rank(ctypes.byref(ConvProblemC(*[d[f] for f in CONV_FIELDS], 0, 1)), 4, idx, score)
        try:
            problem_from_dict(d)
            python_valid = True
        except ProblemError:
            python_valid = False
        verdicts.append((over, python_valid, code))
        assert python_valid == (code not in invalid), (over, python_valid, code)
    assert [v[1] for v in verdicts] == [True, True, False, False, True, True, False, False, False, False, True]
    # A refused problem is refused by the selector too, with the field or limit named.
    with pytest.raises(ProblemError, match="2\\^53"):
        py.rank({**base, "N": 2**30, "K": 2**22})
    with pytest.raises(ProblemError, match="N=2147483648"):
        py.rank({**base, "N": 2**31})
    tiny = problem_from_dict({**base, "N": 8, "C": 8, "K": 8})
    for tflops in (py._score(tiny)[2], compiled.predict(tiny)[2]):
        latency_ms = tiny.flops / (np.asarray(tflops) * 1e12) * 1e3
        assert latency_ms.min() >= LATENCY_FLOOR_MS * (1 - 1e-12)
    np.testing.assert_allclose(compiled.predict(tiny)[2], py._score(tiny)[2], rtol=1e-12)


def test_gemm_error_codes(tmp_path, compose):
    out = train_small_bundle(tmp_path / "g", compose, "gemm/universal", kernel_sample=50, n_problems=10, trees=5)
    compiled = load_compiled(out)
    lib, pre = compiled._lib, compiled.info["prefix"]
    rank, err = getattr(lib, f"{pre}_rank"), getattr(lib, f"{pre}_error")
    err.restype = ctypes.c_char_p
    idx, score = (ctypes.c_int * 4)(), (ctypes.c_float * 4)()

    def call(M=1024, N=1024, K=1024, split_k=1, layout=0, dtype=0):
        code = rank(ctypes.byref(GemmProblemC(M, N, K, split_k, layout, dtype)), 4, idx, score)
        return code, err(code).decode()

    assert call()[0] == 4
    assert call(M=0) == (-100, "invalid problem field M: must be >= 1")
    assert call(split_k=0)[0] == -103 and call(split_k=2048, K=1024)[0] == -11
    assert call(layout=7)[0] == -12 and "rcr" in call(layout=7)[1]
    assert call(K=1)[0] == -13  # rcr: A is contiguous in K
    assert call(layout=1)[0] == -8  # the pool has rcr kernels only
    assert call(dtype=1)[0] == -4


@pytest.fixture(scope="module")
def shipped_package(tmp_path_factory):
    """The shipped bundle's C package, exported once for the tests that only read it."""
    return export_bundle(SHIPPED, tmp_path_factory.mktemp("shipped_package") / "pkg")


def test_cli_reads_ck_csv_with_missing_optional_columns(shipped, shipped_package, tmp_path):
    py, _ = shipped
    res = shipped_package
    binary = build(res.path, res.name, find_compiler(), shared=False, out=tmp_path / "ckheur_select")
    text = "N,C,K,Hi,Wi,Y,X\n16,256,128,28,28,3,3\n1,64,64,56,56,1,1\n"
    r = subprocess.run([str(binary), "--k", "3"], input=text, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "row,rank,kernel,score" and len(lines) == 7
    for row, p in enumerate(({"N": 16, "C": 256, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3},
                             {"N": 1, "C": 64, "K": 64, "Hi": 56, "Wi": 56, "Y": 1, "X": 1})):
        want = py.rank(p, 3)
        got = [ln.split(",") for ln in lines[1 + 3 * row: 4 + 3 * row]]
        assert [g[2] for g in got] == [w[0] for w in want]
        assert [int(g[1]) for g in got] == [1, 2, 3] and all(int(g[0]) == row for g in got)
        ks, sc, _ = py.scores(p)
        by_name = dict(zip([k.name for k in ks], sc))
        np.testing.assert_allclose([float(g[3]) for g in got], [by_name[g[2]] for g in got], rtol=1e-6)
    # A bad row is reported and skipped; the others are ranked; timing goes to stderr.
    r = subprocess.run([str(binary), "--repeat", "5"], input="N,C,K,G\n8,64,64,1\n8,63,64,2\n", capture_output=True,
                       text=True)
    assert r.returncode == 1 and "row 1: invalid problem: C must be divisible by G" in r.stderr
    assert len(r.stdout.strip().splitlines()) == 2
    timing = dict(ln.split("=") for ln in r.stderr.splitlines() if ln.startswith("selection_ns_"))
    # Median over rows of each row's fastest call can never exceed the median call (equal repeats per row).
    assert 0 < int(timing["selection_ns_min_p50"]) <= int(timing["selection_ns_p50"])
    r = subprocess.run([str(binary)], input="N,C,K,foo\n1,2,3,4\n", capture_output=True, text=True)
    assert r.returncode == 2 and "unknown column 'foo'" in r.stderr and "dilation_w" in r.stderr
    r = subprocess.run([str(binary)], input="C,K\n1,2\n", capture_output=True, text=True)
    assert r.returncode == 2 and "required column 'N'" in r.stderr


def test_package_is_plain_c99_with_cmake_and_readme(shipped_package, tmp_path):
    res = shipped_package
    names = {f.name for f in res.files}
    assert {f"{res.name}.c", f"{res.name}.h", "ckheur_abi.h", "ckheur_select.c", "CMakeLists.txt",
            "README.md"} <= names
    includes = set()
    for f in res.files:
        if f.suffix in (".c", ".h"):
            includes |= {ln.split()[1] for ln in f.read_text().splitlines() if ln.startswith("#include")}
    assert includes <= {"<math.h>", "<stddef.h>", "<stdint.h>", "<string.h>", "<stdio.h>", "<stdlib.h>", "<time.h>",
                        "<limits.h>", f'"{res.name}.h"', '"ckheur_abi.h"'}
    r = subprocess.run([find_compiler(), "-std=c99", "-pedantic", "-Werror", "-Wall", "-c", str(res.path / f"{res.name}.c"),
                        "-o", str(tmp_path / "m.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert res.source_bytes < 2_000_000
    assert f"{res.name}_rank" in (res.path / "README.md").read_text()
    if shutil.which("cmake"):  # the CMake project builds the library and the program
        build_dir = tmp_path / "build"
        for cmd in (["cmake", "-S", str(res.path), "-B", str(build_dir)], ["cmake", "--build", str(build_dir)]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
        r = subprocess.run([str(build_dir / "ckheur_select")], input="N,C,K\n8,64,64\n", capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.startswith("row,rank,kernel,score\n0,1,grouped_conv_forward_")
    if shutil.which("c++"):  # the header serves C++ dispatchers
        src = tmp_path / "use.cpp"
        src.write_text(f'#include "{res.name}.h"\nint main() {{ return ckheur_{res.name}_num_kernels() > 0 ? 0 : 1; }}\n')
        r = subprocess.run(["c++", "-I", str(res.path), str(src), str(tmp_path / "m.o"), "-lm", "-o",
                            str(tmp_path / "use")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert subprocess.run([str(tmp_path / "use")]).returncode == 0


def test_miopen_package_compiles_without_warnings_as_its_readme_builds_it(tmp_path):
    """A shipped MIOpen bundle's C (no pair features; backward data, which needs no output-pixel
    count) at -O3, the README's build, where GCC looks for reads of uninitialized memory."""
    res = export_bundle(ROOT / "models" / "miopen_bwd_data_bf16_gfx942", tmp_path / "pkg")
    r = subprocess.run([find_compiler(), "-O3", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-c",
                        str(res.path / f"{res.name}.c"), "-o", str(tmp_path / "m.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_compiled_selector_and_fallback_without_compiler(monkeypatch):
    sel = Selector.load(SHIPPED, compiled=True)
    assert sel.compiled is not None and "[compiled C]" in sel.label
    p = {"N": 16, "C": 256, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1}
    want = Selector.load(SHIPPED).rank(p, 5)
    got = sel.rank(p, 5)
    assert [n for n, _ in got] == [n for n, _ in want]
    np.testing.assert_allclose([t for _, t in got], [t for _, t in want], rtol=1e-5)
    with pytest.raises(ProblemError, match="3D"):
        Selector.load(SHIPPED).select({**p, "Di": 4, "Z": 3, "pad_d": 1})
    with pytest.raises(ProblemError, match="no kernel of the pool"):
        sel.select({**p, "Di": 4, "Z": 3, "pad_d": 1})
    monkeypatch.setenv("CC", "no-such-compiler-ckheur")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fb = Selector.load(SHIPPED, compiled=True)
    assert fb.compiled is None and any("no C compiler" in str(x.message) for x in w)
    assert fb.rank(p, 5) == want


def test_export_refuses_trees_over_64_leaves_and_more_trees_than_it_numbers(monkeypatch):
    import lightgbm as lgb

    from ckheur.learn import forest

    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 4))
    b = lgb.train({"objective": "regression", "num_leaves": 100, "min_data_in_leaf": 2, "verbose": -1},
                  lgb.Dataset(X, X @ [1, 2, 3, 4] + np.sin(20 * X[:, 0])), 2)
    with pytest.raises(ExportError, match="at most 64 leaves"):
        read_forest(b)
    monkeypatch.setattr(forest, "MAX_TREES", 1)  # 65,535 in truth: a model that large takes minutes to train
    with pytest.raises(ExportError, match="the model has 2 trees; the C export numbers trees in 16 bits"):
        read_forest(b)


def test_export_stage_builds_and_checks(tmp_path):
    r = run_cli("stage=export", f"export.output={tmp_path / 'pkg'}", "export.check_problems=300",
                f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr
    assert "same top-1 kernel 300/300" in r.stdout
    assert (tmp_path / "pkg" / "ckheur_select").exists()
    r = run_cli("stage=export", "export.model_dir=nowhere", f"hydra.run.dir={tmp_path / 'run2'}")
    assert r.returncode != 0 and "nowhere" in r.stderr
    r = run_cli("stage=export", f"export.output={tmp_path / 'neg'}", "export.check_problems=-5")
    assert r.returncode == 2 and "export.check_problems=-5: must be an integer >= 1" in r.stderr
    assert not (tmp_path / "neg").exists()
    assert "a\n" in problems_csv([], ["a"])


def test_miopen_export_parity_on_real_find_db_problems_errors_and_cli(tmp_path, miopen_slices):
    """A solver-choice model trained on a real find-db slice: C equals Python on every imported
    problem (NCHW/NHWC, 2D/3D, grouped, bias), its own error codes, and the CLI reads layouts."""
    from ckheur.data.dataset import read_dataset
    from ckheur.families.miopen.problems import FIELDS, LAYOUTS, problem_from_dict
    from ckheur.backends.abi import MIOpenProblemC

    ds = miopen_slices / "miopen_bwd_weight_fp16_gfx942" / "gfx942130.parquet"
    r = run_cli("stage=train", "op=miopen/bwd_weight", "arch=gfx942", f"data.paths=[{ds}]", "model.max_trees=40",
                "train.folds=3", "train.cluster_cv=false", "train.screen=true", f"train.output={tmp_path / 'm'}",
                f"hydra.run.dir={tmp_path / 't'}")
    assert r.returncode == 0, r.stderr
    py, compiled = Selector.load(tmp_path / "m", cache_size=0), load_compiled(tmp_path / "m")
    assert compiled is not None and compiled.info["struct"] == "ckheur_miopen_problem"
    # train.screen chose a screen (C and Python rank through it alike, below)
    assert f"train: screen: the first {py.screen[0]} trees, the whole model for the best {py.screen[1]}" in r.stdout
    assert compiled.info["screen"] == list(py.screen)
    df = read_dataset(ds)
    real = [problem_from_dict(dict(zip(FIELDS, key))) for key, _ in df.groupby(list(FIELDS))]
    assert {p.layout for p in real} >= {"NCHW", "NHWC"} and any(p.ndim == 3 for p in real)
    assert any(p.G > 1 for p in real)
    got = assert_parity(py, compiled, real + random_problems(py.family, ["all"], 300, seed=4))
    assert got["ranked"] == len(real) + 300 and got["rejected"] == 0
    # Errors: the conv checks plus layout, bias, and a 2D layout with depth fields.
    lib, pre = compiled._lib, compiled.info["prefix"]
    rank, err = getattr(lib, f"{pre}_rank"), getattr(lib, f"{pre}_error")
    err.restype = ctypes.c_char_p
    idx, score = (ctypes.c_int * 4)(), (ctypes.c_float * 4)()
    good = dict(N=4, C=64, K=64, G=1, Di=1, Hi=14, Wi=14, Z=1, Y=3, X=3, stride_d=1, stride_h=1, stride_w=1,
                pad_d=0, pad_h=1, pad_w=1, dilation_d=1, dilation_h=1, dilation_w=1, layout=0, bias=0)

    def call(**over):
        s = MIOpenProblemC(**{**good, **over}, direction=2, dtype=0)
        code = rank(ctypes.byref(s), 4, idx, score)
        return code, (err(code).decode() if code < 0 else "")

    assert call()[0] == 4
    assert call(layout=4)[0] == -12 and "NDHWC" in call(layout=4)[1]
    assert call(bias=2)[0] == -14
    three_d = {**good, "Di": 4, "Z": 3, "pad_d": 1, "layout": "NCDHW"}
    ranked_3d = len(py.rank(problem_from_dict(three_d), k=4))  # the solvers MIOpen's rules keep for 3D
    assert call(Di=4, Z=3, pad_d=1)[0] == -15
    assert 1 <= ranked_3d and call(Di=4, Z=3, pad_d=1, layout=LAYOUTS.index("NCDHW"))[0] == ranked_3d
    assert call(C=63, G=2)[0] == -5 and call(N=0)[0] == -100
    with pytest.raises(ProblemError):  # Python refuses the same problem
        problem_from_dict({**good, "Di": 4, "Z": 3, "pad_d": 1, "layout": "NCHW"})
    # The command line takes layouts by name and says which are allowed.
    out = export_bundle(tmp_path / "m", tmp_path / "pkg")
    binary = build(out.path, out.name, find_compiler(), shared=False)
    rows = "N,C,K,Hi,Wi,Y,X,pad_h,pad_w,layout,bias\n16,64,64,28,28,3,3,1,1,NHWC,1\n16,64,64,28,28,3,3,1,1,CHWN,0\n"
    r = subprocess.run([str(binary), "--k", "2"], input=rows, capture_output=True, text=True)
    lines = r.stdout.splitlines()
    assert lines[0] == "row,rank,kernel,score" and len(lines) == 3 and lines[1].startswith("0,1,")
    p = problem_from_dict(dict(N=16, C=64, K=64, Hi=28, Wi=28, Y=3, X=3, pad_h=1, pad_w=1, layout="NHWC", bias=1))
    assert lines[1].split(",")[2] == py.rank(p, k=1)[0][0]
    assert "layout=CHWN: allowed values are NCHW, NHWC, NCDHW, NDHWC" in r.stderr


def _load_warned(bundle):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = load_compiled(bundle)
    return got, [str(x.message) for x in w]


def test_compiled_cache_rebuilds_damaged_entries(tmp_path, monkeypatch):
    """A truncated, garbage or deleted library, a corrupt export.json or a missing record: never
    loaded (no SIGBUS, no traceback), rebuilt once with a warning, then intact again."""
    from ckheur.c_export.compiled import bundle_hash, trusted_cache_dir
    from ckheur.parts import sha256_of

    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    m, w = _load_warned(SHIPPED)
    assert m is not None and not w
    root = trusted_cache_dir()
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    entry = root / bundle_hash(SHIPPED)
    lib = m.path
    good = lib.read_bytes()
    def replace(data):  # a new file: the library this process has loaded stays mapped intact
        lib.unlink()
        lib.write_bytes(data)

    damages = {
        "truncated": lambda: replace(good[: len(good) // 3]),
        "garbage": lambda: replace(b"\x7fELF" + b"\x00" * 4000),
        "deleted": lambda: lib.unlink(),
        "corrupt export.json": lambda: (entry / "export.json").write_text("{not json"),
        "no record": lambda: (entry / "cache.json").unlink(),
    }
    p = Selector.load(SHIPPED).family.problems.problem_from_dict({"N": 4, "C": 64, "K": 64, "Hi": 14, "Wi": 14,
                                                                  "Y": 3, "X": 3})
    for name, damage in damages.items():
        damage()
        m, w = _load_warned(SHIPPED)
        assert m is not None, name
        assert any("rebuilding" in x for x in w), (name, w)
        assert sha256_of(m.path) == json.loads((entry / "cache.json").read_text())["lib_sha256"], name
        assert len(m.predict(p)[0]) == 20, name
        lib = m.path


def test_compiled_cache_never_loads_what_it_did_not_build(tmp_path, monkeypatch):
    """A cache folder writable by others or owned by another user, or a cache path that cannot be
    a folder: refused with a warning, a private folder used; a library planted there never runs."""
    import os

    from ckheur.c_export.compiled import bundle_hash

    marker = tmp_path / "planted_ran"
    src = tmp_path / "evil.c"
    src.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void f(void) {{ FILE* f = fopen("{marker}", "w"); '
                   'if (f) fclose(f); }\n')
    shared = tmp_path / "shared"
    shared.mkdir()
    entry = shared / bundle_hash(SHIPPED)
    entry.mkdir()
    pkg = export_bundle(SHIPPED, tmp_path / "pkg")
    subprocess.run([find_compiler(), "-shared", "-fPIC", "-o", str(entry / f"lib{pkg.name}.so"), str(src)], check=True)
    (entry / "export.json").write_text((tmp_path / "pkg" / "export.json").read_text())
    (entry / "cache.json").write_text(json.dumps({"lib_sha256": "0" * 64}))
    os.chmod(shared, 0o777)
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(shared))
    m, w = _load_warned(SHIPPED)
    assert m is not None and not str(m.path).startswith(str(shared)) and not marker.exists()
    assert any("writable by others" in x and "private folder" in x for x in w), w
    if os.getuid() == 0:  # root can hand the folder to another user
        os.chmod(shared, 0o700)
        os.chown(shared, 65534, 65534)
        m, w = _load_warned(SHIPPED)
        assert m is not None and not marker.exists() and any("owned by uid 65534" in x for x in w), w
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "file" / "cache"))
    m, w = _load_warned(SHIPPED)
    assert m is not None and any("cannot be used" in x for x in w), w


def test_export_never_destroys_a_users_files(tmp_path, monkeypatch):
    """A folder holding anything but an earlier export of the same model is refused (one error line,
    exit 2, files untouched) unless export.overwrite=true; reserved and overlong names and an output
    that is a file are refused; the self-check runs the binary just built, never one on PATH."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("my project\n")
    (project / "CMakeLists.txt").write_text("project(mine)\n")
    common = ["stage=export", "export.check_problems=50", f"hydra.run.dir={tmp_path / 'run'}"]
    r = run_cli(*common, "export.output=.", cwd=project)
    assert r.returncode == 2 and "export.overwrite=true" in r.stderr and "Traceback" not in r.stderr
    assert (project / "README.md").read_text() == "my project\n" and sorted(p.name for p in project.iterdir()) == \
        ["CMakeLists.txt", "README.md"]
    # A planted ckheur_select first on PATH never runs: the check runs the built one by absolute path.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    planted = bin_dir / "ckheur_select"
    planted.write_text(f"#!/bin/sh\ntouch {tmp_path / 'planted_ran'}\n")
    planted.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    r = run_cli(*common, "export.output=.", cwd=pkg)
    assert r.returncode == 0, r.stderr
    assert "same top-1 kernel 50/50" in r.stdout and not (tmp_path / "planted_ran").exists()
    # an earlier export of the same model: replaced (unbuilt: the build was checked just above)
    r = run_cli(*common, "export.output=.", "export.build=false", cwd=pkg)
    assert r.returncode == 0, r.stderr
    r = run_cli(*common, "export.output=.", "export.name=other", cwd=pkg)
    assert r.returncode == 2 and "not an earlier export of this model as other" in r.stderr
    r = run_cli(*common, "export.output=.", "export.overwrite=true", "export.build=false", cwd=project)
    assert r.returncode == 0 and "ckheur" in (project / "README.md").read_text()
    for name, msg in (("ckheur_abi", "package's own"), ("ckheur_select", "package's own"), ("x" * 300, "at most 128")):
        r = run_cli(*common, f"export.output={tmp_path / 'n'}", f"export.name={name}")
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
    (tmp_path / "afile").write_text("x")
    r = run_cli(*common, f"export.output={tmp_path / 'afile'}")
    assert r.returncode == 2 and "is a file" in r.stderr
