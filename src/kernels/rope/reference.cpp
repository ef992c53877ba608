// RoPE reference: the specification (see include/xk/rope.hpp for the math).
#include <cmath>
#include <vector>

#include "common/float_io.hpp"
#include "kernels/rope/rope.hpp"

namespace xk::detail {

void rope_reference(const RopeDesc& d, const RopeArgs& a, int64_t token_begin, int64_t token_end) {
    const int64_t rot = d.rotary_dim, half = rot / 2;
    const int esize = dtype_size(d.dtype);
    std::vector<float> cs(half), sn(half), v(rot), o(rot);

    // compute mode: inv_freq_i = base^(-2i / rotary_dim), in double.
    std::vector<double> inv_freq;
    if (d.cos_sin == RopeCosSin::compute) {
        inv_freq.resize(half);
        for (int64_t i = 0; i < half; ++i)
            inv_freq[i] = std::pow(static_cast<double>(d.base), -2.0 * static_cast<double>(i) / static_cast<double>(rot));
    }

    auto rotate = [&](void* base, int64_t heads, int64_t token_stride, int64_t head_stride, int64_t t) {
        for (int64_t h = 0; h < heads; ++h) {
            void* p = static_cast<char*>(base) + (t * token_stride + h * head_stride) * esize;
            load_f32(p, d.dtype, rot, v.data());
            for (int64_t i = 0; i < half; ++i) {
                const int64_t i1 = d.style == RopeStyle::neox ? i : 2 * i;
                const int64_t i2 = d.style == RopeStyle::neox ? i + half : 2 * i + 1;
                const float x1 = v[i1], x2 = v[i2];
                o[i1] = x1 * cs[i] - x2 * sn[i];
                o[i2] = x2 * cs[i] + x1 * sn[i];
            }
            store_f32(o.data(), rot, p, d.dtype);
        }
    };

    for (int64_t t = token_begin; t < token_end; ++t) {
        const int64_t pos = d.position_type == RopePositionType::s32
                                ? static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t])
                                : static_cast<const int64_t*>(a.positions)[t];
        if (d.cos_sin == RopeCosSin::cache) {
            const void* row = elem_ptr(a.cos_sin_cache, d.cache_dtype, pos * rot);
            load_f32(row, d.cache_dtype, half, cs.data());
            load_f32(elem_ptr(row, d.cache_dtype, half), d.cache_dtype, half, sn.data());
        } else {
            const double p = static_cast<double>(pos) / static_cast<double>(d.scaling_factor);
            for (int64_t i = 0; i < half; ++i) {
                const double theta = p * inv_freq[i];
                cs[i] = static_cast<float>(std::cos(theta));
                sn[i] = static_cast<float>(std::sin(theta));
            }
        }
        if (d.q_heads > 0) rotate(a.q, d.q_heads, d.q_token_stride, d.q_head_stride, t);
        if (d.k_heads > 0) rotate(a.k, d.k_heads, d.k_token_stride, d.k_head_stride, t);
    }
}

}  // namespace xk::detail
