// Internals of the blocked fp32 GEMM (jit:<isa>, src/kernels/gemm/jit_gemm.cpp), measured in
// isolation on this machine's code ISA (avx2 / avx512, as the blocked kernel picks it):
//   gemm_uk/f32/xk/uk_kc<kc>_mp<p>[_acc]      the generated microkernel on cache-resident packed
//       operands: one kc x NR B panel (L1) against p packed A panels (kc x MR each: L1 / L2), C of
//       p*MR x NR (ldc NR), called repeatedly; _acc: the beta = 1 store (a later K block) instead
//       of beta = 0. Its GFLOP/s over the FMA peak is the microkernel's steady-state efficiency.
//   gemm_uk/f32/xk/macro_<mc>x<nc>x<kc>       the macro kernel as run_part runs it, without packing:
//       an mc x kc packed A block (L2) against every NR panel of a kc x nc packed B block, C of
//       mc x nc (ldc nc); _sameB: every call reads the first B panel (C moves), _sameC: every
//       call writes the first C tile (B moves).
//   gemm_uk/f32/xk/packA_<M>x<K>, packB_<K>x<N>  the packing of a whole row-major operand in the
//       blocks the kernel packs it in (A: mc x kc, B: kc x nc) — GB/s of the operand read; compare
//       its time with gemm/f32/xk/<M>x<N>x<K> (bench_gemm) for the share of packing in a run.
// One thread (these call the internals directly, not the library's threading).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm/jit_gemm_common.hpp"
#include "kernels/gemm/jit_gemm_ukernel.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace {

using namespace xk;
using namespace xk::detail;

struct AlignedFree {
    void operator()(float* p) const { std::free(p); }
};
using Buf = std::unique_ptr<float, AlignedFree>;

Buf alloc(size_t n) {
    n = (n + 1023) / 1024 * 1024;
    auto* p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t i = 0; i < n; ++i) p[i] = u(g);
    return Buf(p);
}

Isa code_isa() { return gemm_code_isa(max_isa()); }

std::shared_ptr<const GemmUkernel> uk(bool acc) {
    const GemmGeometry g = gemm_geometry(code_isa());
    GemmUkSpec s;
    s.isa = g.isa, s.mr = g.mr, s.ncols = g.nr;
    s.epi.beta = acc ? BetaKind::one : BetaKind::zero;
    return gemm_ukernel(s);
}

void bench_uk(benchmark::State& state, int64_t kc, int64_t mp, bool acc) {
    const GemmGeometry g = gemm_geometry(code_isa());
    const auto k = uk(acc);
    Buf A = alloc(size_t(mp * g.mr * kc + kPackSlack)), B = alloc(size_t(kc * g.nr)), C = alloc(size_t(mp * g.mr * g.nr));
    alignas(64) GemmScalars sc;
    sc.set(1.f, 1.f);
    GemmUkArgs a;
    a.a = A.get(), a.b = B.get(), a.c = C.get(), a.kc = kc, a.ldc = g.nr * 4, a.m_panels = mp, a.scal = &sc;
    for (auto _ : state) {
        k->fn(&a);
        benchmark::ClobberMemory();
    }
    state.counters["GFLOPS"] = benchmark::Counter(2.0 * double(mp * g.mr) * g.nr * kc * double(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

void bench_macro(benchmark::State& state, int64_t mc, int64_t nc, int64_t kc, int mode) {
    const GemmGeometry g = gemm_geometry(code_isa());
    const auto k = uk(true);
    Buf A = alloc(size_t(mc * kc + kPackSlack)), B = alloc(size_t(kc * nc));
    alignas(64) GemmScalars sc;
    sc.set(1.f, 1.f);
    GemmUkArgs a;
    const int64_t ldc = mode == 3 ? nc + 16 : nc;
    Buf C = alloc(size_t(mc * ldc));
    a.kc = kc, a.ldc = ldc * 4, a.m_panels = mc / g.mr, a.scal = &sc, a.a = A.get();
    for (auto _ : state) {
        for (int64_t jr = 0; jr < nc; jr += g.nr) {
            a.b = B.get() + (mode == 1 ? 0 : jr * kc);
            a.c = C.get() + (mode == 2 ? 0 : jr);  // (mode 3: ldc = nc + 16)
            k->fn(&a);
        }
        benchmark::ClobberMemory();
    }
    state.counters["GFLOPS"] =
        benchmark::Counter(2.0 * double(mc) * nc * kc * double(state.iterations()), benchmark::Counter::kIsRate);
}

// The whole blocked loop nest of one thread (K blocks of kc, A blocks of mc rows, every B panel)
// on operands packed beforehand: a full GEMM minus its packing (C M x N row-major, beta = 0 on
// the first K block, 1 after). M a multiple of MR, N of NR, K of kc.
void bench_nopack(benchmark::State& state, int64_t M, int64_t N, int64_t K, int64_t mc, int64_t kc) {
    const GemmGeometry g = gemm_geometry(code_isa());
    const auto k0 = uk(false), k1 = uk(true);
    Buf A = alloc(size_t(M * K + kPackSlack)), B = alloc(size_t(K * N)), C = alloc(size_t(M * N));
    alignas(64) GemmScalars sc;
    sc.set(1.f, 1.f);
    GemmUkArgs a;
    a.kc = kc, a.ldc = N * 4, a.m_panels = mc / g.mr, a.scal = &sc;
    for (auto _ : state) {
        for (int64_t pc = 0; pc < K; pc += kc) {
            const GemmUkFn fn = pc ? k1->fn : k0->fn;
            for (int64_t ic = 0; ic < M; ic += mc) {
                a.a = A.get() + pc * M + ic * kc;
                a.m_panels = std::min(mc, M - ic) / g.mr;
                for (int64_t jr = 0; jr < N; jr += g.nr) {
                    a.b = B.get() + pc * N + jr * kc;
                    a.c = C.get() + ic * N + jr;
                    fn(&a);
                }
            }
        }
        benchmark::ClobberMemory();
    }
    state.counters["GFLOPS"] =
        benchmark::Counter(2.0 * double(M) * N * K * double(state.iterations()), benchmark::Counter::kIsRate);
}

void bench_pack(benchmark::State& state, bool is_a, int64_t rows, int64_t cols, int64_t kc, int64_t blk) {
    // is_a: A is rows (M) x cols (K), packed in blk (mc) x kc blocks; else B is rows (K) x cols (N),
    // packed in kc x blk (nc) blocks.
    const GemmGeometry g = gemm_geometry(code_isa());
    Buf src = alloc(size_t(rows * cols));
    Buf dst = alloc(size_t((is_a ? blk : std::min(blk, cols) + g.nr) * kc + kPackSlack));
    for (auto _ : state) {
        if (is_a) {
            for (int64_t pc = 0; pc < cols; pc += kc)
                for (int64_t ic = 0; ic < rows; ic += blk)
                    gemm_pack_a(src.get() + ic * cols + pc, cols, false, std::min(blk, rows - ic),
                                std::min(kc, cols - pc), g.mr, dst.get());
        } else {
            for (int64_t jc = 0; jc < cols; jc += blk)
                for (int64_t pc = 0; pc < rows; pc += kc)
                    gemm_pack_b(src.get() + pc * cols + jc, cols, false, std::min(kc, rows - pc),
                                std::min(blk, cols - jc), g.nr, dst.get());
        }
        benchmark::ClobberMemory();
    }
    state.counters["GBPS"] =
        benchmark::Counter(4.0 * double(rows * cols) * double(state.iterations()), benchmark::Counter::kIsRate);
}

int register_all() {
    const std::string t = "/threads:1";
    for (int64_t kc : {64, 128, 256, 344, 384, 512})
        for (int64_t mp : {1, 4, 28})
            for (bool acc : {false, true})
                benchmark::RegisterBenchmark(("gemm_uk/f32/xk/uk_kc" + std::to_string(kc) + "_mp" + std::to_string(mp) +
                                              (acc ? "_acc" : "") + t)
                                                 .c_str(),
                                             bench_uk, kc, mp, acc)
                    ->UseRealTime();
    const int64_t mcs[] = {96, 168, 336};
    for (int64_t kc : {256, 344, 384})
        for (int64_t mc : mcs)
            for (int64_t nc : {256, 1024, 3072})
                benchmark::RegisterBenchmark(("gemm_uk/f32/xk/macro_" + std::to_string(mc) + "x" + std::to_string(nc) +
                                              "x" + std::to_string(kc) + t)
                                                 .c_str(),
                                             bench_macro, mc, nc, kc, 0)
                    ->UseRealTime();
    for (int mode : {1, 2, 3})
        benchmark::RegisterBenchmark(("gemm_uk/f32/xk/macro_168x1024x344_" + std::string(mode == 1 ? "sameB" : mode == 2 ? "sameC" : "ldc1040") + t)
                                         .c_str(),
                                     bench_macro, 168, 1024, 344, mode)
            ->UseRealTime();
    for (int64_t mc : {96, 120, 168})
        for (int64_t kc : {256, 344, 512})
            benchmark::RegisterBenchmark(("gemm_uk/f32/xk/nopack_1008x1024x1032_mc" + std::to_string(mc) + "_kc" +
                                          std::to_string(kc) + t)
                                             .c_str(),
                                         bench_nopack, 1008, 1024, kc == 344 ? 1032 : 1024, mc, kc)
                ->UseRealTime();
    for (int64_t n : {512, 1024, 2048}) {
        benchmark::RegisterBenchmark(("gemm_uk/f32/xk/packA_" + std::to_string(n) + "x" + std::to_string(n) + t).c_str(),
                                     bench_pack, true, n, n, 344, 168)
            ->UseRealTime();
        benchmark::RegisterBenchmark(("gemm_uk/f32/xk/packB_" + std::to_string(n) + "x" + std::to_string(n) + t).c_str(),
                                     bench_pack, false, n, n, 344, 5456)
            ->UseRealTime();
    }
    return 0;
}
const int registered = register_all();

}  // namespace
