/* Grouped convolution (2D/3D, every direction): features, written to match ckheur.families.grouped_conv.features
 * exactly (the parity tests hold them to it); the checks are conv_problem.c's. */

static int ckh_check(const ckh_problem_t* p, ckh_prob* q) { return ckh_conv_check(p, q); }

static int ckh_supports(const ckh_prob* q, const ckh_kernel* k) {
    (void)q; (void)k;  /* every kernel of the problem's dimensionality runs every valid problem */
    return 1;
}

static void ckh_problem_features(const ckh_prob* q, float* xp) {
    const double eb = CKH_DTYPE_BYTES;
    SETP(log_M, log2(q->M));
    SETP(log_N, log2(q->N));
    SETP(log_K, log2(q->K));
    SETP(G, q->G);
    SETP(log_G, log2(q->G));
    SETP(log_flops, log2(q->flops));
    SETP(log_bytes, log2(q->elems * eb));
    SETP(intensity, q->flops / (q->elems * eb));
    SETP(filter_size, q->filt);
    SETP(c_per_group, q->cpg);
    SETP(k_per_group, q->f[2]);
    SETP(is_grouped, q->G > 1 ? 1.0 : 0.0);
    SETP(is_depthwise, q->f[3]);
    SETP(ndim, q->f[1]);
    SETP(batch, q->f[0]);
    SETP(max_stride, q->f[4]);
    SETP(max_dilation, q->f[5]);
    SETP(log_out_pixels, log2(q->f[6]));
}

static void ckh_pair_features(const ckh_prob* q, const ckh_kernel* k, double atf, double atf_max,
                              float (*xi)[CKH_CHUNK], int c) {
    ckh_coverage v;
    ckh_cover(q, k, &v);
    SETI(tiles_m, v.tiles_m);
    SETI(tiles_n, v.tiles_n);
    SETI(k_iters, v.k_iters);
    SETI(eff_m, v.eff_m);
    SETI(eff_n, v.eff_n);
    SETI(eff_k, v.eff_k);
    SETI(eff_mnk, v.eff_mnk);
    SETI(log_wgs, log2(v.wgs));
    SETI(occupancy, v.occ);
    SETI(wave_rounds, v.rounds);
    SETI(wave_eff, v.wave_eff);
    SETI(wgs_per_cu, v.wgs_per_cu);
    SETI(log_padded_flops, log2(v.padded_flops));
    SETI(cu_util, v.cu_util);
    SETI(m_over_tm, v.m_over_tm);
    SETI(n_over_tn, v.n_over_tn);
    SETI(analytic_log_tflops, atf);
    SETI(analytic_rel, atf - atf_max);
}
