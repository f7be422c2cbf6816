"""Honest defaults (issue 50): data of different origin never mixes silently, what was tuned is
served, reports keep measured apart from predicted, problem lines are strict."""

from __future__ import annotations

import sys
from pathlib import Path

from ckheur.data.dataset import read_dataset, write_part
from conftest import ROOT, run_cli, tiny_overrides


def _sim_tiny(tmp_path):
    """A simulated sweep of three small problems (the stage alone); returns the dataset folder."""
    from ckheur.stages import run_overrides

    run_overrides(["stage=sweep", *tiny_overrides(), "op.ndims=[2]", f"paths.data={tmp_path}/data"], tmp_path / "sim",
                  quiet=True)
    return tmp_path / "data" / "grouped_conv_fwd_bf16_gfx950" / "tiny.parquet"


def test_real_rows_beside_simulated_ones_are_refused_by_sweep_and_train_in_one_line(tmp_path):
    """A real sweep into simulated rows is refused; so is training on simulated beside measured
    rows unless asked (one simulated sweep for both)."""
    ds = _sim_tiny(tmp_path)
    before = len(read_dataset(ds, dedupe=False))
    bench = ROOT / "tests" / "data" / "fake_bench.py"
    r = run_cli("stage=sweep", *tiny_overrides(), "op.ndims=[2]", "backend=command",
                f"backend.template={sys.executable} -S {bench} {{kernel}} {{N}}", "backend.regex='Elapsed: ([0-9.]+) us'",
                "backend.time_unit=us", f"paths.data={tmp_path}/data", f"hydra.run.dir={tmp_path}/real")
    assert r.returncode == 2
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert f"{before} simulated rows (backend sim)" in line and "sweep.output=" in line and "sweep.overwrite=true" in line
    assert len(read_dataset(ds, dedupe=False)) == before  # nothing measured, nothing counted as measured
    # (a sweep of the same origin resumes: tests/test_sweep.py)

    # Training on the simulated rows beside measured ones.
    real = read_dataset(ds)
    real["backend"] = "command"  # rows of other problems, as if a GPU had measured them: a second origin
    real["N"] += 1
    write_part(tmp_path / "real.parquet", real)
    args = ["stage=train", f"data.paths=[{ds},{tmp_path / 'real.parquet'}]", "train.cluster_cv=false",
            f"train.output={tmp_path}/model", f"hydra.run.dir={tmp_path}/train"]
    r = run_cli(*args)
    assert r.returncode == 2 and "mixes simulated rows (backend sim) with rows measured by command" in r.stderr
    assert "data.mix_simulated=true" in r.stderr and not (tmp_path / "model").exists()


def test_predict_refuses_a_cut_short_line_naming_the_field(tmp_path):
    # (a line that leaves a field out takes MIOpenDriver's default: tests/test_trust.py)
    r = run_cli("stage=predict", "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k", f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "-k (--out_channels, K) has no value: the line is cut short" in r.stderr


def test_predict_leaves_no_empty_run_folder_and_names_a_gemm_as_one(tmp_path):
    # No hydra.run.dir: Hydra's dated folder under outputs/ (run_cli adds a run folder unless a
    # sweep folder is named, which a single run does not use).
    r = run_cli("stage=predict", "op=gemm", "problem.M=4096", "problem.N=4096", "problem.K=4096",
                f"hydra.sweep.dir={tmp_path / 'unused'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "\ngemm fp16 on gfx950: rcr M4096 N4096 K4096" in r.stdout and "\nfwd " not in r.stdout
    assert "outputs: none (this stage wrote no files, so no run folder is kept)" in r.stdout
    assert list(tmp_path.iterdir()) == []  # not even outputs/
    # A user's own empty outputs/ (there before the run) is theirs: only what the run made goes.
    (tmp_path / "mine" / "outputs").mkdir(parents=True)
    r = run_cli("stage=predict", "op=gemm", "problem.M=64", "problem.N=64", "problem.K=64",
                f"hydra.sweep.dir={tmp_path / 'unused'}", cwd=tmp_path / "mine")
    assert r.returncode == 0 and "no run folder is kept" in r.stdout, r.stderr
    assert [p.name for p in (tmp_path / "mine").rglob("*")] == ["outputs"]
    # A command that fails before writing anything leaves no run folder either.
    r = run_cli("stage=predict", "op=gemm", "problem.M=64", "problem.N=64", f"hydra.sweep.dir={tmp_path / 'unused'}",
                cwd=tmp_path / "mine")
    assert r.returncode == 2 and "missing required field(s) K" in r.stderr, r.stderr
    assert [p.name for p in (tmp_path / "mine").rglob("*")] == ["outputs"]


def _figures(monkeypatch) -> dict:
    """Capture the figures the plotting code saves, by file name, instead of writing them."""
    import ckheur.files

    figs: dict = {}
    monkeypatch.setattr(ckheur.files, "save_png", lambda fig, path, dpi=120: figs.setdefault(Path(path).name, fig))
    return figs


def _check_figure(fig, *words: str) -> None:
    """Every title fits inside the figure, names ``words``, and every linear axis starts at zero."""
    fig.canvas.draw()
    box = fig.bbox
    texts = [t for t in [fig._suptitle, *(ax.title for ax in fig.axes)] if t is not None and t.get_text()]
    assert texts
    for t in texts:
        ext = t.get_window_extent()
        assert box.x0 - 1 <= ext.x0 and ext.x1 <= box.x1 + 1 and ext.y1 <= box.y1 + 1, t.get_text()
    title = " ".join(t.get_text() for t in texts).replace("\n", " ")
    for w in words:
        assert w in title, (w, title)
    for ax in fig.axes:
        if ax.get_xscale() == "linear" and ax.get_xlabel():
            assert ax.get_xlim()[0] == 0, ax.get_xlabel()


def test_evaluation_plots_fit_start_at_zero_and_say_what_they_show(tmp_path, monkeypatch):
    from ckheur.stages import run_overrides

    # The stages alone (compose + run): the plots are the point, not the command line.
    run_overrides(["stage=sweep", "problems=smoke", "problems.shard.count=3", f"paths.data={tmp_path}/data"],
                  tmp_path / "sweep", quiet=True)  # a third of the smoke set: a few problems, every slice kind
    figs = _figures(monkeypatch)
    run_overrides(["stage=evaluate", "evaluate.nearest_gpu=false",
                   f"evaluate.model_dir={ROOT / 'models' / 'grouped_conv_fwd_bf16_gfx950'}",
                   f"data.eval_paths=[{tmp_path}/data/grouped_conv_fwd_bf16_gfx950/smoke.parquet]"],
                  tmp_path / "eval", quiet=True)
    assert set(figs) == {"efficiency_cdf.png", "predicted_vs_measured.png", "slices.png"}
    for name, fig in figs.items():
        _check_figure(fig, "grouped_conv/fwd bf16 on gfx950", "SIMULATED data")
    assert "measured" in figs["efficiency_cdf.png"].axes[0].get_title()
    caption = " ".join(t.get_text() for t in figs["predicted_vs_measured.png"].texts)
    assert "median predicted / measured" in caption and "offset" in caption


def test_simulated_tuning_is_kept_beside_the_database_predict_serves(tmp_path):
    store = f"paths.tuning={tmp_path / 'tuning'}"
    line = "problem=convbfp16 -n 1 -c 128 -H 32 -W 32 -k 256 -y 2 -x 2 -u 2 -v 2"
    r = run_cli("stage=tune", store, line, f"hydra.run.dir={tmp_path / 'a'}")  # backend sim, the default
    assert r.returncode == 0, r.stderr
    sim_db = tmp_path / "tuning" / "simulated" / "grouped_conv_fwd_bf16_gfx950"
    assert f"tune: SIMULATED times (backend sim) in {sim_db}: not measurements" in r.stdout
    assert not (tmp_path / "tuning" / "grouped_conv_fwd_bf16_gfx950").exists()
    r = run_cli("stage=predict", store, line, f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode == 0 and "(tier: model)" in r.stdout and "tuning database: none yet" in r.stdout
    # Measured times are not added to the simulated database when it is named: refused, nothing written.
    before = sorted(p.stat().st_mtime_ns for p in sim_db.rglob("*"))
    r = run_cli("stage=tune", store, line, f"tune.db={sim_db}", "backend=replay",
                "backend.paths=[measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz]", f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"tune: {sim_db} holds" in r.stderr and "simulated rows (backend sim)" in r.stderr
    assert "tune.db=<folder or URL>" in r.stderr
    assert sorted(p.stat().st_mtime_ns for p in sim_db.rglob("*")) == before
