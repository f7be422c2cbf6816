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


# The arch config's figures the descriptors read: a device (MI60 beside MI50, both gfx906) is told
# apart from another of its arch by them, never by the arch's name alone.
FIGURES = ("name", "num_cus", "max_clock_mhz", "peak_tflops", "hbm_bandwidth_gbps", "l2_bytes", "lds_bytes",
           "max_waves_per_cu")
IMPORTED = "import:"  # the host column of an imported find-db's rows: import:<its file name>


def device_key(arch: Mapping[str, Any]) -> tuple:
    """What tells one device's descriptors from another's (the figures they read)."""
    return tuple(repr(arch.get(k)) for k in FIGURES)


def device_label(arch: Mapping[str, Any]) -> str:
    """How messages name a device: ``MI60 (gfx906, 64 CUs)``."""
    product = str(arch.get("product") or arch["name"]).split(" (")[0]
    return f"{product} ({arch['name']}, {arch['num_cus']} CUs)"


def row_devices(df: Any) -> np.ndarray:
    """Each row's device as a CU count: the one its find-db file name says (rows an import wrote:
    ``host`` is ``import:<file>``, e.g. ``gfx906_64.HIP.fdb.txt.bz2`` is MI60), 0 where the rows do
    not say (a sweep's, a dataset of an earlier version): the arch config's own device."""
    from ckheur.config import find_db_name_device

    if "host" not in df.columns or not len(df):
        return np.zeros(len(df), dtype=np.int64)
    pairs = df[["arch", "host"]].astype(str)
    out = np.zeros(len(df), dtype=np.int64)
    for (arch, host), idx in pairs.groupby(["arch", "host"], sort=False).indices.items():
        found = find_db_name_device(host[len(IMPORTED):], [arch]) if host.startswith(IMPORTED) else None
        if found is not None:
            out[idx] = found[1]
    return out


def device_config(arch: Mapping[str, Any], cus: int) -> dict:
    """The config of the arch's device of ``cus`` CUs as a find-db name counts them (0: the arch's
    own device; a count no ``devices`` entry names: the arch's figures with that count)."""
    from ckheur.config import find_db_device, resolve_device

    if not cus:
        return resolve_device(arch)
    return find_db_device(arch, cus) or resolve_device(arch, cus)


def adds_columns(engine: Any) -> bool:
    """Whether hardware descriptors add columns to this engine (its features describe no hardware)."""
    return not tuple(getattr(engine, "HARDWARE_FEATURES", ()))


class WithHardware:
    """A feature engine whose rows end with the device's hardware descriptors (same interface)."""

    def __init__(self, engine: Any, dtype: str) -> None:
        self.base, self.dtype = engine, dtype
        self.HARDWARE_FEATURES = DESCRIPTORS
        self._values: dict[tuple, np.ndarray] = {}  # device -> its descriptors (once, not per problem)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def feature_names(self, analytic: bool = False) -> list[str]:
        """The engine's names, then the descriptors'."""
        return [*self.base.feature_names(analytic), *DESCRIPTORS]

    def features(self, prob: Mapping[str, np.ndarray], kern: Mapping[str, np.ndarray], arch: Mapping[str, Any],
                 direction: str, analytic_params: Mapping[str, Any] | None = None, **kw: Any) -> np.ndarray:
        """The engine's rows with the device's descriptors appended (the same on every row)."""
        X = self.base.features(prob, kern, arch, direction, analytic_params, **kw)
        key = device_key(arch)  # by device: MI50 and MI60 are both gfx906
        if key not in self._values:
            self._values[key] = descriptors(arch, self.dtype)
        hw = np.broadcast_to(self._values[key].astype(X.dtype), (len(X), len(DESCRIPTORS)))
        return np.hstack([X, hw])


def with_hardware(engine: Any, dtype: str) -> Any:
    """The engine with hardware descriptors, or the engine itself when it already describes the GPU."""
    return WithHardware(engine, dtype) if adds_columns(engine) else engine
