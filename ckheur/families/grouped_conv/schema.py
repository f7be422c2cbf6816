"""The config schema of grouped convolution ops (``conf/op/grouped_conv/*.yaml``), registered by ``ckheur.families``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List

from omegaconf import MISSING

from ckheur.config import DType, Direction, Pipeline, Scheduler, TileSpace


@dataclass
class TileSchema:
    tile_m: int = MISSING
    tile_n: int = MISSING
    tile_k: int = MISSING
    wave: List[int] = MISSING  # [wave_m, wave_n, wave_k]
    warp_tile: List[int] = MISSING  # [m, n, k]


@dataclass
class GeneratedTilesSchema:
    tile_m: List[int] = field(default_factory=lambda: [16, 32, 64, 128, 256])
    tile_n: List[int] = field(default_factory=lambda: [16, 32, 64, 128, 256])
    tile_k: List[int] = field(default_factory=lambda: [32, 64, 128])


@dataclass
class GroupedConvOpSchema:
    """Grouped convolution: one direction, dtype, and the kernel trait allow-lists."""

    family: str = "grouped_conv"
    direction: Direction = MISSING
    dtype: DType = DType.bf16
    ndims: List[int] = field(default_factory=lambda: [2, 3])
    tile_space: TileSpace = TileSpace.production
    tiles: List[TileSchema] = MISSING
    generated_tiles: GeneratedTilesSchema = field(default_factory=GeneratedTilesSchema)
    pipelines: List[Pipeline] = MISSING
    schedulers: List[Scheduler] = field(default_factory=lambda: [Scheduler.intrawave])
    dsb: List[bool] = field(default_factory=lambda: [False])
    si: List[bool] = field(default_factory=lambda: [False])
    # Trait combinations CK does not build, e.g. {pipeline: mem, dsb: true}.
    unsupported: List[Dict[str, Any]] = field(default_factory=list)
    default_problems: str = MISSING
    model_name: str = MISSING
