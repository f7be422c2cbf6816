"""Model bundles: the LightGBM model (compact text, xz) with everything needed to use and audit it.

Files: model.txt.xz, [tflops_model.txt.xz], feature_spec.json, kernels.json, cv_metrics.json,
feature_importances.json, train_manifest.json, [answers.json.xz: the fastest measured kernel of
each training problem, which the selector ranks first for that exact problem (train.remember)
unless the model predicts its own pick faster by more than the margin: ``remembered_kept``].
The model texts are ``compact_model_text``'s (what prediction reads). Bundles written before
issue 36 hold the same files gzipped (``.gz``, full model texts): they load as they are.
"""

from __future__ import annotations

import json
import lzma
import math
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ckheur.errors import UserError

# The compressed files of a bundle, by name without their suffix (``bundle_file``).
MODEL, TFLOPS_MODEL, ANSWERS = "model.txt", "tflops_model.txt", "answers.json"
SUFFIX = ".xz"  # what this version writes
OLD_SUFFIX = ".gz"  # what versions before issue 36 wrote; still read
REQUIRED = ("feature_spec.json", "kernels.json", "train_manifest.json")  # and a MODEL file
SPEC_KEYS = ("engine", "encoding_version", "feature_names", "categorical", "analytic", "objective", "arch", "op")
# Per-tree lines of a LightGBM model text that record training, not prediction: split gains, sums
# of hessians, data counts and the outputs of internal nodes. LightGBM's loader fills missing ones
# with zeros and predicting reads none of them (only splits, thresholds, decision types, children
# and leaf values), so dropping them leaves every prediction bit-identical. What they would give
# (gain importances) is recorded in feature_importances.json at training.
TRAINING_ONLY = ("split_gain", "leaf_weight", "leaf_count", "internal_value", "internal_weight", "internal_count")


def shipped_models_dir() -> Path:
    """Where the shipped models are: ckheur/models in a wheel, models/ in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    return here / "models" if (here / "models").is_dir() else here.parent / "models"


def resolve_model_dir(path: str | Path) -> Path:
    """A model folder as given; a missing ``models/<name>`` is looked up among the shipped bundles
    (so an installed wheel finds them from any directory). Other paths are never redirected."""
    path = Path(path)
    if path.is_dir() or path.is_absolute() or path.parent != Path("models"):
        return path
    shipped = shipped_models_dir() / path.name
    return shipped if shipped.is_dir() else path


class BundleError(UserError):
    """A model bundle is missing, corrupted, or incompatible; the message says precisely how."""


@dataclass
class Bundle:
    path: Path
    booster: Any
    tflops_booster: Any  # None when the main model already predicts TFLOPS (regression_log)
    spec: dict
    kernels: list
    cv_metrics: dict
    manifest: dict
    answers: dict | None = None  # problem key -> kernel name: the training data's fastest (train.remember)

    @property
    def family(self) -> Any:
        """The op family the bundle was trained for (``ckheur.families.Family``)."""
        return family_of(self.spec)


def family_of(spec: Mapping) -> Any:
    """The op family a bundle's spec records by name."""
    from ckheur.families import get_family

    return get_family(spec["op"]["family"])


def write_json(path: Path, obj: Any) -> None:
    """A bundle's JSON file, as every bundle file is written (sorted keys, indented)."""
    from ckheur.files import write_file

    write_file(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def compact_model_text(text: str) -> str:
    """A LightGBM model text as prediction reads it, predictions bit-identical (no number is rewritten).

    Dropped: the TRAINING_ONLY tree lines; the header's ``tree_sizes`` (the byte lengths of the full
    trees, which LightGBM uses to parse trees in parallel: wrong once lines are gone, and without it
    LightGBM reads the trees in order); the ``feature_importances`` section (LightGBM's split counts,
    recomputed on load). Kept: the header, every split and leaf, the ``parameters`` section (the
    training parameters, which the CK export reports) and ``pandas_categorical`` (Python's LightGBM
    maps a DataFrame's categories by it). A text already compact is returned as it is."""
    body, end, tail = text.partition("\nend of trees\n")
    if not end:
        raise BundleError("not a whole LightGBM model text (no 'end of trees' line)")
    # One filter for header and trees: no header key is a TRAINING_ONLY one, no tree line tree_sizes.
    drop = tuple(f"{key}=" for key in (*TRAINING_ONLY, "tree_sizes"))
    body = "\n".join(line for line in body.split("\n") if not line.startswith(drop))
    kept = [m[0] for m in (re.search(r"^parameters:\n.*?^end of parameters\n", tail, re.M | re.S),
                           re.search(r"^pandas_categorical:.*\n?", tail, re.M)) if m]
    return body + end + "".join("\n" + k for k in kept)


def _xz(data: bytes) -> bytes:
    """``data`` as .xz: lzma preset 9 (about 23% smaller than gzip -9 on model texts); the same bytes
    for the same data (xz stores no time or name)."""
    return lzma.compress(data, format=lzma.FORMAT_XZ, preset=9)


def _remove(folder: Path, name: str, suffixes: tuple = (SUFFIX, OLD_SUFFIX)) -> None:
    """Remove a compressed file of a bundle folder under the suffixes given (a link: the link)."""
    for suffix in suffixes:
        path = folder / (name + suffix)
        if path.exists() or path.is_symlink():
            path.unlink()


def write_compressed(folder: str | Path, name: str, data: bytes) -> Path:
    """Write a compressed file of a bundle folder (``name``: MODEL, TFLOPS_MODEL or ANSWERS) as
    ``name.xz``, removing an earlier version's ``name.gz`` (a folder never holds both)."""
    from ckheur.files import write_file

    path = write_file(Path(folder) / (name + SUFFIX), _xz(data))
    _remove(Path(folder), name, (OLD_SUFFIX,))
    return path


def write_model(folder: str | Path, name: str, booster: Any, iterations: int | None = None) -> Path:
    """Write a booster (its first ``iterations`` trees; None: all) as a bundle's model file ``name``
    (MODEL or TFLOPS_MODEL): its compact text (``compact_model_text``), xz-compressed."""
    text = compact_model_text(booster.model_to_string(num_iteration=iterations))
    return write_compressed(folder, name, text.encode())


def bundle_file(folder: str | Path, name: str) -> Path | None:
    """A compressed file of a bundle folder (``name``: MODEL, TFLOPS_MODEL or ANSWERS): ``name.xz``,
    or ``name.gz`` as versions before issue 36 wrote it; None when neither is there. Both there is
    a BundleError: which one the bundle means cannot be told."""
    folder = Path(folder)
    found = [folder / (name + s) for s in (SUFFIX, OLD_SUFFIX) if (folder / (name + s)).exists()]
    if len(found) > 1:
        raise BundleError(f"model bundle {folder} holds both {found[0].name} and {found[1].name} (this version "
                          f"writes {found[0].name}, earlier ones {found[1].name}); remove the one it should not use")
    return found[0] if found else None


def model_file(folder: str | Path) -> Path:
    """The model file of a bundle folder (``bundle_file`` of MODEL); a BundleError when missing."""
    path = bundle_file(folder, MODEL)
    if path is None:
        raise BundleError(f"model bundle {folder} is incomplete: missing {MODEL + SUFFIX}")
    return path


def save_bundle(path: str | Path, booster: Any, tflops_booster: Any, spec: Mapping, kernels: list,
                cv_metrics: Mapping, importances: Mapping, manifest: Mapping, answers: Mapping | None = None) -> Path:
    """Write a bundle folder (replacing the files of an older bundle there, .gz ones included);
    ``answers``: the problems it remembers (``write_answers``)."""
    from ckheur.files import make_folder

    path = make_folder(path, "bundle folder")
    write_model(path, MODEL, booster)
    if tflops_booster is not None:
        write_model(path, TFLOPS_MODEL, tflops_booster)
    else:
        _remove(path, TFLOPS_MODEL)
    write_json(path / "feature_spec.json", dict(spec))
    write_json(path / "kernels.json", [k.traits() for k in kernels])
    write_json(path / "cv_metrics.json", dict(cv_metrics))
    write_json(path / "feature_importances.json", dict(importances))
    write_json(path / "train_manifest.json", dict(manifest))
    if answers is not None:
        write_answers(path, answers, family_of(spec))
    else:
        _remove(path, ANSWERS)
    return path


def write_answers(path: str | Path, answers: Mapping[tuple, str], family: Any) -> Path:
    """The bundle's remembered answers: {problem key (the family's fields): kernel name}."""
    fields = list(family.problems.FIELDS)
    keys = sorted(answers, key=lambda k: tuple(str(v) if isinstance(v, str) else v for v in k))
    doc = {"about": "the fastest measured kernel of each training problem; ranked first for that exact problem",
           "fields": fields, "keys": [list(k) for k in keys], "kernels": [answers[k] for k in keys]}
    return write_compressed(path, ANSWERS, json.dumps(doc, separators=(",", ":")).encode())


def _key_problems(path: Path, keys: list, family: Any) -> None:
    """Refuse remembered keys that name no problem of the family: a text field (a layout) outside
    the family's list, a number that is not an integer in [0, 2^31-1] (NaN, a float, a bool)."""
    from ckheur.families.problem_base import FIELD_MAX

    mod = family.problems
    lists = {f: tuple(getattr(mod, name)) for f, name in (family.c_export.enums if family.c_export else ())}
    for i, f in enumerate(mod.FIELDS):
        values = {k[i] for k in keys}
        if f in lists or isinstance(mod.DEFAULTS.get(f), str):
            allowed = lists.get(f)
            bad = [v for v in values if not isinstance(v, str) or (allowed is not None and v not in allowed)]
            why = f"allowed: {', '.join(allowed)}" if allowed else "must be text"
        else:
            bad = [v for v in values if type(v) is not int or not 0 <= v <= FIELD_MAX]
            why = f"must be an integer in [0, {FIELD_MAX}]"
        if bad:
            raise BundleError(f"{path}: a remembered problem has {f}={bad[0]!r:.60} ({why})")


# Answers files that passed their checks in this process: (digest of the file's bytes, what they
# were checked against) -> the answers. A bundle loaded again (stage=export, a compiled selector,
# a process serving several devices) parses and checks a file of ~10^4 problems once; a changed
# file has another digest and is read and checked anew.
_ANSWERS: dict[tuple, dict] = {}
_ANSWERS_MAX = 16


def _read_answers(path: Path, fields: list, kernels: list, family: Any = None) -> dict:
    import hashlib

    from ckheur import files

    names = {k.name for k in kernels}
    key, data = None, None
    try:
        with files.open_regular(path) as raw:
            if os.fstat(raw.fileno()).st_size <= files.BUNDLE_LIMIT_BYTES:  # else read as a stream, below
                data = raw.read()
                key = (hashlib.sha256(data).digest(), tuple(fields), tuple(sorted(names)),
                       getattr(family, "name", None))
    except OSError:
        data = None  # reported as the reading below reports it
    if key is None:
        return _checked_answers(path, fields, names, family, data)
    return dict(_kept(_ANSWERS, _ANSWERS_MAX, key, lambda: _checked_answers(path, fields, names, family, data)))


def _checked_answers(path: Path, fields: list, names: set, family: Any, data: bytes | None) -> dict:
    """A bundle's answers (its file's bytes ``data``, or None: read from ``path``), checked."""
    from ckheur import files

    try:
        doc = json.loads(files.read_compressed(path, files.BUNDLE_LIMIT_BYTES) if data is None
                         else files.decompress(data, path, files.BUNDLE_LIMIT_BYTES))
        ok = doc["fields"] == fields and len(doc["keys"]) == len(doc["kernels"]) and all(
            isinstance(k, list) and len(k) == len(fields) for k in doc["keys"]) and set(doc["kernels"]) <= names
    except files.TooLargeError as e:
        raise BundleError(str(e)) from None
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, RecursionError) as e:
        raise BundleError(f"{path}: not a bundle's answers ({str(e)[:200]})") from None
    if not ok:
        raise BundleError(f"{path}: answers must list keys of the fields {fields} and kernels of kernels.json")
    if family is not None:
        try:
            _key_problems(path, doc["keys"], family)
        except TypeError:  # a key holding a list or an object
            raise BundleError(f"{path}: a key holds something other than numbers and names") from None
    answers: dict = {}
    for key, name in zip(doc["keys"], doc["kernels"]):
        try:
            known = answers.setdefault(tuple(key), name)
        except TypeError:  # a key holding a list or an object
            raise BundleError(f"{path}: a key holds something other than numbers and names: {key!r:.120}") from None
        if known != name:  # which of the two is the fastest is unknowable: neither is trusted
            raise BundleError(f"{path}: the problem {tuple(key)!r:.200} is remembered with two kernels ({known}, "
                              f"{name}): conflicting answers")
    return answers


# The measurement noise a remembered answer is allowed: two find-db timings of one kernel (MIOpen's
# ConvBinWinogradRxSf2x3 and ConvBinWinogradRxSf2x3g1, listed together for 412 MI210/250 bwd_weight
# fp32 problems) differ by at most 3.0% in 95% of problems. Printed by
# `python bench/bench_unseen.py --splits remember` (docs/miopen-results.md).
REMEMBERED_NOISE = 0.03


def remembered_bar(objective: str, margin: float) -> tuple[bool, float]:
    """How ``remembered_kept`` compares scores of an objective: (scores are log1p TFLOPS, the bar)."""
    if objective == "relative":  # predicted fractions of the best: their ratio is a predicted speed-up
        return False, 1.0 + margin
    if objective == "regression_log":  # log1p of predicted TFLOPS: their difference is nearly its log
        return True, math.log1p(margin)
    return False, math.inf  # lambdarank: scores without a scale, the remembered answer always kept


def remembered_kept(top: Any, remembered: Any, objective: str, margin: float) -> Any:
    """Whether a remembered answer stays first (elementwise): unless the model scores its own pick
    (``top``: the best score) above the remembered solver's by more than ``margin`` as predicted
    speed (``remembered_bar``; the compiled C model compares the same way)."""
    import numpy as np

    top, remembered = np.asarray(top, dtype=np.float64), np.asarray(remembered, dtype=np.float64)
    log, bar = remembered_bar(objective, margin)
    if log:
        return ~(top - remembered > bar)
    return ~(np.maximum(top, 1e-3) > np.maximum(remembered, 1e-3) * bar)


def checked_margin(margin: Any) -> float:
    """A remember margin as a float, refused unless a number >= 0 (inf allowed)."""
    try:
        value = float(margin)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(margin, bool) or not value >= 0:
        raise UserError(f"op.remember_margin={margin!r}: give a fraction >= 0 (0: the model decides; "
                        f"inf: the remembered answer always; default {REMEMBERED_NOISE}, the measured noise)")
    return value


def margin_of(op: Mapping[str, Any]) -> float:
    """An op's ``remember_margin``, or ``REMEMBERED_NOISE`` when it sets none."""
    margin = op.get("remember_margin")
    return REMEMBERED_NOISE if margin is None else checked_margin(margin)


# A screened-out candidate's score: its first trees' sum this far below, so that it ranks after
# every candidate the whole model scored, in the order of those first trees.
SCREEN_OFFSET = 1e6


def screen_of(spec: Mapping[str, Any]) -> tuple[int, int] | None:
    """A bundle's screen (``spec["screen"]``, ckheur.selection.screening): the first trees, which
    score every candidate, and how many of their best the whole model then scores; None: all."""
    screen = spec.get("screen")
    return None if not screen else (int(screen["trees"]), int(screen["top"]))


# Content checks that passed in this process, by what was checked (a digest of it): loading a bundle
# again (Selector.load(compiled=True) reads it twice, a process serving many problems reloads it)
# does not repeat them. A check depends only on the content, so a changed file is checked again.
_PASSED: dict[tuple, Any] = {}
_PASSED_MAX = 256


def _checked_once(kind: str, content: str | None, extra: Any, check: Any) -> Any:
    """``check()`` unless it passed for this content (and ``extra``) before in this process (its
    result kept). A check that raises is not recorded; content None (what could not be put in
    words): always checked."""
    import hashlib

    if content is None:
        return check()
    key = (kind, hashlib.sha256(content.encode("utf-8", "surrogatepass")).digest(), extra)
    return _kept(_PASSED, _PASSED_MAX, key, check)


def _kept(cache: dict, limit: int, key: tuple, compute: Any) -> Any:
    """``compute()``'s result, kept in ``cache`` by ``key`` (at most ``limit`` entries, the oldest
    dropped first); one that raises is not kept."""
    if key not in cache:
        value = compute()
        if len(cache) >= limit:
            cache.pop(next(iter(cache)))
        cache[key] = value
    return cache[key]


def _read_json(path: Path) -> Any:
    from ckheur.files import check_regular

    try:
        return json.loads(check_regular(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise BundleError(f"{path}: corrupted JSON ({e})") from None
    except OSError as e:
        raise BundleError(f"{path}: cannot be read ({e.strerror or e})") from None


# Tree shapes every path that evaluates a model supports (LightGBM, the C export's parser, the
# compiled selector): deeper trees are refused on load, wider ones by the C export (64 leaves).
MAX_TREE_DEPTH = 256
MAX_TREE_LEAVES = 1 << 16
# The largest score a model may reach (the sum over its trees of their largest |leaf|): beyond it
# scores are no prediction (the shipped models stay below 62), sums could overflow, and the +1
# that ranks a remembered answer first would be lost in rounding (doubles are exact to 2^53).
MAX_SCORE = float(1 << 40)


def _numbers(block: Mapping[str, str], key: str, count: int, kind: type, where: str,
             infinite: bool = False) -> list:
    """A tree's array field: ``count`` numbers of ``kind`` (floats finite, or also infinite when
    ``infinite``: LightGBM writes ``inf`` thresholds), or a BundleError; NaN never."""
    text = block.get(key)
    if text is None:
        raise BundleError(f"{where}: no {key}")
    try:
        values = [kind(v) for v in text.split()]
    except ValueError:
        raise BundleError(f"{where}: {key} holds something that is not a number") from None
    if len(values) != count:
        raise BundleError(f"{where}: {key} has {len(values)} values, {count} expected")
    if kind is float and not all(not math.isnan(v) and (infinite or math.isfinite(v)) for v in values):
        raise BundleError(f"{where}: {key} holds " + ("NaN" if infinite else "a non-finite value (NaN or infinity)"))
    return values


def check_model_text(text: str, path: Path, num_features: int) -> int:
    """Refuse (BundleError) a LightGBM model text that any ckheur path could not evaluate safely:
    cut short, a NaN threshold, leaves not finite, children that do not form a tree, features out of
    range, trees deeper than MAX_TREE_DEPTH, leaves that can sum beyond MAX_SCORE. Returns the number
    of trees."""
    head, sep, body = text.partition("\nTree=")
    if not text.startswith("tree\n") or "\nend of trees" not in text or not text.isascii():
        raise BundleError(f"{path}: not a whole LightGBM model (cut short, or not a model file)")
    header = dict(ln.split("=", 1) for ln in head.splitlines() if "=" in ln)
    if header.get("num_class", "1") != "1" or header.get("num_tree_per_iteration", "1") != "1":
        raise BundleError(f"{path}: a multiclass model; a kernel score is one number")
    if header.get("max_feature_idx") != str(num_features - 1):
        raise BundleError(f"{path}: the model reads {header.get('max_feature_idx')!r} + 1 features, the spec lists "
                          f"{num_features}")
    trees = "Tree=" + body.split("end of trees", 1)[0] if sep else ""
    starts = [m.start() for m in re.finditer(r"^Tree=", trees, re.M)]
    # LightGBM cuts the trees apart by the header's sizes, when it has them (a compact text has none:
    # LightGBM then reads the trees in order): they must be the blocks' true lengths.
    sizes = [b - a for a, b in zip(starts, starts[1:] + [len(trees)])]
    if "tree_sizes" in header and header["tree_sizes"].split() != [str(n) for n in sizes]:
        raise BundleError(f"{path}: the header's tree_sizes do not match its {len(sizes)} trees")
    blocks = [trees[a:a + n] for a, n in zip(starts, sizes)]
    bound = 0.0  # the largest |score| the trees can sum to
    for i, raw in enumerate(blocks):
        where = f"{path} tree {i}"
        block = dict(ln.split("=", 1) for ln in raw.splitlines() if "=" in ln)
        try:
            leaves = int(block.get("num_leaves", ""))
            cats = int(block.get("num_cat", "0"))
        except ValueError:
            raise BundleError(f"{where}: num_leaves / num_cat are not integers") from None
        if not 1 <= leaves <= MAX_TREE_LEAVES or cats < 0:
            raise BundleError(f"{where}: {leaves} leaves (1 to {MAX_TREE_LEAVES} supported)")
        bound += max(abs(v) for v in _numbers(block, "leaf_value", leaves, float, where))
        if not bound <= MAX_SCORE:
            raise BundleError(f"{path}: the trees' leaves can sum to {bound:.3g} by tree {i}, beyond the "
                              f"{MAX_SCORE:.3g} a score may reach (no real model comes near; sums could overflow)")
        if leaves == 1:
            continue
        n = leaves - 1
        feature = _numbers(block, "split_feature", n, int, where)
        threshold = _numbers(block, "threshold", n, float, where, infinite=True)
        decision = _numbers(block, "decision_type", n, int, where)
        children = [_numbers(block, "left_child", n, int, where), _numbers(block, "right_child", n, int, where)]
        if not all(0 <= f < num_features for f in feature):
            raise BundleError(f"{where}: a split on a feature outside 0..{num_features - 1}")
        if cats:
            bounds = _numbers(block, "cat_boundaries", cats + 1, int, where)
            if bounds[0] != 0 or any(b > c for b, c in zip(bounds, bounds[1:])):
                raise BundleError(f"{where}: cat_boundaries are not increasing from 0")
            _numbers(block, "cat_threshold", bounds[-1], int, where)
        for d, t in zip(decision, threshold):
            if d & 1 and not (float(t).is_integer() and 0 <= t < cats):  # categorical: an index into cat_boundaries
                raise BundleError(f"{where}: a categorical split names category set {t}, the tree has {cats}")
        # Every internal node but the root and every leaf is a child exactly once; walking from the
        # root then reaches them all, without a cycle. Depth is measured on the way.
        seen_nodes, seen_leaves = [0] * n, [0] * leaves
        for c in children[0] + children[1]:
            if c >= 0:
                if not 0 < c < n:
                    raise BundleError(f"{where}: a child points to node {c} (nodes 1..{n - 1} can be children)")
                seen_nodes[c] += 1
            else:
                if not 0 <= ~c < leaves:
                    raise BundleError(f"{where}: a child points to leaf {~c} (the tree has {leaves})")
                seen_leaves[~c] += 1
        if any(v != 1 for v in seen_nodes[1:]) or any(v != 1 for v in seen_leaves):
            raise BundleError(f"{where}: its children do not form a tree (a node or leaf reached twice or never)")
        stack, depth = [(0, 1)], 0
        while stack:
            node, level = stack.pop()
            depth = max(depth, level)
            if depth > MAX_TREE_DEPTH:
                raise BundleError(f"{where}: deeper than {MAX_TREE_DEPTH} levels")
            stack += [(c, level + 1) for c in (children[0][node], children[1][node]) if c >= 0]
    return len(blocks)


def _read_booster(path: Path, num_features: int) -> Any:
    """A checked LightGBM booster from a compressed model text (a bundle's model file)."""
    from ckheur import files
    from ckheur.threads import lightgbm

    lgb = lightgbm()
    try:
        text = files.read_compressed(path, files.BUNDLE_LIMIT_BYTES).decode()
    except files.TooLargeError as e:
        raise BundleError(str(e)) from None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
        raise BundleError(f"{path}: corrupted model file ({str(e).splitlines()[0][:200]})") from None
    _checked_once("model text", text, num_features, lambda: check_model_text(text, path, num_features))
    try:
        return lgb.Booster(model_str=text)
    except lgb.basic.LightGBMError as e:
        raise BundleError(f"{path}: corrupted model file ({str(e).splitlines()[0][:200]})") from None


def _check_spec(spec: Any, where: Path) -> None:
    """Refuse a feature spec whose fields have the wrong types (a BundleError naming the field)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from ckheur.config import ArchSchema, Direction, DType
    from ckheur.families import op_schemas
    from ckheur.families.kernel_base import SAFE_TEXT
    from ckheur.learn.training import OBJECTIVES

    if not isinstance(spec, dict):
        raise BundleError(f"{where}: a JSON {type(spec).__name__}, not an object")
    lacking = [k for k in SPEC_KEYS if k not in spec]
    if lacking:
        raise BundleError(f"{where} lacks {', '.join(lacking)}")

    def need(ok: bool, field: str, what: str) -> None:
        if not ok:
            raise BundleError(f"{where}: {field} must be {what}, not {spec.get(field)!r:.80}")

    def is_params(p: Any) -> bool:  # the simulator's parameters: numbers, and per-pipeline tables of numbers
        def finite(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return isinstance(p, dict) and all(finite(v) or (isinstance(v, dict) and all(
            finite(x) or (isinstance(x, dict) and all(map(finite, x.values()))) for x in v.values()))
            for v in p.values())

    need(isinstance(spec["engine"], str), "engine", "a string")
    need(isinstance(spec["encoding_version"], int) and not isinstance(spec["encoding_version"], bool),
         "encoding_version", "an integer")
    need(isinstance(spec["feature_names"], list) and all(isinstance(f, str) for f in spec["feature_names"]),
         "feature_names", "a list of strings")
    need(isinstance(spec["categorical"], list) and set(spec["categorical"]) <= set(spec["feature_names"]),
         "categorical", "a list of feature names")
    need(isinstance(spec["analytic"], bool), "analytic", "true or false")
    need(spec["objective"] in OBJECTIVES, "objective", f"one of {', '.join(OBJECTIVES)}")
    need(isinstance(spec["op"], dict) and all(isinstance(spec["op"].get(k), str) for k in ("family", "direction",
                                                                                         "dtype")),
         "op", "an object naming family, direction and dtype")
    schemas = op_schemas()
    need(spec["op"]["family"] in schemas, "op", f"an op of a family of {', '.join(schemas)}")
    for key, choice in (("direction", Direction), ("dtype", DType)):
        allowed = [c.value for c in choice]
        need(spec["op"][key] in allowed, "op", f"an object whose {key} is one of {', '.join(allowed)}")
    need(isinstance(spec["arch"], dict) and isinstance(spec["arch"].get("name"), str)
         and SAFE_TEXT.fullmatch(spec["arch"]["name"]) is not None, "arch",
         "an object whose name is letters, digits and _ < > . - (e.g. gfx942)")
    need(spec.get("analytic_params") is None or is_params(spec["analytic_params"]), "analytic_params",
         "null or an object of finite numbers")
    prior = spec.get("prior")
    need(prior is None or (isinstance(prior, dict) and prior.get("kind") == "analytic" and isinstance(
        prior.get("scale"), (int, float)) and math.isfinite(prior["scale"]) and is_params(prior.get("params"))),
        "prior", "null or an object with kind analytic, a finite scale and the simulator's params")
    screen = spec.get("screen")
    need(screen is None or (isinstance(screen, dict) and all(isinstance(screen.get(k), int) and not isinstance(
        screen[k], bool) and screen[k] >= 1 for k in ("trees", "top"))),
        "screen", "null or an object with integers trees >= 1 and top >= 1")
    need(screen is None or prior is None, "screen", "null for a model with an analytic prior")
    for field, schema in (("arch", ArchSchema), ("op_config", schemas[spec["op"]["family"]])):
        node = spec.get(field)
        if node is None and field == "op_config":
            continue
        try:
            need(isinstance(node, dict), field, "an object")
            _schema_checked(schema, node)
        except (OmegaConfBaseException, ValueError, TypeError) as e:
            key = getattr(e, "full_key", None)
            raise BundleError(f"{where}: {field}{'.' + key if key else ''}: {str(e).splitlines()[0][:200]}") from None


def _schema_checked(schema: Any, node: dict) -> None:
    """``OmegaConf.merge(OmegaConf.structured(schema), node)`` as a check: the keys merged in order
    into one structured config, a key skipped where its value passed for this schema before in this
    process (a key's check depends on the schema and its value alone; bundles of one family share
    their solver tables and archs, ~0.1 s of each MIOpen bundle's load)."""
    from omegaconf import OmegaConf

    base = None

    def merge(key: str, value: Any) -> None:
        nonlocal base
        if base is None:
            base = OmegaConf.structured(schema)
        base.merge_with({key: value})

    for key, value in node.items():
        try:
            text = json.dumps(value, sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            text = None
        _checked_once(f"schema {schema.__module__}.{schema.__qualname__}", text, key,
                      lambda: merge(key, value))  # noqa: B023 (called at once)


def _complete(path: Path) -> dict[str, Path | None]:
    """A bundle folder's compressed files by name, once it is there with every file a bundle needs
    (a BundleError naming what is missing)."""
    if not path.is_dir():
        raise BundleError(f"model bundle {path} not found")
    found = {name: bundle_file(path, name) for name in (MODEL, TFLOPS_MODEL, ANSWERS)}  # a name twice: refused
    missing = ([] if found[MODEL] else [MODEL + SUFFIX]) + [f for f in REQUIRED if not (path / f).exists()]
    if missing:
        raise BundleError(f"model bundle {path} is incomplete: missing {', '.join(missing)}")
    return found


def load_spec(path: str | Path) -> dict:
    """A bundle folder's feature spec alone, checked as :func:`load_bundle` checks it (its models
    are not read): what decides how the bundle is loaded or named."""
    path = resolve_model_dir(path)
    _complete(path)
    return _checked_spec(path)


def _checked_spec(path: Path) -> dict:
    """A complete bundle folder's feature spec, its fields' types checked (once per content)."""
    spec = _read_json(path / "feature_spec.json")
    try:
        spec_text = json.dumps(spec, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        spec_text = None
    _checked_once("feature spec", spec_text, None, lambda: _check_spec(spec, path / "feature_spec.json"))
    return spec


def load_bundle(path: str | Path) -> Bundle:
    """Load and verify a bundle: every JSON field of the right type, the model texts whole and
    their trees sound (finite, shaped as every path can evaluate), the features this ckheur's
    engine computes. A bad bundle is a BundleError naming the file and what is wrong. The
    compressed files are read as this version writes them (.xz) or as earlier ones did (.gz)."""
    from ckheur.families.kernel_base import check_distinct

    path = resolve_model_dir(path)
    found = _complete(path)
    spec = _checked_spec(path)
    try:
        engine = spec_engine(spec)
    except ValueError as e:
        raise BundleError(f"{path}: {e}") from None
    if spec["encoding_version"] != engine.ENCODING_VERSION:
        raise BundleError(f"{path}: features encoded with version {spec['encoding_version']}, this ckheur computes "
                          f"version {engine.ENCODING_VERSION}; retrain the model")
    expected = engine.feature_names(spec["analytic"])
    if spec["feature_names"] != expected:
        diff = sorted(set(spec["feature_names"]) ^ set(expected))
        raise BundleError(f"{path}: feature names differ from this ckheur's engine ({', '.join(diff) or 'order'})")
    booster = _read_booster(found[MODEL], len(expected))
    screen = screen_of(spec)
    if screen is not None and screen[0] >= booster.num_trees():
        raise BundleError(f"{path / 'feature_spec.json'}: screen.trees={screen[0]}; the model has "
                          f"{booster.num_trees()} trees: give fewer")
    extra = found[TFLOPS_MODEL]
    tflops_booster = _read_booster(extra, len(expected)) if extra is not None else None
    if spec["objective"] != "regression_log" and tflops_booster is None:
        raise BundleError(f"{path}: objective {spec['objective']} needs {TFLOPS_MODEL + SUFFIX} for TFLOPS estimates")
    traits = _read_json(path / "kernels.json")
    if not isinstance(traits, list) or not traits or not all(isinstance(d, dict) for d in traits):
        raise BundleError(f"{path / 'kernels.json'}: must be a non-empty list of kernel objects")
    family = family_of(spec)
    kernels = []
    for i, d in enumerate(traits):  # every trait checked against the family's schema and the bundle's op
        try:
            kernels.append(family.kernels.from_traits(d, spec["op"]))
        except UserError as e:
            raise BundleError(f"{path / 'kernels.json'}: kernel {i}: {e}") from None
    check_known = getattr(family.kernels, "check_known", None)  # a family whose kernel names are a fixed table
    try:
        check_distinct(kernels)
        if check_known is not None:
            # a model for any GPU (train.across_gpus) holds the solvers of every table it was trained on
            archs = [spec["arch"]["name"], *(spec.get("trained_archs") or [] if spec.get("across_gpus") else [])]
            check_known(kernels, spec["op"]["direction"], archs if len(archs) > 1 else archs[0])
    except UserError as e:
        raise BundleError(f"{path / 'kernels.json'}: {e}") from None
    cv = _read_json(path / "cv_metrics.json") if (path / "cv_metrics.json").exists() else {}
    manifest = _read_json(path / "train_manifest.json")
    for name, obj in (("cv_metrics.json", cv), ("train_manifest.json", manifest)):
        if not isinstance(obj, dict):
            raise BundleError(f"{path / name}: a JSON {type(obj).__name__}, not an object")
    answers = None
    if found[ANSWERS] is not None:
        answers = _read_answers(found[ANSWERS], list(family.problems.FIELDS), kernels, family)
    return Bundle(path=path, booster=booster, tflops_booster=tflops_booster, spec=spec, kernels=kernels,
                  cv_metrics=cv, manifest=manifest, answers=answers)


def spec_engine(spec: Mapping[str, Any]) -> Any:
    """The feature engine a bundle's spec names, with hardware descriptors when it was trained with them."""
    from ckheur.families.engines import get_engine
    from ckheur.families.hardware import with_hardware

    engine = get_engine(spec["engine"])
    return with_hardware(engine, spec["op"]["dtype"]) if spec.get("hardware") else engine


def incompatibilities(spec: Mapping, other: Mapping) -> list[str]:
    """Why a bundle cannot be warm-started with another feature spec ([] if it can)."""
    out = []
    for key in ("engine", "encoding_version", "feature_names", "analytic", "objective", "prior", "hardware"):
        if spec.get(key) != other.get(key):
            a, b = spec.get(key), other.get(key)
            if key == "feature_names":
                a, b = f"{len(a or [])} features", f"{len(b or [])} features"
            out.append(f"{key}: bundle has {a}, this run has {b}")
    if spec.get("arch", {}).get("name") != other.get("arch", {}).get("name"):
        out.append(f"arch: bundle has {spec.get('arch', {}).get('name')}, this run has {other.get('arch', {}).get('name')}")
    if spec.get("op") != other.get("op"):
        out.append(f"op: bundle has {spec.get('op')}, this run has {other.get('op')}")
    return out
