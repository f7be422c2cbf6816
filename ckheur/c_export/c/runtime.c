/* ckheur compiled selector: runtime shared by every exported model (C99, libc + libm only).
 *
 * Trees are evaluated QuickScorer-style for all candidate kernels of a problem together: a
 * tree's leaves are bits of a mask (left to right); a node whose test sends a row right clears
 * the bits of its left subtree, and the exit leaf is the lowest bit left. Nodes on problem
 * features are tested once per problem: the plain numerical ones sorted by feature and threshold,
 * so that a problem visits only those that send it right (a prefix per feature); nodes on kernel
 * features were resolved at export time (per kernel and tree), clearing the side not taken. Nodes
 * on problem x kernel features whose left subtree the problem can still reach are tested per
 * candidate.
 * Scores are summed in double in tree order, as LightGBM does, so they equal its scores.
 * A screen (CKH_SCREEN_TOP > 0) sums every candidate's first CKH_SCREEN_TREES trees, then the
 * rest of the trees for the best of them only.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF /* GCC does not contract in ISO C mode (-std=c99) */
#endif
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CKH_CAT2(a, b) a##_##b
#define CKH_CAT(a, b) CKH_CAT2(a, b)
#define CKH_FN(name) CKH_CAT(CKH_PREFIX, name)

/*@CONFIG@*/

/* Node kinds: numerical splits by missing-value type, and categorical splits. */
enum { CKH_NUM_NONE = 0, CKH_NUM_ZERO = 1, CKH_NUM_NAN = 2, CKH_CAT_SPLIT = 3 };
/* Where a candidate-varying node reads its value: the pair features, or the kernel table. */
enum { CKH_SRC_PAIR = 0, CKH_SRC_KERNEL = 1 };

typedef struct {
    float thr;              /* the largest float <= LightGBM's double threshold */
    uint16_t tree, slot;
    uint8_t kind, default_left, src;
    uint8_t zero_left;      /* numerical: a NaN reads as 0; 1 when 0 goes left */
    int32_t cat;            /* categorical: index into the forest's bitset offsets */
    uint64_t clear;         /* leaves of the left subtree (cleared when the row goes right) */
    uint64_t right;         /* leaves of the right subtree */
} ckh_node;

typedef struct {
    int ntree;
    const ckh_node* pnodes; int npnodes;          /* problem-feature nodes the scan does not take */
    /* plain numerical problem-feature splits sorted by (feature slot, threshold): their threshold,
     * left leaves and tree; [scan_ofs[s], scan_ofs[s + 1]) are those of slot s */
    const float* scan_thr; const uint64_t* scan_clear; const uint16_t* scan_tree;
    const int32_t* scan_ofs; int nscan_slots;
    const ckh_node* cnodes; const int32_t* cofs;  /* candidate nodes, by tree: [cofs[t], cofs[t+1]) */
    const double* leaf; const int32_t* leaf_ofs;  /* leaf values, left to right, by tree */
    const uint32_t* cat_bits; const int32_t* cat_ofs;
    const CKH_KMASK_T* kmask;                     /* [tree][kernel] kernel-feature leaf masks, or NULL */
} ckh_forest;

typedef struct {            /* the latency model's kernel-only terms (ckheur.sim.kernel_terms) */
    double occ, slots, mfma_cycles, load_cycles, prologue_iters, epilogue_cycles, overhead, effect;
    double tm, tn, tk, dtype_bytes;
} ckh_sim_kernel;

typedef struct {            /* the latency model's constants, as ckheur.sim computes them */
    double cus, clock_hz, layout_penalty, gather_penalty, overlap_loss, l2_reuse, hbm_bytes_per_s, launch_s;
} ckh_sim_params;

typedef struct {            /* kernel traits the runtime needs */
    double tm, tn, tk, occ; /* occ: workgroups per CU (ckheur.families.tile_features.coverage_occupancy) */
    int32_t group, pad_m, pad_n, pad_k;
} ckh_kernel;

typedef struct {            /* a validated problem through its implicit GEMM (ckheur.sim.problem_arrays) */
    double G, M, N, K, flops, elems, filt, cpg, split_k, transposed, k_splits;
    double f[12];           /* family extras */
    int group;
    const ckh_problem_t* p; /* the problem itself (valid during the call) */
#if CKH_ALLOWED
    uint64_t allowed[(CKH_NKERN + 63) / 64]; /* the kernels the family ranks for it (MIOpen: op.applicability) */
#endif
} ckh_prob;

/*@TABLES@*/

#if CKH_ANSWERS > 0
static uint64_t ckh_mix64(uint64_t z) {  /* splitmix64's finalizer (ckheur.c_export.generate.key_hash) */
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The remembered answer of this exact problem (its row of ckh_answer_kernel), or -1. */
static int ckh_answer_find(const ckh_problem_t* p) {
    int64_t key[CKH_KEY_FIELDS];
    ckh_key_numbers(p, key);
    uint64_t h = UINT64_C(0x9e3779b97f4a7c15);
    for (int i = 0; i < CKH_KEY_FIELDS; ++i) h = ckh_mix64(h ^ (uint64_t)key[i]);
    int lo = 0, hi = CKH_ANSWERS - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (ckh_answer_hash[mid] == h) return mid;
        if (ckh_answer_hash[mid] < h) lo = mid + 1; else hi = mid - 1;
    }
    return -1;
}
#endif

static int ckh_go_left(float xf, const ckh_node* n, const uint32_t* cat_bits, const int32_t* cat_ofs) {
    double x = (double)xf;
    if (fabs(x) <= (double)1e-35f) x = 0.0;  /* LightGBM reads values this close to zero as zero */
    if (n->kind == CKH_CAT_SPLIT) {
        if (x != x || x >= 2147483648.0 || x <= -2147483649.0) return 0;
        int v = (int)x;
        if (v < 0) return 0;
        int32_t lo = cat_ofs[n->cat], words = cat_ofs[n->cat + 1] - lo;
        if (v / 32 >= words) return 0;
        return (int)((cat_bits[lo + v / 32] >> (v % 32)) & 1u);
    }
    if (x != x && n->kind != CKH_NUM_NAN) x = 0.0;
    if ((n->kind == CKH_NUM_ZERO && x >= -(double)1e-35f && x <= (double)1e-35f) || (n->kind == CKH_NUM_NAN && x != x))
        return n->default_left;
    return x <= (double)n->thr;
}

static int ckh_ctz64(uint64_t m) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(m);
#else
    int i = 0;
    while (!(m & 1u)) { m >>= 1; ++i; }
    return i;
#endif
}

/* Leaves of every tree the problem can reach given its problem-feature nodes (a node sending it
 * left removes its right subtree, one sending it right its left subtree). */
static void ckh_problem_masks(const ckh_forest* f, const float* xp, uint64_t* pm) {
    for (int t = 0; t < f->ntree; ++t) pm[t] = ~(uint64_t)0;
    for (int i = 0; i < f->npnodes; ++i) {
        const ckh_node* n = &f->pnodes[i];
        float x = xp[n->slot];  /* values near zero were zeroed when written */
        /* Branch-free (the direction taken is data, not predictable): NaN reads as 0. */
        uint64_t left = n->kind != CKH_NUM_NONE ? (uint64_t)ckh_go_left(x, n, f->cat_bits, f->cat_ofs)
                        : (uint64_t)(x <= n->thr) | ((uint64_t)n->zero_left & (uint64_t)(x != x));
        const uint64_t sel = (uint64_t)0 - left;  /* all ones when the row goes left */
        pm[n->tree] &= ~((n->right & sel) | (n->clear & ~sel));
    }
    for (int slot = 0; slot < f->nscan_slots; ++slot) {
        float x = xp[slot];
        if (x != x) x = 0.0f;  /* NaN reads as 0 */
        /* A row goes right where x > thr: the nodes of thresholds below x, a prefix. */
        int lo = f->scan_ofs[slot], hi = f->scan_ofs[slot + 1];
        while (lo < hi) {  /* the first threshold >= x */
            int mid = lo + (hi - lo) / 2;
            if (f->scan_thr[mid] < x) lo = mid + 1; else hi = mid;
        }
        const uint64_t* clear = f->scan_clear;
        const uint16_t* tree = f->scan_tree;
        for (int i = f->scan_ofs[slot]; i < lo; ++i) pm[tree[i]] &= ~clear[i];
    }
}

/* A candidate's leaves of one tree still reachable: 32 bits when every tree has at most 32
 * leaves, so that a vector instruction tests twice the candidates. */
typedef CKH_MASK_T ckh_mask;

/* Raw scores of n <= CKH_CHUNK candidates (kernel ids kid), pair features xi[slot][c]: the sums
 * of trees [t0, t1), each from 0 (LightGBM's predict from start_iteration t0). */
static void ckh_forest_chunk(const ckh_forest* f, const uint64_t* pm, const float (*xi)[CKH_CHUNK],
                             const int* kid, int n, int t0, int t1, double* out) {
    ckh_mask m[CKH_CHUNK];
    int consecutive = 1;  /* kernels kid[0], kid[0] + 1, ...: their masks are read as one run */
    for (int c = 0; c < n; ++c) {
        out[c] = 0.0;
        consecutive &= kid[c] == kid[0] + c;
    }
    for (int t = t0; t < t1; ++t) {
        const ckh_mask reach = (ckh_mask)pm[t];
        if (f->kmask) {  /* a tree's masks are adjacent, kernel by kernel */
            const CKH_KMASK_T* km = f->kmask + (size_t)t * CKH_NKERN;
            if (consecutive) {
                km += kid[0];
                for (int c = 0; c < n; ++c) m[c] = reach & (ckh_mask)km[c];
            } else {
                for (int c = 0; c < n; ++c) m[c] = reach & (ckh_mask)km[kid[c]];
            }
        } else {
            for (int c = 0; c < n; ++c) m[c] = reach;
        }
        for (int i = f->cofs[t]; i < f->cofs[t + 1]; ++i) {
            const ckh_node* nd = &f->cnodes[i];
            if (!(nd->clear & pm[t])) continue;  /* its left subtree is out of the problem's reach */
            const ckh_mask keep = (ckh_mask)~nd->clear;
            if (nd->src == CKH_SRC_PAIR && nd->kind == CKH_NUM_NONE) {
                /* Branch-free: one compare per lane, whose NaN result matches reading NaN as 0.
                 * Values near zero were zeroed when written. */
                const float* v = xi[nd->slot];
                const float thr = nd->thr;
                const ckh_mask clear = (ckh_mask)nd->clear;
#define CKH_TEST_GT(c) m[c] &= ~(clear & ((ckh_mask)0 - (ckh_mask)(v[c] > thr)))
#define CKH_TEST_NLE(c) m[c] &= ~(clear & ((ckh_mask)0 - (ckh_mask)!(v[c] <= thr)))
                int c = 0;
                if (nd->zero_left) {
                    for (; c + 4 <= n; c += 4) { CKH_TEST_GT(c); CKH_TEST_GT(c + 1); CKH_TEST_GT(c + 2); CKH_TEST_GT(c + 3); }
                    for (; c < n; ++c) CKH_TEST_GT(c);
                } else {
                    for (; c + 4 <= n; c += 4) { CKH_TEST_NLE(c); CKH_TEST_NLE(c + 1); CKH_TEST_NLE(c + 2); CKH_TEST_NLE(c + 3); }
                    for (; c < n; ++c) CKH_TEST_NLE(c);
                }
            } else if (nd->kind == CKH_NUM_NONE) {  /* a kernel feature, from the kernel table */
                const float thr = nd->thr;
                const ckh_mask clear = (ckh_mask)nd->clear;
                for (int c = 0; c < n; ++c) {
                    float x = ckh_kernel_feature(kid[c], nd->slot);
                    m[c] &= ~(clear & ((ckh_mask)0 - (ckh_mask)(nd->zero_left ? x > thr : !(x <= thr))));
                }
            } else {
                for (int c = 0; c < n; ++c) {
                    float x = nd->src == CKH_SRC_PAIR ? xi[nd->slot][c] : ckh_kernel_feature(kid[c], nd->slot);
                    if (!ckh_go_left(x, nd, f->cat_bits, f->cat_ofs)) m[c] &= keep;
                }
            }
        }
        const double* leaf = f->leaf + f->leaf_ofs[t];
        int c = 0;
        for (; c + 4 <= n; c += 4) {
            out[c] += leaf[ckh_ctz64(m[c])];
            out[c + 1] += leaf[ckh_ctz64(m[c + 1])];
            out[c + 2] += leaf[ckh_ctz64(m[c + 2])];
            out[c + 3] += leaf[ckh_ctz64(m[c + 3])];
        }
        for (; c < n; ++c) out[c] += leaf[ckh_ctz64(m[c])];
    }
}

#if CKH_CASCADE_TOP > 0 || CKH_ANALYTIC_FEATURES || CKH_PRIOR
/* The latency model (ckheur.sim.predict_latency_ms) for one problem and kernel, in ms. */
static double ckh_sim_latency_ms(const ckh_prob* q, const ckh_sim_kernel* k, const ckh_sim_params* s) {
    double tiles_m = ceil(q->M / k->tm), tiles_n = ceil(q->N / k->tn), k_iters = ceil(q->K / k->tk);
    double wgs = q->G * tiles_m * tiles_n, k_batch;
#if CKH_BWD_WEIGHT
    {
        double hi = fmax(1.0, floor(k_iters / 4.0));
        k_batch = fmin(fmax(floor(k->slots / wgs), 1.0), hi);
    }
#else
    k_batch = q->split_k;
#endif
    wgs = wgs * k_batch;
    k_iters = ceil(k_iters / k_batch);
    double rounds = ceil(wgs / k->slots);
    double load = k->load_cycles * (1.0 + s->layout_penalty * q->transposed);
    double gather = 1.0 + s->gather_penalty * (q->filt > 1 ? 1.0 : 0.0) / fmax(fmin(q->cpg / 8.0, 8.0), 1.0);
    double lg = load * gather, mf = k->mfma_cycles;
    double iter = fmax(mf, lg) + s->overlap_loss * fmin(mf, lg);
    double wg_cycles = (k_iters + k->prologue_iters) * iter + k->epilogue_cycles + k->overhead;
    double compute_s = rounds * wg_cycles * fmin(k->occ, ceil(wgs / s->cus)) / s->clock_hz;
    double eb = k->dtype_bytes;
    double a_bytes = q->G * q->M * q->K * eb, b_bytes = q->G * q->N * q->K * eb;
    double c_bytes = q->G * q->M * q->N * eb * (1.0 + 2.0 * (k_batch > 1 ? 1.0 : 0.0));
    double hbm = a_bytes * fmax(1.0, tiles_n / s->l2_reuse) + b_bytes * fmax(1.0, tiles_m / s->l2_reuse) + c_bytes;
    double mem_s = hbm / s->hbm_bytes_per_s;
    double seconds = fmax(compute_s, mem_s) + s->launch_s;
    return seconds * 1e3 * k->effect;
}

static double ckh_sim_tflops(const ckh_prob* q, const ckh_sim_kernel* k, const ckh_sim_params* s) {
    return q->flops / (ckh_sim_latency_ms(q, k, s) * 1e-3) / 1e12;
}
#endif

#if CKH_TILES
/* Tile and wave quantization (ckheur.families.tile_features.tile_coverage) of a problem by a kernel. */
typedef struct {
    double tiles_m, tiles_n, k_iters, eff_m, eff_n, eff_k, eff_mnk, wgs, occ, rounds, wave_eff, wgs_per_cu, cu_util;
    double m_over_tm, n_over_tn, k_over_tk, padded_flops;
} ckh_coverage;

static void ckh_cover(const ckh_prob* q, const ckh_kernel* k, ckh_coverage* v) {
    const double cus = CKH_NUM_CUS, ks = q->k_splits;
    v->tiles_m = ceil(q->M / k->tm);
    v->tiles_n = ceil(q->N / k->tn);
    v->k_iters = ceil(ceil(q->K / ks) / k->tk);
    v->eff_m = q->M / (v->tiles_m * k->tm);
    v->eff_n = q->N / (v->tiles_n * k->tn);
    v->eff_k = q->K / (v->k_iters * ks * k->tk);
    v->eff_mnk = v->eff_m * v->eff_n * v->eff_k;
    v->wgs = q->G * v->tiles_m * v->tiles_n * ks;
    v->occ = k->occ;
    double slots = cus * k->occ;
    v->rounds = ceil(v->wgs / slots);
    v->wave_eff = v->wgs / (v->rounds * slots);
    v->wgs_per_cu = v->wgs / cus;
    v->cu_util = fmin(1.0, v->wgs / cus);
    v->m_over_tm = q->M / k->tm;
    v->n_over_tn = q->N / k->tn;
    v->k_over_tk = q->K / k->tk;
    v->padded_flops = 2.0 * q->G * v->tiles_m * k->tm * v->tiles_n * k->tn * v->k_iters * ks * k->tk;
}
#endif

/* A feature as LightGBM reads it: rounded to float, and values within 1e-35 of zero read as zero. */
static float ckh_lgb_value(double v) {
    float x = (float)v;
    return fabsf(x) <= 1e-35f ? 0.0f : x;
}
#define SETP(name, expr) do { if (P_##name >= 0) xp[P_##name < 0 ? 0 : P_##name] = ckh_lgb_value(expr); } while (0)
#define SETI(name, expr) do { if (I_##name >= 0) xi[I_##name < 0 ? 0 : I_##name][c] = ckh_lgb_value(expr); } while (0)

/*@FAMILY@*/

/* Candidates of a problem, in the Python selector's order: the problem's group, the kernels
 * that support it, and for pools over the cascade threshold the analytic model's top ones. */
static int ckh_candidates(const ckh_prob* q, int* cand) {
    int n = 0;
    for (int k = 0; k < CKH_NKERN; ++k)
        if (ckh_kernels[k].group == q->group && ckh_supports(q, &ckh_kernels[k])) {
            if (n < CKH_MAX_CAND) cand[n] = k;
            ++n;
        }
#if CKH_CASCADE_TOP > 0
    if (n > CKH_CASCADE_THRESHOLD) {
        /* Keep the CKH_CASCADE_TOP best by (analytic TFLOPS desc, position asc): a min-heap of the best. */
        double hv[CKH_CASCADE_TOP]; int hp[CKH_CASCADE_TOP]; int h = 0;
        for (int k = 0; k < CKH_NKERN; ++k) {
            if (ckh_kernels[k].group != q->group || !ckh_supports(q, &ckh_kernels[k])) continue;
            double v = ckh_sim_tflops(q, &ckh_sim_cascade[k], &ckh_simp_cascade);
            if (h == CKH_CASCADE_TOP && !(v > hv[0])) continue;   /* equal value: the earlier position wins */
            int j;
            if (h < CKH_CASCADE_TOP) { j = h++; }
            else {  /* replace the root and sift down */
                j = 0;
                for (;;) {
                    int l = 2 * j + 1, r = l + 1, s = j;
                    double sv = v; int sp = k;
                    if (l < h && (hv[l] < sv || (hv[l] == sv && hp[l] > sp))) { s = l; sv = hv[l]; sp = hp[l]; }
                    if (r < h && (hv[r] < sv || (hv[r] == sv && hp[r] > sp))) { s = r; }
                    if (s == j) break;
                    hv[j] = hv[s]; hp[j] = hp[s]; j = s;
                }
                hv[j] = v; hp[j] = k;
                continue;
            }
            while (j > 0) {  /* sift up: the worst (lowest value, then latest position) at the root */
                int p = (j - 1) / 2;
                if (hv[p] < v || (hv[p] == v && hp[p] > k)) break;
                hv[j] = hv[p]; hp[j] = hp[p]; j = p;
            }
            hv[j] = v; hp[j] = k;
        }
        /* Order the kept ones best first (insertion sort on (value desc, position asc); kernel
         * indices grow with the position among supported kernels, so they order ties alike). */
        for (int a = 1; a < h; ++a) {
            double v = hv[a]; int p = hp[a]; int b = a - 1;
            while (b >= 0 && (hv[b] < v || (hv[b] == v && hp[b] > p))) { hv[b + 1] = hv[b]; hp[b + 1] = hp[b]; --b; }
            hv[b + 1] = v; hp[b + 1] = p;
        }
        for (int a = 0; a < h; ++a) cand[a] = hp[a];
        n = h;
    }
#endif
    return n;
}

int CKH_FN(num_kernels)(void) { return CKH_NKERN; }

const char* CKH_FN(kernel_name)(int kernel_index) {
    return kernel_index >= 0 && kernel_index < CKH_NKERN ? ckh_kernel_names[kernel_index] : NULL;
}

const char* CKH_FN(error)(int code) {
    for (size_t i = 0; i < sizeof ckh_errors / sizeof ckh_errors[0]; ++i)
        if (ckh_errors[i].code == code) return ckh_errors[i].message;
    return code >= 0 ? "no error" : "unknown error code";
}

int CKH_FN(predict)(const ckh_problem_t* p, int cap, int* kernel_index, double* score, double* tflops) {
    if (!p || !kernel_index || !score) return CKH_E_NULL;
    ckh_prob q;
    int err = ckh_check(p, &q);
    if (err) return err;
    int cand[CKH_MAX_CAND];
    int n = ckh_candidates(&q, cand);
    if (n == 0) return CKH_E_UNSUPPORTED;
    if (n > cap) return CKH_E_CAPACITY;
    float xp[CKH_NPS + 1];
    ckh_problem_features(&q, xp);
    uint64_t pm[CKH_NTREE];
    ckh_problem_masks(&ckh_forest_main, xp, pm);
#if CKH_NTREE2 > 0
    uint64_t pm2[CKH_NTREE2];
    if (tflops) ckh_problem_masks(&ckh_forest_tflops, xp, pm2);
#endif
#if CKH_ANALYTIC_FEATURES
    double atf[CKH_MAX_CAND], atf_max = -HUGE_VAL;
    for (int i = 0; i < n; ++i) {
        atf[i] = log(ckh_sim_tflops(&q, &ckh_sim_feature[cand[i]], &ckh_simp_feature));
        atf_max = i == 0 ? atf[i] : fmax(atf_max, atf[i]);
    }
#define CKH_ATF(i) atf[i]
#else
    const double atf_max = 0.0;
#define CKH_ATF(i) 0.0
#endif
#if CKH_NIS == 0
    float xi[1][CKH_CHUNK] = {{0.0f}};  /* no pair features: never read, zeroed so compilers know */
#else
    float xi[CKH_NIS + 1][CKH_CHUNK];
#endif
    double t2[CKH_CHUNK];
#if CKH_SCREEN_TOP > 0
    const int first_trees = n > CKH_SCREEN_TOP ? CKH_SCREEN_TREES : ckh_forest_main.ntree;
    const int screened = first_trees < ckh_forest_main.ntree;
    unsigned char full[CKH_MAX_CAND];  /* screened: the candidates the whole model scores */
#else
    const int first_trees = ckh_forest_main.ntree;
    const int screened = 0;
#endif
    /* Relative scores take the best TFLOPS estimate, of the candidates the whole model scores. */
    const int companion_all = !(CKH_RELATIVE_TFLOPS && screened);
    (void)companion_all;
    for (int c0 = 0; c0 < n; c0 += CKH_CHUNK) {
        int m = n - c0 < CKH_CHUNK ? n - c0 : CKH_CHUNK;
        for (int c = 0; c < m; ++c)
            ckh_pair_features(&q, &ckh_kernels[cand[c0 + c]], CKH_ATF(c0 + c), atf_max, xi, c);
        ckh_forest_chunk(&ckh_forest_main, pm, (const float (*)[CKH_CHUNK])xi, cand + c0, m, 0, first_trees,
                         score + c0);
        if (tflops) {
#if CKH_NTREE2 > 0
            if (companion_all) {
                ckh_forest_chunk(&ckh_forest_tflops, pm2, (const float (*)[CKH_CHUNK])xi, cand + c0, m, 0,
                                 ckh_forest_tflops.ntree, t2);
                for (int c = 0; c < m; ++c) tflops[c0 + c] = expm1(t2[c]);
            }
#else
            (void)t2;
            for (int c = 0; c < m; ++c) tflops[c0 + c] = expm1(score[c0 + c]);
#endif
        }
        for (int c = 0; c < m; ++c) kernel_index[c0 + c] = cand[c0 + c];
    }
#if CKH_SCREEN_TOP > 0
    if (screened) {
        /* The screen (ckheur.selection.screening): the other trees' sum added to the CKH_SCREEN_TOP
         * best sums of the first (ties: the earlier candidate) and the remembered answer's; the others rank
         * after every one of those, in their first trees' order (their scores lowered below). */
        memset(full, 0, sizeof full);
        for (int r = 0; r < CKH_SCREEN_TOP; ++r) {
            int b = -1;
            for (int i = 0; i < n; ++i)
                if (!full[i] && (b < 0 || score[i] > score[b])) b = i;
            full[b] = 1;
        }
#if CKH_ANSWERS > 0
        {
            int at = ckh_answer_find(p);
            for (int i = 0; at >= 0 && i < n; ++i) full[i] |= cand[i] == ckh_answer_kernel[at];
        }
#endif
        int sub[CKH_CHUNK], pos[CKH_CHUNK], m = 0;
        double sum[CKH_CHUNK];
        for (int i = 0; i <= n; ++i) {
            if (i < n && full[i]) {
                ckh_pair_features(&q, &ckh_kernels[cand[i]], CKH_ATF(i), atf_max, xi, m);
                sub[m] = cand[i]; pos[m] = i; ++m;
            }
            if (m == CKH_CHUNK || (i == n && m > 0)) {
                ckh_forest_chunk(&ckh_forest_main, pm, (const float (*)[CKH_CHUNK])xi, sub, m, first_trees,
                                 ckh_forest_main.ntree, sum);
                for (int c = 0; c < m; ++c) {
                    score[pos[c]] += sum[c];
#if CKH_NTREE2 == 0
                    if (tflops) tflops[pos[c]] = expm1(score[pos[c]]);
#endif
                }
#if CKH_NTREE2 > 0
                if (tflops && !companion_all) {
                    ckh_forest_chunk(&ckh_forest_tflops, pm2, (const float (*)[CKH_CHUNK])xi, sub, m, 0,
                                     ckh_forest_tflops.ntree, t2);
                    for (int c = 0; c < m; ++c) tflops[pos[c]] = expm1(t2[c]);
                }
#endif
                m = 0;
            }
        }
    }
#endif
#undef CKH_ATF
#if CKH_PRIOR
    {   /* the analytic prior the trees correct (ckheur.learn.prior), over these candidates */
        double lp[CKH_MAX_CAND], lmax = -HUGE_VAL;
        for (int i = 0; i < n; ++i) {
#if CKH_PRIOR_FROM_FEATURES
            lp[i] = atf[i];  /* the same parameters: the features' simulator pass */
#else
            lp[i] = log(ckh_sim_tflops(&q, &ckh_sim_prior[kernel_index[i]], &ckh_simp_prior));
#endif
            lmax = i == 0 ? lp[i] : fmax(lmax, lp[i]);
        }
        for (int i = 0; i < n; ++i)
            score[i] += CKH_PRIOR_SCALE * (CKH_PRIOR_LOG ? log1p(exp(lp[i])) : exp(lp[i] - lmax));
    }
#endif
#if CKH_RELATIVE_TFLOPS
    if (tflops) {  /* predicted fractions of the best, scaled by the best TFLOPS estimate (as the Python selector) */
        double smax = score[0], tmax = -HUGE_VAL;
        for (int i = 1; i < n; ++i) smax = fmax(smax, score[i]);
        for (int i = 0; i < n; ++i)
#if CKH_SCREEN_TOP > 0
            if (!screened || full[i])
#endif
                tmax = fmax(tmax, tflops[i]);
        for (int i = 0; i < n; ++i) tflops[i] = fmax(score[i], 1e-3) / fmax(smax, 1e-3) * tmax;
    }
#endif
#if CKH_SCREEN_TOP > 0
    if (screened)
        for (int i = 0; i < n; ++i)
            if (!full[i]) score[i] -= CKH_SCREEN_OFFSET;
#endif
    if (tflops)  /* no predicted latency below a kernel launch (as the Python selector) */
        for (int i = 0; i < n; ++i) tflops[i] = fmin(tflops[i], q.flops / CKH_LATENCY_FLOOR_S / 1e12);
#if CKH_ANSWERS > 0
    {   /* a problem of the training data: its fastest measured kernel first (train.remember), unless
           the model predicts its own pick faster by more than the margin (bundle.remembered_kept) */
        int at = ckh_answer_find(p);
        if (at >= 0) {
            double smax = score[0];
            for (int i = 1; i < n; ++i) smax = fmax(smax, score[i]);
            for (int i = 0; i < n; ++i)
                if (kernel_index[i] == ckh_answer_kernel[at]) {
#if CKH_REMEMBER_LOG
                    int beaten = smax - score[i] > CKH_REMEMBER_BAR;
#else
                    int beaten = fmax(smax, 1e-3) > fmax(score[i], 1e-3) * CKH_REMEMBER_BAR;
#endif
                    if (!beaten) score[i] = smax + 1.0;
                    break;
                }
        }
    }
#endif
    return n;
}

int CKH_FN(rank)(const ckh_problem_t* p, int k, int* kernel_index, float* score) {
    if (!p || !kernel_index || !score) return CKH_E_NULL;
    if (k < 1) return CKH_E_K;
    int idx[CKH_MAX_CAND];
    double s[CKH_MAX_CAND];
    int n = CKH_FN(predict)(p, CKH_MAX_CAND, idx, s, NULL);
    if (n < 0) return n;
    if (k > n) k = n;
    /* Top k by (score desc, candidate position asc): ties keep the candidate order, as a stable sort. */
    int top[CKH_MAX_CAND];
    int h = 0;
    for (int i = 0; i < n; ++i) {
        if (h == k && !(s[i] > s[top[h - 1]])) continue;
        int j = h < k ? h++ : k - 1;
        while (j > 0 && s[top[j - 1]] < s[i]) { top[j] = top[j - 1]; --j; }
        top[j] = i;
    }
    for (int i = 0; i < k; ++i) { kernel_index[i] = idx[top[i]]; score[i] = (float)s[top[i]]; }
    return k;
}
