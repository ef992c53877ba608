// Strided batched GEMM: xk's one batched call beside the same products as separate calls and
// beside oneDNN's batched matmul (a 3-D matmul primitive), in one process, interleaved.
//
// Names: gemm_batched/<dtype>/xk/<batch>x<MxNxK>/threads:<t>
//   dtype     f32 (f32 x f32 -> f32) or bf16 (bf16 x bf16 -> f32)
//   shapes    the attention-shaped products: 96 x (128 x 128 x 64) (scores, Q K^T) and
//             96 x (128 x 64 x 128) (context, P V) — 8 sequences x 12 heads — row-major, items
//             packed one after another (A: batch x M x K, B: batch x K x N, C: batch x M x N)
//   threads   from XK_BENCH_THREADS (default 1,2): xk::set_num_threads and omp_set_num_threads
//             (oneDNN's OpenMP runtime, set before its primitive is created)
// Each iteration runs, in turn and each timed on its own: xk's batched plan (one GemmPlan::run),
// the same products as `batch` separate GemmPlan::run calls of a batch = 1 plan (what a caller
// does without the batch fields; every other iteration these two swap places), and oneDNN's matmul on 3-D memory descriptors {batch, M, K} x
// {batch, K, N} -> {batch, M, N} (tag abc). Alternating gives the three the same phases of a shared
// host. Manual time = xk's batched call. Counters: GFLOPS (xk batched), LOOP_GFLOPS (separate
// calls), ONEDNN_GFLOPS, batched/loop and batched/onednn (speed ratios, > 1: xk batched is faster).
// Before timing, the batched C is compared with the separate calls' (must be bit-identical) and
// with oneDNN's (max |diff| <= 1e-4 max(1, |C|max)): a mismatch is a SkipWithError.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_util.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

namespace {

namespace xb = xk::bench;

struct Shape {
    int64_t batch, M, N, K;
    std::string name() const {
        return std::to_string(batch) + "x" + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
    }
    double flops() const { return 2.0 * double(batch) * double(M) * double(N) * double(K); }
};

const std::vector<Shape> kShapes = {{96, 128, 128, 64}, {96, 128, 64, 128}};

enum class Kind { f32, bf16 };
const char* kind_name(Kind k) { return k == Kind::f32 ? "f32" : "bf16"; }

void bench_batched(benchmark::State& state, Kind k, Shape s, int threads) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    using clock = std::chrono::steady_clock;
    xb::set_threads(threads);
    const size_t na = size_t(s.batch * s.M * s.K), nb = size_t(s.batch * s.K * s.N), nc = size_t(s.batch * s.M * s.N);
    const size_t es = k == Kind::f32 ? 4 : 2;
    auto A = xb::alloc_aligned<unsigned char>(na * es), B = xb::alloc_aligned<unsigned char>(nb * es);
    if (k == Kind::f32) {
        xb::fill_uniform(reinterpret_cast<float*>(A.get()), na, -1.0, 1.0, 1);
        xb::fill_uniform(reinterpret_cast<float*>(B.get()), nb, -1.0, 1.0, 2);
    } else {
        xb::fill_uniform(reinterpret_cast<xk::bf16*>(A.get()), na, -1.0, 1.0, 1);
        xb::fill_uniform(reinterpret_cast<xk::bf16*>(B.get()), nb, -1.0, 1.0, 2);
    }
    std::vector<float> Cb(nc), Cl(nc), Co(nc);

    xk::GemmDesc d1;
    d1.M = s.M, d1.N = s.N, d1.K = s.K;
    if (k == Kind::bf16) d1.a_type = d1.b_type = xk::DType::bf16;
    xk::GemmDesc db = d1;
    db.batch = s.batch;
    db.batch_stride_a = s.M * s.K, db.batch_stride_b = s.K * s.N;  // C: packed (0)
    const xk::GemmPlan batched(db), single(d1);
    const xk::GemmArgs ab{A.get(), B.get(), Cb.data()};
    auto run_loop = [&] {
        for (int64_t i = 0; i < s.batch; ++i)
            single.run({A.get() + size_t(i * s.M * s.K) * es, B.get() + size_t(i * s.K * s.N) * es,
                        Cl.data() + i * s.M * s.N});
    };

    // oneDNN's batched matmul, if it can make one (bf16 needs AVX-512 there).
    std::string onednn_impl = "none";
    std::unique_ptr<dnnl::engine> eng;
    std::unique_ptr<dnnl::stream> strm;
    std::unique_ptr<dnnl::matmul> prim;
    std::unordered_map<int, dnnl::memory> margs;
    try {
        eng = std::make_unique<dnnl::engine>(dnnl::engine::kind::cpu, 0);
        strm = std::make_unique<dnnl::stream>(*eng);
        const dt t = k == Kind::f32 ? dt::f32 : dt::bf16;
        const dnnl::memory::desc a_md({s.batch, s.M, s.K}, t, tag::abc), b_md({s.batch, s.K, s.N}, t, tag::abc),
            c_md({s.batch, s.M, s.N}, dt::f32, tag::abc);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), *eng);
        onednn_impl = pd.impl_info_str();
        prim = std::make_unique<dnnl::matmul>(pd);
        margs = {{DNNL_ARG_SRC, dnnl::memory(a_md, *eng, A.get())},
                 {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, *eng, B.get())},
                 {DNNL_ARG_DST, dnnl::memory(c_md, *eng, Co.data())}};
    } catch (const dnnl::error& e) {
        onednn_impl = std::string("none: ") + e.what();
        prim.reset();
    }
    auto run_onednn = [&] {
        prim->execute(*strm, margs);
        strm->wait();
    };

    // Warm-up (code generation, first touch) and the checks.
    batched.run(ab);
    run_loop();
    if (std::memcmp(Cb.data(), Cl.data(), nc * sizeof(float)) != 0) {
        state.SkipWithError("the batched call differs from the separate calls");
        return;
    }
    if (prim) {
        run_onednn();
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < nc; ++i) {
            max_err = std::max(max_err, std::fabs(double(Cb[i]) - double(Co[i])));
            max_ref = std::max(max_ref, std::fabs(double(Co[i])));
        }
        if (max_err > 1e-4 * std::max(1.0, max_ref)) {
            state.SkipWithError(("result differs from oneDNN's: max |diff| = " + std::to_string(max_err)).c_str());
            return;
        }
    }
    double tb = 0, tl = 0, to = 0;
    int64_t it = 0;
    for (auto _ : state) {
        // Every other iteration the separate calls go first (neither inherits the other's caches
        // each time: a fixed order showed a few % of bias).
        const bool loop_first = (it++ & 1) != 0;
        const auto t0 = clock::now();
        if (loop_first) run_loop(); else batched.run(ab);
        const auto t1 = clock::now();
        if (loop_first) batched.run(ab); else run_loop();
        const auto t2 = clock::now();
        if (prim) run_onednn();
        const auto t3 = clock::now();
        const double first = std::chrono::duration<double>(t1 - t0).count();
        const double second = std::chrono::duration<double>(t2 - t1).count();
        const double b = loop_first ? second : first;
        tb += b;
        tl += loop_first ? first : second;
        to += std::chrono::duration<double>(t3 - t2).count();
        state.SetIterationTime(b);
        benchmark::ClobberMemory();
    }
    const double n = double(state.iterations()), gf = s.flops() * 1e-9;
    if (n > 0) {
        state.counters["GFLOPS"] = gf * n / tb;
        state.counters["LOOP_GFLOPS"] = gf * n / tl;
        state.counters["batched/loop"] = tl / tb;
        if (prim) {
            state.counters["ONEDNN_GFLOPS"] = gf * n / to;
            state.counters["batched/onednn"] = to / tb;
        }
    }
    state.SetLabel(std::string(batched.impl_name()) + " | onednn " + onednn_impl);
}

bool register_all() {
    for (Kind k : {Kind::f32, Kind::bf16})
        for (const Shape& s : kShapes)
            for (int threads : xb::thread_counts()) {
                const std::string name = std::string("gemm_batched/") + kind_name(k) + "/xk/" + s.name() +
                                         "/threads:" + std::to_string(threads);
                benchmark::RegisterBenchmark(name.c_str(),
                                             [=](benchmark::State& st) { bench_batched(st, k, s, threads); })
                    ->UseManualTime()
                    ->Unit(benchmark::kMicrosecond);
            }
    return true;
}

[[maybe_unused]] const bool g_registered = register_all();

}  // namespace
