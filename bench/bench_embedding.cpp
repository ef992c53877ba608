// Embedding bag forward (issue 30) beside the limit: a plain loop that gathers the same random
// rows (sums each bag's rows into registers, prefetching 16 rows ahead), in the same process.
//
//   embedding_bag/f32/xk/sum_dim:<D>_<dist>/nt:<N>       xk::EmbeddingBagPlan, f32 table, mode sum
//   embedding_bag/bf16/xk/sum_dim:<D>_<dist>/nt:<N>      bf16 table (f32 out)
//   embedding_bag/f32/xk/gather_limit_dim:<D>_<dist>/nt:<N>   the plain gather loop (f32)
//
// One 1 GiB table (2^28 f32 = 2^26 rows of dim 64 or 2^27 rows... viewed as E = 2^28 / D rows of
// D floats; the bf16 rows view the same bytes as 2^29 / D rows), 2048 bags of 100 indices,
// uniform or Zipf(1.05) over the rows (ranks scattered by an odd multiplier modulo E), i64
// indices. GBPS = bytes of gathered rows per second (num_indices * D * element size; the output,
// 2048 x D, is not counted). PyTorch's F.embedding_bag on the same shapes: bench/torch_peer.py.
#include <cmath>
#include <map>
#include <string>

#include "bench_util.hpp"
#include "xk/embedding_bag.hpp"

namespace {

constexpr int64_t kTableBytes = int64_t(1) << 30;
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

// 2048 x 100 indices over E rows: uniform, or Zipf(1.05) ranks (inverse CDF) scattered over E.
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

// The limit: each bag's rows summed into registers, rows 16 indices ahead prefetched, bags split
// evenly over the threads. dim is a multiple of 16.
__attribute__((target("avx512f"))) void gather_rows(const float* t, const int64_t* idx, int64_t dim, int64_t b0,
                                                    int64_t b1, float* out) {
    const int64_t j_end = b1 * kPool;
    for (int64_t b = b0; b < b1; ++b) {
        __m512 acc[8];
        const int nv = static_cast<int>(dim / 16);
        for (int v = 0; v < 8; ++v) acc[v] = _mm512_setzero_ps();
        for (int64_t j = b * kPool; j < (b + 1) * kPool; ++j) {
            if (j + 16 < j_end) {
                const char* p = reinterpret_cast<const char*>(t + idx[j + 16] * dim);
                for (int64_t l = 0; l < dim * 4; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
            }
            const float* r = t + idx[j] * dim;
            for (int v = 0; v < nv; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_loadu_ps(r + 16 * v));
        }
        for (int v = 0; v < nv; ++v) _mm512_storeu_ps(out + b * dim + 16 * v, acc[v]);
    }
}

void BM_limit(benchmark::State& state, int64_t dim, bool zipf, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t E = kTableBytes / (dim * 4);
    const auto& idx = indices(E, zipf);
    std::vector<float> out(static_cast<size_t>(kBags * dim));
    const float* t = table();
    for (auto _ : state) {
        xk::detail::parallel_for(kBags, 1, [&](int64_t b0, int64_t b1) { gather_rows(t, idx.data(), dim, b0, b1, out.data()); });
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(kBags * kPool * dim * 4));
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
            }
    return true;
}();

}  // namespace
