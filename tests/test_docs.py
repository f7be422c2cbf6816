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
def test_api_page_examples_run(index, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = _examples(DOCS / "api.md")[index]
    exec(compile(code, f"docs/api.md example {index + 1}", "exec"), {"__name__": "docs_example"})


def test_every_page_in_the_navigation_exists():
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
    assert nav and all((DOCS / p).is_file() for p in nav), [p for p in nav if not (DOCS / p).is_file()]
    listed = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert listed == set(nav), listed ^ set(nav)  # no page left out of the navigation
    assert os.path.getsize(ROOT / "README.md") < 20_000  # the README sends readers here
