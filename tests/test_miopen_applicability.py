"""Which MIOpen solvers are ranked per problem (op.applicability): MIOpen's own IsApplicable rules
(expected values read from MIOpen's solver sources, cited per test), the listed rule learned from
a find-db, and the unlisted-pick rate once the mask is applied."""

from __future__ import annotations

import bz2

import numpy as np
import pytest

from ckheur.families.miopen import solvers as ms
from ckheur.families.kernel_base import KernelError
from ckheur.metrics import censored_choice_report
from ckheur.integrations.miopen.find_db import learn_listed, read_find_db
from ckheur.learn.bundle import shipped_models_dir
from ckheur.selection.selector import Selector
from ckheur.families.miopen.problems import FIELDS, problem_from_dict
from conftest import ROOT


def conv(**kw):
    base = dict(N=8, C=64, K=64, G=1, Hi=28, Wi=28, Y=3, X=3, pad_h=1, pad_w=1, stride_h=1, stride_w=1)
    return problem_from_dict({**base, **kw})


# A depthwise backward-data FP16 problem as in the MI250X re-measurement: 512 groups, 1x3 filters.
DEPTHWISE_1X3 = dict(C=512, K=512, G=512, Hi=14, Wi=14, Y=1, X=3, pad_h=0, pad_w=1)


def rejected(name, p, direction="fwd", dtype="fp16"):
    return bool(ms.rule_rejections(name, p, direction, dtype))


def test_opencl_direct_forward_rules():
    # conv_ocl_dir2D.cpp: pads must be equal in H and W, so the 1x3 depthwise (pad 0x1) is out
    assert rejected("ConvOclDirectFwd", conv(**DEPTHWISE_1X3), "bwd_data")
    # grouped problems skip the filter-size list: a 3x3 depthwise with equal pads applies
    assert not rejected("ConvOclDirectFwd", conv(C=512, K=512, G=512, Y=3, X=3), "bwd_data")
    assert not rejected("ConvOclDirectFwd", conv(), "fwd", "fp32")  # ungrouped 3x3: in the list
    assert rejected("ConvOclDirectFwd", conv(), "bwd_weight", "fp32")  # forward and backward data only
    assert rejected("ConvOclDirectFwd", conv(Y=1, X=1, pad_h=0, pad_w=0))  # ungrouped 1x1: the 1x1 solvers'
    assert rejected("ConvOclDirectFwd", conv(Y=2, X=2, pad_h=0, pad_w=0), "fwd", "fp32")  # 2x2: not in the list
    assert rejected("ConvOclDirectFwd", conv(stride_h=2, stride_w=2, Hi=28, Wi=28))  # fwd fp16 stride 2
    assert not rejected("ConvOclDirectFwd", conv(stride_h=2, stride_w=2), "fwd", "fp32")
    assert rejected("ConvOclDirectFwd", conv(layout="NHWC"))  # default layout only


def test_1x1_solvers_apply_to_1x1_problems_only():
    one = conv(Y=1, X=1, pad_h=0, pad_w=0)
    # gemm.cpp: GemmFwd1x1_0_1 is 1x1, no pad, stride 1; GemmFwd1x1_0_2 the strided one
    assert not rejected("GemmFwd1x1_0_1", one) and rejected("GemmFwd1x1_0_2", one)
    strided = conv(Y=1, X=1, pad_h=0, pad_w=0, stride_h=2, stride_w=2)
    assert rejected("GemmFwd1x1_0_1", strided) and not rejected("GemmFwd1x1_0_2", strided)
    assert rejected("GemmFwd1x1_0_1", conv())  # 3x3
    # conv_asm_1x1u.cpp: ungrouped 1x1, fp32 / fp16, no bwd_weight
    assert not rejected("ConvAsm1x1U", one) and not rejected("ConvAsm1x1U", one, "bwd_data", "fp32")
    assert rejected("ConvAsm1x1U", one, "fwd", "bf16") and rejected("ConvAsm1x1U", conv())
    assert rejected("ConvAsm1x1U", conv(Y=1, X=1, pad_h=0, pad_w=0, C=64, K=64, G=2))


def test_fft_dimensionality_and_unruled_solvers():
    assert not rejected("fft", conv(), "fwd", "fp32")  # fft.cpp: fp32, NCHW, ungrouped, not bwd_weight
    assert rejected("fft", conv(), "fwd", "fp16") and rejected("fft", conv(G=2), "fwd", "fp32")
    p3 = conv(layout="NCDHW", Di=4, Z=3, pad_d=1)
    assert not rejected("ConvHipImplicitGemm3DGroupFwdXdlops", p3) and rejected("ConvHipImplicitGemmGroupFwdXdlops", p3)
    assert rejected("ConvHipImplicitGemm3DGroupFwdXdlops", conv())
    assert not rejected("ConvDirectNaiveConvFwd", p3) and not rejected("SomeSolverWithoutRules", conv())
    # conv_asm_implicit_gemm_gtc_wrw_nhwc.cpp: 2D only
    assert rejected("ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC", p3, "bwd_weight", "fp32")
    assert not rejected("ConvAsmImplicitGemmGTCDynamicWrwXdlopsNHWC", conv(), "bwd_weight", "fp32")
    # ... and one group: asm_implicit_gemm.hpp sets WORKAROUND_ISSUE_1979, under which all three
    # directions' IsApplicable reject GetGroupCount() > 1 (depthwise included)
    for d, direction in (("Fwd", "fwd"), ("Bwd", "bwd_data"), ("Wrw", "bwd_weight")):
        name = f"ConvAsmImplicitGemmGTCDynamic{d}XdlopsNHWC"
        assert rejected(name, conv(G=2), direction) and rejected(name, conv(**DEPTHWISE_1X3), direction)
        assert not rejected(name, conv(layout="NHWC"), direction)
    # conv_winoRxS.cpp: the g1 Winograd is the one-group variant; both are NCHW only
    assert not rejected("ConvBinWinogradRxSf2x3g1", conv()) and rejected("ConvBinWinogradRxSf2x3g1", conv(G=2))
    assert not rejected("ConvBinWinogradRxSf2x3", conv(G=2)) and rejected("ConvBinWinogradRxSf2x3", conv(layout="NHWC"))
    # ... the <2,3> one takes ungrouped problems in backward weights only; <3,2> takes them everywhere
    assert rejected("ConvBinWinogradRxSf2x3", conv()) and not rejected("ConvBinWinogradRxSf2x3", conv(), "bwd_weight")
    assert not rejected("ConvBinWinogradRxSf3x2", conv())
    # ... equal strides of 1 or 2, stride 1 in backward weights, no dilation; backward data's pads
    # below the filter size (its backward pad, filter - pad - 1, must not be negative)
    s2 = dict(stride_h=2, stride_w=2)
    assert not rejected("ConvBinWinogradRxSf3x2", conv(**s2)) and rejected("ConvBinWinogradRxSf3x2", conv(**s2), "bwd_weight")
    assert rejected("ConvBinWinogradRxSf3x2", conv(stride_h=1, stride_w=2))
    assert rejected("ConvBinWinogradRxSf3x2", conv(stride_h=3, stride_w=3))
    assert rejected("ConvBinWinogradRxSf2x3g1", conv(dilation_h=2, dilation_w=2, pad_h=2, pad_w=2))
    assert rejected("ConvBinWinogradRxSf3x2", conv(Y=1, X=3, pad_h=1, pad_w=1), "bwd_data")
    assert not rejected("ConvBinWinogradRxSf3x2", conv(Y=1, X=3, pad_h=1, pad_w=1))


def test_rules_of_the_asm_1x1_wrw_3x3_and_bwd_data_v1r1_solvers():
    one = conv(Y=1, X=1, pad_h=0, pad_w=0)
    # conv_asm_dir_BwdWrW1x1.cpp: unpadded undilated 1x1, equal strides up to 2
    assert not rejected("ConvAsmBwdWrW1x1", one, "bwd_weight", "fp32")
    assert not rejected("ConvAsmBwdWrW1x1", conv(Y=1, X=1, pad_h=0, pad_w=0, stride_h=2, stride_w=2), "bwd_weight")
    assert rejected("ConvAsmBwdWrW1x1", conv(Y=1, X=1, pad_h=1, pad_w=1), "bwd_weight", "fp32")
    assert rejected("ConvAsmBwdWrW1x1", conv(), "bwd_weight", "fp32")
    # conv_asm_3x3u.cpp: 3x3 pad 1 stride 1; the input's channels per group (C forward, K backward
    # data) a multiple of 4; input width 4 to 1000
    assert not rejected("ConvAsm3x3U", conv(), "fwd", "fp32")
    assert rejected("ConvAsm3x3U", conv(C=6), "fwd", "fp32") and not rejected("ConvAsm3x3U", conv(C=6), "bwd_data", "fp32")
    assert rejected("ConvAsm3x3U", conv(K=6), "bwd_data", "fp32") and not rejected("ConvAsm3x3U", conv(K=6), "fwd", "fp32")
    assert rejected("ConvAsm3x3U", conv(Wi=1001), "fwd", "fp32") and rejected("ConvAsm3x3U", conv(pad_h=0, pad_w=0), "fwd", "fp32")
    # conv_hip_implicit_gemm_bwd_v1r1.cpp: GEMM C*Y*X x N*Ho*Wo x K in tiles of 32 x 32 x 4 (K in pairs in bf16)
    assert not rejected("ConvHipImplicitGemmBwdDataV1R1", conv(), "bwd_data", "fp32")  # 576, 6272, 64
    assert rejected("ConvHipImplicitGemmBwdDataV1R1", conv(C=4, Y=1, X=1, pad_h=0, pad_w=0), "bwd_data", "fp32")
    assert rejected("ConvHipImplicitGemmBwdDataV1R1", conv(K=66), "bwd_data", "fp32")
    assert rejected("ConvHipImplicitGemmBwdDataV1R1", conv(K=4), "bwd_data", "bf16")
    assert not rejected("ConvHipImplicitGemmBwdDataV1R1", conv(K=8), "bwd_data", "bf16")
    assert rejected("ConvHipImplicitGemmBwdDataV1R1", conv(N=1, Hi=5, Wi=5), "bwd_data", "fp32")  # 25 pixels


def test_rules_never_reject_a_solver_the_real_slices_list():
    """MIOpen itself ran every listed solver, so no rule may reject one (both GPUs' slices)."""
    for name in ("gfx942130", "gfx90a68"):
        fdb = read_find_db(ROOT / "tests" / "data" / "miopen_fdb" / f"{name}.HIP.fdb.txt.bz2")
        rows = fdb.problems[[*FIELDS, "direction", "dtype"]].to_dict("records")
        problems = {}  # each problem made once (a problem lists several solvers)
        checked = 0
        for pid, solver in zip(fdb.entries.problem.to_numpy(), fdb.entries.solver):
            if solver in ms.RULES or ms.structure_of(solver) is not None:
                r = rows[int(pid)]
                p = problems.get(pid) or problems.setdefault(pid, problem_from_dict({f: r[f] for f in FIELDS}))
                assert not ms.rule_rejections(solver, p, r["direction"], r["dtype"]), (name, solver, p.describe())
                checked += 1
        assert checked > 500


def test_structures_read_from_miopen_sources():
    """Each solver's layouts, groups and data types as its IsApplicable says (src/solver/conv/)."""
    p3 = conv(layout="NCDHW", Di=4, Z=3, pad_d=1)
    # conv_hip_implicit_gemm_fwd_v4r4.cpp: `!Is2d() && !Is3d()`, IsLayoutDefault, one group, fp32
    assert not rejected("ConvHipImplicitGemmV4R4Fwd", p3, "fwd", "fp32")
    assert not rejected("ConvHipImplicitGemmV4R4Fwd", conv(), "fwd", "fp32")
    assert rejected("ConvHipImplicitGemmV4R4Fwd", conv(), "fwd", "fp16")
    assert rejected("ConvHipImplicitGemmV4R4Fwd", conv(G=2), "fwd", "fp32")
    assert rejected("ConvHipImplicitGemmV4R4Fwd", conv(layout="NHWC"), "fwd", "fp32")
    # conv_hip_implicit_gemm_fwd_v4r4_xdlops.cpp: Is2d and IsLayoutDefault; groups allowed
    assert rejected("ConvHipImplicitGemmForwardV4R4Xdlops", p3) and not rejected("ConvHipImplicitGemmForwardV4R4Xdlops", conv(G=2))
    # conv_multipass_wino3x3WrW.cpp: a template class; 2D NCHW, GetGroupCount() == 1; the filter is
    # its first (and third) argument; <3,2> and <3,3> take stride 2 only, <3,4> to <3,6> 1 or 2
    s2 = conv(stride_h=2, stride_w=2)
    assert rejected("ConvWinograd3x3MultipassWrW<3-4>", conv(G=2), "bwd_weight", "fp32")
    assert not rejected("ConvWinograd3x3MultipassWrW<3-4>", conv(), "bwd_weight", "fp32")
    assert not rejected("ConvWinograd3x3MultipassWrW<3-4>", s2, "bwd_weight", "fp32")
    assert rejected("ConvWinograd3x3MultipassWrW<3-2>", conv(), "bwd_weight", "fp32")
    assert not rejected("ConvWinograd3x3MultipassWrW<3-2>", s2, "bwd_weight", "fp32")
    assert not rejected("ConvWinograd3x3MultipassWrW<1-1-7-2>", conv(Y=1, X=7, pad_h=0, pad_w=3), "bwd_weight")
    assert rejected("ConvWinograd3x3MultipassWrW<7-2-1-1>", conv(Y=1, X=7, pad_h=0, pad_w=3), "bwd_weight")
    assert rejected("ConvWinograd3x3MultipassWrW<5-3>", conv(Y=5, X=5, pad_h=2, pad_w=2, stride_h=2, stride_w=2),
                    "bwd_weight")
    # conv_ocl_dir2D_bwdWrW_2.cpp: the tunable solver takes groups, the non-tunable one does not
    assert not rejected("ConvOclBwdWrW2<4>", conv(G=2), "bwd_weight") and rejected("ConvOclBwdWrW2NonTunable", conv(G=2), "bwd_weight")
    # gemm.cpp, GemmFwdBase: IsLayoutDefault, 2D or 3D; the naive solvers take every layout
    assert not rejected("GemmFwdRest", p3) and rejected("GemmFwdRest", conv(layout="NHWC"))
    assert not rejected("ConvDirectNaiveConvFwd", conv(layout="NDHWC", Di=4, Z=3, pad_d=1))
    # the MLIR solvers leave the problem to rocMLIR, but mlir_common.cpp passes it as a 2D
    # convolution (H and W only): 2D of either layout, groups allowed
    assert rejected("ConvMlirIgemmFwdXdlops", p3) and rejected("ConvMlirIgemmWrWXdlops", p3, "bwd_weight")
    assert not rejected("ConvMlirIgemmFwdXdlops", conv(layout="NHWC", G=2))


def test_rules_of_the_opencl_and_implicit_gemm_solvers():
    one, s2 = conv(Y=1, X=1, pad_h=0, pad_w=0), dict(stride_h=2, stride_w=2)
    wrw = lambda name, p: rejected(name, p, "bwd_weight", "fp32")  # noqa: E731
    # conv_ocl_dir2Dfwd1x1.cpp: unpadded undilated 1x1, not backward weights
    assert not rejected("ConvOclDirectFwd1x1", one) and rejected("ConvOclDirectFwd1x1", conv())
    assert rejected("ConvOclDirectFwd1x1", one, "bwd_weight")
    # conv_ocl_dir2Dfwdgen.cpp: forward; a filter over 11, or a strided one that is not 1x1
    assert rejected("ConvOclDirectFwdGen", conv()) and not rejected("ConvOclDirectFwdGen", conv(**s2))
    assert not rejected("ConvOclDirectFwdGen", conv(Y=13, X=13, pad_h=6, pad_w=6))
    assert rejected("ConvOclDirectFwdGen", conv(Y=1, X=1, pad_h=0, pad_w=0, **s2))
    # conv_ocl_dir2D_bwdWrW_1x1.cpp: 1x1, C and K multiples of 16
    assert not wrw("ConvOclBwdWrW1x1", one) and wrw("ConvOclBwdWrW1x1", conv(Y=1, X=1, pad_h=0, pad_w=0, C=24))
    # conv_ocl_dir2D_bwdWrW_53.cpp: stride 1, pad below the filter
    assert not wrw("ConvOclBwdWrW53", conv()) and wrw("ConvOclBwdWrW53", conv(**s2))
    assert wrw("ConvOclBwdWrW53", conv(pad_h=3, pad_w=3))
    # conv_ocl_dir2D_bwdWrW_2.cpp: the tunable ones take a batch of at least their loops and leave
    # ungrouped 3x3 to the non-tunable one
    assert not wrw("ConvOclBwdWrW2<4>", conv(G=2)) and wrw("ConvOclBwdWrW2<4>", conv(G=2, N=2))
    assert wrw("ConvOclBwdWrW2<4>", conv()) and not wrw("ConvOclBwdWrW2NonTunable", conv())
    assert wrw("ConvOclBwdWrW2NonTunable", conv(G=2)) and wrw("ConvOclBwdWrW2<1>", conv(G=2, Y=12, X=12, pad_h=0, pad_w=0))
    # implicitgemm_static_ck_util.hpp, IsValidGridGemmXdlops on the forward GEMM K/G x N*Ho*Wo x C/G*Y*X
    # (here 64 x 6272 x 576: on the grid; depthwise: 1 x 6272 x 9 is not)
    assert not rejected("ConvHipImplicitGemmForwardV4R4Xdlops", conv())
    assert rejected("ConvHipImplicitGemmForwardV4R4Xdlops", conv(C=64, K=64, G=64))
    # the padded variant takes only what needs padding (K/G to 16, N*Ho*Wo to 64, C/G*Y*X to 4)
    assert rejected("ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm", conv())
    assert not rejected("ConvHipImplicitGemmForwardV4R4Xdlops_Padded_Gemm", conv(K=60))
    assert rejected("ConvHipImplicitGemmForwardV4R5Xdlops", one) and not rejected("ConvHipImplicitGemmForwardV4R5Xdlops", conv())
    # backward weights: K/G x C/G*Y*X (64 x 576), N*Ho*Wo in fours; padded: Ho*Wo 784 needs none, 729 does
    assert not wrw("ConvHipImplicitGemmWrwV4R4Xdlops", conv()) and wrw("ConvHipImplicitGemmWrwV4R4Xdlops", conv(K=6))
    assert wrw("ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm", conv())
    assert not wrw("ConvHipImplicitGemmWrwV4R4Xdlops_Padded_Gemm", conv(Hi=27, Wi=27))
    # conv_hip_implicit_gemm_fwd_v4r1.cpp / _wrw_v4r1.cpp: N in eights (forward), C/G*Y*X in 64s (backward weights)
    assert not rejected("ConvHipImplicitGemmV4R1Fwd", conv(), "fwd", "fp32")
    assert rejected("ConvHipImplicitGemmV4R1Fwd", conv(N=4), "fwd", "fp32")
    assert not wrw("ConvHipImplicitGemmV4R1WrW", conv()) and wrw("ConvHipImplicitGemmV4R1WrW", conv(C=8))
    # conv_hip_implicit_gemm_{fwd,wrw}_v4r4.cpp: K in 32s, then 32 x 4 on the direction's GEMM
    assert not rejected("ConvHipImplicitGemmV4R4Fwd", conv(), "fwd", "fp32")
    assert rejected("ConvHipImplicitGemmV4R4Fwd", conv(K=48), "fwd", "fp32")
    assert not wrw("ConvHipImplicitGemmV4R4WrW", conv()) and wrw("ConvHipImplicitGemmV4R4WrW", conv(C=2, Y=1, X=1, pad_h=0, pad_w=0))


LINES = [  # a tiny hand-made find-db: kinds are written beside each line
    # forward fp16 NCHW, 32 groups of 8 channels, 3x3: NCHW/fp16/grouped/square for both solvers
    "256-56-56-3x3-256-56-56-32-1x1-1x1-1x1-0-NCHW-FP16-F_g32=ConvBinWinogradRxSf2x3:0.22,0,"
    "miopenConvolutionFwdAlgoWinograd;ConvHipImplicitGemmGroupFwdXdlops:0.88,1024,miopenConvolutionFwdAlgoImplicitGEMM",
    # forward fp16 NCHW, ungrouped 1x1: NCHW/fp16/dense/1x1
    "64-56-56-1x1-64-56-56-32-0x0-1x1-1x1-0-NCHW-FP16-F=GemmFwd1x1_0_1:0.1,0,miopenConvolutionFwdAlgoGEMM",
    # backward data fp16, depthwise 512 groups, 1x3: NCHW/fp16/depthwise/rect
    "512-14-14-1x3-512-14-14-8-0x1-1x1-1x1-0-NCHW-FP16-B_g512=ConvDirectNaiveConvBwd:0.5,0,"
    "miopenConvolutionBwdDataAlgoDirect",
]


@pytest.fixture
def tiny_fdb(tmp_path):
    path = tmp_path / "gfx942130.HIP.fdb.txt.bz2"
    path.write_bytes(bz2.compress(("\n".join(LINES) + "\n").encode()))
    return read_find_db(path)


def test_listed_rule_learned_from_a_hand_made_find_db(tiny_fdb):
    assert learn_listed(tiny_fdb, "fwd") == {"ConvBinWinogradRxSf2x3": ["NCHW/fp16/grouped/square"],
                                             "ConvHipImplicitGemmGroupFwdXdlops": ["NCHW/fp16/grouped/square"],
                                             "GemmFwd1x1_0_1": ["NCHW/fp16/dense/1x1"]}
    assert learn_listed(tiny_fdb, "bwd_data") == {"ConvDirectNaiveConvBwd": ["NCHW/fp16/depthwise/rect"]}


def _kernels(names):
    return ms.support_arrays([ms.Solver(n, "fwd", i, "direct", "other") for i, n in enumerate(names)])


def test_support_mask_modes(tiny_fdb):
    names = ["GemmFwd1x1_0_1", "ConvBinWinogradRxSf2x3", "ConvHipImplicitGemmGroupFwdXdlops", "ConvDirectNaiveConvFwd"]
    op = {"direction": "fwd", "dtype": "fp16", "listed": learn_listed(tiny_fdb, "fwd")}
    grouped = conv(C=256, K=256, G=32)
    mask = lambda p, mode: list(ms.support_mask(p, _kernels(names), {**op, "applicability": mode})[0])  # noqa: E731
    assert mask(grouped, "none") == [True] * 4
    assert mask(grouped, "rules") == [False, True, True, True]  # 3x3: not the 1x1 GEMM
    assert mask(grouped, "listed") == [False, True, True, False]  # the naive solver is never listed here
    # a kind the file never lists for any solver says nothing: the rules' solvers stay (ungrouped
    # forward is not the <2,3> Winograd's: conv_winoRxS.cpp leaves it to the g1 variant)
    assert mask(conv(Y=1, X=5, pad_h=0, pad_w=2), "both") == [False, False, True, True]
    # a kind listed in another data type only: that data type's listing answers
    op32 = {**op, "dtype": "fp32"}
    assert list(ms.support_mask(grouped, _kernels(names), {**op32, "applicability": "listed"})[0]) == \
        [False, True, True, False]
    with pytest.raises(KernelError, match="op.applicability=listed needs op.listed"):
        ms.support_mask(grouped, _kernels(names), {"direction": "fwd", "dtype": "fp16", "applicability": "listed"})
    with pytest.raises(KernelError, match="op.applicability='maybe'; allowed: none, rules, listed, both"):
        ms.support_mask(grouped, _kernels(names), {**op, "applicability": "maybe"})
    # a misspelt kind would never match: a selector refuses it once, naming the solver and the parts
    with pytest.raises(KernelError, match=r"op.listed\['GemmFwd1x1_0_1'\]: kind 'NCHW/fp16/dense/sqare' is not"):
        Selector.load(shipped_models_dir() / "miopen_fwd_fp16_gfx942", applicability="listed",
                      listed={"GemmFwd1x1_0_1": ["NCHW/fp16/dense/sqare"]})


def test_masked_picks_leave_no_unlisted_pick():
    """The unlisted-pick rate by hand, before and after the mask removes a solver MIOpen rejects."""
    names = ["ConvOclDirectFwd", "ConvDirectNaiveConvBwd", "GemmBwdRest"]
    problems = [conv(**DEPTHWISE_1X3), conv(C=512, K=512, G=512), conv(C=512, K=512, G=512, Hi=56, Wi=56)]
    scores = np.array([[.9, .5, .1], [.9, .5, .1], [.1, .9, .5]])  # ConvOclDirectFwd first on two problems
    t = np.array([[np.nan, 2.0, 1.0], [1.0, np.nan, 3.0], [np.nan, 4.0, 2.0]])  # NaN: not listed
    pid = np.repeat(np.arange(3), 3)
    before = censored_choice_report(pid, scores.ravel(), t.ravel())["open"]
    assert before["picks_outside_listed"] == pytest.approx(1 / 3)  # problem 0 picks the unlisted OpenCL solver
    assert before["top1"] == pytest.approx(1 / 3)  # problem 1's pick is its fastest; problem 2's is not
    op = {"direction": "bwd_data", "dtype": "fp16", "applicability": "rules"}
    masked = scores.copy()
    for i, p in enumerate(problems):
        masked[i][~ms.support_mask(p, _kernels(names), op)[0]] = -np.inf
    after = censored_choice_report(pid, masked.ravel(), t.ravel())["open"]
    assert after["picks_outside_listed"] == 0 and after["top1"] == pytest.approx(1 / 3)
    assert after["efficiency"]["mean"] == pytest.approx((0.5 + 1 + 0.5) / 3)


def test_shipped_bundle_opts_in_and_never_ranks_a_rejected_solver():
    path = shipped_models_dir() / "miopen_bwd_data_fp16_gfx90a"
    p = conv(N=8, **DEPTHWISE_1X3)
    everything = [k for k, _ in Selector.load(path, applicability="none").rank(p, k=100)]
    assert "ConvOclDirectFwd" in everything  # none: every solver of the table
    ruled = [k for k, _ in Selector.load(path, applicability="rules").rank(p, k=100)]
    assert "ConvOclDirectFwd" not in ruled and set(ruled) < set(everything)
    assert Selector.load(path, applicability="rules").select(p).kernel in ruled
    shipped = [k for k, _ in Selector.load(path).rank(p, k=100)]  # the bundle's own: both
    assert set(shipped) <= set(ruled)


def test_best_fixed_kernel_in_find_db_terms_by_hand():
    """stage=evaluate's censored table gives the best fixed kernel beside the model: its open pick
    the kernel of best mean efficiency, its listed pick the first of that order a problem lists."""
    from ckheur.evaluation.scoring import Scored, evaluation_metrics

    # kernels a, b, c; NaN time: not listed. Efficiencies: p0 a=1 b=.5; p1 b=1 c=.5; p2 a=.8 b=1 c=.4
    t = [np.array([1.0, 2.0, np.nan]), np.array([np.nan, 1.0, 2.0]), np.array([1.25, 1.0, 2.5])]
    eff = [np.nan_to_num(1 / x * np.nanmin(x), nan=0.0) for x in t]
    scores = [np.array([.3, .2, .1]), np.array([.3, .2, .1]), np.array([.1, .2, .3])]  # the model's
    s = Scored(kernels=["a", "b", "c"], censored=True,
               candidate_eff=[(np.arange(3), e) for e in eff], choice=[(sc, x) for sc, x in zip(scores, t)],
               rows=[{"problem": f"p{i}", "efficiency": float(e[np.argmax(sc)]), "oracle_latency_ms": 1.0,
                      "top1": 0.0, "within_1pct": 0.0, "oracle_in_top5": 1.0, "pick_failed": 0.0,
                      "pool_not_measured": 0, "pick_pipeline": "direct"} for i, (e, sc) in enumerate(zip(eff, scores))])
    beside = evaluation_metrics(s, {})["censored_beside"]["best fixed kernel"]
    fixed, model = beside["best fixed kernel"], beside["model"]
    # mean efficiency: a 0.6, b 0.833, c 0.3: b first, then a, then c; every problem lists b
    assert fixed["open"]["picks_outside_listed"] == 0 and fixed["open"]["top1"] == pytest.approx(2 / 3)
    assert fixed["open"]["efficiency"]["mean"] == pytest.approx((0.5 + 1 + 1) / 3)
    # the model: a (listed, best), a (unlisted), c (listed, 0.4); listed protocol: a, b, c
    assert model["open"]["picks_outside_listed"] == pytest.approx(1 / 3) and model["open"]["top1"] == pytest.approx(1 / 3)
    assert model["listed"]["top1"] == pytest.approx(2 / 3) and model["listed"]["picks_outside_listed"] == 0


def test_the_command_lines_applicability_reaches_a_shipped_bundle(tmp_path):
    """op.applicability=rules on the command line ranks a shipped bundle (trained without it) through
    the rules: the OpenCL direct solver is never listed for the depthwise 1x3 problem."""
    from conftest import run_cli
    from ckheur.families.miopen.problems import to_driver_line

    line = to_driver_line(conv(N=8, **DEPTHWISE_1X3), "fp16")
    args = ["stage=predict", "op=miopen/bwd_data", "op.dtype=fp16", "arch=gfx90a", "predict.k=40", f"problem={line}"]
    plain_run, ruled, shipped = (run_cli(*args, "op.applicability=none"), run_cli(*args, "op.applicability=rules"),
                                 run_cli(*args))
    assert plain_run.returncode == ruled.returncode == shipped.returncode == 0, ruled.stderr
    named = lambda out: {w for ln in out.splitlines() for w in ln.split()}  # noqa: E731 (words, not prefixes)
    assert "ConvOclDirectFwd" in named(plain_run.stdout) and "ConvOclDirectFwd" not in named(ruled.stdout)
    assert "ConvOclDirectFwd" not in named(shipped.stdout)  # the shipped bundle ranks with both
