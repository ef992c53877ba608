/* xkernels C API — int8 Linear (see include/xk/qlinear.hpp for the math) and SmoothQuant helpers.
 * bf16 data as uint16_t bit patterns. */
#ifndef XK_C_QLINEAR_H
#define XK_C_QLINEAR_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_qlinear_quant XK_ENUM_INT {
    XK_QLINEAR_DYNAMIC_PER_TOKEN = 0,  /* x f32 | bf16 -> s8 symmetric per row, inside the call */
    XK_QLINEAR_DYNAMIC_PER_TENSOR = 1, /* x f32 | bf16 -> u8 asymmetric over all of x */
    XK_QLINEAR_STATIC_PER_TENSOR = 2,  /* x already u8 | s8 (x_scale, x_zero_point) */
} xk_qlinear_quant;

typedef struct xk_qlinear_desc {
    int64_t N, K;                /* out_features, in_features */
    xk_qlinear_quant quant;
    xk_dtype x_type, y_type;     /* dynamic: x f32 | bf16; static: u8 | s8. y f32 | bf16 (static also u8 | s8) */
    int64_t ldx, ldy;            /* 0 = K / N */
    int smooth;                  /* nonzero (dynamic): x[m,k] * smooth[k] before quantizing */
    int bias;                    /* nonzero: add bias[n] (f32[N]) */
    xk_activation act;
    int residual;                /* nonzero: add residual[m*ld_residual + n] last */
    xk_dtype residual_type;      /* XK_DTYPE_F32 or XK_DTYPE_BF16 */
    int64_t ld_residual;         /* 0 = N */
} xk_qlinear_desc;

typedef struct xk_qlinear_weight {
    xk_dtype type;               /* F32 | BF16 (quantized by the plan) or S8 (with scales) */
    const void* data;            /* [N x ld] row-major (PyTorch Linear.weight) */
    int64_t ld;                  /* 0 = K */
    const float* scales;         /* S8: [N] per-output-channel scales; else NULL */
} xk_qlinear_weight;

typedef struct xk_qlinear_args {
    const void* x;
    void* y;
    const float* bias;
    const void* residual;
    const float* smooth;
    float x_scale;               /* static */
    int32_t x_zero_point;
    float y_scale;               /* u8 | s8 y */
    int32_t y_zero_point;
} xk_qlinear_args;

typedef struct xk_qlinear xk_qlinear; /* opaque plan holding the packed weights */

/* Defaults: sizes 0, dynamic per token, f32 in and out, packed strides, no epilogue. */
void xk_qlinear_desc_init(xk_qlinear_desc* desc);
/* Pointers null, scales 1, zero points 0. */
void xk_qlinear_args_init(xk_qlinear_args* args);
/* Validates, quantizes and packs the weights; *plan = NULL on failure. */
xk_status xk_qlinear_create(const xk_qlinear_desc* desc, const xk_qlinear_weight* weight, xk_qlinear** plan);
void xk_qlinear_destroy(xk_qlinear* plan); /* NULL is a no-op */
/* M rows of x -> y. Safe to call from several threads at once on one plan. */
xk_status xk_qlinear_run(const xk_qlinear* plan, int64_t M, const xk_qlinear_args* args);
/* The per-output-channel weight scales [N] (NULL for a NULL plan). */
const float* xk_qlinear_weight_scales(const xk_qlinear* plan);
const char* xk_qlinear_impl_name(const xk_qlinear* plan);

/* SmoothQuant: out[j] = max(out[j], max|x[:, j]|) over rows x K activations (NaN ignored). */
xk_status xk_smoothquant_observe_f32(int64_t rows, int64_t K, const float* x, int64_t ld, float* absmax);
xk_status xk_smoothquant_observe_bf16(int64_t rows, int64_t K, const uint16_t* x, int64_t ld, float* absmax);
/* out[j] = max(out[j], max_n |W[n, j]|). */
xk_status xk_smoothquant_weight_absmax(int64_t N, int64_t K, const float* W, int64_t ld, float* absmax);
/* s[j] = act_absmax[j]^alpha / weight_absmax[j]^(1-alpha) (1 where either is 0, clamped [1e-5, 1e5]). */
xk_status xk_smoothquant_factors(int64_t K, const float* act_absmax, const float* weight_absmax, float alpha, float* s);
/* W[n, j] *= s[j]; gamma[j] /= s[j] (and beta[j] unless NULL). */
xk_status xk_smoothquant_fold_weight(int64_t N, int64_t K, float* W, int64_t ld, const float* s);
xk_status xk_smoothquant_fold_norm(int64_t K, float* gamma, float* beta, const float* s);

#ifdef __cplusplus
}
#endif
#endif
