/* ckheur kernel ABI: what a kernel shared library exports for backend=hip.
 *
 * Mirrors CK's dispatcher ctypes ABI: a plain C struct for the problem, device pointers,
 * a stream, and the kernel time in milliseconds as the return value.
 * Tensor layouts (grouped conv, NDHWGC family): in = N x Di x Hi x Wi x G x C/G,
 * wei = G x K/G x Z x Y x X x C/G, out = N x Do x Ho x Wo x G x K/G. For bwd_data `in` is
 * written; for bwd_weight `wei` is written; 2D problems have Di = Z = 1.
 * Element type: the op's dtype on a GPU; float32 in host-memory test mode.
 */
#ifndef CKHEUR_ABI_H
#define CKHEUR_ABI_H
#include <stdint.h>

#define CKHEUR_ABI_VERSION 1

typedef struct ckheur_conv_problem {
    int64_t N, C, K, G, Di, Hi, Wi, Z, Y, X;
    int64_t stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dilation_d, dilation_h, dilation_w;
    int32_t direction; /* 0 fwd, 1 bwd_data, 2 bwd_weight */
    int32_t dtype;     /* 0 fp16, 1 bf16, 2 fp8, 3 fp32 */
} ckheur_conv_problem;

typedef struct ckheur_gemm_problem {
    int64_t M, N, K, split_k;
    int32_t layout;    /* 0 rcr, 1 rrr, 2 crr, 3 ccr (A, B, C: r row-major, c column-major) */
    int32_t dtype;     /* 0 fp16, 1 bf16, 2 fp8, 3 fp32 */
} ckheur_gemm_problem;

typedef struct ckheur_miopen_problem {  /* a convolution as MIOpen keys it (C, Hi, Wi: the input) */
    int64_t N, C, K, G, Di, Hi, Wi, Z, Y, X;
    int64_t stride_d, stride_h, stride_w, pad_d, pad_h, pad_w, dilation_d, dilation_h, dilation_w;
    int32_t layout;    /* 0 NCHW, 1 NHWC, 2 NCDHW, 3 NDHWC (the 3D layouts make a problem 3D) */
    int32_t bias;      /* 0 or 1 */
    int32_t direction; /* 0 fwd, 1 bwd_data, 2 bwd_weight */
    int32_t dtype;     /* 0 fp16, 1 bf16, 2 fp8, 3 fp32 */
} ckheur_miopen_problem;

#ifdef __cplusplus
extern "C" {
#endif
/* ABI version the library was built against (must equal CKHEUR_ABI_VERSION). */
int ckheur_abi_version(void);
/* Run `kernel` once. Returns its time in ms (>= 0); -1: problem not supported by the
 * kernel; any other negative value: error. */
float ckheur_conv_run(const char* kernel, const ckheur_conv_problem* problem,
                      void* in, void* wei, void* out, void* stream);
#ifdef __cplusplus
}
#endif
#endif
