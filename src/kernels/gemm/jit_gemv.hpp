// fp32 GEMM, decode / GEMV path: y[M x N] = x[M x K] * op(B) for small M (LLM decode Linear
// layers), memory-bound on the weight B, which is streamed once at memory bandwidth.
//
// Packed layout of B ("f32:panel32:K<K>:N<N>", the same for every ISA): op(B) (K x N) cut into
// panels of kPanel = 32 columns; panel p holds rows k = 0..K-1 of columns 32p..32p+31, one
// 128-byte row after the other (element (k, n) at [(n / 32) * K * 32 + k * 32 + n % 32]); the last
// panel is zero-padded to 32 columns. A thread streams its range of panels linearly.
//
// Kernels (jit_gemv.cpp), xbyak generators per ISA (AVX2: ymm; AVX-512: zmm, the same generators
// with the register count and the vector width as parameters), each variant created once through
// the KernelCache and shared by every shape ("gemm_f32_gemv_<kind>|<isa>|mr<rows>|..."):
//   * panel micro-kernel: acc[mr x 32] (+)= Apack[mr x kc] * B[kc x 32], B rows read at a runtime
//     byte stride, accumulators in registers (AVX2: mr <= 3 rows x 4 ymm; AVX-512: mr <= 12 rows
//     x 2 zmm with embedded broadcasts of A; mr = 2 keeps 2 accumulator sets over alternating k);
//     prefetch variants (none; dense: every line of the next K block; sparse: one line per KiB of
//     the stream, `pf_bytes` ahead);
//   * stream micro-kernel (packed B, M = 1): 3 (AVX2) / 4 (AVX-512) panels of a thread's range
//     read in lockstep: that many DRAM streams in flight (faster than one on Zen 3) and 12 / 8
//     independent accumulators; a panel's sums are those of the panel micro-kernel, so results do
//     not depend on the thread count;
//   * dot micro-kernel (unpacked B^T = PyTorch's W[N x K], M <= 16): acc[mr x nj] over k along
//     the rows of W with vectors (masked k tail), horizontal sums at the end; W streams from
//     memory nj (8 for M = 1, else 4) rows at a time, no transposition;
//   * row-sweep micro-kernel (unpacked [K x N] B, one row tile: M <= 2 / 4): acc[mr x cw] += x * B rows,
//     four rows of B at a time (eight for M = 1, FMAs reading B from memory, 128 bytes of each
//     row per step, no software prefetch) over whole column ranges, i.e. B read in its memory order; with one
//     row tile the accumulators span whole rows (up to 128 KiB, in L2) and K is cut into slices
//     (a count that depends on K alone) that the threads take whole, their sums added in order;
//     with more rows, an unpacked [K x N] B is copied into panels, runs of up to 128 panels
//     (16 KiB of each row read from DRAM at a time) x 64 rows, for the panel micro-kernel;
//   * transposer (8x8 ymm transposes): packs B^T into panels (pack_b, and the on-the-fly path of
//     an unpacked B^T when M > 16).
// Driver: op(A) repacked k-major per row tile (M x K floats, ~M/N of the weight traffic); the
// panels (column ranges) handed to the threads of parallel_for in contiguous chunks from a shared
// counter (a CPU busy with other work does not hold the others back); per panel, K cut into blocks of kc rows that
// stay in L1 while the row tiles of M re-read them (several tiles: 64 rows; AVX2 with M <= 16: 16 rows); the epilogue on the L1-hot 32-column tile,
// storing only the valid columns (the N tail).
// Packed and unpacked B agree within the fp32 tolerance; for M > 16 (the panel path) they use
// the same sums in the same order, hence the same bits.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gemm/gemm.hpp"

namespace xk::detail {

constexpr int64_t kGemvPanel = 32;  // columns per packed panel

// The packed layout name for a K x N fp32 B (independent of the ISA).
std::string gemm_f32_panel_layout(int64_t K, int64_t N);

// fp32 GEMMs the decode kernel is selected for: M <= kGemvMaxM.
constexpr int64_t kGemvMaxM = 16;
bool gemv_supports(const GemmSpec& s);
// fp32 GEMMs of any M (the same kernel; until the blocked JIT GEMM takes the larger shapes, so that
// every fp32 plan of one ISA shares the packed layout and one PackedB serves every batch size).
bool gemm_panel_supports(const GemmSpec& s);

// isa: Isa::avx2 (ymm) or Isa::avx512 (zmm). Throws if the machine lacks it.
std::shared_ptr<const GemmKernel> create_gemv_avx2(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemv_avx512(const GemmSpec& s);
// The AVX-512 decode kernel reading the blocked kernel's PackedB (gemm_b_layout(avx512): K blocks of
// 32-column panels, each panel's rows of one K block contiguous): not selectable, found by
// GemmPlan::run for an M <= 16 plan given a PackedB of a prefill plan (gemm_kernel_for_layout), so
// that one packed weight serves both. The same kernels, a K block's run of rows at a time.
std::shared_ptr<const GemmKernel> create_gemv_avx512_blocked(const GemmSpec& s);

// Tuning knobs, exposed for the tests and the benchmark (defaults in jit_gemv.cpp).
struct GemvTuning {
    int64_t kc = 0;           // rows of a K block (0 = default)
    int64_t pf_bytes = -1;    // sparse prefetch distance in a one-tile packed stream (-1 = default, 0 = off)
    int pf_hint = 0;          // 0 prefetcht0, 1 prefetcht1, 2 prefetchnta (applies to kernels created later)
    int64_t ks = 0;           // rows of an unpacked B^T transposed at once (0 = default; rounded to kc)
    int64_t pf_transpose = -1;  // transposer prefetch distance in bytes (-1 = default, 0 = off)
    int64_t ks_n = 0;         // rows of an unpacked [K x N] B copied at once (0 = default; rounded to kc)
    int64_t chunk_n = 0;      // panels of an unpacked [K x N] B copied together (0 = default)
    int64_t streams = 0;      // M = 1, packed B: panels streamed in lockstep (0 = default, 1 = one; at most
                              // 3 with AVX2, 4 with AVX-512; applies to kernels created later)
};
// Process-wide override (tests / benchmark only; not thread-safe against running kernels).
void gemv_set_tuning(const GemvTuning& t);
GemvTuning gemv_tuning();

// Largest row tile of the micro-kernel for an ISA.
int gemv_max_mr(Isa isa);

// Emits (without running) every generator variant for `isa` (avx2 or avx512), whether or not
// this machine has it: "what:code bytes" per variant. Throws if xbyak rejects an instruction, so
// the tests check the encoding of the AVX-512 kernels on machines without AVX-512.
std::vector<std::string> gemv_generate_all(Isa isa);

}  // namespace xk::detail
