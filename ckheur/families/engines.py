"""Feature engines: one per operator family, with one interface.

An engine exposes ``ENCODING_VERSION``, ``feature_names(analytic)``, ``CATEGORICAL``,
``problem_arrays(problems, direction)``, ``kernel_arrays(kernels)`` and
``features(prob, kern, arch, direction, analytic_params=None, analytic_log_tf=None) -> float32
[P*K, F]`` (float64 for CK's features, as CK's predictor feeds them; problem-major;
``analytic_log_tf``: the simulator's log TFLOPS of these arguments, when the caller has it).
Prediction and training call the same ``features``.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    import numpy as np


def get_engine(name: str) -> ModuleType:
    """A feature engine module: an operator family's own (registered in ckheur.families), another
    feature set of a family (``family+set``, the family engine's ``FEATURE_SETS``), or another
    tool's by the name bundles record (``ckheur.formats.ENGINES``)."""
    import importlib

    from ckheur.families import get_family
    from ckheur.formats import ENGINES, resolve

    if name in ENGINES:
        return resolve(ENGINES[name])
    family, _, subset = name.partition("+")
    engine = get_family(family).features
    if not subset:
        return engine
    sets = getattr(engine, "FEATURE_SETS", {})
    if subset not in sets:
        raise ValueError(f"feature engine {name!r}: the {family} family's feature sets are "
                         f"{', '.join(sets) or 'none besides its own'}")
    return importlib.import_module(sets[subset])


def pair_features(engine: ModuleType, problems: Sequence[Any], kernels: Sequence[Any], pid: np.ndarray,
                  kid: np.ndarray, arch: Mapping[str, Any], direction: str,
                  analytic_params: Mapping[str, Any] | None = None, max_grid_rows: int = 2_000_000) -> np.ndarray:
    """Feature rows of the pairs (problems[pid[i]], kernels[kid[i]]).

    When the problems x kernels grid fits in ``max_grid_rows`` it is computed whole (one call)
    and the pairs are read from it; larger pools (GEMM's thousands of kernels) are computed
    problem by problem over only the kernels paired with it, so memory follows the pairs. In the
    second case the analytic feature ``analytic_rel`` is relative to those kernels, as in the
    selector's cascade."""
    import numpy as np

    pid, kid = np.asarray(pid, dtype=np.int64), np.asarray(kid, dtype=np.int64)
    kern = engine.kernel_arrays(kernels)
    if len(problems) * len(kernels) <= max_grid_rows:
        grid = engine.features(engine.problem_arrays(problems, direction), kern, arch, direction, analytic_params)
        return grid[pid * len(kernels) + kid]
    out = None
    order = np.argsort(pid, kind="stable")
    bounds = np.flatnonzero(np.diff(pid[order])) + 1
    for rows in np.split(order, bounds):
        if not len(rows):
            continue
        used, inverse = np.unique(kid[rows], return_inverse=True)
        sub = {k: v[used] for k, v in kern.items()}
        X = engine.features(engine.problem_arrays([problems[pid[rows[0]]]], direction), sub, arch, direction,
                            analytic_params)
        if out is None:
            out = np.empty((len(pid), X.shape[1]), dtype=X.dtype)
        out[rows] = X[inverse]
    return out
