// Attention benchmarks (peer: PyTorch's scaled_dot_product_attention, bench/torch_peer.py --attention,
// a separate process on the same machine).
//
//   attention/<kv dtype>/xk/decode/b:<B>/ctx:<L>/nt:<t>     (kv dtype bf16, f32 or s8: int8 +
//       per-row f32 scales, the scales counted in the bytes)
//       one query token per sequence, 32 q heads / 8 kv heads x 128, contiguous cache of L tokens
//       per sequence; GBPS = K + V bytes read per call (the cache is rotated over >= 512 MiB of
//       copies so every call reads from DRAM).
//   attention/<kv dtype>/xk/decode_l2/b:1/ctx:256/nt:<t>
//       the same over one 256-token cache that stays in L2: the kernel's compute-bound rate.
//   attention/f32/xk/read/nt:<t>
//       the read bandwidth of this machine (sum of a 1 GiB buffer, 4 accumulators, no prefetch):
//       the decode rows' yardstick (BW% = decode GBPS / this).
//   attention/f32/xk/read_fma/fmas:<F>/nt:<t>   (AVX-512 machines)
//       the read loop with F independent FP32 FMAs per 256 bytes read (16 / 32 / 48): how much
//       compute one core overlaps with the DRAM stream (the decode's work per 256-byte bf16 row:
//       32 FMAs for the FMA decode of a GQA group of 4, ~16 VDPBF16PS for the dpbf16 decode).
//   attention/<dtype>/xk/prefill/T:<T>/nt:<t>
//       causal fused SDPA, 32 heads x 128 (MHA), T tokens; GFLOPS counts the causal half:
//       4 * T * T * 128 * 32 / 2. The label names the kernel (amx:bf16: AMX tiles; intr:avx512).
//   attention/<dtype>/xk/gemm/M:1024/N:1024/K:128/nt:<t>
//       our GEMM on a Q.K^T-like shape (K = head_dim): the GEMM rate the prefill is held to.
//   attention/bf16/xk/issue_rate/{vdpbf16ps,vfmadd231ps}   (AVX512-BF16 machines, 1 thread)
//       GFLOPS = multiply-adds x 2 per second of 8 independent chains of the instruction: why the
//       decode's products stay FP32 FMAs (bf16 widened) rather than VDPBF16PS (docs/attention.md).
//   attention/f32/xk/fma_peak/nt:<t>   (AVX-512 machines)
//       GFLOPS of 8 independent VFMADD231PS zmm chains on each of t threads: the FP32 FMA peak the
//       f32 prefill rows are bounded by, measured in the same run.
//   attention/f32/xk/decode/b:<B>/ctx:<L>/seq:<S>/nt:<t>   (XK_BENCH_DECODE_SEQ=1,0)
//       the f32 decode rows with the sequential-order decode forced on (1) / off (0: the
//       intr:avx512 decode with its prefetch forms) instead of the per-vendor default.
//   attention/<kv dtype>/xk/decode/b:<B>/ctx:<L>/splits:<S>/nt:<t>   (XK_BENCH_KV_SPLITS=S,...)
//       the decode rows with CachedAttentionDesc::kv_splits = S (each key range in S pieces across
//       threads) instead of the automatic choice.
// XK_BENCH_THREADS picks the thread counts (default 1,2); XK_BENCH_PREFILL_8K=1 adds T = 8192.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "common/parallel.hpp"
#include "peak_loops.hpp"
#include "kernels/attention/attention.hpp"  // attn_decode_seq_override (XK_BENCH_DECODE_SEQ rows)
#include "xk/attention.hpp"
#include "xk/gemm.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace xb = xk::bench;

namespace {

constexpr int64_t kQHeads = 32, kKvHeads = 8, kHd = 128;

void bench_decode(benchmark::State& state, xk::DType dt, int64_t B, int64_t L, int threads, bool hot = false,
                  int64_t splits = 0, int seq = -1) {
    xb::ScopedThreads st(threads);
    xk::detail::attn_decode_seq_override(seq);  // (-1: the default order)
    xk::KvCacheDesc cd;
    cd.layout = xk::KvLayout::contiguous;
    cd.dtype = dt;
    cd.batch = B;
    cd.kv_heads = kKvHeads;
    cd.head_dim = kHd;
    cd.capacity = L;
    const size_t elems = static_cast<size_t>(xk::kv_cache_elements(cd));
    const size_t bytes = elems * xk::dtype_size(dt);
    const size_t copies = hot ? 1 : std::max<size_t>(1, std::min<size_t>(8, (size_t(512) << 20) / (2 * bytes)));
    std::vector<xb::AlignedArray<char>> ks, vs;
    for (size_t c = 0; c < copies; ++c) {
        ks.push_back(xb::alloc_aligned<char>(bytes));
        vs.push_back(xb::alloc_aligned<char>(bytes));
        if (dt == xk::DType::s8) {
            uint64_t x = 0x9E3779B97F4A7C15ull * (c + 1);
            for (char* buf : {ks.back().get(), vs.back().get()})
                for (size_t i = 0; i < elems; ++i) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    buf[i] = static_cast<char>(static_cast<int>(x % 255) - 127);
                }
        } else if (dt == xk::DType::bf16) {
            xb::fill_uniform(reinterpret_cast<xk::bf16*>(ks.back().get()), elems, -1.0, 1.0, 1 + c);
            xb::fill_uniform(reinterpret_cast<xk::bf16*>(vs.back().get()), elems, -1.0, 1.0, 2 + c);
        } else {
            xb::fill_uniform(reinterpret_cast<float*>(ks.back().get()), elems, -1.0, 1.0, 1 + c);
            xb::fill_uniform(reinterpret_cast<float*>(vs.back().get()), elems, -1.0, 1.0, 2 + c);
        }
    }
    std::vector<float> q(static_cast<size_t>(B * kQHeads * kHd)), o(q.size());
    xb::fill_uniform(q.data(), q.size(), -1.0, 1.0, 7);
    std::vector<int64_t> cu(static_cast<size_t>(B + 1)), ctx(static_cast<size_t>(B), L);
    for (int64_t b = 0; b <= B; ++b) cu[b] = b;
    xk::CachedAttentionDesc d;
    d.cache = cd;
    d.q_tokens = B;
    d.q_heads = kQHeads;
    d.kv_splits = splits;
    xk::CachedAttentionArgs a;
    a.q = q.data();
    a.o = o.data();
    a.cu_seqlens_q = cu.data();
    a.context_lens = ctx.data();
    // s8: one scale per (token, head) row, K and V (read too: counted in GBPS).
    const size_t nsc = dt == xk::DType::s8 ? static_cast<size_t>(xk::kv_cache_scale_elements(cd)) : 0;
    std::vector<float> ksc(nsc, 1.0f / 127), vsc(nsc, 1.0f / 127);
    size_t c = 0;
    for (auto _ : state) {
        a.cache = xk::KvCache{ks[c].get(), vs[c].get(), nullptr, ksc.data(), vsc.data()};
        xk::cached_attention(d, a);
        c = (c + 1) % copies;
        benchmark::DoNotOptimize(o.data());
    }
    xb::set_gbps(state, 2.0 * static_cast<double>(bytes + nsc * sizeof(float)));
    xk::detail::attn_decode_seq_override(-1);
}

__attribute__((target("avx2"))) double sum_range(const float* p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 32 <= n; i += 32) {
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

// Each thread sums its 1/threads of a 64 MiB step of the rotated buffer with `sum` (pieces a
// multiple of `align` floats); GB/s of the bytes read.
template <class Sum>
void read_loop(benchmark::State& state, int threads, size_t align, Sum&& sum) {
    xb::ScopedThreads st(threads);
    const size_t n = xb::rotate_bytes() / sizeof(float);
    auto buf = xb::alloc_aligned<float>(n);
    xb::fill_value(buf.get(), n, 1.0f);
    const size_t step = size_t(64) << 20 >> 2;  // 64 MiB per call
    size_t cur = 0;
    double sink = 0;
    for (auto _ : state) {
        if (cur + step > n) cur = 0;
        std::vector<double> part(static_cast<size_t>(threads) * 8, 0.0);
        const size_t per = step / static_cast<size_t>(threads) / align * align;
        xk::detail::parallel_for(threads, 1, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) part[size_t(t) * 8] = sum(buf.get() + cur + size_t(t) * per, per);
        });
        for (double v : part) sink += v;
        cur += step;
    }
    benchmark::DoNotOptimize(sink);
    xb::set_gbps(state, static_cast<double>(step) * sizeof(float));
}

void bench_read(benchmark::State& state, int threads) {
    read_loop(state, threads, 32, [](const float* p, size_t n) { return sum_range(p, n); });
}

// The read loop with `fmas` independent FP32 FMAs (8 chains, zmm) per 256 bytes read: how much work
// one core overlaps with the stream (a decode moves 256 bytes per bf16 key row; the FMA decode does
// 32 FMAs a row of K or V for a GQA group of 4, the VDPBF16PS decode ~16 instructions).
__attribute__((target("avx512f"))) float sum_range_fma(const float* p, size_t n, int fmas) {
    // (distinct starting values: identical chains would be merged by the compiler)
    __m512 s = _mm512_setzero_ps(), a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1e-3f), a2 = _mm512_set1_ps(2e-3f),
           a3 = _mm512_set1_ps(3e-3f), a4 = _mm512_set1_ps(4e-3f), a5 = _mm512_set1_ps(5e-3f), a6 = _mm512_set1_ps(6e-3f),
           a7 = _mm512_set1_ps(7e-3f);
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
    for (size_t i = 0; i + 64 <= n; i += 64) {
        s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(p + i), _mm512_load_ps(p + i + 16)),
                                           _mm512_add_ps(_mm512_load_ps(p + i + 32), _mm512_load_ps(p + i + 48))));
        for (int f = 0; f < fmas; f += 8) {
            a0 = _mm512_fmadd_ps(a0, x, y), a1 = _mm512_fmadd_ps(a1, x, y), a2 = _mm512_fmadd_ps(a2, x, y);
            a3 = _mm512_fmadd_ps(a3, x, y), a4 = _mm512_fmadd_ps(a4, x, y), a5 = _mm512_fmadd_ps(a5, x, y);
            a6 = _mm512_fmadd_ps(a6, x, y), a7 = _mm512_fmadd_ps(a7, x, y);
        }
    }
    const __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                   _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    return _mm512_reduce_add_ps(_mm512_add_ps(s, t));
}

void bench_read_fma(benchmark::State& state, int threads, int fmas) {
    read_loop(state, threads, 64, [fmas](const float* p, size_t n) { return sum_range_fma(p, n, fmas); });
}

void bench_prefill(benchmark::State& state, xk::DType dt, int64_t T, int threads) {
    xb::ScopedThreads st(threads);
    const size_t n = static_cast<size_t>(T * kQHeads * kHd);
    std::vector<float> qf(n), kf(n), vf(n), of(n);
    std::vector<xk::bf16> qb, kb, vb, ob;
    xb::fill_uniform(qf.data(), n, -1.0, 1.0, 1);
    xb::fill_uniform(kf.data(), n, -1.0, 1.0, 2);
    xb::fill_uniform(vf.data(), n, -1.0, 1.0, 3);
    if (dt == xk::DType::bf16) {
        qb.resize(n), kb.resize(n), vb.resize(n), ob.resize(n);
        for (size_t i = 0; i < n; ++i) qb[i] = xk::bf16(qf[i]), kb[i] = xk::bf16(kf[i]), vb[i] = xk::bf16(vf[i]);
    }
    const bool bf = dt == xk::DType::bf16;
    xk::AttentionDesc d;
    d.q_tokens = d.kv_tokens = T;
    d.q_heads = d.kv_heads = kQHeads;
    d.head_dim = kHd;
    d.dtype = d.o_dtype = dt;
    d.causal = true;
    xk::AttentionArgs a;
    a.q = bf ? static_cast<const void*>(qb.data()) : qf.data();
    a.k = bf ? static_cast<const void*>(kb.data()) : kf.data();
    a.v = bf ? static_cast<const void*>(vb.data()) : vf.data();
    a.o = bf ? static_cast<void*>(ob.data()) : of.data();
    state.SetLabel(xk::AttentionPlan(d).impl_name());  // the kernel (bf16 on AMX machines: amx:bf16)
    for (auto _ : state) xk::attention(d, a);
    xb::set_gflops(state, 4.0 * double(T) * double(T) * kHd * kQHeads / 2.0);
}

void bench_gemm_ref(benchmark::State& state, xk::DType dt, int64_t T, int threads) {
    xb::ScopedThreads st(threads);
    // 1024 x 1024 x 128: at e1091fa the GEMM aborts with heap corruption on 2048 x 2048 x 128
    // (f32, bf16) and 2048 x 1024 x 128 (bf16), see docs/attention.md; same K, same kernels.
    T = 1024;
    const int64_t N = T;
    const size_t na = static_cast<size_t>(T * kHd), nc = static_cast<size_t>(T * N);
    std::vector<float> af(na), bf_(na), c(nc);
    xb::fill_uniform(af.data(), na, -1.0, 1.0, 1);
    xb::fill_uniform(bf_.data(), na, -1.0, 1.0, 2);
    std::vector<xk::bf16> ab(na), bb(na);
    for (size_t i = 0; i < na; ++i) ab[i] = xk::bf16(af[i]), bb[i] = xk::bf16(bf_[i]);
    xk::GemmDesc d;
    d.M = T;
    d.N = N;
    d.K = kHd;
    d.trans_b = xk::Trans::T;
    d.a_type = d.b_type = dt;
    xk::GemmArgs g;
    const bool bf = dt == xk::DType::bf16;
    g.A = bf ? static_cast<const void*>(ab.data()) : af.data();
    g.B = bf ? static_cast<const void*>(bb.data()) : bf_.data();
    g.C = c.data();
    for (auto _ : state) xk::gemm(d, g);
    xb::set_gflops(state, 2.0 * double(T) * double(N) * kHd);
}

// 8 chains x n iterations of VDPBF16PS (32 multiply-adds each) or VFMADD231PS (16).
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) float issue_chains(int64_t n, bool bf16) {
    // (distinct starting values: identical chains would be merged by the compiler)
    __m512 a0 = _mm512_set1_ps(0.0f), a1 = _mm512_set1_ps(1e-3f), a2 = _mm512_set1_ps(2e-3f), a3 = _mm512_set1_ps(3e-3f);
    __m512 a4 = _mm512_set1_ps(4e-3f), a5 = _mm512_set1_ps(5e-3f), a6 = _mm512_set1_ps(6e-3f), a7 = _mm512_set1_ps(7e-3f);
    if (bf16) {
        const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3000);
        for (int64_t i = 0; i < n; ++i) {
            a0 = _mm512_dpbf16_ps(a0, x, y), a1 = _mm512_dpbf16_ps(a1, x, y), a2 = _mm512_dpbf16_ps(a2, x, y);
            a3 = _mm512_dpbf16_ps(a3, x, y), a4 = _mm512_dpbf16_ps(a4, x, y), a5 = _mm512_dpbf16_ps(a5, x, y);
            a6 = _mm512_dpbf16_ps(a6, x, y), a7 = _mm512_dpbf16_ps(a7, x, y);
            __asm__ volatile("" : "+v"(a0));  // (not a pure function: the loop is run)
        }
    } else {
        const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
        for (int64_t i = 0; i < n; ++i) {
            a0 = _mm512_fmadd_ps(a0, x, y), a1 = _mm512_fmadd_ps(a1, x, y), a2 = _mm512_fmadd_ps(a2, x, y);
            a3 = _mm512_fmadd_ps(a3, x, y), a4 = _mm512_fmadd_ps(a4, x, y), a5 = _mm512_fmadd_ps(a5, x, y);
            a6 = _mm512_fmadd_ps(a6, x, y), a7 = _mm512_fmadd_ps(a7, x, y);
            __asm__ volatile("" : "+v"(a0));
        }
    }
    const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                   _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    return _mm512_reduce_add_ps(s);
}

// The FP32 FMA peak on `threads` threads (bench_peak's fma_zmm loop, peak_loops.hpp): printed beside
// the prefill rows (their bound).
void bench_fma_peak(benchmark::State& state, int threads) {
    namespace pk = xk::bench::peak;
    xb::ScopedThreads st(threads);
    double flops = 0;
    for (auto _ : state) flops = pk::run_peak(pk::ComputeOp::fma_zmm, 2e8 * threads);
    xb::set_gflops(state, flops);
}

void bench_issue_rate(benchmark::State& state, bool bf16) {
    constexpr int64_t n = 1 << 16;
    float sink = 0;
    for (auto _ : state) sink += issue_chains(n, bf16);
    benchmark::DoNotOptimize(sink);
    xb::set_gflops(state, 2.0 * 8 * n * (bf16 ? 32 : 16));
}

int reg = [] {
    if (xk::isa_supported(xk::Isa::avx512_bf16))
        for (bool bf : {true, false})
            benchmark::RegisterBenchmark(bf ? "attention/bf16/xk/issue_rate/vdpbf16ps" : "attention/bf16/xk/issue_rate/vfmadd231ps",
                                         [bf](benchmark::State& s) { bench_issue_rate(s, bf); });
    std::vector<int64_t> kv_splits;  // XK_BENCH_KV_SPLITS=8,16: decode rows with kv_splits forced too
    if (const char* e = std::getenv("XK_BENCH_KV_SPLITS"))
        for (const char* c = e; *c;) {
            const int64_t v = std::strtoll(c, nullptr, 10);
            if (v > 0) kv_splits.push_back(v);
            while (*c && *c != ',') ++c;
            if (*c) ++c;
        }
    std::vector<int> decode_seq;  // XK_BENCH_DECODE_SEQ=1,0: f32 decode rows with each order forced too
    if (const char* e = std::getenv("XK_BENCH_DECODE_SEQ"))
        for (const char* c = e; *c;) {
            if (*c == '0' || *c == '1') decode_seq.push_back(*c - '0');
            while (*c && *c != ',') ++c;
            if (*c) ++c;
        }
    for (int t : xb::thread_counts()) {
        const std::string nt = "nt:" + std::to_string(t);
        benchmark::RegisterBenchmark(("attention/f32/xk/read/" + nt).c_str(),
                                     [t](benchmark::State& s) { bench_read(s, t); })->UseRealTime();
        if (xk::isa_supported(xk::Isa::avx512))
            for (int f : {16, 32, 48})
                benchmark::RegisterBenchmark(("attention/f32/xk/read_fma/fmas:" + std::to_string(f) + "/" + nt).c_str(),
                                             [t, f](benchmark::State& s) { bench_read_fma(s, t, f); })
                    ->UseRealTime();
        for (xk::DType dt : {xk::DType::bf16, xk::DType::f32, xk::DType::s8})
            for (int64_t B : {1, 8})
                for (int64_t L : {2048, 8192, 32768}) {
                    if (dt == xk::DType::f32 && B == 8 && L == 32768) continue;  // 2 GiB per cache copy: too big here
                    const std::string name = xb::join_name({"attention", xk::dtype_name(dt), "xk", "decode",
                                                            "b:" + std::to_string(B), "ctx:" + std::to_string(L), nt});
                    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { bench_decode(s, dt, B, L, t); })
                        ->UseRealTime();
                    if (dt == xk::DType::f32)
                        for (int sq : decode_seq) {  // XK_BENCH_DECODE_SEQ: the f32 decode order forced
                            const std::string sn = xb::join_name({"attention", "f32", "xk", "decode", "b:" + std::to_string(B),
                                                                  "ctx:" + std::to_string(L), "seq:" + std::to_string(sq), nt});
                            benchmark::RegisterBenchmark(sn.c_str(), [=](benchmark::State& s) { bench_decode(s, dt, B, L, t, false, 0, sq); })
                                ->UseRealTime();
                        }
                    for (int64_t sp : kv_splits) {  // XK_BENCH_KV_SPLITS: the split over the sequence forced
                        const std::string sn = xb::join_name({"attention", xk::dtype_name(dt), "xk", "decode",
                                                              "b:" + std::to_string(B), "ctx:" + std::to_string(L),
                                                              "splits:" + std::to_string(sp), nt});
                        benchmark::RegisterBenchmark(sn.c_str(), [=](benchmark::State& s) { bench_decode(s, dt, B, L, t, false, sp); })
                            ->UseRealTime();
                    }
                }
        // The kernel's compute-bound rate: one 256-token cache (1 / 2 MiB) that stays in L2.
        for (xk::DType dt : {xk::DType::bf16, xk::DType::f32, xk::DType::s8})
            benchmark::RegisterBenchmark(
                xb::join_name({"attention", xk::dtype_name(dt), "xk", "decode_l2", "b:1", "ctx:256", nt}).c_str(),
                [=](benchmark::State& s) { bench_decode(s, dt, 1, 256, t, true); })
                ->UseRealTime();
        if (xk::isa_supported(xk::Isa::avx512))  // the prefill rows' bound, in the same run
            benchmark::RegisterBenchmark(("attention/f32/xk/fma_peak/" + nt).c_str(),
                                         [t](benchmark::State& s) { bench_fma_peak(s, t); })
                ->UseRealTime();
        std::vector<int64_t> Ts = {2048};
        if (xb::env_int("XK_BENCH_PREFILL_8K", 0)) Ts.push_back(8192);
        for (xk::DType dt : {xk::DType::bf16, xk::DType::f32})
            for (int64_t T : Ts) {
                benchmark::RegisterBenchmark(
                    xb::join_name({"attention", xk::dtype_name(dt), "xk", "prefill", "T:" + std::to_string(T), nt}).c_str(),
                    [=](benchmark::State& s) { bench_prefill(s, dt, T, t); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
                benchmark::RegisterBenchmark(
                    xb::join_name({"attention", xk::dtype_name(dt), "xk", "gemm", "M:1024", "N:1024", "K:128", nt}).c_str(),
                    [=](benchmark::State& s) { bench_gemm_ref(s, dt, T, t); })
                    ->UseRealTime()
                    ->Unit(benchmark::kMillisecond);
            }
    }
    return 0;
}();

}  // namespace
