"""Hybrid selection: tuning database, selection tiers, stage=tune, partial-measurement training,
hybrid evaluation. Measurements come from the real gfx950 CSV through the replay backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import ROOT, run_cli
from ckheur.data.dataset import read_dataset
from ckheur.parts import CorruptPartWarning, DatasetError
from ckheur.problems import CONV_FIELDS

SHIPPED = "models/grouped_conv_fwd_bf16_gfx950"
REAL = "measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz"
FWD = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}
# Three real shapes of the CSV (problem_idx 0, 1, 2).
P0 = {"N": 1, "C": 128, "K": 256, "Hi": 32, "Wi": 32, "Y": 2, "X": 2, "stride_h": 2, "stride_w": 2}


@pytest.fixture
def real_problems():
    from ckheur.families import get_family
    from ckheur.problems.sources import dedupe, read_csv

    return dedupe(read_csv(ROOT / "ckheur" / REAL, get_family("grouped_conv")))


class Counting:
    """A measure callable over the replay backend that records every call."""

    def __init__(self, sel, fail=()):
        from ckheur.backends import measure_function
        from ckheur.config import load_option

        self.inner = measure_function({"name": "replay", "paths": [REAL], "batch_pairs": 100}, FWD,
                                      load_option("arch/gfx950"), sel.kernels)
        self.fail, self.calls = set(fail), []

    def __call__(self, problem, names):
        self.calls.append(list(names))
        got = self.inner(problem, names)
        return {n: (None if n in self.fail else t) for n, t in got.items()}


def test_tiers_in_order_and_a_db_hit_measures_nothing(tmp_path):
    from ckheur import Selector

    sel = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    pure = sel.select(P0)
    assert pure.source == "model" and pure.kernel == sel.rank(P0, k=1)[0].kernel
    m = Counting(sel)
    r = sel.select(P0, measure=m, k=3)
    ranked = [n for n, _ in sel.rank(P0, k=3)]
    assert r.source == "measured" and m.calls == [ranked]
    assert r.kernel == min(r.timed, key=r.timed.get) and set(r.timed) == set(ranked)
    # The replayed latency is the real CSV's.
    import pandas as pd

    raw = pd.read_csv(ROOT / "ckheur" / REAL)
    row = raw[(raw.problem_idx == 0) & (raw.kernel == r.kernel.replace("_intrawave", ""))]
    assert r.latency_ms == pytest.approx(float(row.latency_ms.iloc[-1]))
    again = sel.select(P0, measure=m, k=3)
    assert again.source == "tuning_db" and again.kernel == r.kernel and len(m.calls) == 1
    # A new process (new Selector) sees the database too; so does the MIOpenDriver spelling.
    other = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    assert other.select("convbfp16 -n 1 -c 128 -H 32 -W 32 -k 256 -y 2 -x 2 -u 2 -v 2").source == "tuning_db"
    # Without a model: the analytic tier, and measured when a measure function is given.
    ana = Selector.analytic(sel.kernels, sel.arch, "fwd", "bf16", tuning_db=tmp_path / "db2", create_tuning_db=True)
    assert ana.select(P0).source == "analytic"
    assert ana.select(P0, measure=Counting(sel), k=2).source == "measured"
    assert ana.select(P0).source == "tuning_db"


def test_failures_are_recorded_and_the_next_k_are_timed(tmp_path):
    from ckheur import Selector

    sel = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    ranked = [n for n, _ in sel.rank(P0, k=None)]
    m = Counting(sel, fail=ranked[:2])
    r = sel.select(P0, measure=m, k=2)
    assert m.calls == [ranked[:2], ranked[2:4]] and r.source == "measured" and r.kernel in ranked[2:4]
    df = read_dataset(tmp_path / "db")
    failed = df[df.status == "failed"]
    assert sorted(failed.kernel) == sorted(ranked[:2]) and (failed.error == "measure returned no time").all()
    assert (df.backend == "callable").all()


def test_backend_measure_records_provenance(tmp_path):
    from ckheur import Selector

    sel = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    m = Counting(sel).inner
    assert set(m(sel.family.problems.problem_from_dict(P0), [sel.kernels[0].name])) == {sel.kernels[0].name}
    sel.select(P0, measure=m, k=3)
    df = read_dataset(tmp_path / "db")
    assert len(df) == 3 and (df.backend == "replay").all() and (df.status == "ok").all()


def test_mismatched_database_is_refused(tmp_path):
    from ckheur import Selector
    from ckheur.data.tuning_db import TuningDB, TuningDBError

    sel = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    sel.select(P0, measure=Counting(sel), k=1)
    with pytest.raises(TuningDBError, match="arch 'gfx950' \\(wanted 'gfx942'\\)"):
        TuningDB.open(tmp_path / "db", FWD, "gfx942")
    with pytest.raises(TuningDBError, match="dtype 'bf16' \\(wanted 'fp16'\\)"):
        TuningDB.open(tmp_path / "db", {**FWD, "dtype": "fp16"}, "gfx950")
    with pytest.raises(TuningDBError, match="direction 'fwd' \\(wanted 'bwd_data'\\)"):
        TuningDB.open(tmp_path / "db", {**FWD, "direction": "bwd_data"}, "gfx950")
    # Rows of another arch in a folder without the meta file (a copied dataset) are refused too.
    other = tmp_path / "copied"
    other.mkdir()
    for part in (tmp_path / "db").glob("part-*.parquet"):
        (other / part.name).write_bytes(part.read_bytes())
    with pytest.raises(TuningDBError, match="holds files but no tuning_db.json"):
        TuningDB.open(other, FWD, "gfx942")
    assert not (other / "tuning_db.json").exists()  # refused: nothing written
    with pytest.raises(TuningDBError, match="does not exist"):  # a typo never creates an empty database
        Selector.load(SHIPPED, tuning_db=tmp_path / "dbb")
    assert not (tmp_path / "dbb").exists()
    (tmp_path / "db" / "tuning_db.json").write_text("[1, 2]")
    with pytest.raises(TuningDBError, match="not an object"):
        TuningDB.open(tmp_path / "db", FWD, "gfx950")


def test_corrupt_part_is_skipped_with_a_warning(tmp_path):
    from ckheur import Selector
    from ckheur.data.tuning_db import TuningDB

    sel = Selector.load(SHIPPED, tuning_db=tmp_path / "db", create_tuning_db=True)
    sel.select(P0, measure=Counting(sel), k=3)
    (tmp_path / "db" / "part-00000000T000000000000-deadbeef.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.warns(CorruptPartWarning, match="skipping unreadable dataset part"):
        db = TuningDB.open(tmp_path / "db", FWD, "gfx950")
    assert db.best(sel.family.problems.problem_from_dict(P0).key()) is not None
    with pytest.warns(CorruptPartWarning):
        assert len(read_dataset(tmp_path / "db")) == 3
    # a damaged part is skipped; a damaged file the user names is refused, naming it (stages: exit 2)
    bad = tmp_path / "named.parquet"
    for content in (b"", b"PAR1 not really parquet"):
        bad.write_bytes(content)
        with pytest.raises(DatasetError, match=f"{bad}: not a readable Parquet dataset"):
            read_dataset(bad)
    r = run_cli("stage=train", f"data.paths=[{bad}]", f"train.output={tmp_path / 'm'}")
    assert r.returncode == 2 and "not a readable Parquet dataset" in r.stderr and "Traceback" not in r.stderr
    fdb = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"  # imported, never read as a dataset
    with pytest.raises(DatasetError, match=f"{fdb}: a file stage=import reads, not a dataset: import it"):
        read_dataset(fdb)


WRITER = textwrap.dedent("""
    import sys
    from ckheur import Selector
    from ckheur.backends import measure_function
    from ckheur.config import load_option
    from ckheur.families import get_family
    from ckheur.problems.sources import dedupe, read_csv

    def write(db, start, stop):
        sel = Selector.load("{model}", tuning_db=db, create_tuning_db=True)
        m = measure_function({{"name": "replay", "paths": ["{real}"], "batch_pairs": 100}},
                             {{"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}},
                             load_option("arch/gfx950"), sel.kernels)
        for p in dedupe(read_csv("{csv}", get_family("grouped_conv")))[start:stop]:
            sel.select(p, measure=m, k=2)

    if __name__ == "__main__":
        write(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
""")


def test_concurrent_writers_lose_nothing(tmp_path, real_problems):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(model=ROOT / SHIPPED, real=REAL, csv=ROOT / "ckheur" / REAL))
    db = tmp_path / "db"
    # Two processes, overlapping ranges: 0-40 in a process of its own and, once it writes, 20-60 in this one.
    proc = subprocess.Popen([sys.executable, str(script), str(db), "0", "40"], cwd=ROOT)
    deadline = time.time() + 600  # a hang guard
    while time.time() < deadline and proc.poll() is None and not list(db.glob("part-*.parquet")):
        time.sleep(0.02)
    writer: dict = {"__name__": "writer"}
    exec(script.read_text(), writer)  # noqa: S102 (the writer above, in this process)
    writer["write"](str(db), 20, 60)
    assert proc.wait(timeout=1800) == 0
    raw = read_dataset(db, dedupe=False)
    keys = {tuple(r) for r in raw[list(CONV_FIELDS)].itertuples(index=False, name=None)}
    assert keys == {p.key() for p in real_problems[:60]}
    # Every part of both writers is there: each problem holds whole records of k=2 kernels, once, or
    # twice when both processes timed it before seeing the other's record (a miss refreshes first).
    counts = raw.groupby(list(CONV_FIELDS)).size()
    assert len(counts) == 60 and counts.isin([2, 4]).all()
    assert len(list(db.glob("part-*.parquet"))) == len(raw) // 2


def test_stage_tune_single_problem_then_predict_prints_the_tier(tmp_path):
    store = f"paths.tuning={tmp_path / 'tuning'}"  # the op's default database: its campaign in tuning/tuning.db
    common = ["op=fwd", "backend=replay", f"backend.paths=[{REAL}]", store]
    line = "problem=convbfp16 -n 1 -c 128 -H 32 -W 32 -k 256 -y 2 -x 2 -u 2 -v 2"
    r = run_cli("stage=tune", *common, line, f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    assert "tune: selected grouped_conv_forward_bf16_2d_" in r.stdout and "(nothing to measure)" not in r.stdout
    db = f"sqlite:///{tmp_path / 'tuning' / 'tuning.db'}"
    assert f"tune: measurements in {db}: stage=predict and stage=report of this op answer these problems" in r.stdout
    s = json.loads((tmp_path / "a" / "tune_summary.json").read_text())
    assert s["attempts"] == 3 and s["problems_tuned"] == 1
    r = run_cli("stage=tune", *common, line, f"hydra.run.dir={tmp_path / 'b'}")
    assert json.loads((tmp_path / "b" / "tune_summary.json").read_text())["attempts"] == 0
    r = run_cli("stage=predict", "op=fwd", line, store, f"hydra.run.dir={tmp_path / 'c'}")  # served by default
    assert r.returncode == 0 and "(tier: tuning_db, measured" in r.stdout
    assert f"predict: tuning database: {db} (the op's default" in r.stdout
    r = run_cli("stage=predict", "op=fwd", line, store, "predict.tuning_db=none", f"hydra.run.dir={tmp_path / 'd'}")
    assert "(tier: model)" in r.stdout and "tuning database: off" in r.stdout
    r = run_cli("stage=predict", "op=fwd", "arch=gfx942", line, f"predict.tuning_db='{db}'",
                f"hydra.run.dir={tmp_path / 'e'}")  # its gfx950 measurements never answer for gfx942
    assert r.returncode == 2 and "no campaign 'grouped_conv_fwd_bf16_gfx942'" in r.stderr, r.stderr


def test_stage_tune_resumes_after_sigkill_without_measuring_twice(tmp_path):
    """A slow command backend is killed mid-tune; the rerun measures only the missing top-k pairs."""
    bench = ROOT / "tests" / "data" / "fake_bench.py"
    args = ["stage=tune", "op=fwd",
            f"problems.sources=[{{kind: csv, path: {REAL}}}]", "problems.shard.count=12",  # 16 shapes
            "backend=command", f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}} 0.05",
            "backend.regex='Elapsed: ([0-9.]+) us'", "backend.time_unit=us", "backend.batch_pairs=3",
            f"tune.db={tmp_path / 'db'}", "tune.top_k=3"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path}/a"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 600  # a hang guard: the loop ends when the parts appear
    while time.time() < deadline and len(list((tmp_path / "db").glob("part-*.parquet"))) < 3:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = read_dataset(tmp_path / "db", dedupe=False)
    assert 0 < len(saved) < 48
    r = run_cli(*args, f"hydra.run.dir={tmp_path}/b")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "b" / "tune_summary.json").read_text())
    assert s["pairs_already_in_db"] == len(saved)
    df = read_dataset(tmp_path / "db", dedupe=False)
    assert not df.duplicated([*CONV_FIELDS, "kernel"]).any()  # nothing measured twice
    # fake_bench fails every compv4 kernel: those problems got further kernels until one ran.
    assert (df.status == "failed").any() and s["problems_tuned"] == 16
    ran = df[df.status == "ok"].groupby(list(CONV_FIELDS)).size()
    assert len(ran) == 16


def test_concurrent_tune_runs_split_the_work_and_a_dead_runs_claims_expire(tmp_path):
    """Two stage=tune runs over the same problems into one database claim problems before
    measuring: together they time each pair once, and both see every problem tuned. A claim
    left by a killed run does not block the next run."""
    from ckheur.config import load_option
    from ckheur.data.tuning_db import TuningDB

    bench = ROOT / "tests" / "data" / "fake_bench.py"
    args = ["stage=tune", "op=fwd",
            f"problems.sources=[{{kind: csv, path: {REAL}}}]", "problems.shard.count=12",  # 16 shapes
            "backend=command", f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}} 0.05",
            "backend.regex='Elapsed: ([0-9.]+) us'", "backend.time_unit=us", "backend.batch_pairs=3",
            f"tune.db={tmp_path / 'db'}", "tune.top_k=3", "tune.claim_poll_s=0.1", "tune.progress=none"]
    # Run a in a process of its own and, once it has claimed a problem, run b in this one.
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path}/a"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600  # a hang guard
    while time.time() < deadline and proc.poll() is None and not (
            (tmp_path / "db" / "claims").is_dir() and any((tmp_path / "db" / "claims").iterdir())):
        time.sleep(0.02)
    b = run_cli(*args, f"hydra.run.dir={tmp_path}/b")
    out = proc.communicate(timeout=900)  # a hang guard
    assert [proc.returncode, b.returncode] == [0, 0], (out, b.stderr)
    df = read_dataset(tmp_path / "db", dedupe=False)
    assert not df.duplicated([*CONV_FIELDS, "kernel"]).any()  # no pair measured twice
    summaries = [json.loads((tmp_path / name / "tune_summary.json").read_text()) for name in ("a", "b")]
    assert [s["problems_tuned"] for s in summaries] == [16, 16]
    assert sum(s["attempts"] for s in summaries) == len(df)
    assert all(s["attempts"] > 0 for s in summaries), [s["attempts"] for s in summaries]  # both did a share
    assert list((tmp_path / "db" / "claims").iterdir()) == []  # every claim's lock file was removed
    # A claim held by a process that died expires with it: the next run measures that problem.
    op = {**load_option("op/grouped_conv/fwd"), "family": "grouped_conv", "direction": "fwd"}
    db = TuningDB.open(tmp_path / "db", op, "gfx950")
    key = next(iter(db._runs))
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from ckheur.data.tuning_db import TuningDB
        db = TuningDB.open({str(tmp_path / 'db')!r}, {op!r}, "gfx950")
        assert db.claim({key!r}) is not None
        print("held", flush=True)
        time.sleep(600)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    assert db.claim(key) is None  # held by a live process
    holder.kill()
    holder.wait()
    claim = db.claim(key)
    assert claim is not None
    claim.release()


# ------------------------------------------------------------------ training on partial measurements

def _table(rows):
    """A training table over three real fwd kernels from hand-made (problem N, kernel, TFLOPS) rows."""
    import pandas as pd

    from ckheur.config import load_option
    from ckheur.families.engines import get_engine
    from ckheur.kernels import enumerate_pool
    from ckheur.learn.training import build_table

    op, arch = load_option("op/grouped_conv/fwd"), load_option("arch/gfx950")
    op.update(direction="fwd", family="grouped_conv", ndims=[2])
    pool = [k for k in enumerate_pool(op, arch).kernels if k.pipeline == "compv3"][:3]
    df = pd.DataFrame([{"arch": "gfx950", "direction": "fwd", "dtype": "bf16", "N": n, "C": 64, "K": 64, "G": 1,
                        "Di": 1, "Hi": 28, "Wi": 28, "Z": 1, "Y": 3, "X": 3, "stride_d": 1, "stride_h": 1,
                        "stride_w": 1, "pad_d": 0, "pad_h": 1, "pad_w": 1, "dilation_d": 1, "dilation_h": 1,
                        "dilation_w": 1, "kernel": pool[k].name, "tflops": t, "status": s}
                       for n, k, t, s in rows])
    return build_table(df, op, arch, pool, get_engine("grouped_conv"), None), pool


def test_partly_measured_problems_are_detected_and_naive_claims_a_false_oracle():
    from ckheur.learn.training import labels, pairwise_terms

    # Problem N=1: all three kernels measured, kernel 0 best. Problem N=2: kernels 1 and 2 only
    # (a tuning database); kernel 0 was not timed. Problem N=4: kernel 0 failed, 1 and 2 ran:
    # every kernel was attempted, so it is fully measured.
    tb, pool = _table([(1, 0, 100.0, "ok"), (1, 1, 50.0, "ok"), (1, 2, 25.0, "ok"),
                       (2, 1, 60.0, "ok"), (2, 2, 30.0, "ok"),
                       (4, 0, float("nan"), "failed"), (4, 1, 40.0, "ok"), (4, 2, 20.0, "ok")])
    assert tb.full.tolist() == [True, False, True]
    assert tb.report["problems_partly_measured"] == 1
    naive = labels("relative", tb.tflops, tb.pid)
    on2 = tb.pid == 1
    # The naive target calls kernel 1 optimal on N=2 (label 1.0) although kernel 0 was never timed
    # there, and kernel 0 beat kernel 1 by 2x on the neighbouring shape.
    assert naive[on2 & (tb.kid == 1)][0] == 1.0
    # The pairwise terms say only what was measured: kernel 1 beats kernel 2 by 30/60 of the best measured.
    pi, pj, delta, w = pairwise_terms(tb.tflops, tb.pid, ~tb.full[tb.pid])
    assert len(pi) == 1 and tb.kid[pi[0]] == 1 and tb.kid[pj[0]] == 2 and delta[0] == pytest.approx(0.5)
    assert w[0] == 1.0


def test_a_problem_with_no_usable_time_labels_zero_for_both_objectives():
    import warnings

    from ckheur.learn.training import labels

    # problem 0: every timed kernel censored (0 TFLOPS); problem 1: two real times
    tflops, pid = np.array([0.0, 0.0, 40.0, 20.0]), np.array([0, 0, 1, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 on the censored problem
        assert labels("relative", tflops, pid).tolist() == [0.0, 0.0, 1.0, 0.5]
        assert labels("lambdarank", tflops, pid, rank_power=1.0).tolist() == [0, 0, 30, 15]


def test_mixed_objective_gradient_matches_its_loss():
    from ckheur.learn.training import _mixed_loss

    rng = np.random.default_rng(0)
    pid = np.repeat(np.arange(6), 4)
    tflops = rng.uniform(10, 100, len(pid))
    full = np.repeat([True, False, True, False, False, True], 4)
    y = tflops / np.maximum.reduceat(tflops, np.arange(0, 24, 4))[pid]
    preds = rng.normal(0.5, 0.2, len(pid))
    weights = np.repeat(rng.choice([1.0, 20.0], 6), 4)  # train.target_weight: a problem's rows weigh alike
    for row_weight in (None, weights):
        grad_hess, loss = _mixed_loss(y, full, tflops, pid, 0.7, row_weight)
        g, h = grad_hess(preds)
        num = np.array([(loss(preds + e) - loss(preds - e)) / 2e-6 for e in np.eye(len(pid)) * 1e-6])
        np.testing.assert_allclose(g / len(pid), num, rtol=1e-5, atol=1e-9)  # loss is the mean
        assert (h > 0).all()
    # the weights count: every row at 3 triples the loss, a weighted problem moves its gradient alone
    plain, tripled = _mixed_loss(y, full, tflops, pid, 0.7)[1], _mixed_loss(y, full, tflops, pid, 0.7, np.full(24, 3.0))[1]
    assert tripled(preds) == pytest.approx(3 * plain(preds))
    g1 = _mixed_loss(y, full, tflops, pid, 0.7)[0](preds)[0]
    gw = _mixed_loss(y, full, tflops, pid, 0.7, np.repeat([5.0, 1, 1, 5.0, 1, 1], 4))[0](preds)[0]
    np.testing.assert_allclose(gw[pid == 0], 5 * g1[pid == 0])
    np.testing.assert_allclose(gw[pid == 3], 5 * g1[pid == 3])
    np.testing.assert_allclose(gw[pid == 1], g1[pid == 1])


def test_partial_targets_train_and_drop_uses_full_problems_only():
    from ckheur.learn.training import TrainingError, fit

    rows = []
    for n in range(1, 41):
        if n % 2:
            rows += [(n, 0, 100.0 + n, "ok"), (n, 1, 50.0 + n, "ok"), (n, 2, 25.0, "ok")]
        else:
            rows += [(n, 1, 60.0 + n, "ok"), (n, 2, 30.0, "ok")]
    tb, _ = _table(rows)
    model = {"learning_rate": 0.2, "num_leaves": 4, "min_data_in_leaf": 2, "feature_fraction": 1.0, "subsample": 1.0,
             "subsample_freq": 0, "lambda_l2": 0.0, "threads": 1, "early_stopping_rounds": 5}
    everything = np.arange(len(tb.X))
    preds = {}
    for partial in ("naive", "pairwise", "drop"):
        b = fit(tb, everything, model, "relative", [], 0, 30, partial=partial)
        preds[partial] = b.predict(tb.X)
        assert b.num_trees() == 30
    # drop: partly measured rows play no part, so kernel 1 on even N is scored like its full neighbours (~0.5).
    even_k1 = (tb.kid == 1) & np.isin(tb.pid, np.flatnonzero(~tb.full))
    assert preds["drop"][even_k1].mean() < 0.75 and preds["naive"][even_k1].mean() > 0.9
    with pytest.raises(TrainingError, match="train.partial"):
        fit(tb, everything, model, "relative", [], 0, 5, partial="bogus")


# ------------------------------------------------------------------ evaluation

def test_hybrid_pick_and_time_weighted_on_hand_computed_cases():
    from ckheur.metrics import hybrid_pick, time_weighted

    scores = np.array([0.9, 0.8, 0.7, 0.1])
    measured = np.array([50.0, 100.0, np.nan, 80.0])
    assert hybrid_pick(scores, measured, 1) == (0, 1)
    assert hybrid_pick(scores, measured, 2) == (1, 2)
    assert hybrid_pick(scores, measured, 10) == (1, 4)
    assert hybrid_pick(scores, np.array([np.nan, np.nan, 1.0, 2.0]), 2) == (0, 2)  # both failed: a failed pick
    # Two problems: oracle 1 ms at 100% and 9 ms at 50% (18 ms picked): 10 / 19 of the best run time.
    assert time_weighted([1.0, 0.5], [1.0, 9.0]) == pytest.approx(10 / 19)
    assert time_weighted([1.0, 0.0], [1.0, 9.0]) == 1.0  # failed picks are counted apart


def test_evaluate_reports_hybrid_time_weighted_and_tie_aware(small_model_dir, tmp_path, ck_fwd_csv):
    r = run_cli("stage=evaluate", "op=fwd", f"evaluate.model_dir={small_model_dir}", f"data.eval_paths=[{ck_fwd_csv}]",
                "evaluate.top_k=[1,3,20]", "evaluate.plots=false", "data.shard.count=3", "data.shard.index=1",
                f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert set(m["hybrid"]) == {"1", "3", "20"}
    assert m["hybrid"]["1"]["mean"] == pytest.approx(m["efficiency"]["mean"])
    assert m["hybrid"]["20"]["mean"] == 1.0 and m["hybrid"]["20"]["kernels_timed_per_problem"] == 20
    assert m["hybrid"]["3"]["kernels_timed_per_problem"] == 3 and m["hybrid"]["3"]["fraction_of_pool_timed"] == pytest.approx(0.15)
    assert m["efficiency"]["mean"] <= m["hybrid"]["3"]["mean"] <= 1.0
    assert 0 < m["efficiency"]["time_weighted"] <= 1 and "time_weighted" in m["baselines"]["best fixed kernel"]
    assert m["top1"] <= m["top1_tie_aware"] <= 1 and m["tie_tolerance"] == 0.02
    from ckheur.families import get_family
    from ckheur.problems.sources import dedupe, read_csv, shard

    assert m["problems_evaluated"] == len(shard(dedupe(read_csv(ck_fwd_csv, get_family("grouped_conv"))), 1, 3, seed=0))
    assert "model top-3 measured" in r.stdout


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory, ck_fwd_csv):
    out = tmp_path_factory.mktemp("hybrid_model")
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{ck_fwd_csv}]", "train.calibration_iterations=100", "model.max_trees=60", "train.folds=3",
                "data.shard.count=3", "data.shard.index=0", f"train.output={out / 'm'}", f"hydra.run.dir={out / 'run'}")
    assert r.returncode == 0, r.stderr
    cv = json.loads((out / "m" / "cv_metrics.json").read_text())
    assert cv["cluster_cv"]["efficiency"]["mean"] > 0.5 and len(cv["cluster_cv"]["cluster_sizes"]) == 5
    return out / "m"


def test_training_mixes_a_ck_csv_and_a_tuning_database(small_model_dir, tmp_path):
    """The loop through the stages: tune the shard the model never saw, retrain on CSV + database."""
    r = run_cli("stage=tune", "op=fwd", "backend=replay", f"backend.paths=[{REAL}]",
                f"problems.sources=[{{kind: csv, path: {REAL}}}]", "problems.shard.count=3", "problems.shard.index=1",
                "problems.shard.seed=0", f"tune.model_dir={small_model_dir}", f"tune.db={tmp_path / 'db'}",
                f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    # Small trainings: what is checked is the data they read (partly measured or not), not the model.
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{REAL},{tmp_path / 'db'}]", "train.calibration_iterations=100", "model.max_trees=10",
                "train.folds=2", "train.cluster_cv=false", f"train.output={tmp_path / 'm2'}", f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode == 0, r.stderr
    assert "problems are partly measured" not in r.stdout  # the CSV measures every kernel of the tuned shapes too
    r = run_cli("stage=train", "op=fwd", f"data.paths=[{tmp_path / 'db'}]", "model.max_trees=10", "train.folds=2",
                "train.cluster_cv=false", f"train.output={tmp_path / 'm3'}", f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 0, r.stderr
    assert "problems are partly measured" in r.stdout
    manifest = json.loads((tmp_path / "m3" / "train_manifest.json").read_text())
    assert manifest["data_kind"] == "real" and manifest["data_backend"] == ["replay"]
