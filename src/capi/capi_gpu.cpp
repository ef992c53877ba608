// C API: the OpenCL backend (include/xk/c/gpu.h) over xk::gpu.
#include <cstring>

#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/c/gpu.h"
#include "xk/gpu.hpp"
#include "xk/gpu_gemm.hpp"
#include "xk/llm.hpp"
#include "xk/norm.hpp"
#include "xk/rope.hpp"

struct xk_gpu_context_s {
    xk::gpu::Context ctx;
};
struct xk_gpu_buffer_s {
    xk::gpu::Buffer buf;
};

using xk::detail::capi_call;
using xk::detail::c_enum;

namespace {

const xk::gpu::Context& ctx_of(const char* fn, xk_gpu_context c) {
    if (!c) xk::detail::fail_arg(fn, "ctx", "null", "must be a context from xk_gpu_context_create");
    return c->ctx;
}

xk::gpu::Tensor tensor_of(const xk_gpu_tensor& t) {
    return t.buffer ? xk::gpu::Tensor(t.buffer->buf, t.offset) : xk::gpu::Tensor(xk::gpu::Buffer(), t.offset);
}

xk::DType dtype_of(const char* fn, xk_dtype d) {
    const int v = c_enum(d);
    if (v < 0 || v > static_cast<int>(xk::DType::f16))
        xk::detail::fail_arg(fn, "dtype", std::to_string(v), "is not an xk_dtype");
    return static_cast<xk::DType>(v);
}

xk_status norm_impl(const char* fn, xk::NormKind kind, xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t hidden,
                    xk_gpu_tensor x, int64_t ld_x, xk_gpu_tensor residual, int64_t ld_residual, xk_gpu_tensor weight,
                    xk_gpu_tensor bias, float eps, xk_gpu_tensor y, int64_t ld_y) {
    return capi_call([&] {
        const auto& c = ctx_of(fn, ctx);
        xk::NormDesc d;
        d.kind = kind;
        d.rows = rows;
        d.hidden = hidden;
        d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = dtype_of(fn, dtype);
        d.ld_x = ld_x;
        d.ld_y = ld_y;
        d.ld_residual = d.ld_residual_out = ld_residual;
        d.eps = eps;
        d.has_weight = weight.buffer != nullptr;
        d.has_bias = bias.buffer != nullptr;
        d.fused_residual = residual.buffer != nullptr;
        xk::gpu::NormTensors t;
        t.x = tensor_of(x);
        t.y = tensor_of(y);
        t.weight = tensor_of(weight);
        t.bias = tensor_of(bias);
        t.residual = t.residual_out = tensor_of(residual);
        xk::gpu::norm(c, d, t);
    });
}

// xk_gemm_desc -> GemmDesc (as capi_gemm.cpp's to_desc: enums read as raw ints, validated by
// gpu::gemm).
xk::GemmDesc gemm_desc_of(const xk_gemm_desc& c) {
    xk::GemmDesc d;
    d.M = c.M, d.N = c.N, d.K = c.K;
    d.trans_a = static_cast<xk::Trans>(c_enum(c.trans_a)), d.trans_b = static_cast<xk::Trans>(c_enum(c.trans_b));
    d.lda = c.lda, d.ldb = c.ldb, d.ldc = c.ldc;
    d.a_type = static_cast<xk::DType>(c_enum(c.a_type)), d.b_type = static_cast<xk::DType>(c_enum(c.b_type));
    d.c_type = static_cast<xk::DType>(c_enum(c.c_type));
    d.alpha = c.alpha, d.beta = c.beta;
    d.epilogue.bias = c.bias != 0;
    d.epilogue.act = static_cast<xk::Activation>(c_enum(c.act));
    d.epilogue.residual = c.residual != 0;
    d.residual_type = static_cast<xk::DType>(c_enum(c.residual_type));
    d.ld_residual = c.ld_residual;
    d.b_scale_per_channel = c.b_scale_per_channel != 0;
    d.batch = c.batch;
    d.batch_stride_a = c.batch_stride_a, d.batch_stride_b = c.batch_stride_b;
    d.batch_stride_c = c.batch_stride_c, d.batch_stride_residual = c.batch_stride_residual;
    return d;
}

}  // namespace

extern "C" {

xk_status xk_gpu_device_count(int* count) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_gpu_device_count", "count", count);
        *count = static_cast<int>(xk::gpu::devices().size());
    });
}

xk_status xk_gpu_device_name(int index, char* buf, size_t size) {
    return capi_call([&] {
        const char* fn = "xk_gpu_device_name";
        xk::detail::check_not_null(fn, "buf", buf);
        if (size == 0) xk::detail::fail_arg(fn, "size", "0", "must be >= 1");
        const auto devs = xk::gpu::devices();
        if (index < 0 || index >= static_cast<int>(devs.size()))
            xk::detail::fail_arg(fn, "index", std::to_string(index),
                                 "must be in [0, " + std::to_string(devs.size()) + ") (the device count)");
        const std::string s = devs[static_cast<size_t>(index)].platform_name + " / " + devs[static_cast<size_t>(index)].name;
        const size_t n = std::min(s.size(), size - 1);
        std::memcpy(buf, s.data(), n);
        buf[n] = '\0';
    });
}

xk_status xk_gpu_selected_device(int* index) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_gpu_selected_device", "index", index);
        *index = xk::gpu::selected_device_index();
    });
}

xk_status xk_gpu_context_create(int device_index, xk_gpu_context* out) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_gpu_context_create", "out", out);
        *out = nullptr;
        xk::gpu::Context c = device_index < 0 ? xk::gpu::Context() : xk::gpu::Context(device_index);
        *out = new xk_gpu_context_s{std::move(c)};
    });
}

void xk_gpu_context_destroy(xk_gpu_context ctx) { delete ctx; }

xk_status xk_gpu_finish(xk_gpu_context ctx) { return capi_call([&] { ctx_of("xk_gpu_finish", ctx).finish(); }); }

xk_status xk_gpu_memory_stats_get(xk_gpu_context ctx, xk_gpu_memory_stats* out) {
    return capi_call([&] {
        const auto& c = ctx_of("xk_gpu_memory_stats_get", ctx);
        xk::detail::check_not_null("xk_gpu_memory_stats_get", "out", out);
        const auto s = c.memory_stats();
        out->allocated_bytes = s.allocated_bytes;
        out->reserved_bytes = s.reserved_bytes;
        out->peak_allocated_bytes = s.peak_allocated_bytes;
        out->peak_reserved_bytes = s.peak_reserved_bytes;
        out->num_allocs = s.num_allocs;
        out->num_frees = s.num_frees;
        out->num_segments = s.num_segments;
        out->num_cache_hits = s.num_cache_hits;
        out->num_ooms = s.num_ooms;
    });
}

xk_status xk_gpu_empty_cache(xk_gpu_context ctx) {
    return capi_call([&] { ctx_of("xk_gpu_empty_cache", ctx).empty_cache(); });
}

xk_status xk_gpu_set_memory_limit(xk_gpu_context ctx, int64_t bytes) {
    return capi_call([&] { ctx_of("xk_gpu_set_memory_limit", ctx).set_memory_limit(bytes); });
}

xk_status xk_gpu_buffer_create(xk_gpu_context ctx, int64_t bytes, xk_gpu_buffer* out) {
    return capi_call([&] {
        const auto& c = ctx_of("xk_gpu_buffer_create", ctx);
        xk::detail::check_not_null("xk_gpu_buffer_create", "out", out);
        *out = nullptr;
        xk::gpu::Buffer b(c, bytes);
        *out = new xk_gpu_buffer_s{std::move(b)};
    });
}

void xk_gpu_buffer_destroy(xk_gpu_buffer buf) { delete buf; }

xk_status xk_gpu_buffer_bytes(xk_gpu_buffer buf, int64_t* bytes) {
    return capi_call([&] {
        if (!buf) xk::detail::fail_arg("xk_gpu_buffer_bytes", "buf", "null", "must be a buffer");
        xk::detail::check_not_null("xk_gpu_buffer_bytes", "bytes", bytes);
        *bytes = buf->buf.bytes();
    });
}

xk_status xk_gpu_buffer_write(xk_gpu_buffer buf, int64_t offset, const void* src, int64_t bytes) {
    return capi_call([&] {
        if (!buf) xk::detail::fail_arg("xk_gpu_buffer_write", "buf", "null", "must be a buffer");
        buf->buf.write(src, bytes, offset);
    });
}

xk_status xk_gpu_buffer_read(xk_gpu_buffer buf, int64_t offset, void* dst, int64_t bytes) {
    return capi_call([&] {
        if (!buf) xk::detail::fail_arg("xk_gpu_buffer_read", "buf", "null", "must be a buffer");
        buf->buf.read(dst, bytes, offset);
    });
}

xk_status xk_gpu_rms_norm(xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t hidden, xk_gpu_tensor x, int64_t ld_x,
                          xk_gpu_tensor residual, int64_t ld_residual, xk_gpu_tensor weight, float eps, xk_gpu_tensor y,
                          int64_t ld_y) {
    return norm_impl("xk_gpu_rms_norm", xk::NormKind::rms_norm, ctx, dtype, rows, hidden, x, ld_x, residual, ld_residual,
                     weight, xk_gpu_tensor{nullptr, 0}, eps, y, ld_y);
}

xk_status xk_gpu_layer_norm(xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t hidden, xk_gpu_tensor x,
                            int64_t ld_x, xk_gpu_tensor residual, int64_t ld_residual, xk_gpu_tensor weight,
                            xk_gpu_tensor bias, float eps, xk_gpu_tensor y, int64_t ld_y) {
    return norm_impl("xk_gpu_layer_norm", xk::NormKind::layer_norm, ctx, dtype, rows, hidden, x, ld_x, residual,
                     ld_residual, weight, bias, eps, y, ld_y);
}

xk_status xk_gpu_glu(xk_gpu_context ctx, xk_activation act, xk_dtype dtype, int64_t rows, int64_t inner, xk_gpu_tensor x,
                     int64_t ld_x, xk_gpu_tensor y, int64_t ld_y) {
    return capi_call([&] {
        const char* fn = "xk_gpu_glu";
        const auto& c = ctx_of(fn, ctx);
        xk::GluDesc d;
        d.activation = static_cast<xk::Activation>(c_enum(act));
        d.rows = rows;
        d.inner = inner;
        d.x_dtype = d.y_dtype = dtype_of(fn, dtype);
        d.ld_x = ld_x;
        d.ld_y = ld_y;
        xk::gpu::glu(c, d, {tensor_of(x), tensor_of(y)});
    });
}

xk_status xk_gpu_softmax(xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t cols, xk_gpu_tensor x, int64_t ld_x,
                         xk_gpu_tensor y, int64_t ld_y, float scale, int causal, int64_t causal_offset) {
    return capi_call([&] {
        const char* fn = "xk_gpu_softmax";
        const auto& c = ctx_of(fn, ctx);
        xk::SoftmaxDesc d;
        d.rows = rows;
        d.cols = cols;
        d.x_dtype = d.y_dtype = dtype_of(fn, dtype);
        d.ld_x = ld_x;
        d.ld_y = ld_y;
        d.scale = scale;
        d.causal = causal != 0;
        d.causal_offset = causal_offset;
        xk::gpu::softmax(c, d, {tensor_of(x), tensor_of(y)});
    });
}

xk_status xk_gpu_rope(xk_gpu_context ctx, xk_dtype dtype, int is_neox, int64_t tokens, int64_t q_heads, int64_t k_heads,
                      int64_t head_dim, int64_t rotary_dim, xk_gpu_tensor q, xk_gpu_tensor k, xk_gpu_tensor positions,
                      xk_gpu_tensor cos_sin_cache, int64_t max_position) {
    return capi_call([&] {
        const char* fn = "xk_gpu_rope";
        const auto& c = ctx_of(fn, ctx);
        xk::RopeDesc d;
        d.style = is_neox ? xk::RopeStyle::neox : xk::RopeStyle::gptj;
        d.tokens = tokens;
        d.q_heads = q_heads;
        d.k_heads = k_heads;
        d.head_dim = head_dim;
        d.rotary_dim = rotary_dim;
        d.dtype = dtype_of(fn, dtype);
        d.cache_dtype = xk::DType::f32;
        d.max_position = max_position;
        xk::gpu::rope(c, d, {tensor_of(q), tensor_of(k), tensor_of(positions), tensor_of(cos_sin_cache)});
    });
}

xk_status xk_gpu_gemm(xk_gpu_context ctx, const xk_gemm_desc* desc, const xk_gpu_gemm_tensors* t) {
    return capi_call([&] {
        const char* fn = "xk_gpu_gemm";
        const auto& c = ctx_of(fn, ctx);
        xk::detail::check_not_null(fn, "desc", desc);
        xk::detail::check_not_null(fn, "t", t);
        xk::gpu::GemmTensors g;
        g.A = tensor_of(t->A);
        g.B = tensor_of(t->B);
        g.C = tensor_of(t->C);
        g.bias = tensor_of(t->bias);
        g.residual = tensor_of(t->residual);
        xk::gpu::gemm(c, gemm_desc_of(*desc), g);
    });
}

xk_status xk_gpu_gemm_kernel_name(xk_gpu_context ctx, const xk_gemm_desc* desc, char* buf, size_t size) {
    return capi_call([&] {
        const char* fn = "xk_gpu_gemm_kernel_name";
        const auto& c = ctx_of(fn, ctx);
        xk::detail::check_not_null(fn, "desc", desc);
        xk::detail::check_not_null(fn, "buf", buf);
        if (size == 0) xk::detail::fail_arg(fn, "size", "0", "must be >= 1");
        const std::string s = xk::gpu::gemm_kernel_name(c, gemm_desc_of(*desc));
        const size_t n = std::min(s.size(), size - 1);
        std::memcpy(buf, s.data(), n);
        buf[n] = '\0';
    });
}

}  // extern "C"
