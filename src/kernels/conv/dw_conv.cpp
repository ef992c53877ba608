// Depthwise conv2d, channels-last: the "avx2:dwconv" / "avx512:dwconv" registry entries.
//
// groups == C == OC (channel multiplier 1), NHWC activations, either weight layout (both are
// [C][KH][KW] for one input channel per group), f32 or bf16 src / weights, any stride, padding and
// dilation. A depthwise convolution has no reduction over channels, so it is no GEMM (one
// 1-column product per channel); instead each output pixel is a vector over channels:
//   acc[c] = sum over taps (ky, kx) inside the input of src[n, y, x, c] * wt[ky, kx, c]
// with the weights in tap-major f32 (wt, C*KH*KW floats: what pack_weights makes, else transposed
// per call into a per-thread buffer) so the channel loop is unit-stride in both operands and vectorises (the same C++
// compiled for AVX2 + FMA and for AVX-512). Channels are taken 64 at a time (the accumulators stay
// in registers). Then the epilogue of xk/conv.hpp per element, in order. Parallel over output rows
// (n, oy).
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/activation.hpp"
#include "common/parallel.hpp"
#include "kernels/conv/conv.hpp"

namespace xk::detail {
namespace {

constexpr int64_t kCBlock = 64;

inline float ld(const float* p, int64_t i) { return p[i]; }
inline float ld(const uint16_t* p, int64_t i) {
    const uint32_t b = static_cast<uint32_t>(p[i]) << 16;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

template <class S>
__attribute__((always_inline)) inline void dw_rows(const ConvProblem& pb, const S* src, const float* wt,
                                                   const ConvArgs& a, int64_t r0, int64_t r1) {
    const ConvDesc& d = pb.d;
    const int64_t C = d.c, OH = pb.oh, OW = pb.ow;
    const bool dst_bf16 = d.dst_dtype == DType::bf16;
    float acc[kCBlock];
    for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / OH, oy = r % OH;
        for (int64_t ox = 0; ox < OW; ++ox) {
            const int64_t obase = ((n * OH + oy) * OW + ox) * C;
            for (int64_t c0 = 0; c0 < C; c0 += kCBlock) {
                const int64_t cb = std::min(kCBlock, C - c0);
                for (int64_t c = 0; c < cb; ++c) acc[c] = 0.0f;
                for (int64_t ky = 0; ky < d.kh; ++ky) {
                    const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                    if (y < 0 || y >= d.h) continue;
                    for (int64_t kx = 0; kx < d.kw; ++kx) {
                        const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                        if (x < 0 || x >= d.w) continue;
                        const S* s = src + ((n * d.h + y) * d.w + x) * C + c0;
                        const float* w = wt + (ky * d.kw + kx) * C + c0;
                        for (int64_t c = 0; c < cb; ++c) acc[c] += ld(s, c) * w[c];
                    }
                }
                for (int64_t c = 0; c < cb; ++c) {
                    const int64_t oi = obase + c0 + c;
                    float v = acc[c] + (d.with_bias ? a.bias[c0 + c] : 0.0f);
                    if (d.residual == ConvResidual::add_before_activation)
                        v += dst_bf16 ? ld(static_cast<const uint16_t*>(a.residual), oi)
                                      : static_cast<const float*>(a.residual)[oi];
                    v = apply_activation(d.activation, v);
                    if (d.residual == ConvResidual::add_after_activation)
                        v += dst_bf16 ? ld(static_cast<const uint16_t*>(a.residual), oi)
                                      : static_cast<const float*>(a.residual)[oi];
                    if (dst_bf16) static_cast<uint16_t*>(a.dst)[oi] = bf16::from_float(v);
                    else static_cast<float*>(a.dst)[oi] = v;
                }
            }
        }
    }
}

using RowsFn = void (*)(const ConvProblem&, const void*, const float*, const ConvArgs&, int64_t, int64_t);

__attribute__((target("avx2,fma"))) void rows_avx2(const ConvProblem& pb, const void* src, const float* wt,
                                                   const ConvArgs& a, int64_t r0, int64_t r1) {
    if (pb.d.src_dtype == DType::bf16) dw_rows(pb, static_cast<const uint16_t*>(src), wt, a, r0, r1);
    else dw_rows(pb, static_cast<const float*>(src), wt, a, r0, r1);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) void rows_avx512(const ConvProblem& pb,
                                                                                  const void* src, const float* wt,
                                                                                  const ConvArgs& a, int64_t r0,
                                                                                  int64_t r1) {
    if (pb.d.src_dtype == DType::bf16) dw_rows(pb, static_cast<const uint16_t*>(src), wt, a, r0, r1);
    else dw_rows(pb, static_cast<const float*>(src), wt, a, r0, r1);
}

// Tap-major f32 weights: wt[t*C + c] = W[c*T + t] (both layouts store [C][KH][KW] here).
void tap_major(const ConvProblem& p, const void* W, float* wt) {
    const ConvDesc& d = p.d;
    const int64_t C = d.c, T = d.kh * d.kw;
    if (d.weight_dtype == DType::bf16) {
        const auto* w = static_cast<const uint16_t*>(W);
        for (int64_t c = 0; c < C; ++c)
            for (int64_t t = 0; t < T; ++t) wt[t * C + c] = ld(w, c * T + t);
    } else {
        const auto* w = static_cast<const float*>(W);
        for (int64_t c = 0; c < C; ++c)
            for (int64_t t = 0; t < T; ++t) wt[t * C + c] = w[c * T + t];
    }
}

// Packed: the tap-major f32 weights themselves (a run with them skips the per-call transpose).
struct DwPacked final : ConvPacked {
    DwPacked(std::string l, size_t n) : ConvPacked(std::move(l)), wt(n) {
        data = wt.data();
        bytes = n * sizeof(float);
    }
    std::vector<float> wt;
};

class DwConv final : public ConvKernel {
public:
    DwConv(const ConvProblem& p, RowsFn fn) : ConvKernel(p), fn_(fn) {}

    std::string packed_layout() const override { return "dwtap:f32:" + conv_plain_layout(p_).substr(6); }

    std::shared_ptr<const ConvPacked> pack(const void* weights) const override {
        auto out = std::make_shared<DwPacked>(packed_layout(), static_cast<size_t>(p_.d.c * p_.d.kh * p_.d.kw));
        tap_major(p_, weights, out->wt.data());
        return out;
    }

    void run(const ConvArgs& a, const ConvPacked* packed) const override {
        const ConvDesc& d = p_.d;
        const int64_t C = d.c, T = d.kh * d.kw;
        const float* wp;
        if (packed) {
            wp = static_cast<const DwPacked*>(packed)->wt.data();
        } else {
            thread_local std::vector<float> wt;
            wt.resize(static_cast<size_t>(C * T));
            tap_major(p_, a.weights, wt.data());
            wp = wt.data();
        }
        // In-place residual is safe: each output element reads its residual just before writing it.
        const int64_t rows = d.n * p_.oh;
        const int64_t row_work = std::max<int64_t>(1, p_.ow * C * T);
        parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 15) / row_work),
                     [&](int64_t r0, int64_t r1) { fn_(p_, a.src, wp, a, r0, r1); });
    }

private:
    RowsFn fn_;
};

}  // namespace

bool dw_conv_supports(const ConvProblem& p) {
    const ConvDesc& d = p.d;
    return d.layout == ConvLayout::nhwc && d.groups == d.c && d.oc == d.c;
}

std::shared_ptr<const ConvKernel> create_dw_conv_avx2(const ConvProblem& p) {
    return std::make_shared<DwConv>(p, rows_avx2);
}
std::shared_ptr<const ConvKernel> create_dw_conv_avx512(const ConvProblem& p) {
    return std::make_shared<DwConv>(p, rows_avx512);
}

}  // namespace xk::detail
