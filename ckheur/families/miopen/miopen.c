/* MIOpen convolutions (ckheur.families.miopen.problems): the conv checks of conv_problem.c plus layout
 * and bias, and the solver-choice features of ckheur.families.miopen.features, written to match them
 * exactly (the parity tests hold them to it). Every solver of the table is a candidate. */

static int ckh_check(const ckh_problem_t* p, ckh_prob* q) {
    if (p->layout < 0 || p->layout > 3) return CKH_E_LAYOUT;
    if (p->bias != 0 && p->bias != 1) return CKH_E_BIAS;
    int err = ckh_conv_check(p, q);
    if (err) return err;
    int ndim = p->layout >= 2 ? 3 : 2;  /* NCDHW, NDHWC: 3D even of depth 1 */
    if (ndim == 2 && q->f[1] == 3.0) return CKH_E_LAYOUT_DIMS;
    q->f[1] = (double)ndim;
    q->group = 0;
    return 0;
}

static int ckh_supports(const ckh_prob* q, const ckh_kernel* k) {
    (void)q; (void)k;  /* which solvers apply is what the model learned from the find-db */
    return 1;
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
