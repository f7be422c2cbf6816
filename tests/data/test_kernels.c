/* Test kernels with the ckheur ABI (host memory, float32): one correct grouped-conv forward,
 * one that segfaults, one that hangs, one that writes wrong results. Built with the system
 * C compiler by the tests to exercise backend=hip's real worker protocol without a GPU. */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include "abi.h"

int ckheur_abi_version(void) { return CKHEUR_ABI_VERSION; }

static int64_t osz(int64_t s, int64_t p, int64_t d, int64_t f, int64_t st) { return (s + 2 * p - d * (f - 1) - 1) / st + 1; }

static void conv_fwd(const ckheur_conv_problem* q, const float* in, const float* wei, float* out) {
    int64_t cg = q->C / q->G, kg = q->K / q->G;
    int64_t Do = osz(q->Di, q->pad_d, q->dilation_d, q->Z, q->stride_d);
    int64_t Ho = osz(q->Hi, q->pad_h, q->dilation_h, q->Y, q->stride_h);
    int64_t Wo = osz(q->Wi, q->pad_w, q->dilation_w, q->X, q->stride_w);
    for (int64_t n = 0; n < q->N; n++) for (int64_t od = 0; od < Do; od++) for (int64_t oh = 0; oh < Ho; oh++)
    for (int64_t ow = 0; ow < Wo; ow++) for (int64_t g = 0; g < q->G; g++) for (int64_t k = 0; k < kg; k++) {
        double acc = 0;
        for (int64_t z = 0; z < q->Z; z++) for (int64_t y = 0; y < q->Y; y++) for (int64_t x = 0; x < q->X; x++) {
            int64_t id = od * q->stride_d - q->pad_d + z * q->dilation_d;
            int64_t ih = oh * q->stride_h - q->pad_h + y * q->dilation_h;
            int64_t iw = ow * q->stride_w - q->pad_w + x * q->dilation_w;
            if (id < 0 || id >= q->Di || ih < 0 || ih >= q->Hi || iw < 0 || iw >= q->Wi) continue;
            for (int64_t c = 0; c < cg; c++)
                acc += (double)in[((((n * q->Di + id) * q->Hi + ih) * q->Wi + iw) * q->G + g) * cg + c]
                     * (double)wei[((((g * kg + k) * q->Z + z) * q->Y + y) * q->X + x) * cg + c];
        }
        out[((((n * Do + od) * Ho + oh) * Wo + ow) * q->G + g) * kg + k] = (float)acc;
    }
}

float ckheur_conv_run(const char* kernel, const ckheur_conv_problem* q, void* in, void* wei, void* out, void* stream) {
    (void)stream;
    struct timespec a, b;
    if (q->direction != 0) return -1.0f; /* forward only */
    if (strstr(kernel, "_128x128x64_")) { volatile int* p = 0; *p = 1; }          /* segfault */
    if (strstr(kernel, "_64x128x64_")) { for (;;) { } }                            /* hang */
    clock_gettime(CLOCK_MONOTONIC, &a);
    conv_fwd(q, (const float*)in, (const float*)wei, (float*)out);
    if (strstr(kernel, "_32x128x64_")) ((float*)out)[0] += 1000.0f;                /* wrong result */
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (float)((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
}
