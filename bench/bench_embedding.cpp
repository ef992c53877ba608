// Embedding bag forward (issue 30) beside the limit: a plain loop that gathers the same random
// rows (sums each bag's rows into registers, prefetching the rows ahead as the kernels do), in the same process.
//
//   embedding_bag/f32/xk/sum_dim:<D>_<dist>/nt:<N>       xk::EmbeddingBagPlan, f32 table, mode sum
//   embedding_bag/bf16/xk/sum_dim:<D>_<dist>/nt:<N>      bf16 table (f32 out)
//   embedding_bag/f32/xk/gather_limit_dim:<D>_<dist>/nt:<N>   the plain gather loop (f32)
//   embedding_bag/u8|u4/xk/sum_int8rows|int4rows_dim:<D>_<dist>/nt:<N>   row-wise quantized tables
//                                                     (GBPS of fused rows, and Mrows/s)
//   embedding_lookup/f32/xk/rows_dim:<D>_<dist>/nt:<N>  xk::embedding of the same 204800 indices
//   embedding_lookup/f32/xk/gather_store[_nt]_limit_dim:<D>_<dist>/nt:<N>  its limit: a loop that
//                                                     gathers the same rows (prefetching as the kernels) and
//                                                     writes each to its output row, regular or
//                                                     non-temporal (nt) stores; GBPS = gathered bytes
//   embedding_train/f32/xk/sum_sgd_dim:<D>_<dist>/nt:<N>  forward + backward fused with SGD (GBPS:
//                                                     the forward's gathered bytes, for comparing times)
//   embedding_backward/f32/xk/sum_sgd_dim:<D>_<dist>/nt:<N>  backward fused with SGD alone (grad_out
//                                                     given; GBPS: bytes of the 204800 gradient rows
//                                                     it sums); nt:1 is the peer of nt:2 (the sort and
//                                                     the row updates both run over the threads)
//   embedding_merged/f32/xk/<merged|separate|gather_limit>_26x2048_dim:64/nt:<N>  26 tables (slices of
//                                                     the 1 GiB table, pooling 1 + 4t): one merged call vs
//                                                     26 calls vs the gather loop over the same rows
//                                                     (writing the same merged output)
//   optim/f32/xk/adamw_n:1e8/nt:<N>                  AdamW step, 100M f32 params (XK_BENCH_OPTIM_N),
//                                                     28 B/element, Copy% = vs the interleaved copy,
//                                                     Stream% = vs the step's own loads / stores on the
//                                                     same arrays (adamw_pattern), interleaved
//   optim/bf16/xk/sgd_momentum_split_n:1e8/nt:<N>    SGD momentum on split bf16 params, bf16 grads, 18 B/elem
//   optim/f32/xk/lamb_n:1e8/nt:<N>                   Lamb (wd 1e-2), two passes, 40 B/element
//   optim/bf16/xk/lamb_split_n:1e8/nt:<N>            Lamb on split bf16 params, bf16 grads, 38 B/element
//   interaction/<f32|bf16>/xk/<fwd|fwdbwd>_n:27_dim:<D>_b:2048/nt:<N>  DLRM dot interaction (26 tables
//                                                     + the dense feature, diagonal off), the tables as
//                                                     columns of one merged output (ld 26 D); fwdbwd =
//                                                     forward + backward. GBPS = bytes read + written
//                                                     (forward: N D in, D + P out; backward: N D + D + P
//                                                     in, N D out), per sample x 2048
//
// One 1 GiB table (XK_BENCH_TABLE_MB) viewed as E = 2^28 / D rows of D floats (the bf16 rows view the same bytes as
// 2^29 / D rows, the quantized ones as 2^30 / row bytes rows, indexed over the largest power of two
// of them), 2048 bags of 100 indices,
// uniform or Zipf(1.05) over the rows (ranks scattered by an odd multiplier modulo E), i64
// indices. GBPS = bytes of gathered rows per second (num_indices * D * element size; the output,
// 2048 x D, is not counted). PyTorch's F.embedding_bag on the same shapes: bench/py/rec_peer.py.
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "bench_util.hpp"
#include "kernels/embedding_bag/embedding_bag.hpp"  // embedding_bag_prefetch_l2: the loops prefetch as the kernels do
#include "xk/embedding_bag.hpp"
#include "xk/interaction.hpp"
#include "xk/optim.hpp"

namespace {

// The table: 1 GiB, or XK_BENCH_TABLE_MB MiB (a power of two; e.g. 256 on a shared host).
const int64_t kTableBytes = [] {
    const int64_t mb = xk::bench::env_int("XK_BENCH_TABLE_MB", 1024);
    return (mb > 0 && (mb & (mb - 1)) == 0 ? mb : 1024) << 20;
}();
constexpr int64_t kBags = 2048, kPool = 100;

float* table() {
    static xk::bench::AlignedArray<float> t = [] {
        auto a = xk::bench::alloc_aligned<float>(static_cast<size_t>(kTableBytes / 4));
        const int64_t n = kTableBytes / 4;
        xk::detail::parallel_for(n, int64_t(1) << 20, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i)
                a[i] = static_cast<float>(xk::bench::detail::splitmix64(static_cast<uint64_t>(i)) >> 40) * 0x1.0p-24f - 0.5f;
        });
        return a;
    }();
    return t.get();
}

// 2048 x 100 indices over E rows: uniform, or Zipf(1.05) ranks (inverse CDF) scattered over E (E a
// power of two: the scatter is a mask).
const std::vector<int64_t>& indices(int64_t E, bool zipf) {
    static std::map<std::pair<int64_t, bool>, std::vector<int64_t>> cache;
    auto& v = cache[{E, zipf}];
    if (!v.empty()) return v;
    const int64_t n = kBags * kPool;
    v.resize(static_cast<size_t>(n));
    if (!zipf) {
        for (int64_t i = 0; i < n; ++i)
            v[i] = static_cast<int64_t>(xk::bench::detail::splitmix64(0x51u + static_cast<uint64_t>(i)) % static_cast<uint64_t>(E));
        return v;
    }
    std::vector<double> cdf(static_cast<size_t>(E));
    double s = 0;
    for (int64_t r = 0; r < E; ++r) cdf[r] = s += std::pow(static_cast<double>(r + 1), -1.05);
    for (int64_t i = 0; i < n; ++i) {
        const double u = xk::bench::detail::unit(0x2f, static_cast<uint64_t>(i)) * s;
        const int64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
        // E is a power of two: an odd multiplier is a bijection of [0, E).
        v[i] = static_cast<int64_t>((static_cast<uint64_t>(std::min(rank, E - 1)) * 0x9E3779B97F4A7C15ull) &
                                    static_cast<uint64_t>(E - 1));
    }
    return v;
}

const std::vector<int64_t>& offsets() {
    static std::vector<int64_t> o = [] {
        std::vector<int64_t> v(kBags);
        for (int64_t b = 0; b < kBags; ++b) v[b] = b * kPool;
        return v;
    }();
    return o;
}
// The same with the end of the last bag (kBags + 1 entries: the gather loops' bag bounds).
const std::vector<int64_t>& offsets_end() {
    static std::vector<int64_t> o = [] {
        std::vector<int64_t> v(kBags + 1);
        for (int64_t b = 0; b <= kBags; ++b) v[b] = b * kPool;
        return v;
    }();
    return o;
}

void BM_bag(benchmark::State& state, int64_t dim, bool zipf, bool bf16, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t esize = bf16 ? 2 : 4;
    const int64_t E = kTableBytes / (dim * esize);
    const auto& idx = indices(E, zipf);
    xk::EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    d.table_dtype = bf16 ? xk::DType::bf16 : xk::DType::f32;
    const xk::EmbeddingBagPlan plan(d);
    std::vector<float> out(static_cast<size_t>(kBags * dim));
    xk::EmbeddingBagArgs a;
    a.num_bags = kBags;
    a.num_indices = kBags * kPool;
    a.table = table();
    a.indices = idx.data();
    a.offsets = offsets().data();
    a.out = out.data();
    for (auto _ : state) {
        plan.run(a);
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(kBags * kPool * dim * esize));
    state.SetLabel(plan.impl_name());
}

// Row-wise quantized tables: the same 1 GiB viewed as fused rows of dim + 8 (int8) or
// dim / 2 + 4 (int4) bytes, every row's scale / bias set; rows per second beside f32's.
uint8_t* qtable(xk::EmbeddingRowQuant q, int64_t dim) {
    static std::map<std::pair<int, int64_t>, bool> done;
    uint8_t* t = reinterpret_cast<uint8_t*>(table());
    if (!done[{static_cast<int>(q), dim}]) {
        done[{static_cast<int>(q), dim}] = true;
        const int64_t rb = xk::embedding_row_quant_bytes(q, dim), E = kTableBytes / rb;
        for (int64_t r = 0; r < E; ++r) {
            uint8_t* row = t + r * rb;
            if (q == xk::EmbeddingRowQuant::int8_rowwise) {
                const float sb[2] = {0.01f, -0.5f};
                std::memcpy(row + dim, sb, 8);
            } else {
                const uint16_t sb[2] = {xk::f16::from_float(0.01f), xk::f16::from_float(-0.5f)};
                std::memcpy(row + (dim + 1) / 2, sb, 4);
            }
        }
    }
    return t;
}

void BM_qbag(benchmark::State& state, int64_t dim, bool zipf, xk::EmbeddingRowQuant q, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t rb = xk::embedding_row_quant_bytes(q, dim), E = kTableBytes / rb;
    const uint8_t* t = qtable(q, dim);
    // The indices over the largest power of two of rows (indices() scatters the Zipf ranks with a
    // mask: over E = 7.9 M rows it reached only 2^14 distinct rows, all from cache).
    int64_t Ei = 1;
    while (Ei * 2 <= E) Ei *= 2;
    const auto& idx = indices(Ei, zipf);
    xk::EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    d.table_dtype = xk::DType::u8;
    d.row_quant = q;
    const xk::EmbeddingBagPlan plan(d);
    std::vector<float> out(static_cast<size_t>(kBags * dim));
    xk::EmbeddingBagArgs a;
    a.num_bags = kBags;
    a.num_indices = kBags * kPool;
    a.table = t;
    a.indices = idx.data();
    a.offsets = offsets().data();
    a.out = out.data();
    for (auto _ : state) {
        plan.run(a);
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(kBags * kPool * rb));
    state.counters["Mrows/s"] = benchmark::Counter(static_cast<double>(kBags * kPool) * 1e-6 * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
    state.SetLabel(plan.impl_name());
}

// AdamW's memory traffic alone: p, g, m, v read, p, m, v written back (regular stores), each value
// unchanged (x + g * 0, the zero read at run time), over the threads in the step's chunks.
__attribute__((target("avx512f"))) void adamw_pattern_range(float* p, const float* g, float* m, float* v, int64_t i0,
                                                            int64_t i1, float zero) {
    const __m512 z = _mm512_set1_ps(zero);
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        const __m512 gz = _mm512_mul_ps(_mm512_loadu_ps(g + i), z);
        _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), gz));
        _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), gz));
        _mm512_storeu_ps(p + i, _mm512_add_ps(_mm512_loadu_ps(p + i), gz));
    }
    for (; i < i1; ++i) {
        const float gz = g[i] * zero;
        m[i] += gz;
        v[i] += gz;
        p[i] += gz;
    }
}
void adamw_pattern(float* p, const float* g, float* m, float* v, int64_t n) {
    static volatile float zero = 0.0f;
    const float z = zero;
    const int64_t blocks = (n + 63) / 64;  // run_optim's chunks
    xk::detail::parallel_for(blocks, 1024, [&](int64_t b0, int64_t b1) {
        adamw_pattern_range(p, g, m, v, b0 * 64, std::min(n, b1 * 64), z);
    });
}

// Fused AdamW step over n f32 parameters (p, g, m, v: 28 bytes moved per element: 16 read, 12
// written) beside the copy yardstick interleaved (Copy%), and SGD with momentum on bf16 split
// params (p_hi, p_lo, g bf16, b: 10 read + 8 written).
// kind: 0 AdamW f32, 1 SGD momentum split bf16, 2 Lamb f32 (two passes: 24 + 16 = 40 B/element),
// 3 Lamb split bf16 params + bf16 grads (22 + 16 = 38 B/element).
void BM_optim(benchmark::State& state, int kind, int nt) {
    const bool adamw = kind == 0, lamb = kind >= 2;
    xk::bench::ScopedThreads threads(nt);
    const int64_t n = xk::bench::env_int("XK_BENCH_OPTIM_N", 100000000);
    static std::map<int64_t, std::vector<xk::bench::AlignedArray<float>>> bufs;
    auto& b = bufs[n];
    if (b.empty())
        for (int i = 0; i < 4; ++i) {
            b.push_back(xk::bench::alloc_aligned<float>(static_cast<size_t>(n)));
            xk::bench::fill_value(b.back().get(), static_cast<size_t>(n), i == 0 ? 0.5f : (i == 1 ? 1e-3f : 0.0f));
        }
    xk::OptimTensors t;
    t.n = n;
    int64_t step = 1;
    double bytes;
    if (adamw || kind == 2) {
        t.param = b[0].get();
        t.grad = b[1].get();
        bytes = (adamw ? 28.0 : 40.0) * static_cast<double>(n);
    } else {  // split params: the halves and the bf16 grad carved out of the same buffers
        t.param_type = xk::OptimParamType::bf16_split;
        t.param = b[0].get();
        t.param_lo = reinterpret_cast<uint16_t*>(b[0].get()) + n;
        t.grad_dtype = xk::DType::bf16;
        t.grad = b[1].get();
        bytes = (lamb ? 38.0 : 18.0) * static_cast<double>(n);
    }
    auto run = [&] {
        if (lamb) {
            xk::LambOptions o;
            o.weight_decay = 1e-2;
            xk::lamb_step(o, t, b[2].get(), b[3].get(), step++);
        } else if (adamw) {
            xk::AdamOptions o;
            o.adamw = true;
            o.weight_decay = 1e-2;
            xk::adam_step(o, t, b[2].get(), b[3].get(), nullptr, step++);
        } else {
            xk::SgdOptions o;
            o.lr = 1e-3;
            o.momentum = 0.9;
            xk::sgd_step(o, t, b[2].get(), step++);
        }
    };
    run();  // warm-up (first touch of the split halves / states, outside the timing)
    if (!adamw) {
        xk::bench::CopyYardstick copy(state, true, bytes);
        for (auto _ : state) {
            copy.begin();
            run();
            copy.end();
        }
        copy.finish();
        xk::bench::set_gbps(state, bytes);
        return;
    }
    // AdamW: the copy, and Stream% = vs the step's own access pattern on the same arrays (p, g, m, v
    // read, p, m, v written back with regular stores, no arithmetic to speak of: adamw_pattern),
    // both interleaved. The copy streams one array into another; how fast four read streams and
    // three write-back streams run depends on where the arrays lie relative to each other (Zen 4, 1
    // thread: the pattern at 29.5 GB/s with the four arrays 2 MiB-aligned, 55 GB/s 8 KiB apart).
    xk::bench::InPhase ph(state);
    ph.add("Copy%", "CopyGBPS", bytes, [bytes] {
        return 2.0 * static_cast<double>(xk::bench::detail::copy_pool().copy(static_cast<int64_t>(bytes / 8), false)) * 4;
    });
    ph.add("Stream%", "StreamGBPS", bytes, [&] {
        adamw_pattern(b[0].get(), b[1].get(), b[2].get(), b[3].get(), n);
        return bytes;
    });
    (void)xk::bench::detail::copy_pool();
    for (auto _ : state) {
        ph.begin();
        run();
        ph.end();
    }
    ph.finish();
    xk::bench::set_gbps(state, bytes);
}

// Lookup (F.embedding) of the same 204800 indices: 204800 x D rows written (GBPS = gathered bytes).
void BM_lookup(benchmark::State& state, int64_t dim, bool zipf, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t E = kTableBytes / (dim * 4);
    const auto& idx = indices(E, zipf);
    xk::EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    const int64_t n = kBags * kPool;
    static std::map<int64_t, xk::bench::AlignedArray<float>> outs;  // 64-byte aligned (as a tensor's storage)
    auto& out = outs[dim];
    if (!out) out = xk::bench::alloc_aligned<float>(static_cast<size_t>(n * dim));
    xk::embedding(d, xk::EmbeddingArgs{n, table(), idx.data(), out.get()});  // first touch of out, untimed
    for (auto _ : state) {
        xk::embedding(d, xk::EmbeddingArgs{n, table(), idx.data(), out.get()});
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(n * dim * 4));
}

// The lookup's limit: the same rows gathered and written to out[i] (a loop that writes what it
// reads), the rows ahead prefetched (as gather_bags), the rows split evenly over the threads; the stores
// non-temporal (nt) or regular. dim a multiple of 16, out 64-byte aligned.
template <bool NT>
__attribute__((target("avx512f"))) void gather_store_rows(const float* t, const int64_t* idx, int64_t dim, int64_t i0,
                                                          int64_t i1, float* out) {
    const int nv = static_cast<int>(dim / 16);
    const bool l2 = xk::detail::embedding_bag_prefetch_l2();
    const int64_t dist = xk::detail::embedding_bag_prefetch_rows(dim * 4);
    for (int64_t i = i0; i < i1; ++i) {
        if (dist > 0 && i + dist < i1) {
            const char* p = reinterpret_cast<const char*>(t + idx[i + dist] * dim);
            for (int64_t l = 0; l < dim * 4; l += 64) {
                if (l2) _mm_prefetch(p + l, _MM_HINT_T1);
                else _mm_prefetch(p + l, _MM_HINT_T0);
            }
        }
        const float* r = t + idx[i] * dim;
        float* o = out + i * dim;
        for (int v = 0; v < nv; ++v) {
            if (NT) _mm512_stream_ps(o + 16 * v, _mm512_loadu_ps(r + 16 * v));
            else _mm512_storeu_ps(o + 16 * v, _mm512_loadu_ps(r + 16 * v));
        }
    }
    if (NT) _mm_sfence();
}

void BM_lookup_limit(benchmark::State& state, int64_t dim, bool zipf, bool nt_stores, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t E = kTableBytes / (dim * 4);
    const auto& idx = indices(E, zipf);
    const int64_t n = kBags * kPool;
    static std::map<int64_t, xk::bench::AlignedArray<float>> outs;
    auto& out = outs[dim];
    if (!out) out = xk::bench::alloc_aligned<float>(static_cast<size_t>(n * dim));
    const float* t = table();
    auto run = [&] {
        xk::detail::parallel_for(n, 256, [&](int64_t i0, int64_t i1) {
            if (nt_stores) gather_store_rows<true>(t, idx.data(), dim, i0, i1, out.get());
            else gather_store_rows<false>(t, idx.data(), dim, i0, i1, out.get());
        });
    };
    run();
    for (auto _ : state) {
        run();
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(n * dim * 4));
}

// One training step of a table: forward (sum) + backward fused with SGD (lr 1e-6, the values
// barely move), grad_out = the forward output. GBPS counts the gathered rows once (as the
// forward rows) so the time compares directly with the torch row (forward + backward + sparse SGD).
void BM_train(benchmark::State& state, int64_t dim, bool zipf, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t E = kTableBytes / (dim * 4);
    const auto& idx = indices(E, zipf);
    xk::EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    const xk::EmbeddingBagPlan plan(d);
    std::vector<float> out(static_cast<size_t>(kBags * dim));
    xk::EmbeddingBagArgs a;
    a.num_bags = kBags;
    a.num_indices = kBags * kPool;
    a.table = table();
    a.indices = idx.data();
    a.offsets = offsets().data();
    xk::EmbeddingBagUpdate u;
    u.lr = 1e-6f;
    for (auto _ : state) {
        a.out = out.data();
        plan.run(a);
        a.out = nullptr;
        xk::embedding_bag_backward_update(d, a, out.data(), u);
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(kBags * kPool * dim * 4));
}

// The backward fused with SGD alone, grad_out fixed (lr 1e-6: the table barely moves).
void BM_backward(benchmark::State& state, int64_t dim, bool zipf, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t E = kTableBytes / (dim * 4);
    const auto& idx = indices(E, zipf);
    xk::EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    std::vector<float> go(static_cast<size_t>(kBags * dim));
    for (size_t i = 0; i < go.size(); ++i) go[i] = static_cast<float>(xk::bench::detail::splitmix64(i) >> 40) * 0x1.0p-24f - 0.5f;
    xk::EmbeddingBagArgs a;
    a.num_bags = kBags;
    a.num_indices = kBags * kPool;
    a.table = table();
    a.indices = idx.data();
    a.offsets = offsets().data();
    xk::EmbeddingBagUpdate u;
    u.lr = 1e-6f;
    for (auto _ : state) {
        xk::embedding_bag_backward_update(d, a, go.data(), u);
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(kBags * kPool * dim * 4));
}

// 26 tables (DLRM's Criteo count) of dim 64, slices of the 1 GiB table, 2048 bags each with
// pooling factors 1, 5, 9, ... 101 (table t: 1 + 4t): the merged plan (one parallel region over
// every bag of every table) beside 26 separate plan runs writing the same merged output columns,
// and the limit: the plain gather loop (gather_bags) over the same 2.7 M rows, writing the same
// merged output rows.
struct MergedData {
    static constexpr int T = 26;
    static constexpr int64_t dim = 64;
    int64_t E = 0;
    std::vector<std::vector<int64_t>> idx, off;
    std::vector<int64_t> flat, flat_off;  // every table's rows as rows of the whole table, bags t-major
};
const MergedData& merged_data() {
    static const MergedData m = [] {
        MergedData x;
        const int64_t rows_total = kTableBytes / (MergedData::dim * 4);
        x.E = rows_total / MergedData::T;
        for (int t = 0; t < MergedData::T; ++t) {
            const int64_t pool = 1 + 4 * t;
            std::vector<int64_t> iv(static_cast<size_t>(kBags * pool)), ov(kBags);
            for (int64_t i = 0; i < kBags * pool; ++i)
                iv[i] = static_cast<int64_t>(xk::bench::detail::splitmix64(0x77u * (t + 1) + static_cast<uint64_t>(i)) %
                                             static_cast<uint64_t>(x.E));
            for (int64_t b = 0; b < kBags; ++b) {
                ov[b] = b * pool;
                x.flat_off.push_back(static_cast<int64_t>(x.flat.size()) + b * pool);
            }
            for (int64_t v : iv) x.flat.push_back(static_cast<int64_t>(t) * x.E + v);
            x.idx.push_back(std::move(iv));
            x.off.push_back(std::move(ov));
        }
        x.flat_off.push_back(static_cast<int64_t>(x.flat.size()));
        return x;
    }();
    return m;
}

void gather_bags(const float* t, const int64_t* idx, const int64_t* off, int64_t b0, int64_t b1, float* out,
                 int64_t dim, int64_t ld_out, int64_t bpt);  // (below: the gather loop)

// mode 0: merged, 1: separate, 2: the gather loop
void BM_merged(benchmark::State& state, int mode, int nt) {
    xk::bench::ScopedThreads threads(nt);
    constexpr int T = MergedData::T;
    constexpr int64_t dim = MergedData::dim;
    const MergedData& md = merged_data();
    const int64_t E = md.E;
    std::vector<xk::EmbeddingBagDesc> ds(T);
    std::vector<xk::EmbeddingBagArgs> args(T);
    int64_t n_rows = 0;
    for (int t = 0; t < T; ++t) {
        ds[t].num_embeddings = E;
        ds[t].dim = dim;
        args[t].num_bags = kBags;
        args[t].num_indices = static_cast<int64_t>(md.idx[t].size());
        args[t].table = table() + static_cast<int64_t>(t) * E * dim;
        args[t].indices = md.idx[t].data();
        args[t].offsets = md.off[t].data();
        n_rows += args[t].num_indices;
    }
    std::vector<float> out(static_cast<size_t>(kBags * T * dim));
    const xk::EmbeddingBagMultiPlan mp(ds);
    std::vector<xk::EmbeddingBagPlan> plans;
    for (int t = 0; t < T; ++t) {
        xk::EmbeddingBagDesc d = ds[t];
        d.ld_out = T * dim;
        plans.emplace_back(d);
    }
    // The gather loop's chunks: bags split evenly by rows (+1 a bag), one per thread.
    const int64_t nb = T * kBags;
    for (auto _ : state) {
        if (mode == 0) {
            mp.run(args.data(), T, out.data());
        } else if (mode == 1) {
            for (int t = 0; t < T; ++t) {
                xk::EmbeddingBagArgs a = args[t];
                a.out = out.data() + t * dim;
                plans[t].run(a);
            }
        } else {
            const int64_t n = xk::get_num_threads();
            xk::detail::parallel_for(n, 1, [&](int64_t c0, int64_t c1) {
                auto split = [&](int64_t c) {
                    const int64_t target = (md.flat_off[nb] + nb) * c / n;
                    int64_t lo = 0, hi = nb;
                    while (lo < hi) {
                        const int64_t mid = (lo + hi) / 2;
                        if (md.flat_off[mid] + mid >= target) hi = mid;
                        else lo = mid + 1;
                    }
                    return lo;
                };
                const int64_t b0 = split(c0), b1 = split(c1);
                // (the merged output: bag b of table t at row b, columns t * dim)
                if (b1 > b0) gather_bags(table(), md.flat.data(), md.flat_off.data(), b0, b1, out.data(), dim, T * dim, kBags);
            });
        }
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(n_rows * dim * 4));
}

// The limit: each bag's rows summed into registers (NV vectors: dim 16 NV, rows of NV lines), the
// rows of embedding_bag_prefetch_rows() indices ahead prefetched (into L1, or into L2 where the
// kernels do: embedding_bag_prefetch_l2), across bag boundaries up to the chunk's end, the lines
// unrolled and no bound check per row; bags [b0, b1), bag i's rows idx[off[i], off[i+1]), its sum
// written where the op writes it: tables of bpt bags each side by side, bag i to
// out + (i % bpt) * ld_out + (i / bpt) * dim (one table: bpt >= the bags).
template <int NV, bool L2>
__attribute__((target("avx512f"))) void gather_bags(const float* t, const int64_t* idx, const int64_t* off, int64_t b0,
                                                    int64_t b1, float* out, int64_t ld_out, int64_t bpt, int64_t dist) {
    constexpr int64_t dim = NV * 16;
    const int64_t j_end = off[b1];
    for (int64_t b = b0; b < b1; ++b) {
        __m512 acc[NV];
        for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
        const int64_t e = off[b + 1], jpf = dist > 0 ? std::max(off[b], std::min(e, j_end - dist)) : off[b];
        int64_t j = off[b];
        for (; j < jpf; ++j) {
            const char* p = reinterpret_cast<const char*>(t + idx[j + dist] * dim);
            for (int l = 0; l < NV; ++l) _mm_prefetch(p + 64 * l, L2 ? _MM_HINT_T1 : _MM_HINT_T0);
            const float* r = t + idx[j] * dim;
            for (int v = 0; v < NV; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(r + 16 * v));
        }
        for (; j < e; ++j) {
            const float* r = t + idx[j] * dim;
            for (int v = 0; v < NV; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(r + 16 * v));
        }
        float* o = out + (b % bpt) * ld_out + (b / bpt) * dim;
        for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + 16 * v, acc[v]);
    }
}
// dim 64 or 128.
void gather_bags(const float* t, const int64_t* idx, const int64_t* off, int64_t b0, int64_t b1, float* out,
                 int64_t dim, int64_t ld_out, int64_t bpt) {
    const bool l2 = xk::detail::embedding_bag_prefetch_l2();
    const int64_t dist = xk::detail::embedding_bag_prefetch_rows(dim * 4);
    if (dim == 64) (l2 ? gather_bags<4, true> : gather_bags<4, false>)(t, idx, off, b0, b1, out, ld_out, bpt, dist);
    else (l2 ? gather_bags<8, true> : gather_bags<8, false>)(t, idx, off, b0, b1, out, ld_out, bpt, dist);
}

void BM_limit(benchmark::State& state, int64_t dim, bool zipf, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t E = kTableBytes / (dim * 4);
    const auto& idx = indices(E, zipf);
    std::vector<float> out(static_cast<size_t>(kBags * dim));
    const float* t = table();
    for (auto _ : state) {
        xk::detail::parallel_for(kBags, 1, [&](int64_t b0, int64_t b1) {
            gather_bags(t, idx.data(), offsets_end().data(), b0, b1, out.data(), dim, dim, kBags);
        });
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(kBags * kPool * dim * 4));
}

// DLRM interaction over 2048 samples of 27 features (the dense one + 26 merged-bag columns).
void BM_interaction(benchmark::State& state, int64_t dim, bool bf16, bool backward, int nt) {
    xk::bench::ScopedThreads threads(nt);
    constexpr int64_t N = 27, B = 2048;
    const int64_t es = bf16 ? 2 : 4;
    xk::InteractionDesc d;
    d.num_features = N;
    d.dim = dim;
    d.dtype = bf16 ? xk::DType::bf16 : xk::DType::f32;
    const xk::InteractionPlan plan(d);
    const int64_t od = plan.out_dim();
    auto mk = [&](int64_t elems, float scale) {
        std::vector<uint32_t> v(static_cast<size_t>(elems * es + 3) / 4);
        for (size_t i = 0; i < v.size(); ++i) {
            const float f = (static_cast<float>(xk::bench::detail::splitmix64(i * 7 + elems) >> 40) * 0x1.0p-24f - 0.5f) * scale;
            if (bf16) {
                const uint16_t h = xk::bf16::from_float(f);
                v[i] = static_cast<uint32_t>(h) | (static_cast<uint32_t>(h) << 16);
            } else {
                std::memcpy(&v[i], &f, 4);
            }
        }
        return v;
    };
    auto dense = mk(B * dim, 1.0f), merged = mk(B * (N - 1) * dim, 1.0f), gout = mk(B * od, 1e-2f);
    std::vector<uint32_t> out(static_cast<size_t>(B * od * es + 3) / 4), gd(static_cast<size_t>(B * N * dim * es + 3) / 4);
    std::vector<const void*> fp(N);
    std::vector<int64_t> ld(N);
    std::vector<void*> gp(N);
    for (int64_t f = 0; f < N; ++f) {
        fp[f] = f == 0 ? static_cast<const void*>(dense.data())
                       : static_cast<const void*>(reinterpret_cast<const char*>(merged.data()) + (f - 1) * dim * es);
        ld[f] = f == 0 ? dim : (N - 1) * dim;
        gp[f] = reinterpret_cast<char*>(gd.data()) + f * B * dim * es;
    }
    xk::InteractionArgs a;
    a.batch = B;
    a.features = fp.data();
    a.ld_features = ld.data();
    a.out = out.data();
    xk::InteractionBackwardArgs ba;
    ba.batch = B;
    ba.features = fp.data();
    ba.ld_features = ld.data();
    ba.grad_out = gout.data();
    ba.grad_features = gp.data();
    for (auto _ : state) {
        plan.forward(a);
        if (backward) plan.backward(ba);
        benchmark::ClobberMemory();
    }
    const double fwd = static_cast<double>(B * (N * dim + od) * es);
    xk::bench::set_gbps(state, backward ? fwd + static_cast<double>(B * (2 * N * dim + od) * es) : fwd);
    state.SetLabel(plan.impl_name());
}

const bool registered = [] {
    if (!xk::isa_supported(xk::Isa::avx512)) return true;  // the limit loop is AVX-512
    for (int64_t dim : {64, 128})
        for (bool zipf : {false, true})
            for (int nt : xk::bench::thread_counts()) {
                const std::string shape = "dim:" + std::to_string(dim) + (zipf ? "_zipf1.05" : "_uniform");
                const std::string ntp = "nt:" + std::to_string(nt);
                benchmark::RegisterBenchmark(
                    xk::bench::join_name({"embedding_bag", "f32", "xk", "gather_limit_" + shape, ntp}).c_str(), BM_limit,
                    dim, zipf, nt)
                    ->UseRealTime();
                benchmark::RegisterBenchmark(xk::bench::join_name({"embedding_bag", "f32", "xk", "sum_" + shape, ntp}).c_str(),
                                             BM_bag, dim, zipf, false, nt)
                    ->UseRealTime();
                benchmark::RegisterBenchmark(xk::bench::join_name({"embedding_bag", "bf16", "xk", "sum_" + shape, ntp}).c_str(),
                                             BM_bag, dim, zipf, true, nt)
                    ->UseRealTime();
                benchmark::RegisterBenchmark(xk::bench::join_name({"embedding_bag", "u8", "xk", "sum_int8rows_" + shape, ntp}).c_str(),
                                             BM_qbag, dim, zipf, xk::EmbeddingRowQuant::int8_rowwise, nt)
                    ->UseRealTime();
                benchmark::RegisterBenchmark(xk::bench::join_name({"embedding_bag", "u4", "xk", "sum_int4rows_" + shape, ntp}).c_str(),
                                             BM_qbag, dim, zipf, xk::EmbeddingRowQuant::int4_rowwise, nt)
                    ->UseRealTime();
            }
    for (int64_t dim : {64, 128})
        for (bool zipf : {false, true})
            for (int nt : xk::bench::thread_counts()) {
                const std::string shape = "dim:" + std::to_string(dim) + (zipf ? "_zipf1.05" : "_uniform");
                benchmark::RegisterBenchmark(
                    xk::bench::join_name({"embedding_train", "f32", "xk", "sum_sgd_" + shape, "nt:" + std::to_string(nt)}).c_str(),
                    BM_train, dim, zipf, nt)
                    ->UseRealTime();
                benchmark::RegisterBenchmark(
                    xk::bench::join_name({"embedding_backward", "f32", "xk", "sum_sgd_" + shape, "nt:" + std::to_string(nt)}).c_str(),
                    BM_backward, dim, zipf, nt)
                    ->UseRealTime();
                benchmark::RegisterBenchmark(
                    xk::bench::join_name({"embedding_lookup", "f32", "xk", "rows_" + shape, "nt:" + std::to_string(nt)}).c_str(),
                    BM_lookup, dim, zipf, nt)
                    ->UseRealTime();
                for (bool nts : {true, false})
                    benchmark::RegisterBenchmark(
                        xk::bench::join_name({"embedding_lookup", "f32", "xk",
                                              std::string(nts ? "gather_store_nt_limit_" : "gather_store_limit_") + shape,
                                              "nt:" + std::to_string(nt)})
                            .c_str(),
                        BM_lookup_limit, dim, zipf, nts, nt)
                        ->UseRealTime();
            }
    for (int nt : xk::bench::thread_counts())
        for (int mode : {0, 1, 2})
            benchmark::RegisterBenchmark(
                xk::bench::join_name({"embedding_merged", "f32", "xk",
                                      std::string(mode == 0 ? "merged" : mode == 1 ? "separate" : "gather_limit") + "_26x2048_dim:64",
                                      "nt:" + std::to_string(nt)})
                    .c_str(),
                BM_merged, mode, nt)
                ->UseRealTime();
    const int64_t on = xk::bench::env_int("XK_BENCH_OPTIM_N", 100000000);
    const std::string ns = on == 100000000 ? "1e8" : std::to_string(on);
    for (int nt : xk::bench::thread_counts()) {
        const std::string ntp = "nt:" + std::to_string(nt);
        benchmark::RegisterBenchmark(xk::bench::join_name({"optim", "f32", "xk", "adamw_n:" + ns, ntp}).c_str(), BM_optim, 0, nt)
            ->UseRealTime();
        benchmark::RegisterBenchmark(xk::bench::join_name({"optim", "bf16", "xk", "sgd_momentum_split_n:" + ns, ntp}).c_str(),
                                     BM_optim, 1, nt)
            ->UseRealTime();
        benchmark::RegisterBenchmark(xk::bench::join_name({"optim", "f32", "xk", "lamb_n:" + ns, ntp}).c_str(), BM_optim, 2, nt)
            ->UseRealTime();
        benchmark::RegisterBenchmark(xk::bench::join_name({"optim", "bf16", "xk", "lamb_split_n:" + ns, ntp}).c_str(),
                                     BM_optim, 3, nt)
            ->UseRealTime();
    }
    for (int64_t dim : {64, 128})
        for (bool bf : {false, true})
            for (bool bwd : {false, true})
                for (int nt : xk::bench::thread_counts())
                    benchmark::RegisterBenchmark(
                        xk::bench::join_name({"interaction", bf ? "bf16" : "f32", "xk",
                                              std::string(bwd ? "fwdbwd" : "fwd") + "_n:27_dim:" + std::to_string(dim) + "_b:2048",
                                              "nt:" + std::to_string(nt)})
                            .c_str(),
                        BM_interaction, dim, bf, bwd, nt)
                        ->UseRealTime();
    return true;
}();

}  // namespace
