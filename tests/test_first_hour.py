"""A newcomer's first hour (issue 38): the README's tour runs as written, the short help and the
version, outputs that say where they are, no bundle replaced silently, the analytic fallback
labeled relative only, plots and exports that say what they hold."""

from __future__ import annotations

import re
import shlex
import shutil
from importlib import import_module
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

from ckheur.stages import STAGES, folder_files


def readme_tour() -> list[list[str]]:
    """The ``python run.py`` commands of the README's "A tour" section, split as a shell would."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A tour", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                assert words[:2] == ["python", "run.py"], line
                commands.append(words[2:])
    return commands


TOUR_STDOUT: dict[int, str] = {}  # the tour's commands' printed output, by their index in the README


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> Path:
    """The README's tour run as written, each command from a folder holding only what a clone has at
    those paths (the find-db slice); every run folder named inside it: the folder after the tour."""
    root = tmp_path_factory.mktemp("tour")
    commands = readme_tour()
    assert len(commands) >= 12
    shutil.copytree(ROOT / "tests" / "data" / "miopen_fdb", root / "tests" / "data" / "miopen_fdb")
    shutil.copy(ROOT / "tests" / "data" / "resnet50.onnx", root / "tests" / "data" / "resnet50.onnx")
    for i, args in enumerate(commands):
        key = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
        r = run_cli(*args, f"{key}={root / 'runs' / str(i)}", cwd=root)
        assert r.returncode == 0, (args, r.stderr[-2000:])
        TOUR_STDOUT[i] = r.stdout
        if "-m" not in args:  # every stage ends naming its run folder, and wrote there only its OUTPUTS
            assert f"outputs: {root / 'runs' / str(i)}" in r.stdout, args
            stage = next(a.split("=", 1)[1] for a in args if a.startswith("stage="))
            assert set(folder_files(root / "runs" / str(i))) <= set(import_module(STAGES[stage]).OUTPUTS), args
    return root


def test_readme_tour_runs_as_written_in_a_fresh_folder(tour):
    """Every command succeeded (the fixture), wrote where the README says, and no empty log was left."""
    assert (tour / "outputs" / "tour" / "bwd_data" / "model.txt.xz").is_file()
    assert (tour / "exports" / "ck" / "grouped_conv_forward_bf16_gfx950" / "kernels.json").is_file()
    assert sorted(p.name for p in (tour / "runs").iterdir()) == sorted(str(i) for i in range(len(readme_tour())))
    assert not list(tour.rglob("ckheur.log"))  # hydra/job_logging disabled: stages print, no empty logs


def test_training_refuses_to_replace_a_bundle_without_overwrite(tour):
    """The tour's second training into the same folder is refused in one line; with
    train.overwrite=true it replaces the bundle."""
    bundle = tour / "outputs" / "tour" / "bwd_data"
    before = (bundle / "model.txt.xz").read_bytes(), (bundle / "model.txt.xz").stat().st_ino
    args = ["stage=train", "op=bwd_data", "problems=smoke", f"train.output={bundle}", "model.max_trees=3"]
    r = run_cli(*args, f"hydra.run.dir={tour / 'again'}", cwd=tour)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"error: train: {bundle} already holds a bundle; pass "
                                             "train.overwrite=true to replace it, or train.output=<another folder>"]
    assert ((bundle / "model.txt.xz").read_bytes(), (bundle / "model.txt.xz").stat().st_ino) == before
    r = run_cli(*args, "train.overwrite=true", f"hydra.run.dir={tour / 'again2'}", cwd=tour)
    assert r.returncode == 0, r.stderr
    assert (bundle / "model.txt.xz").stat().st_ino != before[1]  # written anew


def test_evaluation_report_names_op_arch_and_simulated_data(tour):
    """The tour's evaluation (run 3): the report's title names op, dtype, arch and simulated data;
    it is not its training data, so no warning."""
    i = next(i for i, a in enumerate(readme_tour()) if "stage=evaluate" in a)
    run = tour / "runs" / str(i)
    report = (run / "report.md").read_text()
    assert report.splitlines()[0] == "# ckheur evaluation: grouped_conv/bwd_data bf16 on gfx950, SIMULATED data (backend sim)"
    assert "training data" not in report
    assert "the simulator is the analytic model plus noise" in TOUR_STDOUT[i]  # what that evaluation printed
    assert {p.name for p in run.glob("*.png")} == {"efficiency_cdf.png", "predicted_vs_measured.png", "slices.png"}


def test_evaluation_on_the_training_data_warns(tour):
    """The tour's CK-feature model evaluated on the very measurements it was trained on."""
    r = run_cli("stage=evaluate", "op=fwd", "evaluate.model_dir=outputs/tour/fwd_ck", "evaluate.plots=false",
                "data.eval_paths=[measurements/ck_gfx950/fwd_bf16_2d_miopen200.csv.gz]",
                f"hydra.run.dir={tour / 'ev_train'}", cwd=tour)
    assert r.returncode == 0, r.stderr
    assert "evaluate: WARNING: " in r.stdout and "is the model's own training data" in r.stdout
    report = (tour / "ev_train" / "report.md").read_text()
    assert report.splitlines()[0].endswith("real data, ON ITS TRAINING DATA")
    assert "**Warning: evaluated on the model's own training data**" in report


def test_ck_export_lists_its_kernels_names_its_features_and_holds_no_path(tour):
    import json

    from ckheur.learn.bundle import load_bundle
    from ckheur.integrations.ck.model_folder import CKFormatError, CKModel
    from ckheur.problems import problem_from_dict

    folder = tour / "exports" / "ck" / "grouped_conv_forward_bf16_gfx950"
    bundle = load_bundle(tour / "outputs" / "tour" / "fwd_ck")
    names = [k.name for k in bundle.kernels]
    assert len(names) == 20
    assert json.loads((folder / "kernels.json").read_text())["kernels"] == names
    spec = json.loads((folder / "feature_spec.json").read_text())
    manifest = json.loads((folder / "train_manifest.json").read_text())
    assert spec["ckheur"]["kernels"] == names and manifest["kernels"] == names
    text = (folder / "model_tflops.lgbm").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("feature_names="))
    assert line == "feature_names=" + " ".join(spec["feature_names"]) and "Column_" not in text
    for f in folder.iterdir():  # no folder of the machine that exported: not the tour's, not the checkout's
        body = f.read_text()
        assert str(tour) not in body and str(ROOT) not in body and not re.search(r'"/[^"]*"', body), f.name
    assert spec["ckheur"]["bundle"] == "fwd_ck" and len(spec["ckheur"]["bundle_sha256"]) == 64
    ck = CKModel.load(folder, {"name": "gfx950"})
    p = problem_from_dict({"N": 16, "C": 256, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1})
    assert [n for n, _ in ck.rank(p, bundle.kernels)][0] in names
    from ckheur.kernels import parse_name
    from ckheur.config import load_option

    stranger = parse_name("grouped_conv_forward_bf16_2d_256x256x64_compv5_intrawave",
                          load_option("op/grouped_conv/fwd"))
    with pytest.raises(CKFormatError, match="1 candidate kernel\\(s\\) the model was not trained on"):
        ck.rank(p, [*bundle.kernels, stranger])


def test_help_fits_a_screen_and_names_every_stage_and_group():
    from ckheur.stages import STAGES

    r = run_cli("--help")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert len(lines) < 60 and lines[0].startswith("ckheur ")
    for stage in STAGES:
        assert any(ln.startswith(f"  {stage} ") for ln in lines), stage
    for group in ("arch:", "backend:", "model:", "op/grouped_conv:", "op/miopen:", "problems:", "stage:"):
        assert any(ln.strip().startswith(group) for ln in lines), group
    assert "  arch:            gfx1030, gfx900, gfx906, gfx908, gfx90a, gfx942, gfx950*" in lines  # the default marked
    assert "--cfg job" in r.stdout and "docs/" in r.stdout
    assert run_cli("-h").stdout == r.stdout


def test_version_is_ckheurs_from_pyproject():
    import tomllib

    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"ckheur {want}"
    import ckheur

    assert ckheur.__version__ == want


def test_an_unquoted_miopen_line_says_to_quote_it(tmp_path):
    r = run_cli("stage=predict", "problem=convbfp16", "-n", "16", "-c", "256", "-H", "28", "-W", "28", "-k", "128",
                "op=fwd", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--cfg" not in r.stderr
    assert r.stderr.strip() == ('error: problem= takes one value, but the shell split it at the spaces (convbfp16 -n 16 '
                                '-c 256 -H 28 -W 28 -k 128): quote it, as in problem="convbfp16 -n 16 -c 256 -H 28 -W 28 '
                                '-k 128"')
    r = run_cli("stage=predict", "problem=convbfp16 -n 16 -c 256", f"hydra.run.dir={tmp_path}", "--cfg", "job",
                "--package", "problem")
    assert r.returncode == 0 and "driver_line: convbfp16 -n 16 -c 256" in r.stdout  # quoted, then Hydra's own flags
    r = run_cli("stage=predict", "problem='convbfp16 -n 16 -c 256'", f"hydra.run.dir={tmp_path}", "--cfg", "job",
                "--package", "problem")  # quoted for Hydra as well as for the shell: the same
    assert r.returncode == 0 and "driver_line: convbfp16 -n 16 -c 256" in r.stdout, r.stderr


def test_predict_without_a_problem_says_how_to_give_one(tmp_path):
    r = run_cli("stage=predict", "op=fwd", f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "stage=predict needs a problem: give one as problem=\"convbfp16" in r.stderr
    assert "or a whole set as problems=<set> (e.g. problems=train_fwd, this op's default)" in r.stderr
    assert not (tmp_path / "a" / "predictions.csv").exists()
    r = run_cli("stage=predict", "op=fwd", "problems=smoke", f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b" / "predictions.csv").is_file()
    assert f"outputs: {tmp_path / 'b'} (predictions.csv)" in r.stdout


def test_the_analytic_fallback_is_labeled_relative_only(tmp_path):
    """No shipped model for forward on gfx90a: the analytic model ranks, with no latency and a note;
    the shipped gfx950 model gives latencies."""
    import csv

    line = "problem=convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1"
    r = run_cli("stage=predict", "op=fwd", "arch=gfx90a", line, f"paths.sim_models={tmp_path / 'none'}",
                f"hydra.run.dir={tmp_path / 'a'}")
    assert r.returncode == 0, r.stderr
    assert "analytic TFLOPS (relative only)" in r.stdout and "note: the analytic model's figures rank" in r.stdout
    rows = [ln.split() for ln in r.stdout.splitlines() if ln[:1].isdigit()]
    assert len(rows) == 5 and all(row[-1] == "-" for row in rows)
    r = run_cli("stage=predict", "op=fwd", "arch=gfx90a", "problems=smoke", f"paths.sim_models={tmp_path / 'none'}",
                f"hydra.run.dir={tmp_path / 'b'}")
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "b" / "predictions.csv") as f:
        got = list(csv.DictReader(f))
    assert got and all(g["pred_latency_ms"] == "" and g["note"] == "analytic: pred_tflops relative only" for g in got)
    r = run_cli("stage=predict", "op=fwd", "arch=gfx950", line, f"hydra.run.dir={tmp_path / 'c'}")
    assert r.returncode == 0 and "relative only" not in r.stdout
    rows = [ln.split() for ln in r.stdout.splitlines() if ln[:1].isdigit()]
    assert all(float(row[-1]) > 0 for row in rows)


def test_progress_counts_read_as_words():
    from ckheur.progress import counts_text

    assert counts_text(["ok"] * 3 + ["failed"]) == "3 ok, 1 failed"
    assert counts_text({"ok": 20000}) == "20000 ok"


def test_progress_past_its_plan_grows_its_total():
    """stage=tune times a problem's next k where its first k all failed: more pairs than planned.
    The log line then counts against the grown total, never 200% with a negative ETA."""
    import io

    from ckheur.progress import Progress

    out = io.StringIO()
    bar = Progress(3, "log", every_s=0.0, stream=out, prefix="tune")
    bar.update(3)
    bar.update(3)
    bar.close()
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines] == ["3/3", "6/6"] and all("(100%)" in ln and "ETA 0s" in ln for ln in lines)


def test_main_job_names_its_reports_and_plots_and_retrains_explicitly(tour):
    """The main job's summary lists each evaluation report with its op and plots (here: the tour's
    evaluation folder); its simulated multirun retrains its own models with train.overwrite=true."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("main_job", ROOT / "tools" / "main_job.py")
    main_job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(main_job)
    multirun = next(s for s in main_job.steps("outputs/x") if "-m" in s)
    assert "train.overwrite=true" in multirun and "hydra.sweep.dir=outputs/x/simulated" in multirun
    run = next(i for i, a in enumerate(readme_tour()) if "stage=evaluate" in a)
    lines = main_job.outputs_summary(tour / "runs")
    assert lines == [f"  {tour / 'runs' / str(run) / 'report.md'} (op=bwd_data); plots: efficiency_cdf.png, "
                     "predicted_vs_measured.png, slices.png"]
