"""MIOpen convolution problems: what MIOpen's find-db keys on, as one problem type.

A grouped convolution (``ckheur.families.grouped_conv.problems``, in forward terms: C, Hi, Wi are the input, K,
Ho, Wo the output) plus the tensor ``layout`` (NCHW, NHWC, or their 3D forms NCDHW, NDHWC: MIOpen
runs a 3D problem of depth 1 with 3D solvers, so the layout says the spatial dimensions) and
``bias``. Direction and data type are the op's, as for every family; sizes, FLOPs and
the implicit-GEMM view are the convolution's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ckheur.families.problem_base import ProblemError, checked_fields, field_defaults
from ckheur.families.grouped_conv.problems import CONV_FIELDS, PARTNERS, SLICES as CONV_SLICES, ConvProblem
from ckheur.families.grouped_conv.problems import frame_flops  # noqa: F401 - a convolution's FLOPs
from ckheur.families.grouped_conv.problems import FIELD_MIN as CONV_FIELD_MIN
from ckheur.families.grouped_conv.problems import to_driver_line as conv_driver_line

FIELDS = (*CONV_FIELDS, "layout", "bias")
LAYOUTS = ("NCHW", "NHWC", "NCDHW", "NDHWC")  # the 3D layouts make a problem 3D, even of depth 1
BATCH_FIELD = "N"


@dataclass(frozen=True)
class MIOpenConvProblem(ConvProblem):
    """A grouped convolution as MIOpen keys it: with its tensor layout and bias."""

    layout: str = "NCHW"
    bias: int = 0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ProblemError(f"problem field layout={self.layout!r}: allowed values are {', '.join(LAYOUTS)}")
        if isinstance(self.bias, bool) or self.bias not in (0, 1):
            raise ProblemError(f"problem field bias={self.bias!r}: allowed values are 0, 1")
        super().__post_init__()
        if self.ndim == 2 and super().ndim == 3:
            raise ProblemError(f"problem layout={self.layout} is 2D but depth fields are set: use "
                               f"{self.layout[:2]}D{self.layout[2:]}")

    @property
    def ndim(self) -> int:
        """Spatial dimensionality: the layout's."""
        return 3 if "D" in self.layout else 2

    @property
    def group(self) -> str:
        """Every solver of the pool is a candidate; which ones apply is what the find-db says."""
        return "all"

    def key(self) -> tuple:
        return tuple(getattr(self, f) for f in FIELDS)

    def describe(self) -> str:
        return f"{super().describe()} {self.layout}" + (" bias" if self.bias else "")


def problem_from_dict(d: Mapping[str, Any]) -> MIOpenConvProblem:
    """Build a problem from a mapping of field names; unknown fields are an error."""
    return MIOpenConvProblem(**checked_fields(d, FIELDS, ("N", "C", "K"), ("layout",)))


DEFAULTS = field_defaults(MIOpenConvProblem)
FIELD_MIN = {**CONV_FIELD_MIN, "bias": 0}  # the least valid value of each integer field


def to_driver_line(p: MIOpenConvProblem, dtype: str) -> str:
    """A MIOpenDriver command line of the problem, with its layout (input, output and filter
    alike) and bias: what :func:`from_text` reads back."""
    line = conv_driver_line(p, dtype)
    if p.layout not in ("NCHW", "NCDHW"):
        line += f" -I {p.layout} -O {p.layout} -f {p.layout}"
    return line + (" -b 1" if p.bias else "")


def from_text(line: str, direction: str | None = None, dtype: str | None = None) -> MIOpenConvProblem:
    """A problem from a MIOpenDriver command line, with its layout (``-I``/``--in_layout``, or
    ``-O``, ``-f``: those given must agree, mixed layouts are refused) and bias (``-b``/``--bias``);
    3D lines default to NCDHW, as MIOpenDriver does. Refused when its ``-F`` or data type
    contradicts ``direction`` or ``dtype`` (the op it is ranked for)."""
    from ckheur.families.driver_line import parse_driver_line

    parsed = parse_driver_line(line)
    parsed.check_op(direction, dtype, line)
    layout = parsed.layout or ("NCDHW" if parsed.ndim == 3 else "NCHW")
    return problem_from_dict({**parsed.values, "layout": layout, "bias": int(parsed.flags.get("-b", "0"))})


def generate(seed: int, count: int, ndim: int = 2, shapes: Mapping[str, float] | None = None,
             max_gflop: float = 20000.0) -> list[MIOpenConvProblem]:
    """The convolution generator's problems, NCHW without bias."""
    from ckheur.families.grouped_conv.problems import generate as conv_generate

    return [problem_from_dict(p.to_dict()) for p in conv_generate(seed, count, ndim, shapes, max_gflop)]



# Filters the applicability rules tell apart: 1x1, the OpenCL direct solver's square sizes and its
# 5x10 / 5x20 and 4x4 cases, sizes outside its list, and 1xN / Nx1.
_VARIED_FILTERS = ((1, 1), (1, 1), (3, 3), (3, 3), (5, 5), (7, 7), (9, 9), (11, 11), (2, 2), (4, 4), (5, 10),
                   (5, 20), (1, 3), (3, 1), (1, 7), (7, 1))


def generate_varied(seed: int, count: int) -> list[MIOpenConvProblem]:
    """Seeded small valid problems over every layout (2D and 3D), dense / depthwise / grouped,
    the filters above, pads equal or not, strides 1 to 3 equal or not, dilation and bias: every
    case ``op.applicability``'s rules and kinds tell apart (the C export is checked on them)."""
    import random

    rng = random.Random(seed)
    out: list[MIOpenConvProblem] = []
    while len(out) < count:
        layout = rng.choice(LAYOUTS)
        C = rng.choice((4, 8, 16, 32, 64, 128))
        G = rng.choice((1, 1, C, 2, 4))  # dense, depthwise, grouped
        K = C if G == C and rng.random() < 0.7 else G * rng.choice((1, 2, 4, 8, 16))
        Y, X = rng.choice(_VARIED_FILTERS)
        d = dict(N=rng.choice((1, 2, 4, 8, 16, 32)), C=C, K=K, G=G, Hi=rng.choice((7, 14, 28, 56)),
                 Wi=rng.choice((7, 14, 28, 56)), Y=Y, X=X, layout=layout, bias=int(rng.random() < 0.2))
        d["pad_h"], d["pad_w"] = ((0, 0) if rng.random() < 0.4 else (Y // 2, X // 2) if rng.random() < 0.7
                                  else (rng.randint(0, 2), rng.randint(0, 2)))
        stride = rng.choice((1, 1, 2, 2, 3))
        d["stride_h"], d["stride_w"] = (stride, stride) if rng.random() < 0.8 else (stride, rng.choice((1, 2)))
        dilation = rng.choice((1, 1, 1, 2))
        d["dilation_h"], d["dilation_w"] = (dilation, dilation) if rng.random() < 0.8 else (1, 2)
        if "D" in layout:
            Z = 1 if (Y, X) == (1, 1) and rng.random() < 0.7 else rng.choice((1, 3, Y))
            d.update(Di=rng.choice((1, 2, 4, 8)), Z=Z, pad_d=rng.choice((0, Z // 2)), stride_d=rng.choice((1, 1, 2)),
                     dilation_d=1)
        try:
            out.append(problem_from_dict(d))
        except ProblemError:
            continue  # an empty output (a filter larger than the padded input): drawn again
    return out


def generate_group(seed: int, count: int, group: str) -> list[MIOpenConvProblem]:
    """Seeded problems a solver group serves (every solver serves every problem: group "all")."""
    return generate(seed, count)


SOURCES: dict = {}
SLICES = {**CONV_SLICES, "NHWC": lambda p, g: p.layout == "NHWC", "bias": lambda p, g: p.bias == 1}
