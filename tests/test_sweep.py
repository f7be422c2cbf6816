"""Sweep stage, datasets and backends, end to end through the CLI where it matters."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ckheur.data.dataset import COLUMNS, DatasetError, read_dataset, write_part
from ckheur.integrations.ck.tile_engine_csv import read_ck_csv
from ckheur.problems import CONV_FIELDS
from conftest import ROOT, run_cli, tiny_overrides

def _ds(data: Path, name: str, op: str = "fwd") -> Path:
    return data / f"grouped_conv_{op}_bf16_gfx950" / f"{name}.parquet"


def test_resume_measures_only_what_is_missing(tmp_path):
    from ckheur.stages import run_overrides

    # The stage alone (compose + run): resuming is the point, not the command line.
    args = ["stage=sweep", "problems=smoke", f"paths.data={tmp_path}/data"]
    run_overrides([*args, "problems.shard.count=2", "problems.shard.index=0"], tmp_path / "a", quiet=True)
    first = len(read_dataset(_ds(tmp_path / "data", "smoke")))
    assert 0 < first < 600
    s = run_overrides(args, tmp_path / "b", quiet=True)
    assert s == json.loads((tmp_path / "b" / "sweep_summary.json").read_text())
    assert s["pairs_skipped_existing"] == first and s["attempts"] == 600 - first
    df = read_dataset(_ds(tmp_path / "data", "smoke"), dedupe=False)
    assert len(df) == 600 and not df.duplicated([*CONV_FIELDS, "kernel"]).any()
    # overwrite keeps the old data aside instead of deleting it
    run_overrides([*args, "sweep.overwrite=true", "problems.shard.count=5"], tmp_path / "c", quiet=True)
    kept = list((tmp_path / "data" / "grouped_conv_fwd_bf16_gfx950").glob("smoke.parquet.replaced-*"))
    assert len(kept) == 1 and len(read_dataset(kept[0])) == 600


def test_sigkill_loses_at_most_the_batch_in_flight(tmp_path):
    """A slow command backend is killed mid-sweep; the rerun measures only what is missing."""
    bench = ROOT / "tests" / "data" / "fake_bench.py"
    args = ["stage=sweep", *tiny_overrides(),
            "backend=command", f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}} 0.05",
            "backend.regex='Elapsed: ([0-9.]+) us'", "backend.time_unit=us", "backend.batch_pairs=3",
            f"paths.data={tmp_path}/data", "op.ndims=[2]", "kernels.filter=\"tile_k == 128\""]  # 12 kernels
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path}/a"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    ds = _ds(tmp_path / "data", "tiny")
    deadline = time.time() + 600  # a hang guard: the loop ends when the parts appear
    while time.time() < deadline and len(list(ds.glob("part-*.parquet"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = read_dataset(ds, dedupe=False)
    assert 0 < len(saved) < 36 and len(saved) % 3 == 0  # whole batches only
    # A batch killed mid-write leaves at most a temporary file, which readers never take as a part.
    (ds / ".tmp-part-killed.parquet").write_bytes(b"PAR1 half written")
    assert len(read_dataset(ds, dedupe=False)) == len(saved)
    r = run_cli(*args, f"hydra.run.dir={tmp_path}/b")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "b" / "sweep_summary.json").read_text())
    assert s["pairs_skipped_existing"] == len(saved) and s["attempts"] == 36 - len(saved)
    df = read_dataset(ds)
    assert len(df) == 36
    # compv4 kernels fail in the fake benchmark: recorded with the reason, never dropped
    failed = df[df.pipeline == "compv4"]
    assert (failed.status == "failed").all() and failed.error.str.contains("launch failed").all()
    assert (df[df.pipeline != "compv4"].status == "ok").all()


def test_hip_backend_worker_records_crashes_hangs_and_wrong_results(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the test kernel library")
    lib = tmp_path / "libtest.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{ROOT / 'ckheur' / 'backends'}",
                    str(ROOT / "tests" / "data" / "test_kernels.c"), "-o", str(lib)], check=True)
    r = run_cli("stage=sweep", *tiny_overrides(), "problems.shard.count=3",
                "backend=hip", "backend.memory=host", f"backend.library={lib}", "backend.timeout_s=2",
                "backend.repeat=5", "backend.warmup=1", "op.ndims=[2]",
                "kernels.filter=\"pipeline == 'compv3' and tile_k == 64\"",
                f"paths.data={tmp_path}/data", f"hydra.run.dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr
    df = read_dataset(_ds(tmp_path / "data", "tiny")).set_index("kernel")
    st = lambda tile: df.loc[f"grouped_conv_forward_bf16_2d_{tile}_compv3_intrawave"]  # noqa: E731
    assert st("128x128x64").status == "failed" and "SIGSEGV" in st("128x128x64").error
    assert st("64x128x64").status == "timeout"
    assert st("32x128x64").status == "wrong_result" and "reference" in st("32x128x64").error
    for tile in ("16x64x64", "32x64x64", "64x64x64"):
        assert st(tile).status == "ok" and st(tile).latency_ms > 0 and st(tile)["repeat"] == 5


def _import(tmp_path, path, *extra, run="run"):
    return run_cli("stage=import", f"import.path={path}", "arch=gfx950", f"paths.data={tmp_path}/data",
                   f"hydra.run.dir={tmp_path}/{run}", *extra)


def _one_error(r, *needles):
    """Exit 2, one error line naming what is wrong, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def test_ck_csv_import_equals_source_rows_and_is_idempotent_by_content(tmp_path, ck_fwd_csv):
    """The import holds one row per (problem, kernel) pair of the source, the median of its repeats.
    Latencies edited in place (same name, same row count) are never kept stale: the import is
    refused with a message, and import.overwrite=true brings the new numbers (old kept aside)."""
    import pandas as pd

    csv = tmp_path / "sweep.csv"
    shutil.copyfile(ck_fwd_csv, csv)
    src = pd.read_csv(ck_fwd_csv)
    r = _import(tmp_path, csv)
    assert r.returncode == 0, r.stderr
    ds = _ds(tmp_path / "data", "sweep")
    df = read_dataset(ds, dedupe=False)
    # The file measures 3 shapes twice (lines 962-1021 and 2982-3041): one row per pair, the median
    # of its repeats, their range as the spread; the message names the lines.
    pair = ["N", "C", "K", "G", "Hi", "Wi", "Y", "X", "stride_h", "stride_w", "pad_h", "pad_w", "kernel"]
    first = src.drop_duplicates(pair).reset_index(drop=True)
    assert len(src) == 3760 and len(df) == len(first) == 3700
    assert "60 (problem, kernel) pairs are measured more than once (lines 962, 2982;" in r.stdout
    expected = src.groupby(pair, sort=False).latency_ms.agg(["median", "min", "max"]).reset_index()
    assert (df.status == "ok").all() and (df.backend == "ck_csv").all()
    assert df.kernel.str.replace("_intrawave", "").tolist() == first.kernel.tolist() == expected.kernel.tolist()
    np.testing.assert_allclose(df.latency_ms, expected["median"])
    spread = (expected["max"] - expected["min"]).where(expected["max"] > expected["min"])
    np.testing.assert_allclose(df.latency_spread_ms, spread)
    once = spread.isna().to_numpy()
    assert once.sum() == 3640 and (np.abs(df.tflops[once] / first.tflops[once] - 1) < 1e-9).all()
    for c in ("N", "C", "K", "Hi", "Wi", "Y", "X", "stride_h", "pad_w"):
        assert (df[c].to_numpy() == first[c].to_numpy()).all()
    # Defaults applied to missing columns are said, one line each.
    for col in ("dilation_h", "dilation_w", "Di", "Z", "stride_d", "pad_d", "dilation_d"):
        assert f"has no column {col}: every row takes {col}=" in r.stdout
    before = df
    assert np.allclose(np.sort(before.latency_ms), np.sort(read_ck_csv(ck_fwd_csv).latency_ms))
    # Importing again adds nothing.
    r = _import(tmp_path, csv, run="r1")
    assert r.returncode == 0 and "already holds this file" in r.stdout
    assert len(read_dataset(ds, dedupe=False)) == 3700
    edited = src.copy()
    edited["latency_ms"] *= 2
    edited.to_csv(csv, index=False)
    _one_error(_import(tmp_path, csv, run="r2"), "another file named sweep.csv", "import.overwrite=true")
    after = read_dataset(ds, dedupe=False)  # untouched
    assert np.allclose(np.sort(after.latency_ms), np.sort(before.latency_ms))
    r = _import(tmp_path, csv, "import.overwrite=true", run="r3")
    assert r.returncode == 0, r.stderr
    new = read_dataset(ds, dedupe=False)
    assert len(new) == 3700 and np.allclose(np.sort(new.latency_ms), np.sort(read_ck_csv(csv).latency_ms))
    assert len(list(ds.parent.glob("sweep.parquet.replaced-*"))) == 1


def test_ck_csv_import_refuses_bad_input_with_one_line(tmp_path, ck_fwd_csv, compose):
    """Each bad CSV is refused with one line naming what is wrong. The command line's exit 2, one
    line and no traceback for a refusal (a UserError) is checked on four of them; the others are
    imported as stage=import does (import_file with the job's op and arch), each refusal a UserError."""
    import gzip

    import pandas as pd

    from ckheur.data.importing import import_file
    from ckheur.errors import UserError
    from ckheur.stages import plain

    cfg = compose(["stage=import", "arch=gfx950", f"paths.data={tmp_path}/data"])

    def refused(path, *needles):
        with pytest.raises(UserError) as e:
            import_file(path, data_root=cfg.paths.data, op=plain(cfg.op), arch=plain(cfg.arch),
                        log=lambda _: None)
        assert "\n" not in str(e.value)
        for n in needles:
            assert n in str(e.value), (n, str(e.value))

    src = pd.read_csv(ck_fwd_csv).head(60)
    cases = {}
    # A column whose partner is present: stride_h would silently be 1 for every stride-2 row.
    cases["partner"] = (src.drop(columns=["stride_h"]), ("stride_w without stride_h", "come together"))
    text = src.copy()
    text["latency_ms"] = text["latency_ms"].astype(object)
    text.loc[17, "latency_ms"] = "fast"
    cases["text"] = (text, ("line 19", "latency_ms='fast'", "not a number"))
    frac = src.copy()
    frac["N"] = frac["N"].astype(float)
    frac.loc[3, "N"] = 1.5
    cases["fraction"] = (frac, ("line 5", "column N is 1.5", "whole number"))
    big = src.copy()
    big.loc[8, "N"] = 2**31
    cases["range"] = (big, ("line 10", "N=2147483648", "2^31-1"))
    bad_kernel = src.copy()
    bad_kernel.loc[2, "kernel"] = "gemm_universal_bf16_rcr"
    cases["kernel"] = (bad_kernel, ("line 4", "not a CK grouped-conv name"))
    three = src.copy()
    three["kernel"] = three["kernel"].str.replace("_2d_", "_3d_")
    cases["ndim"] = (three, ("line 2", "is 3D but the problem", "is 2D"))
    # Times: not positive, not finite, or beyond the arch's peak (a duplicate row once showed 67,108
    # TFLOPS); a pair measured twice, 3x apart (the real file's repeats are within 12.5%).
    for name, value in (("negative", -1.0), ("inf", float("inf"))):
        t = src.copy()
        t.loc[6, "latency_ms"] = value
        cases[name] = (t, ("line 8", "latency_ms=", "a time must be a positive number"))
    fast = src.copy()
    fast.loc[11, "latency_ms"] = 1e-7
    cases["peak"] = (fast, ("line 13", "above the gfx950 peak", "not a real measurement"))
    twice = pd.concat([src, src.iloc[[5]].assign(latency_ms=src.latency_ms.iloc[5] * 3)], ignore_index=True)
    cases["conflict"] = (twice, ("lines 7, 62", "more than 2x apart", "conflicting repeats"))
    dup_col = src.copy()
    dup_col.columns = [*dup_col.columns[:-1], "N"]  # non_zero renamed N: two N columns
    cases["header"] = (dup_col, ("column(s) N appear more than once",))
    for i, (name, (frame, needles)) in enumerate(cases.items()):
        path = tmp_path / f"{name}.csv"
        frame.to_csv(path, index=False)
        if i == 0:  # through the command line
            _one_error(_import(tmp_path, path, run=name), *needles)
        refused(path, *needles)
    (tmp_path / "empty.csv").write_text("")
    _one_error(_import(tmp_path, tmp_path / "empty.csv", run="e"), "empty file")
    (tmp_path / "header.csv").write_text(",".join(src.columns) + "\n")
    refused(tmp_path / "header.csv", "no data lines")
    whole = gzip.compress(src.to_csv(index=False).encode())
    (tmp_path / "cut.csv.gz").write_bytes(whole[: len(whole) // 2])
    _one_error(_import(tmp_path, tmp_path / "cut.csv.gz", run="g"), "cut.csv.gz")
    _one_error(_import(tmp_path, tmp_path / "nothing.csv", run="n"), "not found")
    assert not (tmp_path / "data").exists()  # nothing was written by any refused import


def test_non_zero_rule_on_partial_counts(tmp_path, ck_fwd_csv):
    """CK's non_zero is a sanity count: partial counts shared by a problem's kernels are fine;
    only 0 is a wrong result; a count far from the problem's other kernels is suspect (kept)."""
    import pandas as pd

    src = pd.read_csv(ck_fwd_csv)
    two = src[src.problem_idx.isin([0, 1])].copy()  # 2 problems x 20 kernels, full counts
    assert len(two) == 40
    first = two.problem_idx == 0
    # Problem 0: every kernel reports a third of the output (as CK's own sweeps often do)...
    two.loc[first, "non_zero"] = (two.loc[first, "non_zero"] // 3).astype(int)
    idx0 = two.index[first]
    two.loc[idx0[4], "non_zero"] = 0  # ...one wrote nothing
    two.loc[idx0[7], "non_zero"] = int(two.loc[idx0[7], "non_zero"]) // 50  # ...one far below the others
    idx1 = two.index[~first]
    two.loc[idx1[2], "non_zero"] = int(two.loc[idx1[2], "non_zero"]) // 2  # within a factor of the others: ok
    bad = tmp_path / "partial.csv"
    two.to_csv(bad, index=False)
    df = read_ck_csv(bad)
    assert len(df) == 40  # nothing dropped
    expected = ["ok"] * 40
    expected[4], expected[7] = "wrong_result", "suspect"
    assert df.status.tolist() == expected
    assert "non_zero=0" in df.error[4] and "departs from the median" in df.error[7]
    # Suspect rows count as measurements unless excluded; wrong results never do.
    from ckheur.data.dataset import usable

    assert usable(df).sum() == 39 and usable(df, exclude_suspect=True).sum() == 38


def test_current_ck_csv_form_with_3d_columns(tmp_path):
    csv = tmp_path / "cur.csv"
    csv.write_text("kernel,N,C,K,G,Di,Hi,Wi,Z,Y,X,stride_d,stride_h,stride_w,pad_d,pad_h,pad_w,"
                   "dilation_d,dilation_h,dilation_w,latency_ms,tflops,non_zero\n"
                   "grouped_conv_forward_bf16_3d_64x64x64_compv3_intrawave,1,8,16,1,4,6,6,3,3,3,1,1,1,1,1,1,1,1,1,0.01,0,2304\n")
    df = read_ck_csv(csv)
    assert df.loc[0, "ndim"] == 3 and df.loc[0, "Di"] == 4 and df.loc[0, "status"] == "ok"
    assert df.loc[0, "wave_m"] == 4  # from the production tile table


def test_replay_serves_real_data_and_marks_missing(tmp_path, ck_fwd_csv):
    r = run_cli("stage=sweep", "problems.name=real", f"problems.sources=[{{kind:csv,path:{ck_fwd_csv}}}]",
                "backend=replay",
                f"backend.paths=[{ck_fwd_csv}]", "op.ndims=[2]", f"paths.data={tmp_path}/data",
                f"hydra.run.dir={tmp_path}/run")
    assert r.returncode == 0, r.stderr
    assert f"measured {185 * 20} of {185 * 30} pairs in " in r.stdout and "the others: their status above" in r.stdout
    df = read_dataset(_ds(tmp_path / "data", "real"))
    assert len(df) == 185 * 30
    ok, missing = df[df.status == "ok"], df[df.status == "missing"]
    assert len(ok) == 185 * 20 and set(missing.pipeline) == {"compv5"}
    real = read_ck_csv(ck_fwd_csv)
    real = real.sort_values("timestamp", kind="stable").drop_duplicates([*CONV_FIELDS, "kernel"], keep="last")
    merged = ok.merge(real, on=[*CONV_FIELDS, "kernel"], suffixes=("", "_real"))
    assert len(merged) == len(ok)
    np.testing.assert_allclose(merged.latency_ms, merged.latency_ms_real)
    # another op's measurements answer nothing: refused at once, never a "missing" row per pair
    r = run_cli("stage=sweep", "op=bwd_data", "problems=smoke", "backend=replay", f"backend.paths=[{ck_fwd_csv}]",
                f"paths.data={tmp_path}/data2")
    assert r.returncode == 2 and "hold no measurements of grouped_conv/bwd_data bf16 on gfx950" in r.stderr
    assert not (tmp_path / "data2").exists()


def test_sim_is_deterministic_per_seed():
    from ckheur.kernels import enumerate_pool
    from ckheur.families import get_family
    from ckheur.problems import load_named_set
    from ckheur.config import load_option
    from ckheur.sim import load_params, simulate

    op = load_option("op/grouped_conv/fwd")
    arch = load_option("arch/gfx950")
    op.update(direction="fwd", dtype="bf16")
    kernels = enumerate_pool(op, arch).by_group()[2]
    probs = [p for p in load_named_set("smoke", get_family("grouped_conv")) if p.ndim == 2]
    params = load_params()
    a = simulate(probs, kernels, arch, params, "fwd", seed=1)
    assert np.array_equal(a, simulate(probs, kernels, arch, params, "fwd", seed=1))
    assert not np.array_equal(a, simulate(probs, kernels, arch, params, "fwd", seed=2))
    # Order independence: a pair's number does not depend on its batch.
    b = simulate(probs[::-1], kernels[::-1], arch, params, "fwd", seed=1)
    assert np.array_equal(a, b[::-1, ::-1])
    assert (a > 0).all() and np.isfinite(a).all()


def test_sim_calibration_on_real_data(ck_fwd_csv):
    sys.path.insert(0, str(ROOT / "tools"))
    import calibrate_sim
    from ckheur.sim import load_params

    from ckheur.sim_calibration import fit_report

    r = fit_report(load_params(), calibrate_sim.load_real(ck_fwd_csv))
    assert r["problems"] == 185 and r["kernels"] == 20
    assert r["median_spearman"] >= 0.5
    assert r["mean_eff_sim_pick"] >= 0.88
    assert r["mean_eff_sim_pick"] > r["best_fixed_kernel_eff"] + 0.05


def test_sim_sweep_writes_versioned_dataset_and_two_shard_joblib_multirun_merges_to_it(tmp_path):
    """One unsharded sim sweep writes a versioned dataset; the same sweep as a two-shard joblib
    multirun merges into the same rows and numbers (same seed, any sharding)."""
    r = run_cli("stage=sweep", "problems=smoke", f"paths.data={tmp_path}/full", f"hydra.run.dir={tmp_path}/one")
    assert r.returncode == 0, r.stderr
    full = read_dataset(_ds(tmp_path / "full", "smoke"))
    df = full
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 600 and (df.status == "ok").all() and (df.backend == "sim").all()
    assert df.schema_version.unique().tolist() == [3] and (df.workspace_bytes == -1).all()  # sim: no workspace measured
    assert (df.device_cus == 256).all()  # the measuring device: gfx950's 256 CUs
    # tflops is derived from the problem's FLOPs and the latency.
    from ckheur.problems import problem_from_dict
    row = df.iloc[7]
    p = problem_from_dict({c: row[c] for c in CONV_FIELDS})
    assert row.tflops == pytest.approx(p.flops / (row.latency_ms * 1e-3) / 1e12)
    summary = json.loads((tmp_path / "one" / "sweep_summary.json").read_text())
    assert summary["by_status"] == {"ok": 600} and summary["attempts"] == 600

    pytest.importorskip("hydra_plugins.hydra_joblib_launcher", reason='needs pip install "ckheur[cluster]"')
    r = run_cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "stage=sweep", "problems=smoke",
                "problems.shard.count=2", "problems.shard.index=0,1", f"paths.data={tmp_path}/data",
                f"hydra.sweep.dir={tmp_path}/multi")
    assert r.returncode == 0, r.stderr
    merged = read_dataset(_ds(tmp_path / "data", "smoke"))
    key = [*CONV_FIELDS, "kernel"]
    assert len(merged) == len(full) == 600
    a = merged.sort_values(key).reset_index(drop=True)
    b = full.sort_values(key).reset_index(drop=True)
    assert a[key].equals(b[key])
    np.testing.assert_allclose(a.latency_ms, b.latency_ms)  # same seed, same numbers, any sharding


def test_dataset_errors(tmp_path):
    with pytest.raises(DatasetError, match="not found"):
        read_dataset(tmp_path / "nope.parquet")
    with pytest.raises(DatasetError, match="op column must start with one of grouped_conv, gemm"):
        write_part(tmp_path / "x.parquet", [{"op": "x"}])
    with pytest.raises(DatasetError, match="lack dataset columns"):
        write_part(tmp_path / "x.parquet", [{"op": "gemm/fwd"}])


@pytest.mark.parametrize("fields", [
    dict(N=2, C=6, K=4, G=2, Hi=7, Wi=6, Y=3, X=2, pad_h=1, stride_w=2, dilation_h=2),
    dict(N=1, C=4, K=6, G=1, Di=4, Hi=5, Wi=5, Z=3, Y=3, X=1, pad_d=1, pad_h=1, stride_d=2, stride_h=2),
])
def test_worker_references_are_mutual_adjoints(fields):
    """<fwd(x, w), dy> = <x, bwd_data(dy, w)> = <w, bwd_weight(x, dy)>: the three references agree."""
    from ckheur.backends.hip_worker import _shapes, reference
    from ckheur.problems import problem_from_dict

    p = problem_from_dict(fields).to_dict()
    sh = _shapes(p)
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(sh[k]) for k in ("in", "wei", "out"))
    y = reference("fwd", x, w, dy, p, sh["out"])
    dx = reference("bwd_data", x, w, dy, p, sh["out"])
    dw = reference("bwd_weight", x, w, dy, p, sh["out"])
    assert y.shape == sh["out"] and dx.shape == sh["in"] and dw.shape == sh["wei"]
    assert np.vdot(y, dy) == pytest.approx(np.vdot(x, dx), rel=1e-9)
    assert np.vdot(y, dy) == pytest.approx(np.vdot(w, dw), rel=1e-9)


def test_calibration_tool_records_the_sha256_training_recognizes(tmp_path, monkeypatch):
    """Writing fitted parameters from the shipped gzipped copy records the uncompressed CSV's
    sha256 (as training hashes data), so the leakage guard still recognizes the data."""
    sys.path.insert(0, str(ROOT / "tools"))
    import calibrate_sim
    from ckheur.measurements import CK_GFX950_FWD, CK_GFX950_FWD_SHA256
    from ckheur.sim import load_params

    (tmp_path / "conf" / "backend").mkdir(parents=True)
    target = tmp_path / "conf" / "backend" / "sim.yaml"
    target.write_text((ROOT / "conf" / "backend" / "sim.yaml").read_text().replace(CK_GFX950_FWD_SHA256, "0" * 64))
    monkeypatch.setattr(calibrate_sim, "ROOT", tmp_path)
    params = load_params()
    calibrate_sim._write_params({**params, "launch_us": 1.25}, CK_GFX950_FWD)
    written = target.read_text()
    assert f"calibration_sha256: [{CK_GFX950_FWD_SHA256}]" in written
    assert load_params(target)["launch_us"] == 1.25 and load_params(target)["pipelines"] == params["pipelines"]
