// The instruction-peak loops of bench_peak, shared with the benchmarks that state their rows as a
// share of the peak measured in the same process (bench_gemm's Peak%): one xbyak loop per
// instruction family, independent multiply-add chains, nothing but the instruction and the loop.
//
//   op             instruction                    flops (or int ops) per instruction
//   fma_ymm        VFMADD231PS ymm                8 lanes x 2                   = 16
//   fma_zmm        VFMADD231PS zmm (avx512)       16 lanes x 2                  = 32
//   vdpbf16ps      VDPBF16PS zmm (avx512_bf16)    16 lanes x 2 MAC x 2          = 64
//   vpdpbusd       VPDPBUSD zmm (avx512_vnni)     16 lanes x 4 MAC x 2          = 128
//   vpdpbusd_ymm   VPDPBUSD ymm (avx2_vnni level) 8 lanes x 4 MAC x 2           = 64
//                  (VEX with AVX-VNNI, else EVEX with AVX512-VNNI + VL: the form xk's kernels emit)
//   tdpbf16ps      TDPBF16PS (AMX) 16x16 fp32 += 16x32 bf16 * 32x16 bf16       = 16384
//   tdpbusd        TDPBUSD (AMX)   16x16 s32 += 16x64 u8 * 64x16 s8            = 32768
// Vector loops keep 12 ymm / 24 zmm accumulators (2 ports x 6 / 12 cycles of latency); AMX loops
// keep 6 accumulator tiles against one A and one B tile (see kAmxAcc below).
//
// compute_kernel(op) is the JIT'd loop (one thread); run_peak(op, flops) runs about `flops` of it
// spread over xk's current thread count (one share per thread, xk's parallel_for) and returns the
// flops it ran (bench_gemm runs it between its calls through bench_util.hpp's InPhase).
#pragma once
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "common/parallel.hpp"
#include "dispatch/jit_generator.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace xk::bench::peak {

using xk::Isa;
using xk::detail::JitGenerator;

// ---- the loops ------------------------------------------------------------------------------------
enum class ComputeOp { fma_ymm, fma_zmm, vdpbf16ps, vpdpbusd, vpdpbusd_ymm, tdpbf16ps, tdpbusd, count };

struct ComputeInfo {
    const char* name;   // benchmark name
    Isa isa;            // JitGenerator ISA (vzeroupper etc.)
    double flops;       // per instruction
    int instr_per_iter; // instructions per loop iteration
    int64_t iters;      // loop iterations per call
};

// Accumulators: 12 ymm (of 16 registers) or 24 zmm (of 32): at two instructions a cycle that
// covers a latency of 6 or 12 cycles.
constexpr int kAccYmm = 12, kAccZmm = 24, kUnroll = 2;
constexpr int kAmxUnroll = 2;
// AMX: 6 accumulator tiles (tmm0..5) against one A (tmm6) and one B (tmm7) tile that never change:
// six independent chains of products cover the product's latency, so the loop measures the issue
// rate. The earlier 2 x 2 loop (4 chains) was latency-bound on one core: device Xeon, two runs,
// bf16 1 thread 1,779 / 962 GFLOP/s against 2,287 / 1,808 for this one (int8 2,254 / 1,890 against
// 2,773 / 2,404 GOP/s); at 16 threads both read the same within the host's noise (16.3-19.1 TFLOP/s).
constexpr int kAmxAcc = 6;

inline const ComputeInfo& info(ComputeOp op) {
    static const ComputeInfo table[] = {
        {"peak/f32/xk/fma_ymm", Isa::avx2, 8 * 2, kAccYmm * kUnroll, 1 << 13},
        {"peak/f32/xk/fma_zmm", Isa::avx512, 16 * 2, kAccZmm * kUnroll, 1 << 12},
        {"peak/bf16/xk/vdpbf16ps", Isa::avx512, 16 * 2 * 2, kAccZmm * kUnroll, 1 << 12},
        {"peak/s8/xk/vpdpbusd", Isa::avx512, 16 * 4 * 2, kAccZmm * kUnroll, 1 << 12},
        {"peak/s8/xk/vpdpbusd_ymm", Isa::avx2, 8 * 4 * 2, kAccYmm * kUnroll, 1 << 13},
        {"peak/bf16/xk/tdpbf16ps", Isa::amx, 16.0 * 16 * 32 * 2, kAmxAcc * kAmxUnroll, 1 << 10},
        {"peak/s8/xk/tdpbusd", Isa::amx, 16.0 * 16 * 64 * 2, kAmxAcc * kAmxUnroll, 1 << 10},
    };
    return table[static_cast<int>(op)];
}

// Empty when the machine runs `op`, else why not.
inline std::string unsupported(ComputeOp op) {
    const xk::CpuInfo& c = xk::cpu_info();
    const std::string machine = std::string(" (this machine: ") + xk::isa_name(xk::hardware_isa()) + ")";
    switch (op) {
        case ComputeOp::fma_ymm:
            return xk::isa_supported(Isa::avx2) ? "" : "skipped: needs avx2+fma" + machine;
        case ComputeOp::fma_zmm:
            return xk::isa_supported(Isa::avx512) ? "" : "skipped: needs avx512" + machine;
        case ComputeOp::vdpbf16ps:
            return xk::isa_supported(Isa::avx512) && c.avx512_bf16 ? "" : "skipped: needs avx512_bf16" + machine;
        case ComputeOp::vpdpbusd:
            return xk::isa_supported(Isa::avx512) && c.avx512_vnni ? "" : "skipped: needs avx512_vnni" + machine;
        case ComputeOp::vpdpbusd_ymm:
            return xk::isa_supported(Isa::avx2_vnni) ? "" : "skipped: needs avx_vnni or avx512_vnni" + machine;
        case ComputeOp::tdpbf16ps:
        case ComputeOp::tdpbusd:
            if (c.amx_tile && c.amx_bf16 && c.amx_int8 && c.os_tile && !c.amx_permission)
                return "skipped: AMX present but the XTILEDATA permission (arch_prctl) was refused";
            return xk::isa_supported(Isa::amx) ? "" : "skipped: needs amx" + machine;
        case ComputeOp::count: break;
    }
    return "skipped: unknown op";
}

// Operands of one loop: two vector inputs, the AMX tile configuration and one 16x64-byte tile.
struct alignas(64) PeakData {
    uint8_t v0[64], v1[64];
    uint8_t tilecfg[64];
    uint8_t tile[16 * 64];
};

// void fn(int64_t iters, const PeakData* data), iters >= 1.
using ComputeFn = void (*)(int64_t, const PeakData*);

class JitComputePeak : public JitGenerator {
public:
    explicit JitComputePeak(ComputeOp op) : JitGenerator(info(op).isa) {
        preamble();
        if (op == ComputeOp::tdpbf16ps || op == ComputeOp::tdpbusd) {
            amx(op);
        } else {
            vec(op);
        }
        postamble();
    }

private:
    void vec(ComputeOp op) {
        using namespace Xbyak;
        const Reg64 iters = abi_param1, data = abi_param2;
        const bool z = op == ComputeOp::fma_zmm || op == ComputeOp::vdpbf16ps || op == ComputeOp::vpdpbusd;
        auto V = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        const int acc = z ? kAccZmm : kAccYmm;
        const Xmm va = V(acc), vb = V(acc + 1);  // the two inputs, after the accumulators
        for (int i = 0; i < acc; ++i) {
            if (z) vpxord(V(i), V(i), V(i));
            else vxorps(V(i), V(i), V(i));
        }
        vmovups(va, ptr[data + offsetof(PeakData, v0)]);
        vmovups(vb, ptr[data + offsetof(PeakData, v1)]);
        Label loop;
        L(loop);
        for (int u = 0; u < kUnroll; ++u) {
            for (int i = 0; i < acc; ++i) {
                switch (op) {
                    case ComputeOp::fma_ymm:
                    case ComputeOp::fma_zmm: vfmadd231ps(V(i), va, vb); break;
                    case ComputeOp::vdpbf16ps: vdpbf16ps(V(i), va, vb); break;
                    case ComputeOp::vpdpbusd: vpdpbusd(V(i), va, vb); break;
                    case ComputeOp::vpdpbusd_ymm:
                        vpdpbusd(V(i), va, vb, xk::cpu_info().avx_vnni ? VexEncoding : EvexEncoding);
                        break;
                    default: break;
                }
            }
        }
        dec(iters);
        jnz(loop);
    }

    void amx(ComputeOp op) {
        using namespace Xbyak;
        const Reg64 iters = abi_param1, data = abi_param2;
        ldtilecfg(ptr[data + offsetof(PeakData, tilecfg)]);
        lea(r8, ptr[data + offsetof(PeakData, tile)]);
        mov(rax, 64);  // row stride of the 16x64-byte source tiles
        for (int t = kAmxAcc; t < 8; ++t) tileloadd(Tmm(t), ptr[r8 + rax]);
        for (int t = 0; t < kAmxAcc; ++t) tilezero(Tmm(t));
        Label loop;
        L(loop);
        for (int u = 0; u < kAmxUnroll; ++u) {
            // C[i] += A * B: accumulators tmm0..5, A tmm6, B tmm7.
            for (int i = 0; i < kAmxAcc; ++i) {
                if (op == ComputeOp::tdpbf16ps) tdpbf16ps(Tmm(i), Tmm(6), Tmm(7));
                else tdpbusd(Tmm(i), Tmm(6), Tmm(7));
            }
        }
        dec(iters);
        jnz(loop);
        tilerelease();
    }
};

inline ComputeFn compute_kernel(ComputeOp op) {
    static std::mutex mu;
    static std::unique_ptr<JitComputePeak> gens[static_cast<int>(ComputeOp::count)];
    static ComputeFn fns[static_cast<int>(ComputeOp::count)] = {};
    std::lock_guard<std::mutex> lock(mu);
    const int i = static_cast<int>(op);
    if (!fns[i]) {
        gens[i] = std::make_unique<JitComputePeak>(op);
        fns[i] = gens[i]->finalize<ComputeFn>();
    }
    return fns[i];
}

inline void init_data(PeakData& d, ComputeOp op) {
    std::memset(&d, 0, sizeof d);
    // Normal, finite operands whose accumulations stay finite and never become denormal.
    switch (op) {
        case ComputeOp::fma_ymm:
        case ComputeOp::fma_zmm: {
            const float a = 1.0f, b = 1e-6f;
            for (int i = 0; i < 16; ++i) {
                std::memcpy(d.v0 + 4 * i, &a, 4);
                std::memcpy(d.v1 + 4 * i, &b, 4);
            }
            break;
        }
        case ComputeOp::vdpbf16ps:
        case ComputeOp::tdpbf16ps: {
            const uint16_t one = xk::bf16(1.0f).bits, small = xk::bf16(1e-3f).bits;
            for (int i = 0; i < 32; ++i) {
                std::memcpy(d.v0 + 2 * i, &one, 2);
                std::memcpy(d.v1 + 2 * i, &small, 2);
            }
            for (int i = 0; i < 16 * 32; ++i) std::memcpy(d.tile + 2 * i, &small, 2);
            break;
        }
        default:  // int8 dot products: u8 1 x s8 1
            std::memset(d.v0, 1, sizeof d.v0);
            std::memset(d.v1, 1, sizeof d.v1);
            std::memset(d.tile, 1, sizeof d.tile);
            break;
    }
    // AMX palette 1: tiles 0..7 all 16 rows x 64 bytes (C 16x16 fp32/s32, A 16x32 bf16 / 16x64
    // u8, B 16 rows of 16 pairs / quads: the K-packed layout TDPBF16PS / TDPBUSD read).
    d.tilecfg[0] = 1;
    for (int t = 0; t < 8; ++t) {
        const uint16_t colsb = 64;
        std::memcpy(d.tilecfg + 16 + 2 * t, &colsb, 2);
        d.tilecfg[48 + t] = 16;
    }
}


// Runs about `flops` of op's loop over xk's current thread count (each thread its share, at least
// one loop iteration); returns the flops run. The op must be supported (unsupported(op) empty).
inline double run_peak(ComputeOp op, double flops) {
    const ComputeInfo& in = info(op);
    const ComputeFn fn = compute_kernel(op);
    const int threads = std::max(1, xk::get_num_threads());
    const double per_iter = in.flops * in.instr_per_iter;
    const int64_t iters = std::max<int64_t>(1, static_cast<int64_t>(flops / per_iter / threads));
    xk::detail::parallel_for(threads, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            PeakData d;
            init_data(d, op);
            fn(iters, &d);
        }
    });
    return static_cast<double>(iters) * per_iter * threads;
}

// Short name of an op for labels: "fma_zmm", "vdpbf16ps", ... (the last part of its bench_peak name).
inline const char* short_name(ComputeOp op) {
    const char* n = info(op).name;
    const char* s = std::strrchr(n, '/');
    return s ? s + 1 : n;
}

}  // namespace xk::bench::peak
