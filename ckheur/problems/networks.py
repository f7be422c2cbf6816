"""Convolution problems from where users have them: MIOpen's command logs (``MIOPEN_ENABLE_LOGGING_CMD=1``),
ONNX models (the ``onnx`` extra) and PyTorch modules (the ``torch`` extra).

Each reader gives one problem per occurrence (a log line, a layer), so repeats count as the layer's
weight (``ckheur.problems.load_weighted_set``). Problems are in forward terms, as every convolution
problem; which direction runs a layer is kept beside it (``Layer.directions``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ckheur.families.problem_base import ProblemError

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
# MIOpen's logger prefixes "MIOpen(HIP): " (older ROCm: "MIOpen(OpenCL): ", TheRock: "MIOpen: "), then
# "Command [LogCmdConvolution] ./bin/MIOpenDriver <args>" for an immediate run and [LogCmdFindConvolution]
# for a Find call (src/convolution_api.cpp, src/driver_arguments.cpp).
_LOG_COMMAND = re.compile(r"Command \[LogCmd(Find)?Convolution\]\s+(\S*MIOpenDriver(?:\.exe)?\s+.*)$")
_ONNX_DTYPES = {"FLOAT": "fp32", "FLOAT16": "fp16", "BFLOAT16": "bf16", "FLOAT8E4M3FN": "fp8", "FLOAT8E4M3FNUZ": "fp8",
                "INT8": "int8", "DOUBLE": "fp64"}
_TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8",
                 "float8_e4m3fnuz": "fp8", "int8": "int8", "float64": "fp64"}


@dataclass(frozen=True)
class Layer:
    """One convolution of a network: its name, fields in forward terms, the directions it runs and its dtype."""

    name: str
    fields: dict
    directions: tuple
    dtype: str


# ------------------------------------------------------------------ MIOpen logs
def read_miopen_log(path: str | Path, build: Any, direction: str | None = None,
                    dtype: str | None = None) -> list:
    """Problems of the convolution commands in a MIOpen log (any other line is skipped), one per
    occurrence: a layer's immediate runs ([LogCmdConvolution]) count as its weight, or its Find calls
    when it was never run. ``build(line)`` makes a problem of a driver line; lines of another
    direction or dtype are left out, transposed ones (``-m trans``) counted and skipped."""
    from ckheur.families.driver_line import parse_driver_line

    runs: Counter = Counter()
    finds: Counter = Counter()
    first: dict[tuple, Any] = {}
    commands, transposed, others = 0, 0, Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for i, text in enumerate(f, start=1):
            m = _LOG_COMMAND.search(text.rstrip("\n"))
            if m is None:
                continue
            commands += 1
            line = m.group(2)
            if re.search(r"(?:^|\s)-m\s+trans\b", line):
                transposed += 1
                continue
            try:
                parsed = parse_driver_line(line)
                if (direction is not None and direction not in parsed.directions) or \
                        (dtype is not None and parsed.dtype != dtype):
                    others[f"{'/'.join(parsed.directions)} {parsed.dtype}"] += 1
                    continue
                p = build(line)
            except ProblemError as e:
                raise ProblemError(f"{path} line {i}: {e}") from None
            first.setdefault(p.key(), p)
            (finds if m.group(1) else runs)[p.key()] += 1
    if not commands:
        raise ProblemError(f"{path}: no MIOpen convolution command in it (lines such as 'MIOpen(HIP): Command "
                           "[LogCmdConvolution] ./bin/MIOpenDriver conv ...', written with MIOPEN_ENABLE_LOGGING_CMD=1)")
    if not first:
        seen = ", ".join(f"{n} {k}" for k, n in others.most_common()) or "none"
        raise ProblemError(f"{path}: none of its {commands} convolution commands is "
                           f"{direction or 'any direction'} {dtype or ''}".rstrip()
                           + f" (it has: {seen}{f', {transposed} transposed' if transposed else ''})")
    return [p for key, p in first.items() for _ in range(runs[key] or finds[key])]


# ------------------------------------------------------------------ networks
def conv_fields(n: int, c: int, k: int, groups: int, spatial: Sequence[int], kernel: Sequence[int],
                strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int], where: str) -> dict:
    """Problem fields (forward terms) of an N-d convolution (1D as 2D of height 1, 2D, 3D), refusing
    other ranks; ``pads`` holds one symmetric pad per spatial dimension."""
    nd = len(spatial)
    if nd not in (1, 2, 3) or not len(kernel) == len(strides) == len(pads) == len(dilations) == nd:
        raise ProblemError(f"{where}: a {nd}D convolution (kernel {list(kernel)}); 1D, 2D and 3D are supported")
    lead = [1] * (3 - nd)
    sp, ke, st, dl = (lead + list(spatial), lead + list(kernel), lead + list(strides), lead + list(dilations))
    pd = [0] * (3 - nd) + list(pads)
    return {"N": int(n), "C": int(c), "K": int(k), "G": int(groups),
            "Di": sp[0], "Hi": sp[1], "Wi": sp[2], "Z": ke[0], "Y": ke[1], "X": ke[2],
            "stride_d": st[0], "stride_h": st[1], "stride_w": st[2], "pad_d": pd[0], "pad_h": pd[1], "pad_w": pd[2],
            "dilation_d": dl[0], "dilation_h": dl[1], "dilation_w": dl[2]}


def _symmetric(begin: Sequence[int], end: Sequence[int], where: str) -> list[int]:
    if list(begin) != list(end):
        raise ProblemError(f"{where}: asymmetric pads {list(begin)} / {list(end)}: MIOpen and CK take one pad per "
                           "dimension (pad the input explicitly, or export with symmetric pads)")
    return [int(v) for v in begin]


def _same_pads(auto_pad: str, size: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int], where: str) -> list[int]:
    """Explicit pads of ONNX's auto_pad (SAME_UPPER / SAME_LOWER / VALID), when they are symmetric."""
    if auto_pad == "VALID":
        return [0] * len(size)
    total = [max((-(-s // st) - 1) * st + (k - 1) * d + 1 - s, 0) for s, k, st, d in zip(size, kernel, strides, dilations)]
    low = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in total]
    return _symmetric(low, [t - lo for t, lo in zip(total, low)], where)


_ATTR_TYPES = {"kernel_shape": "INTS", "strides": "INTS", "dilations": "INTS", "pads": "INTS", "output_padding": "INTS",
               "output_shape": "INTS", "group": "INT", "auto_pad": "STRING"}


def _attrs(node: Any, where: str) -> dict:
    """A Conv's attributes, each of the type ONNX defines for it (a float ``kernel_shape``, a string
    ``group`` are refused, naming the attribute)."""
    import onnx

    out = {}
    for a in node.attribute:
        want = _ATTR_TYPES.get(a.name)
        got = onnx.AttributeProto.AttributeType.Name(a.type)
        if want is not None and got != want:
            raise ProblemError(f"{where}: attribute {a.name} is {got}; ONNX defines it as {want}")
        out[a.name] = onnx.helper.get_attribute_value(a)
    return out


def _onnx_shapes(graph: Any) -> dict[str, tuple[int, list]]:
    """Element type and dims of every typed value of a graph (inputs, outputs, value_info, initializers);
    a symbolic dim is -1."""
    out = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = (t.elem_type, [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim])
    for init in graph.initializer:
        out[init.name] = (init.data_type, list(init.dims))
    return out


def onnx_layers(path: str | Path, batch: int | None = None, dtype: str | None = None) -> list[Layer]:
    """The Conv and ConvTranspose nodes of an ONNX model, shapes from ONNX shape inference: a symbolic
    batch dim of the inputs becomes ``batch`` (default 1), which also replaces a fixed one when given;
    dtype from the model's input tensors unless ``dtype`` overrides it. A ConvTranspose runs as the
    backward data of the convolution it transposes, so it is that convolution, direction bwd_data."""
    try:
        import onnx
    except ImportError:
        raise ProblemError("ONNX models need the onnx package: pip install 'ckheur[onnx]'") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError and others for a file that is not a model
        raise ProblemError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from None
    graph = model.graph
    # Data inputs: neither initializers nor the weights / biases of a convolution given as graph inputs.
    params = {i.name for i in graph.initializer} | {name for node in graph.node if node.op_type in ("Conv", "ConvTranspose")
                                                    for name in node.input[1:]}
    for inp in graph.input:
        dims = inp.type.tensor_type.shape.dim
        if inp.name not in params and len(dims) >= 3 and (batch is not None or not dims[0].HasField("dim_value")):
            dims[0].Clear()
            dims[0].dim_value = int(batch or 1)
    for i, node in enumerate(graph.node):  # before shape inference, which raises on such nodes
        if node.op_type in ("Conv", "ConvTranspose") and (len(node.input) < 2 or len(node.output) < 1):
            raise ProblemError(f"{path} node {node.name or i} ({node.op_type}): {len(node.input)} input(s) and "
                               f"{len(node.output)} output(s); a convolution has an input, a weight and an output")
    try:
        graph = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception as e:  # onnx raises InferenceError, ValidationError and others for a broken graph
        raise ProblemError(f"{path}: ONNX shape inference fails ({type(e).__name__}: {str(e).splitlines()[0][:200]})") \
            from None
    shapes = _onnx_shapes(graph)
    layers = []
    for i, node in enumerate(graph.node):
        if node.op_type not in ("Conv", "ConvTranspose"):
            continue
        where = f"{path} node {node.name or i} ({node.op_type})"
        x, w = (shapes.get(node.input[0]), shapes.get(node.input[1]))
        if x is None or w is None or min(x[1], default=-1) < 1 or min(w[1], default=-1) < 1:
            raise ProblemError(f"{where}: its input or weight shape is unknown after shape inference "
                               "(give the model's inputs fixed sizes other than the batch)")
        a = _attrs(node, where)
        xs, ws = x[1], w[1]
        nd = len(xs) - 2
        kernel = list(a.get("kernel_shape", ws[2:]))
        strides, dilations = list(a.get("strides", [1] * nd)), list(a.get("dilations", [1] * nd))
        groups = int(a.get("group", 1))
        auto_pad = a.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode(errors="replace") if isinstance(auto_pad, bytes) else str(auto_pad)
        if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
            raise ProblemError(f"{where}: auto_pad={auto_pad[:40]!r}; allowed: NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        net_dtype = dtype or _ONNX_DTYPES.get(onnx.TensorProto.DataType.Name(x[0]), onnx.TensorProto.DataType.Name(x[0]))
        if node.op_type == "Conv":
            pads = (_same_pads(auto_pad, xs[2:], kernel, strides, dilations, where) if auto_pad != "NOTSET"
                    else _symmetric(a.get("pads", [0] * 2 * nd)[:nd], a.get("pads", [0] * 2 * nd)[nd:], where))
            fields = conv_fields(xs[0], xs[1], ws[0], groups, xs[2:], kernel, strides, pads, dilations, where)
            layers.append(Layer(node.name or f"conv{i}", fields, ("fwd",), net_dtype))
            continue
        y = shapes.get(node.output[0])
        if y is None or min(y[1], default=-1) < 1:
            raise ProblemError(f"{where}: its output shape is unknown after shape inference")
        if auto_pad not in ("NOTSET", "VALID"):
            raise ProblemError(f"{where}: auto_pad={auto_pad} on a ConvTranspose: export it with explicit pads")
        pads = [0] * nd if auto_pad == "VALID" else _symmetric(a.get("pads", [0] * 2 * nd)[:nd],
                                                                 a.get("pads", [0] * 2 * nd)[nd:], where)
        # The transposed convolution's output is the input of the convolution it transposes (weights
        # C_in x C_out/group x k: the convolution's K is C_in, its C is C_out).
        fields = conv_fields(y[1][0], y[1][1], xs[1], groups, y[1][2:], kernel, strides, pads, dilations, where)
        layers.append(Layer(node.name or f"conv_transpose{i}", fields, ("bwd_data",), net_dtype))
    if not layers:
        raise ProblemError(f"{path}: the model has no Conv or ConvTranspose node")
    return layers


def torch_layers(module: Any, input_shape: Sequence[int], dtype: str | None = None) -> list[Layer]:
    """The convolutions a forward pass of a PyTorch module runs, recorded by forward hooks on its
    Conv1d/2d/3d and ConvTranspose1d/2d/3d modules, on the meta device: no GPU, no arithmetic (a module
    with real weights is copied to the meta device first; build it under ``torch.device("meta")`` to
    have none). ``input_shape``: the input (N, C, spatial...); dtype from the module's parameters
    unless ``dtype`` overrides it."""
    try:
        import torch
    except ImportError:
        raise ProblemError("PyTorch modules need the torch package: pip install 'ckheur[torch]'") from None
    import copy

    nn = torch.nn
    if any(p.device.type != "meta" for p in module.parameters()):
        module = copy.deepcopy(module).to("meta")  # the caller's module keeps its weights and device
    params = list(module.parameters())
    tdtype = params[0].dtype if params else torch.float32
    layers: list[Layer] = []

    def record(mod: Any, inputs: tuple, output: Any, name: str) -> None:
        x = inputs[0]
        transposed = isinstance(mod, nn.modules.conv._ConvTransposeNd)
        where = f"module {name} ({type(mod).__name__})"
        if mod.padding_mode != "zeros":
            raise ProblemError(f"{where}: padding_mode={mod.padding_mode}: only zero padding is a plain convolution")
        if mod.padding == "valid":
            pads = [0] * len(mod.kernel_size)
        elif mod.padding == "same":  # PyTorch puts an odd pad's extra element at the end, as SAME_UPPER
            pads = _same_pads("SAME_UPPER", list(x.shape[2:]), mod.kernel_size, mod.stride, mod.dilation, where)
        else:
            pads = list(mod.padding)
        net_dtype = dtype or _TORCH_DTYPES.get(str(x.dtype).removeprefix("torch."), str(x.dtype))
        if transposed:
            fields = conv_fields(output.shape[0], mod.out_channels, mod.in_channels, mod.groups, list(output.shape[2:]),
                                 mod.kernel_size, mod.stride, pads, mod.dilation, where)
            layers.append(Layer(name, fields, ("bwd_data",), net_dtype))
        else:
            fields = conv_fields(x.shape[0], mod.in_channels, mod.out_channels, mod.groups, list(x.shape[2:]),
                                 mod.kernel_size, mod.stride, pads, mod.dilation, where)
            layers.append(Layer(name, fields, ("fwd",), net_dtype))

    hooks = [m.register_forward_hook(lambda mod, i, o, name=name: record(mod, i, o, name))
             for name, m in module.named_modules() if isinstance(m, nn.modules.conv._ConvNd)]
    try:
        with torch.no_grad():
            module(torch.empty(tuple(int(v) for v in input_shape), dtype=tdtype, device="meta"))
    finally:
        for h in hooks:
            h.remove()
    if not layers:
        raise ProblemError(f"the module ran no convolution on an input of shape {list(input_shape)}")
    return layers


def load_torch_module(spec: str) -> Any:
    """The module of ``package.module:attribute`` (an nn.Module, or a callable with no arguments returning one)."""
    import importlib

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ProblemError(f"problem source module={spec!r}: write it as package.module:attribute")
    try:
        obj = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise ProblemError(f"problem source module={spec!r}: {e}") from None
    import torch

    if isinstance(obj, torch.nn.Module):
        return obj
    with torch.device("meta"):  # the factory's weights are never allocated
        return obj()


def network_layers(src: Mapping[str, Any], direction: str | None, dtype: str | None, where: str) -> list[Layer]:
    """The layers of a network source (kind onnx or torch) that run in the op's direction; the network's
    dtype (or the source's ``dtype`` override) must be the op's."""
    kind = str(src.get("kind"))
    override = None if src.get("dtype") is None else str(src["dtype"])
    batch = list(src.get("batch") or [])
    if kind == "onnx":
        layers = onnx_layers(src["path"], batch[0] if batch else None, override)
    else:
        if not src.get("module") or not src.get("input_shape"):
            raise ProblemError(f"{where}: kind=torch needs module (package.module:attribute) and input_shape (N, C, ...)")
        layers = torch_layers(load_torch_module(str(src["module"])), list(src["input_shape"]), override)
    found = sorted({layer.dtype for layer in layers})
    if dtype is not None and found != [dtype]:
        raise ProblemError(f"{where}: the network is {', '.join(found)} and the op is {dtype}: set op.dtype, or the "
                           f"source's dtype={dtype} to rank its convolutions as {dtype}")
    training = bool(src.get("training", False))
    running = [layer for layer in layers if direction is None or direction in (DIRECTIONS if training else layer.directions)]
    if not running:
        raise ProblemError(f"{where}: none of its {len(layers)} convolutions runs in {direction} in inference "
                           "(set the source's training: true for a training step's directions)")
    return running
