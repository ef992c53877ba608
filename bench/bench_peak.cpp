// Machine peaks, the yardsticks of every other benchmark: xbyak loops of independent multiply-add
// chains per instruction family (compute, GFLOPS) and STREAM-style loops over a DRAM-sized working
// set (bandwidth, GBPS).
//
// Compute (each benchmark thread runs its own loop; ->Threads(N) with real time, so the GFLOPS
// counter is the aggregate rate of N cores):
//   peak/f32/xk/fma_ymm        VFMADD231PS ymm           8 lanes x 2 flops           = 16 / instr
//   peak/f32/xk/fma_zmm        VFMADD231PS zmm (avx512)  16 lanes x 2 flops          = 32 / instr
//   peak/bf16/xk/vdpbf16ps     VDPBF16PS zmm             16 lanes x 2 MAC x 2 flops  = 64 / instr
//   peak/s8/xk/vpdpbusd        VPDPBUSD zmm (avx512_vnni) 16 lanes x 4 MAC x 2 ops   = 128 / instr
//   peak/s8/xk/vpdpbusd_ymm    VPDPBUSD ymm (avx2_vnni: VEX with AVX-VNNI, else EVEX)
//                                                      8 lanes x 4 MAC x 2 ops = 64 / instr
//   peak/bf16/xk/tdpbf16ps     TDPBF16PS (AMX) 16x16 fp32 += 16x32 bf16 * 32x16 bf16 = 16384 / instr
//   peak/s8/xk/tdpbusd         TDPBUSD (AMX)   16x16 s32 += 16x64 u8 * 64x16 s8      = 32768 / instr
// Vector loops keep 12 ymm / 24 zmm accumulators (2 ports x 6 / 12 cycles of latency);
// AMX loops keep 6 accumulator tiles against one A and one B tile (independent chains: the issue
// rate, not the product's latency).
//   peak/bf16/xk/amx_kernel_l1 / _l2  the AMX GEMM's 32 x 32 tile kernel (tile loads and all) on
//                              operands resident in L1 / L2 (below): what feeding the tiles costs
// Variants the machine lacks are registered but skipped with a message (SkipWithError), so the
// list of names is the same everywhere. The loops live in peak_loops.hpp (bench_gemm runs the
// same ones between its calls for its Peak% counter).
//
// Bandwidth (xk's parallel_for over nt:N threads, real time; bytes read + written, no RFO):
//   peak/f32/xk/copy      c[i] = a[i]              8 B/elem, regular stores
//   peak/f32/xk/copy_nt   c[i] = a[i]              8 B/elem, non-temporal stores
//   peak/f32/xk/triad     c[i] = a[i] + s*b[i]    12 B/elem
//   peak/f32/xk/sum       s += a[i], then b[i]     4 B/elem (read only)
//   peak/f32/xk/mul_nt    c[i] = a[i] * b[i]      12 B/elem, non-temporal stores (two read
//                                                  streams and one written: the GLU ops' pattern)
// Arrays of XK_BENCH_ROTATE_MB/2 each (default 512 MiB): copy and sum stream 1 GiB per
// iteration, triad and mul_nt 1.5 GiB, far beyond the last-level cache.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "bench_util.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/gemm/amx_tile.hpp"
#include "peak_loops.hpp"
#include "xk/isa.hpp"

namespace {

using xk::Isa;
using xk::detail::JitGenerator;
using namespace xk::bench::peak;

void BM_compute(benchmark::State& state, ComputeOp op) {
    const std::string why = unsupported(op);
    if (!why.empty()) {
        state.SkipWithError(why.c_str());
        return;
    }
    const ComputeInfo& in = info(op);
    const ComputeFn fn = compute_kernel(op);
    PeakData data;
    init_data(data, op);
    for (auto _ : state) fn(in.iters, &data);
    xk::bench::set_gflops(state, in.flops * in.instr_per_iter * static_cast<double>(in.iters));
}

// ---- the AMX GEMM's tile kernel on cache-resident operands ----
// peak/bf16/xk/amx_kernel_l1: the 32 x 32 block kernel of the GEMM (A 2 KiB + B 2 KiB a k step,
// loads interleaved with the four products, A and B prefetched) over 8 k steps of one A block and
// one B block (32 KiB: L1); _l2: over 64 k steps of one A block (128 KiB) against 8 B blocks (1 MiB)
// in turn, the GEMM's inner loop at K = 2048 with its operands in L2; _l2_k8: the same operands in
// K blocks of 8 steps (A's 16 KiB slice in L1 while the 8 B blocks pass, the C tiles parked in a
// 32 KiB buffer between K blocks). Each benchmark thread its own operands; GFLOPS against
// peak/bf16/xk/tdpbf16ps (no loads) is what feeding the tiles costs.
void BM_amx_kernel(benchmark::State& state, int64_t steps, int64_t nblk, int64_t kblk) {
    const std::string why = unsupported(ComputeOp::tdpbf16ps);
    if (!why.empty()) {
        state.SkipWithError(why.c_str());
        return;
    }
    const xk::detail::AmxBf16Tile tile = xk::detail::amx_bf16_tile();
    const size_t step_bytes = xk::detail::kAmxTileStepBytes;
    auto a = xk::bench::alloc_aligned<uint16_t>(static_cast<size_t>(steps) * step_bytes / 2);
    auto b = xk::bench::alloc_aligned<uint16_t>(static_cast<size_t>(steps * nblk) * step_bytes / 2);
    auto acc = xk::bench::alloc_aligned<float>(static_cast<size_t>(32 * 32 * nblk));
    const uint16_t v = xk::bf16(0.01f).bits;
    std::fill(a.get(), a.get() + steps * step_bytes / 2, v);
    std::fill(b.get(), b.get() + steps * nblk * step_bytes / 2, v);
    xk::detail::AmxTileArgs t;
    t.lda = 64, t.a_step = static_cast<int64_t>(step_bytes), t.steps = kblk;
    tile.configure(xk::detail::amx_tile_config());
    for (auto _ : state)
        for (int64_t k0 = 0; k0 < steps; k0 += kblk)
            for (int64_t nb = 0; nb < nblk; ++nb) {
                t.a = a.get() + k0 * static_cast<int64_t>(step_bytes / 2);
                t.b = b.get() + (nb * steps + k0) * static_cast<int64_t>(step_bytes / 2);
                t.acc = acc.get() + nb * 32 * 32;
                t.accumulate = k0 > 0;
                tile.fn(&t);
            }
    tile.release();
    xk::bench::set_gflops(state, 2.0 * 32 * 32 * 32 * static_cast<double>(steps * nblk));
}

// ---- bandwidth ----------------------------------------------------------------------------------
enum class StreamOp { copy, copy_nt, triad, sum, mul_nt };

// void fn(const float* a, const float* b, float* c, int64_t n, const float* s); n a positive
// multiple of 32; 32-byte aligned arrays (copy_nt). sum: c[0..7] = partial sums of a.
using StreamFn = void (*)(const float*, const float*, float*, int64_t, const float*);

class JitStream : public JitGenerator {
public:
    explicit JitStream(StreamOp op) : JitGenerator(Isa::avx2) {
        using namespace Xbyak;
        preamble();
        const Reg64 a = abi_param1, b = abi_param2, c = abi_param3, n = abi_param4, s = abi_param5;
        constexpr int U = 4;  // ymm per iteration: 32 floats
        if (op == StreamOp::triad) vbroadcastss(ymm15, ptr[s]);
        if (op == StreamOp::sum)
            for (int i = 0; i < U; ++i) vxorps(Ymm(i), Ymm(i), Ymm(i));
        Label loop;
        L(loop);
        switch (op) {
            case StreamOp::copy:
            case StreamOp::copy_nt:
                for (int i = 0; i < U; ++i) vmovups(Ymm(i), ptr[a + 32 * i]);
                for (int i = 0; i < U; ++i) {
                    if (op == StreamOp::copy_nt) vmovntps(ptr[c + 32 * i], Ymm(i));
                    else vmovups(ptr[c + 32 * i], Ymm(i));
                }
                break;
            case StreamOp::triad:
                for (int i = 0; i < U; ++i) {
                    vmovups(Ymm(i), ptr[b + 32 * i]);
                    vfmadd213ps(Ymm(i), ymm15, ptr[a + 32 * i]);  // b*s + a
                    vmovups(ptr[c + 32 * i], Ymm(i));
                }
                break;
            case StreamOp::sum:
                for (int i = 0; i < U; ++i) vaddps(Ymm(i), Ymm(i), ptr[a + 32 * i]);
                break;
            case StreamOp::mul_nt:
                for (int i = 0; i < U; ++i) {
                    vmovups(Ymm(i), ptr[a + 32 * i]);
                    vmulps(Ymm(i), Ymm(i), ptr[b + 32 * i]);
                    vmovntps(ptr[c + 32 * i], Ymm(i));
                }
                break;
        }
        add(a, 32 * U);
        if (op == StreamOp::triad || op == StreamOp::mul_nt) add(b, 32 * U);
        if (op != StreamOp::sum) add(c, 32 * U);
        sub(n, 8 * U);
        jnz(loop);
        if (op == StreamOp::copy_nt || op == StreamOp::mul_nt) sfence();
        if (op == StreamOp::sum) {
            vaddps(ymm0, ymm0, ymm1);
            vaddps(ymm2, ymm2, ymm3);
            vaddps(ymm0, ymm0, ymm2);
            vmovups(ptr[c], ymm0);
        }
        postamble();
    }
};

StreamFn stream_kernel(StreamOp op) {
    static std::mutex mu;
    static std::unique_ptr<JitStream> gens[5];
    static StreamFn fns[5] = {};
    std::lock_guard<std::mutex> lock(mu);
    const int i = static_cast<int>(op);
    if (!fns[i]) {
        gens[i] = std::make_unique<JitStream>(op);
        fns[i] = gens[i]->finalize<StreamFn>();
    }
    return fns[i];
}

constexpr int64_t kBlock = 4096;  // floats per parallel work item (16 KiB)

// Three arrays of rotate_bytes()/2 each (rounded down to whole blocks), allocated and filled once,
// staggered by 256 bytes so a[i], b[i], c[i] never share their low 12 address bits.
struct StreamPool {
    int64_t n = 0;  // floats per array
    xk::bench::AlignedArray<float> mem[3];
    float* p[3] = {};
    StreamPool() {
        n = std::max<int64_t>(kBlock, static_cast<int64_t>(xk::bench::rotate_bytes() / 2 / sizeof(float)) / kBlock * kBlock);
        for (int j = 0; j < 3; ++j) {
            mem[j] = xk::bench::alloc_aligned<float>(static_cast<size_t>(n) + 64 * 3);
            p[j] = mem[j].get() + 64 * j;
            xk::bench::fill_value(p[j], static_cast<size_t>(n), 1.0f + j);
        }
    }
};

StreamPool& stream_pool() {
    static StreamPool pool;  // thread-safe lazy construction; only when a bandwidth benchmark runs
    return pool;
}

void BM_stream(benchmark::State& state, StreamOp op, int nt) {
    if (!xk::isa_supported(Isa::avx2)) {
        state.SkipWithError("skipped: the STREAM loops need avx2");
        return;
    }
    xk::bench::ScopedThreads threads(nt);
    StreamPool& pool = stream_pool();
    const StreamFn fn = stream_kernel(op);
    const int64_t n = pool.n, blocks = n / kBlock;
    const float scalar = 0.5f;
    float* a = pool.p[0];
    float* b = pool.p[1];
    float* c = pool.p[2];
    alignas(64) float partial[32][16] = {};  // one slot per work chunk: a's and b's partial sums
    std::atomic<int> slot{0};
    for (auto _ : state) {
        slot.store(0, std::memory_order_relaxed);
        xk::detail::parallel_for(blocks, 1, [&](int64_t bb, int64_t be) {
            const int64_t off = bb * kBlock, len = (be - bb) * kBlock;
            if (op == StreamOp::sum) {
                float* out = partial[slot.fetch_add(1, std::memory_order_relaxed) % 32];
                fn(a + off, nullptr, out, len, nullptr);
                fn(b + off, nullptr, out + 8, len, nullptr);  // the second half of the working set
            } else {
                fn(a + off, b + off, c + off, len, &scalar);
            }
        });
        benchmark::DoNotOptimize(partial);
        benchmark::ClobberMemory();
    }
    const double per_elem = op == StreamOp::triad || op == StreamOp::mul_nt ? 12 : 8;  // sum: 4 B from a and 4 B from b
    xk::bench::set_gbps(state, per_elem * static_cast<double>(n));
    state.SetLabel(std::to_string((static_cast<int64_t>(per_elem) * n) >> 20) + " MiB/iter");
}

const bool registered = [] {
    const std::vector<int> threads = xk::bench::thread_counts();
    for (int i = 0; i < static_cast<int>(ComputeOp::count); ++i) {
        const ComputeOp op = static_cast<ComputeOp>(i);
        auto* b = benchmark::RegisterBenchmark(info(op).name, BM_compute, op);
        for (int t : threads) b->Threads(t);
        b->UseRealTime();
    }
    for (const auto& k : {std::pair<const char*, std::array<int64_t, 3>>{"peak/bf16/xk/amx_kernel_l1", {8, 1, 8}},
                          {"peak/bf16/xk/amx_kernel_l2", {64, 8, 64}},
                          {"peak/bf16/xk/amx_kernel_l2_k8", {64, 8, 8}}}) {
        auto* b = benchmark::RegisterBenchmark(k.first, BM_amx_kernel, k.second[0], k.second[1], k.second[2]);
        for (int t : threads) b->Threads(t);
        b->UseRealTime();
    }
    const std::pair<StreamOp, const char*> streams[] = {
        {StreamOp::copy, "copy"}, {StreamOp::copy_nt, "copy_nt"}, {StreamOp::triad, "triad"}, {StreamOp::sum, "sum"},
        {StreamOp::mul_nt, "mul_nt"}};
    for (const auto& s : streams)
        for (int t : threads)
            benchmark::RegisterBenchmark(
                xk::bench::join_name({"peak", "f32", "xk", s.second, "nt:" + std::to_string(t)}).c_str(), BM_stream,
                s.first, t)
                ->UseRealTime();
    return true;
}();

}  // namespace
