"""Hardware descriptors as features: one model across GPUs (``features.hardware=true``).

A family whose features say nothing of the GPU (MIOpen's solvers: one model per arch) gains
these columns, computed from the arch config (``conf/arch``, each figure with its public source).
A model trained on several GPUs' data with them can then be asked about a GPU it never saw: the
selector fills the columns from that GPU's config. Families whose features already describe the
hardware (``HARDWARE_FEATURES``) gain nothing.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

DESCRIPTORS = (
    "hw_log2_cus", "hw_clock_ghz", "hw_log2_peak_tflops", "hw_log2_bandwidth_gbps", "hw_log2_l2_kib",
    "hw_lds_kib", "hw_waves_per_cu", "hw_log2_flops_per_byte",
)


def descriptors(arch: Mapping[str, Any], dtype: str) -> np.ndarray:
    """The arch's descriptor values, in ``DESCRIPTORS`` order (the dtype picks the peak rate)."""
    from ckheur.errors import UserError

    peaks = dict(arch["peak_tflops"])
    if dtype not in peaks:
        raise UserError(f"arch {arch['name']}: peak_tflops has no {dtype} figure (it has {', '.join(peaks)}): "
                        f"hardware descriptors need the op's dtype rate")
    peak, bandwidth = float(peaks[dtype]), float(arch["hbm_bandwidth_gbps"])
    return np.array([np.log2(arch["num_cus"]), arch["max_clock_mhz"] / 1000.0, np.log2(peak), np.log2(bandwidth),
                     np.log2(arch["l2_bytes"] / 1024.0), arch["lds_bytes"] / 1024.0, float(arch["max_waves_per_cu"]),
                     np.log2(peak * 1000.0 / bandwidth)], dtype=np.float64)


def adds_columns(engine: Any) -> bool:
    """Whether hardware descriptors add columns to this engine (its features describe no hardware)."""
    return not tuple(getattr(engine, "HARDWARE_FEATURES", ()))


class WithHardware:
    """A feature engine whose rows end with the arch's hardware descriptors (same interface)."""

    def __init__(self, engine: Any, dtype: str) -> None:
        self.base, self.dtype = engine, dtype
        self.HARDWARE_FEATURES = DESCRIPTORS
        self._values: dict[str, np.ndarray] = {}  # arch name -> its descriptors (once, not per problem)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def feature_names(self, analytic: bool = False) -> list[str]:
        """The engine's names, then the descriptors'."""
        return [*self.base.feature_names(analytic), *DESCRIPTORS]

    def features(self, prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
                 direction: str, analytic_params: Mapping[str, Any] | None = None, **kw: Any) -> np.ndarray:
        """The engine's rows with the arch's descriptors appended (the same on every row)."""
        X = self.base.features(prob, kern, arch, direction, analytic_params, **kw)
        if arch["name"] not in self._values:
            self._values[arch["name"]] = descriptors(arch, self.dtype)
        hw = np.broadcast_to(self._values[arch["name"]].astype(X.dtype), (len(X), len(DESCRIPTORS)))
        return np.hstack([X, hw])


def with_hardware(engine: Any, dtype: str) -> Any:
    """The engine with hardware descriptors, or the engine itself when it already describes the GPU."""
    return WithHardware(engine, dtype) if adds_columns(engine) else engine
