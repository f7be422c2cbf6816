"""MIOpen solvers as the kernels of the ``miopen`` family: named as MIOpen names them, with traits
declared per arch in the family's solver tables (``solver_tables/<direction>.yaml`` beside this
module: algorithm, implementation kind, whether it needs a workspace; ``op.solvers.<arch>`` replaces one). The pool of an op on an arch is its solver table for that arch.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence


from ckheur.families.kernel_base import KernelError, checked_traits

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


# What a solver's MIOpen name says of its kind, beyond algorithm and implementation: what a model
# across GPUs can carry to a solver only one GPU lists (MI50's MLIR non-xdlops implicit GEMMs are
# implicit GEMMs, MLIR, no matrix cores; gfx908's Winograd binaries are Winograd F(m, r) tiles).
KIND_FEATURES = ("kind_xdlops", "kind_dlops", "kind_layout", "kind_filter", "kind_stride", "kind_wino_m",
                 "kind_wino_r", "kind_multipass", "kind_dynamic", "kind_grouped", "kind_3d", "kind_igemm_version",
                 "kind_padded", "kind_variant")
_FILTER_MARKS = (("11x11", 11), ("1x1", 1), ("3x3", 3), ("5x10", 5), ("7x7", 7))  # the filter it is written for
_IGEMM_VERSIONS = (("V1R1", 1.1), ("V4R1", 4.1), ("V4R4", 4.4), ("V4R5", 4.5), ("V6R1", 6.1), ("GTC", 7.0))
# the stride it is written for: GemmFwd1x1_0_2 is pad 0 stride 2, ConvAsm1x1UV2 and the u2v2 kernels stride 2
_STRIDE_MARKS = (("_0_2", 2), ("stride2", 2), ("UV2", 2), ("u2v2", 2), ("_0_1", 1), ("stride1", 1))
# what else tells two solvers of one kind apart: a generation (RxSf2x3g1), a generic or non-tunable
# kernel (ConvOclDirectFwdGen, ConvOclBwdWrW2NonTunable), a universal or "rest" GEMM, a template argument
_VARIANT_MARKS = (("g1", 1), ("Gen", 2), ("NonTunable", 3), ("Universal", 4), ("Rest", 4))


def kind_of(name: str) -> tuple[float, ...]:
    """The solver's kind in :data:`KIND_FEATURES` order, read from its MIOpen name: matrix-core
    (xdlops) and dot (dlops) instructions; the layout it is written for (1 NCHW, 2 NHWC, 0 any); the
    filter it is written for (1 for 1x1 ... 11 for 11x11, 0 any) and stride (0 any); its Winograd
    tile F(m, r) (0, 0 when it names none); multipass; dynamic (asm kernels not compiled per problem);
    grouped; 3D; its implicit-GEMM generation (V4R4 is 4.4, the GTC kernels 7); padded GEMM; a variant
    code telling apart solvers of one kind otherwise (g1, Gen, NonTunable, Universal/Rest, 10 + a
    template argument)."""
    import re

    base, _, args = name.partition("<")
    low, up = name.lower(), base.upper()
    tile = re.search(r"f(\d)x(\d)", base) or re.match(r"(?:1-1-)?(\d)-(\d)", args)
    layout = 2.0 if "NHWC" in up else 1.0 if "NCHW" in up else 0.0
    filt = next((v for mark, v in _FILTER_MARKS if mark in low), 0)
    stride = next((v for mark, v in _STRIDE_MARKS if mark in base), 0)
    variant = next((v for mark, v in _VARIANT_MARKS if base.endswith(mark)), 0)
    if not variant and args and not tile:  # ConvOclBwdWrW2<16>: its template argument
        variant = 10 + int(re.match(r"\d+", args).group())
    elif args.count("-") == 3:  # ConvWinograd3x3MultipassWrW<7-2-1-1> and <1-1-7-2> beside <7-2>
        variant = 5 if args.startswith("1-1-") else 6
    version = next((v for mark, v in _IGEMM_VERSIONS if mark in up), 0.0)
    return (float("xdlops" in low), float("dlops" in low and "xdlops" not in low), layout, float(filt), float(stride),
            float(tile.group(1)) if tile else 0.0, float(tile.group(2)) if tile else 0.0,
            float("multipass" in low or base.startswith("ConvMP")), float("dynamic" in low),
            float("group" in low), float("3d" in low), version, float("padded" in low), float(variant))


TABLES_DIR = Path(__file__).resolve().parent / "solver_tables"  # <direction>.yaml: solvers per arch, registry


def solver_tables(direction: str) -> dict:
    """The shipped ``solver_tables/<direction>.yaml``: ``solvers`` (arch -> its table) and
    ``registry`` (every solver MIOpen registers for the direction); {} for another direction."""
    from ckheur.config import load_yaml

    path = TABLES_DIR / f"{direction}.yaml"
    return load_yaml(path) if path.is_file() else {}


def _table(op: Mapping[str, Any], arch: Mapping[str, Any]) -> list:
    """The arch's solver table: the op's own (``op.solvers.<arch>``: a bundle's, or the command
    line's), else :func:`arch_table`."""
    return list((op.get("solvers") or {}).get(arch["name"]) or arch_table(op["direction"], arch["name"]))


def arch_in(arch: str, patterns: Sequence[str] | None) -> bool:
    """Whether device patterns (fnmatch's: ``gfx94*`` is a name prefix) name ``arch``; None names every arch."""
    from fnmatch import fnmatchcase

    return patterns is None or any(fnmatchcase(arch, w) for w in patterns)


def registry_table(direction: str, arch: str) -> list[dict]:
    """The solvers of the direction's registry that MIOpen's IsApplicable lets run on ``arch``:
    every one whose ``only_on`` (device patterns, from tools/miopen_solvers.py) names it or that
    has none. The table of an arch the shipped tables do not declare."""
    return [_registry_row(s) for s in solver_tables(direction).get("registry") or []
            if arch_in(arch, s.get("only_on"))]


def _registry_row(s: Mapping[str, Any]) -> dict:
    return {k: v for k, v in s.items() if k != "only_on"}


def arch_table(direction: str, arch: str, measured: Collection[str] = ()) -> list[dict]:
    """The shipped table of ``arch`` (from its find-db, or for gfx908 the registry), else
    :func:`registry_table`; with the registry's solvers ``measured`` there that it lacks (a find-db
    of the arch lists them: they run there, whatever the table says). KernelError for a direction
    with neither."""
    table = list(_declared(direction).get(arch) or registry_table(direction, arch))
    have = {s["name"] for s in table}
    table += [_registry_row(s) for s in solver_tables(direction).get("registry") or []
              if s["name"] in measured and s["name"] not in have]
    if not table:
        raise KernelError(f"no MIOpen solver table for direction {direction!r} on arch {arch!r} "
                          "(ckheur/families/miopen/solver_tables/<fwd|bwd_data|bwd_weight>.yaml declares them)")
    return table


def table_source(op: Mapping[str, Any], arch: Mapping[str, Any]) -> str:
    """Where the arch's table comes from, in words, where the shipped tables do not declare it ('' else)."""
    name = arch["name"]
    if (op.get("solvers") or {}).get(name) or _declared(op["direction"]).get(name):
        return ""
    return (f"op=miopen/{op['direction']} on {name}: no solver table measured for it; MIOpen's registry gives "
            f"{len(registry_table(op['direction'], name))} solvers whose IsApplicable does not keep them to other "
            "GPUs (op.available=<your MIOpen's db folder> keeps those your MIOpen ships)")


def _declared(direction: str) -> dict[str, list]:
    return solver_tables(direction).get("solvers") or {}


def _declared_names(direction: str) -> dict[str, tuple[str, ...]]:
    """Per arch, the solver names the shipped tables declare ({} for another direction)."""
    return {a: tuple(str(s["name"]) for s in t or []) for a, t in _declared(direction).items()}


def table_names(direction: str, arch: str) -> list[str]:
    """The solver names of the arch's table (:func:`arch_table`): the only names an outside file
    (a find-db, a bundle) may give; KernelError when there is none."""
    return [str(s["name"]) for s in arch_table(direction, arch)]


def candidates(op: Mapping[str, Any], arch: Mapping[str, Any]) -> tuple[list, list]:
    """The op's solver table for the arch, its solvers the user's MIOpen ships (``op.available``)."""
    table, _ = available_table(op, arch)
    return [Solver(name=s["name"], direction=op["direction"], solver_id=int(s["id"]), algorithm=s["algorithm"],
                   implementation=s["implementation"], workspace=bool(s["workspace"])) for s in table], []


AVAILABLE_HELP = ("a list of solver names, or a path to MIOpen's files that name them (a find-db "
                  "<arch><CUs>.HIP.fdb.txt[.bz2], a perf-db *.db.txt or *.db, or a folder of them such as "
                  "/opt/rocm/share/miopen/db); null: every solver of the table")


def available_of(op: Mapping[str, Any]) -> frozenset | None:
    """The solvers the user's MIOpen ships (``op.available``: names, or a path read through
    ``ckheur.formats.SOLVER_NAMES``), or None (every solver). A KernelError names the field and
    what it takes: a name that is no solver of the direction's tables, a path naming none."""
    given = op.get("available")
    if given is None:
        return None
    direction = op["direction"]
    known = set(_registry_names(direction)).union(*_declared_names(direction).values(),
                                                    *({str(x["name"]) for x in t or []}
                                                      for t in (op.get("solvers") or {}).values()))
    if isinstance(given, (str, Path)):  # MIOpen's files: every direction's solvers; this direction's kept
        names = known.intersection(_names_in_files(str(given)))
        if not names:
            raise KernelError(f"op.available={given}: names no {direction} solver of ckheur's tables; it takes "
                              f"{AVAILABLE_HELP}")
        return frozenset(names)
    if isinstance(given, (bytes, Mapping)) or not hasattr(given, "__iter__"):
        raise KernelError(f"op.available={str(given)[:80]!r}: {AVAILABLE_HELP}")
    names = [str(n) for n in given]
    unknown = sorted({n for n in names if n not in known})
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise KernelError(f"op.available: {shown} {'is' if len(unknown) == 1 else 'are'} no {direction} solver of "
                          f"ckheur's tables (ckheur/families/miopen/solver_tables/{direction}.yaml; stage=list "
                          f"op=miopen/{direction} arch=<gfx> prints an arch's); op.available takes {AVAILABLE_HELP}")
    if not names:
        raise KernelError(f"op.available=[]: names no solver; it takes {AVAILABLE_HELP}")
    return frozenset(names)


def _registry_names(direction: str) -> tuple[str, ...]:
    return tuple(str(s["name"]) for s in solver_tables(direction).get("registry") or [])


@functools.lru_cache(maxsize=8)
def _read_names(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """The solver names MIOpen's files at ``path`` list, read once per version of them."""
    from ckheur.formats import SOLVER_NAMES, resolve

    return tuple(resolve(SOLVER_NAMES["miopen"])(path))


def _names_in_files(path: str) -> tuple[str, ...]:
    """:func:`_read_names` of a path, keyed by its newest modification time and total size (a folder's
    with its files': a file added, changed or removed is read anew)."""
    import os

    try:
        st = os.stat(path)
        stamps = [st] + ([os.stat(e.path) for e in os.scandir(path) if e.is_file()] if os.path.isdir(path) else [])
    except OSError:
        stamps = []
    return _read_names(os.path.realpath(path), max((s.st_mtime_ns for s in stamps), default=0),
                       sum(s.st_size for s in stamps))


def available_table(op: Mapping[str, Any], arch: Mapping[str, Any]) -> tuple[list, list[str]]:
    """The arch's table (:func:`_table`) cut to ``op.available``, and the names it drops; a
    KernelError when none is left."""
    table = _table(op, arch)
    avail = available_of(op)
    if avail is None:
        return table, []
    kept = [s for s in table if s["name"] in avail]
    if not kept:
        raise KernelError(f"op.available keeps none of the {len(table)} solvers of the {arch['name']} "
                          f"{op['direction']} table; it takes {AVAILABLE_HELP}")
    return kept, [str(s["name"]) for s in table if s["name"] not in avail]


def available_note(op: Mapping[str, Any], arch: Mapping[str, Any]) -> str:
    """Where the arch's table comes from (:func:`table_source`) and what ``op.available`` keeps of
    it, in words; unset, whether the table ranks MIOpen's MLIR GEMMs, which not every MIOpen build runs."""
    lines = [table_source(op, arch)]
    if op.get("available") is None:  # the MLIR GEMMs depend on MIOpen's build: MI60's, MI300X's, RDNA2's files list none
        mlir = [s["name"] for s in _table(op, arch) if str(s["name"]).startswith("ConvMlirIgemm")]
        if mlir:
            lines.append(f"op.available is not set: {', '.join(mlir)} ranked too, which only MIOpen built with MLIR "
                         "runs (MI60's file lists none of gfx906's); op.available=<your MIOpen's db folder> leaves "
                         "out what yours lacks")
    else:
        table, dropped = available_table(op, arch)
        shown = ", ".join(dropped[:8]) + (f" and {len(dropped) - 8} more" if len(dropped) > 8 else "")
        lines.append(f"op.available: every one of the {len(table)} solvers of the {arch['name']} {op['direction']} "
                     "table" if not dropped else
                     f"op.available: keeps {len(table)} of the {len(table) + len(dropped)} solvers of the "
                     f"{arch['name']} {op['direction']} table; not in the MIOpen given: {shown}")
    return "\n".join(filter(None, lines))


def resolved_op(op: Mapping[str, Any]) -> dict:
    """The op with ``op.available`` as the sorted names it gives (a path read once, here), checked."""
    avail = available_of(op)
    return dict(op) if avail is None else {**op, "available": sorted(avail)}


# A solver of an arch's table that takes a data type on some archs only: MIOpen's IsApplicable names
# the devices (shell patterns: gfx94* is a name prefix; none: on no arch). Each agrees with the six
# find-dbs: none lists a solver for a data type its rule here leaves out.
# - conv_asm_implicit_gemm_gtc_{fwd,bwd,wrw}_nhwc.cpp: BF16 on gfx90a only, then also gfx94* and later
#   gfx95*; never on gfx908, which runs them in FP32 and FP16 (gfx90a's bundles pick them first for
#   20-41% of its BF16 problems);
# - conv_winoRxS.cpp (IsApplicableBase, also ConvBinWinogradRxSf2x3g1's): FP32 and FP16 only, FP16 on
#   these archs only, not gfx900 (Vega 56's find-db lists them in FP32 and never in FP16);
#   conv_bin_winoRxS.cpp: FP16 on gfx906 and gfx908 only, never BF16 (a structure below);
# - conv_asm_implicit_gemm_{,bwd_,wrw_}v4r1_dynamic.cpp: FP32 only (gfx900 and gfx906: their tables);
# - the MLIR implicit GEMMs (conv_mlir_igemm_*.cpp) pass BF16 to rocMLIR, whose applicability check
#   (rocmlir-lib.cpp, RockEnabled) refuses it: no find-db lists one in BF16;
# - conv_multipass_wino3x3WrW.cpp: F3x4, F3x5 and F3x6 in FP16 on gfx906 and gfx908 only with a
#   debug variable set (WORKAROUND_SWDEV_234193), off by default; MI50's and MI60's files never list
#   them in FP16, the other multipass variants they do;
# - conv_wino_fury_RxS.cpp: FP16 only (gfx11 and gfx12, the registry's only_on).
_WINO_RXS_FP16 = ("gfx906", "gfx908", "gfx90a", "gfx94*", "gfx95*", "gfx1011", "gfx1012", "gfx103*", "gfx11*")
_NONE: tuple[str, ...] = ()
DTYPE_ARCHS = {**{f"ConvAsmImplicitGemmGTCDynamic{d}XdlopsNHWC": {"bf16": ("gfx90a", "gfx94*", "gfx95*")}
                  for d in ("Fwd", "Bwd", "Wrw")},
               **{n: {"fp16": _WINO_RXS_FP16, "bf16": _NONE} for n in ("ConvBinWinogradRxSf2x3",
                                                                        "ConvBinWinogradRxSf3x2",
                                                                        "ConvBinWinogradRxSf2x3g1")},
               "ConvBinWinogradRxS": {"fp16": ("gfx906", "gfx908")},
               **{f"ConvAsmImplicitGemmV4R1Dynamic{d}": {"fp16": _NONE, "bf16": _NONE}
                  for d in ("Fwd", "Fwd_1x1", "Bwd", "Wrw")},
               **{f"ConvMlirIgemm{d}{x}": {"bf16": _NONE} for d in ("Fwd", "Bwd", "WrW") for x in ("", "Xdlops")},
               **{f"ConvWinograd3x3MultipassWrW<3-{f}>": {"fp16": ("gfx8*", "gfx900", "gfx90a")} for f in (4, 5, 6)},
               "ConvWinoFuryRxSf2x3": {"fp32": _NONE, "bf16": _NONE}}
# Solvers whose IsApplicable rejects gfx90a for a problem that needs MIOpen's FP16 "alternate
# implementation" (IsGfx90aFp16altRequired; MI200's FP16 matrix instructions flush subnormals). MIOpen
# engages it by default in backward data and backward weights (docs/MI200AlternateImplementation.md),
# so these take no backward FP16 problem on gfx90a: conv_winoRxS.cpp, conv_asm_1x1u.cpp,
# conv_asm_dir_BwdWrW1x1.cpp, conv_hip_implicit_gemm_fwd_v4r1.cpp (its WrW), the static-CK xdlops
# solvers (..._wrw_v4r4_xdlops[_padded_gemm].cpp, ..._bwd_v4r1_xdlops.cpp, ..._bwd_v1r1_xdlops.cpp), CK's
# NHWC one (conv_hip_implicit_gemm_bwd_data_xdlops.cpp) and the multipass Winograds. MI210/250's file
# lists each in FP32 and none in backward FP16.
FP16_ALT_REJECTS = frozenset({"ConvBinWinogradRxSf2x3", "ConvBinWinogradRxSf3x2", "ConvBinWinogradRxSf2x3g1",
                              "ConvAsm1x1U", "ConvAsmBwdWrW1x1", "ConvHipImplicitGemmV4R1WrW",
                              "ConvHipImplicitGemmWrwV4R4Xdlops", "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm",
                              "ConvHipImplicitGemmBwdDataV4R1Xdlops", "ConvHipImplicitGemmBwdDataV1R1Xdlops",
                              "ConvHipImplicitGemmBwdXdlops", "ConvWinograd3x3MultipassWrW"})


def rejections(kernels: Sequence[Solver], op: Mapping[str, Any], arch: Mapping[str, Any]) -> list[list[str]]:
    """Why a solver of the arch's table cannot take the op's data type there (DTYPE_ARCHS, and
    gfx90a's backward FP16: FP16_ALT_REJECTS); no code-generation rules apply to solvers: otherwise
    the declared table is the pool."""
    dtype, name = op.get("dtype"), arch["name"]
    alt = dtype == "fp16" and name == "gfx90a" and op.get("direction") in ("bwd_data", "bwd_weight")
    out = []
    for k in kernels:
        archs = DTYPE_ARCHS.get(k.name, {}).get(dtype)
        why = [] if arch_in(name, archs) else \
            [f"{dtype} on {', '.join(archs)} only (MIOpen's IsApplicable), not {name}" if archs else
             f"no {dtype} on any arch (MIOpen's IsApplicable)"]
        if alt and solver_class(k.name) in FP16_ALT_REJECTS:
            why.append("not gfx90a's backward fp16, which runs MIOpen's FP16 alternate implementation by default "
                       "(IsGfx90aFp16altRequired)")
        out.append(why)
    return out


def parse_name(name: str, op: Mapping[str, Any] | None = None, arch: Mapping[str, Any] | None = None) -> Solver:
    """A solver by its MIOpen name, from the op's solver table for the arch."""
    if op is not None and arch is not None:
        for s in candidates(op, arch)[0]:
            if s.name == name:
                return s
        raise KernelError(f"solver {name!r} is not in the {op['direction']} table for {arch['name']}")
    raise KernelError(f"solver {name!r}: give the op and arch whose solver table declares it")


SOLVER_ID_MAX = 1 << 20  # a solver's code in this ckheur's tables (the largest declared is below 200)


def from_traits(d: Mapping[str, Any], op: Mapping[str, Any] | None = None) -> Solver:
    """A solver from its traits (a kernels.json object), each checked (``kernel_base.checked_traits``;
    ``op``: the bundle's, whose direction it must have); ``check_known`` then asks the solver table."""
    from ckheur.config import Direction

    return checked_traits(Solver, d, {"direction": tuple(x.value for x in Direction), "solver_id": (0, SOLVER_ID_MAX),
                                      "algorithm": ALGORITHMS, "implementation": IMPLEMENTATIONS}, op)


# Which solvers are ranked for a problem (``op.applicability``): ``none`` every solver of the table
# (what the model learns to rank last when it does not apply); ``rules`` only those MIOpen's own
# IsApplicable does not reject (the rules below; the default); ``listed`` only those the find-db the
# op learned from lists for problems of the same kind (``op.listed``); ``both`` the two together
# (the shipped bundles rank so).
APPLICABILITY = ("none", "rules", "listed", "both")


def support_arrays(kernels: Sequence[Solver]) -> dict:
    """The solver names, which the listed table keys on, and each one's applicability checks (its
    structure and its rule, :func:`rule_rejections`), looked up once per pool."""
    names = [k.name for k in kernels]
    return {"n": len(kernels), "name": names, "checks": [(structure_of(n), RULES.get(n)) for n in names]}


GROUP_KINDS = ("dense", "depthwise", "grouped")
FILTER_KINDS = ("1x1", "square", "rect")


def group_kind(G: int, C: int) -> str:
    """``dense`` (one group), ``depthwise`` (one input channel per group) or ``grouped``."""
    return "dense" if G == 1 else "depthwise" if C == G else "grouped"


def filter_kind(dims: Sequence[int]) -> str:
    """``1x1`` (every filter dimension 1), ``square`` (all equal) or ``rect`` (1xN, Nx1, ...)."""
    return "1x1" if all(d == 1 for d in dims) else "square" if len(set(dims)) == 1 else "rect"


def listing_kind(layout: str, dtype: str, G: int, C: int, dims: Sequence[int]) -> str:
    """The kind of problem the listed rule keys on: layout (which says 2D or 3D), data type, group
    kind and filter kind, e.g. ``NCHW/fp16/depthwise/rect``."""
    return f"{layout}/{dtype}/{group_kind(G, C)}/{filter_kind(dims)}"


def problem_kind(p: Any, dtype: str) -> str:
    """:func:`listing_kind` of a MIOpen problem (``MIOpenConvProblem``) of a data type."""
    dims = (p.Z, p.Y, p.X) if p.ndim == 3 else (p.Y, p.X)
    return listing_kind(p.layout, dtype, p.G, p.C, dims)


def _c_rule(name: str, arg: int = 0) -> Any:
    """Names a rule's C twin (``case CKH_RULE_<name>:`` in ckheur/families/miopen/miopen.c), which
    the C export applies to the solvers this rule serves, with ``arg`` (a rule made for one of a
    family of solvers passes what sets it apart, e.g. a template argument)."""
    def mark(rule: Any) -> Any:
        rule.c_rule, rule.c_arg = name, arg
        return rule
    return mark


def listed_kinds(rows: Any) -> dict[str, list[str]]:
    """For each solver of ``rows`` (a frame of listed measurements: columns layout, dtype, G, C, Z,
    Y, X and kernel), the kinds of problem it is listed for (:func:`listing_kind`): ``op.listed``."""
    cols = ["layout", "dtype", "G", "C", "Z", "Y", "X"]
    kind_of = {k: listing_kind(k[0], k[1], k[2], k[3], (k[4], k[5], k[6]) if "D" in k[0] else (k[5], k[6]))
               for k in rows[cols].drop_duplicates().itertuples(index=False, name=None)}
    out: dict[str, set] = {}
    for *key, solver in rows[[*cols, "kernel"]].itertuples(index=False, name=None):
        out.setdefault(str(solver), set()).add(kind_of[tuple(key)])
    return {s: sorted(k) for s, k in sorted(out.items())}


def learned_op(df: Any, op: Mapping[str, Any]) -> dict:
    """The op, with ``op.listed`` learned from the measurements ``df`` (rows this ckheur measured or
    imported: the solvers with status ok are the listed ones) when its applicability needs one and
    none is given; the op as it is otherwise."""
    op = dict(op)
    if str(op.get("applicability") or "none") not in ("listed", "both") or op.get("listed"):
        return op
    mine = df[(df.direction == op["direction"]) & (df.status == "ok")]  # timed: listed (censored: not)
    if mine.empty:
        raise KernelError(f"op.applicability={op['applicability']}: no measured {op['direction']} row to learn "
                          "op.listed from; give op.listed or op.applicability=rules")
    return {**op, "listed": listed_kinds(mine)}


@_c_rule("OCL_DIRECT_FWD")
def _ocl_direct_fwd(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_ocl_dir2D.cpp, ConvOclDirectFwd::IsApplicable
    why = []
    if p.ndim != 2 or p.layout != "NCHW":
        why.append("2D NCHW only")
    if direction == "bwd_weight":
        why.append("forward and backward data only")
    if p.pad_h != p.pad_w or p.stride_h != p.stride_w:
        why.append("equal H and W pads and strides only")
    if p.dilation_h != 1 or p.dilation_w != 1:
        why.append("no dilation")
    if max(p.stride_h, p.stride_w) > 2:
        why.append("strides up to 2")
    if p.G == 1:
        if p.Y == 1 and p.X == 1:
            why.append("ungrouped 1x1 is left to the 1x1 solvers")
        elif not ((p.Y == p.X and p.Y in (3, 5, 7, 9, 11))
                  or (p.Y == 5 and p.X in (10, 20) and p.stride_h == p.stride_w == 2 and p.pad_h == p.pad_w == 0)
                  or (dtype == "fp16" and p.Y == p.X == 4 and p.pad_h == p.pad_w == 0)):
            why.append("ungrouped filters: square 3, 5, 7, 9 or 11, 5x10 / 5x20 at stride 2, or fp16 4x4 unpadded")
    if direction == "fwd" and dtype == "fp16" and p.stride_w == 2:
        why.append("not forward fp16 at stride 2")
    return why


@_c_rule("ASM_1X1U")
def _asm_1x1u(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_asm_1x1u.cpp, ConvAsm1x1U::IsApplicable
    why = []
    if p.ndim != 2 or p.layout != "NCHW":
        why.append("2D NCHW only")
    if direction == "bwd_weight" or dtype not in ("fp32", "fp16"):
        why.append("forward and backward data, fp32 and fp16 only")
    if (p.Y, p.X, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.G, p.bias) != (1, 1, 0, 0, 1, 1, 1, 0):
        why.append("ungrouped unpadded undilated 1x1 without bias only")
    if p.stride_h != p.stride_w or p.stride_w > 2:
        why.append("equal strides up to 2")
    return why


def _gemm_1x1(stride: str) -> Any:
    def rule(p: Any, direction: str, dtype: str) -> list[str]:
        # gemm.cpp, GemmFwd1x1_0_1 / GemmFwd1x1_0_2 (gemm_bwd.cpp, gemm_wrw.cpp: their 1x1 twins) IsApplicable
        dims = (p.Z, p.Y, p.X, p.pad_d, p.pad_h, p.pad_w) if p.ndim == 3 else (p.Y, p.X, p.pad_h, p.pad_w)
        strides = (p.stride_d, p.stride_h, p.stride_w) if p.ndim == 3 else (p.stride_h, p.stride_w)
        why = [] if dims == (1,) * (len(dims) // 2) + (0,) * (len(dims) // 2) else ["unpadded 1x1 only"]
        if stride == "1" and any(s != 1 for s in strides):
            why.append("stride 1 only")
        if stride == "2" and all(s == 1 for s in strides):
            why.append("a stride above 1 only")
        return why
    return _c_rule(f"GEMM_1X1_STRIDE{stride}")(rule)


def _layout(layouts: tuple, ndim: int, where: str) -> Any:
    def rule(p: Any, direction: str, dtype: str) -> list[str]:
        # where: the solver's IsApplicable checks the layout and the dimensionality
        return [] if p.layout in layouts and p.ndim == ndim else [f"{ndim}D {' or '.join(layouts)} only ({where})"]
    return _c_rule(f"LAYOUT_{'_'.join(layouts)}")(rule)


@_c_rule("FFT")
def _fft(p: Any, direction: str, dtype: str) -> list[str]:
    # fft.cpp, fft::IsApplicable
    ok = (dtype == "fp32" and direction != "bwd_weight" and p.layout == "NCHW" and p.G == 1
          and p.dilation_h == p.dilation_w == 1)
    return [] if ok else ["2D NCHW ungrouped undilated fp32, forward and backward data only"]


@_c_rule("WINOGRAD_RXS")
def _winograd_rxs(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_winoRxS.cpp, ConvBinWinoRxS<2,3> / <3,2>::IsApplicableBase (older sources also refuse
    # stride 2 for <3,2>; the newer, more permissive rule is kept)
    why = [] if p.layout == "NCHW" else ["2D NCHW only"]
    if p.stride_h != p.stride_w or p.stride_w > 2:
        why.append("equal strides of 1 or 2")
    if direction == "bwd_weight" and p.stride_w != 1:
        why.append("backward weights at stride 1 only")
    if p.dilation_h != 1 or p.dilation_w != 1 or p.bias:
        why.append("undilated, without bias")
    if direction == "bwd_data" and (p.pad_h >= p.Y or p.pad_w >= p.X):
        why.append("backward data: pads below the filter size")  # its backward pad, filter - pad - 1, is >= 0
    return why


@_c_rule("WINOGRAD_RXS_F2X3")
def _winograd_rxs_f2x3(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_winoRxS.cpp, ConvBinWinoRxS<2,3>::IsApplicable: the base rules; ungrouped problems only in
    # backward weights (ConvBinWinogradRxSf2x3g1 serves the others)
    why = _winograd_rxs(p, direction, dtype)
    return why + (["one group: backward weights only"] if p.G == 1 and direction != "bwd_weight" else [])


@_c_rule("WINOGRAD_RXS_G1")
def _winograd_rxs_g1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_winoRxS.cpp, ConvBinWinogradRxSf2x3g1::IsApplicable: the base rules and one group
    return _winograd_rxs(p, direction, dtype) + ([] if p.G == 1 else ["one group only"])


@_c_rule("ASM_WRW_1X1")
def _asm_wrw_1x1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_asm_dir_BwdWrW1x1.cpp, ConvAsmBwdWrW1x1::IsApplicable (layout, group: STRUCTURES)
    ok = (p.Y, p.X, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.bias) == (1, 1, 0, 0, 1, 1, 0) \
        and p.stride_h == p.stride_w <= 2
    return [] if ok else ["unpadded undilated 1x1 without bias, equal strides up to 2"]


@_c_rule("ASM_3X3U")
def _asm_3x3u(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_asm_3x3u.cpp, ConvAsm3x3U::IsApplicable (layout, data type: STRUCTURES). Its input is the
    # direction's: x forward, dy backward data (same width here: 3x3, pad 1, stride 1)
    why = []
    if (p.Y, p.X, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h, p.dilation_w) != (3, 3, 1, 1, 1, 1, 1, 1):
        why.append("3x3, pad 1, stride 1, undilated only")
    if direction == "bwd_weight":
        why.append("forward and backward data only")
    if ((p.C if direction == "fwd" else p.K) // p.G) % 4:
        why.append("input channels per group a multiple of 4")
    if not 3 < p.Wi <= 1000:
        why.append("input width 4 to 1000")
    return why


@_c_rule("OCL_FWD_1X1")
def _ocl_fwd_1x1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_ocl_dir2Dfwd1x1.cpp, ConvOclDirectFwd1x1::IsApplicable (layout, group: STRUCTURES)
    why = [] if (p.Y, p.X, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w) == (1, 1, 0, 0, 1, 1) \
        else ["unpadded undilated 1x1 only"]
    return why + (["forward and backward data only"] if direction == "bwd_weight" else [])


@_c_rule("OCL_FWD_GEN")
def _ocl_fwd_gen(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_ocl_dir2Dfwdgen.cpp, ConvOclDirectFwdGen::IsApplicable (layout, group: STRUCTURES): a
    # filter over 11, or a strided one that is not 1x1 (older sources took a list of square filters)
    why = [] if direction == "fwd" else ["forward only"]
    if p.stride_h != p.stride_w or p.pad_h != p.pad_w or p.dilation_h != 1 or p.dilation_w != 1:
        why.append("equal strides and pads, undilated")
    if not (max(p.Y, p.X) > 11 or ((p.Y, p.X) != (1, 1) and p.stride_h > 1)):
        why.append("a filter over 11, or a strided one that is not 1x1")
    return why


@_c_rule("OCL_WRW_1X1")
def _ocl_wrw_1x1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_ocl_dir2D_bwdWrW_1x1.cpp, ConvOclBwdWrW1x1::IsApplicable (layout, group: STRUCTURES)
    ok = (p.Y, p.X, p.dilation_h, p.dilation_w) == (1, 1, 1, 1) and p.C % 16 == 0 and p.K % 16 == 0
    return [] if ok else ["undilated 1x1, C and K multiples of 16"]


@_c_rule("OCL_WRW_53")
def _ocl_wrw_53(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_ocl_dir2D_bwdWrW_53.cpp, ConvOclBwdWrW53::IsApplicable (its LDS and workaround checks not
    # carried: they reject more)
    ok = (p.stride_h, p.stride_w, p.dilation_h, p.dilation_w) == (1, 1, 1, 1) and p.pad_h < p.Y \
        and p.Y <= p.Hi + 2 * p.pad_h
    return [] if ok else ["stride 1, undilated, pad below the filter height, filter within the padded input"]


def _ocl_wrw_2(batch_loops: int, tunable: bool) -> Any:
    def rule(p: Any, direction: str, dtype: str) -> list[str]:
        # conv_ocl_dir2D_bwdWrW_2.cpp, ConvOclBwdWrW2<N>::IsApplicableBase and its default
        # configuration (filter height 2 to 11, output width at least its read size, 6); the tunable
        # solvers leave ungrouped 3x3 and 1x1 to ConvOclBwdWrW2NonTunable
        why = []
        if p.dilation_h != 1 or p.dilation_w != 1 or p.Y - p.stride_h < p.pad_h:
            why.append("undilated, pad at most filter height minus stride")
        if p.N < batch_loops:
            why.append(f"batch at least {batch_loops}")
        if not 2 <= p.Y <= 11 or p.Wo < 6:
            why.append("filter height 2 to 11, output width at least 6")
        special = p.Y == 5 and p.X in (10, 20) and p.stride_h == p.stride_w == 2 \
            and (p.Hi, p.Wi) in ((79, 341), (161, 700))
        if p.X >= 8 and p.X % 2 == 0 and not special:
            why.append("no even filter width of 8 or more")
        small = p.G == 1 and (p.Y, p.X) in ((3, 3), (1, 1))
        if small == tunable:
            why.append("ungrouped 3x3 or 1x1: the non-tunable solver's" if tunable else "ungrouped 3x3 or 1x1 only")
        return why
    return _c_rule("OCL_WRW_2", 2 * batch_loops + tunable)(rule)


def _wino_multipass_wrw(name: str) -> Any:
    # conv_multipass_wino3x3WrW.cpp, ConvWinograd3x3MultipassWrW<DH, FH[, DW, FW]>::IsApplicable: the
    # filter is DH x DW; equal strides, 1 or (3x3 only) 2, where <3,2> and <3,3> take stride 2 only
    # and <3,4>..<3,6> either; undilated, no bias, pads up to 3 (layout, group: STRUCTURES)
    args = [int(a) for a in name[name.index("<") + 1:-1].split("-")]
    dh, fh, dw = args[0], args[1], args[2] if len(args) > 2 else args[0]
    strides = (2,) if (dh, dw, fh) in ((3, 3, 2), (3, 3, 3)) else (1, 2) if (dh, dw) == (3, 3) else (1,)

    def rule(p: Any, direction: str, dtype: str) -> list[str]:
        ok = (p.Y, p.X) == (dh, dw) and p.stride_h == p.stride_w and p.stride_h in strides \
            and (p.dilation_h, p.dilation_w, p.bias) == (1, 1, 0) and max(p.pad_h, p.pad_w) <= 3
        return [] if ok else [f"a {dh}x{dw} filter, stride {' or '.join(map(str, strides))}, undilated, "
                              "no bias, pads up to 3"]
    return _c_rule("WINO_MULTIPASS_WRW", 100 * dh + 10 * dw + sum(1 << (s - 1) for s in strides))(rule)


def _xdlops_grid(m: int, n: int, k: int) -> bool:
    """implicitgemm_static_ck_util.hpp, IsValidGridGemmXdlops: a GEMM M x N x K the xdlops tiles cover."""
    if m % 16 and n % 64:
        return False
    return (m * n) % 256 == 0 and (k * m) % 64 == 0 and (k * n) % 64 == 0 and n % 16 == 0 and m % 4 == 0 and k % 4 == 0


def _fwd_gemm(p: Any) -> tuple[int, int, int]:
    """The forward implicit GEMM of the static-CK solvers: K/G x N*Ho*Wo x C/G*Y*X."""
    return p.K // p.G, p.N * p.Ho * p.Wo, (p.C // p.G) * p.Y * p.X


@_c_rule("FWD_V4R4_XDLOPS")
def _fwd_v4r4_xdlops(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_fwd_v4r4_xdlops.cpp, IsApplicable: IsValidGridGemmXdlops of its GEMM
    return [] if _xdlops_grid(*_fwd_gemm(p)) else ["its GEMM (K/G x N*Ho*Wo x C/G*Y*X) on the xdlops grid"]


@_c_rule("FWD_V4R5_XDLOPS")
def _fwd_v4r5_xdlops(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_fwd_v4r5_xdlops.cpp, IsApplicable: no 1x1 filter, the V4R4 grid check
    return (["not 1x1"] if p.Y == 1 and p.X == 1 else []) + _fwd_v4r4_xdlops(p, direction, dtype)


@_c_rule("FWD_V4R4_XDLOPS_PADDED")
def _fwd_v4r4_xdlops_padded(p: Any, direction: str, dtype: str) -> list[str]:
    # ..._fwd_v4r4_xdlops_padded_gemm.cpp, IsApplicable: only a GEMM that needs padding (to 16 x 64 x 4)
    m, n, k = _fwd_gemm(p)
    return ["its GEMM needs no padding"] if m % 16 == 0 and n % 64 == 0 and k % 4 == 0 else []


@_c_rule("WRW_V4R4_XDLOPS")
def _wrw_v4r4_xdlops(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_wrw_v4r4_xdlops.cpp: GEMM K/G x C/G*Y*X x (N/kb)*Ho*Wo (kb depends on the
    # GPU), on the xdlops grid: the parts that do not depend on kb
    m, n = p.K // p.G, (p.C // p.G) * p.Y * p.X
    ok = m % 4 == 0 and n % 16 == 0 and (m % 16 == 0 or n % 64 == 0) and (m * n) % 256 == 0 \
        and (p.N * p.Ho * p.Wo) % 4 == 0
    return [] if ok else ["its GEMM (K/G x C/G*Y*X x N*Ho*Wo) on the xdlops grid"]


@_c_rule("WRW_V4R4_XDLOPS_PADDED")
def _wrw_v4r4_xdlops_padded(p: Any, direction: str, dtype: str) -> list[str]:
    # ..._wrw_v4r4_xdlops_padded_gemm.cpp, IsApplicable: only a GEMM that needs padding (to 16 x 64 x 16)
    ok = (p.K // p.G) % 16 == 0 and ((p.C // p.G) * p.Y * p.X) % 64 == 0 and (p.Ho * p.Wo) % 16 == 0
    return ["its GEMM needs no padding"] if ok else []


@_c_rule("FWD_V4R1")
def _fwd_v4r1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_fwd_v4r1.cpp, ConvHipImplicitGemmV4R1Fwd::IsApplicable (C in packs of 2
    # and C/G*Y*X in multiples of 16 outside fp32, else 1 and 8)
    c, k, pix = p.C // p.G, p.K // p.G, p.N * p.Ho * p.Wo
    pack, multiple = (1, 8) if dtype == "fp32" else (2, 16)
    ok = c % pack == 0 and p.N % 8 == 0 and pix % 32 == 0 and (pix * k) % 1024 == 0 \
        and (c * p.Y * p.X) % multiple == 0 and k % 16 == 0
    return [] if ok else ["N, N*Ho*Wo, K/G, C/G*Y*X in its GEMM's multiples"]


@_c_rule("WRW_V4R1")
def _wrw_v4r1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_wrw_v4r1.cpp, ConvHipImplicitGemmV4R1WrW::IsApplicable (its forward check
    # on the backward-weights GEMM: N in packs, C/G, K/G, C/G*Y*X and N*Ho*Wo in multiples)
    c, k, cyx = p.C // p.G, p.K // p.G, (p.C // p.G) * p.Y * p.X
    pack, multiple = (1, 8) if dtype == "fp32" else (2, 16)
    ok = p.N % pack == 0 and c % 8 == 0 and cyx % 64 == 0 and (p.N * p.Ho * p.Wo) % multiple == 0 \
        and k % 16 == 0 and (cyx * k) % 1024 == 0
    return [] if ok else ["N, C/G, K/G, C/G*Y*X and N*Ho*Wo in its GEMM's multiples"]


@_c_rule("V4R4")
def _v4r4(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_fwd_v4r4.cpp / _wrw_v4r4.cpp (one group, fp32: STRUCTURES): GEMM K x
    # N*Do*Ho*Wo x C*Z*Y*X forward, K x C*Z*Y*X x N*Do*Ho*Wo backward weights, in tiles of 32 x 32 x 4
    pix, cf = p.N * p.Do * p.Ho * p.Wo, p.C * p.Z * p.Y * p.X
    n, k = (pix, cf) if direction == "fwd" else (cf, pix)
    return [] if p.K % 32 == 0 and n % 32 == 0 and k % 4 == 0 else ["its GEMM in tiles of 32 x 32 x 4"]


@_c_rule("BWD_DATA_V1R1")
def _bwd_data_v1r1(p: Any, direction: str, dtype: str) -> list[str]:
    # conv_hip_implicit_gemm_bwd_v1r1.cpp, ConvHipImplicitGemmBwdDataV1R1::IsApplicable (layout,
    # group, data types: STRUCTURES): its GEMM, C*filter x N*output pixels x K, in tiles of 32 x 32 x 4
    # (K counted in packs of 2 for bf16)
    pack = 2 if dtype == "bf16" else 1
    filt, pixels = p.Z * p.Y * p.X, p.N * p.Do * p.Ho * p.Wo
    ok = p.K % pack == 0 and (p.C * filt) % 32 == 0 and pixels % 32 == 0 and (p.K // pack) % 4 == 0
    return [] if ok else ["C x filter and N x output pixels multiples of 32, K of 4 (8 in bf16)"]


RULES = {  # solver name -> the rule that lists why MIOpen's IsApplicable rejects a problem
    "ConvOclDirectFwd": _ocl_direct_fwd,
    "ConvAsm1x1U": _asm_1x1u,
    "GemmFwd1x1_0_1": _gemm_1x1("1"), "GemmFwd1x1_0_2": _gemm_1x1("2"),
    "GemmBwd1x1_stride1": _gemm_1x1("1"), "GemmBwd1x1_stride2": _gemm_1x1("2"), "GemmWrw1x1_stride1": _gemm_1x1("1"),
    "fft": _fft,
    "ConvBinWinogradRxSf2x3": _winograd_rxs_f2x3, "ConvBinWinogradRxSf3x2": _winograd_rxs,
    "ConvBinWinogradRxSf2x3g1": _winograd_rxs_g1,
    "ConvAsmBwdWrW1x1": _asm_wrw_1x1, "ConvAsm3x3U": _asm_3x3u, "ConvHipImplicitGemmBwdDataV1R1": _bwd_data_v1r1,
    "ConvHipImplicitGemmForwardV4R4Xdlops": _fwd_v4r4_xdlops, "ConvHipImplicitGemmForwardV4R5Xdlops": _fwd_v4r5_xdlops,
    "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm": _fwd_v4r4_xdlops_padded,
    "ConvHipImplicitGemmWrwV4R4Xdlops": _wrw_v4r4_xdlops,
    "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm": _wrw_v4r4_xdlops_padded,
    "ConvHipImplicitGemmV4R1Fwd": _fwd_v4r1, "ConvHipImplicitGemmV4R1WrW": _wrw_v4r1,
    "ConvHipImplicitGemmV4R4Fwd": _v4r4, "ConvHipImplicitGemmV4R4WrW": _v4r4,
    "ConvOclDirectFwd1x1": _ocl_fwd_1x1, "ConvOclDirectFwdGen": _ocl_fwd_gen,
    "ConvOclBwdWrW1x1": _ocl_wrw_1x1, "ConvOclBwdWrW53": _ocl_wrw_53,
    **{f"ConvOclBwdWrW2<{n}>": _ocl_wrw_2(n, True) for n in (1, 2, 4, 8, 16)},
    "ConvOclBwdWrW2NonTunable": _ocl_wrw_2(1, False),
    **{n: _wino_multipass_wrw(n) for n in (
        "ConvWinograd3x3MultipassWrW<3-2>", "ConvWinograd3x3MultipassWrW<3-3>", "ConvWinograd3x3MultipassWrW<3-4>",
        "ConvWinograd3x3MultipassWrW<3-5>", "ConvWinograd3x3MultipassWrW<3-6>", "ConvWinograd3x3MultipassWrW<7-2>",
        "ConvWinograd3x3MultipassWrW<7-3>", "ConvWinograd3x3MultipassWrW<1-1-7-2>",
        "ConvWinograd3x3MultipassWrW<1-1-7-3>", "ConvWinograd3x3MultipassWrW<7-2-1-1>",
        "ConvWinograd3x3MultipassWrW<7-3-1-1>", "ConvWinograd3x3MultipassWrW<5-3>",
        "ConvWinograd3x3MultipassWrW<5-4>")},
    # conv_hip_implicit_gemm_grouped_{fwd,bwd,wrw}_xdlops.cpp: 2D only (the 3D ones are their own solvers)
    **{f"ConvHipImplicitGemmGroup{d}Xdlops": _layout(("NCHW", "NHWC"), 2, "Is2d")
       for d in ("Fwd", "Bwd", "Wrw")},
    # conv_hip_implicit_gemm_3d_grouped_{fwd,bwd,wrw}_xdlops.cpp: 3D only
    **{f"ConvHipImplicitGemm3DGroup{d}Xdlops": _layout(("NCDHW", "NDHWC"), 3, "Is3d")
       for d in ("Fwd", "Bwd", "Wrw")},
}


@dataclass(frozen=True)
class Structure:
    """What a solver's IsApplicable asks of a problem's structure, in MIOpen's source: the layouts
    it takes (Is2d / Is3d with IsLayoutDefault / IsLayoutNHWC: NCHW is the 2D default layout, NCDHW
    the 3D one), one group only (GetGroupCount() == 1), and its data types (IsFp32 / IsFp16 / IsBfp16)."""

    layouts: tuple[str, ...]
    one_group: bool = False
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")

    def rejections(self, p: Any, dtype: str) -> list[str]:
        why = [] if p.layout in self.layouts else [f"{' or '.join(self.layouts)} only"]
        if self.one_group and p.G != 1:
            why.append("one group only")
        if dtype not in self.dtypes:
            why.append(f"{', '.join(self.dtypes)} only")
        return why


_2D = ("NCHW",)  # Is2d and IsLayoutDefault
_2D_3D = ("NCHW", "NCDHW")  # IsLayoutDefault, 2D or 3D
_FP32 = ("fp32",)
# Per solver class (a name's part before "<": ConvOclBwdWrW2<16> is ConvOclBwdWrW2), read from
# MIOpen's src/solver/conv/<file>.cpp, IsApplicable (and the helper it calls, where it delegates).
# The naive solvers take every layout, and RULES above holds the solvers with rules of their own.
STRUCTURES = {
    "ConvAsm1x1UV2": Structure(_2D, True, _FP32),  # conv_asm_1x1u_stride2.cpp
    "ConvAsm3x3U": Structure(_2D, dtypes=_FP32),  # conv_asm_3x3u.cpp
    "ConvAsm5x10u2v2b1": Structure(_2D, True, _FP32),  # conv_asm_5x10u2v2b1.cpp
    "ConvAsm5x10u2v2f1": Structure(_2D, True, _FP32),  # conv_asm_5x10u2v2f1.cpp
    "ConvAsm7x7c3h224w224k64u2v2p3q3f1": Structure(_2D, True, _FP32),  # conv_asm_7x7c3h224w224k64u2v2p3q3f1.cpp
    "ConvAsmBwdWrW1x1": Structure(_2D, True),  # conv_asm_dir_BwdWrW1x1.cpp
    "ConvAsmBwdWrW3x3": Structure(_2D, dtypes=("fp32", "fp16")),  # conv_asm_dir_BwdWrW3x3.cpp
    "ConvAsmImplicitGemmGTCDynamicFwdXdlops": Structure(_2D, True, ("fp32", "fp16")),  # conv_asm_implicit_gemm_gtc_fwd.cpp
    "ConvAsmImplicitGemmGTCDynamicBwdXdlops": Structure(_2D, dtypes=("fp32", "fp16")),  # ..._gtc_bwd.cpp
    "ConvAsmImplicitGemmGTCDynamicWrwXdlops": Structure(_2D, True, ("fp32", "fp16")),  # ..._wrw_gtc_dynamic_xdlops.cpp
    # conv_asm_implicit_gemm_gtc_{fwd,bwd,wrw}_nhwc.cpp: Is2d, and one group: a grouped problem is
    # rejected under WORKAROUND_ISSUE_1979, which conv/asm_implicit_gemm.hpp sets to 1 (these igemm
    # kernels do not support group convolution); neither find-db lists them for a grouped problem, in
    # any data type. Older sources reject NCHW too, but both find-dbs list them for NCHW problems.
    **{f"ConvAsmImplicitGemmGTCDynamic{d}XdlopsNHWC": Structure(("NCHW", "NHWC"), True) for d in ("Fwd", "Bwd", "Wrw")},
    "ConvBinWinograd3x3U": Structure(_2D, True, _FP32),  # conv_bin_wino3x3U.cpp
    "ConvBinWinogradRxS": Structure(_2D, True, ("fp32", "fp16")),  # conv_bin_winoRxS.cpp
    "ConvHipImplicitGemmBwdDataV1R1": Structure(_2D_3D, True, ("fp32", "bf16")),  # conv_hip_implicit_gemm_bwd_v1r1.cpp
    "ConvHipImplicitGemmBwdDataV1R1Xdlops": Structure(_2D),  # ..._bwd_v1r1_xdlops.cpp
    "ConvHipImplicitGemmBwdDataV4R1": Structure(_2D_3D, True, _FP32),  # ..._bwd_v4r1.cpp
    "ConvHipImplicitGemmBwdDataV4R1Xdlops": Structure(_2D),  # ..._bwd_v4r1_xdlops.cpp
    # ..._bwd_data_xdlops.cpp, ..._fwd_xdlops.cpp: 2D, NHWC (some versions NCHW too), one group
    "ConvHipImplicitGemmBwdXdlops": Structure(("NCHW", "NHWC"), True),
    "ConvHipImplicitGemmFwdXdlops": Structure(("NCHW", "NHWC"), True),
    "ConvHipImplicitGemmForwardV4R4Xdlops": Structure(_2D),  # ..._fwd_v4r4_xdlops.cpp
    "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm": Structure(_2D),  # ..._fwd_v4r4_xdlops_padded_gemm.cpp
    "ConvHipImplicitGemmForwardV4R5Xdlops": Structure(_2D),  # ..._fwd_v4r5_xdlops.cpp
    "ConvHipImplicitGemmV4R1Fwd": Structure(_2D),  # ..._v4r1.cpp
    "ConvHipImplicitGemmV4R1WrW": Structure(_2D),  # ..._v4r1.cpp
    "ConvHipImplicitGemmV4R4Fwd": Structure(_2D_3D, True, _FP32),  # ..._fwd_v4r4.cpp
    "ConvHipImplicitGemmV4R4WrW": Structure(_2D_3D, True, _FP32),  # ..._wrw_v4r4.cpp
    "ConvHipImplicitGemmWrwV4R4Xdlops": Structure(_2D),  # ..._wrw_v4r4_xdlops.cpp
    "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm": Structure(_2D),  # ..._wrw_v4r4_xdlops_padded_gemm.cpp
    "ConvMPBidirectWinograd": Structure(_2D, dtypes=("fp32", "fp16")),  # conv_MP_bidirectional_winograd.cpp
    "ConvMPBidirectWinograd_xdlops": Structure(_2D, dtypes=("fp32", "fp16")),  # the same file
    "ConvOclBwdWrW1x1": Structure(_2D, True),  # conv_ocl_dir2D_bwdWrW_1x1.cpp
    "ConvOclBwdWrW2": Structure(_2D),  # conv_ocl_dir2D_bwdWrW_2.cpp, IsApplicableBase
    "ConvOclBwdWrW2NonTunable": Structure(_2D, True),  # the same file: not tunable means one group
    "ConvOclBwdWrW53": Structure(_2D),  # conv_ocl_dir2D_bwdWrW_53.cpp
    "ConvOclDirectFwd11x11": Structure(_2D, True),  # conv_ocl_dir2D11x11.cpp
    "ConvOclDirectFwd1x1": Structure(_2D, True),  # conv_ocl_dir2Dfwd1x1.cpp
    "ConvOclDirectFwdGen": Structure(_2D, True),  # conv_ocl_dir2Dfwdgen.cpp
    "ConvWinograd3x3MultipassWrW": Structure(_2D, True),  # conv_multipass_wino3x3WrW.cpp
    # conv_mlir_igemm_{fwd,bwd,wrw}[_xdlops].cpp leave the problem to rocMLIR, but mlir_common.cpp
    # (ConstructBuildOptions) passes it as a 2D convolution, sizes of H and W only, which rocMLIR
    # cannot parse for a 3D layout: 2D, either layout; no file lists them for a 3D problem
    **{f"ConvMlirIgemm{d}{x}": Structure(("NCHW", "NHWC")) for d in ("Fwd", "Bwd", "WrW") for x in ("", "Xdlops")},
    "GemmFwdRest": Structure(_2D_3D),  # gemm.cpp, GemmFwdBase: IsLayoutDefault, any dimensionality
    "GemmBwdRest": Structure(_2D_3D),  # gemm_bwd.cpp, GemmBwdBase
    "GemmWrwUniversal": Structure(_2D_3D),  # gemm_wrw.cpp, GemmWrwBase
}


def solver_class(name: str) -> str:
    """A solver's class in MIOpen's sources: its name without template arguments
    (``ConvOclBwdWrW2<16>`` is ``ConvOclBwdWrW2``)."""
    return name.split("<", 1)[0]


def structure_of(name: str) -> Structure | None:
    """A solver's :class:`Structure` (its class's, for a name with template arguments), or None."""
    return STRUCTURES.get(solver_class(name))


def rule_rejections(name: str, p: Any, direction: str, dtype: str) -> list[str]:
    """Why MIOpen's own applicability check rejects solver ``name`` for problem ``p`` ([] when no
    rule here rejects it; a solver without a rule or a structure here is never rejected)."""
    return _rejections(structure_of(name), RULES.get(name), p, direction, dtype)


def _rejections(structure: Structure | None, rule: Any, p: Any, direction: str, dtype: str) -> list[str]:
    """:func:`rule_rejections` with the solver's structure and rule given."""
    return (structure.rejections(p, dtype) if structure is not None else []) \
        + (rule(p, direction, dtype) if rule is not None else [])


def applicability_mode(op: Mapping[str, Any]) -> str:
    """The op's ``op.applicability`` (default ``rules``: they never reject a solver either whole
    find-db lists); a KernelError names the allowed values."""
    mode = str(op.get("applicability") or "rules")
    if mode not in APPLICABILITY:
        raise KernelError(f"op.applicability={mode!r}; allowed: {', '.join(APPLICABILITY)}")
    return mode


def check_op(op: Mapping[str, Any]) -> None:
    """A KernelError when ``op.applicability`` or a kind of ``op.listed`` is not one ranking knows
    (checked once, where a selector is made: a misspelt kind would otherwise never match)."""
    applicability_mode(op)
    for solver, kinds in (op.get("listed") or {}).items():
        for kind in kinds:
            kind_code(kind, solver)


def listed_table(op: Mapping[str, Any], mode: str) -> Mapping[str, Any]:
    """``op.listed``, which ``listed`` and ``both`` need (a KernelError when it is empty)."""
    listed = op.get("listed") or {}
    if not listed:
        raise KernelError(f"op.applicability={mode} needs op.listed, the kinds of problem each solver is "
                          "listed for (ckheur.integrations.miopen.find_db.learn_listed from a find-db)")
    return listed


def support_mask(problem: Any, kernels: Mapping[str, Any], op: Mapping[str, Any]) -> tuple[Any, str]:
    """Which solvers are ranked for the problem (``op.applicability``, see :data:`APPLICABILITY`) and
    why none is. A step that would leave no solver is skipped: when the listed table knows none of
    the rules' solvers for this kind of problem, it is asked for the same kind in any data type,
    then they all stay, since a kind never listed says nothing."""
    import numpy as np

    mode = applicability_mode(op)
    ok = np.ones(kernels["n"], dtype=bool)
    if mode == "none":
        return ok, ""
    names = kernels["name"]
    if mode in ("rules", "both"):
        direction, dtype = op["direction"], op["dtype"]
        ok &= np.array([not _rejections(s, r, problem, direction, dtype) for s, r in kernels["checks"]], dtype=bool)
        if not ok.any():
            return ok, f"MIOpen's applicability rules reject every solver of the table for {problem.describe()}"
    if mode in ("listed", "both"):
        listed = listed_table(op, mode)
        kind = problem_kind(problem, op["dtype"])
        seen = ok & np.array([kind in listed.get(n, ()) for n in names], dtype=bool)
        if not seen.any():  # a kind the file never lists: the same kind in any data type
            layout, _, rest = kind.split("/", 2)
            seen = ok & np.array([any(k.split("/", 2)[0::2] == [layout, rest] for k in listed.get(n, ()))
                                  for n in names], dtype=bool)
        if seen.any():
            ok = seen
    return ok, ""


def support_reasons(problem: Any, kernels: Mapping[str, Any], op: Mapping[str, Any]) -> list[str]:
    """Why each solver is not ranked for the problem ('' where it is): the rules MIOpen's
    ``IsApplicable`` gives (:func:`rule_rejections`), else the kinds of problem ``op.listed`` lists it for."""
    ok, reason = support_mask(problem, kernels, op)
    rules = applicability_mode(op) in ("rules", "both")
    unlisted = reason or f"op.listed: not listed for {problem_kind(problem, op['dtype'])} problems"
    out = []
    for fine, (structure, rule) in zip(ok, kernels["checks"]):
        if fine:
            out.append("")
            continue
        why = _rejections(structure, rule, problem, op["direction"], op["dtype"]) if rules else []
        out.append(f"MIOpen's IsApplicable: {'; '.join(why)}" if why else unlisted)
    return out


def kind_code(kind: Any, solver: str) -> tuple[int, str]:
    """A kind of ``op.listed`` (``layout/dtype/group/filter``) as the C export codes it: (layout x
    group x filter as one number below 36, its data type); a KernelError names what is allowed."""
    from ckheur.config import DType
    from ckheur.families.miopen.problems import LAYOUTS

    parts = str(kind).split("/")
    dtypes = tuple(d.value for d in DType)
    allowed = (LAYOUTS, dtypes, GROUP_KINDS, FILTER_KINDS)
    if len(parts) != 4 or any(v not in a for v, a in zip(parts, allowed)):
        raise KernelError(f"op.listed[{solver!r}]: kind {str(kind)[:80]!r} is not layout/dtype/group/filter with "
                          f"layout one of {', '.join(LAYOUTS)}; dtype one of {', '.join(dtypes)}; group one "
                          f"of {', '.join(GROUP_KINDS)}; filter one of {', '.join(FILTER_KINDS)}")
    layout, dtype, group, filt = parts
    return (LAYOUTS.index(layout) * len(GROUP_KINDS) + GROUP_KINDS.index(group)) * len(FILTER_KINDS) \
        + FILTER_KINDS.index(filt), dtype


def c_support(kernels: Sequence[Any], op: Mapping[str, Any]) -> tuple[dict, str, str]:
    """What the C export needs to rank the solvers :func:`support_mask` ranks (``op.applicability``):
    defines, C tables (each solver's rule, in the enum of every rule of :data:`RULES`; the kinds of
    ``op.listed`` each solver is listed for, as bits of :func:`kind_code`, in the op's data type and
    in any) and which solvers that is, in words. The rules themselves are
    ckheur/families/miopen/miopen.c's, one ``case`` per rule; a rule without one is a KernelError."""
    from ckheur.families import C_SOURCES
    from ckheur.families.miopen.problems import LAYOUTS

    mode = applicability_mode(op)
    rules, listed = mode in ("rules", "both"), mode in ("listed", "both")
    defines = {"CKH_ALLOWED": int(mode != "none"), "CKH_APPLY_RULES": int(rules), "CKH_APPLY_LISTED": int(listed),
               # what the rules ask of the op, and the layout codes (a layout's is its index in LAYOUTS)
               "CKH_OP_FP16": int(op["dtype"] == "fp16"), "CKH_OP_FP32": int(op["dtype"] == "fp32"),
               "CKH_OP_FWD": int(op["direction"] == "fwd"), "CKH_OP_BWD_WEIGHT": int(op["direction"] == "bwd_weight"),
               **{f"CKH_LAYOUT_{x}": i for i, x in enumerate(LAYOUTS)}}
    out = []
    if rules:
        names = sorted({r.c_rule for r in RULES.values()})
        source = (C_SOURCES / "miopen" / "miopen.c").read_text()
        missing = [n for n in names if f"case CKH_RULE_{n}:" not in source]
        if missing:
            raise KernelError(f"ckheur/families/miopen/miopen.c has no C rule {', '.join(missing)} "
                              "(ckheur.families.miopen.solvers.RULES names them): the C export cannot apply them")
        codes = {n: i + 1 for i, n in enumerate(names)}
        out.append("enum { CKH_RULE_NONE = 0, " + ", ".join(f"CKH_RULE_{n} = {codes[n]}" for n in names) + " };")
        of = [f"CKH_RULE_{RULES[k.name].c_rule}" if k.name in RULES else "CKH_RULE_NONE" for k in kernels]
        out.append("static const uint8_t ckh_rule_of[] = {  /* each solver's rule (solvers.RULES) */\n"
                   + ",\n".join(f"    {c}" for c in of) + "\n};")
        args = [RULES[k.name].c_arg if k.name in RULES else 0 for k in kernels]
        out.append("static const int32_t ckh_rule_arg[] = {  /* and its argument */\n"
                   + ",\n".join(f"    {a}" for a in args) + "\n};")
        out.append("/* each solver's structure (solvers.STRUCTURES): bit i a layout it takes (LAYOUTS[i]), bit 4\n"
                   " * one group only, bit 5 the op's data type rejected */\n"
                   "static const uint8_t ckh_structure[] = {\n"
                   + ",\n".join(f"    {_structure_bits(structure_of(k.name), op['dtype'], LAYOUTS):#04x}"
                                 for k in kernels) + "\n};")
    if listed:
        codes = {}  # every solver's kinds checked, those of solvers outside this table too
        for solver, kinds in listed_table(op, mode).items():
            if isinstance(kinds, (str, bytes)) or not hasattr(kinds, "__iter__"):
                raise KernelError(f"op.listed[{str(solver)[:80]!r}]: a list of kinds (layout/dtype/group/filter), "
                                  f"not {type(kinds).__name__}")
            codes[solver] = [kind_code(kind, str(solver)) for kind in kinds]
        same, anyd = [0] * len(kernels), [0] * len(kernels)
        for i, k in enumerate(kernels):
            for code, dtype in codes.get(k.name, ()):
                anyd[i] |= 1 << code
                same[i] |= (dtype == op["dtype"]) << code
        for tag, bits, what in (("same", same, f"in {op['dtype']}"), ("any", anyd, "in any data type")):
            out.append(f"static const uint64_t ckh_listed_{tag}[] = {{  /* kinds each solver is listed for {what} */\n"
                       + ",\n".join(f"    UINT64_C({b:#x})" for b in bits) + "\n};")
    return defines, "\n".join(out) + ("\n" if out else ""), _ranked(mode, op, kernels)


def _structure_bits(structure: Structure | None, dtype: str, layouts: Sequence[str]) -> int:
    """A :class:`Structure` as the C export codes it (ckh_structure); every layout when there is none."""
    if structure is None:
        return (1 << len(layouts)) - 1
    return sum(1 << i for i, x in enumerate(layouts) if x in structure.layouts) \
        | (structure.one_group << 4) | ((dtype not in structure.dtypes) << 5)


def _ranked(mode: str, op: Mapping[str, Any], kernels: Sequence[Any]) -> str:
    """Which solvers are ranked per problem, in words (the C package's header and README say it)."""
    listed = sum(1 for k in kernels if (op.get("listed") or {}).get(k.name))
    rules = "the solvers MIOpen's IsApplicable rules (those ckheur carries) do not reject"
    kinds = f"listed for the problem's kind in op.listed ({listed} of {len(kernels)} solvers are listed for some kind)"
    words = {"none": "every solver of the table (op.applicability=none)",
             "rules": f"{rules} (op.applicability=rules)",
             "listed": f"the solvers {kinds} (op.applicability=listed)",
             "both": f"{rules}, of those the ones {kinds} (op.applicability=both)"}[mode]
    return words + (f"; the table holds only the {len(kernels)} solvers op.available names (those the user's "
                    "MIOpen ships)" if op.get("available") is not None else "")


def check_known(kernels: Sequence[Any], direction: str, arch: str | Sequence[str]) -> None:
    """Loaded solvers must be solvers of this ckheur's table for ``direction`` and ``arch`` (or of
    any of the tables of several archs: a model across GPUs; of the direction's registry for an arch
    the tables do not declare; their names reach benchmark commands and find-db lines): a
    KernelError names the first that is not."""
    archs = [arch] if isinstance(arch, str) else list(arch)
    # an arch the shipped tables do not declare: any solver MIOpen registers for the direction (its
    # registry table may have changed since the bundle was trained; the bundle keeps its own)
    known = set().union(*(_declared_names(direction).get(a) or _registry_names(direction) for a in archs))
    for k in kernels:
        if k.name not in known or k.direction != direction:
            raise KernelError(f"solver {str(k.name)[:120]!r} ({k.direction}) is not a {direction} solver of "
                              f"the {' or '.join(archs)} table (ckheur/families/miopen/solver_tables/{direction}.yaml)")
