"""Feature engines: one per operator family, with one interface.

An engine exposes ``ENCODING_VERSION``, ``feature_names(analytic)``, ``CATEGORICAL``,
``problem_arrays(problems, direction)``, ``kernel_arrays(kernels)`` and
``features(prob, kern, arch, direction, analytic_params=None) -> float32 [P*K, F]``
(problem-major). Prediction and training call the same ``features``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ENGINES = {"grouped_conv": "ckheur.features.conv", "gemm": "ckheur.features.gemm"}


def get_engine(family: str) -> ModuleType:
    """The feature engine module of an operator family."""
    if family not in ENGINES:
        raise ValueError(f"no feature engine for op family {family!r}; known: {', '.join(ENGINES)}")
    return importlib.import_module(ENGINES[family])
