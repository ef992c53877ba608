// Reference 2-D convolution: the specification every other conv implementation is tested against.
#include <algorithm>

#include "common/activation.hpp"
#include "common/parallel.hpp"
#include "kernels/conv/conv.hpp"

namespace xk::detail {
namespace {

inline float load(const void* p, DType t, int64_t i) {
    if (t == DType::bf16) return bf16::to_float(static_cast<const uint16_t*>(p)[i]);
    return static_cast<const float*>(p)[i];
}

inline void store(void* p, DType t, int64_t i, float v) {
    if (t == DType::bf16)
        static_cast<uint16_t*>(p)[i] = bf16::from_float(v);
    else
        static_cast<float*>(p)[i] = v;
}

// Offset of activation element (n, c, y, x) of an N x C x H x W tensor in the given layout.
inline int64_t act_offset(ConvLayout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t y, int64_t x) {
    return l == ConvLayout::nchw ? ((n * C + c) * H + y) * W + x : ((n * H + y) * W + x) * C + c;
}

// Offset of weight element (o, i, ky, kx) of an OC x ICg x KH x KW tensor in the given layout.
inline int64_t wei_offset(ConvWeightLayout l, int64_t ICg, int64_t KH, int64_t KW, int64_t o, int64_t i, int64_t ky,
                          int64_t kx) {
    return l == ConvWeightLayout::oihw ? ((o * ICg + i) * KH + ky) * KW + kx : ((o * KH + ky) * KW + kx) * ICg + i;
}

}  // namespace

void conv2d_reference(const ConvProblem& p, const ConvArgs& a) {
    const ConvDesc& d = p.d;
    const int64_t ICg = p.icg(), OCg = p.ocg(), OH = p.oh, OW = p.ow;
    constexpr int64_t kOcBlock = 16;
    const int64_t oc_blocks = (d.oc + kOcBlock - 1) / kOcBlock;
    // Work of one (n, oc-block) item, to keep tiny problems on one thread.
    const int64_t item_work = std::max<int64_t>(1, std::min(kOcBlock, d.oc) * OH * OW * ICg * d.kh * d.kw);
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / item_work);

    parallel_for(d.n * oc_blocks, grain, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
            const int64_t n = item / oc_blocks;
            const int64_t oc0 = (item % oc_blocks) * kOcBlock, oc1 = std::min(d.oc, oc0 + kOcBlock);
            for (int64_t o = oc0; o < oc1; ++o) {
                const int64_t g = o / OCg;
                const float b = d.with_bias ? a.bias[o] : 0.0f;
                for (int64_t oy = 0; oy < OH; ++oy) {
                    for (int64_t ox = 0; ox < OW; ++ox) {
                        float acc = 0.0f;
                        for (int64_t i = 0; i < ICg; ++i) {
                            const int64_t c = g * ICg + i;
                            for (int64_t ky = 0; ky < d.kh; ++ky) {
                                const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                                if (y < 0 || y >= d.h) continue;
                                for (int64_t kx = 0; kx < d.kw; ++kx) {
                                    const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                                    if (x < 0 || x >= d.w) continue;
                                    const float s = load(a.src, d.src_dtype, act_offset(d.layout, d.c, d.h, d.w, n, c, y, x));
                                    const float wv = load(a.weights, d.weight_dtype,
                                                          wei_offset(d.weight_layout, ICg, d.kh, d.kw, o, i, ky, kx));
                                    acc += s * wv;
                                }
                            }
                        }
                        const int64_t di = act_offset(d.layout, d.oc, OH, OW, n, o, oy, ox);
                        float v = acc + b;
                        if (d.residual == ConvResidual::add_before_activation) v += load(a.residual, d.dst_dtype, di);
                        v = apply_activation(d.activation, v);
                        if (d.residual == ConvResidual::add_after_activation) v += load(a.residual, d.dst_dtype, di);
                        store(a.dst, d.dst_dtype, di, v);
                    }
                }
            }
        }
    });
}

}  // namespace xk::detail
