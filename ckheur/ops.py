"""Operator families. A new operator is its config (conf/op/<family>/), its problem type
(ckheur/problems/<family>.py), its kernel type (ckheur/kernels/<family>.py) and its feature
engine (ckheur/features/<family>.py), registered here; the stages only use these modules.

Problem modules provide FIELDS, BATCH_FIELD, problem_from_dict, generate, SLICES, SOURCES
(extra source kinds) and, where problems have a text form, from_text; kernel modules provide COLUMNS (dataset columns), TABLE, parse_name,
from_traits, candidates, rejections (why each candidate is illegal on the arch), support_arrays
and support_mask; feature modules are engines
(ckheur/features/__init__.py) that say whether ckheur.sim models the family (ANALYTIC_MODEL).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from ckheur.errors import UserError

FAMILIES = {
    "grouped_conv": ("ckheur.problems.conv", "ckheur.kernels.conv", "ckheur.features.conv"),
    "gemm": ("ckheur.problems.gemm", "ckheur.kernels.gemm", "ckheur.features.gemm"),
    "miopen": ("ckheur.problems.miopen_conv", "ckheur.kernels.miopen_solvers", "ckheur.features.miopen"),
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

    @property
    def analytic(self) -> bool:
        """Whether the analytic model (ckheur.sim) can rank this family's kernels."""
        return bool(self.features.ANALYTIC_MODEL)


def get_family(name: str) -> Family:
    """The modules of an operator family."""
    if name not in FAMILIES:
        raise UserError(f"op family {name!r} unknown; known: {', '.join(FAMILIES)}")
    return Family(name)
