"""What every kernel family shares: the error type, element sizes, and the architecture's
code-generation rules for a block tile (wave layout x MFMA warp tile)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ckheur.errors import UserError

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "fp32": 4}


class KernelError(UserError):
    """A kernel name or trait is invalid; the message names it and the allowed values."""


def tile_problems(tile: Mapping[str, Any], wave: Sequence[int], warp: Sequence[int],
                  arch: Mapping[str, Any], dtype: str) -> list[str]:
    """Reasons a tile with this wave layout and warp tile is illegal on the arch ([] if legal)."""
    cg = arch["codegen"]
    why = []
    if [list(w) for w in cg["wave_layouts"]].count(list(wave)) == 0:
        why.append(f"wave layout {list(wave)} not allowed on {arch['name']}")
    allowed_warp = [list(w) for w in cg["warp_tiles"].get(dtype, [])]
    if list(warp) not in allowed_warp:
        why.append(f"warp tile {list(warp)} not allowed for {dtype} on {arch['name']}")
    for dim, w, t in zip("mnk", wave, warp):
        size = tile[f"tile_{dim}"]
        if w * t == 0 or size % (w * t):
            why.append(f"tile_{dim}={size} not divisible by wave_{dim} x warp_tile_{dim} = {w}x{t}")
    waves = wave[0] * wave[1] * wave[2]
    if waves > cg.get("max_waves_per_block", 16):
        why.append(f"{waves} waves per block > max {cg.get('max_waves_per_block', 16)}")
    return why
