// ROIAlign forward, vectorised over channels: the "avx512:roi_align" / "avx2:roi_align" entries.
//
// Work item = one row of pooled cells of one box (box k, ph): the box's sampling geometry is
// computed once per item (roi_align_geometry: torchvision's f32 arithmetic, samples outside the
// map left out), each cell's taps (sample (iy, ix): its 4 source pixels and the bilinear weights
// hy*hx, hy*lx, ly*hx, ly*lx) listed, and then, on NHWC data, each cell is a sum over its taps of
// 4 channel vectors (contiguous C floats / bf16) times the weights, divided by the sample count.
// Channels go 64 (AVX-512) / 32 (AVX2) at a time with the accumulators in registers; tails masked
// (AVX-512) or 8-wide + scalar (AVX2).
// NCHW src: when the box samples read the map more than ~4 times over, the map is transposed to
// NHWC once per call (and the result back); otherwise each channel plane is sampled directly
// (scalar, over the same tap lists).
// GCC 12 reports false "may be used uninitialized" inside the AVX-512 intrinsic headers (masked loads).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 inside _mm512_shuffle_f32x4 / _mm512_unpacklo_ps
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/parallel.hpp"
#include "kernels/vision/vision.hpp"

namespace xk::detail {
namespace {

struct Tap {
    int64_t o1, o2, o3, o4;  // element offsets of the 4 pixels (times C for NHWC, plane offsets for NCHW)
    float w1, w2, w3, w4;
};

// Channel loop of one cell on NHWC data: out[c] = sum over taps of w . px[c], / count.
using CellFn = void (*)(const void* img, int64_t C, bool bf, const Tap* taps, int64_t ntaps, float count, void* out);

inline float ldf(const void* p, bool bf, int64_t i) {
    return bf ? bf16::to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}
inline void stf(void* p, bool bf, int64_t i, float v) {
    if (bf) static_cast<uint16_t*>(p)[i] = bf16::from_float(v);
    else static_cast<float*>(p)[i] = v;
}

// ---- AVX-512 -------------------------------------------------------------------------------------
#define XK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

XK_AVX512 inline __m512 ld16(const void* p, bool bf, int64_t i) {
    if (bf)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i))),
            16));
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
}
XK_AVX512 inline __m512 ld16m(const void* p, bool bf, int64_t i, __mmask16 m) {
    if (bf)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i)), 16));
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
}
// Round to nearest even, NaN kept quiet (bf16::from_float).
XK_AVX512 inline __m256i to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}
XK_AVX512 inline void st16(void* p, bool bf, int64_t i, __m512 v) {
    if (bf) _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i), to_bf16(v));
    else _mm512_storeu_ps(static_cast<float*>(p) + i, v);
}
XK_AVX512 inline void st16m(void* p, bool bf, int64_t i, __m512 v, __mmask16 m) {
    if (bf) _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p) + i, m, to_bf16(v));
    else _mm512_mask_storeu_ps(static_cast<float*>(p) + i, m, v);
}

template <int NV>
XK_AVX512 inline void cell_block512(const void* img, bool bf, const Tap* taps, int64_t ntaps, __m512 vcount,
                                    int64_t c0, void* out) {
    __m512 acc[NV];
    for (int j = 0; j < NV; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t t = 0; t < ntaps; ++t) {
        const Tap& tp = taps[t];
        const __m512 w1 = _mm512_set1_ps(tp.w1), w2 = _mm512_set1_ps(tp.w2), w3 = _mm512_set1_ps(tp.w3),
                     w4 = _mm512_set1_ps(tp.w4);
        for (int j = 0; j < NV; ++j) {
            const int64_t c = c0 + 16 * j;
            __m512 s = _mm512_mul_ps(w1, ld16(img, bf, tp.o1 + c));
            s = _mm512_fmadd_ps(w2, ld16(img, bf, tp.o2 + c), s);
            s = _mm512_fmadd_ps(w3, ld16(img, bf, tp.o3 + c), s);
            s = _mm512_fmadd_ps(w4, ld16(img, bf, tp.o4 + c), s);
            acc[j] = _mm512_add_ps(acc[j], s);
        }
    }
    for (int j = 0; j < NV; ++j) st16(out, bf, c0 + 16 * j, _mm512_div_ps(acc[j], vcount));
}

XK_AVX512 void cell_avx512(const void* img, int64_t C, bool bf, const Tap* taps, int64_t ntaps, float count,
                           void* out) {
    const __m512 vcount = _mm512_set1_ps(count);
    int64_t c0 = 0;
    for (; c0 + 64 <= C; c0 += 64) cell_block512<4>(img, bf, taps, ntaps, vcount, c0, out);
    for (; c0 + 16 <= C; c0 += 16) cell_block512<1>(img, bf, taps, ntaps, vcount, c0, out);
    if (c0 < C) {
        const __mmask16 m = static_cast<__mmask16>((1u << (C - c0)) - 1u);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t t = 0; t < ntaps; ++t) {
            const Tap& tp = taps[t];
            __m512 s = _mm512_mul_ps(_mm512_set1_ps(tp.w1), ld16m(img, bf, tp.o1 + c0, m));
            s = _mm512_fmadd_ps(_mm512_set1_ps(tp.w2), ld16m(img, bf, tp.o2 + c0, m), s);
            s = _mm512_fmadd_ps(_mm512_set1_ps(tp.w3), ld16m(img, bf, tp.o3 + c0, m), s);
            s = _mm512_fmadd_ps(_mm512_set1_ps(tp.w4), ld16m(img, bf, tp.o4 + c0, m), s);
            acc = _mm512_add_ps(acc, s);
        }
        st16m(out, bf, c0, _mm512_div_ps(acc, vcount), m);
    }
}

// ---- AVX2 ----------------------------------------------------------------------------------------
#define XK_AVX2 __attribute__((target("avx2,fma")))

XK_AVX2 inline __m256 ld8(const void* p, bool bf, int64_t i) {
    if (bf)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i))),
            16));
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
}
XK_AVX2 inline void st8(void* p, bool bf, int64_t i, __m256 v) {
    if (bf) {
        const __m256i u = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
        const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
        r = _mm256_blendv_epi8(r, q, nan);
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(p) + i), packed);
    } else {
        _mm256_storeu_ps(static_cast<float*>(p) + i, v);
    }
}

template <int NV>
XK_AVX2 inline void cell_block256(const void* img, bool bf, const Tap* taps, int64_t ntaps, __m256 vcount, int64_t c0,
                                  void* out) {
    __m256 acc[NV];
    for (int j = 0; j < NV; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t t = 0; t < ntaps; ++t) {
        const Tap& tp = taps[t];
        const __m256 w1 = _mm256_set1_ps(tp.w1), w2 = _mm256_set1_ps(tp.w2), w3 = _mm256_set1_ps(tp.w3),
                     w4 = _mm256_set1_ps(tp.w4);
        for (int j = 0; j < NV; ++j) {
            const int64_t c = c0 + 8 * j;
            __m256 s = _mm256_mul_ps(w1, ld8(img, bf, tp.o1 + c));
            s = _mm256_fmadd_ps(w2, ld8(img, bf, tp.o2 + c), s);
            s = _mm256_fmadd_ps(w3, ld8(img, bf, tp.o3 + c), s);
            s = _mm256_fmadd_ps(w4, ld8(img, bf, tp.o4 + c), s);
            acc[j] = _mm256_add_ps(acc[j], s);
        }
    }
    for (int j = 0; j < NV; ++j) st8(out, bf, c0 + 8 * j, _mm256_div_ps(acc[j], vcount));
}

XK_AVX2 void cell_avx2(const void* img, int64_t C, bool bf, const Tap* taps, int64_t ntaps, float count, void* out) {
    const __m256 vcount = _mm256_set1_ps(count);
    int64_t c0 = 0;
    for (; c0 + 32 <= C; c0 += 32) cell_block256<4>(img, bf, taps, ntaps, vcount, c0, out);
    for (; c0 + 8 <= C; c0 += 8) cell_block256<1>(img, bf, taps, ntaps, vcount, c0, out);
    for (; c0 < C; ++c0) {
        float acc = 0.0f;
        for (int64_t t = 0; t < ntaps; ++t) {
            const Tap& tp = taps[t];
            acc += tp.w1 * ldf(img, bf, tp.o1 + c0) + tp.w2 * ldf(img, bf, tp.o2 + c0) +
                   tp.w3 * ldf(img, bf, tp.o3 + c0) + tp.w4 * ldf(img, bf, tp.o4 + c0);
        }
        stf(out, bf, c0, acc / count);
    }
}

// ---- driver --------------------------------------------------------------------------------------

struct Scratch {
    std::unique_ptr<char[]> p;
    size_t cap = 0;
    char* get(size_t n) {
        if (n > cap) {
            p.reset(new char[n]);
            cap = n;
        }
        return p.get();
    }
};

// Taps of cell (row of ys [ya, yb), column of xs [xa, xb)); offsets scaled by `scale` (C for NHWC
// pixels, 1 for plane offsets) over a row pitch of W.
void cell_taps(const RoiAxis& ys, int64_t py, const RoiAxis& xs, int64_t px, int64_t W, int64_t scale,
               std::vector<Tap>& taps) {
    taps.clear();
    for (int32_t a = ys.begin[py]; a < ys.begin[py + 1]; ++a) {
        const RoiAxisSample& y = ys.s[a];
        for (int32_t b = xs.begin[px]; b < xs.begin[px + 1]; ++b) {
            const RoiAxisSample& x = xs.s[b];
            Tap t;
            t.o1 = (int64_t{y.i0} * W + x.i0) * scale;
            t.o2 = (int64_t{y.i0} * W + x.i1) * scale;
            t.o3 = (int64_t{y.i1} * W + x.i0) * scale;
            t.o4 = (int64_t{y.i1} * W + x.i1) * scale;
            t.w1 = y.h * x.h;
            t.w2 = y.h * x.l;
            t.w3 = y.l * x.h;
            t.w4 = y.l * x.l;
            taps.push_back(t);
        }
    }
}

// NHWC: src [N][H][W][C] -> dst [K][PH][PW][C].
void run_nhwc(const RoiAlignDesc& d, const void* src, const float* boxes, void* dst, CellFn cell) {
    const bool bf = d.dtype == DType::bf16;
    const int64_t es = bf ? 2 : 4, C = d.c, PH = d.pooled_h, PW = d.pooled_w;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C * PW));
    parallel_for(d.num_rois * PH, grain, [&](int64_t i0, int64_t i1) {
        RoiAxis ys, xs;
        std::vector<Tap> taps;
        for (int64_t it = i0; it < i1; ++it) {
            const int64_t k = it / PH, ph = it % PH;
            const RoiGeometry g = roi_align_geometry(d, boxes + k * 5, ph, ph + 1, ys, xs);
            const char* img = static_cast<const char*>(src) + g.batch * d.h * d.w * C * es;
            char* out = static_cast<char*>(dst) + ((k * PH + ph) * PW) * C * es;
            for (int64_t pw = 0; pw < PW; ++pw) {
                cell_taps(ys, 0, xs, pw, d.w, C, taps);
                cell(img, C, bf, taps.data(), static_cast<int64_t>(taps.size()), g.count, out + pw * C * es);
            }
        }
    });
}

// NCHW sampled plane by plane (few samples per map element).
void run_nchw_direct(const RoiAlignDesc& d, const void* src, const float* boxes, void* dst) {
    const bool bf = d.dtype == DType::bf16;
    const int64_t C = d.c, PH = d.pooled_h, PW = d.pooled_w, HW = d.h * d.w;
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, C * PW));
    parallel_for(d.num_rois * PH, grain, [&](int64_t i0, int64_t i1) {
        RoiAxis ys, xs;
        std::vector<Tap> taps;
        std::vector<int32_t> tb;
        for (int64_t it = i0; it < i1; ++it) {
            const int64_t k = it / PH, ph = it % PH;
            const RoiGeometry g = roi_align_geometry(d, boxes + k * 5, ph, ph + 1, ys, xs);
            // All cells' taps of the row, cell pw owning taps [tb[pw], tb[pw + 1]).
            std::vector<Tap> row;
            tb.assign(1, 0);
            for (int64_t pw = 0; pw < PW; ++pw) {
                cell_taps(ys, 0, xs, pw, d.w, 1, taps);
                row.insert(row.end(), taps.begin(), taps.end());
                tb.push_back(static_cast<int32_t>(row.size()));
            }
            for (int64_t c = 0; c < C; ++c) {
                const int64_t plane = (g.batch * C + c) * HW;
                const int64_t obase = ((k * C + c) * PH + ph) * PW;
                for (int64_t pw = 0; pw < PW; ++pw) {
                    float acc = 0.0f;
                    for (int32_t t = tb[pw]; t < tb[pw + 1]; ++t) {
                        const Tap& tp = row[t];
                        acc += tp.w1 * ldf(src, bf, plane + tp.o1) + tp.w2 * ldf(src, bf, plane + tp.o2) +
                               tp.w3 * ldf(src, bf, plane + tp.o3) + tp.w4 * ldf(src, bf, plane + tp.o4);
                    }
                    stf(dst, bf, obase + pw, acc / g.count);
                }
            }
        }
    });
}

// [B][R][S] -> [B][S][R] of es-byte elements, blocked.
void transpose(const char* in, char* out, int64_t B, int64_t R, int64_t S, int64_t es) {
    constexpr int64_t T = 32;
    const int64_t rb = (R + T - 1) / T;
    parallel_for(B * rb, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t it = i0; it < i1; ++it) {
            const int64_t b = it / rb, r0 = (it % rb) * T, r1 = std::min(R, r0 + T);
            const char* ib = in + b * R * S * es;
            char* ob = out + b * R * S * es;
            for (int64_t s0 = 0; s0 < S; s0 += T) {
                const int64_t s1 = std::min(S, s0 + T);
                if (es == 4) {
                    for (int64_t r = r0; r < r1; ++r)
                        for (int64_t s = s0; s < s1; ++s)
                            reinterpret_cast<float*>(ob)[s * R + r] = reinterpret_cast<const float*>(ib)[r * S + s];
                } else {
                    for (int64_t r = r0; r < r1; ++r)
                        for (int64_t s = s0; s < s1; ++s)
                            reinterpret_cast<uint16_t*>(ob)[s * R + r] = reinterpret_cast<const uint16_t*>(ib)[r * S + s];
                }
            }
        }
    });
}

// The same for 4-byte elements with AVX-512: 16 x 16 blocks transposed in registers (unpack /
// shuffle network), all of R per 16 columns of S so each output row is written in one sweep;
// scalar for the edges. 2.2x the blocked scalar loop's rate for the Mask R-CNN map (256 x 54400
// f32: 17.5 vs 38 ms CPU time on Zen 4).
XK_AVX512 inline void transpose16x16(const float* in, int64_t ld_in, float* out, int64_t ld_out) {
    __m512 v[16], t[16];
    for (int i = 0; i < 16; ++i) v[i] = _mm512_loadu_ps(in + i * ld_in);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        v[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        v[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        v[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 8; ++i) {
        const int a = (i / 4) * 8 + (i % 4);
        t[a] = _mm512_shuffle_f32x4(v[a], v[a + 4], 0x88);
        t[a + 4] = _mm512_shuffle_f32x4(v[a], v[a + 4], 0xDD);
    }
    for (int i = 0; i < 8; ++i) {
        v[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        v[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
    for (int k = 0; k < 16; ++k) _mm512_storeu_ps(out + k * ld_out, v[k]);
}

XK_AVX512 void transpose_f32_avx512(const float* in, float* out, int64_t B, int64_t R, int64_t S) {
    const int64_t sb = (S + 15) / 16, R16 = R / 16 * 16;
    parallel_for(B * sb, 8, [&](int64_t i0, int64_t i1) {
        for (int64_t it = i0; it < i1; ++it) {
            const int64_t b = it / sb, s0 = (it % sb) * 16, s1 = std::min(S, s0 + 16);
            const float* ib = in + b * R * S;
            float* ob = out + b * R * S;
            if (s1 - s0 == 16)
                for (int64_t r0 = 0; r0 < R16; r0 += 16) transpose16x16(ib + r0 * S + s0, S, ob + s0 * R + r0, R);
            for (int64_t s = s0; s < s1; ++s)  // what the 16 x 16 blocks left: the R tail, the S tail
                for (int64_t r = s1 - s0 == 16 ? R16 : 0; r < R; ++r) ob[s * R + r] = ib[r * S + s];
        }
    });
}

// Taps the boxes read in total (an estimate from the box sizes, clamped to the map).
double estimate_taps(const RoiAlignDesc& d, const float* boxes) {
    double total = 0.0;
    for (int64_t k = 0; k < d.num_rois; ++k) {
        const float* b = boxes + k * 5;
        auto samples = [&](float lo, float hi, int64_t pooled, int64_t extent) {
            const double roi = std::max(1.0, static_cast<double>(hi) - static_cast<double>(lo));
            const double g = d.sampling_ratio > 0 ? static_cast<double>(d.sampling_ratio) : std::ceil(roi / pooled);
            const double visible = std::min(roi, static_cast<double>(extent) + 2.0) / roi;
            return static_cast<double>(pooled) * g * visible;
        };
        total += samples(b[1] * d.spatial_scale, b[3] * d.spatial_scale, d.pooled_w, d.w) *
                 samples(b[2] * d.spatial_scale, b[4] * d.spatial_scale, d.pooled_h, d.h);
    }
    return total;
}

class RoiAlignSimd final : public RoiAlignKernel {
public:
    RoiAlignSimd(CellFn cell, bool avx512) : cell_(cell), avx512_(avx512) {}
    void run(const RoiAlignProblem& p, const RoiAlignArgs& a) const override {
        const RoiAlignDesc& d = p.d;
        if (d.layout == ConvLayout::nhwc) {
            run_nhwc(d, a.src, a.boxes, a.dst, cell_);
            return;
        }
        // NCHW: transpose when the taps (4 reads each, per channel) outweigh ~4 passes over the map.
        const double map_px = static_cast<double>(d.n) * static_cast<double>(d.h) * static_cast<double>(d.w);
        if (estimate_taps(d, a.boxes) < map_px) {
            run_nchw_direct(d, a.src, a.boxes, a.dst);
            return;
        }
        const int64_t es = dtype_size(d.dtype);
        const size_t src_bytes = static_cast<size_t>(d.n * d.c * d.h * d.w * es);
        const size_t dst_bytes = static_cast<size_t>(d.num_rois * d.c * d.pooled_h * d.pooled_w * es);
        thread_local Scratch s1, s2;
        char* t_src = s1.get(src_bytes);
        char* t_dst = s2.get(dst_bytes);
        auto tr = [&](const char* in, char* out, int64_t B, int64_t R, int64_t S) {
            if (avx512_ && es == 4)
                transpose_f32_avx512(reinterpret_cast<const float*>(in), reinterpret_cast<float*>(out), B, R, S);
            else
                transpose(in, out, B, R, S, es);
        };
        tr(static_cast<const char*>(a.src), t_src, d.n, d.c, d.h * d.w);
        run_nhwc(d, t_src, a.boxes, t_dst, cell_);
        tr(t_dst, static_cast<char*>(a.dst), d.num_rois, d.pooled_h * d.pooled_w, d.c);
    }

private:
    CellFn cell_;
    bool avx512_;  // f32 transposes in 16 x 16 register blocks
};

}  // namespace

std::shared_ptr<const RoiAlignKernel> create_roi_align_avx2(const RoiAlignProblem&) {
    return std::make_shared<RoiAlignSimd>(cell_avx2, false);
}
std::shared_ptr<const RoiAlignKernel> create_roi_align_avx512(const RoiAlignProblem&) {
    return std::make_shared<RoiAlignSimd>(cell_avx512, true);
}

}  // namespace xk::detail
