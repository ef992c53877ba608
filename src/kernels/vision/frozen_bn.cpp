// FrozenBatchNorm2d with a fused activation: the "avx512:frozen_bn" / "avx2:frozen_bn" entries.
//
// dst = act(src * scale[c] + shift[c]) with scale / shift computed once per call
// (frozen_bn_scale_shift). Rows: an NCHW plane (one channel, H*W elements: scale and shift
// broadcast) or an NHWC pixel (C elements: scale and shift vectors). The row loops are plain C++
// compiled for AVX2 + FMA and for AVX-512 (bf16 widening / round-to-nearest-even as integer ops,
// which vectorise); none / relu stay in the vector loop, the other activations run on a chunk of
// the row in f32 (apply_activation) before the store.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/activation.hpp"
#include "common/parallel.hpp"
#include "kernels/vision/vision.hpp"

namespace xk::detail {
namespace {

inline float bf2f(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint16_t f2bf(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : r);
}

constexpr int64_t kChunk = 256;

// One row of L elements; BC: scale / shift are one value (NCHW plane) or L values (NHWC pixel).
template <bool BC, class S, class D>
__attribute__((always_inline)) inline void row(const S* src, D* dst, int64_t L, const float* sc, const float* sh,
                                               Activation act) {
    float buf[kChunk];
    for (int64_t i0 = 0; i0 < L; i0 += kChunk) {
        const int64_t n = std::min(kChunk, L - i0);
        for (int64_t i = 0; i < n; ++i) {
            float x;
            if constexpr (std::is_same_v<S, uint16_t>) x = bf2f(src[i0 + i]);
            else x = src[i0 + i];
            const float s = BC ? sc[0] : sc[i0 + i], b = BC ? sh[0] : sh[i0 + i];
            float v = x * s + b;
            if (act == Activation::relu) v = v > 0.0f ? v : 0.0f;
            buf[i] = v;
        }
        if (act != Activation::none && act != Activation::relu)
            for (int64_t i = 0; i < n; ++i) buf[i] = apply_activation(act, buf[i]);
        for (int64_t i = 0; i < n; ++i) {
            if constexpr (std::is_same_v<D, uint16_t>) dst[i0 + i] = f2bf(buf[i]);
            else dst[i0 + i] = buf[i];
        }
    }
}

template <class S, class D>
__attribute__((always_inline)) inline void rows(const FrozenBatchNormDesc& d, const void* src, void* dst,
                                                const float* sc, const float* sh, int64_t r0, int64_t r1) {
    const auto* s = static_cast<const S*>(src);
    auto* o = static_cast<D*>(dst);
    const int64_t HW = d.h * d.w, C = d.c;
    for (int64_t r = r0; r < r1; ++r) {
        if (d.layout == ConvLayout::nchw) {
            const int64_t c = r % C;
            row<true>(s + r * HW, o + r * HW, HW, sc + c, sh + c, d.activation);
        } else {
            row<false>(s + r * C, o + r * C, C, sc, sh, d.activation);
        }
    }
}

using RowsFn = void (*)(const FrozenBatchNormDesc&, const void*, void*, const float*, const float*, int64_t, int64_t);

#define XK_ROWS_VARIANT(NAME, TARGET)                                                                            \
    __attribute__((target(TARGET))) void NAME(const FrozenBatchNormDesc& d, const void* src, void* dst,         \
                                              const float* sc, const float* sh, int64_t r0, int64_t r1) {       \
        const bool sb = d.src_dtype == DType::bf16, db = d.dst_dtype == DType::bf16;                            \
        if (sb && db) rows<uint16_t, uint16_t>(d, src, dst, sc, sh, r0, r1);                                    \
        else if (sb) rows<uint16_t, float>(d, src, dst, sc, sh, r0, r1);                                        \
        else if (db) rows<float, uint16_t>(d, src, dst, sc, sh, r0, r1);                                        \
        else rows<float, float>(d, src, dst, sc, sh, r0, r1);                                                   \
    }
XK_ROWS_VARIANT(rows_avx2, "avx2,fma")
XK_ROWS_VARIANT(rows_avx512, "avx512f,avx512bw,avx512vl,avx512dq,fma")
#undef XK_ROWS_VARIANT

class FrozenBnSimd final : public FrozenBnKernel {
public:
    explicit FrozenBnSimd(RowsFn f) : f_(f) {}
    void run(const FrozenBnProblem& p, const FrozenBatchNormArgs& a) const override {
        const FrozenBatchNormDesc& d = p.d;
        std::vector<float> sc(static_cast<size_t>(d.c)), sh(static_cast<size_t>(d.c));
        frozen_bn_scale_shift(p, a, sc.data(), sh.data());
        const bool nchw = d.layout == ConvLayout::nchw;
        const int64_t nrows = nchw ? d.n * d.c : d.n * d.h * d.w;
        const int64_t len = nchw ? d.h * d.w : d.c;
        const float* scp = sc.data();
        const float* shp = sh.data();
        parallel_for(nrows, std::max<int64_t>(1, 16384 / len),
                     [&](int64_t r0, int64_t r1) { f_(d, a.src, a.dst, scp, shp, r0, r1); });
    }

private:
    RowsFn f_;
};

}  // namespace

std::shared_ptr<const FrozenBnKernel> create_frozen_bn_avx2(const FrozenBnProblem&) {
    return std::make_shared<FrozenBnSimd>(rows_avx2);
}
std::shared_ptr<const FrozenBnKernel> create_frozen_bn_avx512(const FrozenBnProblem&) {
    return std::make_shared<FrozenBnSimd>(rows_avx512);
}

}  // namespace xk::detail
