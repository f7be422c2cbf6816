"""Thread policy for LightGBM (and any OpenMP code): one place that decides how many threads
a training or a prediction gets, and that waiting threads sleep instead of spin.

Why: OpenMP threads spin while they wait for work. When more threads are busy than there are
free cores (CI runners, shared nodes, a laptop running a build), every parallel region waits
for a descheduled thread and small trainings get 30-50x slower. So:

- the thread count comes from the CPUs this process may really use (CPU affinity and the
  cgroup CPU quota), not ``os.cpu_count()``;
- work too small for threads to pay (small training sets, ensemble members, scoring a few
  rows) gets one thread;
- ``OMP_WAIT_POLICY=PASSIVE`` is the default before the OpenMP runtime loads (a value the
  user set is kept), so idle threads yield their core.

``model.threads`` overrides the count (0: this policy). Import LightGBM through
:func:`lightgbm` so the wait policy is in place before its OpenMP runtime starts.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

# Below this many cells (rows x features) a LightGBM training is faster on one thread than on
# two, even on quiet cores (bench/bench_thread_policy.py measures the crossover).
MIN_CELLS_PER_THREAD = 2_000_000
# Scoring: below this many rows a prediction is dominated by per-call overhead.
MIN_PREDICT_ROWS_PER_THREAD = 20_000


def _cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max`` or v1 ``cfs_quota_us``), None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def available_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may use: its affinity mask, capped by the cgroup CPU quota (>= 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    limit = _cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        cpus = min(cpus, max(1, math.floor(limit)))
    return max(1, cpus)


def train_threads(requested: int, rows: int, features: int) -> int:
    """Threads for training on ``rows`` x ``features``: ``requested`` if > 0, else one for small
    data and up to the available CPUs for large data."""
    if requested > 0:
        return int(requested)
    wanted = (rows * max(1, features)) // MIN_CELLS_PER_THREAD
    return 1 if wanted <= 1 else min(available_cpus(), wanted)  # small work: no cgroup files read


def predict_threads(requested: int, rows: int) -> int:
    """Threads for scoring ``rows`` rows: ``requested`` if > 0, else one unless there are many rows."""
    if requested > 0:
        return int(requested)
    wanted = rows // MIN_PREDICT_ROWS_PER_THREAD
    return 1 if wanted <= 1 else min(available_cpus(), wanted)  # per-query scoring: no cgroup files read


def quiet_openmp() -> None:
    """Make waiting OpenMP threads sleep instead of spin, unless the user chose otherwise.

    Takes effect for OpenMP runtimes that start after the call (libgomp reads it at load)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# Set by a process that is one ckheur command (core_lightgbm_only): LightGBM is imported there
# without its scikit-learn interface.
_CORE_ONLY: list[bool] = [False]


def core_lightgbm_only() -> None:
    """This process is one ckheur command (the console script, ``python run.py``): it uses LightGBM's
    core (train, Dataset, Booster) and never its scikit-learn interface (LGBMRanker, ...), so LightGBM
    is imported without it. Importing scikit-learn (and the scipy.stats it imports) was about half of
    a short predict's CPU; a stage that uses scikit-learn itself still imports it."""
    _CORE_ONLY[0] = True


def lightgbm() -> Any:
    """The lightgbm module, imported after :func:`quiet_openmp` (without its scikit-learn interface
    in a process that asked for it: :func:`core_lightgbm_only`)."""
    import sys

    quiet_openmp()
    if _CORE_ONLY[0] and "lightgbm" not in sys.modules and "sklearn" not in sys.modules:
        sys.modules["sklearn"] = None  # type: ignore[assignment]  # its import fails: LightGBM goes without
        try:
            import lightgbm as lgb
        finally:
            if "sklearn" in sys.modules and sys.modules["sklearn"] is None:
                del sys.modules["sklearn"]  # importable again, by whatever needs it
        return lgb
    import lightgbm as lgb

    return lgb


def predict(booster: Any, X: Any, threads: int = 0, **kw: Any) -> Any:
    """``booster.predict(X)`` with the thread count of :func:`predict_threads`."""
    return booster.predict(X, num_threads=predict_threads(threads, len(X)), **kw)


def one_thread_predictor(booster: Any, num_iteration: int | None = None,
                         start_iteration: int = 0) -> Callable[[Any], Any]:
    """``predict(booster, X)`` for the few rows of one query (a C-contiguous float32/float64
    matrix), on one thread, equal to it; the wrapper's per-call work (parameter parsing, predictor
    setup, copies: a third of scoring 20 rows) is done here once, then LightGBM's C API is called.
    ``start_iteration``, ``num_iteration``: the sum of those trees only, as ``Booster.predict`` takes them."""
    import ctypes

    import numpy as np

    try:
        from lightgbm.basic import _LIB, _safe_call

        handle = booster._handle
    except (ImportError, AttributeError):  # another LightGBM's internals: the public path
        return lambda X: predict(booster, X, threads=1, num_iteration=num_iteration, start_iteration=start_iteration)
    best = booster.best_iteration if num_iteration is None else num_iteration  # Booster.predict's default
    iterations, params, nfeat = ctypes.c_int(best if best > 0 else -1), ctypes.c_char_p(b"num_threads=1"), \
        booster.num_feature()
    dtypes = {np.dtype(np.float32): ctypes.c_int(0), np.dtype(np.float64): ctypes.c_int(1)}  # C_API_DTYPE_*
    zero, row_major, start = ctypes.c_int(0), ctypes.c_int(1), ctypes.c_int(start_iteration)

    def run(X: Any) -> Any:
        """Predictions of the rows of X (one per row)."""
        if X.ndim != 2 or X.shape[1] != nfeat or X.dtype not in dtypes or not X.flags.c_contiguous \
                or predict_threads(0, len(X)) > 1:
            # the wrapper checks and converts; many rows get threads
            return predict(booster, X, num_iteration=num_iteration, start_iteration=start_iteration)
        out, got = np.empty(X.shape[0]), ctypes.c_int64(0)
        _safe_call(_LIB.LGBM_BoosterPredictForMat(
            handle, ctypes.c_void_p(X.ctypes.data), dtypes[X.dtype], ctypes.c_int32(X.shape[0]),
            ctypes.c_int32(nfeat), row_major, zero, start, iterations, params, ctypes.byref(got),
            ctypes.c_void_p(out.ctypes.data)))
        return out

    return run
