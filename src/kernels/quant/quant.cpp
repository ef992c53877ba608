// Quant family: registry, validation and public entry points.
#include "kernels/quant/quant.hpp"

#include <atomic>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "common/check.hpp"
#include "common/overlap.hpp"
#include "common/parallel.hpp"

namespace xk {
namespace detail {
namespace {

struct RefQuant final : QuantKernel {
    void run(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
             const QuantPrep&) const override {
        quant_reference(d, a, r0, r1, c0, c1);
    }
    void run_dynamic(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, float*, int32_t*) const override {
        quant_reference(d, a, r0, r1, 0, d.cols);
    }
};

bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16; }
bool is_int8_type(DType t) { return t == DType::u8 || t == DType::s8; }
bool valid_dtype(DType t) {
    switch (t) {
        case DType::f32: case DType::bf16: case DType::s8: case DType::u8: case DType::s32: case DType::f16: return true;
    }
    return false;
}

bool is_quantize(const QuantDesc& d) { return is_int8_type(d.dst_dtype); }

int64_t channel_count(const QuantDesc& d) {
    switch (d.granularity) {
        case QuantGranularity::per_tensor: return 1;
        case QuantGranularity::per_channel: return d.axis == 0 ? d.rows : d.cols;
        case QuantGranularity::per_token_dynamic: return d.rows;
    }
    return 0;
}

QuantDesc resolve(const char* fn, const QuantDesc& in) {
    QuantDesc d = in;
    check_nonnegative(fn, "rows", d.rows);
    check_nonnegative(fn, "cols", d.cols);
    if (!valid_dtype(d.src_dtype)) fail_arg(fn, "src_dtype", std::to_string(static_cast<int>(d.src_dtype)), "is not a valid DType");
    if (!valid_dtype(d.dst_dtype)) fail_arg(fn, "dst_dtype", std::to_string(static_cast<int>(d.dst_dtype)), "is not a valid DType");
    const bool q = is_float_type(d.src_dtype) && is_int8_type(d.dst_dtype);
    const bool dq = is_int8_type(d.src_dtype) && is_float_type(d.dst_dtype);
    if (!q && !dq)
        fail(Status::unsupported, std::string(fn) + ": src_dtype=" + dtype_name(d.src_dtype) + " -> dst_dtype=" +
                                      dtype_name(d.dst_dtype) +
                                      " is not supported (quantize: f32/bf16 -> u8/s8, dequantize: u8/s8 -> f32/bf16)");
    switch (d.granularity) {
        case QuantGranularity::per_tensor: break;
        case QuantGranularity::per_channel:
            if (d.axis != 0 && d.axis != 1)
                fail_arg(fn, "axis", std::to_string(d.axis), "must be 0 (per row) or 1 (per column)");
            break;
        case QuantGranularity::per_token_dynamic:
            if (dq)
                fail_arg(fn, "granularity", "per_token_dynamic",
                         std::string("is quantize-only (src_dtype=") + dtype_name(d.src_dtype) + " is a dequantize)");
            break;
        default:
            fail_arg(fn, "granularity", std::to_string(static_cast<int>(d.granularity)),
                     "is not a QuantGranularity (per_tensor=0, per_channel=1, per_token_dynamic=2)");
    }
    if (d.granularity != QuantGranularity::per_channel) d.axis = 1;
    if (d.smooth && dq) fail_arg(fn, "smooth", "true", "is quantize-only");
    auto resolve_ld = [&](const char* arg, int64_t ld) {
        if (ld == 0) return d.cols;
        check_ld(fn, arg, ld, d.cols, "cols");
        return ld;
    };
    d.ld_src = resolve_ld("ld_src", d.ld_src);
    d.ld_dst = resolve_ld("ld_dst", d.ld_dst);
    if (d.rows > 0) {
        checked_add(fn, "(rows-1)*ld_src+cols", checked_mul(fn, "(rows-1)*ld_src", d.rows - 1, d.ld_src), d.cols);
        checked_add(fn, "(rows-1)*ld_dst+cols", checked_mul(fn, "(rows-1)*ld_dst", d.rows - 1, d.ld_dst), d.cols);
    }
    return d;
}

void check_args(const char* fn, const QuantDesc& d, const QuantArgs& a) {
    if (d.rows == 0 || d.cols == 0) return;  // nothing is read or written
    const bool dynamic = d.granularity == QuantGranularity::per_token_dynamic;
    const DType qtype = is_quantize(d) ? d.dst_dtype : d.src_dtype;
    check_not_null(fn, "src", a.src);
    check_not_null(fn, "dst", a.dst);
    auto presence = [&](const char* arg, const void* p, bool used, const std::string& why_not) {
        if (used && !p) fail_arg(fn, arg, "null", "must not be a null pointer");
        if (!used && p) fail_arg(fn, arg, ptr_str(p), "is given but " + why_not);
    };
    const char* gran = quant_granularity_name(d.granularity);
    presence("scales", a.scales, !dynamic, std::string("granularity is ") + gran + " (parameters go to scales_out)");
    presence("zero_points", a.zero_points, !dynamic && !d.symmetric,
             dynamic ? std::string("granularity is ") + gran + " (parameters go to zero_points_out)"
                     : std::string("symmetric is true (the zero point is implied)"));
    presence("scales_out", a.scales_out, dynamic, std::string("granularity is ") + gran);
    if (dynamic) {
        if (!d.symmetric) presence("zero_points_out", a.zero_points_out, true, "");
    } else {
        presence("zero_points_out", a.zero_points_out, false, std::string("granularity is ") + gran);
    }
    presence("smooth", a.smooth, d.smooth, "smooth is false");

    // Parameter values, per channel, before any work.
    const int64_t channels = channel_count(d);
    const int32_t qmin = quant_qmin(qtype), qmax = quant_qmax(qtype);
    if (!dynamic) {
        for (int64_t c = 0; c < channels; ++c) {
            const float s = a.scales[c];
            if (!(std::isfinite(s) && s > 0.0f && std::isfinite(1.0f / s))) {
                const std::string arg = "scales[" + std::to_string(c) + "]";
                fail_arg(fn, arg.c_str(), float_str(s),
                         s > 0.0f && std::isfinite(s) ? "is too small (1/scale overflows fp32)" : "must be positive and finite");
            }
            if (!d.symmetric && (a.zero_points[c] < qmin || a.zero_points[c] > qmax)) {
                const std::string arg = "zero_points[" + std::to_string(c) + "]";
                fail_arg(fn, arg.c_str(), std::to_string(a.zero_points[c]),
                         "is out of range [" + std::to_string(qmin) + ", " + std::to_string(qmax) + "] of " + dtype_name(qtype));
            }
        }
    }
    if (d.smooth) {
        for (int64_t c = 0; c < d.cols; ++c)
            if (!std::isfinite(a.smooth[c])) {
                const std::string arg = "smooth[" + std::to_string(c) + "]";
                fail_arg(fn, arg.c_str(), float_str(a.smooth[c]), "must be finite");
            }
    }

    // Overlaps: outputs against everything else.
    const MemRegion src = matrix_region(a.src, d.rows, d.cols, d.ld_src, dtype_size(d.src_dtype));
    const MemRegion dst = matrix_region(a.dst, d.rows, d.cols, d.ld_dst, dtype_size(d.dst_dtype));
    auto vec = [](const void* p, int64_t n, int64_t esize) { return p ? matrix_region(p, 1, n, n, esize) : MemRegion{}; };
    const MemRegion scales = vec(a.scales, channels, 4), zps = vec(a.zero_points, channels, 4);
    const MemRegion scales_out = vec(a.scales_out, d.rows, 4), zps_out = vec(a.zero_points_out, d.rows, 4);
    const MemRegion smooth = vec(a.smooth, d.cols, 4);
    struct Named {
        const char* name;
        const void* p;
        const MemRegion* r;
    };
    const Named outputs[] = {{"dst", a.dst, &dst}, {"scales_out", a.scales_out, &scales_out}, {"zero_points_out", a.zero_points_out, &zps_out}};
    const Named all[] = {{"src", a.src, &src},         {"dst", a.dst, &dst},
                         {"scales", a.scales, &scales}, {"zero_points", a.zero_points, &zps},
                         {"scales_out", a.scales_out, &scales_out}, {"zero_points_out", a.zero_points_out, &zps_out},
                         {"smooth", a.smooth, &smooth}};
    for (const Named& o : outputs)
        for (const Named& other : all)
            if (o.r != other.r && regions_overlap(*o.r, *other.r))
                fail_arg(fn, o.name, ptr_str(o.p), std::string("overlaps ") + other.name + "=" + ptr_str(other.p));
}

std::atomic<bool> g_dynamic_two_pass{false};

void execute(const char* /*fn*/, const QuantKernel& k, const QuantDesc& d, const QuantArgs& a) {
    if (d.rows == 0 || d.cols == 0) return;
    const bool quant = is_quantize(d);
    const DType qtype = quant ? d.dst_dtype : d.src_dtype;
    std::vector<float> inv;
    std::vector<int32_t> zps;
    QuantPrep prep;
    if (d.granularity == QuantGranularity::per_token_dynamic) {
        // Each row's range (its finite values), parameters and quantization while the row is in
        // cache: one read of x from DRAM. Non-finite values quantize as in the static modes.
        inv.resize(d.rows);
        zps.resize(d.rows);
        const int64_t grain = std::max<int64_t>(1, kQuantColBlock / d.cols);
        if (g_dynamic_two_pass.load(std::memory_order_relaxed)) {
            // The bench's "before": the range of every row (one read of x), then the quantize
            // pass (a second read).
            std::vector<float> mn(d.rows), mx(d.rows);
            std::vector<uint8_t> fin(d.rows);
            parallel_for(d.rows, grain, [&](int64_t b, int64_t e) { k.minmax(d, a, b, e, mn.data(), mx.data(), fin.data()); });
            for (int64_t r = 0; r < d.rows; ++r) dynamic_row_params(d, a, r, mn[r], mx[r], inv.data(), zps.data());
            prep = {inv.data(), zps.data()};
            parallel_for(d.rows, grain, [&](int64_t b, int64_t e) { k.run(d, a, b, e, 0, d.cols, prep); });
            return;
        }
        parallel_for(d.rows, grain, [&](int64_t b, int64_t e) { k.run_dynamic(d, a, b, e, inv.data(), zps.data()); });
        return;
    } else if (quant) {
        // 64-byte aligned: the kernels read them a vector a column (a zmm load across two cache
        // lines costs two; Zen 4, one core, per-channel f32 -> s8 from L2: 35 -> 39 GB/s)
        const int64_t channels = channel_count(d);
        inv.resize(channels + 16);
        zps.resize(channels + 16);
        auto align64 = [](auto* p) { return reinterpret_cast<decltype(p)>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); };
        float* iv = align64(inv.data());
        int32_t* zp = align64(zps.data());
        for (int64_t c = 0; c < channels; ++c) {
            iv[c] = 1.0f / a.scales[c];
            zp[c] = d.symmetric ? quant_symmetric_zero_point(qtype) : a.zero_points[c];
        }
        prep = {iv, zp};
    }
    if (d.granularity == QuantGranularity::per_token_dynamic || d.cols <= kQuantColBlock) {
        // Whole rows; at least ~kQuantColBlock elements per chunk.
        const int64_t grain = std::max<int64_t>(1, kQuantColBlock / d.cols);
        parallel_for(d.rows, grain, [&](int64_t b, int64_t e) { k.run(d, a, b, e, 0, d.cols, prep); });
        return;
    }
    // Long rows: blocks of kQuantColBlock columns, so that even one row is split.
    const int64_t blocks = (d.cols + kQuantColBlock - 1) / kQuantColBlock;
    parallel_for(d.rows * blocks, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const int64_t r = i / blocks, c0 = (i % blocks) * kQuantColBlock;
            k.run(d, a, r, r + 1, c0, std::min(d.cols, c0 + kQuantColBlock), prep);
        }
    });
}

}  // namespace

void QuantKernel::minmax(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, float* mn, float* mx,
                         uint8_t* finite) const {
    for (int64_t r = r0; r < r1; ++r) {
        float lo = 0.0f, hi = 0.0f;  // 0 included: the same parameters (see quant_params_from_range)
        bool ok = true;
        for (int64_t j = 0; j < d.cols; ++j) {
            const int64_t off = r * d.ld_src + j;
            float v = d.src_dtype == DType::bf16 ? bf16::to_float(static_cast<const uint16_t*>(a.src)[off])
                                                 : static_cast<const float*>(a.src)[off];
            if (d.smooth) v *= a.smooth[j];
            if (!std::isfinite(v)) {
                ok = false;
                continue;
            }
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        }
        mn[r] = lo;
        mx[r] = hi;
        finite[r] = ok;
    }
}

void set_quant_dynamic_two_pass(bool on) { g_dynamic_two_pass.store(on, std::memory_order_relaxed); }

std::string QuantKernelDesc::key() const {
    std::string s = std::string(dtype_name(src_dtype)) + "->" + dtype_name(dst_dtype) + "," +
                    quant_granularity_name(granularity);
    if (granularity == QuantGranularity::per_channel) s += ",axis=" + std::to_string(axis);
    s += symmetric ? ",sym" : ",asym";
    if (smooth) s += ",smooth";
    return s;
}

QuantKernelDesc quant_kernel_desc(const QuantDesc& d) {
    QuantKernelDesc k;
    k.src_dtype = d.src_dtype;
    k.dst_dtype = d.dst_dtype;
    k.granularity = d.granularity;
    k.axis = d.granularity == QuantGranularity::per_channel ? d.axis : 1;
    k.symmetric = d.symmetric;
    k.smooth = d.smooth;
    return k;
}

void quant_one_shot(const char* fn, const QuantDesc& desc, const QuantArgs& args, bool want_quantize) {
    const QuantDesc d = resolve(fn, desc);
    if (is_quantize(d) != want_quantize)
        fail(Status::invalid_argument,
             std::string(fn) + ": src_dtype=" + dtype_name(d.src_dtype) + " -> dst_dtype=" + dtype_name(d.dst_dtype) +
                 (want_quantize ? " is a dequantize (use xk::dequantize)" : " is a quantize (use xk::quantize)"));
    check_args(fn, d, args);
    if (d.rows == 0 || d.cols == 0) return;
    const auto sel = quant_registry().get(quant_kernel_desc(d));
    execute(fn, *sel.kernel, d, args);
}

const Registry<QuantKernelDesc, QuantKernel>& quant_registry() {
    static const Registry<QuantKernelDesc, QuantKernel> r(
        "quant", {
                     {"jit:avx512_bf16", Isa::avx512_bf16,
                      [](const QuantKernelDesc& kd) { return is_int8_type(kd.src_dtype) && kd.dst_dtype == DType::bf16; },
                      [](const QuantKernelDesc& kd) { return create_jit_quant(kd, Isa::avx512_bf16); }},
                     {"jit:avx512", Isa::avx512, nullptr, [](const QuantKernelDesc& kd) { return create_jit_quant(kd, Isa::avx512); }},
                     {"jit:avx2", Isa::avx2, nullptr, [](const QuantKernelDesc& kd) { return create_jit_quant(kd, Isa::avx2); }},
                     {"ref:scalar", Isa::scalar, nullptr,
                      [](const QuantKernelDesc&) -> std::shared_ptr<const QuantKernel> { return std::make_shared<RefQuant>(); }},
                 });
    return r;
}

}  // namespace detail

QuantParams compute_quant_params(float min, float max, DType qtype, bool symmetric) {
    constexpr const char* fn = "xk::compute_quant_params";
    if (qtype != DType::u8 && qtype != DType::s8) {
        if (!detail::valid_dtype(qtype)) detail::fail_arg(fn, "qtype", std::to_string(static_cast<int>(qtype)), "is not a valid DType");
        detail::fail(Status::unsupported, std::string(fn) + ": qtype=" + dtype_name(qtype) + " is not supported (u8 or s8)");
    }
    if (!std::isfinite(min)) detail::fail_arg(fn, "min", detail::float_str(min), "must be finite");
    if (!std::isfinite(max)) detail::fail_arg(fn, "max", detail::float_str(max), "must be finite");
    if (min > max) detail::fail_arg(fn, "min", detail::float_str(min), "must be <= max=" + detail::float_str(max));
    return detail::quant_params_from_range(min, max, qtype, symmetric);
}

QuantPlan::QuantPlan(const QuantDesc& desc) : desc_(detail::resolve("xk::QuantPlan", desc)) {
    const auto sel = detail::quant_registry().get(detail::quant_kernel_desc(desc_));
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

bool QuantPlan::is_quantize() const { return detail::is_quantize(desc_); }

void QuantPlan::run(const QuantArgs& args) const {
    detail::check_args("xk::QuantPlan::run", desc_, args);
    detail::execute("xk::QuantPlan::run", *kernel_, desc_, args);
}

void quantize(const QuantDesc& desc, const QuantArgs& args) { detail::quant_one_shot("xk::quantize", desc, args, true); }
void dequantize(const QuantDesc& desc, const QuantArgs& args) { detail::quant_one_shot("xk::dequantize", desc, args, false); }

namespace {

template <class T>
constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, float>) return DType::f32;
    if constexpr (std::is_same_v<T, bf16>) return DType::bf16;
    if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
    return DType::s8;
}

template <class S, class D>
void per_tensor(const char* fn, int64_t n, const S* src, float scale, int32_t zero_point, D* dst, bool want_quantize) {
    detail::check_nonnegative(fn, "n", n);
    QuantDesc d;
    d.rows = 1;
    d.cols = n;
    d.src_dtype = dtype_of<S>();
    d.dst_dtype = dtype_of<D>();
    d.granularity = QuantGranularity::per_tensor;
    QuantArgs a;
    a.src = src;
    a.dst = dst;
    a.scales = &scale;
    a.zero_points = &zero_point;
    detail::quant_one_shot(fn, d, a, want_quantize);
}

template <class S, class D>
void dynamic_per_token(int64_t rows, int64_t cols, const S* x, D* q, float* scales, int32_t* zero_points, bool symmetric) {
    QuantDesc d;
    d.rows = rows;
    d.cols = cols;
    d.src_dtype = dtype_of<S>();
    d.dst_dtype = dtype_of<D>();
    d.granularity = QuantGranularity::per_token_dynamic;
    d.symmetric = symmetric;
    QuantArgs a;
    a.src = x;
    a.dst = q;
    a.scales_out = scales;
    a.zero_points_out = zero_points;
    detail::quant_one_shot("xk::quantize_dynamic_per_token", d, a, true);
}

}  // namespace

void quantize_per_tensor(int64_t n, const float* x, float scale, int32_t zero_point, uint8_t* q) {
    per_tensor("xk::quantize_per_tensor", n, x, scale, zero_point, q, true);
}
void quantize_per_tensor(int64_t n, const float* x, float scale, int32_t zero_point, int8_t* q) {
    per_tensor("xk::quantize_per_tensor", n, x, scale, zero_point, q, true);
}
void quantize_per_tensor(int64_t n, const bf16* x, float scale, int32_t zero_point, uint8_t* q) {
    per_tensor("xk::quantize_per_tensor", n, x, scale, zero_point, q, true);
}
void quantize_per_tensor(int64_t n, const bf16* x, float scale, int32_t zero_point, int8_t* q) {
    per_tensor("xk::quantize_per_tensor", n, x, scale, zero_point, q, true);
}
void dequantize_per_tensor(int64_t n, const uint8_t* q, float scale, int32_t zero_point, float* x) {
    per_tensor("xk::dequantize_per_tensor", n, q, scale, zero_point, x, false);
}
void dequantize_per_tensor(int64_t n, const int8_t* q, float scale, int32_t zero_point, float* x) {
    per_tensor("xk::dequantize_per_tensor", n, q, scale, zero_point, x, false);
}
void dequantize_per_tensor(int64_t n, const uint8_t* q, float scale, int32_t zero_point, bf16* x) {
    per_tensor("xk::dequantize_per_tensor", n, q, scale, zero_point, x, false);
}
void dequantize_per_tensor(int64_t n, const int8_t* q, float scale, int32_t zero_point, bf16* x) {
    per_tensor("xk::dequantize_per_tensor", n, q, scale, zero_point, x, false);
}

void quantize_dynamic_per_token(int64_t rows, int64_t cols, const float* x, uint8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric) {
    dynamic_per_token(rows, cols, x, q, scales, zero_points, symmetric);
}
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const float* x, int8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric) {
    dynamic_per_token(rows, cols, x, q, scales, zero_points, symmetric);
}
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const bf16* x, uint8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric) {
    dynamic_per_token(rows, cols, x, q, scales, zero_points, symmetric);
}
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const bf16* x, int8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric) {
    dynamic_per_token(rows, cols, x, q, scales, zero_points, symmetric);
}

}  // namespace xk
