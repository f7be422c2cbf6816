/* MIOpen convolutions (ckheur.families.miopen.problems): the conv checks of conv_problem.c plus layout
 * and bias, the solver-choice features of ckheur.families.miopen.features, and which solvers are
 * ranked (op.applicability, ckheur.families.miopen.solvers.support_mask), written to match them
 * exactly (the parity tests hold them to it). */

#if CKH_APPLY_RULES
/* implicitgemm_static_ck_util.hpp, IsValidGridGemmXdlops: a GEMM M x N x K the xdlops tiles cover */
static int ckh_xdlops_grid(int64_t m, int64_t n, int64_t k) {
    if (m % 16 && n % 64) return 0;
    return (m * n) % 256 == 0 && (k * m) % 64 == 0 && (k * n) % 64 == 0 && n % 16 == 0 && m % 4 == 0 && k % 4 == 0;
}

/* Whether MIOpen's IsApplicable rejects the problem for a solver of this rule: the C twins of
 * ckheur.families.miopen.solvers.RULES, case by case (each cites the MIOpen source its Python rule
 * cites); the direction and data type are the model's; arg sets apart the solvers of
 * one rule (solvers.RULES' c_arg). */
static int ckh_rule_rejects(int rule, int arg, const ckh_problem_t* p, const int64_t* out) {
    const int fp16 = CKH_OP_FP16, fp32 = CKH_OP_FP32, fwd = CKH_OP_FWD, wrw = CKH_OP_BWD_WEIGHT;
    const int nchw = p->layout == CKH_LAYOUT_NCHW;
    const int ndim = p->layout == CKH_LAYOUT_NCDHW || p->layout == CKH_LAYOUT_NDHWC ? 3 : 2;
    const int64_t Do = out[0], Ho = out[1], Wo = out[2];  /* the output's sizes, computed once per problem */
    const int64_t cg = p->C / p->G, kg = p->K / p->G, pix = p->N * Ho * Wo;
    const int undilated = p->dilation_h == 1 && p->dilation_w == 1;
    switch (rule) {
    case CKH_RULE_OCL_DIRECT_FWD: {  /* conv_ocl_dir2D.cpp, ConvOclDirectFwd::IsApplicable */
        if (ndim != 2 || !nchw || wrw) return 1;
        if (p->pad_h != p->pad_w || p->stride_h != p->stride_w) return 1;
        if (p->dilation_h != 1 || p->dilation_w != 1) return 1;
        if (p->stride_h > 2 || p->stride_w > 2) return 1;
        if (p->G == 1) {
            if (p->Y == 1 && p->X == 1) return 1;  /* ungrouped 1x1 is left to the 1x1 solvers */
            int listed = (p->Y == p->X && (p->Y == 3 || p->Y == 5 || p->Y == 7 || p->Y == 9 || p->Y == 11))
                         || (p->Y == 5 && (p->X == 10 || p->X == 20) && p->stride_h == 2 && p->stride_w == 2
                             && p->pad_h == 0 && p->pad_w == 0)
                         || (fp16 && p->Y == 4 && p->X == 4 && p->pad_h == 0 && p->pad_w == 0);
            if (!listed) return 1;
        }
        return fwd && fp16 && p->stride_w == 2;
    }
    case CKH_RULE_ASM_1X1U:  /* conv_asm_1x1u.cpp, ConvAsm1x1U::IsApplicable */
        return ndim != 2 || !nchw || wrw || !(fp32 || fp16) || p->Y != 1 || p->X != 1 || p->pad_h != 0
               || p->pad_w != 0 || p->dilation_h != 1 || p->dilation_w != 1 || p->G != 1 || p->bias != 0
               || p->stride_h != p->stride_w || p->stride_w > 2;
    case CKH_RULE_GEMM_1X1_STRIDE1:  /* gemm.cpp, GemmFwd1x1_0_1 (gemm_bwd.cpp, gemm_wrw.cpp: its 1x1 twins) */
    case CKH_RULE_GEMM_1X1_STRIDE2: {  /* gemm.cpp, GemmFwd1x1_0_2 (gemm_bwd.cpp: GemmBwd1x1_stride2) */
        int one = p->Y == 1 && p->X == 1 && p->pad_h == 0 && p->pad_w == 0
                  && (ndim == 2 || (p->Z == 1 && p->pad_d == 0));
        int unit = p->stride_h == 1 && p->stride_w == 1 && (ndim == 2 || p->stride_d == 1);
        return !one || (rule == CKH_RULE_GEMM_1X1_STRIDE1 ? !unit : unit);
    }
    case CKH_RULE_FFT:  /* fft.cpp, fft::IsApplicable */
        return !(fp32 && !wrw && nchw && p->G == 1 && p->dilation_h == 1 && p->dilation_w == 1);
    case CKH_RULE_LAYOUT_NCHW_NHWC:  /* conv_hip_implicit_gemm_grouped_{fwd,bwd,wrw}_xdlops.cpp: Is2d */
        return ndim != 2;
    case CKH_RULE_LAYOUT_NCDHW_NDHWC:  /* conv_hip_implicit_gemm_3d_grouped_{fwd,bwd,wrw}_xdlops.cpp: Is3d */
        return ndim != 3;
    case CKH_RULE_WINOGRAD_RXS:  /* conv_winoRxS.cpp, ConvBinWinoRxS<2,3> / <3,2>::IsApplicableBase */
    case CKH_RULE_WINOGRAD_RXS_F2X3:  /* ... and <2,3>::IsApplicable: ungrouped in backward weights only */
    case CKH_RULE_WINOGRAD_RXS_G1: {  /* ... and ConvBinWinogradRxSf2x3g1::IsApplicable: one group */
        const int bwd_data = !fwd && !wrw;
        if (!nchw || p->stride_h != p->stride_w || p->stride_w > 2 || (wrw && p->stride_w != 1)) return 1;
        if (p->dilation_h != 1 || p->dilation_w != 1 || p->bias) return 1;
        if (bwd_data && (p->pad_h >= p->Y || p->pad_w >= p->X)) return 1;  /* backward pad filter - pad - 1 >= 0 */
        if (rule == CKH_RULE_WINOGRAD_RXS_F2X3) return p->G == 1 && !wrw;
        return rule == CKH_RULE_WINOGRAD_RXS_G1 && p->G != 1;
    }
    case CKH_RULE_ASM_WRW_1X1:  /* conv_asm_dir_BwdWrW1x1.cpp, ConvAsmBwdWrW1x1::IsApplicable */
        return p->Y != 1 || p->X != 1 || p->pad_h != 0 || p->pad_w != 0 || p->dilation_h != 1 || p->dilation_w != 1
               || p->bias || p->stride_h != p->stride_w || p->stride_w > 2;
    case CKH_RULE_ASM_3X3U:  /* conv_asm_3x3u.cpp, ConvAsm3x3U::IsApplicable: its input is x or dy */
        return p->Y != 3 || p->X != 3 || p->pad_h != 1 || p->pad_w != 1 || p->stride_h != 1 || p->stride_w != 1
               || p->dilation_h != 1 || p->dilation_w != 1 || wrw || ((fwd ? p->C : p->K) / p->G) % 4 != 0
               || p->Wi <= 3 || p->Wi > 1000;
    case CKH_RULE_BWD_DATA_V1R1: {  /* conv_hip_implicit_gemm_bwd_v1r1.cpp: GEMM tiles 32 x 32 x 4 */
        const int64_t pack = !fp16 && !fp32 ? 2 : 1;  /* bf16: K in packs of 2 */
        return p->K % pack != 0 || (p->C * p->Z * p->Y * p->X) % 32 != 0 || (pix * Do) % 32 != 0
               || (p->K / pack) % 4 != 0;
    }
    case CKH_RULE_OCL_FWD_1X1:  /* conv_ocl_dir2Dfwd1x1.cpp, ConvOclDirectFwd1x1::IsApplicable */
        return p->Y != 1 || p->X != 1 || p->pad_h != 0 || p->pad_w != 0 || !undilated || wrw;
    case CKH_RULE_OCL_FWD_GEN:  /* conv_ocl_dir2Dfwdgen.cpp, ConvOclDirectFwdGen::IsApplicable */
        return !fwd || p->stride_h != p->stride_w || p->pad_h != p->pad_w || !undilated
               || !(p->Y > 11 || p->X > 11 || (!(p->Y == 1 && p->X == 1) && p->stride_h > 1));
    case CKH_RULE_OCL_WRW_1X1:  /* conv_ocl_dir2D_bwdWrW_1x1.cpp, ConvOclBwdWrW1x1::IsApplicable */
        return p->Y != 1 || p->X != 1 || !undilated || p->C % 16 != 0 || p->K % 16 != 0;
    case CKH_RULE_OCL_WRW_53:  /* conv_ocl_dir2D_bwdWrW_53.cpp, ConvOclBwdWrW53::IsApplicable */
        return p->stride_h != 1 || p->stride_w != 1 || !undilated || p->pad_h >= p->Y || p->Y > p->Hi + 2 * p->pad_h;
    case CKH_RULE_OCL_WRW_2: {  /* conv_ocl_dir2D_bwdWrW_2.cpp: arg = 2 x batch loops + tunable */
        const int tunable = arg & 1, special = p->Y == 5 && (p->X == 10 || p->X == 20) && p->stride_h == 2
            && p->stride_w == 2 && ((p->Hi == 79 && p->Wi == 341) || (p->Hi == 161 && p->Wi == 700));
        const int small = p->G == 1 && ((p->Y == 3 && p->X == 3) || (p->Y == 1 && p->X == 1));
        return !undilated || p->Y - p->stride_h < p->pad_h || p->N < arg / 2 || p->Y < 2 || p->Y > 11 || Wo < 6
               || (p->X >= 8 && p->X % 2 == 0 && !special) || small == tunable;
    }
    case CKH_RULE_WINO_MULTIPASS_WRW: {  /* conv_multipass_wino3x3WrW.cpp: arg = 100 DH + 10 DW + strides */
        const int64_t s = p->stride_h;
        return p->Y != arg / 100 || p->X != arg / 10 % 10 || p->stride_w != s || s < 1 || s > 2
               || !((arg % 10) >> (s - 1) & 1) || !undilated || p->bias || p->pad_h > 3 || p->pad_w > 3;
    }
    case CKH_RULE_FWD_V4R4_XDLOPS:  /* conv_hip_implicit_gemm_fwd_v4r4_xdlops.cpp: K/G x N*Ho*Wo x C/G*Y*X */
        return !ckh_xdlops_grid(kg, pix, cg * p->Y * p->X);
    case CKH_RULE_FWD_V4R5_XDLOPS:  /* ..._fwd_v4r5_xdlops.cpp: not 1x1, then the V4R4 grid check */
        return (p->Y == 1 && p->X == 1) || !ckh_xdlops_grid(kg, pix, cg * p->Y * p->X);
    case CKH_RULE_FWD_V4R4_XDLOPS_PADDED:  /* ..._padded_gemm.cpp: a GEMM that needs padding */
        return kg % 16 == 0 && pix % 64 == 0 && (cg * p->Y * p->X) % 4 == 0;
    case CKH_RULE_WRW_V4R4_XDLOPS: {  /* ..._wrw_v4r4_xdlops.cpp: the grid check's parts free of kb */
        const int64_t n = cg * p->Y * p->X;
        return !(kg % 4 == 0 && n % 16 == 0 && (kg % 16 == 0 || n % 64 == 0) && (kg * n) % 256 == 0 && pix % 4 == 0);
    }
    case CKH_RULE_WRW_V4R4_XDLOPS_PADDED:  /* ..._wrw_v4r4_xdlops_padded_gemm.cpp: a GEMM that needs padding */
        return kg % 16 == 0 && (cg * p->Y * p->X) % 64 == 0 && (Ho * Wo) % 16 == 0;
    case CKH_RULE_FWD_V4R1: {  /* conv_hip_implicit_gemm_fwd_v4r1.cpp, ConvHipImplicitGemmV4R1Fwd */
        const int64_t pack = fp32 ? 1 : 2, multiple = fp32 ? 8 : 16;
        return !(cg % pack == 0 && p->N % 8 == 0 && pix % 32 == 0 && (pix * kg) % 1024 == 0
                 && (cg * p->Y * p->X) % multiple == 0 && kg % 16 == 0);
    }
    case CKH_RULE_WRW_V4R1: {  /* conv_hip_implicit_gemm_wrw_v4r1.cpp, ConvHipImplicitGemmV4R1WrW */
        const int64_t pack = fp32 ? 1 : 2, multiple = fp32 ? 8 : 16, cyx = cg * p->Y * p->X;
        return !(p->N % pack == 0 && cg % 8 == 0 && cyx % 64 == 0 && pix % multiple == 0 && kg % 16 == 0
                 && (cyx * kg) % 1024 == 0);
    }
    case CKH_RULE_V4R4: {  /* conv_hip_implicit_gemm_{fwd,wrw}_v4r4.cpp: GEMM tiles 32 x 32 x 4 */
        const int64_t opix = pix * Do, cf = p->C * p->Z * p->Y * p->X;
        return !(p->K % 32 == 0 && (fwd ? opix : cf) % 32 == 0 && (fwd ? cf : opix) % 4 == 0);
    }
    default:
        return 0;  /* a solver without a rule is never rejected */
    }
}
#endif

#if CKH_ALLOWED
/* The solvers ranked for the problem (solvers.support_mask), as bits of q->allowed: those no rule
 * rejects, then of those the ones listed for the problem's kind (layout, data type, group and
 * filter kind), else listed for the kind in any data type, else all of them (a kind never listed
 * says nothing). None left: no candidate, so the problem is reported as unsupported. */
static void ckh_applicable(const ckh_problem_t* p, ckh_prob* q) {
    uint64_t* ok = q->allowed;
    for (int w = 0; w < (CKH_NKERN + 63) / 64; ++w) ok[w] = 0;
#if CKH_APPLY_RULES
    const int64_t out[3] = {ckh_out_size(p->Di, p->pad_d, p->dilation_d, p->Z, p->stride_d),
                            ckh_out_size(p->Hi, p->pad_h, p->dilation_h, p->Y, p->stride_h),
                            ckh_out_size(p->Wi, p->pad_w, p->dilation_w, p->X, p->stride_w)};
#endif
    for (int k = 0; k < CKH_NKERN; ++k) {
#if CKH_APPLY_RULES
        if (ckh_rule_rejects(ckh_rule_of[k], ckh_rule_arg[k], p, out)) continue;
        {   /* the solver's structure: its layouts, one group, the op's data type */
            const unsigned s = ckh_structure[k];
            if (!(s >> p->layout & 1u) || ((s & 16u) && p->G != 1) || (s & 32u)) continue;
        }
#endif
        ok[k / 64] |= (uint64_t)1 << (k % 64);
    }
#if CKH_APPLY_LISTED
    {
        /* the kind's code, as solvers.kind_code: (layout x group kind) x filter kind, a layout's
         * code being its index in LAYOUTS */
        int group = p->G == 1 ? 0 : p->C == p->G ? 1 : 2;   /* dense, depthwise, grouped */
        int ndim = p->layout == CKH_LAYOUT_NCDHW || p->layout == CKH_LAYOUT_NDHWC ? 3 : 2, filter;
        int ones = p->Y == 1 && p->X == 1 && (ndim == 2 || p->Z == 1);
        int equal = p->Y == p->X && (ndim == 2 || p->Z == p->Y);
        filter = ones ? 0 : equal ? 1 : 2;                  /* 1x1, square, rect */
        const uint64_t bit = (uint64_t)1 << ((p->layout * 3 + group) * 3 + filter);
        const uint64_t* tables[2] = {ckh_listed_same, ckh_listed_any};
        for (int t = 0; t < 2; ++t) {  /* this data type's listing, else any data type's */
            uint64_t seen[(CKH_NKERN + 63) / 64];
            int any = 0;
            for (int w = 0; w < (CKH_NKERN + 63) / 64; ++w) seen[w] = 0;
            for (int k = 0; k < CKH_NKERN; ++k)
                if ((ok[k / 64] >> (k % 64) & 1u) && (tables[t][k] & bit)) {
                    seen[k / 64] |= (uint64_t)1 << (k % 64);
                    any = 1;
                }
            if (any) {
                for (int w = 0; w < (CKH_NKERN + 63) / 64; ++w) ok[w] = seen[w];
                break;
            }
        }
    }
#endif
}
#endif

static int ckh_check(const ckh_problem_t* p, ckh_prob* q) {
    if (p->layout < 0 || p->layout > 3) return CKH_E_LAYOUT;
    if (p->bias != 0 && p->bias != 1) return CKH_E_BIAS;
    int err = ckh_conv_check(p, q);
    if (err) return err;
    int ndim = p->layout >= 2 ? 3 : 2;  /* NCDHW, NDHWC: 3D even of depth 1 */
    if (ndim == 2 && q->f[1] == 3.0) return CKH_E_LAYOUT_DIMS;
    q->f[1] = (double)ndim;
    q->group = 0;
#if CKH_ALLOWED
    ckh_applicable(p, q);
#endif
    return 0;
}

static int ckh_supports(const ckh_prob* q, const ckh_kernel* k) {
#if CKH_ALLOWED
    const int i = (int)(k - ckh_kernels);  /* k points into ckh_kernels */
    return (int)(q->allowed[i / 64] >> (i % 64) & 1u);
#else
    (void)q; (void)k;  /* op.applicability=none: every solver of the table is ranked */
    return 1;
#endif
}

static double ckh_pow2(int64_t v) {  /* log2 of the largest power of two dividing v, at most 10 */
    int64_t low = v & -v;
    if (low < 1) low = 1;
    if (low > 1024) low = 1024;
    return log2((double)low);
}

static double ckh_log2_1(double v) { return log2(v > 1.0 ? v : 1.0); }

static void ckh_problem_features(const ckh_prob* q, float* xp) {
    const ckh_problem_t* p = q->p;
    const double eb = CKH_ENGINE_BYTES;
    SETP(log_N, ckh_log2_1((double)p->N));
    SETP(log_C, ckh_log2_1((double)p->C));
    SETP(log_K, ckh_log2_1((double)p->K));
    SETP(G, (double)p->G);
    SETP(log_G, ckh_log2_1((double)p->G));
    SETP(log_Di, ckh_log2_1((double)p->Di));
    SETP(log_Hi, ckh_log2_1((double)p->Hi));
    SETP(log_Wi, ckh_log2_1((double)p->Wi));
    SETP(Z, (double)p->Z);
    SETP(Y, (double)p->Y);
    SETP(X, (double)p->X);
    SETP(pad_d, (double)p->pad_d);
    SETP(pad_h, (double)p->pad_h);
    SETP(pad_w, (double)p->pad_w);
    SETP(stride_d, (double)p->stride_d);
    SETP(stride_h, (double)p->stride_h);
    SETP(stride_w, (double)p->stride_w);
    SETP(dilation_d, (double)p->dilation_d);
    SETP(dilation_h, (double)p->dilation_h);
    SETP(dilation_w, (double)p->dilation_w);
    SETP(layout_nhwc, (p->layout == 1 || p->layout == 3) ? 1.0 : 0.0);
    SETP(bias, (double)p->bias);
    SETP(ndim, q->f[1]);
    SETP(log_M, ckh_log2_1(q->M * q->G));
    SETP(log_Ngemm, ckh_log2_1(q->N));
    SETP(log_Kgemm, ckh_log2_1(q->K));
    SETP(log_flops, ckh_log2_1(q->flops));
    SETP(log_bytes, ckh_log2_1(q->elems * eb));
    SETP(intensity, q->flops / (q->elems * eb > 1.0 ? q->elems * eb : 1.0));
    SETP(log_c_per_group, ckh_log2_1(q->cpg));
    SETP(log_k_per_group, ckh_log2_1(q->f[2]));
    SETP(is_depthwise, q->f[3]);
    SETP(is_1x1, q->filt == 1.0 ? 1.0 : 0.0);
    SETP(log_out_pixels, ckh_log2_1(q->f[6]));
    SETP(log_Ho, ckh_log2_1(q->f[7]));
    SETP(log_Wo, ckh_log2_1(q->f[8]));
    SETP(pow2_c_per_group, ckh_pow2(p->C / p->G));
    SETP(pow2_k_per_group, ckh_pow2(p->K / p->G));
    SETP(pow2_N, ckh_pow2(p->N));
    SETP(pow2_Hi, ckh_pow2(p->Hi));
    SETP(pow2_Wi, ckh_pow2(p->Wi));
    SETP(pow2_out_pixels, ckh_pow2((int64_t)q->f[6]));
}

static void ckh_pair_features(const ckh_prob* q, const ckh_kernel* k, double atf, double atf_max,
                              float (*xi)[CKH_CHUNK], int c) {
    (void)q; (void)k; (void)atf; (void)atf_max; (void)xi; (void)c;  /* solver features are kernel-only */
}
