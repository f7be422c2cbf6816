"""GEMM problems: C[M x N] = A[M x K] @ B[K x N], with CK's layouts and split-K.

Layout letters give A, B, C storage: r = row-major, c = column-major (CK: rcr = A row-major,
B column-major, C row-major). The implicit-GEMM view is the problem itself with batch 1.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from ckheur.families.problem_base import (ProblemError, check_exact_sizes, check_int_field, checked_fields, draw_distinct,
                                  field_defaults)

FIELDS = ("M", "N", "K", "split_k", "layout")
LAYOUTS = ("rcr", "rrr", "crr", "ccr")


def frame_flops(frame: Any) -> Any:
    """Each row's FLOPs (a frame or mapping of columns of the fields), as floats: what
    ``GemmProblem.flops`` gives one."""
    import numpy as np

    return 2.0 * np.asarray(frame["M"], dtype=float) * np.asarray(frame["N"], dtype=float) \
        * np.asarray(frame["K"], dtype=float)
PARTNERS: tuple = ()  # columns that come together in a table


@dataclass(frozen=True)
class GemmProblem:
    """One GEMM: sizes M, N, K; split_k (K split over that many workgroups); layout."""

    M: int
    N: int
    K: int
    split_k: int = 1
    layout: str = "rcr"

    def __post_init__(self) -> None:
        for f in ("M", "N", "K", "split_k"):
            check_int_field(f, getattr(self, f), 1)
        if self.layout not in LAYOUTS:
            raise ProblemError(f"problem field layout={self.layout!r}: allowed values are {', '.join(LAYOUTS)}")
        if self.split_k > self.K:
            raise ProblemError(f"problem field split_k={self.split_k}: must be <= K={self.K}")
        check_exact_sizes(self.flops, self.M * self.K + self.K * self.N + self.M * self.N,
                          f"M{self.M} N{self.N} K{self.K}")

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def bytes_moved(self, dtype_bytes: int = 2) -> int:
        """A + B + C bytes (each touched once)."""
        return (self.M * self.K + self.K * self.N + self.M * self.N) * dtype_bytes

    def gemm(self, direction: str = "fwd") -> tuple[int, int, int, int]:
        """(batch, M, N, K)."""
        return 1, self.M, self.N, self.K

    def output_elems(self, direction: str = "fwd") -> int:
        return self.M * self.N

    @property
    def group(self) -> str:
        """Kernels are compiled for one layout: only those match."""
        return self.layout

    ndim = 2
    filter_size = 1  # no implicit-GEMM gather

    @property
    def transposed_operands(self) -> int:
        """Operands not stored K-contiguous (A column-major, B row-major): their tile loads transpose."""
        return int(self.layout[0] == "c") + int(self.layout[1] == "r")

    @property
    def channels_per_group(self) -> int:
        return self.K

    def key(self) -> tuple:
        return tuple(getattr(self, f) for f in FIELDS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.layout} M{self.M} N{self.N} K{self.K}" + (f" split_k{self.split_k}" if self.split_k > 1 else "")


DEFAULTS = field_defaults(GemmProblem)
FIELD_MIN = {f: 1 for f in ("M", "N", "K", "split_k")}  # the least valid value of each integer field


def problem_from_dict(d: Mapping[str, Any]) -> GemmProblem:
    """A GEMM problem from a mapping with fields M, N, K[, split_k, layout]."""
    return GemmProblem(**checked_fields(d, FIELDS, ("M", "N", "K"), ("layout",)))


# ------------------------------------------------------------------ generator
SHAPE_KINDS = ("tiny_m", "skinny", "square", "large", "odd", "prime", "deep_k")
_PRIMES = (1, 3, 7, 13, 31, 61, 127, 251, 509, 1021, 2039, 4093, 8191)
_SIZES = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 11008, 14336, 16384)


def generate(seed: int, count: int, ndim: int = 2, shapes: Mapping[str, float] | None = None,
             max_gflop: float = 20000.0, layouts: tuple[str, ...] = ("rcr",)) -> list[GemmProblem]:
    """Draw ``count`` distinct GEMM problems from weighted shape kinds, deterministically."""

    def sample(rng: random.Random, kind: str) -> GemmProblem | None:
        m, n, k = rng.choice(_SIZES), rng.choice(_SIZES), rng.choice(_SIZES)
        if kind == "tiny_m":
            m = rng.choice((1, 2, 4, 8, 16, 32, 64))
        elif kind == "skinny":
            n = rng.choice((16, 32, 64, 128))
        elif kind == "square":
            n = k = m
        elif kind == "large":
            m, n = rng.choice((8192, 16384, 20480, 32768)), rng.choice((4096, 7168, 8192))
        elif kind == "odd":
            m, n, k = (x + rng.choice((-7, -3, -1, 1, 5, 9)) for x in (m, n, k))
        elif kind == "prime":
            m, n = rng.choice(_PRIMES[3:]), rng.choice(_PRIMES[5:])
        elif kind == "deep_k":
            k = rng.choice((16384, 32768, 65536))
            m, n = rng.choice((64, 128, 256, 512)), rng.choice((64, 128, 256, 512))
        try:
            p = GemmProblem(M=max(1, m), N=max(1, n), K=max(1, k), layout=rng.choice(layouts))
        except ProblemError:
            return None
        return p if p.flops <= max_gflop * 1e9 else None

    return draw_distinct(seed, count, dict(shapes or {f: 1.0 for f in SHAPE_KINDS}), SHAPE_KINDS, sample)


def generate_group(seed: int, count: int, group: str) -> list[GemmProblem]:
    """Seeded problems a kernel group serves (a group is the kernels' layout)."""
    return generate(seed, count, layouts=(group,))


BATCH_FIELD = "M"  # what a source's `batch` list replaces: tokens

SOURCES: dict = {}  # no extra source kinds beyond inline/generate/csv/set

SLICES = {
    "tiny M (M<=16)": lambda p, g: p.M <= 16,
    "skinny (N<=128)": lambda p, g: p.N <= 128,
    "square": lambda p, g: p.M == p.N == p.K,
    "unaligned (odd/prime)": lambda p, g: any(x % 8 for x in (p.M, p.N, p.K)),
    "deep K (K>=16384)": lambda p, g: p.K >= 16384,
    "split-K": lambda p, g: p.split_k > 1,
}
