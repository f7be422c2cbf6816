"""The documentation's Python examples run as written (from the repository root), and its pages
exist where the site's navigation points."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = ROOT / "docs"


def _examples(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(_examples(DOCS / "api.md"))))
def test_api_page_examples_run(index, monkeypatch, tmp_path):
    import tempfile

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' mkdtemp() folders: the test's, not /tmp
    code = _examples(DOCS / "api.md")[index]
    exec(compile(code, f"docs/api.md example {index + 1}", "exec"), {"__name__": "docs_example"})


def test_every_page_in_the_navigation_exists():
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    assert nav and all((DOCS / p).is_file() for p in nav), [p for p in nav if not (DOCS / p).is_file()]
    listed = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert listed == set(nav), listed ^ set(nav)  # no page left out of the navigation
    assert os.path.getsize(ROOT / "README.md") < 20_000  # the README sends readers here


def _table(text: str, header: str) -> list[str]:
    """The rows of the Markdown table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_headline_figures_of_the_docs_home_are_the_readmes():
    readme = _table((ROOT / "README.md").read_text(), "| on real measurements |")
    home = _table((DOCS / "index.md").read_text(), "| on real measurements |")
    assert len(readme) > 5 and home == [row.replace("](docs/", "](") for row in readme]


def _tree(text: str) -> str:
    return re.search(r"## The config tree\n\n```\n(.*?)```", text, re.S).group(1)


def test_config_trees_name_every_option_there_is():
    tree = _tree((ROOT / "README.md").read_text())
    assert _tree((DOCS / "getting-started.md").read_text()) == tree
    lines = {line.split()[0]: line for line in tree.splitlines()}
    for group in ("stage", "backend", "arch", "model", "db"):
        named = set(re.findall(r"[\w]+", lines[f"conf/{group}/"].split(None, 1)[1]))
        options = {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}
        assert options <= named, (group, options - named)


def test_getting_started_prediction_is_what_predict_prints(tmp_path):
    from conftest import run_cli

    page = (DOCS / "getting-started.md").read_text()
    sample = re.search(r"python run.py stage=predict problem=\"([^\"]+)\"\n```\n\n```text\n(.*?)```", page, re.S)
    r = run_cli("stage=predict", f"problem={sample.group(1)}", f"paths.tuning={tmp_path / 'none'}",
                f"hydra.sweep.dir={tmp_path / 'unused'}", cwd=tmp_path)  # Hydra's own run folder, as a user gets
    assert r.returncode == 0, r.stderr
    got = r.stdout.replace(str(tmp_path / "none"), "tuning").replace(str(ROOT) + "/", "")
    assert got.splitlines() == sample.group(2).splitlines()
