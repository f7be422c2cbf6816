"""Solvers by kind (issue 49, item 5): what a MIOpen solver's name says of it, so that a model
across GPUs can rank a solver no training GPU lists; the ``+kinds`` feature set is opt-in."""

from __future__ import annotations

import numpy as np
import pytest

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
ARCHS = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030")


def kind(name: str) -> dict:
    from ckheur.families.miopen.solvers import KIND_FEATURES, kind_of

    return {k: v for k, v in zip(KIND_FEATURES, kind_of(name)) if v}


def test_kinds_read_from_solver_names():
    """Matrix cores or not, the filter, stride and Winograd tile a solver is written for, its
    implicit-GEMM generation, as MIOpen's names say them."""
    assert kind("ConvMlirIgemmFwd") == {}  # MI50's MLIR implicit GEMM: no matrix cores, any filter
    assert kind("ConvMlirIgemmFwdXdlops") == {"kind_xdlops": 1.0}
    assert kind("ConvBinWinogradRxSf2x3g1") == {"kind_wino_m": 2.0, "kind_wino_r": 3.0, "kind_variant": 1.0}
    assert kind("ConvMPBidirectWinograd_xdlops<4-3>") == {"kind_xdlops": 1.0, "kind_wino_m": 4.0, "kind_wino_r": 3.0,
                                                           "kind_multipass": 1.0}
    assert kind("GemmFwd1x1_0_2") == {"kind_filter": 1.0, "kind_stride": 2.0}
    assert kind("ConvOclDirectFwd11x11") == {"kind_filter": 11.0}
    assert kind("ConvCkIgemmFwdV6r1DlopsNchw") == {"kind_dlops": 1.0, "kind_layout": 1.0, "kind_igemm_version": 6.1}
    assert kind("ConvAsmImplicitGemmGTCDynamicFwdXdlopsNHWC") == {
        "kind_xdlops": 1.0, "kind_layout": 2.0, "kind_dynamic": 1.0, "kind_igemm_version": 7.0}


def test_kinds_tell_apart_every_solver_of_a_direction():
    """With its algorithm and implementation, a solver's kind is its own among every solver this
    ckheur declares for the direction on any arch: the kinds set loses no solver's identity."""
    from ckheur.families.miopen.solvers import kind_of, solver_tables

    for direction in DIRECTIONS:
        tables = solver_tables(direction)["solvers"]
        declared = {s["name"]: (s["algorithm"], s["implementation"]) for arch in ARCHS for s in tables[arch]}
        assert len({(*kind_of(n), *traits) for n, traits in declared.items()}) == len(declared), direction


def test_kinds_feature_set_is_opt_in():
    """``miopen+kinds`` drops the solver id for its kind; the family's own engine is unchanged, an
    unknown set is refused, and ``+kinds`` in train.compare names it."""
    from ckheur.families.engines import get_engine
    from ckheur.families.miopen.problems import MIOpenConvProblem
    from ckheur.families.miopen.solvers import KIND_FEATURES, Solver
    from ckheur.learn.trainer import Candidate, engine_of

    native, kinds = get_engine("miopen"), get_engine("miopen+kinds")
    assert "solver" in native.feature_names() and not set(KIND_FEATURES) & set(native.feature_names())
    assert "solver" not in kinds.feature_names() and kinds.feature_names()[-len(KIND_FEATURES):] == list(KIND_FEATURES)
    assert engine_of("miopen", "kinds") is kinds
    with pytest.raises(ValueError, match="feature sets are kinds"):
        get_engine("miopen+names")
    c = Candidate.parse("relative+kinds")
    assert c.features == "kinds" and c.name == "relative+kinds"
    p = MIOpenConvProblem(N=8, C=64, K=128, Hi=28, Wi=28, Y=3, X=3)
    ks = [Solver("ConvMlirIgemmFwd", "fwd", 80, "implicit_gemm", "mlir"),
          Solver("ConvBinWinogradRxSf2x3g1", "fwd", 37, "winograd", "asm")]
    prob = native.problem_arrays([p], "fwd")
    a = native.features(prob, native.kernel_arrays(ks), {}, "fwd")
    b = kinds.features(prob, kinds.kernel_arrays(ks), {}, "fwd")
    n = len(native.PROBLEM_FEATURES)
    assert np.array_equal(a[:, :n], b[:, :n]) and b.shape == (2, len(kinds.feature_names()))
    assert b[1, kinds.feature_names().index("kind_wino_m")] == 2.0
