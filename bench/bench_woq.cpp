// Weight-only quantized GEMM (xk/woq.hpp) beside our bf16 GEMM on the same shape, in one loop.
//
// Rows (per thread count, XK_BENCH_THREADS, default 1,2):
//   woq/<w>/xk/M<M>xN<N>xK<K>/nt:<t>   w = u4g128 (int4, groups of 128, symmetric) or s8 (int8 per
//       channel); decode M = 1 and 16 and prefill M = 512 and 2048 on (N, K) = (4096, 4096),
//       (11008, 4096), (4096, 11008). w = u4g128_i8 / s8_i8: the same weights with
//       WoqCompute::int8 (X quantized per row to s8 in the call, VPDPBUSD). Weights rotated over copies of >= XK_BENCH_ROTATE_MB
//       (default 1 GiB) in all, for both ours and the bf16 GEMM's packed weights, so both come
//       from DRAM. w = u4g128_avx512 / s8_avx512 (M = 16, AMX machines): the plan made under an
//       avx512_bf16 cap, i.e. the decode kernels below AMX (avx512_bf16:woq_*:gemv; the f32 FMA
//       ones avx512:woq_*:gemv with XK_WOQ_DP=0) that amx:woq:dequant_gemm replaces at M >= 12 with
//       bf16 X, for before / after in one process.
// Counters:
//   GBPS      woq weight bytes (q + scales) / woq time
//   BW%       against a streaming read of as many bytes from a 1 GiB pool, run between the calls
//             (ReadGBPS: that read's GB/s)
//   vsBF16%   100 x our bf16 GEMM's time over woq's time, the bf16 GEMM (GemmPlan, bf16 x bf16 ->
//             f32, PackedB) called between the woq calls on the same shape and threads: tokens/s
//             of woq over tokens/s of bf16 (250 = 2.5x). BF16_GBPS: the bf16 GEMM's weight GB/s
//             (reported as that stick's rate: calls/ns * bytes).
//   GFLOPS    2 M N K / woq time
// XK_BENCH_WOQ_ALONE=1: the woq calls alone (no bf16 GEMM or read between them: for XK_AMX_PROFILE).
//   cpu_vsBF16%, cpu_BW%   the same ratios from the process's CPU time of each call (on a loaded
//             host the 1-thread rows' wall times include other processes' time slices; at more
//             threads the workers' waits count too)
#include <immintrin.h>
#include <time.h>

#include <chrono>
#include <map>

#include "bench_util.hpp"
#include "common/parallel.hpp"
#include "xk/gemm.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"
#include "xk/woq.hpp"

namespace xb = xk::bench;

namespace {

__attribute__((target("avx2,fma"))) double sum_floats(const float* p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    alignas(32) float t[8];
    _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    double r = 0;
    for (float v : t) r += v;
    return r;
}

// A 1 GiB pool read from a moving cursor, split over xk's threads: BW%'s yardstick.
struct ReadPool {
    ReadPool() : n((xb::rotate_bytes() / 4) / 4096 * 4096), buf(xb::alloc_aligned<float>(n)) { xb::fill_value(buf.get(), n, 1.0f); }
    double read(size_t bytes) {
        const size_t floats = std::min(n, (bytes / 4 + 4095) / 4096 * 4096);
        if (cur + floats > n) cur = 0;
        const float* base = buf.get() + cur;
        const int64_t chunks = static_cast<int64_t>(floats / 4096);
        std::vector<double> part(64 * 8, 0.0);
        xk::detail::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
            part[size_t(b % 64) * 8] += sum_floats(base + size_t(b) * 4096, size_t(e - b) * 4096);
        });
        cur += floats;
        for (double v : part) sink += v;
        benchmark::DoNotOptimize(sink);
        return double(floats) * 4;
    }
    size_t n, cur = 0;
    xb::AlignedArray<float> buf;
    double sink = 0;
};
double cpu_now() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

ReadPool& pool() {
    static ReadPool p;
    return p;
}

struct Shape {
    int64_t M, N, K;
    std::string name() const { return "M" + std::to_string(M) + "xN" + std::to_string(N) + "xK" + std::to_string(K); }
};

// Copies of the packed weights of one (type, N, K), >= rotate_bytes() in all (one set alive).
struct WoqSet {
    std::vector<xk::WoqPackedWeight> w;
    std::vector<xk::PackedB> bf;  // our bf16 GEMM's packed weights of the same shape
    double wbytes = 0, bfbytes = 0;
};

WoqSet& weights(bool u4, const Shape& s) {
    static std::string key;
    static std::unique_ptr<WoqSet> set;
    const std::string k = std::string(u4 ? "u4" : "s8") + std::to_string(s.N) + "x" + std::to_string(s.K);
    if (set && key == k) return *set;
    set.reset();
    set = std::make_unique<WoqSet>();
    key = k;
    xk::WoqWeightDesc d;
    d.N = s.N, d.K = s.K, d.type = u4 ? xk::WoqWeightType::u4 : xk::WoqWeightType::s8, d.group_size = u4 ? 128 : 0;
    std::vector<uint8_t> q(size_t(s.N * (u4 ? s.K / 2 : s.K)));
    for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(xb::detail::splitmix64(i) >> 7);
    std::vector<float> sc(size_t(s.N * (u4 ? s.K / 128 : 1)), 0.01f);
    const xk::WoqPackedWeight one = xk::woq_pack(d, {q.data(), sc.data(), nullptr});
    set->wbytes = double(one.size_bytes());
    const size_t copies = std::max<size_t>(2, xb::rotate_bytes() / one.size_bytes() + 1);
    set->w.push_back(one);
    for (size_t i = 1; i < copies; ++i) set->w.push_back(xk::woq_pack(d, {q.data(), sc.data(), nullptr}));
    // bf16 [N x K] (trans_b T), packed for our GEMM's kernel of M = 1 (the decode kernel reads
    // the same PackedB as the blocked kernel: one packing for every M).
    std::vector<xk::bf16> b(size_t(s.N * s.K));
    xb::fill_uniform(b.data(), b.size(), -1.0, 1.0, 5);
    xk::GemmDesc gd;
    gd.M = s.M, gd.N = s.N, gd.K = s.K, gd.trans_b = xk::Trans::T;
    gd.a_type = gd.b_type = xk::DType::bf16;
    const xk::GemmPlan plan(gd);
    set->bfbytes = double(s.N * s.K * 2);
    const size_t bcopies = std::max<size_t>(2, xb::rotate_bytes() / size_t(set->bfbytes) + 1);
    for (size_t i = 0; i < bcopies; ++i) set->bf.push_back(plan.pack_b(b.data()));
    return *set;
}

void bench_woq(benchmark::State& state, bool u4, bool bf16_x, Shape s, int threads, bool i8 = false, bool f32fma = false) {
    xb::set_threads(threads);
    WoqSet& W = weights(u4, s);
    xk::WoqDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K, d.weight_type = u4 ? xk::WoqWeightType::u4 : xk::WoqWeightType::s8;
    d.a_type = bf16_x ? xk::DType::bf16 : xk::DType::f32;
    if (i8) d.compute = xk::WoqCompute::int8;
    std::unique_ptr<xk::IsaCap> cap;
    if (f32fma) cap = std::make_unique<xk::IsaCap>(xk::Isa::avx512_bf16);
    const xk::WoqPlan plan(d);
    cap.reset();
    std::vector<xk::bf16> xb16(size_t(s.M * s.K));
    std::vector<float> x32(size_t(s.M * s.K));
    xb::fill_uniform(xb16.data(), xb16.size(), -1.0, 1.0, 9);
    for (size_t i = 0; i < x32.size(); ++i) x32[i] = xb16[i].to_float();
    std::vector<float> y(size_t(s.M * s.N)), y2(size_t(s.M * s.N));
    xk::GemmDesc gd;
    gd.M = s.M, gd.N = s.N, gd.K = s.K, gd.trans_b = xk::Trans::T;
    gd.a_type = gd.b_type = xk::DType::bf16;
    const xk::GemmPlan bplan(gd);
    xk::GemmArgs ga;
    ga.A = xb16.data(), ga.C = y2.data();
    size_t i = 0, j = 0;
    double cpu_woq = 0, cpu_bf = 0, cpu_read = 0, read_bytes = 0;
    xb::InPhase ph(state);
    static const bool alone = xb::env_int("XK_BENCH_WOQ_ALONE", 0) != 0;  // woq calls only (XK_AMX_PROFILE runs)
    if (!alone)
    ph.add("vsBF16%", "BF16_GBPS", W.bfbytes, [&] {
        const double c0 = cpu_now();
        bplan.run(ga, W.bf[j]);
        cpu_bf += cpu_now() - c0;
        j = j + 1 == W.bf.size() ? 0 : j + 1;
        return W.bfbytes;
    });
    // (vsBF16% = 100 * (bf16 bytes / woq time) / (bf16 bytes / bf16 time): the time ratio)
    if (s.M <= 16 && !alone)
        ph.add("BW%", "ReadGBPS", W.wbytes, [&] {
            const double c0 = cpu_now();
            const double r = pool().read(size_t(W.wbytes));
            cpu_read += cpu_now() - c0;
            read_bytes += r;
            return r;
        });
    const xk::WoqArgs a{bf16_x ? static_cast<const void*>(xb16.data()) : x32.data(), y.data()};
    for (auto _ : state) {
        const double c0 = cpu_now();
        ph.begin();
        plan.run(a, W.w[i]);
        cpu_woq += cpu_now() - c0;
        ph.end();
        i = i + 1 == W.w.size() ? 0 : i + 1;
    }
    ph.finish();
    if (cpu_woq > 0) {
        if (cpu_bf > 0) state.counters["cpu_vsBF16%"] = 100.0 * cpu_bf / cpu_woq;
        if (cpu_read > 0)
            state.counters["cpu_BW%"] = 100.0 * (W.wbytes * double(state.iterations()) / cpu_woq) / (read_bytes / cpu_read);
    }
    xb::set_gbps(state, W.wbytes);
    xb::set_gflops(state, 2.0 * double(s.M) * double(s.N) * double(s.K));
    state.SetLabel(std::string(plan.impl_name()) + " vs " + bplan.impl_name() + " x" + std::to_string(W.w.size()) + "/" +
                   std::to_string(W.bf.size()));
}

const bool registered = [] {
    const std::vector<int> nts = xb::thread_counts();
    auto reg = [](const std::string& name, auto fn) { benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime(); };
    const std::pair<int64_t, int64_t> nk[] = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    for (bool i8 : {false, true}) {
        auto wname = [i8](bool u4) { return std::string(u4 ? "u4g128" : "s8") + (i8 ? "_i8" : ""); };
        for (bool u4 : {true, false})
            for (auto [N, K] : nk)
                for (int64_t M : {1, 16})
                    for (int nt : nts) {
                        const Shape s{M, N, K};
                        reg(xb::join_name({"woq", wname(u4), "xk", s.name(), "nt:" + std::to_string(nt)}),
                            [u4, s, nt, i8](benchmark::State& st) { bench_woq(st, u4, true, s, nt, i8); });
                    }
        if (!i8 && xk::isa_supported(xk::Isa::amx))
            for (bool u4 : {true, false})
                for (auto [N, K] : nk)
                    for (int nt : nts) {
                        const Shape s{16, N, K};
                        reg(xb::join_name({"woq", wname(u4) + "_avx512", "xk", s.name(), "nt:" + std::to_string(nt)}),
                            [u4, s, nt](benchmark::State& st) { bench_woq(st, u4, true, s, nt, false, true); });
                    }
        for (bool u4 : {true, false})
            for (auto [N, K] : nk)
                for (int64_t M : {512, 2048})
                    for (int nt : nts) {
                        const Shape s{M, N, K};
                        reg(xb::join_name({"woq", wname(u4), "xk", s.name(), "nt:" + std::to_string(nt)}),
                            [u4, s, nt, i8](benchmark::State& st) { bench_woq(st, u4, true, s, nt, i8); });
                    }
    }
    return true;
}();

}  // namespace
