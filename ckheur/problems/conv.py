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

import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")

# Field order is the problem's identity (used for dedupe, CV groups and dataset columns).
CONV_FIELDS = (
    "N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X",
    "stride_d", "stride_h", "stride_w", "pad_d", "pad_h", "pad_w",
    "dilation_d", "dilation_h", "dilation_w",
)
_MIN_ONE = {"N", "C", "K", "G", "Di", "Hi", "Wi", "Z", "Y", "X",
            "stride_d", "stride_h", "stride_w", "dilation_d", "dilation_h", "dilation_w"}
_DEFAULTS_3D = {"Di": 1, "Z": 1, "stride_d": 1, "pad_d": 0, "dilation_d": 1}


class ProblemError(ValueError):
    """A problem description is invalid; the message names the field and value."""


def _out_size(size: int, pad: int, dilation: int, filt: int, stride: int) -> int:
    return (size + 2 * pad - dilation * (filt - 1) - 1) // stride + 1


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
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ProblemError(f"problem field {f.name}={v!r}: must be an integer")
            lo = 1 if f.name in _MIN_ONE else 0
            if v < lo:
                raise ProblemError(f"problem field {f.name}={v}: must be >= {lo}")
        if self.C % self.G:
            raise ProblemError(f"problem field C={self.C}: must be divisible by G={self.G}")
        if self.K % self.G:
            raise ProblemError(f"problem field K={self.K}: must be divisible by G={self.G}")
        for name, val in (("Do", self.Do), ("Ho", self.Ho), ("Wo", self.Wo)):
            if val < 1:
                raise ProblemError(
                    f"problem output size {name}={val}: must be >= 1 (input too small for "
                    f"filter/dilation/padding) in {self.describe()}")

    # ---------------------------------------------------------------- derived sizes
    @property
    def Do(self) -> int:
        return _out_size(self.Di, self.pad_d, self.dilation_d, self.Z, self.stride_d)

    @property
    def Ho(self) -> int:
        return _out_size(self.Hi, self.pad_h, self.dilation_h, self.Y, self.stride_h)

    @property
    def Wo(self) -> int:
        return _out_size(self.Wi, self.pad_w, self.dilation_w, self.X, self.stride_w)

    @property
    def ndim(self) -> int:
        """Spatial dimensionality: 3 when any depth field differs from the 2D case."""
        return 3 if any(getattr(self, k) != v for k, v in _DEFAULTS_3D.items()) else 2

    @property
    def flops(self) -> int:
        return (2 * self.N * self.K * self.Do * self.Ho * self.Wo
                * (self.C // self.G) * self.Z * self.Y * self.X)

    def bytes_moved(self, dtype_bytes: int = 2) -> int:
        """Input + weight + output tensor bytes (each touched once)."""
        inp = self.N * self.Di * self.Hi * self.Wi * self.C
        wei = self.K * (self.C // self.G) * self.Z * self.Y * self.X
        out = self.N * self.Do * self.Ho * self.Wo * self.K
        return (inp + wei + out) * dtype_bytes

    def output_elems(self, direction: str) -> int:
        """Elements of the tensor a direction writes (what a correct run fills)."""
        if direction == "fwd":
            return self.N * self.Do * self.Ho * self.Wo * self.K
        if direction == "bwd_data":
            return self.N * self.Di * self.Hi * self.Wi * self.C
        return self.K * (self.C // self.G) * self.Z * self.Y * self.X

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
    def is_depthwise(self) -> bool:
        return self.G > 1 and self.G == self.C == self.K

    # ---------------------------------------------------------------- conversions
    def key(self) -> tuple[int, ...]:
        """Full identity (every field, including strides, pads and dilations)."""
        return tuple(getattr(self, f) for f in CONV_FIELDS)

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
    unknown = sorted(set(d) - set(CONV_FIELDS))
    if unknown:
        raise ProblemError(
            f"unknown problem field(s) {', '.join(unknown)}; allowed fields: {', '.join(CONV_FIELDS)}")
    missing = [k for k in ("N", "C", "K") if k not in d]
    if missing:
        raise ProblemError(f"problem is missing required field(s) {', '.join(missing)}")
    vals = {}
    for k, v in d.items():
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            v = int(v)
        elif isinstance(v, float) and v.is_integer():
            v = int(v)
        elif isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v)
        vals[k] = v
    return ConvProblem(**vals)
