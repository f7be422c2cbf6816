"""Operator families. A new operator is its config (conf/op/<family>/), its problem type
(ckheur/problems/<family>.py), its kernel type (ckheur/kernels/<family>.py) and its feature
engine (ckheur/features/<family>.py), registered here; the stages only use these modules.

Problem modules provide FIELDS, problem_from_dict, generate, SLICES and SOURCES (extra source
kinds); kernel modules provide COLUMNS, TABLE, parse_name, candidates and support_mask.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

FAMILIES = {
    "grouped_conv": ("ckheur.problems.conv", "ckheur.kernels.conv", "ckheur.features.conv"),
    "gemm": ("ckheur.problems.gemm", "ckheur.kernels.gemm", "ckheur.features.gemm"),
}


@dataclass(frozen=True)
class Family:
    """An operator family's modules, imported on first use."""

    name: str

    @property
    def problems(self) -> ModuleType:
        return importlib.import_module(FAMILIES[self.name][0])

    @property
    def kernels(self) -> ModuleType:
        return importlib.import_module(FAMILIES[self.name][1])

    @property
    def features(self) -> ModuleType:
        return importlib.import_module(FAMILIES[self.name][2])


def get_family(name: str) -> Family:
    """The modules of an operator family."""
    if name not in FAMILIES:
        raise ValueError(f"op family {name!r} unknown; known: {', '.join(FAMILIES)}")
    return Family(name)
