"""The config schema of GEMM ops (``conf/op/gemm/*.yaml``), registered by ``ckheur.families``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from omegaconf import MISSING

from ckheur.config import DType, Direction, Epilogue, Layout, Pipeline, Scheduler


@dataclass
class GemmOpSchema:
    """CK gemm_universal: dtype, layouts and trait allow-lists (the arch rules decide legality)."""

    family: str = "gemm"
    direction: Direction = Direction.fwd  # GEMM has one direction
    dtype: DType = DType.fp16
    layouts: List[Layout] = field(default_factory=lambda: [Layout.rcr])
    tile_m: List[int] = MISSING
    tile_n: List[int] = MISSING
    tile_k: List[int] = MISSING
    wave_layouts: List[List[int]] = field(default_factory=list)  # empty: the arch's allowed layouts
    warp_tiles: List[List[int]] = field(default_factory=list)  # empty: the arch's warp tiles for the dtype
    pipelines: List[Pipeline] = MISSING
    schedulers: List[Scheduler] = field(default_factory=lambda: [Scheduler.intrawave])
    epilogues: List[Epilogue] = field(default_factory=lambda: [Epilogue.cshuffle])
    pads: List[List[bool]] = field(default_factory=lambda: [[False, False, False]])  # [pad_m, pad_n, pad_k]
    persistent: List[bool] = field(default_factory=lambda: [False])
    unsupported: List[Dict[str, Any]] = field(default_factory=list)
    min_contiguous_elems: int = 2  # vector loads/stores need this many contiguous elements
    default_problems: str = MISSING
    model_name: str = MISSING
