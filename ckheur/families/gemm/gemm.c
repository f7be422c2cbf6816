/* GEMM (CK gemm_universal): problem checks, applicability and features, written to match
 * ckheur.families.gemm.problems, ckheur.families.gemm.kernels.support_mask and ckheur.families.gemm.features exactly.
 * Family extras in ckh_prob.f: 0 layout index, 1 K as integer-valued double for divisibility. */

static int ckh_check(const ckh_problem_t* p, ckh_prob* q) {
    const int64_t v[CKH_NFIELDS] = {p->M, p->N, p->K, p->split_k};
    for (int i = 0; i < CKH_NFIELDS; ++i) {
        if (v[i] < ckh_field_min[i]) return CKH_E_FIELD - i;
        if (v[i] > CKH_FIELD_MAX) return CKH_E_FIELD_LARGE - i;
    }
    if (p->layout < 0 || p->layout > 3) return CKH_E_LAYOUT;
    if (p->dtype != CKH_DTYPE) return CKH_E_DTYPE;
    if (p->split_k > p->K) return CKH_E_SPLIT_K;
    /* Contiguous dimensions (A: K if row-major else M; B: N if row-major else K; C: N if row-major else M). */
    const char* lay = ckh_layouts[p->layout];
    int64_t ca = lay[0] == 'r' ? p->K : p->M, cb = lay[1] == 'r' ? p->N : p->K, cc = lay[2] == 'r' ? p->N : p->M;
    if (ca < CKH_MIN_CONTIGUOUS || cb < CKH_MIN_CONTIGUOUS || cc < CKH_MIN_CONTIGUOUS) return CKH_E_CONTIGUOUS;
    double M = (double)p->M, N = (double)p->N, K = (double)p->K;
    q->flops = 2.0 * M * N * K;
    q->elems = M * K + K * N + M * N;
    if (!(q->flops < CKH_EXACT_LIMIT) || !(q->elems < CKH_EXACT_LIMIT)) return CKH_E_TOO_LARGE;
    q->G = 1.0; q->M = M; q->N = N; q->K = K;
    q->filt = 1.0;
    q->cpg = K;
    q->split_k = (double)p->split_k;
    q->k_splits = q->split_k;
    q->transposed = (double)((lay[0] == 'c') + (lay[1] == 'r'));
    q->f[0] = (double)p->layout;
    q->group = (int)p->layout;
    return 0;
}

static int ckh_supports(const ckh_prob* q, const ckh_kernel* k) {
    /* A dimension that is not a multiple of its tile needs a kernel that pads it. */
    int64_t M = (int64_t)q->M, N = (int64_t)q->N, K = (int64_t)q->K, sk = (int64_t)q->split_k;
    return (k->pad_m || M % (int64_t)k->tm == 0) && (k->pad_n || N % (int64_t)k->tn == 0) &&
           (k->pad_k || K % ((int64_t)k->tk * sk) == 0);
}

static void ckh_problem_features(const ckh_prob* q, float* xp) {
    const double eb = CKH_DTYPE_BYTES, M = q->M, N = q->N, K = q->K;
    SETP(M, M);
    SETP(N, N);
    SETP(K, K);
    SETP(split_k, q->split_k);
    SETP(log2_M, log2(M));
    SETP(log2_N, log2(N));
    SETP(log2_K, log2(K));
    SETP(log2_MNK, log2(M * N * K));
    SETP(arithmetic_intensity, 2.0 * M * N * K / ((M * K + K * N + M * N) * eb));
    SETP(aspect_ratio_mn, M / N);
    SETP(aspect_ratio_mk, M / K);
    SETP(aspect_ratio_nk, N / K);
    SETP(layout, q->f[0]);
}

static void ckh_pair_features(const ckh_prob* q, const ckh_kernel* k, double atf, double atf_max,
                              float (*xi)[CKH_CHUNK], int c) {
    ckh_coverage v;
    ckh_cover(q, k, &v);
    SETI(num_tiles_m, v.tiles_m);
    SETI(num_tiles_n, v.tiles_n);
    SETI(num_tiles_k, v.k_iters);
    SETI(total_output_tiles, v.tiles_m * v.tiles_n);
    SETI(tile_eff_m, v.eff_m);
    SETI(tile_eff_n, v.eff_n);
    SETI(tile_eff_k, v.eff_k);
    SETI(overall_tile_efficiency, v.eff_mnk);
    SETI(cu_utilization, v.cu_util);
    SETI(occupancy, v.occ);
    SETI(wave_rounds, v.rounds);
    SETI(wave_eff, v.wave_eff);
    SETI(analytic_log_tflops, atf);
    SETI(analytic_rel, atf - atf_max);
}
