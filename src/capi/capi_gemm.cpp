// C API: gemm family.
#include "capi/capi_common.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

struct xk_gemm_plan {
    xk::GemmPlan plan;
};
struct xk_gemm_packed_b {
    xk::PackedB packed;
};

namespace {

using xk::detail::c_enum;
using xk::detail::capi_call;

template <class T>
void require(const char* fn, const char* arg, const T* p) {
    if (!p) throw xk::Error(xk::Status::invalid_argument, std::string(fn) + ": " + arg + "=null must not be a null pointer");
}

// By reference: the raw int is read (c_enum), never an enum value loaded.
xk::Trans to_trans(const xk_trans& t) { return static_cast<xk::Trans>(c_enum(t)); }
xk::DType to_dtype(const xk_dtype& t) { return static_cast<xk::DType>(c_enum(t)); }

xk::GemmDesc to_desc(const xk_gemm_desc& c) {
    xk::GemmDesc d;
    d.M = c.M, d.N = c.N, d.K = c.K;
    d.trans_a = to_trans(c.trans_a), d.trans_b = to_trans(c.trans_b);
    d.lda = c.lda, d.ldb = c.ldb, d.ldc = c.ldc;
    d.a_type = to_dtype(c.a_type), d.b_type = to_dtype(c.b_type), d.c_type = to_dtype(c.c_type);
    d.alpha = c.alpha, d.beta = c.beta;
    d.epilogue.bias = c.bias != 0;
    d.epilogue.act = static_cast<xk::Activation>(c_enum(c.act));
    d.epilogue.residual = c.residual != 0;
    d.residual_type = to_dtype(c.residual_type);
    d.ld_residual = c.ld_residual;
    d.b_scale_per_channel = c.b_scale_per_channel != 0;
    d.batch = c.batch;
    d.batch_stride_a = c.batch_stride_a, d.batch_stride_b = c.batch_stride_b;
    d.batch_stride_c = c.batch_stride_c, d.batch_stride_residual = c.batch_stride_residual;
    return d;
}

xk::GemmArgs to_args(const xk_gemm_args& c) {
    xk::GemmArgs a;
    a.A = c.A, a.B = c.B, a.C = c.C;
    a.bias = c.bias, a.residual = c.residual;
    a.a_scale = c.a_scale, a.b_scales = c.b_scales;
    a.a_zero_point = c.a_zero_point, a.b_zero_point = c.b_zero_point;
    a.c_scale = c.c_scale, a.c_zero_point = c.c_zero_point;
    return a;
}

// Descriptor of the BLAS-style functions.
xk::GemmDesc blas_desc(const xk_trans& ta, const xk_trans& tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                       xk::DType at, xk::DType bt, xk::DType ct, float alpha, float beta) {
    xk::GemmDesc d;
    d.M = M, d.N = N, d.K = K;
    d.trans_a = to_trans(ta), d.trans_b = to_trans(tb);
    d.lda = lda, d.ldb = ldb, d.ldc = ldc;
    d.a_type = at, d.b_type = bt, d.c_type = ct;
    d.alpha = alpha, d.beta = beta;
    return d;
}

xk::GemmArgs blas_args(const void* A, const void* B, void* C) {
    xk::GemmArgs a;
    a.A = A, a.B = B, a.C = C;
    return a;
}

xk_status gemm_int8_s32(xk::DType at, const xk_trans& trans_a, const xk_trans& trans_b, int64_t M, int64_t N, int64_t K,
                               const void* A, int64_t lda, int32_t a_zero_point, const int8_t* B, int64_t ldb,
                               int32_t b_zero_point, float beta, int32_t* C, int64_t ldc) {
    return capi_call([&] {
        xk::GemmArgs a = blas_args(A, B, C);
        a.a_zero_point = a_zero_point, a.b_zero_point = b_zero_point;
        xk::gemm(blas_desc(trans_a, trans_b, M, N, K, lda, ldb, ldc, at, xk::DType::s8, xk::DType::s32, 1.0f, beta), a);
    });
}

xk_status gemm_int8_f32(xk::DType at, const xk_trans& trans_a, const xk_trans& trans_b, int64_t M, int64_t N, int64_t K,
                               float alpha, const void* A, int64_t lda, float a_scale, int32_t a_zero_point,
                               const int8_t* B, int64_t ldb, const float* b_scales, int b_scale_per_channel,
                               int32_t b_zero_point, float beta, float* C, int64_t ldc) {
    return capi_call([&] {
        xk::GemmDesc d = blas_desc(trans_a, trans_b, M, N, K, lda, ldb, ldc, at, xk::DType::s8, xk::DType::f32, alpha, beta);
        d.b_scale_per_channel = b_scale_per_channel != 0;
        xk::GemmArgs a = blas_args(A, B, C);
        a.a_scale = &a_scale;
        a.b_scales = b_scales;
        a.a_zero_point = a_zero_point, a.b_zero_point = b_zero_point;
        xk::gemm(d, a);
    });
}

}  // namespace

extern "C" {

xk_status xk_sgemm(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    return capi_call([&] { xk::sgemm(to_trans(trans_a), to_trans(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); });
}

xk_status xk_gemm_bf16f32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
                          int64_t ldc) {
    return capi_call([&] {
        xk::gemm(blas_desc(trans_a, trans_b, M, N, K, lda, ldb, ldc, xk::DType::bf16, xk::DType::bf16, xk::DType::f32,
                           alpha, beta),
                 blas_args(A, B, C));
    });
}

xk_status xk_gemm_bf16bf16(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, uint16_t* C,
                           int64_t ldc) {
    return capi_call([&] {
        xk::gemm(blas_desc(trans_a, trans_b, M, N, K, lda, ldb, ldc, xk::DType::bf16, xk::DType::bf16, xk::DType::bf16,
                           alpha, beta),
                 blas_args(A, B, C));
    });
}

xk_status xk_gemm_u8s8s32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, const uint8_t* A,
                          int64_t lda, int32_t a_zero_point, const int8_t* B, int64_t ldb, int32_t b_zero_point,
                          float beta, int32_t* C, int64_t ldc) {
    return gemm_int8_s32(xk::DType::u8, trans_a, trans_b, M, N, K, A, lda, a_zero_point, B, ldb, b_zero_point, beta,
                         C, ldc);
}

xk_status xk_gemm_s8s8s32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, const int8_t* A,
                          int64_t lda, int32_t a_zero_point, const int8_t* B, int64_t ldb, int32_t b_zero_point,
                          float beta, int32_t* C, int64_t ldc) {
    return gemm_int8_s32(xk::DType::s8, trans_a, trans_b, M, N, K, A, lda, a_zero_point, B, ldb, b_zero_point, beta,
                         C, ldc);
}

xk_status xk_gemm_u8s8f32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const uint8_t* A, int64_t lda, float a_scale, int32_t a_zero_point, const int8_t* B,
                          int64_t ldb, const float* b_scales, int b_scale_per_channel, int32_t b_zero_point,
                          float beta, float* C, int64_t ldc) {
    return gemm_int8_f32(xk::DType::u8, trans_a, trans_b, M, N, K, alpha, A, lda, a_scale, a_zero_point, B, ldb,
                         b_scales, b_scale_per_channel, b_zero_point, beta, C, ldc);
}

xk_status xk_gemm_s8s8f32(xk_trans trans_a, xk_trans trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const int8_t* A, int64_t lda, float a_scale, int32_t a_zero_point, const int8_t* B,
                          int64_t ldb, const float* b_scales, int b_scale_per_channel, int32_t b_zero_point,
                          float beta, float* C, int64_t ldc) {
    return gemm_int8_f32(xk::DType::s8, trans_a, trans_b, M, N, K, alpha, A, lda, a_scale, a_zero_point, B, ldb,
                         b_scales, b_scale_per_channel, b_zero_point, beta, C, ldc);
}

void xk_gemm_desc_init(xk_gemm_desc* desc) {
    if (!desc) return;
    *desc = xk_gemm_desc{};
    desc->trans_a = desc->trans_b = XK_TRANS_N;
    desc->a_type = desc->b_type = desc->c_type = desc->residual_type = XK_DTYPE_F32;
    desc->alpha = 1.0f;
    desc->beta = 0.0f;
    desc->act = XK_ACT_NONE;
    desc->batch = 1;
}

void xk_gemm_args_init(xk_gemm_args* args) {
    if (args) *args = xk_gemm_args{};
}

xk_status xk_gemm(const xk_gemm_desc* desc, const xk_gemm_args* args) {
    return capi_call([&] {
        require("xk_gemm", "desc", desc);
        require("xk_gemm", "args", args);
        xk::gemm(to_desc(*desc), to_args(*args));
    });
}

xk_status xk_gemm_plan_create(const xk_gemm_desc* desc, xk_gemm_plan** plan) {
    if (plan) *plan = nullptr;
    return capi_call([&] {
        require("xk_gemm_plan_create", "plan", plan);
        require("xk_gemm_plan_create", "desc", desc);
        *plan = new xk_gemm_plan{xk::GemmPlan(to_desc(*desc))};
    });
}

void xk_gemm_plan_destroy(xk_gemm_plan* plan) { delete plan; }

xk_status xk_gemm_plan_run(const xk_gemm_plan* plan, const xk_gemm_args* args) {
    return capi_call([&] {
        require("xk_gemm_plan_run", "plan", plan);
        require("xk_gemm_plan_run", "args", args);
        plan->plan.run(to_args(*args));
    });
}

const char* xk_gemm_plan_impl_name(const xk_gemm_plan* plan) { return plan ? plan->plan.impl_name() : ""; }

xk_status xk_gemm_plan_pack_b(const xk_gemm_plan* plan, const void* B, xk_gemm_packed_b** packed) {
    if (packed) *packed = nullptr;
    return capi_call([&] {
        require("xk_gemm_plan_pack_b", "plan", plan);
        require("xk_gemm_plan_pack_b", "packed", packed);
        *packed = new xk_gemm_packed_b{plan->plan.pack_b(B)};
    });
}

xk_status xk_gemm_plan_run_packed(const xk_gemm_plan* plan, const xk_gemm_args* args, const xk_gemm_packed_b* packed) {
    return capi_call([&] {
        require("xk_gemm_plan_run_packed", "plan", plan);
        require("xk_gemm_plan_run_packed", "args", args);
        require("xk_gemm_plan_run_packed", "packed", packed);
        plan->plan.run(to_args(*args), packed->packed);
    });
}

void xk_gemm_packed_b_destroy(xk_gemm_packed_b* packed) { delete packed; }

xk_status xk_set_gemm_autotune(int on) { return capi_call([&] { xk::set_gemm_autotune(on != 0); }); }
int xk_get_gemm_autotune(void) { return xk::get_gemm_autotune() ? 1 : 0; }

}  // extern "C"
