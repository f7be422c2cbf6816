"""Grouped convolution problems (2D and 3D) with CK's field names.

Implicit-GEMM view per direction, with G as the GEMM batch (each group is one GEMM):

    direction    GEMM M            GEMM N             GEMM K
    fwd          N*Do*Ho*Wo        K/G                (C/G)*Z*Y*X
    bwd_data     N*Di*Hi*Wi        C/G                (K/G)*Z*Y*X
    bwd_weight   K/G               (C/G)*Z*Y*X        N*Do*Ho*Wo

FLOPs are the same in every direction: 2*N*K*Do*Ho*Wo*(C/G)*Z*Y*X.
A 2D problem is the 3D one with Di=Z=1, stride_d=dilation_d=1, pad_d=0.
"""

from __future__ import annotations

import math
import operator
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from ckheur.families.problem_base import (ProblemError, check_exact_sizes, check_int_field, checked_fields, draw_distinct,
                                  field_defaults)
from ckheur.families.driver_line import driver_line, parse_driver_line

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
WRITTEN_TENSOR = {"fwd": "out", "bwd_data": "in", "bwd_weight": "wei"}  # what each direction computes

# Field order is the problem's identity (used for dedupe, CV groups and dataset columns).
CONV_FIELDS = (
    "N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X",
    "stride_d", "stride_h", "stride_w", "pad_d", "pad_h", "pad_w",
    "dilation_d", "dilation_h", "dilation_w",
)
_CONV_KEY = operator.attrgetter(*CONV_FIELDS)  # a problem's key, read at once
_MIN_ONE = {"N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X",
            "stride_d", "stride_h", "stride_w", "dilation_d", "dilation_h", "dilation_w"}
_DEFAULTS_3D = {"Di": 1, "Z": 1, "stride_d": 1, "pad_d": 0, "dilation_d": 1}
# Columns that come together in a table: one without the others would silently take defaults.
PARTNERS = (("stride_h", "stride_w"), ("pad_h", "pad_w"), ("dilation_h", "dilation_w"), tuple(_DEFAULTS_3D))
# Fields drawn together when new problems are drawn from a set's span (problems.space.span_problems).
SPAN_BLOCKS = (("Hi", "Wi"), ("Y", "X"), *PARTNERS)


def output_size(size: Any, pad: Any, dilation: Any, filt: Any, stride: Any) -> Any:
    """Output length along one dimension (ints, or arrays / columns of many problems)."""
    return (size + 2 * pad - dilation * (filt - 1) - 1) // stride + 1


def output_sizes(f: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """(Do, Ho, Wo) from forward-term problem fields: one problem's, or columns of many."""
    return tuple(output_size(f[size], f[f"pad_{d}"], f[f"dilation_{d}"], f[filt], f[f"stride_{d}"])
                 for size, filt, d in (("Di", "Z", "d"), ("Hi", "Y", "h"), ("Wi", "X", "w")))


def frame_flops(frame: Any) -> Any:
    """Each row's FLOPs (a frame or mapping of columns of the fields; forward terms: every direction
    does as many) as floats, what ``ConvProblem.flops`` gives one problem; NaN where a size is below
    1 or an output is empty (no problem)."""
    import numpy as np

    with np.errstate(all="ignore"):
        f = {c: np.asarray(frame[c], dtype=float) for c in CONV_FIELDS}
        do, ho, wo = output_sizes(f)  # floor division of floats: the integer sizes, as floats
        flops = 2.0 * f["N"] * f["K"] * do * ho * wo * np.floor(f["C"] / f["G"]) * f["Z"] * f["Y"] * f["X"]
        valid = (np.minimum.reduce([f[c] for c in ("N", "C", "K", "G", "Z", "Y", "X")]) >= 1) \
            & (np.minimum.reduce([do, ho, wo]) >= 1)
    return np.where(valid, flops, np.nan)


@dataclass(frozen=True)
class ConvProblem:
    """One grouped convolution: batch N, channels C (in) / K (out), groups G, sizes, filter."""

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

    def __post_init__(self) -> None:
        for name in CONV_FIELDS:  # (problem types built on this one add fields of their own)
            check_int_field(name, getattr(self, name), 1 if name in _MIN_ONE else 0)
        if self.C % self.G:
            raise ProblemError(f"problem field C={self.C}: must be divisible by G={self.G}")
        if self.K % self.G:
            raise ProblemError(f"problem field K={self.K}: must be divisible by G={self.G}")
        for name, val in (("Do", self.Do), ("Ho", self.Ho), ("Wo", self.Wo)):
            if val < 1:
                raise ProblemError(
                    f"problem output size {name}={val}: must be >= 1 (input too small for "
                    f"filter/dilation/padding) in {self.describe()}")
        check_exact_sizes(self.flops, self.elements, self.describe)

    # ---------------------------------------------------------------- derived sizes
    @property
    def Do(self) -> int:
        return output_size(self.Di, self.pad_d, self.dilation_d, self.Z, self.stride_d)

    @property
    def Ho(self) -> int:
        return output_size(self.Hi, self.pad_h, self.dilation_h, self.Y, self.stride_h)

    @property
    def Wo(self) -> int:
        return output_size(self.Wi, self.pad_w, self.dilation_w, self.X, self.stride_w)

    @property
    def ndim(self) -> int:
        """Spatial dimensionality: 3 when any depth field differs from the 2D case."""
        # (_DEFAULTS_3D, spelled out: a selector asks this several times per problem)
        return 3 if self.Di != 1 or self.Z != 1 or self.stride_d != 1 or self.pad_d != 0 or self.dilation_d != 1 else 2

    @property
    def flops(self) -> int:
        return (2 * self.N * self.K * self.Do * self.Ho * self.Wo
                * (self.C // self.G) * self.Z * self.Y * self.X)

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Input, weight and output shapes in CK's NDHWGC / GKZYXC / NDHWGK layouts."""
        cg, kg = self.C // self.G, self.K // self.G
        return {"in": (self.N, self.Di, self.Hi, self.Wi, self.G, cg),
                "wei": (self.G, kg, self.Z, self.Y, self.X, cg),
                "out": (self.N, self.Do, self.Ho, self.Wo, self.G, kg)}

    def bytes_moved(self, dtype_bytes: int = 2) -> int:
        """Input + weight + output tensor bytes (each touched once)."""
        return self.elements * dtype_bytes

    @property
    def elements(self) -> int:
        """Input + weight + output tensor elements."""
        return sum(math.prod(s) for s in self.tensor_shapes().values())

    def output_elems(self, direction: str) -> int:
        """Elements of the tensor a direction writes (what a correct run fills)."""
        return math.prod(self.tensor_shapes()[WRITTEN_TENSOR[direction]])

    def gemm(self, direction: str) -> tuple[int, int, int, int]:
        """Implicit-GEMM (batch=G, M, N, K) for a direction (table in the module docstring)."""
        cg, kg = self.C // self.G, self.K // self.G
        filt = self.Z * self.Y * self.X
        out_pix = self.N * self.Do * self.Ho * self.Wo
        if direction == "fwd":
            return self.G, out_pix, kg, cg * filt
        if direction == "bwd_data":
            return self.G, self.N * self.Di * self.Hi * self.Wi, cg, kg * filt
        if direction == "bwd_weight":
            return self.G, kg, cg * filt, out_pix
        raise ProblemError(f"direction={direction!r}: allowed values are {', '.join(DIRECTIONS)}")

    @property
    def group(self) -> int:
        """Kernels are compiled per spatial dimensionality: only those match."""
        return self.ndim

    @property
    def filter_size(self) -> int:
        return self.Z * self.Y * self.X

    @property
    def channels_per_group(self) -> int:
        return self.C // self.G

    split_k = 1  # the simulator chooses k_batch itself for bwd_weight
    transposed_operands = 0

    @property
    def is_depthwise(self) -> bool:
        return self.G > 1 and self.G == self.C == self.K

    # ---------------------------------------------------------------- conversions
    def key(self) -> tuple[int, ...]:
        """Full identity (every field, including strides, pads and dilations)."""
        return _CONV_KEY(self)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def describe(self) -> str:
        """Compact human-readable form, e.g. N16 C256 K128 G1 28x28 k3x3 s1 p1."""
        sp = f"{self.Di}x{self.Hi}x{self.Wi}" if self.ndim == 3 else f"{self.Hi}x{self.Wi}"
        fl = f"{self.Z}x{self.Y}x{self.X}" if self.ndim == 3 else f"{self.Y}x{self.X}"
        s = f"N{self.N} C{self.C} K{self.K} G{self.G} {sp} k{fl}"
        st = {self.stride_h, self.stride_w} | ({self.stride_d} if self.ndim == 3 else set())
        pd = {self.pad_h, self.pad_w} | ({self.pad_d} if self.ndim == 3 else set())
        dl = {self.dilation_h, self.dilation_w} | ({self.dilation_d} if self.ndim == 3 else set())
        s += f" s{self.stride_h}" if len(st) == 1 else f" s{self.stride_d},{self.stride_h},{self.stride_w}"
        s += f" p{self.pad_h}" if len(pd) == 1 else f" p{self.pad_d},{self.pad_h},{self.pad_w}"
        if dl != {1}:
            s += f" d{self.dilation_h}" if len(dl) == 1 else f" d{self.dilation_d},{self.dilation_h},{self.dilation_w}"
        return s


def problem_from_dict(d: Mapping[str, Any]) -> ConvProblem:
    """Build a problem from a mapping with CK's field names; unknown fields are an error."""
    return ConvProblem(**checked_fields(d, CONV_FIELDS, ("N", "C", "K"), ()))


FIELDS = CONV_FIELDS
DEFAULTS = field_defaults(ConvProblem)
FIELD_MIN = {f: 1 if f in _MIN_ONE else 0 for f in FIELDS}  # the least valid value of each integer field


# ------------------------------------------------------------------ generator
# Channel counts seen in production networks; sampled for C and K.
_CHANNELS = (3, 8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 240, 256, 320,
             384, 480, 512, 576, 640, 672, 768, 960, 1024, 1152, 1280, 1536, 2048)
_SPATIAL = {"small": (4, 7, 8, 10, 14, 16), "medium": (17, 20, 28, 32, 35, 48, 56, 64),
            "large": (71, 73, 96, 112, 128, 147, 149, 224)}
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SHAPE_KINDS = ("pointwise", "conv3x3", "conv5x5", "conv7x7", "strided", "dilated",
            "grouped", "depthwise", "conv3d")


def _sample(rng: random.Random, kind: str, ndim: int) -> dict[str, int]:
    """One random problem of a shape kind (fields as a dict, maybe invalid)."""
    size_class = rng.choices(("small", "medium", "large"), weights=(0.35, 0.45, 0.2))[0]
    hw = rng.choice(_SPATIAL[size_class])
    d: dict[str, int] = {
        "N": rng.choice(_BATCH), "C": rng.choice(_CHANNELS), "K": rng.choice(_CHANNELS[1:]),
        "Hi": hw, "Wi": hw if rng.random() < 0.85 else rng.choice(_SPATIAL[size_class]),
    }
    filt = {"pointwise": 1, "conv3x3": 3, "conv5x5": 5, "conv7x7": 7}.get(kind)
    if filt is None:
        filt = rng.choice((1, 3, 3, 3, 5)) if kind in ("strided", "grouped", "conv3d") else 3
    d["Y"] = d["X"] = filt
    d["pad_h"] = d["pad_w"] = filt // 2 if rng.random() < 0.85 else 0
    if kind == "strided":
        d["stride_h"] = d["stride_w"] = 2
    if kind == "dilated":
        dil = rng.choice((2, 2, 3, 4))
        d["dilation_h"] = d["dilation_w"] = dil
        d["pad_h"] = d["pad_w"] = dil
    if kind == "grouped":
        g = rng.choice((2, 4, 8, 16, 32, 64))
        d["G"] = g
        d["C"] = g * rng.choice((1, 2, 4, 8, 16, 32))
        d["K"] = g * rng.choice((1, 2, 4, 8, 16, 32))
    if kind == "depthwise":
        c = rng.choice((16, 32, 64, 96, 128, 144, 192, 240, 256, 384, 480, 512, 576, 672, 960))
        d["G"] = d["C"] = d["K"] = c
        d["Y"] = d["X"] = rng.choice((3, 3, 5, 7))
        d["pad_h"] = d["pad_w"] = d["Y"] // 2
        if rng.random() < 0.3:
            d["stride_h"] = d["stride_w"] = 2
    if kind == "conv3d" or ndim == 3:
        d["Di"] = rng.choice((2, 4, 8, 16, 32))
        d["Hi"] = d["Wi"] = rng.choice((7, 14, 16, 28, 32, 56, 64, 112))
        d["Z"] = rng.choice((1, 3, 3)) if d["Y"] > 1 else 1
        d["pad_d"] = d["Z"] // 2
        d["N"] = rng.choice((1, 2, 4, 8, 16, 32))
        if rng.random() < 0.2:
            d["stride_d"] = d["stride_h"] = d["stride_w"] = 2
    return d


def generate(seed: int, count: int, ndim: int = 2, shapes: Mapping[str, float] | None = None,
             max_gflop: float = 20000.0) -> list[ConvProblem]:
    """Draw ``count`` distinct valid problems from weighted shape kinds, deterministically."""

    def sample(rng: random.Random, kind: str) -> ConvProblem | None:
        try:
            p = problem_from_dict(_sample(rng, kind, ndim))
        except ProblemError:
            return None
        return p if p.flops <= max_gflop * 1e9 and p.ndim == ndim else None

    kinds = dict(shapes or {f: 1.0 for f in SHAPE_KINDS if (f == "conv3d") == (ndim == 3)})
    return draw_distinct(seed, count, kinds, SHAPE_KINDS, sample)


def generate_group(seed: int, count: int, group: Any) -> list[ConvProblem]:
    """Seeded problems a kernel group serves (a group is the kernels' dimensionality)."""
    return generate(seed, count) if group == "all" else generate(seed, count, ndim=int(group))


def from_driver_line(line: str) -> tuple[ConvProblem, tuple[str, ...]]:
    """Parse one MIOpenDriver command line into (problem, the directions its ``-F`` runs)."""
    parsed = parse_driver_line(line)
    return problem_from_dict(parsed.values), parsed.directions


def to_driver_line(p: ConvProblem, dtype: str = "bf16") -> str:
    """A problem as a MIOpenDriver command line (the inverse of from_driver_line; each convolution
    family's module has one)."""
    return driver_line(p.to_dict(), CONV_FIELDS, p.ndim, dtype)


def read_driver_lines(path: Any) -> list[ConvProblem]:
    """Problems from a text file of MIOpenDriver lines ('#' comments and blank lines skipped)."""
    from ckheur.files import check_regular

    out = []
    for i, line in enumerate(check_regular(path, "driver-line file").read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.append(from_driver_line(line)[0])
        except ProblemError as e:
            raise ProblemError(f"{path} line {i}: {e}") from None
    return out


BATCH_FIELD = "N"  # what a source's `batch` list replaces


def from_text(line: str, direction: str | None = None, dtype: str | None = None) -> ConvProblem:
    """A problem written as text: a MIOpenDriver command line, refused when its ``-F`` or its
    command's data type contradicts ``direction`` or ``dtype`` (the op it is ranked for)."""
    parsed = parse_driver_line(line)
    parsed.check_op(direction, dtype, line)
    return problem_from_dict(parsed.values)

SOURCES = {"driver_lines": read_driver_lines}  # source kinds only this family has

SLICES = {
    "1x1": lambda p, g: p.Z * p.Y * p.X == 1,
    "3x3": lambda p, g: (p.Y, p.X) == (3, 3) and p.Z in (1, 3),
    "larger filters": lambda p, g: max(p.Y, p.X) >= 5,
    "strided": lambda p, g: max(p.stride_d, p.stride_h, p.stride_w) > 1,
    "grouped": lambda p, g: 1 < p.G and not p.is_depthwise,
    "depthwise": lambda p, g: p.is_depthwise,
    "3D": lambda p, g: p.ndim == 3,
    "small batch (N<=2)": lambda p, g: p.N <= 2,
    "tiny GEMM (M<128 or N<32)": lambda p, g: g[1] < 128 or g[2] < 32,
}
