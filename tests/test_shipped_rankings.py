"""Every shipped bundle ranks real problems exactly as the version that shipped it did.

The recorded rankings (tests/data/shipped_rankings.json.gz) were made by earlier commits with
tools/ranking_snapshot.py, not by the code under test; the problems are stored with them, so
this runs without ../shared."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ckheur.learn.bundle import shipped_models_dir
from ckheur.selection.selector import Selector
from ckheur.families import get_family

RECORDED = json.loads(gzip.open(Path(__file__).parent / "data" / "shipped_rankings.json.gz", "rt").read())["bundles"]


def test_every_shipped_bundle_is_recorded():
    assert sorted(RECORDED) == sorted(p.name for p in shipped_models_dir().iterdir() if p.is_dir())


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_shipped_bundle_ranks_as_recorded(name):
    entry = RECORDED[name]
    selector = Selector.load(shipped_models_dir() / name)
    make = get_family(entry["family"]).problems.problem_from_dict
    for problem, top in zip(entry["problems"], entry["top"], strict=True):
        got = selector.rank(make(problem), k=len(top))
        assert [k for k, _ in got] == [k for k, _ in top], problem
        assert [t for _, t in got] == pytest.approx([t for _, t in top], rel=1e-9, abs=0), problem
