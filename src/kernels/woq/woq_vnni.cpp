// WOQ GEMM, WoqCompute::int8 (IPEX's lowp_mode INT8) on AVX512-VNNI: each row of X quantized to s8
// symmetric once per call (woq_quantize_row), then per block of 16 output channels and group, the
// exact integer sums sum_k xq * q with VPDPBUSD (64 multiply-adds an instruction), folded into
// y[m] once per group: y = fma(isum, scale * sx[m], y), then y = fma(offset, sx[m] * sum_k xq, y)
// (the reference's expressions in the same order: bit for bit while |isum| < 2^24).
//
// The packed weights (woq.hpp: a block = K rows of 16 bytes for s8, K/2 rows of 16 bytes of nibble
// pairs for u4) are read 64 bytes = 4 rows at a time; one VPERMB gathers byte c of each row into
// dword c (channel c), so no repacking is needed:
//   s8: dword c = q[c][k .. k+3]; VPDPBUSD's unsigned operand is q ^ 0x80 = q + 128, so the group's
//       sum is acc - 128 * sum_k xq (the row's group sums of xq, computed with the quantization);
//   u4: dword c = the 4 bytes of pairs k .. k+7; AND 0x0F gives q at k, k+2, k+4, k+6 and
//       (>> 4) AND 0x0F those at k+1, k+3, k+5, k+7 — the quantized X is stored in that order
//       (per 8 k: the even ones, then the odd ones), so each dword of X matches its weights.
// K is padded to 8 with zero activations: the weight bytes read past K (within the packed buffer,
// whose q part is rounded up to 64 bytes) multiply zeros. Rows of X in passes of up to 16 (the
// accumulators: up to 16 int32 vectors, the f32 sums in registers up to 8 rows, in L1 above); threads split the blocks of 16 channels
// (woq_int8_driver.hpp, shared with the AVX2 kernels).
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>

#include "kernels/woq/woq_int8_driver.hpp"

#define XK_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma")))

namespace xk::detail {

bool woq_vnni_supported() {
    static const bool ok = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") &&
                           __builtin_cpu_supports("avx512bw");
    return ok;
}

namespace {

constexpr int kMaxMB = 16;  // rows a pass: up to 8 with y in registers, 9..16 with y in L1

// Slot of k in a quantized row: s8 in order; u4 within each 8 k the even k first (dword 0), then
// the odd (dword 1).
struct Slot {
    int64_t operator()(int64_t k, bool u4) const { return u4 ? (k & ~int64_t(7)) + ((k & 1) ? 4 : 0) + ((k & 7) >> 1) : k; }
};

// One block of 16 channels, MB rows: out[m * 16 + c].
template <bool U4, int MB>
XK_VNNI_TARGET void block(const WoqPacked& w, int64_t b, const int8_t* xq, int64_t ldq, const float* sx,
                          const int32_t* xs, float* out) {
    const uint8_t* q = w.qb(b);
    const float* sc = w.sb(b);
    const float* of = w.ob(b);
    const int64_t G = w.G, gs = w.gs, K = w.K;
    // vpermb index: dword c = bytes c, 16 + c, 32 + c, 48 + c
    alignas(64) uint8_t idx_b[64];
    for (int c = 0; c < 16; ++c)
        for (int r = 0; r < 4; ++r) idx_b[c * 4 + r] = static_cast<uint8_t>(r * 16 + c);
    const __m512i idx = _mm512_load_si512(idx_b);
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
    // y in registers up to 8 rows; above, in L1 (the 16 int32 accumulators take the registers)
    constexpr bool kYMem = MB > 8;
    __m512 y[kYMem ? 1 : MB];
    alignas(64) float ym[kYMem ? MB * 16 : 16];
    for (int m = 0; m < (kYMem ? 1 : MB); ++m) y[m] = _mm512_setzero_ps();
    if constexpr (kYMem) std::memset(ym, 0, sizeof ym);
    for (int64_t g = 0; g < G; ++g) {
        __m512i acc[MB];
        for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_si512();
        const int64_t k0 = g * gs, k1 = std::min(K, k0 + gs);
        if constexpr (U4) {
            for (int64_t k = k0; k < k1; k += 8) {
                const __m512i raw = _mm512_loadu_si512(q + (k / 2) * 16);
                const __m512i t = _mm512_permutexvar_epi8(idx, raw);
                const __m512i wl = _mm512_and_si512(t, lo4);
                const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(t, 4), lo4);
                for (int m = 0; m < MB; ++m) {
                    int32_t xl, xh;
                    std::memcpy(&xl, xq + m * ldq + k, 4);
                    std::memcpy(&xh, xq + m * ldq + k + 4, 4);
                    acc[m] = _mm512_dpbusd_epi32(acc[m], wl, _mm512_set1_epi32(xl));
                    acc[m] = _mm512_dpbusd_epi32(acc[m], wh, _mm512_set1_epi32(xh));
                }
            }
        } else {
            for (int64_t k = k0; k < k1; k += 4) {
                const __m512i raw = _mm512_loadu_si512(q + k * 16);
                const __m512i t = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, raw), x80);
                for (int m = 0; m < MB; ++m) {
                    int32_t xv;
                    std::memcpy(&xv, xq + m * ldq + k, 4);
                    acc[m] = _mm512_dpbusd_epi32(acc[m], t, _mm512_set1_epi32(xv));
                }
            }
        }
        const __m512 s = _mm512_loadu_ps(sc + g * 16);
        const __m512 o = of ? _mm512_loadu_ps(of + g * 16) : _mm512_setzero_ps();
        for (int m = 0; m < MB; ++m) {
            const int32_t xsum = xs[m * G + g];
            __m512i a = acc[m];
            if constexpr (!U4) a = _mm512_sub_epi32(a, _mm512_set1_epi32(128 * xsum));
            __m512 ymv = kYMem ? _mm512_load_ps(ym + m * 16) : y[kYMem ? 0 : m];
            ymv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(s, _mm512_set1_ps(sx[m])), ymv);
            if (of) ymv = _mm512_fmadd_ps(o, _mm512_set1_ps(sx[m] * static_cast<float>(xsum)), ymv);
            if constexpr (kYMem) _mm512_store_ps(ym + m * 16, ymv);
            else y[m] = ymv;
        }
    }
    for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, kYMem ? _mm512_load_ps(ym + m * 16) : y[kYMem ? 0 : m]);
}

using BlockFn = WoqI8BlockFn;

template <bool U4>
BlockFn pick(int mb) {
    switch (mb) {
        case 1: return &block<U4, 1>;
        case 2: return &block<U4, 2>;
        case 3: return &block<U4, 3>;
        case 4: return &block<U4, 4>;
        case 5: return &block<U4, 5>;
        case 6: return &block<U4, 6>;
        case 7: return &block<U4, 7>;
        case 8: return &block<U4, 8>;
        case 9: return &block<U4, 9>;
        case 10: return &block<U4, 10>;
        case 11: return &block<U4, 11>;
        case 12: return &block<U4, 12>;
        case 13: return &block<U4, 13>;
        case 14: return &block<U4, 14>;
        case 15: return &block<U4, 15>;
        default: return &block<U4, 16>;
    }
}

class WoqVnni final : public WoqKernel {
public:
    explicit WoqVnni(const WoqSpec& s) : s_(s) {}

    void run(const WoqCall& c) const override {
        woq_i8_run<kMaxMB>(s_, c, Slot{}, [](int mb, bool u4) { return u4 ? pick<true>(mb) : pick<false>(mb); });
    }

private:
    WoqSpec s_;
};

}  // namespace

std::shared_ptr<const WoqKernel> create_woq_vnni(const WoqSpec& s) { return std::make_shared<WoqVnni>(s); }

}  // namespace xk::detail
