#!/usr/bin/env python
"""The solver tables of ckheur/families/miopen/solver_tables/*.yaml, derived from MIOpen find-db files.

Per direction and arch: every solver the file lists, its algorithm (the entries' MIOpen algo),
implementation kind (from MIOpen's naming: ckheur.families.miopen.solvers.implementation_of)
and whether it ever asked for a workspace. Ids are stable across arches and runs: a solver keeps
the id the op files give it (shipped models use ids as categorical codes), a new one takes the
next free id, in name order. Prints YAML to paste into the op files (or writes them with --write).
The registry part (every solver MIOpen registers, its registry id, and on which of our archs it
runs where its IsApplicable names devices) is hand-maintained below from MIOpen's solver.cpp; the
tables of archs no find-db here measured (--registry-archs, default gfx908) come from it.

    python tools/miopen_solvers.py ../shared/data/miopen_fdb/*.HIP.fdb.txt.bz2 [--write]

An arch's files (MI50's gfx906_60 and MI60's gfx906_64) make one table; a listed solver that the
registry below does not run on the arch, or does not know, is printed (older names are mapped
first: ckheur.integrations.miopen.find_db.OLDER_NAMES).
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "ckheur" / "families" / "miopen" / "solver_tables"
DIRECTIONS = {"F": "fwd", "B": "bwd_data", "W": "bwd_weight"}

# MIOpen's convolution solver registry, hand-maintained from ROCm/MIOpen src/solver.cpp
# (SolverRegistrar, read at commit 00c6d6c9f4072910669943be8b9aafd042be6206): (MIOpen's registry
# id, the name find-dbs use, the directions its IsApplicable accepts, its algorithm). Fusions,
# activations and the other primitives are left out. Ids count the registrar's ``++id`` lines.
REGISTRY = [
    (1, "ConvAsm3x3U", "FB", "direct"), (2, "ConvAsm1x1U", "FB", "direct"), (3, "ConvAsm1x1UV2", "FB", "direct"),
    (5, "ConvAsm5x10u2v2f1", "F", "direct"), (6, "ConvAsm5x10u2v2b1", "B", "direct"),
    (7, "ConvAsm7x7c3h224w224k64u2v2p3q3f1", "F", "direct"), (8, "ConvOclDirectFwd11x11", "F", "direct"),
    (9, "ConvOclDirectFwdGen", "F", "direct"), (11, "ConvOclDirectFwd", "FB", "direct"),
    (13, "ConvOclDirectFwd1x1", "FB", "direct"), (14, "ConvBinWinograd3x3U", "FB", "winograd"),
    (15, "ConvBinWinogradRxS", "FBW", "winograd"), (16, "ConvAsmBwdWrW3x3", "W", "direct"),
    (17, "ConvAsmBwdWrW1x1", "W", "direct"),
    *[(18 + i, f"ConvOclBwdWrW2<{n}>", "W", "direct") for i, n in enumerate((1, 2, 4, 8, 16))],
    (23, "ConvOclBwdWrW2NonTunable", "W", "direct"), (24, "ConvOclBwdWrW53", "W", "direct"),
    (25, "ConvOclBwdWrW1x1", "W", "direct"), (26, "ConvHipImplicitGemmV4R1Fwd", "F", "implicit_gemm"),
    (31, "ConvHipImplicitGemmV4R1WrW", "W", "implicit_gemm"), (34, "fft", "FB", "fft"),
    (35, "ConvWinograd3x3MultipassWrW<3-4>", "W", "winograd"), (37, "ConvBinWinogradRxSf3x2", "FBW", "winograd"),
    *[(38 + i, f"ConvWinograd3x3MultipassWrW<{t}>", "W", "winograd")
      for i, t in enumerate(("3-5", "3-6", "3-2", "3-3", "7-2", "7-3", "7-2-1-1", "7-3-1-1", "1-1-7-2", "1-1-7-3",
                             "5-3", "5-4"))],
    (53, "ConvBinWinogradRxSf2x3", "FBW", "winograd"), (54, "ConvHipImplicitGemmV4R4Fwd", "F", "implicit_gemm"),
    (55, "ConvHipImplicitGemmBwdDataV1R1", "B", "implicit_gemm"),
    (56, "ConvHipImplicitGemmBwdDataV4R1", "B", "implicit_gemm"),
    (57, "ConvHipImplicitGemmBwdDataV1R1Xdlops", "B", "implicit_gemm"),
    (60, "ConvHipImplicitGemmBwdDataV4R1Xdlops", "B", "implicit_gemm"),
    (61, "ConvHipImplicitGemmV4R4WrW", "W", "implicit_gemm"),
    (62, "ConvAsmImplicitGemmV4R1DynamicFwd", "F", "implicit_gemm"),
    (63, "ConvAsmImplicitGemmV4R1DynamicFwd_1x1", "F", "implicit_gemm"),
    (64, "ConvHipImplicitGemmForwardV4R4Xdlops", "F", "implicit_gemm"),
    (65, "ConvAsmImplicitGemmV4R1DynamicBwd", "B", "implicit_gemm"),
    (66, "ConvAsmImplicitGemmV4R1DynamicWrw", "W", "implicit_gemm"),
    *[(67 + i, f"ConvMPBidirectWinograd<{t}-3>", "FB", "winograd") for i, t in enumerate(range(2, 7))],
    (72, "ConvAsmImplicitGemmGTCDynamicWrwXdlops", "W", "implicit_gemm"),
    (73, "ConvHipImplicitGemmWrwV4R4Xdlops", "W", "implicit_gemm"),
    (74, "ConvAsmImplicitGemmGTCDynamicFwdXdlops", "F", "implicit_gemm"),
    *[(75 + i, f"ConvMPBidirectWinograd_xdlops<{t}-3>", "FB", "winograd") for i, t in enumerate(range(2, 7))],
    (80, "ConvHipImplicitGemmForwardV4R5Xdlops", "F", "implicit_gemm"),
    (81, "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm", "F", "implicit_gemm"),
    (82, "ConvAsmImplicitGemmGTCDynamicBwdXdlops", "B", "implicit_gemm"),
    (83, "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm", "W", "implicit_gemm"),
    (84, "ConvBinWinogradRxSf2x3g1", "FBW", "winograd"), (85, "ConvDirectNaiveConvFwd", "F", "direct"),
    (86, "ConvDirectNaiveConvBwd", "B", "direct"), (87, "ConvDirectNaiveConvWrw", "W", "direct"),
    (88, "GemmFwd1x1_0_1", "F", "gemm"), (89, "GemmFwd1x1_0_1_int8", "F", "gemm"), (90, "GemmFwd1x1_0_2", "F", "gemm"),
    (91, "GemmFwdRest", "F", "gemm"), (95, "GemmBwd1x1_stride2", "B", "gemm"), (96, "GemmBwd1x1_stride1", "B", "gemm"),
    (97, "GemmBwdRest", "B", "gemm"), (98, "ConvMlirIgemmFwd", "F", "implicit_gemm"),
    (99, "ConvMlirIgemmBwd", "B", "implicit_gemm"), (100, "ConvMlirIgemmWrW", "W", "implicit_gemm"),
    (101, "GemmWrw1x1_stride1", "W", "gemm"), (102, "GemmWrwUniversal", "W", "gemm"),
    (103, "ConvMlirIgemmFwdXdlops", "F", "implicit_gemm"), (104, "ConvMlirIgemmBwdXdlops", "B", "implicit_gemm"),
    (105, "ConvMlirIgemmWrWXdlops", "W", "implicit_gemm"),
    (107, "ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC", "F", "implicit_gemm"),
    (108, "ConvAsmImplicitGemmGTCDynamicBwdXdlopsNHWC", "B", "implicit_gemm"),
    (110, "ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC", "W", "implicit_gemm"),
    (114, "ConvCkIgemmFwdV6r1DlopsNchw", "F", "implicit_gemm"),
    (127, "ConvAsmImplicitGemmGTCDynamicFwdDlopsNCHWC", "F", "implicit_gemm"),
    (128, "ConvHipImplicitGemmFwdXdlops", "F", "implicit_gemm"),
    (129, "ConvHipImplicitGemmBwdXdlops", "B", "implicit_gemm"),
    (137, "ConvHipImplicitGemmGroupFwdXdlops", "F", "implicit_gemm"),
    (138, "ConvHipImplicitGemm3DGroupFwdXdlops", "F", "implicit_gemm"), (139, "ConvWinoFuryRxSf2x3", "FB", "winograd"),
    (140, "ConvHipImplicitGemm3DGroupWrwXdlops", "W", "implicit_gemm"),
    (141, "ConvHipImplicitGemm3DGroupBwdXdlops", "B", "implicit_gemm"),
    (155, "ConvHipImplicitGemmGroupBwdXdlops", "B", "implicit_gemm"),
    (156, "ConvHipImplicitGemmGroupWrwXdlops", "W", "implicit_gemm"),
]
# Solvers whose IsApplicable names the devices they run on (read in MIOpen's sources, the newest
# stored; device names as fnmatch patterns: gfx90* is gfx900-gfx90a, not gfx94x). They decide
# gfx908's table and the table of an arch ckheur ships none of (the solver tables' ``only_on``); each
# agrees with the six find-dbs (a solver a file lists for its arch runs there; tables() checks).
_GCN_ASM = ("gfx8*", "gfx90*")  # GCN assembly: no gfx94x/gfx95x, no RDNA
_OCL = ("gfx8*", "gfx90*", "gfx103*")  # the OpenCL direct kernels
ONLY_ON = {
    # gfx803/gfx900/gfx906/gfx908 binaries (conv_bin_wino3x3U.cpp, conv_bin_winoRxS.cpp)
    "ConvBinWinograd3x3U": ("gfx900", "gfx906", "gfx908"), "ConvBinWinogradRxS": ("gfx900", "gfx906", "gfx908"),
    # the NCHW GTC xdlops implicit GEMMs: device_name == "gfx908" (conv_asm_implicit_gemm_gtc_*.cpp)
    "ConvAsmImplicitGemmGTCDynamicFwdXdlops": ("gfx908",), "ConvAsmImplicitGemmGTCDynamicBwdXdlops": ("gfx908",),
    "ConvAsmImplicitGemmGTCDynamicWrwXdlops": ("gfx908",),
    # gfx900/gfx906 only (conv_asm_implicit_gemm_*v4r1_dynamic.cpp)
    **{n: ("gfx900", "gfx906") for n in ("ConvAsmImplicitGemmV4R1DynamicFwd", "ConvAsmImplicitGemmV4R1DynamicFwd_1x1",
                       "ConvAsmImplicitGemmV4R1DynamicBwd", "ConvAsmImplicitGemmV4R1DynamicWrw")},
    # dot-product (dlops) kernels: CK's v6r1 NCHW where CK runs (conv_ck_igemm_fwd_v6r1_dlops_nchw.cpp,
    # IsComposableKernelSupportedHardware; the find-dbs list it on gfx906 and gfx1030; the gfx908 table,
    # derived before, leaves it out), the NCHWC assembly on gfx1030 only; Winograd "Fury": FP16 on
    # gfx11 and gfx12 only (conv_wino_fury_RxS.cpp)
    "ConvCkIgemmFwdV6r1DlopsNchw": ("gfx900", "gfx906", "gfx1030"), "ConvAsmImplicitGemmGTCDynamicFwdDlopsNCHWC": ("gfx1030",),
    "ConvWinoFuryRxSf2x3": ("gfx11*", "gfx12*"),
    "GemmFwd1x1_0_1_int8": (),  # int8 only: no op of ours
    # the MLIR implicit GEMMs without matrix cores: off wherever IsXdlopsSupport holds (gfx908 and
    # later CDNA; conv_mlir_igemm_{fwd,bwd,wrw}.cpp), and not on gfx900: rocMLIR's list leaves gfx803,
    # gfx906 and RDNA2; their xdlops twins serve gfx908, gfx90a and gfx942 (not gfx950, not in that
    # list). Measured, not read: RDNA2's and MI300X's files list no MLIR GEMM at all (MI50's and
    # MI210's list them for most problems), and offering them there cost 50 and 24 points of mean
    # efficiency (bench_logo.py --zero-only, its registry protocol): left to gfx803, gfx906, gfx908, gfx90a
    **{f"ConvMlirIgemm{d}": ("gfx803", "gfx906") for d in ("Fwd", "Bwd", "WrW")},
    **{f"ConvMlirIgemm{d}Xdlops": ("gfx908", "gfx90a") for d in ("Fwd", "Bwd", "WrW")},
    # static-CK backward data kept off by default in every MIOpen version read (WORKAROUND_SWDEV_229277_227616_229195
    # in conv_hip_implicit_gemm_bwd_v4r1.cpp, WORKAROUND_SWDEV_251757 in ..._bwd_v1r1_xdlops.cpp: a debug
    # variable enables them); no find-db here lists either
    "ConvHipImplicitGemmBwdDataV4R1": (), "ConvHipImplicitGemmBwdDataV1R1Xdlops": (),
    # the GCN assembly direct kernels (conv_asm_1x1u.cpp, ..._1x1u_stride2.cpp, conv_asm_3x3u.cpp,
    # conv_asm_dir_BwdWrW1x1.cpp: gfx8 and gfx90x); 5x10, 7x7 and WrW3x3 not on gfx90a either
    # (conv_asm_5x10u2v2{f,b}1.cpp, conv_asm_7x7c3h224w224k64u2v2p3q3f1.cpp name their devices;
    # conv_asm_dir_BwdWrW3x3.cpp keeps gfx90a behind a debug variable)
    **{n: _GCN_ASM for n in ("ConvAsm1x1U", "ConvAsm1x1UV2", "ConvAsm3x3U", "ConvAsmBwdWrW1x1")},
    **{n: ("gfx8*", "gfx900", "gfx904", "gfx906", "gfx908") for n in (
        "ConvAsm5x10u2v2f1", "ConvAsm5x10u2v2b1", "ConvAsm7x7c3h224w224k64u2v2p3q3f1", "ConvAsmBwdWrW3x3")},
    # the OpenCL direct kernels (conv_ocl_dir2D*.cpp: gfx8, gfx90x and RDNA2); the 1x1 ones keep RDNA2
    # behind a debug variable
    **{n: _OCL for n in ("ConvOclDirectFwd", "ConvOclDirectFwd11x11", "ConvOclDirectFwdGen", "ConvOclBwdWrW2NonTunable",
                         "ConvOclBwdWrW53", *(f"ConvOclBwdWrW2<{n}>" for n in (1, 2, 4, 8, 16)))},
    "ConvOclDirectFwd1x1": _GCN_ASM, "ConvOclBwdWrW1x1": _GCN_ASM,
    # the static-CK implicit GEMMs (conv_hip_implicit_gemm_*_v4r1.cpp, *_v4r4.cpp, bwd_v1r1.cpp: their
    # device lists); their xdlops versions on gfx908 and gfx90a only
    **{n: ("gfx8*", "gfx90*", "gfx103*", "gfx12*") for n in (
        "ConvHipImplicitGemmV4R1Fwd", "ConvHipImplicitGemmV4R1WrW", "ConvHipImplicitGemmBwdDataV1R1")},
    **{n: _OCL for n in ("ConvHipImplicitGemmV4R4Fwd", "ConvHipImplicitGemmV4R4WrW")},
    **{n: ("gfx908", "gfx90a") for n in (
        "ConvHipImplicitGemmForwardV4R4Xdlops", "ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm",
        "ConvHipImplicitGemmForwardV4R5Xdlops", "ConvHipImplicitGemmWrwV4R4Xdlops",
        "ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm", "ConvHipImplicitGemmBwdDataV4R1Xdlops")},
    # Winograds: the bidirectional ones on gfx900-gfx908 (instructions gfx90a and gfx942 lack;
    # conv_MP_bidirectional_winograd.cpp), their xdlops versions on gfx908; the multipass backward
    # weights on gfx8 and gfx90x (conv_multipass_wino3x3WrW.cpp)
    **{f"ConvMPBidirectWinograd<{t}-3>": ("gfx900", "gfx906", "gfx908") for t in range(2, 7)},
    **{f"ConvMPBidirectWinograd_xdlops<{t}-3>": ("gfx908",) for t in range(2, 7)},
    **{f"ConvWinograd3x3MultipassWrW<{t}>": _GCN_ASM for t in (
        "3-2", "3-3", "3-4", "3-5", "3-6", "5-3", "5-4", "7-2", "7-3", "7-2-1-1", "7-3-1-1", "1-1-7-2", "1-1-7-3")},
    # CK's grouped GEMMs: CK's list, RDNA3/4 too (not gfx1103) for forward, backward data and 3D
    # forward (conv_hip_implicit_gemm_grouped_{fwd,bwd}_xdlops.cpp, ..._3d_grouped_fwd_xdlops.cpp);
    # the others, matrix cores only (below)
    **{n: ("gfx908", "gfx90a", "gfx94*", "gfx95*", "gfx1100", "gfx1101", "gfx1102", "gfx115*", "gfx12*") for n in (
        "ConvHipImplicitGemmGroupFwdXdlops", "ConvHipImplicitGemmGroupBwdXdlops", "ConvHipImplicitGemm3DGroupFwdXdlops")},
}
# The matrix-core (xdlops) solvers run where MIOpen's IsXdlopsSupport holds: CDNA, gfx908 and later
# (implicitgemm_util.hpp names gfx908, gfx90a, gfx942 and gfx950; the MLIR, assembly and CK xdlops
# solvers check the same devices their own ways). Patterns as fnmatch takes them.
XDLOPS_ARCHS = ("gfx908", "gfx90a", "gfx94*", "gfx95*")


def runs_on(name: str) -> tuple[str, ...] | None:
    """The archs (patterns) MIOpen's IsApplicable keeps ``name`` to, or None where it names none."""
    if name in ONLY_ON:
        return ONLY_ON[name]
    return XDLOPS_ARCHS if "xdlops" in name.lower() else None


def runs(name: str, arch: str) -> bool:
    """Whether the registry's rules run ``name`` on ``arch``."""
    from ckheur.families.miopen.solvers import arch_in

    return arch_in(arch, runs_on(name))


# A solver new to the tables asks for a workspace like its kin: the GTC xdlops kernels (as their
# NHWC versions in the find-dbs) and GEMMs that transform; a guess, until a find-db lists it.
NEW_WORKSPACE = {"ConvAsmImplicitGemmGTCDynamicFwdXdlops", "ConvAsmImplicitGemmGTCDynamicBwdXdlops",
                 "ConvAsmImplicitGemmGTCDynamicWrwXdlops"}


def registry_tables(arch: str, declared: dict) -> dict:
    """{direction: (registry rows, ``arch``'s table)} from REGISTRY: every registered solver of
    the direction (``miopen_id`` beside ours; ``only_on``: :func:`runs_on`), and those that run on
    ``arch``; a solver an op file
    already declares keeps its id and traits, a new one takes the next free id."""
    from ckheur.families.miopen.solvers import implementation_of

    ids = {n: d["id"] for n, d in declared.items()}
    for _, name, _, _ in REGISTRY:
        if name not in ids:
            ids[name] = max(ids.values(), default=-1) + 1
    out = {}
    for letter, direction in DIRECTIONS.items():
        rows = []
        for miopen_id, name, dirs, algorithm in REGISTRY:
            if letter in dirs:
                known = declared.get(name, {})
                rows.append({"name": name, "id": ids[name], "miopen_id": miopen_id,
                             "algorithm": known.get("algorithm", algorithm),
                             "implementation": known.get("implementation", implementation_of(name)),
                             "workspace": known.get("workspace", name in NEW_WORKSPACE)})
                if runs_on(name) is not None:
                    rows[-1]["only_on"] = list(runs_on(name))
        table = [{k: v for k, v in r.items() if k != "only_on"} for r in rows if runs(r["name"], arch)]
        out[direction] = (rows, table)
    return out


def tables(paths: list[str]) -> dict:
    """{direction: {arch: [solver entries]}} from the files."""
    from ckheur.families.miopen.solvers import implementation_of
    from ckheur.integrations.miopen.find_db import arch_from_name, read_find_db

    per: dict = {}
    names: set = set()
    import pandas as pd

    from ckheur.config import known_archs

    frames: dict = {}
    for path in paths:  # an arch's files (MI50's and MI60's: gfx906) make one table
        arch, _ = arch_from_name(path, known_archs())
        fdb = read_find_db(path)
        for old, n in (fdb.report.get("renamed_solvers") or {}).items():
            print(f"# {Path(path).name}: {n} entries mapped, {old} (find_db.OLDER_NAMES)")
        frames.setdefault(arch, []).append(fdb.entries.assign(
            direction=fdb.problems["direction"].to_numpy()[fdb.entries["problem"].to_numpy()]))
    registered = {name: dirs for _, name, dirs, _ in REGISTRY}
    letters = {d: letter for letter, d in DIRECTIONS.items()}
    for arch, parts in frames.items():
        e = pd.concat(parts, ignore_index=True)
        for (direction, solver), g in e.groupby(["direction", "solver"]):
            if letters[direction] not in registered.get(solver, letters[direction]) or not runs(solver, arch):
                print(f"# {arch} {direction}: {solver} is listed, but MIOpen's registry (REGISTRY, ONLY_ON) "
                      "does not run it there: check both")
            if solver not in registered:
                print(f"# {arch} {direction}: {solver} ({len(g)} entries) is not in MIOpen's registry (REGISTRY)")
            per.setdefault(direction, {}).setdefault(arch, []).append(
                {"name": solver, "algorithm": g["algorithm"].mode().iloc[0], "implementation": implementation_of(solver),
                 "workspace": bool((g["workspace"] > 0).any()), "problems": int(len(g))})
            names.add(solver)
    ids = declared_ids()
    for n in sorted(names - set(ids)):
        ids[n] = max(ids.values(), default=-1) + 1
    for direction in per:
        for arch in per[direction]:
            per[direction][arch] = sorted(({**s, "id": ids[s["name"]]} for s in per[direction][arch]),
                                          key=lambda s: -s["problems"])
    return per


def declared() -> dict:
    """{solver name: {id, algorithm, implementation, workspace}} as the shipped solver tables
    (ckheur/families/miopen/solver_tables/*.yaml) declare them (the arch tables and the registry)."""
    from omegaconf import OmegaConf

    out: dict = {}
    for path in sorted(TABLES.glob("*.yaml")):
        op = OmegaConf.load(path)
        for table in [*(op.get("solvers") or {}).values(), op.get("registry") or []]:
            for s in table:
                row = {"id": int(s["id"]), "algorithm": s["algorithm"], "implementation": s["implementation"],
                       "workspace": bool(s["workspace"])}
                if out.setdefault(s["name"], row)["id"] != row["id"]:
                    raise SystemExit(f"{path}: solver {s['name']} has id {s['id']}, elsewhere {out[s['name']]['id']}")
    return out


def declared_ids() -> dict:
    """{solver name: id} as the shipped solver tables declare them."""
    return {name: d["id"] for name, d in declared().items()}


def as_yaml(table: dict, registry: list) -> str:
    """The ``solvers:`` and ``registry:`` nodes of one direction's solver-tables file."""
    row = lambda s: (f"{{name: {s['name']}, id: {s['id']}, algorithm: {s['algorithm']}, "  # noqa: E731
                     f"implementation: {s['implementation']}, workspace: {str(s['workspace']).lower()}"
                     + (f", miopen_id: {s['miopen_id']}" if "miopen_id" in s else "")
                     + (f", only_on: [{', '.join(s['only_on'])}]" if "only_on" in s else "") + "}")
    lines = ["solvers:"]
    for arch in sorted(table):
        lines.append(f"  {arch}:")
        for s in table[arch]:
            why = f"listed for {s['problems']} problems" if "problems" in s else "runs on it per MIOpen's registry"
            lines.append(f"    - {row(s)}  # {why}")
    lines.append("# Every solver MIOpen registers for this direction (tools/miopen_solvers.py REGISTRY), with")
    lines.append("# MIOpen's registry id; the arch tables above are subsets, with the same ids. only_on: the archs")
    lines.append("# (fnmatch patterns) its IsApplicable keeps it to; an arch with no table above is served")
    lines.append("# every solver whose only_on names it or that has none.")
    lines.append("registry:")
    lines += [f"  - {row(s)}" for s in sorted(registry, key=lambda s: s["miopen_id"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--registry-archs", nargs="*", default=["gfx908"],
                    help="archs whose tables come from the registry (no find-db here measured them)")
    ap.add_argument("--write", action="store_true", help="replace the tables of ckheur/families/miopen/solver_tables/*.yaml")
    args = ap.parse_args()
    per = tables(args.paths)
    known = declared()
    registry: dict = {}
    for arch in args.registry_archs:
        for direction, (rows, table) in registry_tables(arch, known).items():
            per.setdefault(direction, {})[arch] = table
            registry[direction] = rows
    for direction, table in sorted(per.items()):
        text = as_yaml(table, registry.get(direction) or registry_tables("", known)[direction][0])
        target = TABLES / f"{direction}.yaml"
        if args.write and target.exists():
            head = target.read_text().split("solvers:\n")[0]
            target.write_text(head + text)
            print(f"wrote {target}")
        else:
            print(f"# {direction}\n{text}")


if __name__ == "__main__":
    main()
