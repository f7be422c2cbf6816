"""Build weightless ONNX graphs of ResNet-50 and MobileNetV3-Small from their published architectures
(tests/data/resnet50.onnx, tests/data/mobilenetv3_small.onnx): the convolutions with their attributes,
and only the other nodes that carry shapes between them (pooling, residual adds, SE gating). Weights
are graph inputs with shapes and no data, so the files stay a few KB. Batch is symbolic ("N").

    python tools/net_onnx.py tests/data

ResNet-50 (He et al. 2016, Table 1) as v1.5 (torchvision's: a bottleneck's stride on its 3x3 conv);
MobileNetV3-Small (Howard et al. 2019, Table 2) with the SE widths and the classifier as 1x1 convs
as the paper draws them, no SE on the last 1x1 conv (as TF-slim and torchvision build it).
"""

from __future__ import annotations

import sys
from pathlib import Path


class _Graph:
    """Nodes and weight inputs of a graph under construction."""

    def __init__(self, dtype: int) -> None:
        self.nodes, self.weights, self.dtype, self.count = [], [], dtype, 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, name: str = "conv") -> str:
        from onnx import helper

        w, y = f"{name}_w", name  # conv names are unique by construction
        self.weights.append(helper.make_tensor_value_info(w, self.dtype, [cout, cin // groups, k, k]))
        self.nodes.append(helper.make_node("Conv", [x, w], [y], name=y, kernel_shape=[k, k], strides=[stride, stride],
                                           pads=[k // 2] * 4, group=groups))
        return y

    def op(self, op_type: str, inputs: list, **attrs: object) -> str:
        from onnx import helper

        y = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [y], name=y, **attrs))
        return y

    def model(self, name: str, x: str, y: str, channels: int, size: int, out_channels: int) -> object:
        from onnx import helper

        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(x, self.dtype, ["N", channels, size, size]),
                                                     *self.weights],
                                  [helper.make_tensor_value_info(y, self.dtype, ["N", out_channels, 1, 1])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ckheur tools/net_onnx.py")


def resnet50(dtype: int = 1) -> object:
    """ResNet-50 v1.5 on 224x224: 53 convolutions (stem, 16 bottlenecks of three, 4 projections)."""
    g = _Graph(dtype)
    x = g.op("Relu", [g.conv("input", 3, 64, 7, 2, name="stem")])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            y = g.op("Relu", [g.conv(x, cin, width, 1, name=f"s{stage}b{b}a")])
            y = g.op("Relu", [g.conv(y, width, width, 3, stride, name=f"s{stage}b{b}b")])
            y = g.conv(y, width, 4 * width, 1, name=f"s{stage}b{b}c")
            short = g.conv(x, cin, 4 * width, 1, stride, name=f"s{stage}b{b}proj") if b == 0 else x
            x, cin = g.op("Relu", [g.op("Add", [y, short])]), 4 * width
    return g.model("resnet50", "input", g.op("GlobalAveragePool", [x]), 3, 224, 2048)


def _divisible(v: float, d: int = 8) -> int:
    """Channels rounded to a multiple of 8, not below 90% of v (the MobileNet rounding)."""
    out = max(d, int(v + d / 2) // d * d)
    return out + d if out < 0.9 * v else out


# MobileNetV3-Small bnecks: kernel, expansion, out channels, SE, stride (the paper's Table 2).
_SMALL = [(3, 16, 16, True, 2), (3, 72, 24, False, 2), (3, 88, 24, False, 1), (5, 96, 40, True, 2),
          (5, 240, 40, True, 1), (5, 240, 40, True, 1), (5, 120, 48, True, 1), (5, 144, 48, True, 1),
          (5, 288, 96, True, 2), (5, 576, 96, True, 1), (5, 576, 96, True, 1)]


def mobilenetv3_small(dtype: int = 1) -> object:
    """MobileNetV3-Small on 224x224: 54 convolutions (stem, 11 bnecks, last conv, two classifier convs)."""
    g = _Graph(dtype)
    x = g.op("HardSwish", [g.conv("input", 3, 16, 3, 2, name="stem")])
    cin = 16
    for i, (k, exp, cout, se, stride) in enumerate(_SMALL):
        y = x if exp == cin else g.op("HardSwish", [g.conv(x, cin, exp, 1, name=f"b{i}expand")])
        y = g.op("HardSwish", [g.conv(y, exp, exp, k, stride, groups=exp, name=f"b{i}dw")])
        if se:
            squeeze = _divisible(exp / 4)
            s = g.op("Relu", [g.conv(g.op("GlobalAveragePool", [y]), exp, squeeze, 1, name=f"b{i}se_reduce")])
            y = g.op("Mul", [y, g.op("HardSigmoid", [g.conv(s, squeeze, exp, 1, name=f"b{i}se_expand")])])
        y = g.conv(y, exp, cout, 1, name=f"b{i}project")
        x, cin = (g.op("Add", [y, x]) if stride == 1 and cin == cout else y), cout
    x = g.op("HardSwish", [g.conv(x, 96, 576, 1, name="last")])
    x = g.op("HardSwish", [g.conv(g.op("GlobalAveragePool", [x]), 576, 1024, 1, name="head")])
    return g.model("mobilenetv3_small", "input", g.conv(x, 1024, 1000, 1, name="classifier"), 3, 224, 1000)


def main(out_dir: str) -> None:
    """Write both graphs, checked by ONNX's checker, into ``out_dir``."""
    import onnx

    for name, build in (("resnet50", resnet50), ("mobilenetv3_small", mobilenetv3_small)):
        model = build()
        onnx.checker.check_model(model)
        onnx.save(model, str(Path(out_dir) / f"{name}.onnx"))
        print(f"{name}: {sum(n.op_type == 'Conv' for n in model.graph.node)} convolutions -> {out_dir}/{name}.onnx")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data")
