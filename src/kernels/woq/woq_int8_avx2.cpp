// WOQ GEMM, WoqCompute::int8 on AVX2 (ymm): the activations quantized per row to s8 once per call
// (woq_quantize_row), exact integer sums per block of 16 output channels and group, folded into
// y[m] once per group with the reference's expressions in its order (bit for bit while
// |isum| < 2^24, as the AVX512-VNNI kernel, woq_vnni.cpp):
//   y = fma(float(isum), scale * sx[m], y);  y = fma(offset, sx[m] * float(sum_k xq), y)
//
// The packed weights (woq.hpp: a block = K rows of 16 bytes for s8, K/2 rows of 16 bytes of nibble
// pairs for u4) are read 64 bytes = 4 rows at a time and transposed in registers so that dword c
// holds 4 bytes of one channel: VPERMQ 0xD8 (rows r, r+1 -> lane 0: bytes 0-7 of both, lane 1:
// bytes 8-15), then VPUNPCK{L,H}BW and VPUNPCK{L,H}WD. The two results hold channels {0-3, 8-11}
// and {4-7, 12-15}; the bytes of a dword are rows (r, r+2, r+1, r+3), and the quantized X is
// stored in that order (s8: per 4 k: x0 x2 x1 x3; u4: per 8 k: the low nibbles, k = 0 4 2 6, then
// the high ones, 1 5 3 7). The integer sums are put back in channel order once per group.
//   avx2_vnni (AVX-VNNI, VEX VPDPBUSD ymm): s8 as q ^ 0x80 (unsigned) with the group's
//     -128 * sum_k xq; u4 as the nibbles.
//   avx2 (no VNNI): s8 by VPMADDWD on the bytes sign-extended to 16 bits (bytes 0 / 2 and 1 / 3 of
//     each dword, the same split of X); u4 by VPMADDUBSW (nibble * xq pairs: |sum| <= 3810, no
//     saturation) then VPMADDWD by ones.
// K is padded to 8 with zero activations (the weight bytes read past K lie in the packed buffer,
// whose q part is rounded up to 64 bytes). Rows of X in passes of up to 4; threads split the blocks
// (woq_int8_driver.hpp, shared with the AVX512-VNNI kernel).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/woq/woq_int8_driver.hpp"
#include "xk/isa.hpp"

#define XK_I8_AVX2 __attribute__((target("avx2,fma")))
#define XK_I8_AVXVNNI __attribute__((target("avx2,fma,avxvnni")))

namespace xk::detail {

bool woq_avx_vnni_supported() {
    static const bool ok = cpu_info().avx_vnni && cpu_info().avx2 && cpu_info().os_ymm;
    return ok;
}

namespace {

constexpr int kMaxMB = 4;

// Slot of k in a quantized row, within its 4 (s8: slots hold k = 0 2 1 3) or 8 (u4: k = 0 4 2 6 1 5
// 3 7) elements.
struct Slot {
    int64_t operator()(int64_t k, bool u4) const {
        static constexpr int kPosU4[8] = {0, 4, 2, 6, 1, 5, 3, 7};
        static constexpr int kPosS8[4] = {0, 2, 1, 3};
        return u4 ? (k & ~int64_t(7)) + kPosU4[k & 7] : (k & ~int64_t(3)) + kPosS8[k & 3];
    }
};

// 64 bytes (rows r..r+3 of 16 channels) -> t0: channels {0-3, 8-11}, t1: {4-7, 12-15}; dword
// bytes = rows (r, r+2, r+1, r+3).
#define XK_WOQ_TRANSPOSE(p, t0, t1)                                                                         \
    do {                                                                                                    \
        const __m256i a_ = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 0xD8); \
        const __m256i b_ = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p) + 1), 0xD8); \
        const __m256i l_ = _mm256_unpacklo_epi8(a_, b_); /* (r, r+2) pairs, channels 0-7 | 8-15 */        \
        const __m256i h_ = _mm256_unpackhi_epi8(a_, b_); /* (r+1, r+3) */                                 \
        t0 = _mm256_unpacklo_epi16(l_, h_);                                                                 \
        t1 = _mm256_unpackhi_epi16(l_, h_);                                                                 \
    } while (0)

// The dot products of one weight dword vector with the broadcast X dword.
template <bool VNNI, bool U4>
struct Dot;

template <bool U4>
struct Dot<true, U4> {
    XK_I8_AVXVNNI static inline __m256i w(__m256i t) {
        return U4 ? t : _mm256_xor_si256(t, _mm256_set1_epi8(static_cast<char>(0x80)));
    }
    XK_I8_AVXVNNI static inline __m256i acc(__m256i a, __m256i wv, __m256i x) { return _mm256_dpbusd_avx_epi32(a, wv, x); }
};
template <>
struct Dot<false, true> {
    XK_I8_AVX2 static inline __m256i w(__m256i t) { return t; }
    XK_I8_AVX2 static inline __m256i acc(__m256i a, __m256i wv, __m256i x) {
        return _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(wv, x), _mm256_set1_epi16(1)));
    }
};
template <>
struct Dot<false, false> {
    XK_I8_AVX2 static inline __m256i w(__m256i t) { return t; }
    // s8 x s8: bytes 0 / 2 and 1 / 3 of each dword sign-extended to 16 bits
    XK_I8_AVX2 static inline __m256i acc(__m256i a, __m256i wv, __m256i x) {
        const __m256i wl = _mm256_srai_epi16(_mm256_slli_epi16(wv, 8), 8), wh = _mm256_srai_epi16(wv, 8);
        const __m256i xl = _mm256_srai_epi16(_mm256_slli_epi16(x, 8), 8), xh = _mm256_srai_epi16(x, 8);
        return _mm256_add_epi32(a, _mm256_add_epi32(_mm256_madd_epi16(wl, xl), _mm256_madd_epi16(wh, xh)));
    }
};

#define XK_I8_ATTR XK_I8_AVXVNNI
#define XK_I8_NAME block_vnni
#define XK_I8_VNNI true
#include "kernels/woq/woq_int8_block.inc"
#undef XK_I8_ATTR
#undef XK_I8_NAME
#undef XK_I8_VNNI
#define XK_I8_ATTR XK_I8_AVX2
#define XK_I8_NAME block_avx2
#define XK_I8_VNNI false
#include "kernels/woq/woq_int8_block.inc"
#undef XK_I8_ATTR
#undef XK_I8_NAME
#undef XK_I8_VNNI

using BlockFn = WoqI8BlockFn;

template <bool VNNI, bool U4>
BlockFn pick(int mb) {
    if constexpr (VNNI) {
        switch (mb) {
            case 1: return &block_vnni<U4, 1>;
            case 2: return &block_vnni<U4, 2>;
            case 3: return &block_vnni<U4, 3>;
            default: return &block_vnni<U4, 4>;
        }
    } else {
        switch (mb) {
            case 1: return &block_avx2<U4, 1>;
            case 2: return &block_avx2<U4, 2>;
            case 3: return &block_avx2<U4, 3>;
            default: return &block_avx2<U4, 4>;
        }
    }
}

class WoqInt8Avx2 final : public WoqKernel {
public:
    WoqInt8Avx2(const WoqSpec& s, bool vnni) : s_(s), vnni_(vnni) {}

    void run(const WoqCall& c) const override {
        if (vnni_)
            woq_i8_run<kMaxMB>(s_, c, Slot{}, [](int mb, bool u4) { return u4 ? pick<true, true>(mb) : pick<true, false>(mb); });
        else
            woq_i8_run<kMaxMB>(s_, c, Slot{}, [](int mb, bool u4) { return u4 ? pick<false, true>(mb) : pick<false, false>(mb); });
    }

private:
    WoqSpec s_;
    bool vnni_;
};

}  // namespace

std::shared_ptr<const WoqKernel> create_woq_int8_avx_vnni(const WoqSpec& s) { return std::make_shared<WoqInt8Avx2>(s, true); }
std::shared_ptr<const WoqKernel> create_woq_int8_avx2(const WoqSpec& s) { return std::make_shared<WoqInt8Avx2>(s, false); }

}  // namespace xk::detail
