// Embedding-bag backward fused with a sparse SGD / Adagrad update (xk/embedding_bag.hpp):
// entries sorted by (row, position), each unique row's gradient summed in entry order and applied
// once, unique rows split over the threads. The per-row sums and updates: the
// embedding_bag_backward registry (AVX-512 / AVX2 / scalar, bit for bit the same); the time goes
// to the random row accesses and the sort.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "kernels/embedding_bag/embedding_bag.hpp"

namespace xk::detail {

std::string EmbBwdConfig::key() const {
    return std::string(optimizer == EmbeddingOptimizer::sgd ? "sgd" : "adagrad") + (out_bf16 ? "_gbf16" : "_gf32");
}

// The scalar reference of the per-row update (portable C++; the other entries are it, vectorised).
void embedding_bag_backward_rows_reference(const EmbBwdCtx& x, const EmbBwdConfig& k, int64_t u0, int64_t u1) {
    const int64_t dim = x.dim;
    std::vector<float> acc(static_cast<size_t>(dim)), g(static_cast<size_t>(dim));
    const int64_t row_bytes = dim * 4;
    for (int64_t s = u0; s < u1; ++s) {
        // The rows (and Adagrad states) of the unique rows kEmbBwdPrefetch ahead, for writing.
        if (s + kEmbBwdPrefetch < u1) {
            const int64_t r = x.entries[x.seg[s + kEmbBwdPrefetch]].first;
            const char* t = reinterpret_cast<const char*>(x.table + r * x.ld_table);
            for (int64_t l = 0; l < row_bytes; l += 64) __builtin_prefetch(t + l, 1, 3);
            if (x.state) {
                const char* st = reinterpret_cast<const char*>(x.state + r * x.ld_state);
                for (int64_t l = 0; l < row_bytes; l += 64) __builtin_prefetch(st + l, 1, 3);
            }
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t i = x.seg[s]; i < x.seg[s + 1]; ++i) {
            const int64_t j = x.entries[i].second, b = x.bag_of[j];
            const float w = x.scale[j];
            if (k.out_bf16) {
                const uint16_t* go = static_cast<const uint16_t*>(x.grad_out) + b * x.ld_out;
                for (int64_t q = 0; q < dim; ++q) g[q] = bf16::to_float(go[q]);
            } else {
                const float* go = static_cast<const float*>(x.grad_out) + b * x.ld_out;
                for (int64_t q = 0; q < dim; ++q) g[q] = go[q];
            }
            for (int64_t q = 0; q < dim; ++q) acc[q] += w * g[q];
        }
        const int64_t r = x.entries[x.seg[s]].first;
        float* t = x.table + r * x.ld_table;
        if (k.optimizer == EmbeddingOptimizer::sgd) {
            for (int64_t q = 0; q < dim; ++q) t[q] = t[q] - x.lr * acc[q];
        } else {
            float* st = x.state + r * x.ld_state;
            for (int64_t q = 0; q < dim; ++q) {
                const float sum = st[q] + acc[q] * acc[q];
                st[q] = sum;
                t[q] = t[q] - x.lr * (acc[q] / (std::sqrt(sum) + x.eps));
            }
        }
    }
}

namespace {
struct RefEmbBwd final : EmbBwdKernel {
    EmbBwdConfig k;
    explicit RefEmbBwd(const EmbBwdConfig& c) : k(c) {}
    void run(const EmbBwdCtx& x, int64_t u0, int64_t u1) const override { embedding_bag_backward_rows_reference(x, k, u0, u1); }
};
}  // namespace

const Registry<EmbBwdConfig, EmbBwdKernel>& embedding_bag_backward_registry() {
    static const Registry<EmbBwdConfig, EmbBwdKernel> r(
        "embedding_bag_backward",
        {
            {"intrin:avx512", Isa::avx512, nullptr, [](const EmbBwdConfig& k) { return create_embedding_bag_backward_simd(k, Isa::avx512); }},
            {"intrin:avx2", Isa::avx2, nullptr, [](const EmbBwdConfig& k) { return create_embedding_bag_backward_simd(k, Isa::avx2); }},
            {"ref:scalar", Isa::scalar, nullptr,
             [](const EmbBwdConfig& k) -> std::shared_ptr<const EmbBwdKernel> { return std::make_shared<RefEmbBwd>(k); }},
        });
    return r;
}

}  // namespace xk::detail

namespace xk {
namespace {

using Entry = std::pair<int64_t, int64_t>;  // (row, position)

// Blocks of a parallel pass over n items: one per thread, none under kSortGrain items. Any block
// count gives the same result (the passes below are stable and the block layout is only a split
// of the work).
constexpr int64_t kSortGrain = 16384;
int64_t sort_blocks(int64_t n) { return detail::parallel_threads(n, kSortGrain); }
int64_t block_begin(int64_t n, int64_t nb, int64_t b) { return n / nb * b + std::min(b, n % nb); }

// Sorts e (keys in [0, key_end), positions increasing) by key, positions increasing within a key:
// stable LSD radix sort on digits of up to 12 bits (2 passes for up to 2^24 rows), each pass over
// the threads (per block: a histogram of its digits, then a scatter to its precomputed ranges of
// each bucket, in block order: the stable order). The result is the unique stably sorted order,
// whatever the thread count.
void sort_entries(std::vector<Entry>& e, std::vector<Entry>& tmp, int64_t key_end) {
    const int64_t n = static_cast<int64_t>(e.size());
    if (n < 256) {
        std::sort(e.begin(), e.end());  // (pairs are distinct: the same order)
        return;
    }
    if (key_end <= 1) return;  // one key
    int bits = 0;
    while (bits < 63 && ((key_end - 1) >> bits) != 0) ++bits;
    const int passes = (bits + 11) / 12, width = (bits + passes - 1) / passes;
    const int64_t buckets = int64_t(1) << width, mask = buckets - 1;
    const int64_t nb = sort_blocks(n);
    std::vector<int64_t> pos(static_cast<size_t>(nb * buckets));  // [block][bucket]: start in tmp
    tmp.resize(e.size());
    for (int pass = 0, shift = 0; pass < passes; ++pass, shift += width) {
        detail::parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
            for (int64_t b = b0; b < b1; ++b) {
                int64_t* h = pos.data() + b * buckets;
                std::fill(h, h + buckets, 0);
                for (int64_t i = block_begin(n, nb, b), i1 = block_begin(n, nb, b + 1); i < i1; ++i)
                    ++h[(e[i].first >> shift) & mask];
            }
        });
        int64_t at = 0;  // bucket-major, block-minor: the stable order
        for (int64_t k = 0; k < buckets; ++k)
            for (int64_t b = 0; b < nb; ++b) {
                const int64_t c = pos[b * buckets + k];
                pos[b * buckets + k] = at;
                at += c;
            }
        detail::parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
            for (int64_t b = b0; b < b1; ++b) {
                int64_t* h = pos.data() + b * buckets;
                for (int64_t i = block_begin(n, nb, b), i1 = block_begin(n, nb, b + 1); i < i1; ++i)
                    tmp[static_cast<size_t>(h[(e[i].first >> shift) & mask]++)] = e[i];
            }
        });
        e.swap(tmp);
    }
}
}  // namespace

void detail::embedding_bag_backward_update_impl(const char* fn, const EmbeddingBagDesc& desc, const EmbeddingBagArgs& args,
                                                const void* grad_out, const EmbeddingBagUpdate& u) {
    const EmbeddingBagDesc d = detail::embedding_bag_validate_desc(fn, desc);
    if (d.mode == EmbeddingBagMode::max)
        detail::fail(Status::unsupported, std::string(fn) + ": mode=max is not supported (sum, mean)");
    if (d.row_quant != EmbeddingRowQuant::none || d.table_dtype != DType::f32)
        detail::fail(Status::unsupported, std::string(fn) + ": table_dtype=" + dtype_name(d.table_dtype) +
                                              (d.row_quant != EmbeddingRowQuant::none ? " (row-wise quantized)" : "") +
                                              " is not supported (f32 tables)");
    const int opt = static_cast<int>(u.optimizer);
    if (opt < 0 || opt > 1) detail::fail_arg(fn, "update.optimizer", std::to_string(opt), "is not a valid value (sgd=0, adagrad=1)");
    if (!(u.lr >= 0) || !std::isfinite(u.lr)) detail::fail_arg(fn, "update.lr", std::to_string(u.lr), "must be finite and >= 0");
    if (!(u.eps >= 0) || !std::isfinite(u.eps)) detail::fail_arg(fn, "update.eps", std::to_string(u.eps), "must be finite and >= 0");
    if (args.out) detail::fail_arg(fn, "args.out", detail::ptr_str(args.out), "must be null (the table is what is written)");
    const int64_t B = args.num_bags;
    detail::check_nonnegative(fn, "args.num_bags", B);
    if (B > 0) detail::check_not_null(fn, "grad_out", grad_out);
    const int64_t osz = dtype_size(d.out_dtype);
    if (grad_out && reinterpret_cast<uintptr_t>(grad_out) % static_cast<uintptr_t>(osz) != 0)
        detail::fail_arg(fn, "grad_out", detail::ptr_str(grad_out), "must be aligned to its element size");
    const int64_t table_bytes = d.num_embeddings == 0 ? 0 : ((d.num_embeddings - 1) * d.ld_table + d.dim) * 4;
    auto overlap = [](const void* a, int64_t an, const void* b, int64_t bn) {
        if (!a || !b || an <= 0 || bn <= 0) return false;
        const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
        return pa < pb + static_cast<uintptr_t>(bn) && pb < pa + static_cast<uintptr_t>(an);
    };
    const int64_t go_bytes =
        B == 0 ? 0
               : detail::checked_mul(fn, "(num_bags-1)*ld_out*elem_size",
                                     detail::checked_add(fn, "(num_bags-1)*ld_out+dim",
                                                         detail::checked_mul(fn, "(num_bags-1)*ld_out", B - 1, d.ld_out), d.dim),
                                     osz);
    if (overlap(grad_out, go_bytes, args.table, table_bytes))
        detail::fail_arg(fn, "grad_out", detail::ptr_str(grad_out), "overlaps table=" + detail::ptr_str(args.table));
    const int64_t ld_state = u.ld_state == 0 ? d.dim : u.ld_state;
    if (u.optimizer == EmbeddingOptimizer::adagrad) {
        detail::check_nonnegative(fn, "update.ld_state", u.ld_state);
        detail::check_ld(fn, "update.ld_state", ld_state, d.dim, "dim");
        detail::checked_mul(fn, "num_embeddings*ld_state", d.num_embeddings, ld_state);
        if (args.num_indices > 0) detail::check_not_null(fn, "update.state", u.state);
        if (u.state && reinterpret_cast<uintptr_t>(u.state) % 4 != 0)
            detail::fail_arg(fn, "update.state", detail::ptr_str(u.state), "must be aligned to 4 bytes");
        const int64_t st_bytes = d.num_embeddings == 0 ? 0 : ((d.num_embeddings - 1) * ld_state + d.dim) * 4;
        if (overlap(u.state, st_bytes, args.table, table_bytes))
            detail::fail_arg(fn, "update.state", detail::ptr_str(u.state), "overlaps table=" + detail::ptr_str(args.table));
        if (overlap(u.state, st_bytes, grad_out, go_bytes))
            detail::fail_arg(fn, "update.state", detail::ptr_str(u.state), "overlaps grad_out=" + detail::ptr_str(grad_out));
    } else if (u.state) {
        detail::fail_arg(fn, "update.state", detail::ptr_str(u.state), "must be null with optimizer sgd");
    }
    // Sizes, offsets, pointers, overlaps of the inputs (grad_out in the role of out: only read).
    EmbeddingBagArgs a = args;
    a.out = const_cast<void*>(grad_out);
    const detail::EmbeddingBagCall c = detail::embedding_bag_validate_args(fn, d, a);
    detail::embedding_bag_validate_indices(c);
    if (B == 0) return;

    // Entries (row, position) of every position inside a bag, a padding one with the key
    // num_embeddings (sorted last, then dropped); the bag of each position and the scale of its
    // gradient. Over the threads by bags.
    const int64_t used = c.bag_end(B - 1);
    const int64_t E = d.num_embeddings;
    std::vector<Entry> e(static_cast<size_t>(used)), tmp;
    std::vector<float> scale(static_cast<size_t>(used));
    std::vector<int64_t> bag_of(static_cast<size_t>(used));
    detail::parallel_for(B, std::max<int64_t>(1, B * kSortGrain / std::max<int64_t>(used, 1)), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t j0 = c.bag_begin(b), j1 = c.bag_end(b);
            int64_t count = 0;
            for (int64_t j = j0; j < j1; ++j) {
                const int64_t r = c.index(j);
                const bool pad = r == d.padding_idx;
                count += !pad;
                e[j] = Entry(pad ? E : r, j);
                bag_of[j] = b;
            }
            const float inv = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
            for (int64_t j = j0; j < j1; ++j)
                scale[j] = d.mode == EmbeddingBagMode::mean ? inv : (d.per_sample_weights ? args.per_sample_weights[j] : 1.0f);
        }
    });
    sort_entries(e, tmp, d.padding_idx >= 0 ? E + 1 : E);
    int64_t n_entries = used;  // without the padding ones (at the end)
    while (n_entries > 0 && e[n_entries - 1].first == E) --n_entries;
    // seg: the starts of the unique rows in e, then n_entries; counted per block, then written.
    const int64_t nb = sort_blocks(n_entries);
    std::vector<int64_t> starts(static_cast<size_t>(nb + 1), 0);
    auto is_start = [&](int64_t i) { return i == 0 || e[i].first != e[i - 1].first; };
    detail::parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            int64_t k = 0;
            for (int64_t i = block_begin(n_entries, nb, b), i1 = block_begin(n_entries, nb, b + 1); i < i1; ++i) k += is_start(i);
            starts[b + 1] = k;
        }
    });
    for (int64_t b = 0; b < nb; ++b) starts[b + 1] += starts[b];
    const int64_t U = starts[nb];
    std::vector<int64_t> seg(static_cast<size_t>(U + 1));
    seg[U] = n_entries;
    detail::parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            int64_t k = starts[b];
            for (int64_t i = block_begin(n_entries, nb, b), i1 = block_begin(n_entries, nb, b + 1); i < i1; ++i)
                if (is_start(i)) seg[k++] = i;
        }
    });
    if (U == 0) return;

    detail::EmbBwdCtx x;
    x.table = static_cast<float*>(const_cast<void*>(args.table));
    x.state = u.state;
    x.ld_table = d.ld_table;
    x.ld_state = ld_state;
    x.dim = d.dim;
    x.grad_out = grad_out;
    x.ld_out = d.ld_out;
    x.lr = u.lr;
    x.eps = u.eps;
    x.entries = e.data();
    x.seg = seg.data();
    x.bag_of = bag_of.data();
    x.scale = scale.data();
    detail::EmbBwdConfig cfg;
    cfg.out_bf16 = d.out_dtype == DType::bf16;
    cfg.optimizer = u.optimizer;
    const auto kernel = detail::embedding_bag_backward_registry().get(cfg).kernel;
    const int64_t grain = std::max<int64_t>(1, 16384 / (d.dim * (1 + n_entries / U)));
    detail::parallel_for(U, grain, [&](int64_t u0, int64_t u1) { kernel->run(x, u0, u1); });
}

void embedding_bag_backward_update(const EmbeddingBagDesc& desc, const EmbeddingBagArgs& args, const void* grad_out,
                                   const EmbeddingBagUpdate& update) {
    detail::embedding_bag_backward_update_impl("xk::embedding_bag_backward_update", desc, args, grad_out, update);
}

}  // namespace xk
