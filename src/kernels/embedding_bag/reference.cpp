// Reference embedding bag: the specification every other implementation is tested against.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/embedding_bag/embedding_bag.hpp"

namespace xk::detail {

void embedding_bag_reference(const EmbeddingBagCall& c, int64_t bag_begin, int64_t bag_end) {
    const EmbeddingBagDesc& d = c.d;
    const int64_t dim = d.dim;
    std::vector<float> acc(static_cast<size_t>(dim));
    std::vector<float> row(static_cast<size_t>(dim));

    // The values q of fused quantized row idx as floats (exact) into q, and its scale and bias
    // (xk/embedding_bag.hpp: int8 values then f32 scale, bias; int4 values two a byte, low nibble
    // first, then f16 scale, bias).
    auto load_q = [&](int64_t idx, float* q, float& scale, float& bias) {
        const uint8_t* r = static_cast<const uint8_t*>(c.a.table) + idx * d.ld_table;
        if (d.row_quant == EmbeddingRowQuant::int8_rowwise) {
            std::memcpy(&scale, r + dim, 4);
            std::memcpy(&bias, r + dim + 4, 4);
            for (int64_t k = 0; k < dim; ++k) q[k] = static_cast<float>(r[k]);
        } else {
            const int64_t nb = (dim + 1) / 2;
            uint16_t hs, hb;
            std::memcpy(&hs, r + nb, 2);
            std::memcpy(&hb, r + nb + 2, 2);
            scale = f16::to_float(hs);
            bias = f16::to_float(hb);
            for (int64_t k = 0; k < dim; ++k) q[k] = static_cast<float>((r[k / 2] >> (4 * (k % 2))) & 15);
        }
    };

    auto load_row = [&](int64_t idx) {
        if (d.row_quant != EmbeddingRowQuant::none) {
            // Fused rows: v = q * scale + bias, product rounded, then the sum.
            float scale, bias;
            load_q(idx, row.data(), scale, bias);
            for (int64_t k = 0; k < dim; ++k) {
                const float p = row[k] * scale;
                row[k] = p + bias;
            }
        } else if (d.table_dtype == DType::bf16) {
            const uint16_t* r = static_cast<const uint16_t*>(c.a.table) + idx * d.ld_table;
            for (int64_t k = 0; k < dim; ++k) row[k] = bf16::to_float(r[k]);
        } else {
            const float* r = static_cast<const float*>(c.a.table) + idx * d.ld_table;
            for (int64_t k = 0; k < dim; ++k) row[k] = r[k];
        }
    };

    // Quantized rows pooled by sum / mean: per row, s = scale and c = bias (times the sample's
    // weight w, each product rounded), acc[k] = fma(q[k], s, acc[k]) (one rounding), and the c
    // summed apart in index order; the bag's end adds that sum once (then mean divides). Max
    // pooling compares the dequantized values q * scale + bias (as load_row).
    const bool fused_q = d.row_quant != EmbeddingRowQuant::none && d.mode != EmbeddingBagMode::max;

    for (int64_t b = bag_begin; b < bag_end; ++b) {
        int64_t count = 0;
        float bsum = 0.0f;  // fused_q: the c of the bag's rows
        for (int64_t j = c.bag_begin(b), end = c.bag_end(b); j < end; ++j) {
            const int64_t idx = c.index(j);
            if (idx == d.padding_idx) continue;  // padding_idx == -1 never matches a valid index
            if (d.mode != EmbeddingBagMode::max && count == 0)
                for (int64_t k = 0; k < dim; ++k) acc[k] = 0.0f;
            if (fused_q) {
                float s, cb;
                load_q(idx, row.data(), s, cb);
                if (d.per_sample_weights) {
                    const float w = c.a.per_sample_weights[j];
                    s = w * s;
                    cb = w * cb;
                }
                for (int64_t k = 0; k < dim; ++k) acc[k] = std::fma(row[k], s, acc[k]);
                bsum = bsum + cb;
            } else {
                load_row(idx);
                if (d.mode == EmbeddingBagMode::max) {
                    for (int64_t k = 0; k < dim; ++k) {
                        // NaN propagates: a NaN row value replaces acc, and nothing compares > NaN.
                        if (count == 0 || row[k] > acc[k] || std::isnan(row[k])) acc[k] = row[k];
                    }
                } else if (d.per_sample_weights) {
                    const float w = c.a.per_sample_weights[j];
                    for (int64_t k = 0; k < dim; ++k) acc[k] += w * row[k];
                } else {
                    for (int64_t k = 0; k < dim; ++k) acc[k] += row[k];
                }
            }
            ++count;
        }
        if (count == 0) {
            for (int64_t k = 0; k < dim; ++k) acc[k] = 0.0f;
        } else {
            if (fused_q)
                for (int64_t k = 0; k < dim; ++k) acc[k] = acc[k] + bsum;
            if (d.mode == EmbeddingBagMode::mean) {
                const float n = static_cast<float>(count);
                for (int64_t k = 0; k < dim; ++k) acc[k] /= n;
            }
        }
        if (d.out_dtype == DType::bf16) {
            uint16_t* o = static_cast<uint16_t*>(c.a.out) + b * d.ld_out;
            for (int64_t k = 0; k < dim; ++k) o[k] = bf16::from_float(acc[k]);
        } else {
            float* o = static_cast<float*>(c.a.out) + b * d.ld_out;
            for (int64_t k = 0; k < dim; ++k) o[k] = acc[k];
        }
    }
}

}  // namespace xk::detail
