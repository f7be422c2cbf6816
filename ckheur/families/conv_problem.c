/* Convolution problems (the fields of ckheur.families.grouped_conv.problems, in the struct of either conv family):
 * the checks of ckheur.families.grouped_conv.problems and the implicit GEMM of the direction, shared by the
 * grouped_conv and miopen families. Family extras in ckh_prob.f: 0 N, 1 ndim (from the depth
 * fields), 2 K/G, 3 depthwise, 4 max stride, 5 max dilation, 6 Do*Ho*Wo, 7 Ho, 8 Wo. */

static int64_t ckh_floordiv(int64_t a, int64_t b) {  /* Python's // for b > 0 */
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

static int64_t ckh_out_size(int64_t size, int64_t pad, int64_t dil, int64_t filt, int64_t stride) {
    return ckh_floordiv(size + 2 * pad - dil * (filt - 1) - 1, stride) + 1;
}

static int ckh_conv_check(const ckh_problem_t* p, ckh_prob* q) {
    const int64_t v[CKH_NFIELDS] = {p->N, p->C, p->K, p->G, p->Di, p->Hi, p->Wi, p->Z, p->Y, p->X, p->stride_d,
                                    p->stride_h, p->stride_w, p->pad_d, p->pad_h, p->pad_w, p->dilation_d,
                                    p->dilation_h, p->dilation_w};
    for (int i = 0; i < CKH_NFIELDS; ++i) {
        if (v[i] < ckh_field_min[i]) return CKH_E_FIELD - i;
        if (v[i] > CKH_FIELD_MAX) return CKH_E_FIELD_LARGE - i;
    }
    if (p->direction != CKH_DIRECTION) return CKH_E_DIRECTION;
    if (p->dtype != CKH_DTYPE) return CKH_E_DTYPE;
    if (p->C % p->G) return CKH_E_C_GROUPS;
    if (p->K % p->G) return CKH_E_K_GROUPS;
    int64_t Do = ckh_out_size(p->Di, p->pad_d, p->dilation_d, p->Z, p->stride_d);
    int64_t Ho = ckh_out_size(p->Hi, p->pad_h, p->dilation_h, p->Y, p->stride_h);
    int64_t Wo = ckh_out_size(p->Wi, p->pad_w, p->dilation_w, p->X, p->stride_w);
    if (Do < 1 || Ho < 1 || Wo < 1) return CKH_E_EMPTY_OUTPUT;
    /* Sizes in double: exact while every product stays below 2^53 (checked below). */
    double N = (double)p->N, G = (double)p->G, cg = (double)(p->C / p->G), kg = (double)(p->K / p->G);
    double filt = (double)p->Z * (double)p->Y * (double)p->X;
    double opix = (double)Do * (double)Ho * (double)Wo, ipix = (double)p->Di * (double)p->Hi * (double)p->Wi;
    q->flops = 2.0 * N * (double)p->K * opix * cg * filt;
    q->elems = N * ipix * G * cg + G * kg * filt * cg + N * opix * G * kg;
    if (!(q->flops < CKH_EXACT_LIMIT) || !(q->elems < CKH_EXACT_LIMIT)) return CKH_E_TOO_LARGE;
    q->G = G;
#if CKH_DIRECTION == 0
    q->M = N * opix; q->N = kg; q->K = cg * filt;
#elif CKH_DIRECTION == 1
    q->M = N * ipix; q->N = cg; q->K = kg * filt;
#else
    q->M = kg; q->N = cg * filt; q->K = N * opix;
#endif
    q->filt = filt;
    q->cpg = cg;
    q->split_k = 1.0;
    q->transposed = 0.0;
    q->k_splits = 1.0;
    int ndim = (p->Di != 1 || p->Z != 1 || p->stride_d != 1 || p->pad_d != 0 || p->dilation_d != 1) ? 3 : 2;
    int64_t st = p->stride_d > p->stride_h ? p->stride_d : p->stride_h;
    int64_t dl = p->dilation_d > p->dilation_h ? p->dilation_d : p->dilation_h;
    q->f[0] = N;
    q->f[1] = (double)ndim;
    q->f[2] = kg;
    q->f[3] = (p->G > 1 && p->G == p->C && p->C == p->K) ? 1.0 : 0.0;
    q->f[4] = (double)(st > p->stride_w ? st : p->stride_w);
    q->f[5] = (double)(dl > p->dilation_w ? dl : p->dilation_w);
    q->f[6] = opix;
    q->f[7] = (double)Ho;
    q->f[8] = (double)Wo;
    q->group = ndim;
    q->p = p;
    return 0;
}

