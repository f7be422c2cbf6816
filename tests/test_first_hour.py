"""A newcomer's first hour (issue 38): the README's tour runs as written, the short help and the
version, outputs that say where they are, no bundle replaced silently, the analytic fallback
labeled relative only, plots and exports that say what they hold."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from conftest import ROOT, run_cli


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


def test_readme_tour_runs_as_written_in_a_fresh_folder(tmp_path):
    """Each tour command, from a folder holding only what a clone has at those paths; every write
    stays in that folder (run folders named inside it)."""
    commands = readme_tour()
    assert len(commands) >= 12
    shutil.copytree(ROOT / "tests" / "data" / "miopen_fdb", tmp_path / "tests" / "data" / "miopen_fdb")
    for i, args in enumerate(commands):
        key = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
        r = run_cli(*args, f"{key}={tmp_path / 'runs' / str(i)}", cwd=tmp_path)
        assert r.returncode == 0, (args, r.stderr[-2000:])
        if "-m" not in args:
            assert f"outputs: {tmp_path / 'runs' / str(i)}" in r.stdout, args
    assert (tmp_path / "outputs" / "tour" / "bwd_data" / "model.txt.gz").is_file()
    ck = tmp_path / "exports" / "ck" / "grouped_conv_forward_bf16_gfx950"
    assert (ck / "kernels.json").is_file()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(str(i) for i in range(len(commands)))
