// The microkernel of the blocked fp32 GEMM (jit_gemm.cpp): C[mr x ncols] (op)= A_panel * B_panel
// for m_panels consecutive packed A panels against one packed B panel, with the fused store
// (f32 C, or bf16 C with an f32 partial sum P of the earlier K blocks: GemmEpi).
// Generated once per (ISA, mr, ncols, epilogue class) and shared through the kernel cache by
// every GEMM shape that needs it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/gemm/jit_gemm_common.hpp"

namespace xk::detail {

// Arguments of one call (read by the generated code at these offsets).
struct GemmUkArgs {
    const float* a = nullptr;    // m_panels packed A panels, each kc x MR (k-major; dp: 32-bit k-pairs)
    const float* b = nullptr;    // one packed B panel, kc x NR (dp: 32-bit k-pairs)
    void* c = nullptr;           // C[0, 0] of the first panel's tile (f32, or bf16 when epi.c is bf16)
    int64_t kc = 0;              // depth (>= 1; dp: pairs of k)
    int64_t ldc = 0;             // bytes
    int64_t m_panels = 0;        // >= 1; panel p writes rows [p*mr, p*mr + mr) (mr = the variant's rows)
    const float* bias = nullptr; // bias[0] of the tile's first column (epilogues with bias)
    const void* res = nullptr;   // residual[0, 0] of the first tile (epilogues with a residual)
    int64_t ldr = 0;             // residual row stride, bytes
    const GemmScalars* scal = nullptr;
    const float* part = nullptr; // P[0, 0] of the first tile (epi.partial: f32 partial sums)
    int64_t ldp = 0;             // P's row stride, bytes
};

struct GemmUkSpec {
    Isa isa = Isa::avx2;  // avx2 or avx512
    int mr = 0;           // rows (1..geometry.mr)
    int ncols = 0;        // valid columns (1..geometry.nr)
    // bf16 pairs (avx512 code shape, AVX512-BF16): the panels hold k-pairs of bf16 (jit_gemm.cpp),
    // kc counts pairs, each step one VDPBF16PS per accumulator instead of one FMA.
    bool dp = false;
    GemmEpi epi;
    std::string key() const;
};

using GemmUkFn = void (*)(const GemmUkArgs*);

struct GemmUkernel {
    virtual ~GemmUkernel() = default;
    GemmUkFn fn = nullptr;
};

// From the kernel cache (generated on first use).
std::shared_ptr<const GemmUkernel> gemm_ukernel(const GemmUkSpec& s);

}  // namespace xk::detail
