// bf16 decode GEMM: y[M x N] = x[M x K] * W (bf16 weights, bf16 x, f32 y), M = 1 and 16, the LLM
// Linear shapes (N, K) = (4096, 4096), (11008, 4096), (4096, 11008), weights from DRAM: each
// provider rotates over ceil(1 GiB / weight bytes) copies of the bf16 weight (XK_BENCH_ROTATE_MB).
//   gemm/bf16/xk/<MxNxK>/decode:packed/nt:<t>    GemmPlan::run(args, PackedB)
//   gemm/bf16/xk/<MxNxK>/decode:BT/nt:<t>        unpacked W[N x K] (trans_b = T)
//   gemm/bf16/xk/<MxNxK>/decode:BN/nt:<t>        unpacked [K x N] (trans_b = N)
//   gemm/bf16/onednn/<MxNxK>/decode:packed|BT|BN  matmul bf16 x bf16 -> f32 (weights: its preferred
//                                                format reordered once / tag ba / tag ab)
// Counters: GFLOPS, GBPS (weight bytes, bf16), BW% (weight bytes over the timed loop's real time
// against the best of 3 passes of a vector read of 1 GiB split over the same threads, measured in
// this process before the weights are allocated), and for M = 16 PEAK% against the FMA peak of
// the same threads (a 12-accumulator zmm FMA loop timed here).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_util.hpp"
#include "common/parallel.hpp"
#include "oneapi/dnnl/dnnl.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

namespace {

struct Shape {
    int64_t M, N, K;
    std::string name() const { return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K); }
    double flops() const { return 2.0 * double(M) * double(N) * double(K); }
};

const std::vector<Shape> kShapes = {{1, 4096, 4096},  {1, 11008, 4096},  {1, 4096, 11008},
                                    {16, 4096, 4096}, {16, 11008, 4096}, {16, 4096, 11008}};

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__attribute__((target("avx512f"))) double sum_range(const float* p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    double r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; ++i) r += p[i];
    return r;
}

// Read bandwidth (GB/s) of `threads` threads over 1 GiB, best of 3 passes; cached.
double read_bandwidth(int threads) {
    static std::map<int, double> bw;
    if (bw.count(threads)) return bw[threads];
    const size_t bytes = size_t(1) << 30, n = bytes / 4;
    auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    for (size_t i = 0; i < n; ++i) p[i] = 1.0f;
    xk::set_num_threads(threads);
    double best = 0, sink = 0;
    for (int rep = 0; rep < 3; ++rep) {
        std::vector<double> part(static_cast<size_t>(threads), 0.0);
        const double t0 = now_s();
        xk::detail::parallel_for(threads, 1, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
                const size_t lo = n / size_t(threads) / 64 * 64 * size_t(t);
                const size_t hi = t + 1 == threads ? n : n / size_t(threads) / 64 * 64 * size_t(t + 1);
                part[size_t(t)] = sum_range(p + lo, hi - lo);
            }
        });
        best = std::max(best, double(bytes) / (now_s() - t0) * 1e-9);
        for (double v : part) sink += v;
    }
    benchmark::DoNotOptimize(sink);
    std::free(p);
    return bw[threads] = best;
}

// zmm FMA peak (GFLOP/s) of `threads` threads; cached.
__attribute__((target("avx512f"))) double fma_loop(int64_t iters) {
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i) * 1e-3f);
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
    for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < 12; ++i) {
            a[i] = _mm512_fmadd_ps(a[i], x, y);
            __asm__ volatile("" : "+v"(a[i]));
        }
    double r = 0;
    for (int i = 0; i < 12; ++i) r += _mm512_reduce_add_ps(a[i]);
    return r;
}
double fma_peak(int threads) {
    static std::map<int, double> pk;
    if (pk.count(threads)) return pk[threads];
    xk::set_num_threads(threads);
    const int64_t iters = 2000000;
    double best = 0, sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
        const double t0 = now_s();
        xk::detail::parallel_for(threads, 1, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) sink += fma_loop(iters);
        });
        best = std::max(best, double(threads) * double(iters) * 12 * 32 / (now_s() - t0) * 1e-9);
    }
    benchmark::DoNotOptimize(sink);
    return pk[threads] = best;
}

struct Weights {
    std::string key;
    std::vector<std::vector<xk::bf16>> w;  // copies of W[N x K] (also read as [K x N] for BN)
    std::vector<xk::bf16> x;
};
Weights& weights(const Shape& s) {
    static Weights r;
    if (r.key == s.name()) return r;
    r.w.clear();
    r.w.shrink_to_fit();
    r.key = s.name();
    std::mt19937_64 g(777);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<xk::bf16> one(size_t(s.N * s.K));
    for (auto& v : one) v = xk::bf16(u(g));
    const size_t bytes = one.size() * 2, copies = (xk::bench::rotate_bytes() + bytes - 1) / bytes;
    r.w.assign(copies, one);
    r.x.resize(size_t(s.M * s.K));
    for (auto& v : r.x) v = xk::bf16(u(g));
    return r;
}

void counters(benchmark::State& state, const Shape& s, int threads, double sec, const std::string& label) {
    const double wbytes = double(s.N) * double(s.K) * 2.0, it = double(state.iterations());
    state.counters["GFLOPS"] = benchmark::Counter(s.flops() * 1e-9 * it, benchmark::Counter::kIsRate);
    state.counters["GBPS"] = benchmark::Counter(wbytes * 1e-9 * it, benchmark::Counter::kIsRate);
    if (sec > 0 && it > 0) {
        state.counters["BW%"] = 100.0 * wbytes * it / sec * 1e-9 / read_bandwidth(threads);
        if (s.M > 1) state.counters["PEAK%"] = 100.0 * s.flops() * it / sec * 1e-9 / fma_peak(threads);
    }
    state.SetLabel(label);
}

enum class Mode { packed, bt, bn };
const char* mode_name(Mode m) { return m == Mode::packed ? "packed" : m == Mode::bt ? "BT" : "BN"; }

void bench_xk(benchmark::State& state, Shape s, int threads, Mode mode) {
    (void)read_bandwidth(threads);
    if (s.M > 1) (void)fma_peak(threads);
    Weights& r = weights(s);
    xk::bench::set_threads(threads);
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    d.a_type = d.b_type = xk::DType::bf16;
    d.trans_b = mode == Mode::bn ? xk::Trans::N : xk::Trans::T;
    const xk::GemmPlan plan(d);
    std::vector<xk::PackedB> packed;
    if (mode == Mode::packed)
        for (const auto& w : r.w) packed.push_back(plan.pack_b(w.data()));
    std::vector<float> C(size_t(s.M * s.N));
    xk::GemmArgs a;
    a.A = r.x.data(), a.C = C.data();
    size_t i = 0;
    const double t0 = now_s();
    for (auto _ : state) {
        if (mode == Mode::packed) {
            plan.run(a, packed[i]);
        } else {
            a.B = r.w[i].data();
            plan.run(a);
        }
        benchmark::ClobberMemory();
        i = i + 1 == r.w.size() ? 0 : i + 1;
    }
    counters(state, s, threads, now_s() - t0, std::string(plan.impl_name()) + " x" + std::to_string(r.w.size()));
}

void bench_onednn(benchmark::State& state, Shape s, int threads, Mode mode) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    (void)read_bandwidth(threads);
    if (s.M > 1) (void)fma_peak(threads);
    Weights& r = weights(s);
    xk::bench::set_threads(threads);
    std::vector<float> C(size_t(s.M * s.N));
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, dt::bf16, tag::ab), c_md({s.M, s.N}, dt::f32, tag::ab);
        const dnnl::memory::desc w_plain({s.K, s.N}, dt::bf16, mode == Mode::bn ? tag::ab : tag::ba);
        const dnnl::memory::desc w_md = mode == Mode::packed ? dnnl::memory::desc({s.K, s.N}, dt::bf16, tag::any) : w_plain;
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, c_md), eng);
        const dnnl::matmul prim(pd);
        std::vector<dnnl::memory> ws;
        for (auto& w : r.w) {
            dnnl::memory plain(w_plain, eng, w.data());
            if (mode == Mode::packed && pd.weights_desc() != w_plain) {
                dnnl::memory m(pd.weights_desc(), eng);
                dnnl::reorder(plain, m).execute(strm, plain, m);
                strm.wait();
                ws.push_back(m);
            } else {
                ws.push_back(plain);
            }
        }
        dnnl::memory am(a_md, eng, r.x.data()), cm(c_md, eng, C.data());
        size_t i = 0;
        const double t0 = now_s();
        for (auto _ : state) {
            prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, ws[i]}, {DNNL_ARG_DST, cm}});
            strm.wait();
            i = i + 1 == ws.size() ? 0 : i + 1;
        }
        counters(state, s, threads, now_s() - t0, std::string(pd.impl_info_str()) + " x" + std::to_string(ws.size()));
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
    }
}

[[maybe_unused]] const bool g_registered = [] {
    for (const Shape& s : kShapes)
        for (int t : xk::bench::thread_counts())
            for (Mode m : {Mode::packed, Mode::bt, Mode::bn}) {
                const std::string tail = s.name() + "/decode:" + mode_name(m) + "/nt:" + std::to_string(t);
                benchmark::RegisterBenchmark(("gemm/bf16/xk/" + tail).c_str(),
                                             [=](benchmark::State& st) { bench_xk(st, s, t, m); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMicrosecond);
                benchmark::RegisterBenchmark(("gemm/bf16/onednn/" + tail).c_str(),
                                             [=](benchmark::State& st) { bench_onednn(st, s, t, m); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMicrosecond);
            }
    return true;
}();

}  // namespace
