"""Explaining one pick (ckheur.selection.predicting.explain, stage=predict predict.explain=true): every
candidate of the pool once, the selector's pick first with the tier that decided, the model's
rank and score, measured times where known (tuning database, MIOpen's find-db), and whether the
kernel applies. One problem of each family: CK grouped convolution (shipped bundle, times from the
real gfx950 CSV), CK GEMM (analytic model), MIOpen (shipped bundle, the MI300X find-db slice)."""

from __future__ import annotations

import bz2

import pandas as pd
import pytest

from ckheur.selection.predicting import explain
from conftest import ROOT, run_cli

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
REAL = ROOT / "ckheur" / "measurements" / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv.gz"
P0 = {"N": 1, "C": 128, "K": 256, "Hi": 32, "Wi": 32, "Y": 2, "X": 2, "stride_h": 2, "stride_w": 2}  # problem_idx 0


def _check_listing(rows, selector, problem):
    """Every pool kernel once, the pick first, then the model's ranking in order."""
    assert sorted(r.kernel for r in rows) == sorted(k.name for k in selector.kernels)
    chosen = selector.select(problem)
    assert rows[0].picked and rows[0].kernel == chosen.kernel and rows[0].tier == chosen.source
    assert not any(r.picked or r.tier for r in rows[1:])
    ranked = [r.kernel for r in sorted((r for r in rows if r.rank), key=lambda r: r.rank)]
    assert ranked == [k for k, _ in selector.rank(problem)]


def test_explain_a_ck_convolution_pick_with_measured_times(tmp_path):
    from ckheur import Selector
    from ckheur.backends import measure_function
    from ckheur.config import load_option

    sel = Selector.load(ROOT / "models" / "grouped_conv_fwd_bf16_gfx950", tuning_db=tmp_path / "db",
                        create_tuning_db=True)
    fwd = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16"}
    measure = measure_function({"name": "replay", "paths": [str(REAL)], "batch_pairs": 100}, fwd,
                               load_option("arch/gfx950"), sel.kernels)
    before = explain(sel, P0)
    assert before[0].tier == "model" and before[0].rank == 1 and all(r.tuned_ms is None for r in before)
    sel.select(P0, measure=measure, k=3)
    rows = explain(sel, P0)
    _check_listing(rows, sel, P0)
    assert rows[0].tier == "tuning_db" and all(r.applies for r in rows)  # the pool holds legal kernels only
    raw = pd.read_csv(REAL)
    raw = raw[raw.problem_idx == 0]
    measured = {r.kernel: r.tuned_ms for r in rows if r.tuned_status}
    assert set(measured) == {k for k, _ in sel.rank(P0, k=3)}
    for kernel, ms in measured.items():  # the CSV's times, the pick the fastest of them
        assert ms == pytest.approx(float(raw[raw.kernel == kernel.replace("_intrawave", "")].latency_ms.iloc[-1]))
    assert rows[0].tuned_ms == min(measured.values())
    assert all(r.pred_ms > 0 for r in rows)  # the bundle predicts times


def test_explain_a_gemm_pick_says_which_kernels_do_not_support_the_problem():
    from ckheur import Selector
    from ckheur.config import load_option
    from ckheur.job import Job

    job = Job(load_option("op/gemm/universal"), load_option("arch/gfx950"))
    sel = Selector.analytic(job.pool.kernels, job.arch, job.direction, job.dtype, op=job.op)
    problem = {"M": 1000, "N": 4096, "K": 4096}  # M divides no tile: only kernels that pad M apply
    rows = explain(sel, problem)
    _check_listing(rows, sel, problem)
    assert rows[0].tier == "analytic" and rows[0].applies
    fits = {k.name for k in job.pool.kernels if k.pad_m or 1000 % k.tile_m == 0}  # N, K: every tile divides 4096
    assert {r.kernel for r in rows if r.applies} == fits and 0 < len(fits) < len(rows)
    assert all(r.rank is None and r.score is None for r in rows if not r.applies)
    # each says why: its tile_m and no padding of M (every tile divides N and K)
    assert all(r.why.startswith("M=1000 is no multiple of its tile_m=") and r.why.endswith("does not pad M")
               for r in rows if not r.applies)


def test_explain_a_miopen_pick_beside_the_find_db():
    from ckheur import Selector
    from ckheur.integrations.miopen.find_db import parse_line, problem_key, read_find_db
    from ckheur.families.miopen.problems import FIELDS, from_text, problem_from_dict, to_driver_line

    lines = [parse_line(t) for t in bz2.open(MI300X, "rt").read().splitlines()]
    line = next(ln for ln in lines if ln.key.direction == "F" and ln.key.dtypes == ("FP16",) and len(ln.entries) > 2)
    sel = Selector.load(ROOT / "models" / "miopen_fwd_fp16_gfx942", find_db=MI300X)
    fdb = read_find_db(MI300X)
    problem = next(p for p in (problem_from_dict({f: row[f] for f in FIELDS}) for _, row in fdb.problems[
        (fdb.problems.direction == "fwd") & (fdb.problems.dtype == "fp16")].iterrows())
        if problem_key(p, "fwd", "fp16").text() == line.key.text())
    rows = explain(sel, problem)
    _check_listing(rows, sel, problem)
    listed = {e.solver: e.time_ms for e in line.entries}
    pool = {k.name for k in sel.kernels}
    assert {r.kernel: r.find_db_ms for r in rows if r.find_db_ms is not None} == \
        {s: t for s, t in listed.items() if s in pool}
    assert {r.kernel for r in rows if r.applies} == set(listed) & pool
    # The bundle ranks with op.applicability=both, learned from this file: what it masks, the file never lists.
    assert {r.kernel for r in rows if r.applies is False}.isdisjoint(listed)
    # each masked solver says why: a rule of MIOpen's IsApplicable, or the kinds the file lists it for
    masked = [r.why for r in rows if r.applies is False]
    assert masked and all(w.startswith(("MIOpen's IsApplicable: ", "op.listed: not listed for NCHW/fp16/"))
                          for w in masked), masked
    assert rows[0].tier == "find_db" and rows[0].kernel == min((s for s in listed if s in pool), key=listed.get)
    # From the command line, with the problem as a MIOpenDriver line.
    assert from_text(to_driver_line(problem, "fp16"), "fwd", "fp16") == problem
    op = ["stage=predict", "op=miopen/fwd", "op.dtype=fp16", "arch=gfx942", "predict.explain=true"]
    r = run_cli(*op, f"predict.find_db={MI300X}", f"problem={to_driver_line(problem, 'fp16')}")
    assert r.returncode == 0, r.stderr
    out = [t for t in r.stdout.splitlines() if not t.startswith("outputs:")]  # every stage ends naming its outputs
    first = next(i for i, t in enumerate(out) if t.startswith("*"))
    assert rows[0].kernel in out[first] and "listed in the find-db" in out[first]
    assert all(sum(k in t.split() for t in out[first:-1]) == 1 for k in pool)  # every solver, once
    assert out[-1] == f"selected: {rows[0].kernel} (tier: find_db)"
    r = run_cli(*op)
    assert r.returncode == 2 and "predict.explain=true explains one problem" in r.stderr
