"""Feature engines: one per operator family, with one interface.

An engine exposes ``ENCODING_VERSION``, ``feature_names(analytic)``, ``CATEGORICAL``,
``problem_arrays(problems, direction)``, ``kernel_arrays(kernels)`` and
``features(prob, kern, arch, direction, analytic_params=None) -> float32 [P*K, F]``
(problem-major). Prediction and training call the same ``features``.
"""

from __future__ import annotations

from types import ModuleType


def get_engine(family: str) -> ModuleType:
    """The feature engine module of an operator family (registered in ckheur.ops)."""
    from ckheur.ops import get_family

    return get_family(family).features
