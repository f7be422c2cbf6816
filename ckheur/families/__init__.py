"""Operator families: the one registry. A family is its folder, ckheur/families/<family>/ (its
problems, kernels, features, op config schema and C feature code), one line in ``FAMILIES``, and
its configs in conf/op/<family>/; the stages only use these modules, through a ``Family``.

Problem modules provide FIELDS, DEFAULTS, FIELD_MIN, BATCH_FIELD, problem_from_dict, frame_flops, generate,
generate_group, SLICES, SOURCES (extra source kinds) and, where problems have a text form,
from_text and to_driver_line; kernel modules provide COLUMNS (dataset columns), TABLE,
parse_name(name, op, arch), from_traits, candidates, rejections (why each candidate is illegal on
the arch), support_arrays, support_mask and support_reasons (why each kernel is not a candidate for
a problem); feature modules are engines
(ckheur/families/engines.py) that say whether ckheur.sim models the family (ANALYTIC_MODEL).
tests/test_families.py checks every registered family against this contract.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ckheur.errors import UserError

C_SOURCES = Path(__file__).resolve().parent  # the families' C feature code, under their folders


@dataclass(frozen=True)
class CExport:
    """What the C export needs of a family: its problem struct in ckheur_abi.h (``ctype``: the
    class of ckheur.backends.abi with its layout), its C sources (paths under ckheur/families/) in order,
    text fields passed as an index into a list of the problem module (``enums``: field -> list
    name), 0/1 fields, whether its kernels are tiles, how kernel groups are coded, and the kernel
    module's function giving the C tables of which kernels are ranked per problem beyond the
    groups (``support``: ``f(kernels, op) -> (defines, C text, the same in words)``; None: every
    kernel of the group)."""

    struct: str
    ctype: str
    sources: tuple[str, ...]
    enums: tuple[tuple[str, str], ...] = ()
    flags: tuple[str, ...] = ()
    tiles: bool = True
    group_enum: str | None = None  # the problem module's list whose index is a kernel group's code (else ndim)
    support: str | None = None  # a function of the kernels module (MIOpen: op.applicability's tables)


@dataclass(frozen=True)
class Registration:
    """An operator family's modules, its op config schema (``module:class``), and its C export
    (None: the family has no C code)."""

    problems: str
    kernels: str
    features: str
    schema: str
    c_export: CExport | None = None


# The one registry of operator families.
FAMILIES = {
    "grouped_conv": Registration("ckheur.families.grouped_conv.problems", "ckheur.families.grouped_conv.kernels",
                                 "ckheur.families.grouped_conv.features",
                                 "ckheur.families.grouped_conv.schema:GroupedConvOpSchema",
                                 CExport("ckheur_conv_problem", "ConvProblemC", ("conv_problem.c", "grouped_conv/grouped_conv.c"))),
    "gemm": Registration("ckheur.families.gemm.problems", "ckheur.families.gemm.kernels", "ckheur.families.gemm.features",
                         "ckheur.families.gemm.schema:GemmOpSchema",
                         CExport("ckheur_gemm_problem", "GemmProblemC", ("gemm/gemm.c",), (("layout", "LAYOUTS"),),
                                 group_enum="LAYOUTS")),
    "miopen": Registration("ckheur.families.miopen.problems", "ckheur.families.miopen.solvers", "ckheur.families.miopen.features",
                           "ckheur.families.miopen.schema:MIOpenOpSchema",
                           CExport("ckheur_miopen_problem", "MIOpenProblemC", ("conv_problem.c", "miopen/miopen.c"),
                                   (("layout", "LAYOUTS"),), flags=("bias",), tiles=False, support="c_support")),
}


@dataclass(frozen=True)
class Family:
    """An operator family's modules, imported on first use."""

    name: str

    @property
    def problems(self) -> ModuleType:
        return importlib.import_module(FAMILIES[self.name].problems)

    @property
    def kernels(self) -> ModuleType:
        return importlib.import_module(FAMILIES[self.name].kernels)

    @property
    def features(self) -> ModuleType:
        return importlib.import_module(FAMILIES[self.name].features)

    @property
    def schema(self) -> type:
        """The dataclass schema of the family's op configs (``conf/op/<family>/``)."""
        return op_schemas()[self.name]

    @property
    def c_export(self) -> CExport | None:
        """What the C export needs of the family (None: it has no C code)."""
        return FAMILIES[self.name].c_export

    @property
    def analytic(self) -> bool:
        """Whether the analytic model (ckheur.sim) can rank this family's kernels."""
        return bool(self.features.ANALYTIC_MODEL)


def op_schemas() -> dict[str, type]:
    """Each family's op config schema, by family name (what ``conf/op`` options validate against)."""
    out = {}
    for name, reg in FAMILIES.items():
        module, _, cls = reg.schema.partition(":")
        out[name] = getattr(importlib.import_module(module), cls)
    return out


def get_family(name: str) -> Family:
    """The modules of an operator family."""
    if name not in FAMILIES:
        raise UserError(f"op family {name!r} unknown; known: {', '.join(FAMILIES)}")
    return Family(name)
