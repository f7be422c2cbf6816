"""Hardware descriptors as features: one model across GPUs (``features.hardware=true``).

A family whose features say nothing of the GPU (MIOpen's solvers: one model per arch) gains
these columns, computed from the arch config (``conf/arch``, each figure with its public source).
A model trained on several GPUs' data with them can then be asked about a GPU it never saw: the
selector fills the columns from that GPU's config. Families whose features already describe the
hardware (``HARDWARE_FEATURES``) gain nothing.
"""

from __future__ import annotations

import functools
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
    if product == arch["name"]:  # a device its arch's config names no product for
        return f"{product} ({arch['num_cus']} CUs)"
    return f"{product} ({arch['name']}, {arch['num_cus']} CUs)"


def row_devices(df: Any) -> np.ndarray:
    """Each row's device as its CU count, as the arch config counts them: the ``device_cus`` a
    measuring run recorded (a sweep's, a tune's), else the one an import's find-db file name says
    (``host`` is ``import:<file>``, e.g. ``gfx906_64.HIP.fdb.txt.bz2`` is MI60), else the arch
    config's own device (rows of datasets of earlier versions, CK's CSVs: ``arch=gfx906`` is MI50);
    0 for an arch without a shipped config."""
    import pandas as pd

    if not len(df) or "arch" not in df.columns:
        return np.zeros(len(df), dtype=np.int64)
    # By distinct (arch, host, device_cus): millions of rows hold a few, so codes, not groupby.
    cols = [c for c in ("arch", "host", "device_cus") if c in df.columns]
    key = np.zeros(len(df), dtype=np.int64)
    for c in cols:
        col = df[c]
        codes, uniques = (col.cat.codes.to_numpy(), col.cat.categories) if isinstance(col.dtype, pd.CategoricalDtype) \
            else pd.factorize(col)  # -1: missing
        key = key * (len(uniques) + 1) + codes.astype(np.int64) + 1
    inverse, distinct = pd.factorize(key)
    one = np.empty(len(distinct), dtype=np.int64)
    one[inverse] = np.arange(len(df))  # a row of each distinct key (any: they share the three values)
    devices = np.zeros(len(distinct), dtype=np.int64)
    for i, row in enumerate(df.iloc[one][cols].to_dict("records")):
        cus = row.get("device_cus")
        devices[i] = int(cus) if cus is not None and not pd.isna(cus) and int(cus) > 0 else \
            _unsaid_device(str(row["arch"]), "" if pd.isna(row.get("host")) else str(row.get("host") or ""))
    return devices[inverse]


@functools.lru_cache(maxsize=256)
def _unsaid_device(arch: str, host: str) -> int:
    """The device of rows that do not record one: an import's file name's, else the arch's own."""
    from ckheur.config import find_db_device, find_db_name_device, known_archs, load_option

    if arch not in known_archs():
        return 0
    cfg = load_option(f"arch/{arch}")
    found = find_db_name_device(host[len(IMPORTED):], [arch]) if host.startswith(IMPORTED) else None
    if found is None:
        return int(cfg["num_cus"])
    device = find_db_device(cfg, found[1])  # MIOpen counts gfx1030's CUs as WGPs: the config's count
    return int(device["num_cus"]) if device is not None else int(found[1])


def file_device(arch: str, file_name: str) -> int:
    """The CU count, as the arch config counts it, of the device a find-db file name of ``arch``
    names (``gfx1030_36`` is the 72-CU Radeon: MIOpen counts its WGPs), as ``row_devices`` reads an
    import's; the arch's own device where it names none, 0 for an arch without a shipped config."""
    return _unsaid_device(str(arch), IMPORTED + str(file_name))


def device_or_own(arch: str, cus: Any = 0) -> int:
    """A device's CU count as recorded (``cus``), or where none is (0, missing) the arch config's own
    device's: how tuning databases and campaigns of earlier versions name theirs (0 for an arch
    without a shipped config)."""
    try:
        cus = int(cus or 0)
    except (TypeError, ValueError):
        cus = 0
    return cus if cus > 0 else _unsaid_device(str(arch), "")


def device_name(arch: str, cus: int) -> str:
    """How messages name the device of ``cus`` CUs of a shipped arch (``MI60 (gfx906, 64 CUs)``)."""
    from ckheur.config import known_archs, load_arch

    return device_label(device_config(load_arch(arch), cus)) if arch in known_archs() and cus else \
        f"{arch} ({cus or 'its own'} CUs)"


def devices_of(df: Any, arch: Mapping[str, Any]) -> list[str]:
    """The devices ``df``'s rows (of ``arch``) were measured on, as messages name them; rows that
    record none are the arch's own device (``arch``)."""
    want = int(arch["num_cus"])
    return sorted({device_label(arch) if cus in (0, want) else device_name(str(arch["name"]), cus)
                   for cus in set(row_devices(df).tolist())})


def one_device(df: Any, arch: Mapping[str, Any]) -> tuple[np.ndarray, str]:
    """Which rows of ``df`` a job for the one device ``arch`` reads (train without
    train.across_gpus, evaluate), and a line saying what else was there: the rows of its arch measured
    on its device when the data has some (another device's rows of the arch are left out: MI50's for
    MI60); else, where the data has one device of its arch, that one's (MI210's find-db for
    ``arch=gfx90a``, MI250X: the line says so); rows of several other devices and none of its own are
    refused, naming them. Rows of other archs are never read."""
    from ckheur.errors import UserError

    name, want = str(arch["name"]), int(arch["num_cus"])
    mine = (df["arch"].astype(str) == name).to_numpy() if len(df) else np.zeros(0, dtype=bool)
    devices = row_devices(df)
    devices[mine & (devices == 0)] = want  # an arch without a shipped config: its one device
    present = sorted(set(devices[mine].tolist()))
    if present in ([], [want]):
        return mine, ""
    others = [device_name(name, c) for c in present if c != want]
    if want in present:
        keep = mine & (devices == want)
        return keep, (f"{int((mine & ~keep).sum())} rows of {', '.join(others)} left out: another device of {name} "
                      f"than {device_label(arch)} (train.across_gpus=true learns from each with its descriptors)")
    if len(present) == 1:
        return mine, (f"the data's {name} rows were measured on {others[0]}, not {device_label(arch)}: they stand "
                      f"in for it (arch.num_cus={present[0]} names that device)")
    raise UserError(f"the data holds {name} rows of {', '.join(others)} and none of {device_label(arch)}: a job for "
                    f"one device reads one device's rows; name the device with arch.num_cus="
                    f"{' or '.join(map(str, present))}, or learn from all of them with train.across_gpus=true")


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
