"""stage=report from the ResNet-50 ONNX graph (tests/data, built from the paper by tools/net_onnx.py): every
convolution listed with its shape and weight, totals consistent with the layers, a tuning plan."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

MI300X = ROOT / "tests" / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"

pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the test extra installs it)")

RESNET50 = Path(__file__).resolve().parent / "data" / "resnet50.onnx"
FIND_DB = Path(__file__).resolve().parent / "data" / "miopen_fdb" / "gfx942130.HIP.fdb.txt.bz2"
RESNET50_FDB = FIND_DB.parent / "resnet50" / FIND_DB.name  # MI300X's lines of ResNet-50's fp32 forward layers, batch 1


def test_report_of_resnet50_lists_every_convolution_and_adds_up(tmp_path):
    out = tmp_path / "run"
    r = run_cli("stage=report", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx942", "problems=onnx",
                f"problems.sources.0.path={RESNET50}", "problems.sources.0.batch=[3]", f"report.find_db={FIND_DB}",
                f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "network_report.json").read_text())
    layers, tot = rep["layers"], rep["totals"]
    # ResNet-50: 53 convolutions of 23 distinct shapes (stem; conv2_x 4; conv3_x .. conv5_x 6 each).
    assert (tot["layers"], tot["runs"], len(layers)) == (23, 53, 23)
    by = {row["problem"]: row["weight"] for row in layers}
    assert by["N3 C3 K64 G1 224x224 k7x7 s2 p3 NCHW"] == 1
    assert by["N3 C64 K256 G1 56x56 k1x1 s1 p0 NCHW"] == 4  # conv2_x's three expanding 1x1 and its projection
    assert by["N3 C256 K256 G1 14x14 k3x3 s1 p1 NCHW"] == 5  # conv4_2 .. conv4_6
    assert by["N3 C1024 K2048 G1 14x14 k1x1 s2 p0 NCHW"] == 1  # conv5_x's projection
    names = {row["problem"]: row["names"] for row in layers}  # the ONNX node names (tools/net_onnx.py)
    assert names["N3 C64 K256 G1 56x56 k1x1 s1 p0 NCHW"] == "s0b0c s0b0proj s0b1c s0b2c"
    assert names["N3 C3 K64 G1 224x224 k7x7 s2 p3 NCHW"] == "stem"
    # Totals keep measured times apart from predicted ones; MIOpen's time is measured or unknown.
    assert tot["pick_ms_measured"] == pytest.approx(
        sum(row["weight"] * row["pick_ms"] for row in layers if row["pick_time"] == "measured"))
    assert tot["pick_ms_predicted"] > 0 and tot["pick_ms_predicted"] == pytest.approx(
        sum(row["weight"] * row["pick_ms"] for row in layers if row["pick_time"] == "predicted"))
    assert tot["layers_pick_measured"] + tot["layers_pick_predicted"] == 23
    assert all((row["miopen_ms"] is None) == (row["miopen_time"] == "unknown") for row in layers)
    assert tot["layers_miopen_unknown"] == sum(row["miopen_time"] == "unknown" for row in layers) > 0
    assert tot["expected_saving_ms"] == pytest.approx(sum(row["expected_saving_ms"] for row in layers))
    assert sum(tot["tiers"].values()) == 23
    planned = sorted((row for row in layers if row.get("plan")), key=lambda row: row["plan"])
    assert [row["plan"] for row in planned] == list(range(1, len(planned) + 1))
    assert all(row["tier"] == "model" for row in planned) and planned  # batch 3: not in the bundle's data
    rates = [row["expected_saving_ms"] / row["measure_s"] for row in planned]
    assert rates == sorted(rates, reverse=True)
    assert tot["measure_s"] == pytest.approx(sum(row["measure_s"] for row in planned))
    for row in layers:
        if row["tier"] == "find_db":  # MIOpen's answer is the find-db's, and the pick is it
            assert (row["miopen"], row["miopen_ms"], row["gain_vs_miopen_ms"]) == (row["pick"], row["pick_ms"], 0)
        assert row["driver"].endswith(" -F 1") and f"-n 3 -c " in row["driver"]
    md = (out / "network_report.md").read_text()
    assert all(f"| {row['problem']} | {row['weight']} |" in md for row in layers) and "## Tuning plan" in md
    assert "| s0b0c, s0b0proj, s0b1c +1 |" in md
    with open(out / "network_layers.csv") as f:
        assert len(list(csv.DictReader(f))) == 23
    assert (out / "network_report.png").stat().st_size > 0
    assert "23 layers (53 convolutions per run)" in r.stdout


def test_report_refuses_miopens_answers_outside_miopen(tmp_path):
    r = run_cli("stage=report", "op=fwd", "problems=smoke", "report.tunanet=/nonexistent", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and "report.tunanet: MIOpen's answers name MIOpen's solvers" in r.stderr
    r = run_cli("stage=report", "op=gemm", "problems=gemm_edge", f"report.find_db={MI300X}", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and "report.find_db: MIOpen's answers name MIOpen's solvers" in r.stderr
    # predict's find-db tier too, where the analytic model ranks (it was dropped without a word)
    r = run_cli("stage=predict", "op=gemm", "problems=gemm_edge", f"predict.find_db={MI300X}", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and "a MIOpen find-db answers for MIOpen's solvers (op family miopen), not the gemm" in r.stderr


def test_each_family_reports_and_search_refuses_a_solver_table(tmp_path):
    """A GEMM report (no MIOpenDriver command for its layers) is written; stage=search of MIOpen's
    solvers, a table rather than a tile space, exits 2 saying what ranks them (both were tracebacks)."""
    r = run_cli("stage=report", "op=gemm", "problems=gemm_edge", f"hydra.run.dir={tmp_path / 'g'}")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "g" / "network_report.json").read_text())
    assert all(row["driver"] == "" for row in rep["layers"]) and any(row["pick"] for row in rep["layers"])
    md = (tmp_path / "g" / "network_report.md").read_text()  # no MIOpen to compare with: no MIOpen column or line
    assert "MIOpen" not in md + r.stdout and not rep["totals"]["compares_miopen"] and "problems per run" in r.stdout
    r = run_cli("stage=search", "op=miopen/fwd", "arch=gfx942", f"hydra.run.dir={tmp_path / 's'}")
    assert r.returncode == 2 and "stage=search searches a space of tile kernels" in r.stderr


def test_report_keeps_layers_no_kernel_runs(tmp_path):
    # smoke's 3D convolutions on CK's 2D-only forward bundle: listed as unranked with the reason, not dropped.
    r = run_cli("stage=report", "op=fwd", "problems=smoke", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "network_report.json").read_text())
    unranked = [row for row in rep["layers"] if row["tier"] == "unranked"]
    assert rep["totals"]["layers"] == 20 and unranked
    assert all(row["problem"].split()[4].count("x") == 2 and "no kernel for 3D problems" in row["note"]
               and row["pick"] is None and not row.get("plan") for row in unranked)


def test_report_labels_measured_and_predicted_everywhere(tmp_path, monkeypatch):
    """The README's example: every layer has MIOpen's measured answer (find-db), every total says
    measured; without a find-db MIOpen's time is unknown (never ckheur's own prediction of it)."""
    import ckheur.files
    from test_honest_defaults import _check_figure

    figs = []
    save_png = ckheur.files.save_png
    monkeypatch.setattr(ckheur.files, "save_png", lambda fig, path, dpi=120: (figs.append(fig), save_png(fig, path))[1])
    args = ["stage=report", "op=miopen/fwd", "op.dtype=fp32", "arch=gfx942", "problems=onnx",
            f"problems.sources.0.path={RESNET50}"]
    r = run_cli(*args, f"report.find_db={RESNET50_FDB}", f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "a" / "network_report.json").read_text())
    tot = rep["totals"]
    assert (tot["layers_miopen_measured"], tot["layers_pick_measured"], tot["layers_gain_measured"]) == (23, 23, 23)
    assert all(row["miopen_time"] == row["gain_time"] == row["pick_time"] == "measured" for row in rep["layers"])
    assert "report: MIOpen's answers, measured (23 of 23 layers)" in r.stdout
    md = (tmp_path / "a" / "network_report.md").read_text()
    assert "- ckheur's picks, measured (23 of 23 layers)" in md and "| 0 (m) |" in md
    with open(tmp_path / "a" / "network_layers.csv") as f:
        assert {row["miopen_time"] for row in csv.DictReader(f)} == {"measured"}
    r = run_cli(*args, "report.tuning_db=none", f"hydra.run.dir={tmp_path / 'b'}")  # no find-db: nothing measured
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "b" / "network_report.json").read_text())
    assert all(row["miopen_ms"] is None and row["miopen_time"] == "unknown" and row["gain_time"] is None
               and row["pick_time"] == "predicted" for row in rep["layers"])
    assert rep["totals"]["layers_pick_measured"] == 0 and rep["totals"]["pick_ms_measured"] == 0
    assert "unknown on 23 layers (not measured, not estimated)" in r.stdout and "tuning database: off" in r.stdout
    md = (tmp_path / "b" / "network_report.md").read_text()
    assert "ckheur's picks, predicted by the model (23 of 23 layers)" in md and "| unknown |" in md
    assert len(figs) == 2
    for fig in figs:  # the PNG: op, dtype, arch, real data; its legend says measured or predicted
        _check_figure(fig, "miopen/fwd fp32 on gfx942", "trained on real data")
    legends = [[t.get_text() for t in fig.axes[0].get_legend().get_texts()] for fig in figs]
    assert legends[1] == ["ckheur's pick (measured)", "ckheur's pick (predicted)", "MIOpen's answer (measured; 23 layers unknown)"]
