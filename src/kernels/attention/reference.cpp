// Attention reference kernel (the specification, registry entry "ref:scalar"): plain fp32 loops
// over the task's whole key range, two passes (scores and their max, then the exponentials).
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention.hpp"

namespace xk::detail {

namespace {

inline const void* kv_row(const AttnKvSource& s, const void* base, int64_t stride, int64_t j, int esize) {
    int64_t off = j * stride;
    if (s.blocks) off = static_cast<int64_t>(s.blocks[j / s.block_size]) * s.block_elems + (j % s.block_size) * stride;
    return static_cast<const char*>(base) + off * esize;
}

inline float load(const void* p, int64_t d, DType t) {
    if (t == DType::bf16) return bf16::from_bits(static_cast<const uint16_t*>(p)[d]).to_float();
    if (t == DType::s8) return static_cast<float>(static_cast<const int8_t*>(p)[d]);
    return static_cast<const float*>(p)[d];
}

}  // namespace

void attention_reference(const AttnKernelDesc& kd, const AttnTask& t, float* m, float* l, float* acc) {
    const int64_t rows = t.tokens * t.group, hd = t.head_dim;
    const int esize = dtype_size(kd.kv_dtype);
    const float ninf = -std::numeric_limits<float>::infinity();
    std::vector<float> s(static_cast<size_t>(t.j_end > t.j_begin ? t.j_end - t.j_begin : 0));
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t tok = r / t.group;
        const float* q = t.q + r * hd;
        float* a = acc + r * hd;
        for (int64_t d = 0; d < hd; ++d) a[d] = 0.0f;
        float mx = ninf;
        for (int64_t j = t.j_begin; j < t.j_end; ++j) {
            float v = ninf;
            if (j < t.limit[tok]) {
                const void* k = kv_row(t.kv, t.kv.k, t.kv.k_stride, j, esize);
                float dot = 0.0f;
                for (int64_t d = 0; d < hd; ++d) dot += q[d] * load(k, d, kd.kv_dtype);
                if (t.kv.k_scale) dot *= t.kv.k_scale[attn_scale_index(t.kv, j)];
                v = dot;
                if (t.mask) v += t.mask[tok * t.mask_stride + j];
            }
            s[j - t.j_begin] = v;
            if (v > mx) mx = v;
        }
        m[r] = mx;
        l[r] = 0.0f;
        if (mx == ninf) continue;  // sees no key here
        float sum = 0.0f;
        for (int64_t j = t.j_begin; j < t.j_end; ++j) {
            const float sj = s[j - t.j_begin];
            if (sj == ninf) continue;
            const float p = std::exp(sj - mx);
            sum += p;
            const void* v = kv_row(t.kv, t.kv.v, t.kv.v_stride, j, esize);
            const float pv = t.kv.v_scale ? p * t.kv.v_scale[attn_scale_index(t.kv, j)] : p;
            for (int64_t d = 0; d < hd; ++d) a[d] += pv * load(v, d, kd.kv_dtype);
        }
        l[r] = sum;
    }
}

}  // namespace xk::detail
