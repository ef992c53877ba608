/* xkernels C API — gemm family (see xk/xk.h for xk_status and xk_last_error).
 *
 * The same operation as xk/gemm.hpp (read it for the exact math): row-major,
 *   op(A) M x K, op(B) K x N, C M x N, leading dimensions in elements (0 = packed),
 *   C = act(alpha * op(A) op(B) + beta * C + bias) + residual,
 *   int8 -> f32: alpha * a_scale * b_scale[n] * sum (a - a_zero_point)(b - b_zero_point), then the same;
 *   int8 -> s32: C = sum (beta 0) or C += sum (beta 1);
 *   int8 -> u8|s8 (c_type XK_DTYPE_U8 / XK_DTYPE_S8, through xk_gemm / the plan; beta 0): the f32
 *   result x as for int8 -> f32, then C = clamp(nearbyint(x * (1 / c_scale)) + c_zero_point) to
 *   the type's range (half to even; NaN -> the type's minimum).
 * Zero the whole xk_gemm_args with xk_gemm_args_init before filling it (fields may be added).
 * bf16 values are passed as their uint16_t bit patterns (the upper half of an IEEE float). */
#ifndef XK_C_GEMM_H
#define XK_C_GEMM_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_trans XK_ENUM_INT { XK_TRANS_N = 0, XK_TRANS_T = 1 } xk_trans;


/* ---- BLAS-style convenience functions ---- */

/* f32: C = alpha * op(A) op(B) + beta * C */
xk_status xk_sgemm(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

/* bf16 inputs, fp32 accumulation, f32 C */
xk_status xk_gemm_bf16f32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
                          int64_t ldc);
/* bf16 inputs, fp32 accumulation, bf16 C (rounded to nearest even) */
xk_status xk_gemm_bf16bf16(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, uint16_t* C,
                           int64_t ldc);

/* int8 -> s32: C = sum_k (A - a_zero_point)(B - b_zero_point) (beta = 0) or C += that (beta = 1). */
xk_status xk_gemm_u8s8s32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K,
                          const uint8_t* A, int64_t lda, int32_t a_zero_point, const int8_t* B, int64_t ldb,
                          int32_t b_zero_point, float beta, int32_t* C, int64_t ldc);
xk_status xk_gemm_s8s8s32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K,
                          const int8_t* A, int64_t lda, int32_t a_zero_point, const int8_t* B, int64_t ldb,
                          int32_t b_zero_point, float beta, int32_t* C, int64_t ldc);

/* int8 -> f32: C = alpha * a_scale * b_scales[n or 0] * sum_k (A - a_zero_point)(B - b_zero_point) + beta * C;
 * the scales must be finite and > 0.
 * b_scales holds N values when b_scale_per_channel is nonzero, else 1. */
xk_status xk_gemm_u8s8f32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint8_t* A, int64_t lda, float a_scale, int32_t a_zero_point, const int8_t* B,
                          int64_t ldb, const float* b_scales, int b_scale_per_channel, int32_t b_zero_point,
                          float beta, float* C, int64_t ldc);
xk_status xk_gemm_s8s8f32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const int8_t* A, int64_t lda, float a_scale, int32_t a_zero_point, const int8_t* B,
                          int64_t ldb, const float* b_scales, int b_scale_per_channel, int32_t b_zero_point,
                          float beta, float* C, int64_t ldc);

/* ---- full form: descriptor, one-shot, plan, packed B (mirrors xk::GemmDesc / GemmPlan) ---- */

typedef struct xk_gemm_desc {
    int64_t M, N, K;
    xk_trans trans_a, trans_b;
    int64_t lda, ldb, ldc;              /* 0 = packed */
    xk_dtype a_type, b_type, c_type;
    float alpha, beta;
    int bias;                           /* nonzero: add bias[n] (f32[N]) */
    xk_activation act;
    int residual;                       /* nonzero: add residual[m*ld_residual + n] last */
    xk_dtype residual_type;             /* XK_DTYPE_F32 or XK_DTYPE_BF16 */
    int64_t ld_residual;                /* 0 = packed */
    int b_scale_per_channel;            /* int8 -> f32: b_scales holds N values */
    /* Strided batch (xk::GemmDesc::batch ...; added after the fields above): `batch` products of
     * this shape in one call, item i reading A + i*batch_stride_a, B + i*batch_stride_b,
     * residual + i*batch_stride_residual and writing C + i*batch_stride_c (elements, >= 0). An
     * input stride of 0 is the same matrix for every item; bias, scales and zero points are
     * shared. batch_stride_c = 0 is packed (M*ldc); otherwise the items of C must not overlap.
     * batch = 0 does nothing. xk_gemm_desc_init sets batch = 1 (a descriptor zeroed by hand must
     * set it). A packed B of a plan with batch > 1 and batch_stride_b != 0 holds every item's B. */
    int64_t batch;
    int64_t batch_stride_a, batch_stride_b, batch_stride_c, batch_stride_residual;
} xk_gemm_desc;

typedef struct xk_gemm_args {
    const void* A;
    const void* B;                      /* not read by xk_gemm_plan_run_packed */
    void* C;
    const float* bias;
    const void* residual;
    const float* a_scale;               /* int8 -> f32: 1 value */
    const float* b_scales;              /* int8 -> f32: 1 or N values */
    int32_t a_zero_point, b_zero_point;
    const float* c_scale;               /* int8 -> u8|s8 C: 1 value, finite and > 0 */
    int32_t c_zero_point;               /* int8 -> u8|s8 C: in c_type's range */
} xk_gemm_args;

/* Defaults: sizes 0, no transposes, packed leading dimensions, f32, alpha 1, beta 0, no epilogue,
 * batch 1 with strides 0. No-op for a null pointer. */
void xk_gemm_desc_init(xk_gemm_desc* desc);
/* Zeroes every pointer and zero point. No-op for a null pointer. */
void xk_gemm_args_init(xk_gemm_args* args);

xk_status xk_gemm(const xk_gemm_desc* desc, const xk_gemm_args* args);

typedef struct xk_gemm_plan xk_gemm_plan;          /* opaque */
typedef struct xk_gemm_packed_b xk_gemm_packed_b;  /* opaque */

/* Validates desc and creates the kernel once; *plan = NULL on failure. */
xk_status xk_gemm_plan_create(const xk_gemm_desc* desc, xk_gemm_plan** plan);
void xk_gemm_plan_destroy(xk_gemm_plan* plan);     /* NULL is a no-op */
/* Safe to call from several threads at once on one plan. */
xk_status xk_gemm_plan_run(const xk_gemm_plan* plan, const xk_gemm_args* args);
/* Name of the implementation the plan selected ("" for NULL). */
const char* xk_gemm_plan_impl_name(const xk_gemm_plan* plan);

/* B (b_type, trans_b, ldb of the plan's descriptor) in the plan's kernel layout. */
xk_status xk_gemm_plan_pack_b(const xk_gemm_plan* plan, const void* B, xk_gemm_packed_b** packed);
/* Like xk_gemm_plan_run with B taken from packed (args->B is not read). */
xk_status xk_gemm_plan_run_packed(const xk_gemm_plan* plan, const xk_gemm_args* args,
                                  const xk_gemm_packed_b* packed);
void xk_gemm_packed_b_destroy(xk_gemm_packed_b* packed);  /* NULL is a no-op */

/* ---- measured routing (xk::set_gemm_autotune, XK_GEMM_TUNE=1; off by default) ----
 * On: a plan of an fp32 problem with 2*M*N*K >= 2^25 times xk's kernel and oneDNN's matmul once
 * per (problem, ISA cap, thread count) and process and keeps the faster; see docs/gemm.md. */
xk_status xk_set_gemm_autotune(int on);
int xk_get_gemm_autotune(void);

#ifdef __cplusplus
}
#endif
#endif
