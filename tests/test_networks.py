"""Problems from where users have them: MIOpen command logs, ONNX models (ResNet-50 and MobileNetV3-Small
built from their papers by tools/net_onnx.py) and PyTorch modules (only where torch is installed)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ckheur.config import plain
from ckheur.families import get_family
from ckheur.problems import ProblemError, load_problem_set, load_weighted_set

onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the test extra installs it)")

DATA = Path(__file__).resolve().parent / "data"
RESNET50, MOBILENET = DATA / "resnet50.onnx", DATA / "mobilenetv3_small.onnx"


def _described(path, batch=None):
    from ckheur.families.grouped_conv.problems import problem_from_dict
    from ckheur.problems.networks import onnx_layers

    return [problem_from_dict(layer.fields).describe() for layer in onnx_layers(path, batch)]


def test_resnet50_has_its_53_convolutions_with_the_papers_shapes():
    convs = _described(RESNET50, batch=8)
    assert len(convs) == 53
    assert convs[0] == "N8 C3 K64 G1 224x224 k7x7 s2 p3"  # conv1: 7x7, 64, stride 2 on 224x224
    kinds = Counter(c.split()[5] for c in convs)
    assert kinds == {"k1x1": 36, "k3x3": 16, "k7x7": 1}  # 16 bottlenecks of 1x1-3x3-1x1, 4 projections
    # The four projection shortcuts (1x1 from the block's input to 4x the width, stride 2 after conv2_x); conv2_x's
    # one has the shape of its three bottlenecks' last 1x1.
    assert convs.count("N8 C64 K256 G1 56x56 k1x1 s1 p0") == 3 + 1
    for shortcut in ("N8 C256 K512 G1 56x56 k1x1 s2 p0", "N8 C512 K1024 G1 28x28 k1x1 s2 p0",
                     "N8 C1024 K2048 G1 14x14 k1x1 s2 p0"):
        assert convs.count(shortcut) == 1
    assert convs[-1] == "N8 C512 K2048 G1 7x7 k1x1 s1 p0"  # conv5_3's last 1x1, on 7x7
    assert convs.count("N8 C512 K512 G1 7x7 k3x3 s1 p1") == 2  # conv5_2 and conv5_3's 3x3
    assert _described(RESNET50)[0].startswith("N1 ")  # the symbolic batch defaults to 1


def test_mobilenetv3_small_has_its_54_convolutions_with_the_papers_shapes():
    convs = _described(MOBILENET, batch=1)
    assert len(convs) == 54  # stem, 11 bnecks (expand, depthwise, SE pair where marked, project), last, 2 head
    assert convs[0] == "N1 C3 K16 G1 224x224 k3x3 s2 p1"
    assert convs[1] == "N1 C16 K16 G16 112x112 k3x3 s2 p1"  # first bneck: depthwise, no expansion
    depthwise = [c for c in convs if c.split()[1][1:] == c.split()[3][1:] and c.split()[3] != "G1"]
    assert len(depthwise) == 11
    assert sum(" k5x5 " in c for c in depthwise) == 8
    assert "N1 C576 K576 G576 7x7 k5x5 s1 p2" in depthwise
    assert sum(" 1x1 k1x1" in c for c in convs) == 2 * 9 + 2  # 9 SE blocks' two convs, the two head convs
    assert convs[-3:] == ["N1 C96 K576 G1 7x7 k1x1 s1 p0", "N1 C576 K1024 G1 1x1 k1x1 s1 p0",
                          "N1 C1024 K1000 G1 1x1 k1x1 s1 p0"]


def test_onnx_source_weights_repeated_layers_and_takes_batches(compose):
    cfg = compose(["op=miopen/fwd", "op.dtype=fp32", "arch=gfx942", "problems=onnx",
                   f"problems.sources.0.path={RESNET50}", "problems.sources.0.batch=[4,16]"])
    weighted = load_weighted_set(plain(cfg.problems), get_family("miopen"), "fwd", "fp32")
    assert sum(w for _, w in weighted) == 2 * 53
    assert {p.N for p, _ in weighted} == {4, 16}
    by = {p.describe(): w for p, w in weighted}
    assert by["N4 C256 K64 G1 56x56 k1x1 s1 p0 NCHW"] == 2  # conv2_2 and conv2_3's first 1x1
    assert by["N16 C256 K256 G1 14x14 k3x3 s1 p1 NCHW"] == 5  # conv4_2 .. conv4_6
    with pytest.raises(ProblemError, match="the network is fp32 and the op is fp16"):
        load_problem_set(plain(cfg.problems), get_family("miopen"), "fwd", "fp16")
    with pytest.raises(ProblemError, match="none of its 53 convolutions runs in bwd_data"):
        load_problem_set(plain(cfg.problems), get_family("miopen"), "bwd_data", "fp32")
    training = {**plain(cfg.problems), "sources": [{**plain(cfg.problems)["sources"][0], "training": True}]}
    assert len(load_weighted_set(training, get_family("miopen"), "bwd_weight", "fp32")) == len(weighted)


def test_onnx_conv_transpose_is_the_backward_data_of_its_convolution(tmp_path):
    from onnx import helper

    from ckheur.problems.networks import onnx_layers

    f16 = onnx.TensorProto.FLOAT16
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["y", "w2"], ["z"], name="same", auto_pad="SAME_UPPER")],
        "g", [helper.make_tensor_value_info("x", f16, ["batch", 16, 7, 7]),
              helper.make_tensor_value_info("w", f16, [16, 8, 4, 4]), helper.make_tensor_value_info("w2", f16, [4, 8, 3, 3])],
        [helper.make_tensor_value_info("z", f16, None)])
    path = tmp_path / "up.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    up, same = onnx_layers(path, batch=2)
    # out = (7 - 1) * 2 - 2 + 4 = 14: the convolution it transposes reads 8 channels of 14x14 and writes 16 of 7x7.
    assert (up.directions, up.dtype) == (("bwd_data",), "fp16")
    assert {k: up.fields[k] for k in ("N", "C", "K", "Hi", "Wi", "Y", "stride_h", "pad_h")} == {
        "N": 2, "C": 8, "K": 16, "Hi": 14, "Wi": 14, "Y": 4, "stride_h": 2, "pad_h": 1}
    assert (same.fields["Hi"], same.fields["pad_h"], same.directions) == (14, 1, ("fwd",))  # SAME 3x3: pad 1 each side
    assert onnx_layers(path, dtype="bf16")[0].dtype == "bf16"


def _log_line(fields: dict, direction: int, command: str = "conv", kind: str = "LogCmdConvolution") -> str:
    """A line as MIOpen logs it with MIOPEN_ENABLE_LOGGING_CMD=1 (src/driver_arguments.cpp's 2D form)."""
    f = fields
    return (f"MIOpen(HIP): Command [{kind}] ./bin/MIOpenDriver {command} -n {f['N']} -c {f['C']} -H {f['Hi']} "
            f"-W {f['Wi']} -k {f['K']} -y {f['Y']} -x {f['X']} -p {f['pad_h']} -q {f['pad_w']} -u {f['stride_h']} "
            f"-v {f['stride_w']} -l {f['dilation_h']} -j {f['dilation_w']} -m conv -g {f['G']} -F {direction} -t 1")


@pytest.mark.parametrize("family", ["miopen", "grouped_conv"])
def test_a_training_log_gives_back_the_networks_problems_in_every_direction(tmp_path, family):
    from ckheur.problems.networks import onnx_layers

    layers = onnx_layers(MOBILENET, batch=32)
    text = ["MIOpen(HIP): Info [SQLiteBase] Opened user db", "epoch 1/1", "loss 2.302"]
    for step in range(2):  # two training steps: forward through the layers, backward in reverse order
        if step == 0:  # the first step's Find calls log every layer once more, as LogCmdFindConvolution
            text += [_log_line(layer.fields, d, kind="LogCmdFindConvolution") for layer in layers for d in (1, 2, 4)]
        text += [_log_line(layer.fields, 1) for layer in layers]
        text += ["MIOpen(HIP): Command [LogCmdBnorm] ./bin/MIOpenDriver bnorm -n 32 -c 16 -H 112 -W 112 -m 1"]
        for layer in reversed(layers):
            text += [_log_line(layer.fields, 2), _log_line(layer.fields, 4)]
    log = tmp_path / "train.log"
    log.write_text("\n".join(text) + "\n")
    net = {"name": "net", "sources": [{"kind": "onnx", "family": family, "path": str(MOBILENET), "batch": [32]}]}
    from_log = {"name": "log", "sources": [{"kind": "miopen_log", "family": family, "path": str(log)}]}
    expected = {p.key(): 2 * w for p, w in load_weighted_set(net, get_family(family), "fwd", "fp32")}  # two steps
    assert sum(expected.values()) == 2 * 54
    for direction in ("fwd", "bwd_data", "bwd_weight"):
        got = {p.key(): w for p, w in load_weighted_set(from_log, get_family(family), direction, "fp32")}
        assert got == expected, direction


def test_log_source_errors_and_skips(tmp_path):
    from ckheur.families.grouped_conv import problems as conv
    from ckheur.problems.networks import read_miopen_log

    fields = conv.problem_from_dict({"N": 2, "C": 8, "K": 16, "Hi": 9, "Wi": 9, "Y": 3, "X": 3}).to_dict()
    log = tmp_path / "a.log"
    log.write_text("hello\n" + _log_line(fields, 1, "convfp16") + "\n" + _log_line(fields, 1, "convfp16").replace(
        "-m conv", "-m trans") + "\n")
    assert len(read_miopen_log(log, conv.from_text, "fwd", "fp16")) == 1
    with pytest.raises(ProblemError, match=r"none of its 2 convolution commands is bwd_data fp16 \(it has: 1 fwd fp16, "
                                           r"1 transposed\)"):
        read_miopen_log(log, conv.from_text, "bwd_data", "fp16")
    empty = tmp_path / "b.log"
    empty.write_text("MIOpen(HIP): Info nothing\n")
    with pytest.raises(ProblemError, match="no MIOpen convolution command.*MIOPEN_ENABLE_LOGGING_CMD=1"):
        read_miopen_log(empty, conv.from_text)
    bad = tmp_path / "c.log"
    bad.write_text("x\n" + _log_line(fields, 1).replace("-g 1", "-g 3") + "\n")
    with pytest.raises(ProblemError, match=r"c.log line 2: .*C=8: must be divisible by G=3"):
        read_miopen_log(bad, conv.from_text)


def test_torch_module_convolutions_on_the_meta_device():
    torch = pytest.importorskip("torch", reason="the PyTorch importer is tested only where torch is installed "
                                               "(CI does not install it)")
    from ckheur.problems.networks import torch_layers

    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(),
                        nn.Conv2d(32, 32, 5, padding="same", groups=32, dilation=2),
                        nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1),
                        nn.Unflatten(1, (1, 16)), nn.Conv3d(1, 8, (3, 1, 1), padding=(1, 0, 0))).half()
    layers = torch_layers(net, (4, 3, 64, 64))
    assert [(layer.name, layer.directions, layer.dtype) for layer in layers] == [
        ("0", ("fwd",), "fp16"), ("2", ("fwd",), "fp16"), ("3", ("bwd_data",), "fp16"), ("5", ("fwd",), "fp16")]
    first, dw, up, c3 = (layer.fields for layer in layers)
    assert (first["C"], first["K"], first["Hi"], first["stride_h"], first["pad_h"]) == (3, 32, 64, 2, 1)
    assert (dw["G"], dw["Hi"], dw["Y"], dw["dilation_h"], dw["pad_h"]) == (32, 32, 5, 2, 4)
    assert (up["C"], up["K"], up["Hi"], up["Wi"]) == (16, 32, 64, 64)  # the transposed conv's output is 64x64
    assert (c3["Di"], c3["Hi"], c3["Z"], c3["pad_d"], c3["C"], c3["K"]) == (16, 64, 3, 1, 1, 8)
    assert all(p.device.type == "cpu" for p in net.parameters())  # the caller's module is left as it was
    source = {"name": "t", "sources": [{"kind": "torch", "family": "grouped_conv", "module": "test_networks:_small_net",
                                        "input_shape": [8, 3, 32, 32], "batch": [2]}]}
    assert [(p.describe(), w) for p, w in load_weighted_set(source, get_family("grouped_conv"), "fwd", "fp32")] == [
        ("N2 C3 K16 G1 32x32 k3x3 s1 p1", 1), ("N2 C16 K16 G1 32x32 k3x3 s1 p1", 2)]


def _small_net():
    """A module factory for the torch source kind (module: test_networks:_small_net): built on the meta device."""
    import torch

    assert torch.empty(1).device.type == "meta"
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1))
