// WOQ GEMM family: packing and imports, validation, registry, plan, one-shot, reference.
#include "kernels/woq/woq.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "common/huge_alloc.hpp"
#include "common/parallel.hpp"
#include "xk/woq.hpp"

namespace xk {
namespace detail {

// ---- packed weight -----------------------------------------------------------------------------

WoqPacked::WoqPacked(int64_t N_, int64_t K_, int64_t gs_, WoqWeightType type_, bool has_offset_)
    : N(N_), K(K_), type(type_), has_offset(has_offset_) {
    gs = gs_ > 0 ? gs_ : std::max<int64_t>(K, 1);
    G = gs_ > 0 ? K / gs_ : 1;
    nblk = (N + kWoqBlockN - 1) / kWoqBlockN;
    q_block_bytes = type == WoqWeightType::s8 ? K * kWoqBlockN : K / 2 * kWoqBlockN;
    const size_t qbytes = static_cast<size_t>(nblk * q_block_bytes + 63) / 64 * 64;
    const size_t sfl = static_cast<size_t>(nblk * G * kWoqBlockN);
    const size_t sbytes = (sfl * 4 + 63) / 64 * 64;
    bytes = qbytes + sbytes * (has_offset ? 2 : 1);
    void* p = alloc_huge_zeroed(bytes);  // 2 MiB pages for the stream (common/huge_alloc.hpp)
    q = static_cast<uint8_t*>(p);
    scales = reinterpret_cast<float*>(q + qbytes);
    offsets = has_offset ? reinterpret_cast<float*>(q + qbytes + sbytes) : nullptr;
    layout = std::string("woq:") + woq_weight_type_name(type) + ":N" + std::to_string(N) + ":K" + std::to_string(K) +
             (gs_ > 0 ? ":g" + std::to_string(gs_) : std::string(":ch")) + (has_offset ? ":off" : "");
}

WoqPacked::~WoqPacked() { std::free(q); }

int WoqPacked::q_at(int64_t n, int64_t k) const {
    const uint8_t* b = qb(n / kWoqBlockN);
    const int64_t c = n % kWoqBlockN;
    if (type == WoqWeightType::s8) return static_cast<int8_t>(b[k * kWoqBlockN + c]);
    const uint8_t v = b[(k / 2) * kWoqBlockN + c];
    return (k & 1) ? v >> 4 : v & 15;
}

float WoqPacked::w_at(int64_t n, int64_t k) const {
    const int64_t g = k / gs;
    return std::fma(static_cast<float>(q_at(n, k)), scale_at(n, g), offset_at(n, g));
}

void woq_set_q(WoqPacked& p, int64_t n, int64_t k, int q) {
    uint8_t* b = p.q + (n / kWoqBlockN) * p.q_block_bytes;
    const int64_t c = n % kWoqBlockN;
    if (p.type == WoqWeightType::s8) {
        b[k * kWoqBlockN + c] = static_cast<uint8_t>(static_cast<int8_t>(q));
        return;
    }
    uint8_t& v = b[(k / 2) * kWoqBlockN + c];
    v = (k & 1) ? static_cast<uint8_t>((v & 0x0F) | (q << 4)) : static_cast<uint8_t>((v & 0xF0) | (q & 15));
}

std::shared_ptr<WoqPacked> woq_alloc(const char* fn, int64_t N, int64_t K, int64_t gs, WoqWeightType type,
                                     bool has_offset) {
    check_nonnegative(fn, "N", N);
    check_nonnegative(fn, "K", K);
    const int64_t nblk = (N + kWoqBlockN - 1) / kWoqBlockN;
    const int64_t G = gs > 0 ? K / gs : 1;
    checked_mul(fn, "N*K", nblk * kWoqBlockN, K);
    checked_mul(fn, "N*groups", nblk * kWoqBlockN, G * 2);
    return std::make_shared<WoqPacked>(N, K, gs, type, has_offset);
}

namespace {

bool scale_ok(float v) { return std::isfinite(v) && v > 0.0f; }

float load_scalar(DType t, const void* p, int64_t i) {
    switch (t) {
        case DType::f32: return static_cast<const float*>(p)[i];
        case DType::bf16: return bf16::to_float(static_cast<const uint16_t*>(p)[i]);
        case DType::f16: return f16::to_float(static_cast<const uint16_t*>(p)[i]);
        default: return 0.0f;
    }
}

void check_float_type(const char* fn, const char* arg, DType t) {
    if (t != DType::f32 && t != DType::bf16 && t != DType::f16)
        fail_arg(fn, arg, std::to_string(static_cast<int>(t)), "must be f32, bf16 or f16");
}

void check_type(const char* fn, WoqWeightType t, const char* arg) {
    const int v = static_cast<int>(t);
    if (v != 0 && v != 1) fail_arg(fn, arg, std::to_string(v), "is not a valid xk::WoqWeightType (s8=0, u4=1)");
}

}  // namespace

// ---- validation --------------------------------------------------------------------------------

std::string WoqSpec::key() const {
    std::string k = std::string("w") + woq_weight_type_name(wtype) + ",a" + dtype_name(a_type) + ",c" +
                    dtype_name(c_type) + ",M" + std::to_string(M) + "N" + std::to_string(N) + "K" + std::to_string(K) +
                    ",lda" + std::to_string(lda) + ",ldc" + std::to_string(ldc) + (alpha_one ? ",a1" : ",aX") +
                    (beta == BetaKind::zero ? ",b0" : beta == BetaKind::one ? ",b1" : ",bX");
    if (compute == WoqCompute::int8) k += ",i8";
    if (epilogue.bias || epilogue.act != Activation::none || epilogue.residual) {
        k += ",ep:";
        if (epilogue.bias) k += "bias+";
        k += activation_name(epilogue.act);
        if (epilogue.residual)
            k += std::string("+res:") + dtype_name(residual_type) + ":ld" + std::to_string(ld_residual);
    }
    return k;
}

WoqSpec woq_check_desc(const char* fn, const WoqDesc& d) {
    check_type(fn, d.weight_type, "weight_type");
    check_io_dtype(fn, "a_type", d.a_type);
    check_io_dtype(fn, "c_type", d.c_type);
    if (!valid_activation(d.epilogue.act))
        fail_arg(fn, "epilogue.act", std::to_string(static_cast<int>(d.epilogue.act)), "is not a valid xk::Activation");
    if (d.epilogue.residual) check_io_dtype(fn, "residual_type", d.residual_type);
    if (static_cast<int>(d.compute) != 0 && static_cast<int>(d.compute) != 1)
        fail_arg(fn, "compute", std::to_string(static_cast<int>(d.compute)), "is not a valid xk::WoqCompute (exact=0, int8=1)");
    check_nonnegative(fn, "M", d.M);
    check_nonnegative(fn, "N", d.N);
    check_nonnegative(fn, "K", d.K);
    if (d.weight_type == WoqWeightType::u4 && d.K % 2 != 0)
        fail_arg(fn, "K", std::to_string(d.K), "must be even for u4 weights (two per byte)");
    WoqSpec s;
    s.M = d.M, s.N = d.N, s.K = d.K;
    s.wtype = d.weight_type;
    s.a_type = d.a_type, s.c_type = d.c_type;
    s.lda = d.lda ? d.lda : d.K;
    s.ldc = d.ldc ? d.ldc : d.N;
    s.ld_residual = d.ld_residual ? d.ld_residual : d.N;
    check_ld(fn, "lda", s.lda, d.K, "K");
    check_ld(fn, "ldc", s.ldc, d.N, "N");
    if (d.epilogue.residual) check_ld(fn, "ld_residual", s.ld_residual, d.N, "N");
    if (d.M > 0) {
        checked_add(fn, "M*lda", checked_mul(fn, "M*lda", d.M - 1, s.lda), d.K);
        checked_add(fn, "M*ldc", checked_mul(fn, "M*ldc", d.M - 1, s.ldc), d.N);
        if (d.epilogue.residual) checked_add(fn, "M*ld_residual", checked_mul(fn, "M*ld_residual", d.M - 1, s.ld_residual), d.N);
    }
    checked_mul(fn, "N*K", d.N, d.K);
    s.alpha_one = d.alpha == 1.0f;
    s.beta = d.beta == 0.0f ? BetaKind::zero : d.beta == 1.0f ? BetaKind::one : BetaKind::other;
    s.epilogue = d.epilogue;
    s.residual_type = d.residual_type;
    s.compute = d.compute;
    return s;
}

namespace {

inline bool overlaps(const void* c, int64_t c_bytes, const void* p, int64_t bytes) {
    const auto c0 = reinterpret_cast<uintptr_t>(c), i0 = reinterpret_cast<uintptr_t>(p);
    return p && bytes > 0 && c_bytes > 0 && c0 < i0 + static_cast<uintptr_t>(bytes) &&
           i0 < c0 + static_cast<uintptr_t>(c_bytes);
}

int64_t span(int64_t rows, int64_t cols, int64_t ld, DType t) {
    return rows == 0 || cols == 0 ? 0 : ((rows - 1) * ld + cols) * dtype_size(t);
}

void check_weight(const char* fn, const WoqSpec& s, const WoqPackedWeight& w, const WoqPacked* p) {
    if (!p) fail_arg(fn, "weight", "empty", "holds no data (make it with xk::woq_pack or an xk::woq_import_*)");
    if (p->N != s.N || p->K != s.K || p->type != s.wtype)
        fail_arg(fn, "weight", "'" + w.layout() + "'",
                 "was packed for N=" + std::to_string(p->N) + " K=" + std::to_string(p->K) +
                     " type=" + woq_weight_type_name(p->type) + ", but this plan has N=" + std::to_string(s.N) +
                     " K=" + std::to_string(s.K) + " weight_type=" + woq_weight_type_name(s.wtype));
}

void check_args(const char* fn, const WoqSpec& s, const WoqArgs& a) {
    const bool any = s.M > 0 && s.N > 0;
    if (any && s.K > 0) check_not_null(fn, "A", a.A);
    if (any) check_not_null(fn, "C", a.C);
    if (any && s.epilogue.bias) check_not_null(fn, "bias", a.bias);
    if (any && s.epilogue.residual) check_not_null(fn, "residual", a.residual);
    if (!any) return;
    const int64_t cb = span(s.M, s.N, s.ldc, s.c_type);
    auto ov = [&](const char* name, const void* p, int64_t bytes) {
        if (overlaps(a.C, cb, p, bytes))
            fail_arg(fn, "C", ptr_str(a.C), std::string("overlaps ") + name + "=" + ptr_str(p) +
                                                 " (the output must not alias an input)");
    };
    if (s.K > 0) ov("A", a.A, span(s.M, s.K, s.lda, s.a_type));
    if (s.epilogue.bias) ov("bias", a.bias, s.N * 4);
    if (s.epilogue.residual) ov("residual", a.residual, span(s.M, s.N, s.ld_residual, s.residual_type));
}

}  // namespace

// ---- reference ---------------------------------------------------------------------------------

void woq_epilogue(const WoqSpec& s, const WoqCall& call, const float* acc, int64_t ld, int64_t m0, int64_t mb,
                  int64_t n0, int64_t n1) {
    const WoqArgs& a = call.args;
    for (int64_t m = m0; m < m0 + mb; ++m)
        for (int64_t n = n0; n < n1; ++n) {
            float x = call.alpha * acc[(m - m0) * ld + (n - n0)];
            if (s.beta != BetaKind::zero) {
                const float c = s.c_type == DType::bf16 ? static_cast<const bf16*>(a.C)[m * s.ldc + n].to_float()
                                                        : static_cast<const float*>(a.C)[m * s.ldc + n];
                x = x + call.beta * c;
            }
            if (s.epilogue.bias) x = x + a.bias[n];
            x = apply_activation(s.epilogue.act, x);
            if (s.epilogue.residual)
                x = x + (s.residual_type == DType::bf16
                             ? static_cast<const bf16*>(a.residual)[m * s.ld_residual + n].to_float()
                             : static_cast<const float*>(a.residual)[m * s.ld_residual + n]);
            if (s.c_type == DType::bf16)
                static_cast<bf16*>(a.C)[m * s.ldc + n] = bf16(x);
            else
                static_cast<float*>(a.C)[m * s.ldc + n] = x;
        }
}

float woq_quantize_row(const WoqSpec& s, const void* a_row, int8_t* q) {
    auto at = [&](int64_t k) {
        return s.a_type == DType::bf16 ? static_cast<const bf16*>(a_row)[k].to_float() : static_cast<const float*>(a_row)[k];
    };
    float amax = 0.0f;
    for (int64_t k = 0; k < s.K; ++k) amax = std::max(amax, std::fabs(at(k)));
    float sx = amax / 127.0f;
    if (!(sx > 0.0f) || !std::isfinite(sx)) sx = 1.0f;  // a zero row (a non-finite X is the caller's error)
    const float inv = 1.0f / sx;
    for (int64_t k = 0; k < s.K; ++k) {
        const float t = std::nearbyint(at(k) * inv);
        q[k] = static_cast<int8_t>(t >= 127.0f ? 127 : t <= -127.0f ? -127 : t == t ? static_cast<int>(t) : 0);
    }
    return sx;
}

namespace {
// WoqCompute::int8: the activations quantized per row, exact integer sums per group.
void woq_reference_int8(const WoqSpec& s, const WoqCall& call) {
    const WoqPacked& w = *call.w;
    const int64_t esz = dtype_size(s.a_type);
    std::vector<int8_t> xq(static_cast<size_t>(s.M * s.K));
    std::vector<float> sx(static_cast<size_t>(s.M));
    for (int64_t m = 0; m < s.M; ++m)
        sx[m] = woq_quantize_row(s, static_cast<const char*>(call.args.A) + m * s.lda * esz, xq.data() + m * s.K);
    parallel_for(w.nblk, 1, [&](int64_t b0, int64_t b1) {
        std::vector<float> acc(static_cast<size_t>(kWoqBlockN));
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t n0 = b * kWoqBlockN, n1 = std::min(s.N, n0 + kWoqBlockN);
            for (int64_t m = 0; m < s.M; ++m) {
                const int8_t* xr = xq.data() + m * s.K;
                for (int64_t n = n0; n < n1; ++n) {
                    float y = 0.0f;
                    for (int64_t g = 0; g < w.G; ++g) {
                        int64_t isum = 0, xs = 0;
                        for (int64_t k = g * w.gs; k < std::min(s.K, (g + 1) * w.gs); ++k) {
                            isum += int64_t(xr[k]) * w.q_at(n, k);
                            xs += xr[k];
                        }
                        y = std::fma(static_cast<float>(isum), w.scale_at(n, g) * sx[m], y);
                        y = std::fma(w.offset_at(n, g), sx[m] * static_cast<float>(xs), y);
                    }
                    acc[n - n0] = y;
                }
                woq_epilogue(s, call, acc.data(), 0, m, 1, n0, n1);
            }
        }
    });
}
}  // namespace

void woq_reference(const WoqSpec& s, const WoqCall& call) {
    if (s.compute == WoqCompute::int8) return woq_reference_int8(s, call);
    const WoqPacked& w = *call.w;
    // Columns in chunks: each chunk's weights dequantized once (w_at), then the plain sums.
    parallel_for(w.nblk, 1, [&](int64_t b0, int64_t b1) {
        std::vector<float> wd(static_cast<size_t>(kWoqBlockN * s.K));
        std::vector<float> x(static_cast<size_t>(s.K));
        std::vector<float> acc(static_cast<size_t>(kWoqBlockN));
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t n0 = b * kWoqBlockN, n1 = std::min(s.N, n0 + kWoqBlockN);
            for (int64_t n = n0; n < n1; ++n)
                for (int64_t k = 0; k < s.K; ++k) wd[(n - n0) * s.K + k] = w.w_at(n, k);
            for (int64_t m = 0; m < s.M; ++m) {
                for (int64_t k = 0; k < s.K; ++k)
                    x[k] = s.a_type == DType::bf16 ? static_cast<const bf16*>(call.args.A)[m * s.lda + k].to_float()
                                                   : static_cast<const float*>(call.args.A)[m * s.lda + k];
                for (int64_t n = n0; n < n1; ++n) {
                    float sum = 0.0f;
                    const float* wr = wd.data() + (n - n0) * s.K;
                    for (int64_t k = 0; k < s.K; ++k) sum += x[k] * wr[k];
                    acc[n - n0] = sum;
                }
                woq_epilogue(s, call, acc.data(), 0, m, 1, n0, n1);
            }
        }
    });
}

namespace {

struct WoqRef final : WoqKernel {
    explicit WoqRef(const WoqSpec& s) : s_(s) {}
    void run(const WoqCall& call) const override { woq_reference(s_, call); }
    WoqSpec s_;
};

std::shared_ptr<const WoqKernel> create_ref(const WoqSpec& s) { return std::make_shared<WoqRef>(s); }
bool exact(const WoqSpec& s) { return s.compute == WoqCompute::exact; }
bool decode_s8(const WoqSpec& s) { return exact(s) && s.wtype == WoqWeightType::s8 && s.M <= kWoqMaxDecodeM; }
bool decode_u4(const WoqSpec& s) { return exact(s) && s.wtype == WoqWeightType::u4 && s.M <= kWoqMaxDecodeM; }
bool prefill(const WoqSpec& s) { return exact(s) && s.M > kWoqMaxDecodeM; }
bool int8_mode(const WoqSpec& s) { return s.compute == WoqCompute::int8 && s.K > 0 && woq_vnni_supported(); }
bool int8_avx_vnni(const WoqSpec& s) { return s.compute == WoqCompute::int8 && s.K > 0 && woq_avx_vnni_supported(); }
bool int8_avx2(const WoqSpec& s) { return s.compute == WoqCompute::int8 && s.K > 0; }

}  // namespace

const Registry<WoqSpec, WoqKernel>& woq_registry() {
    static const Registry<WoqSpec, WoqKernel> reg(
        "woq", {
                   {"amx:woq:dequant_gemm", Isa::amx, woq_amx_prefill_supports, create_woq_amx_prefill},
                   {"avx512_vnni:woq:int8", Isa::avx512_vnni, int8_mode, create_woq_vnni},
                   {"avx512_vnni:woq_s8:planes", Isa::avx512_vnni, woq_planes_supports, create_woq_planes},
                   {"avx512_bf16:woq_u4:gemv", Isa::avx512_bf16, woq_u4_dp_supports, create_woq_dp},
                   {"avx512_bf16:woq_s8:gemv", Isa::avx512_bf16, woq_s8_dp_supports, create_woq_dp},
                   {"avx512:woq_s8:gemv", Isa::avx512, decode_s8, create_woq_gemv_avx512},
                   {"avx512:woq_u4:gemv", Isa::avx512, decode_u4, create_woq_gemv_avx512},
                   {"avx512:woq:dequant_gemm", Isa::avx512, prefill, create_woq_prefill_avx512},
                   {"avx2_vnni:woq:int8", Isa::avx2_vnni, int8_avx_vnni, create_woq_int8_avx_vnni},
                   {"avx2:woq:int8", Isa::avx2, int8_avx2, create_woq_int8_avx2},
                   {"avx2:woq_s8:gemv", Isa::avx2, decode_s8, create_woq_gemv_avx2},
                   {"avx2:woq_u4:gemv", Isa::avx2, decode_u4, create_woq_gemv_avx2},
                   {"avx2:woq:dequant_gemm", Isa::avx2, prefill, create_woq_prefill_avx2},
                   {"ref:scalar", Isa::scalar, nullptr, create_ref},
               });
    return reg;
}

}  // namespace detail

// ---- packing and imports -----------------------------------------------------------------------

struct WoqAccess {
    static const detail::WoqPacked* get(const WoqPackedWeight& w) { return w.data_.get(); }
    static WoqPackedWeight make(std::shared_ptr<const detail::WoqPacked> p) {
        WoqPackedWeight w;
        w.data_ = std::move(p);
        return w;
    }
};

const detail::WoqPacked* detail::woq_packed(const WoqPackedWeight& w) { return WoqAccess::get(w); }

int64_t WoqPackedWeight::N() const noexcept { return data_ ? data_->N : 0; }
int64_t WoqPackedWeight::K() const noexcept { return data_ ? data_->K : 0; }
int64_t WoqPackedWeight::group_size() const noexcept { return data_ ? data_->gs : 0; }
WoqWeightType WoqPackedWeight::type() const noexcept { return data_ ? data_->type : WoqWeightType::s8; }
bool WoqPackedWeight::has_offsets() const noexcept { return data_ && data_->has_offset; }
size_t WoqPackedWeight::size_bytes() const noexcept { return data_ ? data_->bytes : 0; }
std::string WoqPackedWeight::layout() const { return data_ ? data_->layout : std::string(); }

using detail::fail_arg;

WoqPackedWeight woq_pack(const WoqWeightDesc& d, const WoqWeightArgs& a) {
    constexpr const char* fn = "xk::woq_pack";
    detail::check_type(fn, d.type, "type");
    detail::check_nonnegative(fn, "N", d.N);
    detail::check_nonnegative(fn, "K", d.K);
    const bool u4 = d.type == WoqWeightType::u4;
    if (d.group_size != 0 && d.group_size != 32 && d.group_size != 64 && d.group_size != 128 && d.group_size != 256)
        fail_arg(fn, "group_size", std::to_string(d.group_size), "must be 0 (per channel), 32, 64, 128 or 256");
    if (d.group_size > 0 && d.K % d.group_size != 0)
        fail_arg(fn, "group_size", std::to_string(d.group_size), "does not divide K=" + std::to_string(d.K));
    if (u4 && d.K % 2 != 0) fail_arg(fn, "K", std::to_string(d.K), "must be even for u4 weights (two per byte)");
    const int64_t row = u4 ? d.K / 2 : d.K;
    const int64_t ld = d.ld_w ? d.ld_w : row;
    detail::check_ld(fn, "ld_w", ld, row, u4 ? "K/2" : "K");
    if (d.N > 0) detail::checked_add(fn, "N*ld_w", detail::checked_mul(fn, "N*ld_w", d.N - 1, ld), row);
    const int64_t G = d.group_size > 0 ? d.K / d.group_size : 1;
    const int64_t ng = detail::checked_mul(fn, "N*groups", d.N, G);
    if (d.N > 0 && d.K > 0) detail::check_not_null(fn, "weights", a.weights);
    if (ng > 0) detail::check_not_null(fn, "scales", a.scales);
    if (d.zero_points && ng > 0) detail::check_not_null(fn, "zero_points", a.zero_points);
    // Data checks before anything is built.
    for (int64_t i = 0; i < ng; ++i)
        if (!detail::scale_ok(a.scales[i]))
            fail_arg(fn, ("scales[" + std::to_string(i) + "]").c_str(), detail::float_str(a.scales[i]),
                     "must be finite and > 0");
    if (d.zero_points && u4)
        for (int64_t i = 0; i < ng; ++i) {
            const int z = static_cast<const uint8_t*>(a.zero_points)[i];
            if (z > 15) fail_arg(fn, ("zero_points[" + std::to_string(i) + "]").c_str(), std::to_string(z), "must be in [0, 15] for u4");
        }
    const bool has_off = u4 || d.zero_points;
    auto p = detail::woq_alloc(fn, d.N, d.K, d.group_size, d.type, has_off);
    p->sym8 = u4 && !d.zero_points;
    const auto* W = static_cast<const uint8_t*>(a.weights);
    detail::parallel_for(p->nblk, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t n = b0 * 16; n < std::min(d.N, b1 * 16); ++n) {
            const uint8_t* r = W + n * ld;
            if (u4) {
                uint8_t* blk = p->q + (n / 16) * p->q_block_bytes + n % 16;
                for (int64_t j = 0; j < d.K / 2; ++j) blk[j * 16] = r[j];  // same nibble order
            } else {
                uint8_t* blk = p->q + (n / 16) * p->q_block_bytes + n % 16;
                for (int64_t k = 0; k < d.K; ++k) blk[k * 16] = r[k];
            }
            for (int64_t g = 0; g < G; ++g) {
                const float s = a.scales[n * G + g];
                const int64_t o = ((n / 16) * p->G + g) * 16 + n % 16;
                p->scales[o] = s;
                if (has_off) {
                    int z = u4 ? 8 : 0;
                    if (d.zero_points)
                        z = u4 ? static_cast<const uint8_t*>(a.zero_points)[n * G + g]
                               : static_cast<const int8_t*>(a.zero_points)[n * G + g];
                    p->offsets[o] = -(s * static_cast<float>(z));
                }
            }
        }
    });
    return WoqAccess::make(std::move(p));
}

WoqPackedWeight woq_import_torch_int8pack(int64_t N, int64_t K, const int8_t* w, DType scale_type, const void* scales) {
    constexpr const char* fn = "xk::woq_import_torch_int8pack";
    detail::check_float_type(fn, "scale_type", scale_type);
    detail::check_nonnegative(fn, "N", N);
    detail::check_nonnegative(fn, "K", K);
    detail::checked_mul(fn, "N*K", N, K);
    if (N > 0 && K > 0) detail::check_not_null(fn, "w", w);
    if (N > 0) detail::check_not_null(fn, "scales", scales);
    std::vector<float> sc(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) {
        sc[n] = detail::load_scalar(scale_type, scales, n);
        if (!detail::scale_ok(sc[n]))
            fail_arg(fn, ("scales[" + std::to_string(n) + "]").c_str(), detail::float_str(sc[n]), "must be finite and > 0");
    }
    WoqWeightDesc d;
    d.N = N, d.K = K, d.type = WoqWeightType::s8;
    return woq_pack(d, {w, sc.data(), nullptr});
}

WoqPackedWeight woq_import_torch_int4pack_cpu(int64_t N, int64_t K, int64_t group_size, const uint8_t* w,
                                              DType sz_type, const void* sz, int block_n) {
    constexpr const char* fn = "xk::woq_import_torch_int4pack_cpu";
    detail::check_float_type(fn, "sz_type", sz_type);
    detail::check_nonnegative(fn, "N", N);
    detail::check_nonnegative(fn, "K", K);
    if (block_n != 32 && block_n != 64) fail_arg(fn, "block_n", std::to_string(block_n), "must be 32 or 64");
    if (group_size != 32 && group_size != 64 && group_size != 128 && group_size != 256)
        fail_arg(fn, "group_size", std::to_string(group_size), "must be 32, 64, 128 or 256");
    if (K % group_size != 0) fail_arg(fn, "group_size", std::to_string(group_size), "does not divide K=" + std::to_string(K));
    if (N % 2 != 0) fail_arg(fn, "N", std::to_string(N), "must be even (torch packs rows in pairs)");
    detail::checked_mul(fn, "N*K", N, K);
    const int64_t G = K / group_size;
    if (N > 0 && K > 0) {
        detail::check_not_null(fn, "w", w);
        detail::check_not_null(fn, "scales_and_zeros", sz);
    }
    // Scales and zeros first (rejected before anything is built).
    for (int64_t g = 0; g < G; ++g)
        for (int64_t n = 0; n < N; ++n) {
            const float s = detail::load_scalar(sz_type, sz, (g * N + n) * 2);
            const float z = detail::load_scalar(sz_type, sz, (g * N + n) * 2 + 1);
            if (!detail::scale_ok(s))
                fail_arg(fn, ("scales_and_zeros[" + std::to_string(g) + "][" + std::to_string(n) + "][0]").c_str(),
                         detail::float_str(s), "must be finite and > 0");
            if (!std::isfinite(z))
                fail_arg(fn, ("scales_and_zeros[" + std::to_string(g) + "][" + std::to_string(n) + "][1]").c_str(),
                         detail::float_str(z), "must be finite");
        }
    auto p = detail::woq_alloc(fn, N, K, group_size, WoqWeightType::u4, true);
    // torch's order (aten/src/ATen/native/cpu/int4mm_kernel.cpp, weight_to_int4pack_kernel): blocks
    // of block_n rows, block i at byte i*K*block_n/2, one row of block_n/2 bytes per k. A full
    // block of 64: byte d (< 16) = q[d] | q[d+32] << 4, byte 16+d = q[d+16] | q[d+48] << 4; of 32:
    // byte d = q[d] | q[d+16] << 4; a partial block (nb rows): byte j = q[2j] | q[2j+1] << 4.
    const int64_t nb_count = (N + block_n - 1) / block_n;
    detail::parallel_for(nb_count, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t nb = std::min<int64_t>(block_n, N - i * block_n);
            const uint8_t* src = w + i * K * block_n / 2;
            for (int64_t k = 0; k < K; ++k) {
                const uint8_t* r = src + k * nb / 2;
                for (int64_t j = 0; j < nb / 2; ++j) {
                    int64_t lo = 2 * j, hi = 2 * j + 1;
                    if (nb == block_n) {  // full block: byte j holds rows j and j + block_n / 2
                        lo = j;
                        hi = j + block_n / 2;
                    }
                    const int64_t n_lo = i * block_n + lo, n_hi = i * block_n + hi;
                    detail::woq_set_q(*p, n_lo, k, r[j] & 15);
                    detail::woq_set_q(*p, n_hi, k, r[j] >> 4);
                }
            }
        }
    });
    for (int64_t g = 0; g < G; ++g)
        for (int64_t n = 0; n < N; ++n) {
            const float s = detail::load_scalar(sz_type, sz, (g * N + n) * 2);
            const float z = detail::load_scalar(sz_type, sz, (g * N + n) * 2 + 1);
            const int64_t o = ((n / 16) * p->G + g) * 16 + n % 16;
            p->scales[o] = s;
            p->offsets[o] = z - 8.0f * s;
        }
    return WoqAccess::make(std::move(p));
}

WoqPackedWeight woq_import_gguf(GgufType type, int64_t N, int64_t K, const void* data) {
    constexpr const char* fn = "xk::woq_import_gguf";
    const int tv = static_cast<int>(type);
    if (tv != 2 && tv != 8) fail_arg(fn, "type", std::to_string(tv), "is not a supported GGUF type (Q4_0=2, Q8_0=8)");
    detail::check_nonnegative(fn, "N", N);
    detail::check_nonnegative(fn, "K", K);
    if (K % 32 != 0) fail_arg(fn, "K", std::to_string(K), "must be a multiple of 32 (the GGUF block)");
    detail::checked_mul(fn, "N*K", N, K);
    const bool q4 = type == GgufType::q4_0;
    const int64_t bb = q4 ? 18 : 34, nbk = K / 32;
    if (N > 0 && K > 0) detail::check_not_null(fn, "data", data);
    const auto* D = static_cast<const uint8_t*>(data);
    auto d_at = [&](int64_t n, int64_t b) {
        uint16_t h;
        std::memcpy(&h, D + (n * nbk + b) * bb, 2);
        return f16::to_float(h);
    };
    for (int64_t n = 0; n < N; ++n)
        for (int64_t b = 0; b < nbk; ++b) {
            const float d = d_at(n, b);
            if (!std::isfinite(d))
                fail_arg(fn, ("d (row " + std::to_string(n) + ", block " + std::to_string(b) + ")").c_str(),
                         detail::float_str(d), "must be finite");
        }
    auto p = detail::woq_alloc(fn, N, K, 32, q4 ? WoqWeightType::u4 : WoqWeightType::s8, q4);
    detail::parallel_for(p->nblk, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t n = b0 * 16; n < std::min(N, b1 * 16); ++n)
            for (int64_t b = 0; b < nbk; ++b) {
                const uint8_t* blk = D + (n * nbk + b) * bb + 2;
                const float d = d_at(n, b);
                const int64_t o = ((n / 16) * p->G + b) * 16 + n % 16;
                p->scales[o] = d;
                if (q4) {
                    p->offsets[o] = -8.0f * d;  // exact: fma(q, d, -8d) = d * (q - 8) rounded once
                    for (int j = 0; j < 16; ++j) {
                        detail::woq_set_q(*p, n, b * 32 + j, blk[j] & 15);
                        detail::woq_set_q(*p, n, b * 32 + 16 + j, blk[j] >> 4);
                    }
                } else {
                    for (int j = 0; j < 32; ++j) detail::woq_set_q(*p, n, b * 32 + j, static_cast<int8_t>(blk[j]));
                }
            }
    });
    return WoqAccess::make(std::move(p));
}

void woq_dequantize(const WoqPackedWeight& w, float* out) {
    constexpr const char* fn = "xk::woq_dequantize";
    const detail::WoqPacked* p = WoqAccess::get(w);
    if (!p) fail_arg(fn, "w", "empty", "holds no data");
    if (p->N > 0 && p->K > 0) detail::check_not_null(fn, "out", out);
    for (int64_t n = 0; n < p->N; ++n)
        for (int64_t k = 0; k < p->K; ++k) out[n * p->K + k] = p->w_at(n, k);
}

// ---- plan --------------------------------------------------------------------------------------

WoqPlan::WoqPlan(const WoqDesc& desc) {
    const detail::WoqSpec s = detail::woq_check_desc("xk::WoqPlan", desc);
    const auto sel = detail::woq_registry().get(s);
    desc_ = desc;
    desc_.lda = s.lda, desc_.ldc = s.ldc, desc_.ld_residual = s.ld_residual;
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

WoqPlan::~WoqPlan() = default;

namespace {
void woq_run(const char* fn, const detail::WoqSpec& s, const detail::WoqKernel& k, const WoqDesc& d,
             const WoqArgs& args, const WoqPackedWeight& weight) {
    const detail::WoqPacked* p = WoqAccess::get(weight);
    detail::check_weight(fn, s, weight, p);
    detail::check_args(fn, s, args);
    if (s.M == 0 || s.N == 0) return;
    detail::WoqCall call;
    call.args = args;
    call.alpha = d.alpha;
    call.beta = d.beta;
    call.w = p;
    k.run(call);
}
}  // namespace

void WoqPlan::run(const WoqArgs& args, const WoqPackedWeight& weight) const {
    constexpr const char* fn = "xk::WoqPlan::run";
    if (!kernel_) detail::fail(Status::invalid_argument, std::string(fn) + ": the plan was moved from");
    const detail::WoqSpec s = detail::woq_check_desc(fn, desc_);
    woq_run(fn, s, *kernel_, desc_, args, weight);
}

void woq_gemm(const WoqDesc& desc, const WoqArgs& args, const WoqPackedWeight& weight) {
    constexpr const char* fn = "xk::woq_gemm";
    const detail::WoqSpec s = detail::woq_check_desc(fn, desc);
    detail::check_weight(fn, s, weight, WoqAccess::get(weight));
    detail::check_args(fn, s, args);
    if (s.M == 0 || s.N == 0) return;
    const auto sel = detail::woq_registry().get(s);
    woq_run(fn, s, *sel.kernel, desc, args, weight);
}

}  // namespace xk
