"""stage=evaluate reports the problems in the bundle's training data (seen) apart from the others
(unseen): by its remembered answers and by its training datasets found by sha256."""

from __future__ import annotations

import json

from ckheur.data.dataset import read_dataset, write_part
from ckheur.families.miopen.problems import FIELDS
from conftest import run_cli


def test_evaluate_reports_seen_and_unseen_problems_apart(tmp_path, miopen_slices):
    """A bundle trained (remembering) on half the MI300X slice's forward fp16 problems, evaluated on the
    whole slice: the seen part is exactly that half, answered by its lookup (op.remember_margin=inf:
    top-1 100% in find-db terms); the unseen part is the other half, scored by the model; both
    printed and written."""
    full = miopen_slices / "miopen_fwd_fp16_gfx942" / "gfx942130.parquet"
    df = read_dataset(full)
    keys = df[list(FIELDS)].drop_duplicates()
    half = keys.iloc[::2]
    train = df.merge(half, on=list(FIELDS))
    part = write_part(tmp_path / "half", train)
    r = run_cli("stage=train", "op=miopen/fwd", "arch=gfx942", f"data.paths=[{part}]", "model.max_trees=10",
                "train.folds=2", "train.cluster_cv=false", "train.remember=true", f"train.output={tmp_path / 'm'}")
    assert r.returncode == 0, r.stderr
    r = run_cli("stage=evaluate", "op=miopen/fwd", "arch=gfx942", f"evaluate.model_dir={tmp_path / 'm'}",
                f"data.eval_paths=[{full}]", "evaluate.plots=false", "op.remember_margin=inf",
                f"hydra.run.dir={tmp_path / 'ev'}")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    split = m["seen_unseen"]
    assert split["seen"]["problems"] == len(half) and split["unseen"]["problems"] == len(keys) - len(half) > 100
    assert split["seen"]["problems"] + split["unseen"]["problems"] == m["problems_evaluated"]
    assert split["seen"]["open"]["top1"] == 1.0 and split["unseen"]["open"]["top1"] < 0.99
    assert any("remembered" in s for s in split["from"]) and any(str(part) in s for s in split["from"])
    assert f"seen: {len(half)} problems" in r.stdout and f"unseen: {len(keys) - len(half)} problems" in r.stdout
    assert f"seen: {len(half)} problems" in (tmp_path / "ev" / "report.md").read_text()


def test_evaluate_finds_the_ck_bundle_training_csv_by_its_content(tmp_path, ck_fwd_csv):
    """The shipped CK forward bundle was trained on the shipped CSV (no remembered answers): evaluated
    on a copy of it, every problem is seen, found by sha256."""
    r = run_cli("stage=evaluate", "op=fwd", f"data.eval_paths=[{ck_fwd_csv}]", "evaluate.plots=false",
                f"hydra.run.dir={tmp_path / 'ev'}")
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert m["seen_unseen"]["seen"]["problems"] == m["problems_evaluated"] > 150
    assert m["seen_unseen"]["unseen"]["problems"] == 0 and "training dataset" in m["seen_unseen"]["from"][0]
