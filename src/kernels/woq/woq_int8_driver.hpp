// The driver the int8-compute WOQ kernels share (woq_vnni.cpp: AVX512-VNNI; woq_int8_avx2.cpp:
// AVX2 / AVX-VNNI): each row of X quantized to s8 once per call (woq_quantize_row) into the
// kernel's k order, with its group sums; then over the threads by blocks of 16 output channels,
// the rows in balanced passes of up to MaxMB, each pass one block-kernel call whose 16-wide rows
// go through woq_epilogue. No intrinsics here: the block kernels carry their targets.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/parallel.hpp"
#include "kernels/woq/woq.hpp"

namespace xk::detail {

// One block of 16 channels over mb rows of quantized X: out[m * 16 + c].
using WoqI8BlockFn = void (*)(const WoqPacked& w, int64_t block, const int8_t* xq, int64_t ldq, const float* sx,
                              const int32_t* xs, float* out);

// Quantized X: xq[m * ldq + slot(k)], the row scales sx[m], the group sums xs[m * G + g].
struct WoqI8X {
    std::vector<int8_t> q;
    std::vector<float> sx;
    std::vector<int32_t> xs;
    int64_t ldq = 0;
};

// slot(k, u4): where element k of a row goes (a permutation within each 8 k; K is padded to 8
// with zeros).
template <class Slot>
void woq_i8_quantize_x(const WoqSpec& s, const WoqCall& c, WoqI8X& p, Slot slot) {
    const WoqPacked& w = *c.w;
    const int64_t M = s.M, K = s.K;
    p.ldq = (K + 7) / 8 * 8 + 64;  // (+64: rows apart by a non-multiple of 4 KiB)
    p.q.assign(static_cast<size_t>(M * p.ldq), 0);
    p.sx.resize(static_cast<size_t>(M));
    p.xs.assign(static_cast<size_t>(M * w.G), 0);
    const int64_t esz = dtype_size(s.a_type);
    const bool u4 = s.wtype == WoqWeightType::u4;
    woq_prep_for(M, M * K, [&](int64_t m0, int64_t m1) {  // (the weight loop's team size)
        std::vector<int8_t> row(static_cast<size_t>(K));
        for (int64_t m = m0; m < m1; ++m) {
            p.sx[m] = woq_quantize_row(s, static_cast<const char*>(c.args.A) + m * s.lda * esz, row.data());
            int8_t* d = p.q.data() + m * p.ldq;
            for (int64_t k = 0; k < K; ++k) {
                d[slot(k, u4)] = row[k];
                p.xs[m * w.G + k / w.gs] += row[k];
            }
        }
    });
}

// The whole call: pick(mb, u4) gives the block kernel of mb rows (1 <= mb <= MaxMB).
template <int MaxMB, class Slot, class Pick>
void woq_i8_run(const WoqSpec& s, const WoqCall& c, Slot slot, Pick pick) {
    const WoqPacked& w = *c.w;
    // The caller's quantized rows: a reference, so the workers below read this thread's buffer
    // (naming the thread_local inside the lambda would give each worker its own, empty one).
    static thread_local WoqI8X xq_tls;
    WoqI8X& xq = xq_tls;
    woq_i8_quantize_x(s, c, xq, slot);
    const bool u4 = s.wtype == WoqWeightType::u4;
    const int64_t ldq = xq.ldq;
    // Passes of balanced row counts (<= MaxMB), the same for every block.
    const int64_t passes = (s.M + MaxMB - 1) / MaxMB;
    const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, w.q_block_bytes * passes));
    parallel_for(w.nblk, grain, [&](int64_t b0, int64_t b1) {
        alignas(64) float out[MaxMB * 16];
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t n0 = b * 16, n1 = std::min(s.N, n0 + 16);
            int64_t m0 = 0;
            for (int64_t p = 0; p < passes; ++p) {
                const int64_t mb = (s.M - m0 + (passes - p) - 1) / (passes - p);
                const WoqI8BlockFn fn = pick(static_cast<int>(mb), u4);
                fn(w, b, xq.q.data() + m0 * ldq, ldq, xq.sx.data() + m0, xq.xs.data() + m0 * w.G, out);
                woq_epilogue(s, c, out, 16, m0, mb, n0, n1);
                m0 += mb;
            }
        }
    });
}

}  // namespace xk::detail
