"""MIOpen solvers as the kernels of the ``miopen`` family: named as MIOpen names them, with traits
declared per arch in the op's YAML (``conf/op/miopen/*.yaml``: algorithm, implementation kind,
whether it needs a workspace). The pool of an op on an arch is its solver table for that arch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence


from ckheur.kernels.base import KernelError, all_support_arrays, all_support_mask

COLUMNS = ("solver_id", "algorithm", "implementation", "workspace")
TABLE = ("name", "solver_id", "algorithm", "implementation", "workspace")
ALGORITHMS = ("direct", "implicit_gemm", "winograd", "gemm", "fft")
IMPLEMENTATIONS = ("asm", "hip", "ck", "mlir", "opencl", "rocblas", "naive", "other")


@dataclass(frozen=True)
class Solver:
    """One MIOpen solver of a direction (its traits)."""

    name: str
    direction: str
    solver_id: int  # stable across arches and pools (declared in the YAML): the model's categorical code
    algorithm: str
    implementation: str
    workspace: bool = False

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise KernelError(f"solver {self.name}: algorithm={self.algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        if self.implementation not in IMPLEMENTATIONS:
            raise KernelError(f"solver {self.name}: implementation={self.implementation!r}; "
                              f"allowed: {', '.join(IMPLEMENTATIONS)}")

    group = "all"  # every solver is a candidate for every problem of its direction

    @property
    def pipeline(self) -> str:
        """The algorithm, where tile kernels name their pipeline (reports group picks by it)."""
        return self.algorithm

    def traits(self) -> dict:
        return asdict(self)

    def table_row(self) -> tuple:
        return (self.name, self.solver_id, self.algorithm, self.implementation, self.workspace)


def implementation_of(name: str) -> str:
    """The implementation kind MIOpen's naming says (what the YAML declares for a new solver):
    the grouped / 3D / plain ``...Xdlops`` implicit GEMMs are CK instances, the V4R* ones HIP."""
    if name.startswith("ConvHipImplicitGemm") and ("Group" in name or name.endswith(("FwdXdlops", "BwdXdlops",
                                                                                     "WrwXdlops"))):
        return "ck"
    rules = (("ConvDirectNaive", "naive"), ("ConvAsm", "asm"), ("ConvBin", "asm"), ("ConvMP", "asm"),
             ("ConvWinoFury", "asm"), ("ConvCk", "ck"), ("ConvHip", "hip"), ("ConvMlir", "mlir"),
             ("ConvOcl", "opencl"), ("fft", "opencl"), ("Gemm", "rocblas"))
    return next((kind for prefix, kind in rules if name.startswith(prefix)), "other")


def _table(op: Mapping[str, Any], arch: Mapping[str, Any]) -> list:
    table = (op.get("solvers") or {}).get(arch["name"])
    if not table:
        raise KernelError(f"op {op['family']}/{op['direction']} declares no solvers for arch {arch['name']}; "
                          f"declared: {', '.join(sorted(op.get('solvers') or {})) or 'none'}")
    return list(table)


def table_names(direction: str, arch: str) -> list[str]:
    """The solver names this ckheur declares for a direction on an arch (``conf/op/miopen/<direction>.yaml``):
    the only names an outside file (a find-db, a bundle) may give; KernelError when there is no table."""
    from ckheur.config import load_option

    try:
        table = (load_option(f"op/miopen/{direction}").get("solvers") or {}).get(arch)
    except OSError:
        table = None
    if not table:
        raise KernelError(f"no MIOpen solver table for direction {direction!r} on arch {arch!r} "
                          "(conf/op/miopen/<fwd|bwd_data|bwd_weight>.yaml declares them per arch)")
    return [str(s["name"]) for s in table]


def candidates(op: Mapping[str, Any], arch: Mapping[str, Any]) -> tuple[list, list]:
    """The op's solver table for the arch."""
    return [Solver(name=s["name"], direction=op["direction"], solver_id=int(s["id"]), algorithm=s["algorithm"],
                   implementation=s["implementation"], workspace=bool(s["workspace"])) for s in _table(op, arch)], []


def rejections(kernels: Sequence[Solver], op: Mapping[str, Any], arch: Mapping[str, Any]) -> list[list[str]]:
    """No code-generation rules apply to solvers: the declared table is the pool."""
    return [[] for _ in kernels]


def parse_name(name: str, op: Mapping[str, Any] | None = None, arch: Mapping[str, Any] | None = None) -> Solver:
    """A solver by its MIOpen name, from the op's solver table for the arch."""
    if op is not None and arch is not None:
        for s in candidates(op, arch)[0]:
            if s.name == name:
                return s
        raise KernelError(f"solver {name!r} is not in the {op['direction']} table for {arch['name']}")
    raise KernelError(f"solver {name!r}: give the op and arch whose solver table declares it")


def from_traits(d: Mapping[str, Any]) -> Solver:
    return Solver(**{k: v for k, v in d.items() if k in Solver.__dataclass_fields__})


# Every solver is a candidate: one that does not apply is what the model learns to rank last.
support_arrays, support_mask = all_support_arrays, all_support_mask
