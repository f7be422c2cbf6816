"""Real measurements shipped with ckheur (provenance, sha256 and license in README.md here).

Paths written ``measurements/<file>`` (in ``data.paths``, ``backend.paths``, problem sources)
resolve to this folder when no such path exists in the current directory.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
CK_GFX950_FWD = HERE / "ck_gfx950" / "fwd_bf16_2d_miopen200.csv.gz"
# sha256 of the uncompressed CSV as published (and as the simulator calibration records it).
CK_GFX950_FWD_SHA256 = "5dd4d711115c082d5f748354161f989f4f592a47d0f6cfc37551880b34f5c09b"
# What it measures: the op family, direction, dtype and arch of every row.
CK_GFX950_FWD_OP = {"family": "grouped_conv", "direction": "fwd", "dtype": "bf16", "arch": "gfx950"}


def resolve(path: str | Path) -> Path:
    """A data path as given; a missing ``measurements/<file>`` is looked up among the shipped ones."""
    path = Path(path)
    if path.exists() or path.is_absolute() or not path.parts or path.parts[0] != "measurements":
        return path
    shipped = HERE.joinpath(*path.parts[1:])
    return shipped if shipped.exists() else path
