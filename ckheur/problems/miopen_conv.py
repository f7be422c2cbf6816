"""MIOpen convolution problems: what MIOpen's find-db keys on, as one problem type.

A grouped convolution (the fields of ``ckheur.problems.conv``, forward terms: C, Hi, Wi are the
input; K, Ho, Wo the output) plus the tensor ``layout`` (NCHW, covering NCDHW, or NHWC, covering
NDHWC) and ``bias``. Direction and data type are the op's, as for every family. Sizes, FLOPs and
the implicit-GEMM view are those of the convolution.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Any, Mapping

from ckheur.problems.base import ProblemError, checked_fields, field_defaults
from ckheur.problems.conv import CONV_FIELDS, SLICES as CONV_SLICES, ConvProblem

FIELDS = (*CONV_FIELDS, "layout", "bias")
LAYOUTS = ("NCHW", "NHWC")  # 3D problems use the same names (NCDHW is NCHW's 3D form)
BATCH_FIELD = "N"


@dataclass(frozen=True)
class MIOpenConvProblem:
    """A convolution as MIOpen keys it: the grouped convolution, its layout and bias."""

    N: int
    C: int
    K: int
    G: int = 1
    Di: int = 1
    Hi: int = 1
    Wi: int = 1
    Z: int = 1
    Y: int = 1
    X: int = 1
    stride_d: int = 1
    stride_h: int = 1
    stride_w: int = 1
    pad_d: int = 0
    pad_h: int = 0
    pad_w: int = 0
    dilation_d: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    layout: str = "NCHW"
    bias: int = 0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ProblemError(f"problem field layout={self.layout!r}: allowed values are {', '.join(LAYOUTS)}")
        if self.bias not in (0, 1) or isinstance(self.bias, bool):
            raise ProblemError(f"problem field bias={self.bias!r}: allowed values are 0, 1")
        _ = self.conv  # validates the convolution fields

    @cached_property
    def conv(self) -> ConvProblem:
        """The grouped convolution (CK's problem type) of this problem."""
        return ConvProblem(**{f: getattr(self, f) for f in CONV_FIELDS})

    # The convolution's derived sizes, FLOPs and implicit-GEMM view.
    Do = property(lambda self: self.conv.Do)
    Ho = property(lambda self: self.conv.Ho)
    Wo = property(lambda self: self.conv.Wo)
    ndim = property(lambda self: self.conv.ndim)
    flops = property(lambda self: self.conv.flops)
    filter_size = property(lambda self: self.conv.filter_size)
    channels_per_group = property(lambda self: self.conv.channels_per_group)
    is_depthwise = property(lambda self: self.conv.is_depthwise)
    split_k = 1
    transposed_operands = 0

    def gemm(self, direction: str) -> tuple[int, int, int, int]:
        return self.conv.gemm(direction)

    def bytes_moved(self, dtype_bytes: int = 2) -> int:
        return self.conv.bytes_moved(dtype_bytes)

    def output_elems(self, direction: str) -> int:
        return self.conv.output_elems(direction)

    @property
    def group(self) -> int:
        """Solvers are listed per spatial dimensionality."""
        return self.ndim

    def key(self) -> tuple:
        return tuple(getattr(self, f) for f in FIELDS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.conv.describe()} {self.layout}" + (" bias" if self.bias else "")


def problem_from_dict(d: Mapping[str, Any]) -> MIOpenConvProblem:
    """Build a problem from a mapping of field names; unknown fields are an error."""
    return MIOpenConvProblem(**checked_fields(d, FIELDS, ("N", "C", "K"), ("layout",)))


DEFAULTS = field_defaults(MIOpenConvProblem)
assert tuple(f.name for f in fields(MIOpenConvProblem)) == FIELDS


def generate(seed: int, count: int, ndim: int = 2, families: Mapping[str, float] | None = None,
             max_gflop: float = 20000.0) -> list[MIOpenConvProblem]:
    """The convolution generator's problems, in the NCHW layout without bias."""
    from ckheur.problems.conv import generate as conv_generate

    return [problem_from_dict(p.to_dict()) for p in conv_generate(seed, count, ndim, families, max_gflop)]


SOURCES: dict = {}
SLICES = {**{k: (lambda f: (lambda p, g: f(p.conv, g)))(f) for k, f in CONV_SLICES.items()},
          "NHWC": lambda p, g: p.layout == "NHWC", "bias": lambda p, g: p.bias == 1}
