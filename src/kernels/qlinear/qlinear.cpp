// int8 Linear (include/xk/qlinear.hpp): weights quantized per output channel and packed once
// into the int8 GEMM's layout; per call the activations are quantized (dynamic: into a per-thread
// scratch buffer) and the int8 GEMM runs with a dequantizing (or requantizing) epilogue. Per-token
// scales go through the GEMM's internal per-row A scale (GemmSpec::a_scale_per_row): the
// microkernel multiplies each row of its f32 tile by x_scale[m] after the column scales, so the
// dequantization, bias, activation and residual stay one fused store.
#include "xk/qlinear.hpp"

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands) when they are
// inlined into target-attribute functions: a false positive (as in gemv_bf16.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "common/parallel.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/quant/quant.hpp"
#include "xk/error.hpp"
#include "xk/isa.hpp"
#include "xk/quant.hpp"
#include "xk/runtime.hpp"

namespace xk {
namespace detail {

struct QLinearState {
    GemmSpec spec;                            // M = the packing M; replaced per call
    std::shared_ptr<const GemmPacked> packed;  // the weights in the kernel's layout
    std::string layout;
    std::string impl;
    std::vector<float> w_scales;  // [N]
    Isa packed_isa = Isa::scalar;
    std::shared_ptr<const QuantKernel> qk;  // dynamic: the per-token quantizer (its range pass for per tensor)
    std::shared_ptr<const QuantKernel> qt;  // dynamic_per_tensor: the per-tensor u8 quantizer
    mutable std::mutex mu;
    mutable std::map<std::pair<int64_t, int>, std::shared_ptr<const GemmKernel>> kernels;  // (M, cap)

    std::shared_ptr<const GemmKernel> kernel_for(const char* fn, int64_t M) const {
        const int cap = static_cast<int>(max_isa());
        {
            std::lock_guard<std::mutex> g(mu);
            auto it = kernels.find({M, cap});
            if (it != kernels.end()) return it->second;
        }
        GemmSpec s = spec;
        s.M = M;
        auto k = gemm_kernel_for_layout(s, layout);
        if (!k)
            fail(Status::isa_unavailable, std::string(fn) + ": the weights were packed as " + layout + " (under isa " +
                                              isa_name(packed_isa) + "); no kernel under the current cap (" +
                                              isa_name(max_isa()) + ") reads that layout");
        std::lock_guard<std::mutex> g(mu);
        if (kernels.size() > 64) kernels.clear();
        kernels[{M, cap}] = k;
        return k;
    }
};

namespace {

// Scratch of the calling thread: quantized activations and per-row scales (grown, never shrunk).
void* qlinear_scratch(size_t bytes) {
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    thread_local std::unique_ptr<void, Free> buf;
    thread_local size_t cap = 0;
    if (cap < bytes) {
        const size_t n = (bytes + 4095) / 4096 * 4096;
        void* p = std::aligned_alloc(64, n);
        if (!p) throw std::bad_alloc();
        buf.reset(p);
        cap = n;
    }
    return buf.get();
}

bool is_f(DType t) { return t == DType::f32 || t == DType::bf16; }
bool is_q(DType t) { return t == DType::u8 || t == DType::s8; }
bool valid_dtype(DType t) {
    switch (t) {
        case DType::f32: case DType::bf16: case DType::s8: case DType::u8: case DType::s32: case DType::f16: return true;
    }
    return false;
}
std::string dstr(DType t) { return valid_dtype(t) ? dtype_name(t) : std::to_string(static_cast<int>(t)); }

bool dynamic(QLinearQuant q) { return q != QLinearQuant::static_per_tensor; }

bool overlaps(const void* a, int64_t abytes, const void* b, int64_t bbytes) {
    const auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
    return a && b && abytes > 0 && bbytes > 0 && a0 < b0 + static_cast<uintptr_t>(bbytes) &&
           b0 < a0 + static_cast<uintptr_t>(abytes);
}

// Bytes spanned by rows x cols elements of size es with row stride ld (0 when empty).
int64_t span_bytes(int64_t rows, int64_t cols, int64_t ld, int64_t es) {
    if (rows == 0 || cols == 0) return 0;
    return ((rows - 1) * ld + cols) * es;
}

QLinearDesc check_desc(const char* fn, const QLinearDesc& d0) {
    QLinearDesc d = d0;
    const int q = static_cast<int>(d.quant);
    if (q < 0 || q > 2) fail_arg(fn, "quant", std::to_string(q), "is not a valid xk::QLinearQuant");
    check_nonnegative(fn, "N", d.N);
    check_nonnegative(fn, "K", d.K);
    if (!valid_activation(d.epilogue.act))
        fail_arg(fn, "epilogue.act", std::to_string(static_cast<int>(d.epilogue.act)), "is not a valid xk::Activation");
    if (dynamic(d.quant) && !is_f(d.x_type))
        fail(Status::unsupported, std::string(fn) + ": x_type=" + dstr(d.x_type) + " is not supported with quant=" +
                                      qlinear_quant_name(d.quant) + " (f32 or bf16)");
    if (!dynamic(d.quant) && !is_q(d.x_type))
        fail(Status::unsupported, std::string(fn) + ": x_type=" + dstr(d.x_type) +
                                      " is not supported with quant=static_per_tensor (u8 or s8)");
    if (!is_f(d.y_type) && !(is_q(d.y_type) && !dynamic(d.quant)))
        fail(Status::unsupported, std::string(fn) + ": y_type=" + dstr(d.y_type) + " is not supported with quant=" +
                                      qlinear_quant_name(d.quant) +
                                      (dynamic(d.quant) ? " (f32 or bf16)" : " (f32, bf16, u8 or s8)"));
    if (d.smooth && !dynamic(d.quant))
        fail_arg(fn, "smooth", "true", "applies only to the dynamic modes (x is already quantized)");
    if (d.epilogue.residual && !is_f(d.residual_type))
        fail(Status::unsupported, std::string(fn) + ": residual_type=" + dstr(d.residual_type) + " is not supported (f32 or bf16)");
    if (d.ldx == 0) d.ldx = d.K;
    if (d.ldy == 0) d.ldy = d.N;
    if (d.ld_residual == 0) d.ld_residual = d.N;
    check_ld(fn, "ldx", d.ldx, d.K, "K");
    check_ld(fn, "ldy", d.ldy, d.N, "N");
    if (d.epilogue.residual) check_ld(fn, "ld_residual", d.ld_residual, d.N, "N");
    checked_mul(fn, "N*K", d.N, d.K);
    return d;
}

// The int8 GEMM descriptor of the layer for M rows (A = the quantized activations).
GemmSpec make_spec(const char* fn, const QLinearDesc& d, int64_t M) {
    GemmDesc g;
    g.M = M, g.N = d.N, g.K = d.K;
    g.trans_a = Trans::N, g.trans_b = Trans::T;
    g.a_type = d.quant == QLinearQuant::dynamic_per_token ? DType::s8
               : d.quant == QLinearQuant::dynamic_per_tensor ? DType::u8
                                                              : d.x_type;
    g.lda = d.quant == QLinearQuant::static_per_tensor ? d.ldx : d.K;
    g.b_type = DType::s8;
    g.ldb = d.K;
    g.c_type = d.y_type == DType::bf16 ? DType::f32 : d.y_type;  // bf16: set on the spec below
    g.ldc = d.ldy;
    g.b_scale_per_channel = true;
    g.epilogue = d.epilogue;
    g.residual_type = d.residual_type;
    g.ld_residual = d.ld_residual;
    GemmSpec s = gemm_check_desc(fn, g);
    s.c_type = d.y_type;  // internal: int8 -> bf16 C
    s.a_scale_per_row = d.quant == QLinearQuant::dynamic_per_token;
    return s;
}

template <class T>
float to_f(T v) {
    if constexpr (std::is_same_v<T, bf16>) return v.to_float();
    else return v;
}

// Weights: finiteness, per-row abs-max -> scales, quantized rows into q [N x K].
template <class T>
void quantize_weights(const char* fn, const QLinearDesc& d, const T* W, int64_t ld, int8_t* q, float* scales) {
    const int64_t N = d.N, K = d.K;
    // Finite everywhere (named, before anything else)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
            if (!std::isfinite(to_f(W[n * ld + k])))
                fail_arg(fn, ("weight.data[" + std::to_string(n) + "][" + std::to_string(k) + "]").c_str(),
                         float_str(to_f(W[n * ld + k])), "must be finite");
    parallel_for(N, std::max<int64_t>(1, 65536 / std::max<int64_t>(K, 1)), [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
            float amax = 0.0f;
            for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(to_f(W[n * ld + k])));
            scales[n] = compute_quant_params(-amax, amax, DType::s8, true).scale;
        }
    });
    if (K == 0 || N == 0) return;
    QuantDesc qd;
    qd.rows = N, qd.cols = K;
    qd.src_dtype = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
    qd.dst_dtype = DType::s8;
    qd.ld_src = ld, qd.ld_dst = K;
    qd.granularity = QuantGranularity::per_channel;
    qd.axis = 0;
    qd.symmetric = true;
    QuantArgs qa;
    qa.src = W, qa.dst = q, qa.scales = scales;
    QuantPlan(qd).run(qa);
}

// Names the first non-finite v = x (* smooth) of row-major x (the error path only).
[[noreturn]] __attribute__((noinline, cold)) void fail_nonfinite(const char* fn, const QuantDesc& d, const QuantArgs& a) {
    for (int64_t r = 0; r < d.rows; ++r)
        for (int64_t k = 0; k < d.cols; ++k) {
            const int64_t off = r * d.ld_src + k;
            float v = d.src_dtype == DType::bf16 ? static_cast<const bf16*>(a.src)[off].to_float()
                                                 : static_cast<const float*>(a.src)[off];
            if (d.smooth) v *= a.smooth[k];
            if (!std::isfinite(v))
                fail_arg(fn, ("x[" + std::to_string(r) + "][" + std::to_string(k) + "]" + (d.smooth ? "*smooth" : "")).c_str(),
                         float_str(v), "must be finite (nothing was written)");
        }
    fail(Status::runtime_error, std::string(fn) + ": a non-finite value was reported but not found");
}

// Dynamic per token into the scratch, in one read of x: each block of rows (about 32 KiB of x,
// still in L1 / L2) gets its range pass, its parameters and its quantize pass before the next
// block is read. (xk::quantize reads all of x first, so as to reject a non-finite value before
// writing its output; here the output is the scratch, and y is written only after all of x has
// passed.) work: 4 arrays of M (inv, zero points, min, max) and M bytes (finite flags).
void quantize_per_token_fused(const char* fn, const QuantKernel& k, const QuantDesc& d, const QuantArgs& a, int64_t M,
                              uint8_t* work) {
    float* inv = reinterpret_cast<float*>(work);
    int32_t* zp = reinterpret_cast<int32_t*>(work + M * 4);
    float* mn = reinterpret_cast<float*>(work + M * 8);
    float* mx = reinterpret_cast<float*>(work + M * 12);
    uint8_t* fin = work + M * 16;
    const int64_t row_bytes = d.cols * dtype_size(d.src_dtype);
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(row_bytes, 1));
    std::atomic<bool> bad{false};
    const QuantPrep prep{inv, zp};
    parallel_for(M, grain, [&](int64_t b, int64_t e) {
        for (int64_t r0 = b; r0 < e && !bad.load(std::memory_order_relaxed); r0 += grain) {
            const int64_t r1 = std::min(e, r0 + grain);
            k.minmax(d, a, r0, r1, mn, mx, fin);
            for (int64_t r = r0; r < r1; ++r) {
                if (!fin[r]) {
                    bad.store(true, std::memory_order_relaxed);
                    return;
                }
                const QuantParams p = quant_params_from_range(mn[r], mx[r], DType::s8, true);
                a.scales_out[r] = p.scale;
                inv[r] = 1.0f / p.scale;
                zp[r] = p.zero_point;
            }
            k.run(d, a, r0, r1, 0, d.cols, prep);
        }
    });
    if (bad.load()) fail_nonfinite(fn, d, a);
}

[[noreturn]] void rethrow_quant(const char* fn, const Error& e) {
    // "xk::QLinearPlan::run: src[r][c] ..." -> name x
    std::string m = e.what();
    const std::string pre = std::string(fn) + ": src[";
    if (m.compare(0, pre.size(), pre) == 0) m = std::string(fn) + ": x[" + m.substr(pre.size());
    throw Error(e.code(), m);
}

}  // namespace
}  // namespace detail

QLinearPlan::QLinearPlan(const QLinearDesc& desc, const QLinearWeight& w) {
    constexpr const char* fn = "xk::QLinearPlan";
    desc_ = detail::check_desc(fn, desc);
    const QLinearDesc& d = desc_;
    // The weights.
    if (w.type != DType::f32 && w.type != DType::bf16 && w.type != DType::s8)
        detail::fail(Status::unsupported,
                     std::string(fn) + ": weight.type=" + detail::dstr(w.type) + " is not supported (f32, bf16 or s8)");
    const int64_t ldw = w.ld ? w.ld : d.K;
    detail::check_ld(fn, "weight.ld", ldw, d.K, "K");
    detail::checked_mul(fn, "N*weight.ld", d.N, ldw);
    const bool any = d.N > 0 && d.K > 0;
    if (any && !w.data) detail::fail_arg(fn, "weight.data", "null", "must not be a null pointer");
    if (w.type == DType::s8) {
        if (d.N > 0 && !w.scales) detail::fail_arg(fn, "weight.scales", "null", "must not be a null pointer (s8 weights)");
        for (int64_t n = 0; n < d.N; ++n) {
            const float v = w.scales[n];
            if (!(std::isfinite(v) && v > 0.0f && std::isfinite(1.0f / v)))
                detail::fail_arg(fn, ("weight.scales[" + std::to_string(n) + "]").c_str(), detail::float_str(v),
                                 "must be finite and > 0");
        }
    } else if (w.scales) {
        detail::fail_arg(fn, "weight.scales", detail::ptr_str(w.scales),
                         "must be null for f32 / bf16 weights (the plan computes them)");
    }

    auto st = std::make_shared<detail::QLinearState>();
    // Pack with the kernel a plan of 256 rows picks (for the static / per-tensor modes on AMX:
    // the tile layout, read by "amx:int8:decode" for M < 32); per call gemm_kernel_for_layout
    // finds the best kernel of each M reading that layout.
    st->spec = detail::make_spec(fn, d, 256);
    st->w_scales.assign(static_cast<size_t>(d.N), 1.0f);
    std::vector<int8_t> q;
    const int8_t* wq = static_cast<const int8_t*>(w.data);
    int64_t ldq = ldw;
    if (w.type != DType::s8) {
        q.resize(static_cast<size_t>(d.N * d.K));
        if (w.type == DType::f32)
            detail::quantize_weights(fn, d, static_cast<const float*>(w.data), ldw, q.data(), st->w_scales.data());
        else
            detail::quantize_weights(fn, d, static_cast<const bf16*>(w.data), ldw, q.data(), st->w_scales.data());
        wq = q.data();
        ldq = d.K;
    } else if (d.N > 0) {
        std::copy(w.scales, w.scales + d.N, st->w_scales.begin());
    }
    detail::GemmSpec ps = st->spec;
    ps.ldb = ldq;
    const auto sel = detail::gemm_select(ps, false);
    st->impl = sel.impl->name;
    st->layout = sel.kernel->packed_layout();
    st->packed = sel.kernel->pack_b(wq);
    st->packed_isa = max_isa();
    if (d.quant != QLinearQuant::static_per_tensor) {
        const bool tok = d.quant == QLinearQuant::dynamic_per_token;
        detail::QuantKernelDesc kd;
        kd.src_dtype = d.x_type, kd.dst_dtype = tok ? DType::s8 : DType::u8;
        kd.granularity = QuantGranularity::per_token_dynamic;
        kd.symmetric = tok, kd.smooth = d.smooth;
        st->qk = detail::quant_registry().get(kd).kernel;
        if (!tok) {
            kd.granularity = QuantGranularity::per_tensor;
            st->qt = detail::quant_registry().get(kd).kernel;
        }
    }
    st_ = std::move(st);
}

QLinearPlan::~QLinearPlan() = default;

const float* QLinearPlan::weight_scales() const noexcept { return st_ ? st_->w_scales.data() : nullptr; }
const char* QLinearPlan::impl_name() const noexcept { return st_ ? st_->impl.c_str() : ""; }
size_t QLinearPlan::weight_bytes() const noexcept { return st_ && st_->packed ? st_->packed->bytes : 0; }

void QLinearPlan::run(int64_t M, const QLinearArgs& a) const {
    constexpr const char* fn = "xk::QLinearPlan::run";
    using namespace detail;
    if (!st_) fail(Status::invalid_argument, std::string(fn) + ": the plan was moved from");
    const QLinearDesc& d = desc_;
    const QLinearState& st = *st_;
    check_nonnegative(fn, "M", M);
    checked_mul(fn, "M*ldx", M, d.ldx);
    checked_mul(fn, "M*ldy", M, d.ldy);
    if (d.epilogue.residual) checked_mul(fn, "M*ld_residual", M, d.ld_residual);
    const bool out = M > 0 && d.N > 0;
    const bool reads_x = out && d.K > 0;
    if (reads_x && !a.x) fail_arg(fn, "x", "null", "must not be a null pointer");
    if (out && !a.y) fail_arg(fn, "y", "null", "must not be a null pointer");
    if (out && d.epilogue.bias && !a.bias) fail_arg(fn, "bias", "null", "must not be a null pointer");
    if (out && d.epilogue.residual && !a.residual) fail_arg(fn, "residual", "null", "must not be a null pointer");
    if (reads_x && d.smooth && !a.smooth) fail_arg(fn, "smooth", "null", "must not be a null pointer");
    if (!d.smooth && a.smooth) fail_arg(fn, "smooth", ptr_str(a.smooth), "must be null (desc.smooth is false)");
    const bool static_q = d.quant == QLinearQuant::static_per_tensor;
    auto bad_scale = [](float v) { return !(std::isfinite(v) && v > 0.0f && std::isfinite(1.0f / v)); };
    if (static_q) {
        if (bad_scale(a.x_scale)) fail_arg(fn, "x_scale", float_str(a.x_scale), "must be finite and > 0");
        check_range(fn, "x_zero_point", a.x_zero_point, quant_qmin(d.x_type), quant_qmax(d.x_type));
    }
    const bool requant = is_q(d.y_type);
    if (requant) {
        if (bad_scale(a.y_scale)) fail_arg(fn, "y_scale", float_str(a.y_scale), "must be finite and > 0");
        check_range(fn, "y_zero_point", a.y_zero_point, quant_qmin(d.y_type), quant_qmax(d.y_type));
    }
    if (reads_x && d.smooth)
        for (int64_t k = 0; k < d.K; ++k)
            if (!std::isfinite(a.smooth[k]))
                fail_arg(fn, ("smooth[" + std::to_string(k) + "]").c_str(), float_str(a.smooth[k]), "must be finite");
    if (!out) return;
    // y must not overlap what is read
    const int64_t y_bytes = span_bytes(M, d.N, d.ldy, dtype_size(d.y_type));
    if (overlaps(a.y, y_bytes, a.x, span_bytes(M, d.K, d.ldx, dtype_size(d.x_type))))
        fail_arg(fn, "y", ptr_str(a.y), "overlaps x=" + ptr_str(a.x) + " (the output must not alias an input)");
    if (d.epilogue.bias && overlaps(a.y, y_bytes, a.bias, d.N * 4))
        fail_arg(fn, "y", ptr_str(a.y), "overlaps bias=" + ptr_str(a.bias));
    if (d.epilogue.residual &&
        overlaps(a.y, y_bytes, a.residual, span_bytes(M, d.N, d.ld_residual, dtype_size(d.residual_type))))
        fail_arg(fn, "y", ptr_str(a.y), "overlaps residual=" + ptr_str(a.residual));
    if (d.smooth && overlaps(a.y, y_bytes, a.smooth, d.K * 4))
        fail_arg(fn, "y", ptr_str(a.y), "overlaps smooth=" + ptr_str(a.smooth));

    const auto kernel = st.kernel_for(fn, M);
    GemmCall call;
    call.alpha = 1.0f, call.beta = 0.0f;
    call.packed_b = st.packed.get();
    GemmArgs& g = call.args;
    g.C = a.y, g.bias = a.bias, g.residual = a.residual;
    g.b_scales = st.w_scales.data();
    g.c_scale = &a.y_scale, g.c_zero_point = a.y_zero_point;
    float x_scale = 1.0f;
    g.a_scale = &x_scale;

    if (static_q) {
        g.A = a.x;
        x_scale = a.x_scale;
        g.a_zero_point = a.x_zero_point;
        kernel->run(call);
        return;
    }
    // Dynamic: quantize x into the scratch of this thread.
    const int64_t qbytes = (M * d.K + 63) / 64 * 64;
    // [qx: M x K][row scales: M][fused quantizer: inv M, zp M, min M, max M, finite M]
    auto* scratch = static_cast<uint8_t*>(qlinear_scratch(static_cast<size_t>(qbytes + M * 25 + 256)));
    float* row_scales = reinterpret_cast<float*>(scratch + qbytes);
    g.A = scratch;
    QuantDesc qd;
    qd.rows = M, qd.cols = d.K;
    qd.src_dtype = d.x_type;
    qd.ld_src = d.ldx, qd.ld_dst = d.K;
    qd.smooth = d.smooth;
    QuantArgs qa;
    qa.src = a.x, qa.dst = scratch, qa.smooth = d.smooth ? a.smooth : nullptr;
    try {
        if (d.quant == QLinearQuant::dynamic_per_token) {
            qd.dst_dtype = DType::s8;
            qd.granularity = QuantGranularity::per_token_dynamic;
            qd.symmetric = true;
            qa.scales_out = row_scales;
            if (d.K > 0) {
                quantize_per_token_fused(fn, *st.qk, qd, qa, M, scratch + qbytes + ((M * 4 + 63) / 64) * 64);
            } else {
                std::fill(row_scales, row_scales + M, 1.0f);
            }
            call.a_row_scales = row_scales;
        } else {
            // per tensor: the range of all rows (the per-token kernel's range pass), then one
            // (scale, zero point) and the static quantizer.
            float mn = 0.0f, mx = 0.0f;
            if (d.K > 0) {
                QuantDesc rd = qd;
                rd.dst_dtype = DType::u8;
                rd.granularity = QuantGranularity::per_token_dynamic;
                const QuantKernel* rk = st.qk.get();
                uint8_t* work = scratch + qbytes + ((M * 4 + 63) / 64) * 64;  // (see the scratch layout)
                float* lo = reinterpret_cast<float*>(work);
                float* hi = reinterpret_cast<float*>(work + M * 4);
                uint8_t* fin = work + M * 8;
                const int64_t grain = std::max<int64_t>(1, kQuantColBlock / d.K);
                parallel_for(M, grain, [&](int64_t b, int64_t e) { rk->minmax(rd, qa, b, e, lo, hi, fin); });
                for (int64_t r = 0; r < M; ++r) {
                    if (!fin[r]) {
                        // name the first non-finite value of the row
                        for (int64_t k = 0; k < d.K; ++k) {
                            const int64_t off = r * d.ldx + k;
                            float v = d.x_type == DType::bf16 ? static_cast<const bf16*>(a.x)[off].to_float()
                                                              : static_cast<const float*>(a.x)[off];
                            if (d.smooth) v *= a.smooth[k];
                            if (!std::isfinite(v))
                                fail_arg(fn, ("x[" + std::to_string(r) + "][" + std::to_string(k) + "]" + (d.smooth ? "*smooth" : "")).c_str(),
                                         float_str(v), "must be finite (nothing was written)");
                        }
                    }
                    mn = std::min(mn, lo[r]);
                    mx = std::max(mx, hi[r]);
                }
            }
            const QuantParams p = quant_params_from_range(mn, mx, DType::u8, false);
            x_scale = p.scale;
            g.a_zero_point = p.zero_point;
            if (d.K > 0) {
                qd.dst_dtype = DType::u8;
                qd.granularity = QuantGranularity::per_tensor;
                qa.scales = &x_scale, qa.zero_points = &g.a_zero_point;
                const float inv = 1.0f / x_scale;
                const QuantPrep prep{&inv, &g.a_zero_point};
                const int64_t grain = std::max<int64_t>(1, kQuantColBlock / d.K);
                parallel_for(M, grain, [&](int64_t b, int64_t e) { st.qt->run(qd, qa, b, e, 0, d.K, prep); });
            }
        }
    } catch (const Error& e) {
        rethrow_quant(fn, e);
    }
    kernel->run(call);
}

// ---- SmoothQuant ---------------------------------------------------------------------------------

namespace {

// out[k] = max(out[k], |x[r][k]|) over the rows; NaN ignored (VMAXPS returns its second operand,
// the running max, when the first is NaN; the scalar form compares). AVX-512 / AVX2 forms under
// the ISA cap (xk::max_isa()), the scalar loop otherwise; all give the same values.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void absmax_rows_avx512(const void* x, bool bf, int64_t rows, int64_t K,
                                                                    int64_t ld, float* out) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int64_t r = 0; r < rows; ++r) {
        int64_t k = 0;
        for (; k < K; k += 16) {
            const __mmask16 m = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1);
            __m512 v;
            if (bf) {
                const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(x) + r * ld + k);
                v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            } else {
                v = _mm512_maskz_loadu_ps(m, static_cast<const float*>(x) + r * ld + k);
            }
            v = _mm512_and_ps(v, absmask);
            const __m512 o = _mm512_maskz_loadu_ps(m, out + k);
            _mm512_mask_storeu_ps(out + k, m, _mm512_max_ps(v, o));
        }
    }
}
__attribute__((target("avx2"))) void absmax_rows_avx2(const float* x, int64_t rows, int64_t K, int64_t ld, float* out) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const int64_t K8 = K / 8 * 8;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * ld;
        for (int64_t k = 0; k < K8; k += 8)
            _mm256_storeu_ps(out + k, _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(row + k), absmask), _mm256_loadu_ps(out + k)));
        for (int64_t k = K8; k < K; ++k) {
            const float v = std::fabs(row[k]);
            out[k] = v > out[k] ? v : out[k];
        }
    }
}

template <class T>
void absmax_rows(const T* x, int64_t rows, int64_t K, int64_t ld, float* out) {
    if (max_isa() >= Isa::avx512) return absmax_rows_avx512(x, std::is_same_v<T, bf16>, rows, K, ld, out);
    if constexpr (std::is_same_v<T, float>)
        if (max_isa() >= Isa::avx2) return absmax_rows_avx2(x, rows, K, ld, out);
    for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * ld;
        for (int64_t k = 0; k < K; ++k) {
            const float v = std::fabs(detail::to_f(row[k]));
            out[k] = v > out[k] ? v : out[k];  // NaN compares false: ignored
        }
    }
}

template <class T>
void observe_impl(const char* fn, std::vector<float>& absmax, int64_t& batches, int64_t rows, const T* x, int64_t ld) {
    const int64_t K = static_cast<int64_t>(absmax.size());
    detail::check_nonnegative(fn, "rows", rows);
    if (ld == 0) ld = K;
    detail::check_ld(fn, "ld", ld, K, "K");
    detail::checked_mul(fn, "rows*ld", rows, ld);
    if (rows > 0 && K > 0 && !x) detail::fail_arg(fn, "x", "null", "must not be a null pointer");
    if (rows == 0 || K == 0) {
        ++batches;
        return;
    }
    // Per-thread partial maxima over blocks of rows, merged after.
    const int nthr = std::max(1, std::min<int>(get_num_threads(), static_cast<int>(std::min<int64_t>(rows, 64))));
    const int64_t chunk = (rows + nthr - 1) / nthr;
    std::vector<float> part(static_cast<size_t>(nthr * K), 0.0f);
    detail::parallel_for(nthr, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const int64_t r0 = t * chunk, r1 = std::min(rows, r0 + chunk);
            if (r0 < r1) absmax_rows(x + r0 * ld, r1 - r0, K, ld, part.data() + t * K);
        }
    });
    std::vector<float> merged = absmax;
    for (int t = 0; t < nthr; ++t)
        for (int64_t k = 0; k < K; ++k) merged[k] = std::max(merged[k], part[t * K + k]);
    for (int64_t k = 0; k < K; ++k)
        if (std::isinf(merged[k])) {
            // name the first infinite value
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < K; ++c)
                    if (std::isinf(detail::to_f(x[r * ld + c])))
                        detail::fail_arg(fn, ("x[" + std::to_string(r) + "][" + std::to_string(c) + "]").c_str(),
                                         detail::float_str(detail::to_f(x[r * ld + c])), "must be finite (nothing recorded)");
        }
    absmax.swap(merged);
    ++batches;
}

}  // namespace

SmoothQuantCalibrator::SmoothQuantCalibrator(int64_t K) {
    detail::check_nonnegative("xk::SmoothQuantCalibrator", "K", K);
    detail::checked_mul("xk::SmoothQuantCalibrator", "K", K, 4);
    absmax_.assign(static_cast<size_t>(K), 0.0f);
}

void SmoothQuantCalibrator::observe(int64_t rows, const float* x, int64_t ld) {
    observe_impl("xk::SmoothQuantCalibrator::observe", absmax_, batches_, rows, x, ld);
}
void SmoothQuantCalibrator::observe(int64_t rows, const bf16* x, int64_t ld) {
    observe_impl("xk::SmoothQuantCalibrator::observe", absmax_, batches_, rows, x, ld);
}
void SmoothQuantCalibrator::reset() {
    std::fill(absmax_.begin(), absmax_.end(), 0.0f);
    batches_ = 0;
}

void smoothquant_weight_absmax(int64_t N, int64_t K, const float* W, int64_t ld, float* out) {
    constexpr const char* fn = "xk::smoothquant_weight_absmax";
    detail::check_nonnegative(fn, "N", N);
    detail::check_nonnegative(fn, "K", K);
    if (ld == 0) ld = K;
    detail::check_ld(fn, "ld", ld, K, "K");
    detail::checked_mul(fn, "N*ld", N, ld);
    if (K > 0 && !out) detail::fail_arg(fn, "out", "null", "must not be a null pointer");
    if (N > 0 && K > 0 && !W) detail::fail_arg(fn, "W", "null", "must not be a null pointer");
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
            if (!std::isfinite(W[n * ld + k]))
                detail::fail_arg(fn, ("W[" + std::to_string(n) + "][" + std::to_string(k) + "]").c_str(),
                                 detail::float_str(W[n * ld + k]), "must be finite");
    absmax_rows(W, N, K, ld, out);
}

std::vector<float> smoothquant_factors(int64_t K, const float* act, const float* w, float alpha) {
    constexpr const char* fn = "xk::smoothquant_factors";
    detail::check_nonnegative(fn, "K", K);
    if (!(alpha >= 0.0f && alpha <= 1.0f)) detail::fail_arg(fn, "alpha", detail::float_str(alpha), "must be in [0, 1]");
    if (K > 0 && !act) detail::fail_arg(fn, "act_absmax", "null", "must not be a null pointer");
    if (K > 0 && !w) detail::fail_arg(fn, "weight_absmax", "null", "must not be a null pointer");
    for (int64_t j = 0; j < K; ++j) {
        if (!(std::isfinite(act[j]) && act[j] >= 0.0f))
            detail::fail_arg(fn, ("act_absmax[" + std::to_string(j) + "]").c_str(), detail::float_str(act[j]),
                             "must be finite and >= 0");
        if (!(std::isfinite(w[j]) && w[j] >= 0.0f))
            detail::fail_arg(fn, ("weight_absmax[" + std::to_string(j) + "]").c_str(), detail::float_str(w[j]),
                             "must be finite and >= 0");
    }
    std::vector<float> s(static_cast<size_t>(K), 1.0f);
    for (int64_t j = 0; j < K; ++j) {
        if (act[j] == 0.0f || w[j] == 0.0f) continue;
        const double v = std::pow(double(act[j]), double(alpha)) / std::pow(double(w[j]), 1.0 - double(alpha));
        s[j] = static_cast<float>(std::clamp(v, 1e-5, 1e5));
    }
    return s;
}

namespace {
void check_factors(const char* fn, int64_t K, const float* s) {
    if (K > 0 && !s) detail::fail_arg(fn, "s", "null", "must not be a null pointer");
    for (int64_t j = 0; j < K; ++j)
        if (!(std::isfinite(s[j]) && s[j] > 0.0f && std::isfinite(1.0f / s[j])))
            detail::fail_arg(fn, ("s[" + std::to_string(j) + "]").c_str(), detail::float_str(s[j]), "must be finite and > 0");
}
}  // namespace

void smoothquant_fold_weight(int64_t N, int64_t K, float* W, int64_t ld, const float* s) {
    constexpr const char* fn = "xk::smoothquant_fold_weight";
    detail::check_nonnegative(fn, "N", N);
    detail::check_nonnegative(fn, "K", K);
    if (ld == 0) ld = K;
    detail::check_ld(fn, "ld", ld, K, "K");
    detail::checked_mul(fn, "N*ld", N, ld);
    if (N > 0 && K > 0 && !W) detail::fail_arg(fn, "W", "null", "must not be a null pointer");
    check_factors(fn, K, s);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) W[n * ld + k] *= s[k];
}

void smoothquant_fold_norm(int64_t K, float* gamma, float* beta, const float* s) {
    constexpr const char* fn = "xk::smoothquant_fold_norm";
    detail::check_nonnegative(fn, "K", K);
    if (K > 0 && !gamma) detail::fail_arg(fn, "gamma", "null", "must not be a null pointer");
    check_factors(fn, K, s);
    for (int64_t k = 0; k < K; ++k) {
        gamma[k] /= s[k];
        if (beta) beta[k] /= s[k];
    }
}

std::vector<float> smoothquant_inverse(int64_t K, const float* s) {
    constexpr const char* fn = "xk::smoothquant_inverse";
    detail::check_nonnegative(fn, "K", K);
    check_factors(fn, K, s);
    std::vector<float> r(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) r[k] = 1.0f / s[k];
    return r;
}

}  // namespace xk
