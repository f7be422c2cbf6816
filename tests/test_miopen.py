"""MIOpen find-db: the reader (both entry formats, 2D/3D keys, the backward swap, layouts, dtypes,
groups, what is skipped and why), the miopen family, the import stage (censored rows, idempotent
by content), training with censored solvers ranked last, and the solver-choice metrics. Real
data: slices of AMD's find-db files (tests/data/miopen_fdb, every 60th line)."""

from __future__ import annotations

import bz2
import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ckheur.metrics import censored_choice_report
from ckheur.integrations.miopen.find_db import FindDbError, arch_from_name, parse_line, problem_key, read_find_db
from ckheur.families.problem_base import ProblemError
from ckheur.families.miopen.problems import problem_from_dict
from conftest import ROOT, cut_forest, run_cli

SLICES = ROOT / "tests" / "data" / "miopen_fdb"
MI300X = SLICES / "gfx942130.HIP.fdb.txt.bz2"
MI210 = SLICES / "gfx90a68.HIP.fdb.txt.bz2"
SHARED_FDB = ROOT.parent / "shared" / "data" / "miopen_fdb"
SHARED_MI300X = SHARED_FDB / "gfx942130.HIP.fdb.txt.bz2"

LINES = [
    # forward, grouped, fp16: the data README's example (C=K=256, 56x56, 3x3, pad 1, G=32, N=32)
    "256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g32=ConvBinWinogradRxSf2x3:0.22021,0,"
    "miopenConvolutionFwdAlgoWinograd;ConvHipImplicitGemmGroupFwdXdlops:0.877855,102797312,"
    "miopenConvolutionFwdAlgoImplicitGEMM",
    # backward data: the first block is dy (K=64 channels, 28x28), the second x (C=32, 56x56); stride 2
    "64-28-28-3x3-32-56-56-8-1x1-2x2-1x1-0-NCHW-FP32-B=GemmBwdRest:0.5,100,miopenConvolutionBwdDataAlgoGEMM;"
    "ConvDirectNaiveConvBwd:0.25,0,miopenConvolutionBwdDataAlgoDirect",
    # backward weights, 3D, bf16, NCDHW
    # (a templated solver name: its parameters in <>)
    "16-4-8-8-3x3x3-8-4-8-8-2-1x1x1-1x1x1-1x1x1-1-NCDHW-BF16-W=ConvHipImplicitGemm3DGroupWrwXdlops:1.5,64,"
    "miopenConvolutionBwdWeightsAlgoImplicitGEMM;ConvWinograd3x3MultipassWrW<3-2>:2.5,128,"
    "miopenConvolutionBwdWeightsAlgoWinograd",
    # older entry format, NHWC on all three tensors, out of time order, a zero time and a repeated solver
    "32-14-14-1x1-64-14-14-4-0x0-1x1-1x1-0-NHWC-NHWC-NHWC-FP16-F=miopenConvolutionFwdAlgoGEMM:GemmFwd1x1_0_1,0.3,0,"
    "rocBlas,0;miopenConvolutionFwdAlgoDirect:ConvDirectNaiveConvFwd,0.1,0,miopenConvolutionFwdAlgoDirect,0;"
    "GemmFwdRest:0.000,0,miopenConvolutionFwdAlgoGEMM;GemmFwd1x1_0_1:0.2,0,miopenConvolutionFwdAlgoGEMM",
    # skipped: output size wrong (3x3 pad 0 on 56 gives 54, not 56), mixed layouts, mixed dtypes, garbage
    "64-56-56-3x3-64-56-56-1-0x0-1x1-1x1-0-NCHW-FP32-F=ConvDirectNaiveConvFwd:1.0,0,miopenConvolutionFwdAlgoDirect",
    "64-56-56-1x1-64-56-56-1-0x0-1x1-1x1-0-NCHW-NHWC-NCHW-FP32-F=ConvDirectNaiveConvFwd:1.0,0,"
    "miopenConvolutionFwdAlgoDirect",
    "64-56-56-1x1-64-56-56-1-0x0-1x1-1x1-0-NCHW-FP16FP16FP32-F=ConvDirectNaiveConvFwd:1.0,0,"
    "miopenConvolutionFwdAlgoDirect",
    "this is not a find-db line",
]


@pytest.fixture
def small_fdb(tmp_path) -> Path:
    path = tmp_path / "gfx942130.HIP.fdb.txt.bz2"
    path.write_bytes(bz2.compress(("\n".join(LINES) + "\n").encode()))
    return path


def test_reader_on_hand_written_lines(small_fdb):
    fdb = read_find_db(small_fdb)
    p, e = fdb.problems, fdb.entries
    assert len(p) == 4 and fdb.report["lines"] == len(LINES)
    assert fdb.report["skipped_keys"] == {"sizes do not satisfy the output-size formula": 1,
                                          "mixed tensor layouts": 1, "mixed data types": 1,
                                          "not a KEY=ENTRY line": 1}
    assert fdb.report["skipped_entries"] == {"time 0 (not a measurement)": 1,
                                             "solver listed twice for a problem (the faster kept)": 1}
    row = lambda i, *cols: tuple(p.iloc[i][c] for c in cols)  # noqa: E731
    assert row(0, "direction", "dtype", "N", "C", "K", "G", "Hi", "Y", "pad_h", "layout") == \
        ("fwd", "fp16", 32, 256, 256, 32, 56, 3, 1, "NCHW")
    # backward data, swapped back: C, Hi from the second block
    assert row(1, "direction", "dtype", "C", "K", "Hi", "Wi", "stride_h") == ("bwd_data", "fp32", 32, 64, 56, 56, 2)
    assert row(2, "direction", "dtype", "C", "K", "Di", "Z", "layout", "bias") == ("bwd_weight", "bf16", 8, 16, 4, 3,
                                                                                   "NCDHW", 1)
    assert p.iloc[3].layout == "NHWC"
    got = {(int(r.problem), r.solver): (r.time_ms, r.workspace, r.algorithm) for r in e.itertuples()}
    assert got[(0, "ConvHipImplicitGemmGroupFwdXdlops")] == (0.877855, 102797312, "implicit_gemm")
    assert got[(2, "ConvWinograd3x3MultipassWrW<3-2>")] == (2.5, 128, "winograd")
    assert got[(3, "GemmFwd1x1_0_1")] == (0.2, 0, "gemm")  # older format parsed; the faster repeat kept
    assert (3, "GemmFwdRest") not in got  # time 0 dropped
    assert fdb.report["problems_out_of_time_order"] == 2  # the backward-data and the NHWC lines
    assert list(e[e.problem == 3].solver) == ["ConvDirectNaiveConvFwd", "GemmFwd1x1_0_1"]  # sorted by time
    for row in p.itertuples(index=False):  # every kept key is a valid problem of the family
        problem_from_dict({k: v for k, v in row._asdict().items() if k not in ("direction", "dtype")})


def test_arch_and_cus_from_the_file_name():
    known = ["gfx90a", "gfx942", "gfx950", "gfx906"]
    assert arch_from_name("gfx942130.HIP.fdb.txt.bz2", known) == ("gfx942", 304)
    assert arch_from_name("/x/gfx90a68.HIP.fdb.txt", known) == ("gfx90a", 104)
    assert arch_from_name("gfx906_60.HIP.fdb.txt.bz2", known) == ("gfx906", 60)
    with pytest.raises(FindDbError, match="known arch"):
        arch_from_name("gfx1100.HIP.fdb.txt", known)


def test_real_slices_parse_with_every_direction_dtype_and_layout():
    for path, arch in ((MI300X, "gfx942"), (MI210, "gfx90a")):
        fdb = read_find_db(path)
        p = fdb.problems
        assert fdb.report["problems"] > 0.99 * fdb.report["lines"] - 20
        assert set(p.direction) == {"fwd", "bwd_data", "bwd_weight"} and set(p.dtype) == {"fp32", "fp16", "bf16"}
        assert {"NCHW", "NCDHW"} <= set(p.layout) and (p.G > 1).any()
        assert (fdb.entries.time_ms > 0).all() and fdb.entries.groupby("problem").size().max() <= 4


@pytest.mark.skipif(not SHARED_MI300X.exists(), reason="../shared/data/miopen_fdb not beside the checkout")
def test_whole_mi300x_file_matches_its_readme():
    """The data README's counts: 174,358 lines, about 0.2% of keys fail the output-size formula, a
    few hundred zero times, 26 solvers (12 forward, 12 backward data, 9 backward weights)."""
    fdb = read_find_db(SHARED_MI300X)
    r = fdb.report
    assert r["lines"] == 174358 and r["skipped_keys"] == {"sizes do not satisfy the output-size formula": 327}
    assert 100 < r["skipped_entries"]["time 0 (not a measurement)"] < 1200
    direction = fdb.problems.direction.to_numpy()[fdb.entries.problem.to_numpy()]
    counts = fdb.entries.assign(d=direction).groupby("d").solver.nunique().to_dict()
    assert counts == {"fwd": 12, "bwd_data": 12, "bwd_weight": 9} and fdb.entries.solver.nunique() == 26


def _lines(path: Path) -> list[str]:
    with bz2.open(path, "rt") as f:
        return f.read().splitlines()


@pytest.mark.skipif(not (SHARED_FDB / "gfx90a68.HIP.fdb.txt.bz2").exists(),
                    reason="../shared/data/miopen_fdb not beside the checkout (the slices' lines are checked below)")
def test_every_line_of_both_find_dbs_is_written_back_exactly():
    """MIOpen's text, exactly: a parsed line written back is the line, on all 367,844 lines."""
    for name, count in (("gfx942130.HIP.fdb.txt.bz2", 174358), ("gfx90a68.HIP.fdb.txt.bz2", 193486)):
        lines = _lines(SHARED_FDB / name)
        assert len(lines) == count and [ln for ln in lines if parse_line(ln).text() != ln] == []


def test_lines_round_trip_and_problems_get_miopens_keys():
    """The slices' lines are written back exactly, and every problem the reader keeps (forward
    terms) is filed under its line's key again: the backward swap, 3D, layouts, groups."""
    for path in (MI300X, MI210):
        lines = _lines(path)
        assert [ln for ln in lines if parse_line(ln).text() != ln] == []
        keys = {ln.partition("=")[0] for ln in lines}
        fdb = read_find_db(path)
        rows = fdb.problems.to_dict("records")
        got = {problem_key(problem_from_dict({k: v for k, v in r.items() if k not in ("direction", "dtype")}),
                           r["direction"], r["dtype"]).text() for r in rows}
        assert len(got) == len(rows) > 2000 and got <= keys
    line = parse_line("32-14-14-1x1-64-14-14-4-0x0-1x1-1x1-0-NHWC-NHWC-NHWC-FP16-F=GemmFwd1x1_0_1:0.20,0,"
                      "miopenConvolutionFwdAlgoGEMM")
    assert line.key.layouts == ("NHWC",) * 3 and line.entries[0].time_ms == 0.2
    assert line.text().endswith(":0.20,0,miopenConvolutionFwdAlgoGEMM")  # the file's spelling is kept
    for bad, what in (("1-2-3=ConvX:1,0,miopenConvolutionFwdAlgoDirect", "not C-H-W-YxX"),
                      (LINES[1].replace(":0.5,100,", ":0.5,-1,"), "is not Solver:time,workspace,algorithm"),
                      (LINES[1].replace("-8-1x1-2x2", "-08-1x1-2x2"), "'08' is not a number"),
                      ("no equals sign", "not KEY=ENTRY")):
        with pytest.raises(FindDbError, match=what):
            parse_line(bad)


def test_problem_type_keys_on_layout_and_bias():
    p = problem_from_dict({"N": 32, "C": 256, "K": 256, "G": 32, "Hi": 56, "Wi": 56, "Y": 3, "X": 3, "pad_h": 1,
                           "pad_w": 1, "layout": "NHWC", "bias": 1})
    q = problem_from_dict({**p.to_dict(), "layout": "NCHW"})
    assert p.key() != q.key() and p.flops == q.flops == 2 * 32 * 256 * 56 * 56 * 8 * 9
    assert problem_from_dict({"N": 1, "C": 4, "K": 4, "Di": 1, "layout": "NCDHW"}).ndim == 3  # depth 1, still 3D
    with pytest.raises(ProblemError, match="layout='NWHC'"):
        problem_from_dict({"N": 1, "C": 4, "K": 4, "layout": "NWHC"})
    with pytest.raises(ProblemError, match="is 2D but depth fields are set"):
        problem_from_dict({"N": 1, "C": 4, "K": 4, "Di": 3})
    with pytest.raises(ProblemError, match="bias=2"):
        problem_from_dict({"N": 1, "C": 4, "K": 4, "bias": 2})


def test_import_writes_censored_rows_and_is_idempotent_by_content(tmp_path):
    from ckheur.data.dataset import read_dataset

    src = tmp_path / "src" / MI300X.name
    src.parent.mkdir()
    src.write_bytes(MI300X.read_bytes())
    data = tmp_path / "data"
    r = run_cli("stage=import", f"import.path={src}", f"paths.data={data}", f"hydra.run.dir={tmp_path / 'r1'}")
    assert r.returncode == 0, r.stderr
    assert "gfx942, 304 CUs" in r.stdout
    ds = data / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet"
    df = read_dataset(ds)
    pool = 12  # the forward solver table of gfx942 (conf/op/miopen/fwd.yaml)
    problems = df.groupby(["N", "C", "K", "G", "Hi", "Wi", "Y", "X", "layout"]).ngroups
    assert df.kernel.nunique() == pool and len(df) % pool == 0
    assert set(df.status) == {"ok", "censored"} and (df[df.status == "censored"].latency_ms.isna()).all()
    listed = df[df.status == "ok"].groupby(["N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "stride_h",
                                            "pad_h", "dilation_h", "layout", "bias"]).size()
    assert listed.max() <= 4 and problems <= len(df) // pool
    assert (df[df.status == "ok"].tflops > 0).all() and set(df.backend) == {"miopen_fdb"}
    r = run_cli("stage=import", f"import.path={src}", f"paths.data={data}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0 and r.stdout.count("nothing to do") == 9
    assert len(read_dataset(ds, dedupe=False)) == len(df)
    # Another file of the same name: refused, then replaced on request.
    lines = bz2.decompress(src.read_bytes()).decode().splitlines()
    src.write_bytes(bz2.compress(("\n".join(lines[:500]) + "\n").encode()))
    r = run_cli("stage=import", f"import.path={src}", f"paths.data={data}", f"hydra.run.dir={tmp_path / 'r3'}")
    assert r.returncode == 2 and "import.overwrite=true replaces everything" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("stage=import", f"import.path={src}", f"paths.data={data}", "import.overwrite=true",
                f"hydra.run.dir={tmp_path / 'r4'}")
    assert r.returncode == 0, r.stderr
    assert len(read_dataset(ds)) < len(df) and any(p.name.startswith("gfx942130.parquet.replaced-")
                                                   for p in ds.parent.iterdir())


def test_bad_find_db_is_one_clear_error(tmp_path):
    bad = tmp_path / "gfx942130.HIP.fdb.txt.bz2"
    bad.write_bytes(b"BZh91AY&SY truncated")
    r = run_cli("stage=import", f"import.path={bad}", f"paths.data={tmp_path}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "cannot be read" in r.stderr and "Traceback" not in r.stderr
    odd = tmp_path / "gfx1234.HIP.fdb.txt"
    odd.write_text(LINES[0] + "\n")
    r = run_cli("stage=import", f"import.path={odd}", f"paths.data={tmp_path}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 2 and "import.arch" in r.stderr
    r = run_cli("stage=import", f"import.path={odd}", "import.arch=gfx942", f"paths.data={tmp_path / 'd'}",
                f"hydra.run.dir={tmp_path / 'r3'}")
    assert r.returncode == 0, r.stderr
    # a file whose name is no find-db's is read as a CK CSV, which a MIOpen op cannot import: one line, no data
    log = tmp_path / "app.log"
    log.write_text("MIOpen(HIP): Command [LogCmdConvolution] ./bin/MIOpenDriver conv -n 8 -c 64 -H 56 -W 56 -k 64\n")
    r = run_cli("stage=import", f"import.path={log}", "op=miopen/fwd", f"paths.data={tmp_path / 'e'}",
                f"hydra.run.dir={tmp_path / 'r4'}")
    assert r.returncode == 2 and "not a MIOpen find-db by its name" in r.stderr and "not a miopen op" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "e").exists()


def test_training_ranks_censored_solvers_last(tmp_path, miopen_slices):
    """A model trained on an imported slice: censored rows are in the table with TFLOPS 0 (label 0
    under `relative`), and the model scores listed solvers above censored ones on its training data."""
    from ckheur.data.dataset import read_dataset
    from ckheur.families.engines import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.learn.training import build_table, fit
    from ckheur.stages import compose_config, plain

    data = miopen_slices
    cfg = compose_config(["op=miopen/fwd", "arch=gfx942", "op.dtype=fp32", "model.max_trees=30"])
    op, arch, model = plain(cfg.op), plain(cfg.arch), plain(cfg.model)
    df = read_dataset(data / "miopen_fwd_fp32_gfx942" / "gfx942130.parquet")
    tb = build_table(df, op, arch, enumerate_pool(op, arch).kernels, get_engine("miopen"), None)
    assert tb.report["rows_censored"] == int((df.status == "censored").sum()) > 0
    assert tb.full.all() and (tb.tflops == 0).sum() == tb.report["rows_censored"]
    assert tb.report["problems_only_censored"] == 0
    # A problem with no listed solver of the pool (all censored) has nothing to rank against: left out.
    first = df[df.status == "ok"].iloc[0]
    same = (df[["N", "C", "K", "G", "Hi", "Wi", "Y", "X", "pad_h", "stride_h", "layout", "bias", "Di", "Z"]]
            == first[["N", "C", "K", "G", "Hi", "Wi", "Y", "X", "pad_h", "stride_h", "layout", "bias", "Di", "Z"]]).all(axis=1)
    censored_all = df.copy()
    censored_all.loc[same, "status"] = "censored"
    tb2 = build_table(censored_all, op, arch, enumerate_pool(op, arch).kernels, get_engine("miopen"), None)
    assert tb2.report["problems_only_censored"] == 1 and len(tb2.problems) == len(tb.problems) - 1
    cat = [tb.feature_names.index(c) for c in get_engine("miopen").CATEGORICAL]
    b = fit(tb, np.arange(len(tb.X)), model, "relative", cat, 0, 30)
    s = b.predict(tb.X)
    assert s[tb.tflops > 0].mean() > s[tb.tflops == 0].mean() + 0.3
    time_ms = np.where(tb.tflops > 0, 1.0 / np.maximum(tb.tflops, 1e-30), np.nan)
    rep = censored_choice_report(tb.pid, s, time_ms)
    assert rep["open"]["picks_outside_listed"] < 0.05 and rep["open"]["top1"] > 0.5
    r = run_cli("stage=train", "op=miopen/fwd", "arch=gfx942", "op.dtype=fp32",
                f"data.paths=[{data / 'miopen_fwd_fp32_gfx942' / 'gfx942130.parquet'}]", "model.max_trees=20",
                "train.folds=3", "train.cluster_cv=false", f"train.output={tmp_path / 'model'}",
                f"hydra.run.dir={tmp_path / 'rt'}")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "model" / "train_manifest.json").read_text())["data_kind"] == "real"
    assert json.loads((tmp_path / "model" / "feature_spec.json").read_text())["trained_devices"] == \
        ["MI300X (gfx942, 304 CUs)"]  # the device its rows were measured on (the find-db's name says it)
    # stage=evaluate reports the picks in find-db terms beside ours; the two computations agree.
    r = run_cli("stage=evaluate", "op=miopen/fwd", "arch=gfx942", "op.dtype=fp32", f"evaluate.model_dir={tmp_path / 'model'}",
                f"data.eval_paths=[{data / 'miopen_fwd_fp32_gfx942' / 'gfx942130.parquet'}]", "evaluate.plots=false",
                f"hydra.run.dir={tmp_path / 're'}")
    assert r.returncode == 0, r.stderr
    assert "censored candidates" in r.stdout
    m = json.loads((tmp_path / "re" / "metrics.json").read_text())
    per = pd.read_csv(tmp_path / "re" / "per_problem.csv")
    assert "analytic model" not in m["baselines"] and set(m["by_pick_pipeline"]) <= {"direct", "implicit_gemm", "winograd", "gemm", "fft"}
    # beside it, what this GPU would get without a model of its own: the nearest other GPU's bundle, as it is
    name = "gfx90a bundle as is (the nearest other GPU with one)"
    assert m["baselines"][name]["problems_it_could_not_rank"] == 0 and 0 < m["baselines"][name]["mean"] < 1
    assert m["censored_beside"][name]["problems"] == len(per)  # in find-db terms too
    o, li = m["censored"]["all"]["open"], m["censored"]["all"]["listed"]
    assert o["problems"] == len(per) == m["problems_evaluated"]
    assert o["picks_outside_listed"] == pytest.approx((per.efficiency == 0).mean())
    assert o["top1"] == pytest.approx(per.top1.mean()) and o["efficiency"]["mean"] == pytest.approx(per.efficiency.mean())
    assert li["picks_outside_listed"] == 0 and li["top1"] >= o["top1"]
    assert set(m["censored"]["slices"]) >= {"1x1", "NHWC"}
    # The bundle ranks solvers for a MIOpenDriver line (layout and bias flags read), in the stage and the API.
    line = "conv -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -g 32 -F 1 -I NHWC -b 1"
    r = run_cli("stage=predict", "op=miopen/fwd", "arch=gfx942", "op.dtype=fp32", f"predict.model_dir={tmp_path / 'model'}",
                f"problem={line}", f"hydra.run.dir={tmp_path / 'rp'}")
    assert r.returncode == 0, r.stderr
    assert "N32 C256 K256 G32 56x56 k3x3 s1 p1 NHWC bias" in r.stdout and "selected: " in r.stdout
    from ckheur import Selector
    from ckheur.families.miopen.solvers import rule_rejections
    from ckheur.selection.selector import as_problem

    sel = Selector.load(tmp_path / "model")
    ranked = sel.rank(line, k=None)
    assert ranked[0][0] == r.stdout.split("selected: ")[1].split()[0]
    # a model trained without op.applicability ranks the solvers of the 12-solver table MIOpen's rules keep
    p = as_problem(line, sel.family, "fwd", "fp32")
    kept = {k.name for k in sel.kernels if not rule_rejections(k.name, p, "fwd", "fp32")}
    assert {k for k, _ in ranked} == kept and 0 < len(kept) < len(sel.kernels) == 12
    assert len(Selector.load(tmp_path / "model", applicability="none").rank(line, k=None)) == 12
    # op.applicability=both learns op.listed from the training rows: what the find-db lists, per kind.
    r = run_cli("stage=train", "op=miopen/fwd", "arch=gfx942", "op.dtype=fp32", "op.applicability=both",
                f"data.paths=[{data / 'miopen_fwd_fp32_gfx942' / 'gfx942130.parquet'}]", "model.max_trees=5",
                "train.folds=2", "train.cluster_cv=false", f"train.output={tmp_path / 'both'}",
                f"hydra.run.dir={tmp_path / 'rb'}")
    assert r.returncode == 0, r.stderr
    from ckheur.integrations.miopen.find_db import learn_listed

    fp32 = {s: [k for k in kinds if "/fp32/" in k] for s, kinds in learn_listed(read_find_db(MI300X), "fwd").items()}
    op_config = json.loads((tmp_path / "both" / "feature_spec.json").read_text())["op_config"]
    assert op_config["applicability"] == "both" and op_config["listed"] == {s: k for s, k in fp32.items() if k}
    # A smaller TFLOPS companion, refitted on the same data: the ranking is the model's, unchanged.
    from ckheur.learn.trainer import refit_companion

    refit_companion(tmp_path / "model", [data / "miopen_fwd_fp32_gfx942" / "gfx942130.parquet"], leaves=3, log=str)
    again = Selector.load(tmp_path / "model")
    assert [k for k, _ in again.rank(line, k=None)] == [k for k, _ in ranked]
    assert max(t["num_leaves"] for t in again.tflops_booster.dump_model()["tree_info"]) <= 3
    assert json.loads((tmp_path / "model" / "train_manifest.json").read_text())["companion_refit"]["leaves"] == 3
    r = run_cli("stage=predict", "op=miopen/fwd", "arch=gfx942", "op.dtype=fp32", f"paths.models={tmp_path / 'none'}",
                f"paths.sim_models={tmp_path / 'none'}", f"problem={line}", f"hydra.run.dir={tmp_path / 'rp2'}")
    assert r.returncode == 2 and "no analytic model to fall back on" in r.stderr
    r = run_cli("stage=train", "op=miopen/fwd", "arch=gfx942", "features.analytic=true",
                f"data.paths=[{data / 'miopen_fwd_fp16_gfx942' / 'gfx942130.parquet'}]",
                f"train.output={tmp_path / 'm2'}", f"hydra.run.dir={tmp_path / 'rt2'}")
    assert r.returncode == 2 and "no analytic model" in r.stderr
    r = run_cli("stage=train", "op=miopen/fwd", "arch=gfx942", "model.prior=analytic",
                f"data.paths=[{data / 'miopen_fwd_fp16_gfx942' / 'gfx942130.parquet'}]",
                f"train.output={tmp_path / 'm3'}", f"hydra.run.dir={tmp_path / 'rt3'}")
    assert r.returncode == 2 and "model.prior=analytic: the miopen family has no analytic model" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m3").exists()


def test_censored_choice_report_hand_computed():
    pid = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    scores = np.array([.9, .5, .1, .2, .8, .1, .3, .9])
    t = np.array([2.0, 1.0, np.nan, 1.0, np.nan, 3.0, 5.0, 5.05])
    r = censored_choice_report(pid, scores, t)
    o, li = r["open"], r["listed"]
    # open: picks 2.0 (best 1.0), a censored one, 5.05 (best 5.0, within 2%)
    assert o["top1"] == 0 and o["top1_tie_aware"] == pytest.approx(1 / 3)
    assert o["mean_slowdown"] == pytest.approx((1.0 + 0.01) / 2) and o["picks_outside_listed"] == pytest.approx(1 / 3)
    assert o["efficiency"]["mean"] == pytest.approx((0.5 + 0 + 5 / 5.05) / 3)
    assert o["time_weighted"] == pytest.approx(6 / 7.05)
    # listed: problem 1 picks its listed 1.0 (the best)
    assert li["top1"] == pytest.approx(1 / 3) and li["picks_outside_listed"] == 0
    assert li["efficiency"]["mean"] == pytest.approx((0.5 + 1 + 5 / 5.05) / 3)
    # a row the selector does not rank (-inf: a solver it does not know) is never picked, but its
    # time is the best when it is fastest: problem 0's 1.0 unranked leaves the 2.0 pick at 50%
    unranked = np.where(np.arange(8) == 1, -np.inf, scores)
    o2, li2 = (censored_choice_report(pid, unranked, t)[k] for k in ("open", "listed"))
    assert o2 == o and li2["efficiency"]["mean"] == li["efficiency"]["mean"]
    both_unranked = np.where(np.isin(np.arange(8), [3, 5]), -np.inf, scores)  # problem 1: only its censored one
    o3, li3 = (censored_choice_report(pid, both_unranked, t)[k] for k in ("open", "listed"))
    assert o3["efficiency"]["mean"] == o["efficiency"]["mean"] and li3["picks_outside_listed"] == pytest.approx(1 / 3)


SHIPPED = {(arch, d): ROOT / "models" / f"miopen_{d}_fp16_{arch}" for arch in ("gfx942", "gfx90a")
           for d in ("fwd", "bwd_data", "bwd_weight")}


@pytest.mark.parametrize("arch,direction", sorted(SHIPPED))
def test_shipped_miopen_models_pick_listed_solvers_on_real_problems(miopen_slices, arch, direction):
    """Each shipped bundle: real find-db data, the op's solver table, and on the real slice its
    picks are listed solvers far more often, and the fastest far more often, than the best fixed solver's."""
    from ckheur import Selector
    from ckheur.data.dataset import read_dataset

    bundle = SHIPPED[arch, direction]
    manifest = json.loads((bundle / "train_manifest.json").read_text())
    assert manifest["data_kind"] == "real" and manifest["data_backend"] == ["miopen_fdb"]
    sel = Selector.load(bundle)
    fdb = MI300X if arch == "gfx942" else MI210
    df = read_dataset(miopen_slices / f"miopen_{direction}_fp16_{arch}" / f"{fdb.name.split('.')[0]}.parquet")
    assert sorted(k.name for k in sel.kernels) == sorted(set(df.kernel))
    fields = list(sel.family.problems.FIELDS)
    pid, scores, times, names = [], [], [], []
    for i, (key, g) in enumerate(df.groupby(fields)):
        ranked = dict(sel.rank(problem_from_dict(dict(zip(fields, key))), k=None))
        t = np.where(g.status == "ok", 1.0 / g.tflops.clip(lower=1e-30), np.nan)
        pid += [i] * len(g)
        scores += [ranked.get(k, -np.inf) for k in g.kernel]  # a solver op.applicability masks is never picked
        times += list(t)
        names += list(g.kernel)
    pid, scores, times, names = map(np.asarray, (pid, scores, times, names))
    model = censored_choice_report(pid, scores, times)["open"]
    fixed = max((censored_choice_report(pid, (names == k).astype(float), times)["open"] for k in set(names)),
                key=lambda rep: rep["top1"])
    assert model["picks_outside_listed"] < 0.03 and model["top1"] > fixed["top1"] + 0.2, (model, fixed)


def _forward_fp16_lines(path: Path) -> list[tuple[str, str, dict, dict]]:
    """The file's 2D NCHW FP16 forward lines (no zero times), read here from the text: (line, its
    MIOpenDriver command, its problem fields, {solver: time})."""
    out = []
    for line in _lines(path):
        key, _, values = line.partition("=")
        if not key.endswith("-NCHW-FP16-F") or "0.000," in values or ":0," in values:
            continue
        c, h, w, yx, k, _ho, _wo, n, pad, stride, dil, _bias = key.split("-")[:12]
        (y, x), (p, q), (u, v), (dl, dj) = (s.split("x") for s in (yx, pad, stride, dil))
        driver = f"convfp16 -n {n} -c {c} -H {h} -W {w} -k {k} -y {y} -x {x} -p {p} -q {q} -u {u} -v {v} -l {dl} -j {dj}"
        fields = dict(N=int(n), C=int(c), K=int(k), Hi=int(h), Wi=int(w), Y=int(y), X=int(x), pad_h=int(p),
                      pad_w=int(q), stride_h=int(u), stride_w=int(v), dilation_h=int(dl), dilation_w=int(dj))
        times = {e.split(":")[0]: float(e.split(":")[1].split(",")[0]) for e in values.split(";")}
        out.append((line, driver, fields, times))
    return out


def test_find_db_answers_first_as_miopen_does(tmp_path):
    """A problem the find-db lists is answered with its fastest listed solver and time, however it
    is spelled (fields, a MIOpenDriver line); others go to the model; a find-db of another GPU or
    for another family is refused."""
    from ckheur import Selector

    sel = Selector.load(SHIPPED["gfx942", "fwd"], find_db=MI300X)
    listed = _forward_fp16_lines(MI300X)
    for line, driver, fields, times in listed:
        fastest = min(times, key=times.get)
        got = sel.select(driver)
        assert (got.kernel, got.source, got.latency_ms) == (fastest, "find_db", times[fastest]), line
        assert sel.select(fields).source == "find_db"
        assert sel.select({**fields, "N": fields["N"] + 7919}).source == "model"  # not listed
    assert len(listed) > 150
    with pytest.raises(FindDbError, match="not a find-db of gfx942"):
        Selector.load(SHIPPED["gfx942", "fwd"], find_db=MI210)
    with pytest.raises(ProblemError, match="op family miopen"):
        Selector.load(ROOT / "models" / "grouped_conv_fwd_bf16_gfx950", find_db=MI300X)


def test_shipped_miopen_model_predicts_a_driver_line_and_exports_exactly(tmp_path, monkeypatch, miopen_slices):
    """The issue's command ranks solvers with the shipped bundle; its C export equals Python on the
    real slice's problems."""
    r = run_cli("stage=predict", "op=miopen/bwd_weight", "arch=gfx942",
                "problem=convfp16 -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -g 32 -F 4",
                f"hydra.run.dir={tmp_path / 'p'}")
    assert r.returncode == 0, r.stderr
    assert "miopen_bwd_weight_fp16_gfx942" in r.stdout and "(tier: training_data)" in r.stdout  # in its file
    # the same problem, listed in a find-db given as predict.find_db: answered from it, as MIOpen does
    fdb = tmp_path / "fdb" / "gfx942130.HIP.fdb.txt"
    fdb.parent.mkdir()
    fdb.write_text("256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-W_g32=GemmWrwUniversal:0.5,64,"
                   "miopenConvolutionBwdWeightsAlgoGEMM;ConvDirectNaiveConvWrw:0.25,0,miopenConvolutionBwdWeightsAlgoDirect\n")
    r = run_cli("stage=predict", "op=miopen/bwd_weight", "arch=gfx942", f"predict.find_db={fdb}",
                "problem=convfp16 -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -g 32 -F 4",
                f"hydra.run.dir={tmp_path / 'p2'}")
    assert r.returncode == 0, r.stderr
    assert f"selected: ConvDirectNaiveConvWrw (tier: find_db, measured 0.25 ms in {fdb})" in r.stdout
    from ckheur import Selector
    from ckheur.c_export.compiled import find_compiler, load_compiled
    from test_export import assert_parity

    if find_compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    data = miopen_slices
    from ckheur.data.dataset import read_dataset
    from ckheur.families.miopen.problems import FIELDS

    df = read_dataset(data / "miopen_bwd_weight_fp16_gfx942" / "gfx942130.parquet")
    real = [problem_from_dict(dict(zip(FIELDS, key))) for key, _ in df.groupby(list(FIELDS))]
    bundle = SHIPPED["gfx942", "bwd_weight"]
    got = assert_parity(Selector.load(bundle, cache_size=0), load_compiled(bundle), real)
    assert got["ranked"] == len(real) > 300


def test_a_remembering_bundle_answers_its_training_problems_in_python_and_c(tmp_path, monkeypatch, miopen_slices):
    """train.remember: each training problem's fastest listed solver (read here from the file's
    lines) is ranked first for that exact problem (op.remember_margin=inf: whatever the model
    predicts), in Python and in the exported C alike (at the margin it was trained with, its
    default); an evaluation on the training data says so and scores as the lookup; other problems
    get the model."""
    from ckheur import Selector
    from ckheur.c_export.compiled import find_compiler, load_compiled
    from test_export import assert_parity

    path = miopen_slices / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet"
    r = run_cli("stage=train", "op=miopen/fwd", "arch=gfx942", f"data.paths=[{path}]", "model.max_trees=20",
                "train.folds=3", "train.cluster_cv=false", "train.remember=true", "op.remember_margin=0.1",
                f"train.output={tmp_path / 'm'}")
    assert r.returncode == 0, r.stderr
    assert "early stopping reached model.max_trees=20 in 3 of 3 CV fits" in r.stdout  # 20 trees: a floor
    assert "train again with model.max_trees=40" in r.stdout  # what to do about it
    assert Selector.load(tmp_path / "m").remember_margin == 0.1  # the margin it was trained with is its default
    sel = Selector.load(tmp_path / "m", remember_margin=math.inf)
    manifest = json.loads((tmp_path / "m" / "train_manifest.json").read_text())
    assert manifest["remembered_problems"] == manifest["problems"] == len(sel.answers) > 300
    listed = _forward_fp16_lines(MI300X)
    for line, driver, fields, times in listed:
        assert sel.rank(driver, k=1)[0].kernel == min(times, key=times.get), line
        assert sel.select(driver).source == "training_data"
    assert len(listed) > 150 and sel.select({**fields, "N": fields["N"] + 7919}).source == "model"
    r = run_cli("stage=evaluate", "op=miopen/fwd", "arch=gfx942", f"evaluate.model_dir={tmp_path / 'm'}",
                f"data.eval_paths=[{path}]", "evaluate.plots=false", "op.remember_margin=inf",
                f"hydra.run.dir={tmp_path / 'ev'}")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert m["remembered_problems"] == m["problems_evaluated"] and "in the model's training data" in r.stdout
    assert m["censored"]["all"]["open"]["top1"] == 1.0
    r = run_cli("stage=train", "op=fwd", "train.remember=true", f"train.output={tmp_path / 'ck'}")
    assert r.returncode == 2 and "train.remember" in r.stderr and not (tmp_path / "ck").exists()
    if find_compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    from ckheur.data.dataset import read_dataset
    from ckheur.families.miopen.problems import FIELDS

    df = read_dataset(path)
    real = [problem_from_dict(dict(zip(FIELDS, key))) for key, _ in df.groupby(list(FIELDS))]
    unseen = [problem_from_dict({**dict(zip(FIELDS, key)), "N": int(key[0]) + 7919}) for key, _ in
              list(df.groupby(list(FIELDS)))[:50]]
    default = Selector.load(tmp_path / "m", cache_size=0)
    got = assert_parity(default, load_compiled(tmp_path / "m"), real + unseen)
    assert got["ranked"] == len(real) + len(unseen)
    # the C rule (at the bundle's margin) was exercised both ways: answers kept, and answers overridden
    tiers = {default.select(p).source for p in real}
    assert tiers == {"training_data", "model"}, tiers


def _slice_problems(fdb, direction: str, dtype: str) -> list:
    """The real problems of a read find-db slice of one direction and data type."""
    from ckheur.families.miopen.problems import FIELDS

    rows = fdb.problems[(fdb.problems["direction"] == direction) & (fdb.problems["dtype"] == dtype)]
    return [problem_from_dict(dict(zip(FIELDS, r))) for r in rows[list(FIELDS)].itertuples(index=False, name=None)]


# Shipped bundles whose tables carry every C rule between them, and every branch of each: gfx90a
# forward FP16 (the OpenCL direct solver with its FP16 cases, ConvAsm1x1U, the 1x1 GEMMs, the
# Winograd solvers), gfx942 backward-data FP32 (FFT, the 2D and 3D grouped CK solvers), gfx90a
# backward-data FP32 (ConvAsm3x3U on dy, the V1R1 implicit GEMM), gfx90a backward-weights FP16
# (the assembly and OpenCL 1x1, OpenCL and multipass Winograd and the implicit GEMMs' backward-weights
# cases), gfx90a forward and backward-weights FP32 (the implicit GEMMs' FP32 branches); each ranks
# with op.listed learned from its own GPU's slice. The first two also take every step of the listed rule.
APPLICABILITY_BUNDLES = (("miopen_fwd_fp16_gfx90a", MI210, "fwd", "fp16", True),
                         ("miopen_bwd_data_fp32_gfx942", MI300X, "bwd_data", "fp32", True),
                         ("miopen_bwd_data_fp32_gfx90a", MI210, "bwd_data", "fp32", False),
                         ("miopen_bwd_weight_fp16_gfx90a", MI210, "bwd_weight", "fp16", False),
                         ("miopen_fwd_fp32_gfx90a", MI210, "fwd", "fp32", False),
                         ("miopen_bwd_weight_fp32_gfx90a", MI210, "bwd_weight", "fp32", False))


def _first_trees(bundle: Path, folder: Path, trees: int = 60) -> Path:
    """A copy of a shipped bundle whose ranking forest is its first ``trees`` trees (a screen, where
    it has one, the first half of those, its top kept): the C rules do not depend on the forest, and
    reading and exporting whole forests of up to 1500 trees was most of the parity tests' time (a
    whole shipped forest's C export is checked in
    test_shipped_miopen_model_predicts_a_driver_line_and_exports_exactly)."""
    import shutil

    from ckheur.learn.bundle import load_bundle, write_json

    shutil.copytree(bundle, folder)
    cut_forest(folder, trees)
    spec = json.loads((folder / "feature_spec.json").read_text())
    if spec.get("screen"):
        write_json(folder / "feature_spec.json", {**spec, "screen": {**spec["screen"], "trees": trees // 2}})
    assert load_bundle(folder).booster.num_trees() == trees
    return folder


@pytest.mark.parametrize("bundle,fdb_path,direction,dtype,every_listed_step", APPLICABILITY_BUNDLES)
def test_applicability_both_ranks_alike_in_c_and_python(tmp_path, monkeypatch, bundle, fdb_path, direction, dtype,
                                                        every_listed_step):
    """op.applicability=both (op.listed learned from the GPU's slice) given to a shipped bundle
    (its tables, rules and remembered answers; its forest cut to the first trees, ``_first_trees``):
    Selector.load(compiled=True) ranks in C, with no fallback, the very candidates, in the same
    order and with the same scores, as the Python selector, on the slice's real problems and
    seeded ones of every layout, group and filter kind, stride, pad, dilation and bias, where the
    rules reject solvers and every step of the listed rule is taken (this data type's listing,
    any data type's, none)."""
    import warnings

    from ckheur import Selector
    from ckheur.c_export.compiled import find_compiler
    from ckheur.families.miopen import solvers as ms
    from ckheur.families.miopen.problems import generate_varied
    from ckheur.integrations.miopen.find_db import learn_listed
    from ckheur.problems import random_problems
    from test_export import assert_parity

    if find_compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    fdb = read_find_db(fdb_path)
    listed = learn_listed(fdb, direction)
    path = _first_trees(ROOT / "models" / bundle, tmp_path / bundle)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the Python path
        c = Selector.load(path, compiled=True, applicability="both", listed=listed, cache_size=0)
    assert c.compiled is not None and "[compiled C]" in c.label
    py = copy.copy(c)  # the same selector without its C package: the Python path (a bundle loads once)
    py.compiled = None
    real = _slice_problems(fdb, direction, dtype)
    problems = real + generate_varied(7, 300) + random_problems(py.family, ["all"], 50, seed=3)
    got = assert_parity(py, c.compiled, problems)
    assert got["ranked"] == len(problems) > 600
    # the masks at work: the rules reject solvers of most problems, and the listed rule narrows
    # further through this data type's kinds, through another data type's, or keeps the rules' set
    support = py._pools["all"].support
    steps = {"rules rejected some": 0, "listed narrowed": 0, "listed kept": 0}
    for p in problems:
        rules, both = (ms.support_mask(p, support, {**py.op, "applicability": m})[0] for m in ("rules", "both"))
        steps["rules rejected some"] += int(not rules.all())
        steps["listed narrowed" if both.sum() < rules.sum() else "listed kept"] += 1
        assert not (both & ~rules).any()
    assert steps["rules rejected some"] > len(problems) // 2 and min(steps.values()) > 100, steps
    assert [n for n, _ in c.rank(real[0], 5)] == [n for n, _ in py.rank(real[0], 5)]
    if not every_listed_step:
        return
    anywhere = {x for v in listed.values() for x in v}
    kinds = {ms.problem_kind(p, dtype) for p in problems}
    in_any_dtype = {tuple(k.split("/", 2)[0::2]) for k in anywhere}  # (layout, group/filter)
    assert {k for k in kinds if k not in anywhere and tuple(k.split("/", 2)[0::2]) in in_any_dtype}, \
        "a kind listed in another data type only"
    assert {k for k in kinds if tuple(k.split("/", 2)[0::2]) not in in_any_dtype}, "a kind never listed"


def test_a_bundle_trained_with_both_exports_it_and_rejects_what_the_rules_reject(tmp_path, monkeypatch):
    """A bundle whose op_config says applicability=both (here a shipped bundle's copy, its table cut
    to solvers that run 2D problems only) exports it: a 3D problem, which every rule rejects, is
    unsupported in C as in Python; stage=export from the command line takes op.applicability and
    checks the package on problems of every layout; bad settings are errors naming the field."""
    import shutil

    from ckheur import Selector
    from ckheur.c_export.compiled import find_compiler
    from ckheur.c_export.generate import export_bundle
    from ckheur.families.kernel_base import KernelError
    from ckheur.families.miopen import solvers as ms
    from ckheur.families.miopen.problems import generate_varied
    from ckheur.integrations.miopen.find_db import learn_listed

    shipped = ROOT / "models" / "miopen_bwd_weight_bf16_gfx942"
    with pytest.raises(KernelError, match="op.applicability=listed needs op.listed"):
        export_bundle(shipped, tmp_path / "no", applicability="listed", listed={})  # an empty table
    assert not (tmp_path / "no").exists()
    solvers = [ms.Solver("fft", "fwd", 0, "fft", "opencl")]
    with pytest.raises(KernelError, match=r"op.applicability='maybe'; allowed: none, rules, listed, both"):
        ms.c_support(solvers, {"direction": "fwd", "dtype": "fp16", "applicability": "maybe"})
    for bad in ({"fft": ["NCHW/fp16/dense"]}, {"other": ["NCHW/fp64/dense/1x1"]}, {"fft": ["NCHW/fp16/dense/3x3"]}):
        with pytest.raises(KernelError, match=r"op.listed\['\w+'\]: kind 'NCHW/fp\w+/dense[/\w]*' is not layout/dtype/"
                                              r"group/filter with layout one of NCHW, NHWC, NCDHW, NDHWC; dtype one of "
                                              r"fp16, bf16, fp8, fp32; group one of dense, depthwise, grouped; filter "
                                              r"one of 1x1, square, rect"):
            ms.c_support(solvers, {"direction": "fwd", "dtype": "fp16", "applicability": "both", "listed": bad})
    with pytest.raises(KernelError, match=r"op.listed\['fft'\]: a list of kinds \(layout/dtype/group/filter\), "
                                          r"not str"):
        ms.c_support(solvers, {"direction": "fwd", "dtype": "fp16", "applicability": "listed",
                               "listed": {"fft": "NCHW/fp16/dense/1x1"}})
    if find_compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
    bundle = tmp_path / "m"
    shutil.copytree(shipped, bundle)
    (bundle / "answers.json.xz").unlink()  # it may remember solvers cut below
    kept = ("ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC", "ConvHipImplicitGemmGroupWrwXdlops",
            "ConvBinWinogradRxSf2x3", "ConvBinWinogradRxSf3x2", "ConvBinWinogradRxSf2x3g1")
    kernels = [k for k in json.loads((bundle / "kernels.json").read_text()) if k["name"] in kept]
    (bundle / "kernels.json").write_text(json.dumps(kernels))
    spec = json.loads((bundle / "feature_spec.json").read_text())
    spec["op_config"].update(applicability="both", listed=learn_listed(read_find_db(MI300X), "bwd_weight"))
    (bundle / "feature_spec.json").write_text(json.dumps(spec))
    c = Selector.load(bundle, compiled=True, cache_size=0)
    assert c.compiled is not None and len(kernels) == 5
    py = copy.copy(c)  # the Python path of the same selector
    py.compiled = None
    three_d = problem_from_dict(dict(N=4, C=64, K=64, Di=4, Hi=14, Wi=14, Z=3, Y=3, X=3, pad_d=1, pad_h=1, pad_w=1,
                                     layout="NCDHW"))
    for sel in (py, c):
        with pytest.raises(ProblemError, match="reject every solver"):
            sel.select(three_d)
    from test_export import assert_parity

    got = assert_parity(py, c.compiled, generate_varied(11, 150))
    assert got["rejected"] > 20 and got["ranked"] > 50
    r = run_cli("stage=export", "op=miopen/bwd_weight", "arch=gfx942", "op.dtype=bf16", "op.applicability=rules",
                f"export.output={tmp_path / 'pkg'}", "export.check_problems=100", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert "same top-1 kernel 200/200" in r.stdout  # (100 of them remembered training problems)
    assert "op.applicability=rules" in (tmp_path / "pkg" / "README.md").read_text()


def test_every_gpu_direction_and_dtype_has_a_shipped_bundle():
    """FP32, FP16 and BF16, three directions, both GPUs: real data, every training problem
    remembered, the model cut at its tree budget (the fewest trees within train.budget_loss_pts of
    the uncut model's grouped-CV mean efficiency), a distilled student within it of its teachers';
    a bundle trained without a budget (kept where the compact recipe lost quality) chose its recipe
    by CV among two, no chosen fold at the tree cap."""
    for arch in ("gfx942", "gfx90a"):
        for direction in ("fwd", "bwd_data", "bwd_weight"):
            for dtype in ("fp32", "fp16", "bf16"):
                bundle = ROOT / "models" / f"miopen_{direction}_{dtype}_{arch}"
                manifest = json.loads((bundle / "train_manifest.json").read_text())
                cv = json.loads((bundle / "cv_metrics.json").read_text())
                cap = manifest["config"]["model"]["max_trees"]
                assert manifest["data_kind"] == "real" and manifest["config"]["op"]["dtype"] == dtype, bundle
                assert manifest["remembered_problems"] == manifest["problems"] > 5000, bundle
                chosen = next(c for c in cv["candidates"] if c["candidate"] == cv["chosen"]["candidate"])
                if "tree_budget" not in cv:
                    assert len(cv["candidates"]) >= 2 and max(chosen["best_iterations"]) < cap, bundle
                    continue
                budget, loss = cv["tree_budget"], manifest["config"]["train"]["budget_loss_pts"]
                student = cv["chosen"].get("student_trees")
                trees = student or cv["chosen"]["trees"]
                assert trees == budget["trees"] <= budget["uncut_trees"] and loss > 0, bundle
                uncut = budget["teacher_grouped_cv" if student else "uncut_grouped_cv"]["mean"]
                assert 100 * (uncut - cv["grouped_cv_seed_mean"]["mean"]) <= loss + 1e-9, bundle
                if student:  # the model shipped is the student
                    from ckheur.learn.bundle import load_bundle

                    assert load_bundle(bundle).booster.num_trees() == student, bundle


def test_merging_into_a_user_find_db_keeps_every_other_line_as_it_was(tmp_path):
    """merge_find_db: a listed key gets the new solver's entry (replacing its own) in time order,
    a new key is appended, every other line is kept byte for byte in its place; a file that is
    not a find-db, or an existing one without merge=True, is refused and left unchanged."""
    from ckheur.integrations.miopen.find_db import FindDbEntry, FindDbLine, algorithm_name, merge_find_db

    src = _lines(MI300X)
    target = tmp_path / "gfx942130.HIP.3_2_0_abc.ufdb.txt"
    target.write_text("\n".join(src) + "\n")
    old = parse_line(src[7])
    faster = FindDbEntry(old.entries[-1].solver, old.entries[0].time_ms / 2, 4096, old.entries[-1].algorithm)
    fresh = problem_from_dict({"N": 3, "C": 24, "K": 40, "Hi": 17, "Wi": 19, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    added = FindDbLine(problem_key(fresh, "bwd_data", "bf16"),
                       (FindDbEntry("GemmBwdRest", 0.5, 0, algorithm_name("bwd_data", "gemm")),
                        FindDbEntry("ConvDirectNaiveConvBwd", 0.25, 0, algorithm_name("bwd_data", "direct"))))
    with pytest.raises(FindDbError, match="give merge=True"):
        merge_find_db(target, [added])
    got = merge_find_db(target, [FindDbLine(old.key, (faster,)), added], merge=True)
    out = target.read_text().splitlines()
    assert {k: got[k] for k in ("kept", "updated", "added")} == {"kept": len(src) - 1, "updated": 1, "added": 1}
    assert Path(got["backup"]).read_text() == "\n".join(src) + "\n" and len(out) == len(src) + 1
    assert [i for i, (a, b) in enumerate(zip(src, out)) if a != b] == [7]
    line = parse_line(out[7])
    assert [e.solver for e in line.entries][0] == faster.solver and len(line.entries) == len(old.entries)
    assert [e.time_ms for e in line.entries] == sorted(e.time_ms for e in line.entries)
    assert out[-1].startswith("40-17-19-3x3-24-17-19-3-1x1-1x1-1x1-0-NCHW-BF16-B=ConvDirectNaiveConvBwd:0.25,0,")
    assert read_find_db(target).report["problems"] == read_find_db(MI300X).report["problems"] + 1
    (tmp_path / "notes.txt").write_text("1-2=X:1,2\nthis is not a find-db\n")
    with pytest.raises(FindDbError, match="line 2 is not a find-db line"):
        merge_find_db(tmp_path / "notes.txt", [added], merge=True)
    assert (tmp_path / "notes.txt").read_text() == "1-2=X:1,2\nthis is not a find-db\n"


def test_a_tuning_database_becomes_the_user_find_db_miopen_reads(tmp_path, miopen_slices):
    """import -> tune (replay of MIOpen's own measurements, workspace bytes included) -> export
    format=miopen_find_db into an existing user find-db: every written entry is the find-db file's
    own entry for its problem and solver (time, workspace, algorithm), fastest first; the file's
    other lines stay as they were and its old text is kept; only measurements go in."""
    from ckheur.data.dataset import read_dataset
    from ckheur.integrations.miopen.find_db import tuning_db_lines

    db = tmp_path / "tuning"
    ds = miopen_slices / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet"
    op = ["op=miopen/fwd", "op.dtype=fp16", "arch=gfx942"]
    r = run_cli("stage=tune", *op, "backend=replay", f"backend.paths=[{ds}]", "tune.top_k=2", f"tune.db={db}",
                f"problems.sources=[{{kind:dataset,family:miopen,path:{ds}}}]", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0, r.stderr
    original = {line.partition("=")[0]: parse_line(line) for line in _lines(MI300X)}
    fwd16 = [k for k in original if k.endswith("-FP16-F") or "-FP16-F_g" in k]
    others = [line for line in _lines(MI300X) if line.partition("=")[0] not in fwd16][:40]
    # A user find-db with other problems, and a tuned one where MIOpen's own Find left another solver.
    mine = next(k for k in fwd16 if len(original[k].entries) > 2)
    extra = "ConvDirectNaiveConvFwd:9.5,0,miopenConvolutionFwdAlgoDirect"
    before = "\n".join([*others[:20], f"{mine}={extra}", *others[20:]]) + "\n"
    target = tmp_path / "miopen" / "gfx942130.HIP.3_2_0_abc.ufdb.txt"
    target.parent.mkdir()
    target.write_text(before)
    export = ["stage=export", "export.format=miopen_find_db", *op, f"export.tuning_db={db}"]
    r = run_cli(*export, f"export.output={target}", f"hydra.run.dir={tmp_path / 'r3'}")
    assert r.returncode == 2 and "merge" in r.stderr and target.read_text() == before
    r = run_cli(*export, f"export.output={tmp_path / 'gfx90a68.HIP.3_2_0.ufdb.txt'}", f"hydra.run.dir={tmp_path / 'r4'}")
    assert r.returncode == 2 and "gfx942<CUs>.HIP.<MIOpen version>.ufdb.txt" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(*export, f"export.output={target}", "export.merge=true", f"hydra.run.dir={tmp_path / 'r5'}")
    assert r.returncode == 0, r.stderr
    out = target.read_text().splitlines()
    n = len(others) + 1
    assert out[:20] == others[:20] and out[21:n] == others[20:]  # every other line as it was, in place
    assert [p.read_text() for p in target.parent.glob("*.bak")] == [before]
    written = {line.partition("=")[0]: parse_line(line) for line in out[20:21] + out[n:]}
    assert set(written) == set(fwd16) and len(out) == n + len(fwd16) - 1  # every tuned problem, once
    for key, line in written.items():
        theirs = {e.solver: e for e in original[key].entries}
        got = [e for e in line.entries if e.text() != extra]
        assert 1 <= len(got) <= 2 and all(e.solver in theirs for e in got)
        assert [(e.time_ms, e.workspace, e.algorithm) for e in got] == \
            [(theirs[e.solver].time_ms, theirs[e.solver].workspace, theirs[e.solver].algorithm) for e in got]
        assert [e.time_ms for e in line.entries] == sorted(e.time_ms for e in line.entries)
    assert written[mine].entries[-1].text() == extra  # MIOpen's other solver kept, slowest last
    # Only measurements with their workspace: unknown ones are left out and counted; simulated ones refused.
    rows = read_dataset(db)
    rows.loc[rows.index[:5], "workspace_bytes"] = -1
    lines, counts = tuning_db_lines(rows, "fwd", "fp16")
    assert counts["workspace_unknown"] == int((rows.status.iloc[:5] == "ok").sum()) > 0
    assert counts["entries"] == sum(len(x.entries) for x in lines) == int((rows.status == "ok").sum()) - \
        counts["workspace_unknown"]
    rows.loc[rows.index[rows.status == "ok"][-1], "backend"] = "sim"
    with pytest.raises(FindDbError, match="simulated"):
        tuning_db_lines(rows, "fwd", "fp16")


def test_workspace_bytes_come_from_the_backend_and_are_unknown_in_older_datasets(tmp_path):
    """backend=command reads the workspace with workspace_regex and gives MIOpenDriver the problem's
    layout and bias; replayed simulated data stays labeled sim; a schema-1 part reads as unknown (-1)."""
    import pyarrow.parquet as pq

    from ckheur.backends import BackendError, make_backend
    from ckheur.config import load_option
    from ckheur.data.dataset import read_dataset, write_part
    from ckheur.job import Job
    from ckheur.selection.selector import Selector
    from ckheur.sweeping.tuning import tune

    op, arch = load_option("op/miopen/fwd"), load_option("arch/gfx942")
    op["dtype"] = "fp16"
    job = Job(op, arch)
    nhwc = problem_from_dict({"N": 8, "C": 128, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3, "pad_h": 1,
                              "pad_w": 1, "layout": "NHWC", "bias": 1})
    solver = job.pool.kernels[0]
    cmd = {**load_option("backend/command"), "template": "echo {miopen_command} {miopen_args} ws={N}",
           "regex": r"-k (\d+)", "workspace_regex": r"ws=(\d+)"}
    got = make_backend(cmd, op, arch).measure([(nhwc, solver)])
    assert got.status == ["ok"] and got.latency_ms == [128.0] and got.workspace_bytes == [8]
    assert make_backend({**cmd, "workspace_regex": None}, op, arch).measure([(nhwc, solver)]).workspace_bytes == [-1]
    garbled = make_backend({**cmd, "regex": r"-I (\w+)"}, op, arch).measure([(nhwc, solver)])
    assert garbled.status == ["failed"] and "'NHWC', not a number" in garbled.error[0]
    with pytest.raises(BackendError, match="workspace_regex"):
        make_backend({**cmd, "workspace_regex": "ws="}, op, arch)
    failed = make_backend({**cmd, "workspace_regex": r"bytes=(\d+)"}, op, arch).measure([(nhwc, solver)])
    assert failed.status == ["failed"] and "workspace_regex" in failed.error[0]
    # The driver line is what MIOpenDriver reads back as the same problem.
    from ckheur.families.miopen.problems import from_text, to_driver_line
    assert from_text(to_driver_line(nhwc, "fp16"), "fwd", "fp16") == nhwc
    # Measured into a tuning database with its workspace; simulated rows replay as simulated, and a
    # dataset mixing them with measured ones is refused.
    selector = Selector.load(ROOT / "models" / "miopen_fwd_fp16_gfx942")
    summary = tune(selector, [nhwc], tmp_path / "db", job, backend=cmd, top_k=2, progress="none", log=lambda _: None)
    rows = read_dataset(tmp_path / "db")
    assert summary["problems_tuned"] == 1 and rows["workspace_bytes"].tolist() == [8, 8]
    with pytest.raises(BackendError, match="not MIOpen's solvers"):
        make_backend(load_option("backend/sim"), op, arch)
    write_part(tmp_path / "simulated", rows.assign(backend="sim"))
    replay = {**load_option("backend/replay"), "paths": [str(tmp_path / "simulated")]}
    assert make_backend(replay, op, arch).name == "sim"
    write_part(tmp_path / "simulated", rows.assign(kernel=job.pool.kernels[5].name))
    with pytest.raises(BackendError, match="mix simulated"):
        make_backend(replay, op, arch)
    # Schema 1: no workspace column.
    part = next((tmp_path / "db").glob("part-*.parquet"))
    table = pq.read_table(part).drop(["workspace_bytes"])
    old = tmp_path / "old"
    old.mkdir()
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"ckheur_schema_version": b"1"}),
                   old / "part-old.parquet")
    assert read_dataset(old)["workspace_bytes"].tolist() == [-1, -1]



def test_solver_tables_are_subsets_of_miopens_registry_with_gfx908s_own_solvers():
    """Each direction's registry lists every solver MIOpen registers for it once (ids and MIOpen's
    ids unique); every arch table is a subset with the same ids and traits; the ids the shipped
    bundles use are unchanged (the first 68); gfx908 gets its own solvers (the NCHW GTC xdlops and
    the old Winograd binaries, which IsApplicable restricts to it) and not the gfx900/906-only ones,
    the MLIR GEMMs without matrix cores, or the backward-data GEMMs MIOpen keeps off by default."""
    from ckheur.families.miopen.solvers import solver_tables

    shipped_ids = {"ConvAsm1x1U": 0, "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC": 5, "GemmFwdRest": 46, "fft": 49,
                   "ConvWinograd3x3MultipassWrW<7-3>": 67, "ConvHipImplicitGemmGroupWrwXdlops": 24}
    own = {"fwd": {"ConvAsmImplicitGemmGTCDynamicFwdXdlops", "ConvBinWinograd3x3U", "ConvBinWinogradRxS"},
           "bwd_data": {"ConvAsmImplicitGemmGTCDynamicBwdXdlops", "ConvBinWinograd3x3U", "ConvBinWinogradRxS"},
           "bwd_weight": {"ConvAsmImplicitGemmGTCDynamicWrwXdlops", "ConvBinWinogradRxS"}}
    names_everywhere: dict = {}
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        op = solver_tables(direction)
        registry = {s["name"]: s for s in op["registry"]}
        assert len(registry) == len(op["registry"]) > 35
        assert len({s["id"] for s in registry.values()}) == len({s["miopen_id"] for s in registry.values()}) \
            == len(registry)
        for arch, table in op["solvers"].items():
            for s in table:
                r = registry[s["name"]]
                assert {k: r[k] for k in s if k != "miopen_id"} == {k: s[k] for k in s if k != "miopen_id"}, (arch, s)
        tables = {arch: {s["name"] for s in t} for arch, t in op["solvers"].items()}
        assert own[direction] <= tables["gfx908"] and not own[direction] & (tables["gfx90a"] | tables["gfx942"])
        assert not any("V4R1Dynamic" in n for n in tables["gfx908"])
        # no MLIR GEMM without matrix cores where the xdlops ones run, no debug-gated static-CK backward data
        assert not {"ConvMlirIgemmFwd", "ConvMlirIgemmBwd", "ConvMlirIgemmWrW", "ConvHipImplicitGemmBwdDataV4R1",
                    "ConvHipImplicitGemmBwdDataV1R1Xdlops"} & tables["gfx908"]
        assert tables["gfx90a"] | tables["gfx942"] <= tables["gfx908"]  # what its xdlops siblings list runs on it
        for s in registry.values():
            assert names_everywhere.setdefault(s["name"], s["id"]) == s["id"]
    for name, i in shipped_ids.items():
        assert names_everywhere[name] == i
    assert sorted(names_everywhere.values())[:68] == list(range(68))  # new solvers took new ids


def test_gfx908_tables_are_what_the_registry_in_tools_gives(monkeypatch):
    """The gfx908 tables and registries of the shipped solver tables are in step with tools/miopen_solvers.py's
    hand-kept registry (an edit of one without regenerating the other fails here); the registry's
    device rules (``only_on``) give gfx908 its table, keep every solver each find-db lists, and give
    gfx942 the very table MI300X's find-db measured."""
    from ckheur.families.miopen.solvers import registry_table, solver_tables

    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    import miopen_solvers

    for direction, (rows, table) in miopen_solvers.registry_tables("gfx908", miopen_solvers.declared()).items():
        op = solver_tables(direction)
        assert op["solvers"]["gfx908"] == table and sorted(op["registry"], key=lambda s: s["miopen_id"]) == rows
        assert registry_table(direction, "gfx908") == table  # what an arch without a shipped table is served
        for arch, measured in op["solvers"].items():  # the device rules never refuse what a find-db lists
            assert {s["name"] for s in measured} <= {s["name"] for s in registry_table(direction, arch)}, arch
        # and, read in MIOpen's sources (the MLIR GEMMs left out where no file lists them), they give
        # gfx942 exactly what MI300X's file lists, gfx1030 RDNA2's and two more (the NCHWc layout's GEMM,
        # no find-db problem's layout, and a Winograd its file lists in the other directions only)
        def extra(arch: str) -> set:
            return {s["name"] for s in registry_table(direction, arch)} - {s["name"] for s in op["solvers"][arch]}

        assert not extra("gfx942")
        assert extra("gfx1030") <= {"ConvAsmImplicitGemmGTCDynamicFwdDlopsNCHWC", "ConvBinWinogradRxSf2x3g1"}


def test_a_bundle_of_an_arch_without_a_shipped_table_names_any_registered_solver():
    """A bundle of a user's own arch keeps the table it was trained with: any solver MIOpen registers
    for the direction loads there (the registry's device rules may have changed since), while a
    shipped arch's bundle still names its table's solvers only, and no arch another direction's."""
    from ckheur.families.kernel_base import KernelError
    from ckheur.families.miopen.solvers import Solver, check_known, registry_table

    asm = Solver(name="ConvAsm3x3U", direction="fwd", solver_id=2, algorithm="direct", implementation="asm",
                 workspace=False)
    assert "ConvAsm3x3U" not in {s["name"] for s in registry_table("fwd", "gfx1100")}  # GCN assembly: not RDNA3
    check_known([asm], "fwd", "gfx1100")
    check_known([asm], "fwd", ["gfx942", "gfx1100"])
    with pytest.raises(KernelError, match="'ConvAsm3x3U' \\(fwd\\) is not a fwd solver of the gfx942 table"):
        check_known([asm], "fwd", "gfx942")
    with pytest.raises(KernelError, match="is not a bwd_data solver of the gfx1100 table"):
        check_known([asm], "bwd_data", "gfx1100")


MI210_DEVICE, MI300X_DEVICE = "MI210 (gfx90a, 104 CUs)", "MI300X (gfx942, 304 CUs)"  # the slices' devices


def test_one_model_across_gpus_serves_a_gpu_never_measured(tmp_path, monkeypatch, miopen_slices):
    """features.hardware=true: a gfx908 (MI100) model trained on the MI300X and MI210/250 slices
    alone; both GPUs' rows are in it, each with its own descriptors, and it ranks for gfx908
    with gfx908's, in Python and in C alike. Without the option the same data is refused, naming
    the way out. With a few rows of the target, they weigh train.target_weight each, and CV is
    also reported on the target's own problems."""
    from ckheur import Selector
    from ckheur.families.hardware import DESCRIPTORS

    data = miopen_slices
    paths = [data / "miopen_fwd_fp32_gfx942" / "gfx942130.parquet", data / "miopen_fwd_fp32_gfx90a" / "gfx90a68.parquet"]
    common = ["stage=train", "op=miopen/fwd", "arch=gfx908", "op.dtype=fp32", f"data.paths=[{','.join(map(str, paths))}]",
              "model.max_trees=20", "train.folds=3", "train.cluster_cv=false"]
    r = run_cli(*common, f"train.output={tmp_path / 'no'}", f"hydra.run.dir={tmp_path / 'r0'}")
    assert r.returncode == 2 and "features.hardware=true trains one model across those GPUs" in r.stderr
    out = tmp_path / "gfx908"
    r = run_cli(*common, "features.hardware=true", f"train.output={out}", f"hydra.run.dir={tmp_path / 'r1'}")
    assert r.returncode == 0, r.stderr
    spec = json.loads((out / "feature_spec.json").read_text())
    manifest = json.loads((out / "train_manifest.json").read_text())
    assert spec["hardware"] == list(DESCRIPTORS) and spec["feature_names"][-len(DESCRIPTORS):] == list(DESCRIPTORS)
    assert spec["trained_archs"] == ["gfx90a", "gfx942"] and spec["arch"]["name"] == "gfx908"
    from ckheur.data.dataset import read_dataset

    assert spec["trained_devices"] == [MI210_DEVICE, MI300X_DEVICE]  # each file's device, from its name
    for arch, path in ((MI300X_DEVICE, paths[0]), (MI210_DEVICE, paths[1])):
        df = read_dataset(path)
        listed = df[df.status == "ok"]
        problems = listed[["N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X", "pad_h", "pad_w", "stride_h", "stride_w",
                           "dilation_h", "dilation_w", "layout", "bias"]].drop_duplicates()
        assert manifest["archs"][arch]["problems"] == len(problems)
    from ckheur.evaluation.seen import training_keys
    from ckheur.families import get_family

    # Seen means measured on the evaluated GPU: nothing of gfx908, gfx90a's own problems for gfx90a.
    keys, sources = training_keys(out, get_family("miopen"), (), paths, "gfx908")
    assert keys == set() and len(sources) == 2 and all(s.endswith("(0 problems of gfx908)") for s in sources)
    assert len(training_keys(out, get_family("miopen"), (), paths, "gfx90a")[0]) == \
        manifest["archs"][MI210_DEVICE]["problems"]
    gains = json.loads((out / "feature_importances.json").read_text())
    assert any(gains[n] > 0 for n in DESCRIPTORS)  # the model tells the two GPUs apart
    sel = Selector.load(out)
    assert f"of {MI210_DEVICE}, {MI300X_DEVICE}; MI100 (gfx908, 120 CUs) unmeasured" in sel.label
    # served to another device of its arch, it ranks with that device's descriptors and says so
    from ckheur.job import Job
    from ckheur.selection.predicting import selector_for
    from ckheur.stages import compose_config

    job = Job.from_config(compose_config(["op=miopen/fwd", "op.dtype=fp32", "arch=gfx908", "arch.num_cus=110"]))
    other, label = selector_for(job, models=tmp_path, sim_models=tmp_path, model_dir=out)
    assert other.arch["num_cus"] == 110 and "gfx908 (110 CUs) unmeasured" in label and "MI100" not in label
    # and its C package bakes in that device's figures, not those of the device it was made for
    r = run_cli("stage=export", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx908", "arch.num_cus=110",
                f"export.model_dir={out}", f"export.output={tmp_path / 'c110'}", "export.build=false",
                f"hydra.run.dir={tmp_path / 'x110'}")
    assert r.returncode == 0 and "is made for MI100 (gfx908, 120 CUs): exporting it for gfx908 (110 CUs)" in r.stdout, \
        r.stderr
    cus = [line for line in (tmp_path / "c110" / "miopen_fwd_fp32_gfx908.c").read_text().splitlines()
           if "define CKH_NUM_CUS" in line]
    assert len(cus) == 1 and cus[0].split()[-1] == float.hex(110.0)
    from ckheur.selection.selector import as_problem

    p = as_problem("conv -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1", sel.family, "fwd", "fp32")
    X = sel.engine.features(sel.engine.problem_arrays([p], "fwd"), sel.engine.kernel_arrays(sel._all_kernels),
                            sel.arch, "fwd")
    # MI100's data sheet, as conf/arch/gfx908.yaml gives it: 120 CUs, 1502 MHz, 46.1 TF FP32, 1228.8 GB/s, 8 MB L2
    want = [math.log2(120), 1.502, math.log2(46.1), math.log2(1228.8), math.log2(8192), 64, 40, math.log2(46100 / 1228.8)]
    assert np.allclose(X[:, -len(DESCRIPTORS):], want, rtol=1e-6)
    from ckheur.families.miopen.solvers import rule_rejections

    assert {k for k, _ in sel.rank(p, k=None)} == {k.name for k in sel.kernels
                                                   if not rule_rejections(k.name, p, "fwd", "fp32")}
    # In C too: the descriptors are gfx908's constants; the same candidates, order and scores as Python
    from ckheur.c_export.compiled import find_compiler
    from ckheur.families.miopen.problems import generate_varied
    from test_export import assert_parity

    if find_compiler() is not None:
        monkeypatch.setenv("CKHEUR_CACHE_DIR", str(tmp_path / "cache"))
        c = Selector.load(out, compiled=True, cache_size=0)
        assert c.compiled is not None and "[compiled C]" in c.label
        py = copy.copy(c)
        py.compiled = None
        assert assert_parity(py, c.compiled, [p, *generate_varied(11, 60)])["ranked"] >= 40
    # Bring-up: the target GPU's few rows weigh more against the other GPUs' (train.target_weight)
    on_90a = [c.replace("arch=gfx908", "arch=gfx90a") for c in common]
    r = run_cli(*on_90a, "train.target_weight=20", f"train.output={tmp_path / 'w0'}",
                f"hydra.run.dir={tmp_path / 'r3'}")
    assert r.returncode == 2 and "train.target_weight=20.0 weighs the job's arch" in r.stderr
    r = run_cli(*on_90a, "features.hardware=true", "train.target_weight=0", f"train.output={tmp_path / 'w0'}",
                f"hydra.run.dir={tmp_path / 'r4'}")
    assert r.returncode == 2 and "train.target_weight=0.0: must be > 0" in r.stderr
    q = as_problem("conv -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1", sel.family, "fwd", "fp32")
    scores = {}
    for w in (1, None):  # None: the default, 20
        r = run_cli(*on_90a, "features.hardware=true", *([f"train.target_weight={w}"] if w else []),
                    f"train.output={tmp_path / f'w{w}'}", f"hydra.run.dir={tmp_path / f'rw{w}'}")
        assert r.returncode == 0, r.stderr
        archs = json.loads((tmp_path / f"w{w}" / "train_manifest.json").read_text())["archs"]
        # arch=gfx90a is MI250X; the data has none of it, so its arch's rows (MI210's) are the target
        mi210, mi300x = archs[MI210_DEVICE], archs[MI300X_DEVICE]
        assert mi210.get("weight", 1) == (w or 20) and "weight" not in mi300x
        spans = [mi210["row_span"], mi300x["row_span"]]  # the target's rows first, then the rest
        assert spans[0] == [0, mi210["rows_used"]] and spans[1] == [spans[0][1], spans[0][1] + mi300x["rows_used"]]
        # the CV a bring-up needs: on the target's own problems, apart from the other GPUs'
        target = json.loads((tmp_path / f"w{w}" / "cv_metrics.json").read_text())["target_arch_cv"]
        assert target["arch"] == MI210_DEVICE and target["problems"] == mi210["problems"]
        assert f"train: CV on {MI210_DEVICE}'s own {target['problems']} problems" in r.stdout
        scores[w] = sorted((r.kernel, r.tflops) for r in Selector.load(tmp_path / f"w{w}").rank(q, k=None))
    assert [n for n, _ in scores[1]] == [n for n, _ in scores[None]]
    assert not np.allclose([t for _, t in scores[1]], [t for _, t in scores[None]])  # another model


def test_a_gpu_without_a_model_is_served_by_the_nearest_gpus_on_the_solvers_it_runs(tmp_path):
    """arch=gfx908 (MI100 has no bundle), BF16 (no model across GPUs is shipped for it): predict ranks
    with the bundle of the GPU nearest by
    hardware descriptors (MI210/250's, not MI300X's), drops that GPU's remembered answers, says so
    and how many of gfx908's own solvers it cannot rank, and never picks a solver that takes BF16 on
    gfx90a but not on gfx908 (gfx90a's pick there); a bundle asked for some kernels ranks only those."""
    from ckheur import Selector
    from ckheur.job import Job
    from ckheur.learn.bundle import load_bundle
    from ckheur.selection.predicting import nearest_bundle
    from ckheur.selection.selector import as_problem
    from ckheur.stages import compose_config

    job = Job.from_config(compose_config(["op=miopen/bwd_weight", "op.dtype=bf16", "arch=gfx908"]))
    path, arch = nearest_bundle(job, ROOT / "models")
    assert arch == "gfx90a" and path.name == "miopen_bwd_weight_bf16_gfx90a"
    on_942 = Job.from_config(compose_config(["op=miopen/bwd_weight", "op.dtype=bf16", "arch=gfx942"]))
    assert nearest_bundle(on_942, tmp_path) is None  # no other GPU's bundle in that folder
    own = len({k.name for k in job.pool.kernels} - {k.name for k in load_bundle(path).kernels})
    assert own > 0  # MI100's own solvers (older assembly implicit GEMMs, Winograd binaries)
    r = run_cli("stage=predict", "op=miopen/bwd_weight", "op.dtype=bf16", "arch=gfx908",
                "problem=convbfp16 -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -F 4",
                f"hydra.run.dir={tmp_path / 'p'}")
    assert r.returncode == 0, r.stderr
    assert ("NEAREST GPU'S MODEL: gfx908 has none, gfx90a is the nearest GPU with one (by hardware descriptors); "
            "no model across GPUs of bwd_weight bf16 is shipped") in r.stdout
    assert f"{own} solvers of gfx908's table it never measured are not ranked" in r.stdout
    assert "(tier: model)" in r.stdout  # not gfx90a's remembered answer
    # gfx90a's pick there (its NHWC assembly GEMM) takes BF16 on gfx90a, not on gfx908 (MIOpen's IsApplicable)
    nhwc = "ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC"
    on_90a = Job.from_config(compose_config(["op=miopen/bwd_weight", "op.dtype=bf16", "arch=gfx90a"]))
    served_90a = Selector.load(path)
    line = "convbfp16 -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -F 4"
    assert served_90a.rank(as_problem(line, served_90a.family, "bwd_weight", "bf16"), k=1)[0][0] == nhwc
    assert nhwc in {k.name for k in on_90a.pool.kernels} and nhwc not in r.stdout
    assert dict(job.pool.rejected)[nhwc] == "bf16 on gfx90a, gfx94*, gfx95* only (MIOpen's IsApplicable), not gfx908"
    r = run_cli("stage=predict", "op=miopen/bwd_weight", "op.dtype=bf16", "arch=gfx908", f"predict.find_db={MI210}",
                "problem=convbfp16 -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1 -F 4",
                f"hydra.run.dir={tmp_path / 'q'}")
    assert r.returncode == 2 and "predict.find_db: gfx908 has no model of its own" in r.stderr
    some = [k.name for k in load_bundle(path).kernels][:5]
    sel = Selector.load(path, kernels=[*some, "NoSuchSolver"])
    assert [k.name for k in sel._all_kernels] == some


def test_bring_up_sweep_draws_problems_at_random_within_its_budget(tmp_path, miopen_slices):
    """The bring-up's sweep as the docs give it (a find-db replayed as the new GPU, problems drawn at
    random, sweep.strategy=random): every problem it picks has every solver of the pool (the table's
    solvers that take the data type there) that MIOpen's rules keep timed (listed ones ok, the others
    censored, as MIOpen's find reports them),
    the budget is never exceeded, and the seed fixes the draw. (A small ensemble: in a random sweep
    it only estimates the gain, and these runs check the draw and what is timed; three rounds, the
    first and two more, of 0.25 and 0.375 of the budget.)"""
    from ckheur.data.dataset import read_dataset
    from ckheur.families.miopen.problems import FIELDS, problem_from_dict
    from ckheur.config import load_arch
    from ckheur.families.miopen.solvers import rule_rejections
    from ckheur.kernels import enumerate_pool

    whole = miopen_slices / "miopen_bwd_weight_fp16_gfx90a" / "gfx90a68.parquet"
    file_keys = {tuple(k) for k in read_dataset(whole)[list(FIELDS)].drop_duplicates().itertuples(index=False)}
    # the pool: the table's solvers that take backward-weights FP16 on gfx90a (14 of its 34)
    names = [k.name for k in enumerate_pool({"family": "miopen", "direction": "bwd_weight", "dtype": "fp16"},
                                            load_arch("gfx90a")).kernels]
    drawn = []
    for run, seed in (("a", 0), ("b", 0), ("c", 1)):
        out = tmp_path / run / "drill.parquet"
        r = run_cli("stage=sweep", "op=miopen/bwd_weight", "op.dtype=fp16", "arch=gfx90a", "backend=replay",
                    f"backend.paths=[{whole}]", "problems=miopen_log", "problems.sources.0.kind=dataset",
                    f"problems.sources.0.path={whole}", "sweep.strategy=random", "sweep.budget=0.2",
                    "sweep.active.round_size=0.375", "sweep.active.ensemble=2", "sweep.active.trees=20",
                    f"sweep.active.seed={seed}",
                    f"sweep.output={out}", f"hydra.run.dir={tmp_path / run}")
        assert r.returncode == 0, r.stderr
        df = read_dataset(out)
        per_problem = df.groupby(list(FIELDS)).kernel.nunique()
        for key, timed in per_problem.items():  # whole problems: every solver the rules keep
            q = problem_from_dict(dict(zip(FIELDS, key)))
            assert timed == sum(not rule_rejections(n, q, "bwd_weight", "fp16") for n in names)
        assert {"ok", "censored"} <= set(df.status)
        summary = json.loads((tmp_path / run / "sweep_summary.json").read_text())
        assert len(df) <= summary["budget_pairs"] < 1.2 * len(df) + 2 * per_problem.max()
        keys = {tuple(k) for k in per_problem.index}
        assert keys <= file_keys and len(keys) < len(file_keys)
        drawn.append(keys)
    assert drawn[0] == drawn[1] != drawn[2]
    # With a ranker (a new GPU's model across the other GPUs; here the shipped bundle), each problem
    # gets floor(sqrt(n)) solvers plus half that (rounded up) at random, n the solvers MIOpen's rules
    # keep (of the pool's 14): more problems, same budget; the first round's are the ranker's
    # best (later rounds take the ensemble's, once it is trained on them).
    from ckheur import Selector

    ranker = ROOT / "models" / "miopen_bwd_weight_fp16_gfx90a"
    common = ["stage=sweep", "op=miopen/bwd_weight", "op.dtype=fp16", "arch=gfx90a", "backend=replay",
              f"backend.paths=[{whole}]", "problems=miopen_log", "problems.sources.0.kind=dataset",
              f"problems.sources.0.path={whole}", "sweep.strategy=random", "sweep.budget=0.2",
              "sweep.active.round_size=0.375", "sweep.active.ensemble=2", "sweep.active.trees=20"]
    out = tmp_path / "r" / "drill.parquet"
    # (sweep.active.ranker=served: what stage=predict serves gfx90a, its own bundle, as the line says)
    r = run_cli(*common, "sweep.active.ranker=served", f"paths.models={ROOT / 'models'}", f"sweep.output={out}",
                f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 0, r.stderr
    assert f"sweep: sweep.active.ranker=served ranks with {ranker}: gfx90a's own bundle" in r.stdout
    df = read_dataset(out)
    timed, tops = df.groupby(list(FIELDS)).kernel.agg(set), {}
    for key, kernels in timed.items():
        q = problem_from_dict(dict(zip(FIELDS, key)))
        n = sum(not rule_rejections(name, q, "bwd_weight", "fp16") for name in names)
        tops[key] = max(1, math.isqrt(n))
        assert len(kernels) == tops[key] + min(-(-tops[key] // 2), n - tops[key])
    assert len(timed) > 1.5 * len(drawn[0])
    sel = Selector.load(ranker)
    first = json.loads((out / "active_sweep.json").read_text())["rounds"][0]["pairs"]
    firsts = {tuple(pair[:len(FIELDS)]) for pair in first}
    assert len(firsts) >= 20
    for key in sorted(firsts, key=str)[:20]:
        best = [n for n, _ in sel.rank(problem_from_dict(dict(zip(FIELDS, key))), k=tops[key])]
        assert set(best) <= timed[key]
    r = run_cli(*common, f"sweep.active.ranker={ROOT / 'models' / 'miopen_fwd_fp16_gfx90a'}",
                f"sweep.output={tmp_path / 'x' / 'd.parquet'}", f"hydra.run.dir={tmp_path / 'x'}")
    assert r.returncode == 2 and "sweep.active.ranker=" in r.stderr and "bundle; this sweep is miopen bwd_weight" in r.stderr
