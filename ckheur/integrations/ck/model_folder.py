"""CK's dispatcher model folders: writing a ckheur bundle as one, and ranking with one.

CK's dispatcher (Composable Kernel, ``dispatcher/heuristics``) loads an ML heuristic from a folder
per op, dtype and arch, e.g. ``models/grouped_conv_forward_bf16_gfx950/``:

- ``model_tflops.lgbm`` (or ``.lgbm.gz``): a LightGBM text model of log1p(TFLOPS);
- ``feature_spec.json``: ``feature_names`` in matrix order, ``categorical_features``,
  ``targets``, ``log_targets`` (the predictor applies expm1 to those), training parameters;
- ``train_manifest.json``: how it was trained.

CK's predictor computes its features (``ckheur.integrations.ck.features`` reproduces them), predicts,
applies expm1 for a log target and sorts the candidates by predicted TFLOPS. A bundle trained on
CK's feature set exports as such a folder:

- objective ``regression_log``: its model is CK's model as is;
- objective ``relative``: the folder's model is the bundle's TFLOPS companion, built for this
  (``ck_companion``): trees of a problem-level model of log1p(the best TFLOPS), then the ranking
  trees, less 1. Within a problem it ranks exactly as the bundle does, and the pick's TFLOPS is
  the level model's estimate of the best (other kernels' scaled by e^(score - 1)).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ckheur.errors import UserError

CK_OP_NAMES = {"fwd": "forward", "bwd_data": "bwd_data", "bwd_weight": "bwd_weight"}
MODEL_FILE = "model_tflops.lgbm"
KERNELS_FILE = "kernels.json"
KERNELS_NOTE = ("the kernels this model was trained on; it scores any kernel it is given, so a caller must rank "
                "only these (ckheur refuses others)")
LEVEL_TREES = 200  # trees of the problem-level model of a relative bundle's CK companion


class CKFormatError(UserError):
    """A bundle cannot be written in CK's format, or a CK model folder cannot be read."""


def folder_name(op: Mapping[str, Any], arch: str) -> str:
    """CK's name of a model folder: ``grouped_conv_{forward|bwd_data|bwd_weight}_{dtype}_{arch}``."""
    return f"grouped_conv_{CK_OP_NAMES[op['direction']]}_{op['dtype']}_{arch}"


def ck_companion(table: Any, booster: Any, model: Mapping[str, Any], seed: int) -> Any:
    """For a ``relative`` model on CK's features: one booster of log1p(TFLOPS) that ranks as it does.

    Its trees: a problem-level model (trained on each problem's CK features with every kernel
    column constant, so it never splits on a kernel) predicting log1p of the problem's best
    measured TFLOPS, then ``booster``'s trees, with 1 taken off (the best kernel's relative score
    is about 1). The sum is constant within a problem plus the relative score: the same order."""
    from ckheur.integrations.ck import features as ck_conv
    from ckheur.learn.training import append_trees, lgb_params
    from ckheur.threads import lightgbm, train_threads

    lgb = lightgbm()
    first = np.r_[0, np.flatnonzero(np.diff(table.pid)) + 1]  # rows are sorted by problem
    best = np.maximum.reduceat(table.tflops, first)
    X = table.X[first].copy()
    kernel_cols = [i for i, n in enumerate(table.feature_names) if n not in ck_conv.PROBLEM_FEATURES]
    X[:, kernel_cols] = 0.0  # constant: the level model cannot split on a kernel
    params = {**lgb_params(model, "regression_log", seed), "min_data_in_leaf": max(2, min(10, len(first) // 20)),
              "bagging_fraction": 1.0, "bagging_freq": 0}
    params["num_threads"] = train_threads(int(model.get("threads", 0)), len(first), X.shape[1])
    level = lgb.train(params, lgb.Dataset(X, np.log1p(best), free_raw_data=False), num_boost_round=LEVEL_TREES)
    shifted = _shift(booster, -1.0)
    return append_trees(level, shifted)


def _shift(booster: Any, by: float) -> Any:
    """The booster with ``by`` added to every leaf of its first tree (so to every prediction)."""
    import re

    from ckheur.threads import lightgbm

    text = booster.model_to_string()
    head, rest = text.split("\nTree=0\n", 1)
    first, others = rest.split("\nTree=1\n", 1) if "\nTree=1\n" in rest else (rest, None)

    def add(m: re.Match) -> str:
        return m[1] + " ".join(repr(float(v) + by) for v in m[2].split())

    first = re.sub(r"^(leaf_value=)(.*)$", add, first, count=1, flags=re.M)
    head = re.sub(r"^tree_sizes=.*\n", "", head, flags=re.M)
    return lightgbm().Booster(model_str=head + "\nTree=0\n" + first + ("" if others is None else "\nTree=1\n" + others))


def exportable(bundle: Any) -> Any:
    """The booster a bundle's CK folder holds, or a CKFormatError saying what to train instead."""
    spec = bundle.spec
    hint = ("train one with features.engine=ck and model=regression_log or model=relative (model.prior=none, "
            "features.analytic=false)")
    if spec.get("engine") != "ck_grouped_conv":
        raise CKFormatError(f"{bundle.path}: trained on ckheur's {spec.get('engine')} features; CK's predictor computes "
                            f"its own features, so it cannot run this model: {hint}")
    if spec.get("prior") is not None or spec.get("analytic"):
        raise CKFormatError(f"{bundle.path}: uses the simulator (a prior or analytic features), which CK's predictor "
                            f"does not have: {hint}")
    if spec.get("screen"):
        raise CKFormatError(f"{bundle.path}: has a screen (its first {spec['screen']['trees']} trees rank every kernel, "
                            "all of them only the best); CK's predictor scores every tree for every kernel and would "
                            f"rank otherwise: remove it first (python tools/set_screen.py {bundle.path} --off)")
    if spec["objective"] == "regression_log":
        return bundle.booster
    if spec["objective"] == "relative" and spec.get("tflops_model") == "ck_companion" and \
            bundle.tflops_booster is not None:
        return bundle.tflops_booster
    raise CKFormatError(f"{bundle.path}: objective {spec['objective']} has no log1p(TFLOPS) model CK's predictor can "
                        f"rank with: {hint}")


def export_ck(model_dir: str | Path, output: str | Path, overwrite: bool = False) -> dict:
    """Write a bundle as CK's dispatcher model folder in ``output``; what was written."""
    from ckheur.files import make_folder, write_file
    from ckheur.learn.bundle import load_bundle, model_file
    from ckheur.version import __version__

    b = load_bundle(model_dir)
    booster = exportable(b)
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise CKFormatError(f"export.output={out} is a file; give a folder")
    ours = {MODEL_FILE, "feature_spec.json", "train_manifest.json", KERNELS_FILE}
    present = {p.name for p in out.iterdir()} if out.is_dir() else set()
    bundle_sha = hashlib.sha256(model_file(b.path).read_bytes()).hexdigest()  # the file as stored (.xz or .gz)
    if present and not overwrite:
        try:
            earlier = json.loads((out / "feature_spec.json").read_text()).get("ckheur", {}).get("bundle_sha256")
        except (OSError, ValueError, AttributeError, RecursionError):
            earlier = None
        if present - ours or earlier != bundle_sha:
            raise CKFormatError(f"export.output={out} holds {', '.join(sorted(present)[:5])}, not an earlier CK export "
                                f"of this bundle; choose a new folder or set export.overwrite=true")
    make_folder(out, "export.output")
    spec, op = b.spec, b.spec["op"]
    text = named_features(booster.model_to_string(), list(spec["feature_names"]))
    kernels = [k.name for k in b.kernels]
    ck_spec = {
        "op_type": "grouped_conv", "dtype": op["dtype"], "arch": spec["arch"]["name"],
        "feature_names": list(spec["feature_names"]), "categorical_features": list(spec["categorical"]),
        "targets": ["tflops"], "log_targets": ["tflops"],
        "params": {**_params(text), "objective": "regression"},
        "ckheur": {"bundle": b.path.name, "bundle_sha256": bundle_sha, "objective": spec["objective"],
                   "version": __version__, "kernels": kernels, "kernels_note": KERNELS_NOTE,
                   "direction": op["direction"], "data_kind": b.manifest.get("data_kind", "unknown"),
                   "model": "the bundle's model" if spec["objective"] == "regression_log" else
                   "problem-level log1p(best TFLOPS) trees + the bundle's relative trees - 1 (same ranking)"},
    }
    trees = booster.num_trees()
    manifest = {"warm_start_from": None, "prev_n_estimators": 0, "new_n_estimators": trees,
                "total_n_estimators": trees, "data_rows": b.manifest.get("rows"), "valid_rows": b.manifest.get("rows"),
                "unique_shapes": b.manifest.get("problems"), "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "ckheur_bundle": b.path.name, "ckheur_bundle_sha256": bundle_sha, "kernels": kernels,
                "datasets": [_no_path(d) for d in b.manifest.get("datasets", [])]}
    write_file(out / MODEL_FILE, text)
    write_file(out / "feature_spec.json", json.dumps(ck_spec, indent=2) + "\n")
    write_file(out / "train_manifest.json", json.dumps(manifest, indent=2) + "\n")
    write_file(out / KERNELS_FILE, json.dumps({"about": KERNELS_NOTE, "kernels": kernels}, indent=1) + "\n")
    return {"output": str(out), "trees": trees, "features": len(spec["feature_names"]), "kernels": len(b.kernels)}


def named_features(model_text: str, names: Sequence[str]) -> str:
    """A LightGBM model text with its ``feature_names=`` line (and its feature importances) naming the
    features (LightGBM writes Column_0.. when trained on a bare matrix); predictions read columns by
    position, unchanged."""
    import re

    line = re.search(r"^feature_names=(.*)$", model_text, flags=re.M)
    if line is None or len(line[1].split()) != len(names) or any(not n or " " in n for n in names):
        raise CKFormatError(f"the model's feature_names line does not hold {len(names)} features")
    text = model_text[:line.start(1)] + " ".join(names) + model_text[line.end(1):]
    # The feature_importances section names features as the feature_names line did.
    return re.sub(r"^Column_(\d+)=", lambda m: f"{names[int(m[1])]}=", text, flags=re.M)


def _no_path(dataset: Any) -> Any:
    """A manifest's dataset record without the folders of the machine that trained: its file name and sha256."""
    if not isinstance(dataset, Mapping):
        return dataset
    out = dict(dataset)
    if "path" in out:
        out["path"] = Path(str(out["path"])).name
    return out


def _params(model_text: str) -> dict:
    """The training parameters a LightGBM model text records (its ``parameters:`` section)."""
    params = {}
    if "\nparameters:\n" in model_text:
        for line in model_text.split("\nparameters:\n", 1)[1].split("\nend of parameters", 1)[0].splitlines():
            if line.startswith("[") and ": " in line:
                k, v = line[1:].rstrip("]").split(": ", 1)
                params[k] = v
    return {k: params[k] for k in ("num_leaves", "learning_rate", "min_data_in_leaf", "feature_fraction",
                                   "bagging_fraction", "lambda_l2", "seed") if k in params}


@dataclass
class CKModel:
    """A CK dispatcher model folder, ranking candidates the way CK's predictor does: CK's features
    (by the names the folder lists, in its order), LightGBM's prediction, expm1 for a log target,
    sorted by predicted TFLOPS (ties in candidate order)."""

    path: Path
    booster: Any
    columns: list  # indices of the folder's features among ckheur.integrations.ck.features's
    log_target: bool
    arch: dict
    name: str
    kernels: frozenset | None = None  # the folder's kernels.json: the kernels it was trained on (None: not listed)

    @classmethod
    def load(cls, folder: str | Path, arch: Mapping[str, Any]) -> "CKModel":
        """Read a folder (``model_tflops.lgbm`` or ``.lgbm.gz``, never written back); ``arch`` when the
        folder does not name one."""
        import zlib

        from ckheur.integrations.ck import features as ck_conv
        from ckheur.files import TooLargeError, read_compressed
        from ckheur.learn.bundle import check_model_text
        from ckheur.threads import lightgbm

        folder = Path(folder)
        try:
            spec = json.loads((folder / "feature_spec.json").read_text())
            path = folder / MODEL_FILE
            text = path.read_text() if path.exists() else read_compressed(folder / f"{MODEL_FILE}.gz").decode()
        except FileNotFoundError as e:
            raise CKFormatError(f"{folder}: not a CK model folder ({Path(e.filename).name} missing)") from None
        except TooLargeError:
            raise
        except (OSError, ValueError, EOFError, UnicodeDecodeError, RecursionError, zlib.error) as e:
            raise CKFormatError(f"{folder}: cannot be read ({e})") from None
        names = spec.get("feature_names") if isinstance(spec, dict) else None
        known = ck_conv.feature_names()
        if not isinstance(names, list) or not names or any(n not in known for n in names):
            unknown = [n for n in names or [] if n not in known][:5] if isinstance(names, list) else names
            raise CKFormatError(f"{folder}/feature_spec.json: feature_names must be CK grouped-conv features "
                                f"(unknown: {unknown})")
        if spec.get("op_type", "grouped_conv") != "grouped_conv":
            raise CKFormatError(f"{folder}: op_type {spec.get('op_type')!r}, not grouped_conv")
        check_model_text(text, folder / MODEL_FILE, len(names))
        booster = lightgbm().Booster(model_str=text)
        kernels = None
        if (folder / KERNELS_FILE).exists():
            try:
                listed = json.loads((folder / KERNELS_FILE).read_text())["kernels"]
                kernels = frozenset(str(k) for k in listed)
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise CKFormatError(f"{folder / KERNELS_FILE}: must hold {{\"kernels\": [names]}} ({e})") from None
        # CK's predictor builds its feature engine with the hardware of the arch its model is for.
        return cls(folder, booster, [known.index(n) for n in names], "tflops" in (spec.get("log_targets") or []),
                   {"name": str(spec.get("arch") or arch["name"])}, folder.name, kernels)

    def rank(self, problem: Any, kernels: Sequence[Any]) -> list[tuple[str, float]]:
        """(kernel name, predicted TFLOPS) best first, as CK's predictor orders them."""
        from ckheur.integrations.ck import features as ck_conv

        unknown = [k.name for k in kernels if self.kernels is not None and k.name not in self.kernels]
        if unknown:
            raise CKFormatError(f"{self.path}: {len(unknown)} candidate kernel(s) the model was not trained on "
                                f"(e.g. {unknown[0]}); its {KERNELS_FILE} lists the {len(self.kernels or ())} it knows")
        X = ck_conv.features(ck_conv.problem_arrays([problem], "fwd"), ck_conv.kernel_arrays(kernels), self.arch,
                             "fwd")[:, self.columns]
        pred = self.booster.predict(X)
        if self.log_target:
            pred = np.expm1(pred)
        order = sorted(range(len(kernels)), key=lambda i: -pred[i])  # Python's stable sort, as CK's
        return [(kernels[i].name, float(pred[i])) for i in order]


class CKSelector:
    """A CK model folder as a selector over a bundle's kernel pool, for evaluation beside it
    (``scores`` as ``ckheur.selection.selector.Selector.scores``: candidates, scores, predicted TFLOPS)."""

    def __init__(self, ck: CKModel, selector: Any) -> None:
        self.ck, self.selector = ck, selector
        self.family = selector.family
        self.label = f"CK model {ck.path}"

    def scores(self, problem: Any) -> tuple[list, np.ndarray, np.ndarray]:
        """(the bundle's candidates, CK's predicted TFLOPS as scores, the same as TFLOPS)."""
        ks = self.selector.scores(problem)[0]  # the bundle's candidates for this problem
        ranked = dict(self.ck.rank(problem, ks))
        tf = np.array([ranked[k.name] for k in ks])
        return ks, tf, tf


def export_ck_folder(model_dir: str | Path, output: str | Path, arch: Mapping[str, Any], *, overwrite: bool = False,
                     check_problems: int = 1000, seed: int = 0, log: Callable[[str], None] = print) -> dict:
    """Write the bundle as CK's dispatcher model folder, then rank ``check_problems`` seeded random
    problems with it the way CK's predictor does; an ExportError unless every ranking equals the
    Python selector's."""
    from ckheur.c_export.checked import problems_to_check
    from ckheur.learn.forest import ExportError
    from ckheur.selection.selector import Selector

    out = Path(output)
    res = export_ck(model_dir, out, overwrite=overwrite)
    log(f"export: {model_dir} -> {out}/ in CK's dispatcher format ({res['trees']} trees, {res['features']} CK "
        f"features, {res['kernels']} kernels): model_tflops.lgbm, feature_spec.json, train_manifest.json, kernels.json")
    selector = Selector.load(model_dir)
    ck = CKModel.load(out, arch)
    same = ranked = 0
    for p in problems_to_check(selector, check_problems, seed):
        try:
            ks = selector._ranking(p)[0]
        except ValueError:
            continue
        ranked += 1
        same += [n for n, _ in ck.rank(p, ks)] == [k.name for k in ks]
    log(f"export: ranked as CK's predictor ranks (its features, LightGBM, expm1, sorted): the same order as "
        f"the Python selector on {same}/{ranked} seeded random problems")
    if same != ranked:
        raise ExportError(f"the CK folder ranks {ranked - same} of {ranked} problems differently from the bundle")
    return {**res, "check": {"problems": ranked, "same_ranking": same}}
