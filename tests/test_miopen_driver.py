"""Tuning a network through MIOpenDriver (backend=miopen_driver), end to end against a fake
MIOpenDriver (tests/data/fake_miopen_driver.py) that answers from a slice of MIOpen's own find-db
in MIOpenDriver's output format: tune with k = 3, export the user find-db, compare with the file."""

from __future__ import annotations

import csv
import os
import stat
import sys

import pytest

from ckheur.integrations.miopen.find_db import parse_line, read_find_db
from ckheur.families.miopen.problems import FIELDS, problem_from_dict
from conftest import ROOT, run_cli

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
FAKE = ROOT / "tests" / "data" / "fake_miopen_driver.py"


@pytest.fixture
def fake_driver(tmp_path, monkeypatch):
    """MIOpenDriver on PATH: the fake, answering from the MI300X slice; returns its run log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "MIOpenDriver"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "driver_runs.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CKHEUR_FAKE_FIND_DB", str(MI300X))
    monkeypatch.setenv("CKHEUR_FAKE_DRIVER_LOG", str(log))
    return log


def _slice_lines(direction: str, dtype: str) -> dict:
    """The slice's lines of one direction (F, B, W) and data type, by key."""
    import bz2

    lines = [parse_line(t) for t in bz2.open(MI300X, "rt").read().splitlines()]
    return {ln.key.text(): ln for ln in lines if ln.key.direction == direction and ln.key.dtypes == (dtype,)}


def _problems(direction: str, dtype: str, count: int) -> list:
    """The first ``count`` problems of the slice in a direction and data type (a network's layers)."""
    fdb = read_find_db(MI300X)
    rows = fdb.problems[(fdb.problems.direction == direction) & (fdb.problems.dtype == dtype)].head(count)
    return [problem_from_dict({f: row[f] for f in FIELDS}) for _, row in rows.iterrows()]


def test_miopen_driver_output_is_parsed_in_every_direction(fake_driver):
    """backend=miopen_driver's defaults read MIOpenDriver's time and workspace in each direction;
    a solver the problem does not list fails (backward weights too, where the driver exits 0);
    a solver name the driver does not know (it falls back to Find) fails instead of lending its time."""
    from ckheur.backends import make_backend
    from ckheur.config import load_option
    from ckheur.job import Job

    cfg = load_option("backend/miopen_driver")
    for direction, letter in (("fwd", "F"), ("bwd_data", "B"), ("bwd_weight", "W")):
        op, arch = load_option(f"op/miopen/{direction}"), load_option("arch/gfx942")
        job = Job(op, arch)
        solvers = {k.name: k for k in job.pool.kernels}
        p = _problems(direction, "fp16", 1)[0]
        from ckheur.integrations.miopen.find_db import problem_key

        line = _slice_lines(letter, "FP16")[problem_key(p, direction, "fp16").text()]
        listed = [e for e in line.entries if e.solver in solvers]
        absent = next(name for name in solvers if name not in {e.solver for e in line.entries})
        pairs = [(p, solvers[e.solver]) for e in listed] + [(p, solvers[absent])]
        got = make_backend(cfg, op, arch).measure(pairs)
        assert got.status == ["ok"] * len(listed) + ["failed"]
        assert got.latency_ms[:-1] == [float(f"{e.time_ms:f}") for e in listed]
        assert got.workspace_bytes[:-1] == [e.workspace for e in listed]
        # MIOpenDriver exits 3 (forward, backward data) or 0 (backward weights: rc << 16) with no time.
        assert ("did not match backend.regex" if letter == "W" else "not applicable") in got.error[-1]
    slower = next(pair for pair in pairs if pair[1].name != line.entries[0].solver)
    unknown = make_backend({**cfg, "template": cfg["template"].replace("{kernel}", "NoSuchSolver")}, op, arch)
    res = unknown.measure([slower])
    assert res.status == ["failed"] and f"another kernel than {slower[1].name}" in res.error[0]


def test_tuning_a_network_through_miopen_driver_writes_its_measurements_as_the_user_find_db(fake_driver, tmp_path):
    """stage=tune backend=miopen_driver with k = 3 over 10 layers, then export format=miopen_find_db:
    every written entry is the fake driver's measurement (the find-db's time as MIOpenDriver prints
    it, %f, its workspace and algorithm), for exactly the solvers that ran; the tuned pick is the
    file's fastest on at least as many layers as the model's first choice; every driver run counted."""
    problems = _problems("fwd", "fp16", 10)
    table = tmp_path / "layers.csv"
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(p.to_dict() for p in problems)
    db, target = tmp_path / "tuning", tmp_path / "miopen" / "gfx942130.HIP.3_2_0.ufdb.txt"
    op = ["op=miopen/fwd", "op.dtype=fp16", "arch=gfx942"]
    # op.applicability=none: every solver of the table is a candidate (the shipped bundle's own, both, masks some)
    r = run_cli("stage=tune", *op, "op.applicability=none", "backend=miopen_driver", "tune.top_k=3", f"tune.db={db}", "tune.progress=none",
                f"problems.sources=[{{kind:csv,family:miopen,path:{table}}}]", f"hydra.run.dir={tmp_path / 'r1'}")
    assert r.returncode == 0, r.stderr
    import json

    summary = json.loads((tmp_path / "r1" / "tune_summary.json").read_text())
    runs = fake_driver.read_text().splitlines()
    assert summary["attempts"] == len(runs) >= 3 * len(problems) and summary["problems_tuned"] == len(problems)
    from ckheur.config import load_option
    from ckheur.job import Job

    table_size = len(Job({**load_option("op/miopen/fwd"), "dtype": "fp16"}, load_option("arch/gfx942")).pool.kernels)
    assert summary["exhaustive_runs"] == len(problems) * table_size  # every solver of gfx942's table, per layer
    assert f"tune: {len(runs)} runs against {table_size * len(problems)}" in r.stdout
    r = run_cli("stage=export", "export.format=miopen_find_db", *op, f"export.tuning_db={db}",
                f"export.output={target}", f"hydra.run.dir={tmp_path / 'r2'}")
    assert r.returncode == 0, r.stderr
    original = _slice_lines("F", "FP16")
    written = [parse_line(t) for t in target.read_text().splitlines()]
    from ckheur.data.dataset import read_dataset
    from ckheur.integrations.miopen.find_db import problem_key

    rows = read_dataset(db)
    by_key = {problem_key(p, "fwd", "fp16").text(): p for p in problems}
    ran = {}
    for key_fields, group in rows.groupby(list(FIELDS), observed=True):
        key = problem_key(problem_from_dict(dict(zip(FIELDS, key_fields))), "fwd", "fp16").text()
        listed = {e.solver for e in original[key].entries}
        ran[key] = set(group.kernel[group.status == "ok"].astype(str))
        assert ran[key] <= listed and not set(group.kernel[group.status != "ok"].astype(str)) & listed
    assert {ln.key.text() for ln in written} == set(ran) == set(by_key)
    top1_fastest = tuned_fastest = 0
    from ckheur.selection.selector import Selector

    selector = Selector.load(ROOT / "models" / "miopen_fwd_fp16_gfx942")
    for line in written:
        theirs = {e.solver: e for e in original[line.key.text()].entries}
        assert {e.solver for e in line.entries} == ran[line.key.text()]
        for e in line.entries:  # what the driver printed (%f), in MIOpen's format
            assert e.time_text == format(float(f"{theirs[e.solver].time_ms:f}"), "g")
            assert (e.workspace, e.algorithm) == (theirs[e.solver].workspace, theirs[e.solver].algorithm)
        assert [e.time_ms for e in line.entries] == sorted(e.time_ms for e in line.entries)
        fastest = min(theirs.values(), key=lambda e: e.time_ms).solver
        tuned_fastest += line.entries[0].solver == fastest
        top1_fastest += selector.rank(by_key[line.key.text()], k=1)[0].kernel == fastest
    assert tuned_fastest >= top1_fastest
    assert tuned_fastest > 0
