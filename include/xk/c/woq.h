/* xkernels C API — weight-only quantized GEMM (see xk/xk.h for xk_status and xk_last_error).
 *
 * The same operation as xk/woq.hpp (read it for the exact math): Y[M x N] = X[M x K] * dequant(W)^T
 * with W N x K int8 or int4 (two per byte: low nibble = even k), w = fma(q, scale, offset) per
 * group of K (group_size 32 / 64 / 128 / 256, 0 = per output channel), then the GEMM epilogue
 * Y = act(alpha * acc + beta * Y + bias) + residual. X and Y f32 or bf16 (uint16_t bit patterns).
 * A packed weight is made once (xk_woq_pack or an import) and serves every M. */
#ifndef XK_C_WOQ_H
#define XK_C_WOQ_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_woq_type XK_ENUM_INT { XK_WOQ_S8 = 0, XK_WOQ_U4 = 1 } xk_woq_type;
/* ggml type ids */
typedef enum xk_gguf_type XK_ENUM_INT { XK_GGUF_Q4_0 = 2, XK_GGUF_Q8_0 = 8 } xk_gguf_type;

typedef struct xk_woq_weight xk_woq_weight; /* opaque packed weight */

/* weights: s8 int8 [N x ld_w] / u4 uint8 [N x ld_w] (ld_w in bytes, 0 = packed); scales f32
 * [N x G] (finite, > 0); zero_points NULL (symmetric: s8 0, u4 8) or [N x G] int8 (s8) / uint8
 * 0..15 (u4). *out = NULL on failure. */
xk_status xk_woq_pack(xk_woq_type type, int64_t N, int64_t K, int64_t group_size, const void* weights, int64_t ld_w,
                      const float* scales, const void* zero_points, xk_woq_weight** out);
/* PyTorch's _weight_int8pack_mm inputs: w int8 [N x K], scales [N] (f32 / bf16 / f16). */
xk_status xk_woq_import_torch_int8pack(int64_t N, int64_t K, const int8_t* w, xk_dtype scale_type, const void* scales,
                                       xk_woq_weight** out);
/* PyTorch's _weight_int4pack_mm_for_cpu inputs: w uint8 [N x K/2] from
 * _convert_weight_to_int4pack_for_cpu, scales_and_zeros [K/group_size x N x 2]; block_n 64
 * (AVX-512 torch) or 32. */
xk_status xk_woq_import_torch_int4pack_cpu(int64_t N, int64_t K, int64_t group_size, const uint8_t* w, xk_dtype sz_type,
                                           const void* scales_and_zeros, int block_n, xk_woq_weight** out);
/* llama.cpp GGUF Q8_0 / Q4_0 blocks, N rows of K / 32 blocks. */
xk_status xk_woq_import_gguf(xk_gguf_type type, int64_t N, int64_t K, const void* data, xk_woq_weight** out);
void xk_woq_weight_destroy(xk_woq_weight* w); /* NULL is a no-op */
/* w dequantized into out f32 [N x K]. */
xk_status xk_woq_dequantize(const xk_woq_weight* w, float* out);

typedef struct xk_woq_desc {
    int64_t M, N, K;
    xk_woq_type weight_type;
    xk_dtype a_type, c_type;       /* XK_DTYPE_F32 or XK_DTYPE_BF16 */
    int64_t lda, ldc;              /* 0 = packed */
    float alpha, beta;             /* xk_woq_desc_init: 1, 0 */
    int bias;                      /* nonzero: add bias[n] */
    xk_activation act;
    int residual;                  /* nonzero: add residual[m, n] last */
    xk_dtype residual_type;        /* f32 or bf16 */
    int64_t ld_residual;           /* 0 = packed */
} xk_woq_desc;

typedef struct xk_woq_args {
    const void* A;
    void* C;
    const float* bias;
    const void* residual;
} xk_woq_args;

void xk_woq_desc_init(xk_woq_desc* desc); /* zeros, alpha 1, weight_type XK_WOQ_U4 */
/* One-shot: validates (the weight's N, K and type must match desc), runs. */
xk_status xk_woq_gemm(const xk_woq_desc* desc, const xk_woq_args* args, const xk_woq_weight* w);

#ifdef __cplusplus
}
#endif
#endif
