"""MIOpen's TunaNet: the learned solver picker MIOpen falls back on, read from MIOpen's own files.

A ROCm install keeps, beside the system find-db, ``<arch>.tn.model`` (a Keras network converted
to frugally-deep JSON: Dense layers, ReLU and additive skip connections, weights as base64
float32) and ``<arch>_metadata.tn.model`` (which problem fields are inputs, in which order,
their mean and standard deviation, the integer codes of data types and directions, and which
output is which solver). This module runs the network as a numpy forward pass, checks itself
against the reference input and output each model file embeds, and encodes problems as
MIOpen's ``ai_heuristics.cpp`` does for gfx90a and gfx942 (and for gfx908, whose ``Gfx908Model``
reads 24 inputs named in 3D form, see ``FEATURE_FIELDS_3D``; its file embeds no reference, so
loading it checks only that the forward pass is finite and of the metadata's width):

- inputs in forward terms (input channels, H, W, output channels, H, W, filter, pads, strides,
  dilations, batch, then the codes, then groups), z-scored with the metadata's ``overall``
  statistics;
- MIOpen drops the leading outputs that are not solvers (``num_outputs - num_solvers``), sorts
  the solvers by score and uses the first that applies;
- its domain: 2D, NCHW, equal H and W strides, equal dilations, no bias, FP32/FP16/BF16.

The package ships none of these files: give the folder (or the model file) they are in.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ckheur.errors import UserError
from ckheur.integrations.miopen.find_db import DTYPE_NAMES, LETTERS  # MIOpen's names of data types and directions
# A metadata feature name -> the ckheur problem field (forward terms) it is.
FEATURE_FIELDS = {"Inp_0": "C", "Inp_2": "Hi", "Inp_3": "Wi", "Out_0": "K", "Out_2": "Ho", "Out_3": "Wo",
                  "Fil_1": "Y", "Fil_2": "X", "Pad_1": "pad_h", "Pad_2": "pad_w", "Str_1": "stride_h",
                  "Str_2": "stride_w", "Dil_1": "dilation_h", "Dil_2": "dilation_w", "BatchSize": "N",
                  "GroupSize": "G"}
CODED = ("Precision", "Direction")
# gfx908's TunaNet (MIOpen's Gfx908Model) names 24 inputs in 3D form; the 2D fields it reads, in
# forward terms like the others (its ToFeatures swaps MIOpen's in/out tensors back for B and W).
FEATURE_FIELDS_3D = {"InChannels": "C", "InHeight": "Hi", "InWidth": "Wi", "FilterDim1": "Y", "FilterDim2": "X",
                     "OutChannels": "K", "OutHeight": "Ho", "OutWidth": "Wo", "BatchSize": "N", "Padding1": "pad_h",
                     "Padding2": "pad_w", "Stride1": "stride_h", "Stride2": "stride_w", "Dilation1": "dilation_h",
                     "Dilation2": "dilation_w", "GroupSize": "G"}
# Its inputs that are constant on 2D problems: the depths are 1, and Gfx908Model feeds pad and
# stride depth as 1 because its training data had them set to 1 (a quirk its comments record).
CONSTANT_FEATURES = {"InDepth": 1.0, "FilterDim0": 1.0, "OutDepth": 1.0, "Padding0": 1.0, "Stride0": 1.0}
LAYOUT_NAME = "NCHW"  # the only layout in TunaNet's domain; gfx908's metadata codes it


class TunaNetError(UserError):
    """A TunaNet file cannot be read or used; the message says why."""


@dataclass(frozen=True)
class TunaNet:
    """One GPU's TunaNet: the network, how problems are encoded, and which output is which solver."""

    arch: str
    path: Path
    features: tuple  # metadata feature names, the network's input order
    mean: np.ndarray
    std: np.ndarray
    codes: dict  # "Precision" / "Direction" -> {MIOpen name: code}
    solvers: tuple  # solver name per (kept) output
    offset: int  # leading outputs that are not solvers
    layers: tuple  # (kind, name, inputs, weights, bias) in evaluation order
    output: str
    reference: tuple  # (input, output) the model file embeds

    def forward(self, x: np.ndarray) -> np.ndarray:
        """The network's raw outputs for encoded inputs [n, features] (float32)."""
        values: dict[str, np.ndarray] = {}
        for kind, name, inputs, w, b in self.layers:
            if kind == "input":
                values[name] = np.asarray(x, dtype=np.float32)
            elif kind == "dense":
                values[name] = values[inputs[0]] @ w + b
            elif kind == "relu":
                values[name] = np.maximum(values[inputs[0]], np.float32(0))
            else:  # add
                values[name] = sum(values[i] for i in inputs[1:]) + values[inputs[0]]
        return values[self.output]

    def check(self) -> float:
        """The largest difference between this forward pass and the output the model file embeds."""
        x, y = self.reference
        if y is None:  # the file embeds no reference output (gfx908's): nothing to compare with
            return float("nan")
        return float(np.max(np.abs(self.forward(x[None, :])[0] - y)))

    def encode(self, problems: Mapping[str, np.ndarray], direction: str, dtype: str) -> np.ndarray:
        """MIOpen's inputs [n, features] for problems given as columns of forward-term fields
        (C, Hi, Wi, K, Ho, Wo, Y, X, pads, strides, dilations, N, G) of one direction and dtype."""
        n = len(next(iter(problems.values())))
        cols = []
        for f in self.features:
            field_name = FEATURE_FIELDS.get(f) or FEATURE_FIELDS_3D.get(f)
            if field_name:
                cols.append(np.asarray(problems[field_name], dtype=np.float32))
            elif f in CONSTANT_FEATURES:
                cols.append(np.full(n, CONSTANT_FEATURES[f], dtype=np.float32))
            elif f == "Layout":
                cols.append(np.full(n, self.codes[f][LAYOUT_NAME], dtype=np.float32))
            else:
                name = DTYPE_NAMES[dtype] if f == "Precision" else LETTERS[direction]
                cols.append(np.full(n, self.codes[f][name], dtype=np.float32))
        return ((np.stack(cols, axis=1) - self.mean) / self.std).astype(np.float32)

    def scores(self, problems: Mapping[str, np.ndarray], direction: str, dtype: str) -> np.ndarray:
        """Each solver's score [n, solvers] (higher: MIOpen tries it earlier)."""
        return self.forward(self.encode(problems, direction, dtype))[:, self.offset:]


def in_domain(p: Any, dtype: str, arch: str = "") -> bool:
    """Whether MIOpen would ask TunaNet about problem ``p`` (``IsProblemSupported``, less its
    check that some solver TunaNet knows applies, which needs the solvers' own rules); gfx908's
    model also asks for one group, square filters, equal pads and no dilation."""
    if arch == "gfx908" and not (p.G == 1 and p.Y == p.X and p.pad_h == p.pad_w and p.dilation_h == 1
                                 and p.dilation_w == 1):
        return False
    return (p.ndim == 2 and getattr(p, "layout", "NCHW") == "NCHW" and p.stride_h == p.stride_w
            and p.dilation_h == p.dilation_w and getattr(p, "bias", 0) == 0 and dtype in DTYPE_NAMES)


def _floats(chunks: Any, what: str) -> np.ndarray:
    try:
        return np.frombuffer(b"".join(base64.b64decode(c) for c in chunks), dtype="<f4").copy()
    except (TypeError, ValueError) as e:
        raise TunaNetError(f"{what}: not base64 float32 chunks ({e})") from None


def _read_json(path: Path) -> dict:
    from ckheur.files import check_regular

    try:
        with open(check_regular(path, "TunaNet file")) as f:
            return json.load(f)
    except FileNotFoundError:
        raise TunaNetError(f"{path} not found: MIOpen keeps <arch>.tn.model and <arch>_metadata.tn.model beside "
                           "its system find-db") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TunaNetError(f"{path}: not a TunaNet JSON file ({str(e)[:200]})") from None


def load_tunanet(path: str | Path, arch: str) -> TunaNet:
    """TunaNet for ``arch`` from a folder holding ``<arch>.tn.model`` and its metadata (or from
    the model file, with the metadata beside it); checked against its embedded reference output."""
    path = Path(path)
    model_file = path / f"{arch}.tn.model" if path.is_dir() else path
    meta_file = model_file.with_name(model_file.name.replace(".tn.model", "_metadata.tn.model"))
    model, meta = _read_json(model_file), _read_json(meta_file)
    try:
        features = tuple(meta["conv_params_used_as_features"])
        stats = meta["stats"]["overall"]["features"]
        mean = np.array([stats["mean"][f] for f in features], dtype=np.float32)
        std = np.array([stats["std"][f] for f in features], dtype=np.float32)
        codes = {c: dict(meta["encodings"][c]) for c in (*CODED, "Layout") if c in meta["encodings"]}
        by_code = {int(v): k for k, v in meta["encodings"]["solver"].items()}
        solvers = tuple(by_code[i] for i in range(int(meta["num_solvers"])))
        offset = int(meta["num_outputs"]) - int(meta["num_solvers"])
        gpu = meta.get("gpu", {}).get("arch", arch)
        gpu = gpu[0] if isinstance(gpu, list) else gpu
        config = model["architecture"]["config"]
        params = model["trainable_params"]
        reference = _reference(model, model_file)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise TunaNetError(f"{model_file} / {meta_file}: not MIOpen's TunaNet model and metadata "
                           f"(missing or malformed {e})") from None
    if gpu != arch:
        raise TunaNetError(f"{meta_file} is TunaNet for {gpu}, not {arch}")
    usable = np.isfinite(mean) & np.isfinite(std) & (std != 0)  # the inputs are (x - mean) / std
    if not usable.all():
        f = features[int(np.flatnonzero(~usable)[0])]
        raise TunaNetError(f"{meta_file}: the statistics of input {f} (mean {stats['mean'][f]!r:.40}, std "
                           f"{stats['std'][f]!r:.40}) must be finite numbers, the std not zero")
    known = {*FEATURE_FIELDS, *CODED, *FEATURE_FIELDS_3D, *CONSTANT_FEATURES, *codes}
    unknown = [f for f in features if f not in known]
    if unknown:
        raise TunaNetError(f"{meta_file}: inputs {unknown} are not encoded here (known: "
                           f"{', '.join(sorted(known))}); this reader covers the gfx908, gfx90a and gfx942 models")
    try:  # the layer graph is the file's too: a malformed one is an error naming the file
        layers = []
        width = {}
        for layer in config["layers"]:
            kind, name = layer["class_name"], layer["name"]
            inputs = [n[0] for node in layer["inbound_nodes"] for n in node]
            if kind == "InputLayer":
                layers.append(("input", name, inputs, None, None))
                width[name] = len(features)
            elif kind == "Dense":
                c = layer["config"]
                if c.get("activation") not in ("linear", None) or not c.get("use_bias", True):
                    raise TunaNetError(f"{model_file}: Dense layer {name} with activation {c.get('activation')!r}, "
                                       f"use_bias {c.get('use_bias')}: not supported")
                w = _floats(params[name]["weights"], f"{model_file} {name}")
                b = _floats(params[name]["bias"], f"{model_file} {name}")
                if w.size != width[inputs[0]] * b.size:
                    raise TunaNetError(f"{model_file}: layer {name} has {w.size} weights for {width[inputs[0]]} inputs "
                                       f"and {b.size} units")
                layers.append(("dense", name, inputs, w.reshape(width[inputs[0]], b.size), b))
                width[name] = b.size
            elif kind == "ReLU":
                c = layer["config"]
                if c.get("max_value") is not None or float(c.get("negative_slope", 0)) != 0 \
                        or float(c.get("threshold", 0)) != 0:
                    raise TunaNetError(f"{model_file}: ReLU {name} with a cap, slope or threshold: not supported")
                layers.append(("relu", name, inputs, None, None))
                width[name] = width[inputs[0]]
            elif kind == "Add":
                layers.append(("add", name, inputs, None, None))
                width[name] = width[inputs[0]]
            else:
                raise TunaNetError(f"{model_file}: layer {name} of kind {kind}: this reader runs Dense, ReLU and Add")
        output = config["output_layers"][0][0]
    except TunaNetError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise TunaNetError(f"{model_file}: not a layer graph this reader can run (missing or malformed "
                           f"{str(e)[:200]})") from None
    if reference is None:  # gfx908's file embeds no test: the metadata's mean problem (all zeros) stands in
        reference = (np.zeros(len(features), dtype=np.float32), None)
    if width.get(output) != int(meta["num_outputs"]) or len(features) != reference[0].size:
        raise TunaNetError(f"{model_file}: {width.get(output)} outputs and {reference[0].size} reference inputs "
                           f"for a metadata of {meta['num_outputs']} outputs and {len(features)} inputs")
    net = TunaNet(arch, model_file, features, mean, std, codes, solvers, offset, tuple(layers), output, reference)
    try:
        if reference[1] is None:
            out = net.forward(reference[0][None, :])
            if out.shape != (1, int(meta["num_outputs"])) or not np.all(np.isfinite(out)):
                raise TunaNetError(f"{model_file}: no reference output, and the forward pass of the mean problem "
                                   f"gives {out.shape} values, finite: {bool(np.all(np.isfinite(out)))}")
            return net
        err = net.check()
    except TunaNetError:
        raise
    except (KeyError, ValueError) as e:  # a layer read before it is computed, or widths that do not add up
        raise TunaNetError(f"{model_file}: its layer graph cannot be evaluated ({str(e)[:200]})") from None
    if not err <= 1e-4 * max(1.0, float(np.max(np.abs(reference[1])))):
        raise TunaNetError(f"{model_file}: the forward pass differs from the file's reference output by {err:.3g}")
    return net


def _reference(model: dict, model_file: Path) -> tuple | None:
    """The (input, output) the model file embeds; None when it embeds none (gfx908's)."""
    if not model.get("tests"):
        return None
    test = model["tests"][0]
    return (_floats(test["inputs"][0]["values"], f"{model_file} tests"),
            _floats(test["outputs"][0]["values"], f"{model_file} tests"))


class TunaNetRanker:
    """TunaNet as an evaluation baseline: ranks the op's solver table the way MIOpen would try it
    (solvers TunaNet has no output for come last); problems outside its domain are not ranked."""

    def __init__(self, net: TunaNet, kernels: list, direction: str, dtype: str) -> None:
        from ckheur.families import get_family

        self.net, self.direction, self.dtype = net, direction, dtype
        self.family = get_family("miopen")
        self.kernels = list(kernels)
        index = {s: i for i, s in enumerate(net.solvers)}
        self._columns = np.array([index.get(k.name, -1) for k in self.kernels])
        self.label = f"TunaNet ({net.path.name})"

    def score_matrix(self, problems: list) -> np.ndarray:
        """TunaNet's score of each solver of the table [problems, kernels]; solvers it has no output
        for score -inf: never ranked (MIOpen never tries them on its advice; a problem whose listed
        solvers it does not know is a miss in the listed protocol, ``metrics.censored_choice_report``)."""
        cols = {f: np.array([getattr(p, f) for p in problems]) for f in FEATURE_FIELDS.values()}
        raw = self.net.scores(cols, self.direction, self.dtype).astype(np.float64)
        return np.where(self._columns >= 0, raw[:, np.maximum(self._columns, 0)], -np.inf)

    def scores(self, p: Any) -> tuple[list, np.ndarray, np.ndarray]:
        """(the solver table, TunaNet's scores, NaN predicted TFLOPS); ValueError outside its domain."""
        if not in_domain(p, self.dtype, self.net.arch):
            raise ValueError("outside TunaNet's domain (2D NCHW, equal strides and dilations, no bias)")
        return self.kernels, self.score_matrix([p])[0], np.full(len(self.kernels), np.nan)


def first_pick_rates(net: TunaNet, fdb: Any, permutation: np.ndarray | None = None) -> dict:
    """How TunaNet's picks fare on a find-db's problems in its domain, per (direction, dtype):
    ``first_listed``, how often its first pick is a solver the file lists; ``chance_listed``, the
    same for a pick drawn uniformly from its solvers; ``listed_top1``, how often its first listed
    pick is the file's fastest (MIOpen's protocol: skip what does not apply). ``permutation``
    shuffles the encoded inputs (a check that the encoding's order matters)."""
    from ckheur.families.miopen.problems import problem_from_dict

    fields = sorted({*FEATURE_FIELDS.values(), *FEATURE_FIELDS_3D.values()})
    listed = fdb.entries.groupby("problem", sort=False)["solver"].apply(list)  # fastest first
    out = {}
    for (direction, dtype), probs in fdb.problems.groupby(["direction", "dtype"]):
        rows = [(i, problem_from_dict({k: v for k, v in r.items() if k not in ("direction", "dtype")}))
                for i, r in zip(probs.index, probs.to_dict("records"))]
        inside = [(i, p) for i, p in rows if in_domain(p, dtype, net.arch) and i in listed.index]
        if not inside:
            continue
        x = net.encode({f: np.array([getattr(p, f) for _, p in inside]) for f in fields}, direction, dtype)
        if permutation is not None:
            x = x[:, permutation]
        order = np.argsort(-net.forward(x)[:, net.offset:], axis=1, kind="stable")
        first = top1 = ranked = chance = 0.0
        for (i, _), o in zip(inside, order):
            names = listed[i]
            first += net.solvers[o[0]] in names
            chance += sum(s in names for s in net.solvers) / len(net.solvers)
            known = [net.solvers[j] for j in o if net.solvers[j] in names]
            if known:
                ranked += 1
                top1 += known[0] == names[0]
        n = len(inside)
        out[(direction, dtype)] = {"problems": n, "first_listed": first / n, "chance_listed": chance / n,
                                   "ranked": int(ranked), "listed_top1": top1 / ranked if ranked else float("nan")}
    return out
