#!/usr/bin/env python
"""Convert bundle folders of versions before issue 36 (gzipped full model texts) to this version's
files (compact model texts, xz) in place, each prediction proven unchanged first.

    python tools/compact_bundles.py [FOLDER ...] [--rows 20000] [--real 500] [--problems SNAPSHOT]

Default: every bundle of this checkout's ``models/``. Per folder, in a copy: model.txt.gz and
tflops_model.txt.gz are written as model.txt.xz / tflops_model.txt.xz (their
``bundle.compact_model_text``), answers.json.gz as answers.json.xz (the same JSON bytes). The copy
is loaded with ``load_bundle`` beside the folder and compared bit for bit (np.array_equal):

- each model's raw predictions on ``--rows`` seeded random rows of its feature space (each
  feature drawn in the range the model records for it, half the draws at its split thresholds);
- the remembered answers;
- real feature rows: ``Selector`` scores and predicted TFLOPS of every candidate of up to ``--real``
  remembered problems and of the problems a ranking snapshot lists for the folder
  (``--problems``, default tests/data/shipped_rankings.json.gz; tools/ranking_snapshot.py).

Only then do the new files replace the old ones; a difference is an error and the folder is left as
it was. A folder holding both names from an interrupted run is finished when the .xz holds exactly
the converted .gz, refused otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "tests" / "data" / "shipped_rankings.json.gz"


def random_rows(text: str, count: int, seed: int = 0) -> np.ndarray:
    """``count`` rows in a LightGBM model's feature space: each numerical feature uniform in the
    [min:max] its ``feature_infos`` records or, half the time, one of its split thresholds (where a
    changed comparison would show); a categorical one among its recorded categories and -1."""
    infos = re.search(r"^feature_infos=(.*)$", text, re.M)[1].split()
    cuts: list[list[float]] = [[] for _ in infos]
    for block in text.split("\nTree=")[1:]:
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        for f, t, d in zip(*(fields.get(k, "").split() for k in ("split_feature", "threshold", "decision_type"))):
            if not int(d) & 1:  # a numerical split (categorical thresholds index category sets)
                cuts[int(f)].append(float(t))
    rng = np.random.default_rng(seed)
    X = np.zeros((count, len(infos)))
    for j, info in enumerate(infos):
        if info.startswith("["):
            lo, hi = map(float, info[1:-1].split(":"))
            X[:, j] = rng.uniform(lo, hi, count)
            if cuts[j]:
                at = rng.random(count) < 0.5
                X[at, j] = rng.choice(cuts[j], int(at.sum()))
        elif info != "none":
            X[:, j] = rng.choice([*map(float, info.split(":")), -1.0], count)
    return X


def real_problems(bundle: Any, folder_name: str, snapshot: dict, limit: int, seed: int = 0) -> list:
    """Problems of the bundle's family: up to ``limit`` of its remembered ones (seeded) and those
    the snapshot lists under the folder's name (when the snapshot's family is the bundle's)."""
    family = bundle.family
    make = family.problems.problem_from_dict
    fields = list(family.problems.FIELDS)
    keys = sorted(bundle.answers or {}, key=repr)
    pick = np.random.default_rng(seed).permutation(len(keys))[:limit]
    out = [make(dict(zip(fields, keys[i]))) for i in sorted(pick)]
    entry = snapshot.get(folder_name)
    if entry and entry.get("family") == family.name:
        out += [make(p) for p in entry["problems"]]
    return out


def same_scores(before: Any, after: Any, problems: list) -> int:
    """How many kernel scores the two selectors gave bit-identically (scores and predicted TFLOPS
    of every candidate of every problem); an error at the first difference."""
    from ckheur.errors import UserError

    count = 0
    for p in problems:
        got = []
        for selector in (before, after):
            try:
                ks, scores, tflops = selector.scores(p)  # pool order, before ranking: every candidate
                got.append(([k.name for k in ks], scores, tflops))
            except (UserError, ValueError) as e:  # a problem no kernel supports: the same on both sides
                got.append(str(e))
        a, b = got
        if isinstance(a, str) or isinstance(b, str):
            if a != b:
                raise UserError(f"{p}: scored {'an error' if isinstance(a, str) else 'fine'} before, "
                                f"{'an error' if isinstance(b, str) else 'fine'} after")
            continue
        if a[0] != b[0] or not np.array_equal(a[1], b[1]) or not np.array_equal(a[2], b[2]):
            raise UserError(f"{p}: scores or predicted TFLOPS differ after the conversion")
        count += len(a[0])
    return count


def _converted(name: str, data: bytes) -> bytes:
    """A .gz file's content as this version stores it (before xz): model texts compact."""
    from ckheur.learn.bundle import ANSWERS, compact_model_text

    return data if name == ANSWERS else compact_model_text(data.decode()).encode()


def finish_interrupted(folder: Path) -> None:
    """Where a name is there as .gz and .xz (a run stopped between writing one and removing the
    other): remove the .gz when the .xz holds exactly its conversion, else an error."""
    from ckheur.errors import UserError
    from ckheur.files import BUNDLE_LIMIT_BYTES, read_compressed
    from ckheur.learn.bundle import ANSWERS, MODEL, OLD_SUFFIX, SUFFIX, TFLOPS_MODEL

    for name in (MODEL, TFLOPS_MODEL, ANSWERS):
        new, old = folder / (name + SUFFIX), folder / (name + OLD_SUFFIX)
        if new.exists() and old.exists():
            if read_compressed(new, BUNDLE_LIMIT_BYTES) != _converted(name, read_compressed(old, BUNDLE_LIMIT_BYTES)):
                raise UserError(f"{folder}: {new.name} is not {old.name} converted; remove the one the bundle "
                                f"should not use")
            old.unlink()


def convert(folder: Path, rows: int, real: int, snapshot: dict, log: Callable[[str], None] = print) -> bool:
    """Convert one bundle folder in place (module docstring); whether it held old files."""
    from ckheur.errors import UserError
    from ckheur.files import BUNDLE_LIMIT_BYTES, read_compressed, write_file
    from ckheur.learn.bundle import (ANSWERS, MODEL, OLD_SUFFIX, SUFFIX, TFLOPS_MODEL, load_bundle,
                                     write_compressed)
    from ckheur.selection.selector import Selector

    finish_interrupted(folder)
    old = {n: folder / (n + OLD_SUFFIX) for n in (MODEL, TFLOPS_MODEL, ANSWERS) if (folder / (n + OLD_SUFFIX)).exists()}
    if not old:
        log(f"{folder}: nothing to convert")
        return False
    with tempfile.TemporaryDirectory(prefix="ckheur-compact-") as tmp:
        copy = Path(shutil.copytree(folder, Path(tmp) / folder.name, symlinks=False))
        for name, path in old.items():
            write_compressed(copy, name, _converted(name, read_compressed(path, BUNDLE_LIMIT_BYTES)))
        before, after = load_bundle(folder), load_bundle(copy)
        for attr, name in (("booster", MODEL), ("tflops_booster", TFLOPS_MODEL)):
            a, b = getattr(before, attr), getattr(after, attr)
            if a is None or name not in old:
                continue
            X = random_rows(a.model_to_string(), rows)
            if not np.array_equal(a.predict(X, raw_score=True), b.predict(X, raw_score=True)):
                raise UserError(f"{old[name]}: predictions differ after the conversion; left as it was")
        if before.answers != after.answers:
            raise UserError(f"{folder}: the remembered answers differ after the conversion; left as it was")
        problems = real_problems(before, folder.name, snapshot, real)
        scores = same_scores(Selector.load(folder), Selector.load(copy), problems)
        sizes = []
        for name, path in old.items():  # the new file first: a stop between leaves both, finished on a re-run
            sizes.append(f"{path.name} {path.stat().st_size / 1e6:.2f} -> {name + SUFFIX} "
                         f"{(copy / (name + SUFFIX)).stat().st_size / 1e6:.2f} MB")
            write_file(folder / (name + SUFFIX), (copy / (name + SUFFIX)).read_bytes())
            path.unlink()
    load_bundle(folder)  # loads as converted
    log(f"{folder}: {', '.join(sizes)}; bit-identical on {rows} random rows per model and {scores} kernel scores of "
        f"{len(problems)} real problems")
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line: convert the folders given (default: every bundle of models/)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path)
    ap.add_argument("--rows", type=int, default=20_000, help="random rows per model")
    ap.add_argument("--real", type=int, default=500, help="remembered problems per bundle (at most)")
    ap.add_argument("--problems", type=Path, default=SNAPSHOT, help="a ranking snapshot's problems per bundle")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ckheur.errors import UserError

    folders = a.folders or sorted(p for p in (ROOT / "models").iterdir() if p.is_dir())
    snapshot: dict = {}
    if a.problems and a.problems.exists():
        doc = json.loads(gzip.decompress(a.problems.read_bytes()) if a.problems.suffix == ".gz" else a.problems.read_text())
        snapshot = doc.get("bundles", doc)
    try:
        converted = sum(convert(f, a.rows, a.real, snapshot) for f in folders)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{converted} of {len(folders)} folders converted")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
