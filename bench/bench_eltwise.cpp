// Level-1 vector ops: xk::axpby against OpenBLAS's cblas_saxpby (y = alpha*x + beta*y).
//
//   eltwise/f32/<xk|openblas>/axpby/n:4096/nt:1        cache-resident (32 KiB of operands)
//   eltwise/f32/<xk|openblas>/axpby/n:16777216/nt:<N>  DRAM: 128 MiB per (x, y) set, rotated over
//                                                       sets totalling >= XK_BENCH_ROTATE_MB
// GBPS counts 12 bytes per element (read x, read y, write y). nt:N sets xk's and OpenBLAS's
// thread counts (xk splits n over threads from 64 Ki elements; OpenBLAS 0.3.21 runs saxpby on
// one thread whatever its setting, which the nt:2 rows show).
#include <cblas.h>

#include <string>

#include "bench_util.hpp"
#include "xk/eltwise.hpp"

namespace {

enum class Provider { xk, openblas };

constexpr float kAlpha = 0.5f, kBeta = 0.5f;  // a convex combination: values stay in [1, 2)

void BM_axpby(benchmark::State& state, Provider provider, int64_t n, bool dram, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    // Shared by both providers and every call of one shape; y is rewritten in place, which keeps
    // its values in [1, 2) (alpha + beta == 1).
    xk::bench::RotatingBuffers& bufs = xk::bench::cached_rotating_buffers(
        "axpby/" + std::to_string(n) + (dram ? "/dram" : ""), {bytes, bytes}, dram ? xk::bench::rotate_bytes() : 0,
        [](xk::bench::RotatingBuffers& b) {
            b.fill_uniform<float>(0, 1.0, 2.0, 11);
            b.fill_uniform<float>(1, 1.0, 2.0, 12);
        });
    for (auto _ : state) {
        const size_t s = bufs.next();
        const float* x = bufs.get<float>(s, 0);
        float* y = bufs.get<float>(s, 1);
        if (provider == Provider::xk) {
            xk::axpby(n, kAlpha, x, kBeta, y);
        } else {
            cblas_saxpby(static_cast<blasint>(n), kAlpha, x, 1, kBeta, y, 1);
        }
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, 12.0 * static_cast<double>(n));
    if (dram) state.SetLabel(std::to_string(bufs.sets()) + " sets, " + std::to_string(bufs.total_bytes() >> 20) + " MiB");
}

const bool registered = [] {
    struct Case {
        int64_t n;
        bool dram;
    };
    const Case cases[] = {{4096, false}, {int64_t(1) << 24, true}};
    const std::pair<Provider, const char*> providers[] = {{Provider::xk, "xk"}, {Provider::openblas, "openblas"}};
    for (const Case& c : cases) {
        // The cache-resident case is below xk's threading grain: one thread only.
        const std::vector<int> threads = c.dram ? xk::bench::thread_counts() : std::vector<int>{1};
        for (int nt : threads) {
            for (const auto& p : providers) {
                const std::string name = xk::bench::join_name(
                    {"eltwise", "f32", p.second, "axpby", "n:" + std::to_string(c.n), "nt:" + std::to_string(nt)});
                benchmark::RegisterBenchmark(name.c_str(), BM_axpby, p.first, c.n, c.dram, nt)->UseRealTime();
            }
        }
    }
    return true;
}();

}  // namespace
