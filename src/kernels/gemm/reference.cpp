// GEMM reference: the specification (see include/xk/gemm.hpp for the math). One row of C at a
// time: acc[n] += op(A)[m,k] * op(B)[k,n] for k = 0, 1, ... (so every element is accumulated in
// increasing k, in fp32 for f32 / bf16 and in s32 for int8), then the epilogue, then the store.
// Rows of C are split over threads; one chunk is at least kMinMacsPerChunk multiply-adds so that
// small problems run inline.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/activation.hpp"
#include "common/huge_alloc.hpp"
#include "common/parallel.hpp"
#include "kernels/gemm/gemm.hpp"

namespace xk::detail {

GemmPacked::GemmPacked(std::string layout_, size_t bytes_)
    : layout(std::move(layout_)), layout_id(gemm_layout_id(layout)), bytes(bytes_) {
    data = alloc_huge(bytes + 64);  // 2 MiB pages from 2 MiB on: decode streams them (common/huge_alloc.hpp)
}

GemmPacked::~GemmPacked() { std::free(data); }

namespace {

constexpr int64_t kMinMacsPerChunk = int64_t(1) << 15;

// Element loads: floating types as float, integer types as int32.
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const bf16* p, int64_t i) { return p[i].to_float(); }
inline int32_t load(const uint8_t* p, int64_t i) { return p[i]; }
inline int32_t load(const int8_t* p, int64_t i) { return p[i]; }

inline float load_as_float(DType t, const void* p, int64_t i) {
    return t == DType::bf16 ? static_cast<const bf16*>(p)[i].to_float() : static_cast<const float*>(p)[i];
}

}  // namespace

// The requantization of include/xk/gemm.hpp: nearbyint(x * inv) (half to even, the default
// rounding mode) + zp, clamped to [lo, hi]; NaN gives lo.
float gemm_requantize(float x, float inv, float zp, float lo, float hi) {
    float q = std::nearbyint(x * inv) + zp;
    if (!(q >= lo)) q = lo;  // below, -Inf, NaN
    if (q > hi) q = hi;
    return q;
}

namespace {

// s32 accumulation wraps modulo 2^32 (no signed-overflow UB).
inline int32_t wrap_add(int32_t a, int32_t b) {
    return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

template <class TA, class TB>
void rows(const GemmSpec& s, const GemmCall& call, int64_t m_begin, int64_t m_end) {
    constexpr bool kInt = std::is_integral_v<TA>;
    using Acc = std::conditional_t<kInt, int32_t, float>;
    const GemmArgs& a = call.args;
    const int64_t N = s.N, K = s.K;

    const TA* A = static_cast<const TA*>(a.A);
    // op(B): the user's B, or the packed copy (contiguous K x N, i.e. Trans::N with ldb = N).
    const TB* B = call.packed_b ? static_cast<const TB*>(call.packed_b->data) : static_cast<const TB*>(a.B);
    const bool bt = call.packed_b ? false : s.trans_b == Trans::T;
    const int64_t ldb = call.packed_b ? N : s.ldb;
    const bool at = s.trans_a == Trans::T;
    const int32_t azp = kInt ? a.a_zero_point : 0, bzp = kInt ? a.b_zero_point : 0;

    // Requantized C (u8 / s8): the inverse scale once, in float.
    const bool requant = s.c_type == DType::u8 || s.c_type == DType::s8;
    const float inv_cs = requant ? 1.0f / a.c_scale[0] : 0.0f;
    const float czp = requant ? static_cast<float>(a.c_zero_point) : 0.0f;

    std::vector<Acc> acc(static_cast<size_t>(N));
    for (int64_t m = m_begin; m < m_end; ++m) {
        // acc = op(A)[m, :] * op(B)
        std::fill(acc.begin(), acc.end(), Acc(0));
        for (int64_t k = 0; k < K; ++k) {
            const auto av = load(A, at ? k * s.lda + m : m * s.lda + k);
            for (int64_t n = 0; n < N; ++n) {
                const auto bv = load(B, bt ? n * ldb + k : k * ldb + n);
                if constexpr (kInt)
                    acc[n] = wrap_add(acc[n], (av - azp) * (bv - bzp));
                else
                    acc[n] = acc[n] + av * bv;
            }
        }

        // Epilogue and store.
        if (s.c_type == DType::s32) {
            int32_t* C = static_cast<int32_t*>(a.C) + m * s.ldc;
            for (int64_t n = 0; n < N; ++n) C[n] = s.beta == BetaKind::zero ? int32_t(acc[n]) : wrap_add(C[n], int32_t(acc[n]));
            continue;
        }
        for (int64_t n = 0; n < N; ++n) {
            float x;
            if constexpr (kInt) {
                const float bs = a.b_scales[s.b_scale_per_channel ? n : 0];
                x = s.a_scale_per_row ? static_cast<float>(acc[n]) * (call.alpha * bs) * call.a_row_scales[m]
                                      : call.alpha * a.a_scale[0] * bs * static_cast<float>(acc[n]);
            } else {
                x = call.alpha * acc[n];
            }
            if (s.beta != BetaKind::zero) x = x + call.beta * load_as_float(s.c_type, a.C, m * s.ldc + n);
            if (s.epilogue.bias) x = x + a.bias[n];
            x = apply_activation(s.epilogue.act, x);
            if (s.epilogue.residual) x = x + load_as_float(s.residual_type, a.residual, m * s.ld_residual + n);
            if (s.c_type == DType::bf16)
                static_cast<bf16*>(a.C)[m * s.ldc + n] = bf16(x);
            else if (s.c_type == DType::u8)
                static_cast<uint8_t*>(a.C)[m * s.ldc + n] = static_cast<uint8_t>(gemm_requantize(x, inv_cs, czp, 0, 255));
            else if (s.c_type == DType::s8)
                static_cast<int8_t*>(a.C)[m * s.ldc + n] = static_cast<int8_t>(gemm_requantize(x, inv_cs, czp, -128, 127));
            else
                static_cast<float*>(a.C)[m * s.ldc + n] = x;
        }
    }
}

using RowsFn = void (*)(const GemmSpec&, const GemmCall&, int64_t, int64_t);

RowsFn rows_fn(const GemmSpec& s) {
    if (s.a_type == DType::f32) return rows<float, float>;
    if (s.a_type == DType::bf16) return rows<bf16, bf16>;
    if (s.a_type == DType::u8) return rows<uint8_t, int8_t>;
    return rows<int8_t, int8_t>;
}

struct RefGemm final : GemmKernel {
    explicit RefGemm(const GemmSpec& s) : spec(s), layout(gemm_reference_packed_layout(s)) {}
    void run(const GemmCall& call) const override { gemm_reference(spec, call); }
    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return gemm_reference_pack_b(spec, B); }
    std::string packed_layout() const override { return layout; }

    GemmSpec spec;
    std::string layout;
};

}  // namespace

void gemm_reference(const GemmSpec& s, const GemmCall& call) {
    if (s.M == 0 || s.N == 0) return;
    const RowsFn f = rows_fn(s);
    const int64_t row_macs = std::max<int64_t>(1, s.N * std::max<int64_t>(s.K, 1));
    const int64_t grain = std::max<int64_t>(1, kMinMacsPerChunk / row_macs);
    parallel_for(s.M, grain, [&](int64_t b, int64_t e) { f(s, call, b, e); });
}

std::string gemm_reference_packed_layout(const GemmSpec& s) {
    return std::string("ref:plain:") + dtype_name(s.b_type) + ":K" + std::to_string(s.K) + ":N" + std::to_string(s.N);
}

std::shared_ptr<const GemmPacked> gemm_reference_pack_b(const GemmSpec& s, const void* B) {
    const size_t es = static_cast<size_t>(dtype_size(s.b_type));
    auto p = std::make_shared<GemmPacked>(gemm_reference_packed_layout(s), static_cast<size_t>(s.K * s.N) * es);
    if (s.K == 0 || s.N == 0) return p;
    const auto* src = static_cast<const unsigned char*>(B);
    auto* dst = static_cast<unsigned char*>(p->data);
    for (int64_t k = 0; k < s.K; ++k) {
        if (s.trans_b == Trans::N) {
            std::memcpy(dst + k * s.N * es, src + k * s.ldb * es, s.N * es);
        } else {
            for (int64_t n = 0; n < s.N; ++n) std::memcpy(dst + (k * s.N + n) * es, src + (n * s.ldb + k) * es, es);
        }
    }
    return p;
}

std::shared_ptr<const GemmKernel> create_gemm_reference(const GemmSpec& s) { return std::make_shared<RefGemm>(s); }

}  // namespace xk::detail
