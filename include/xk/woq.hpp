// xkernels — weight-only quantized (WOQ) GEMM: Y[M x N] = X[M x K] * dequant(W)^T, W int8 or int4.
//
// The weights W are N x K (PyTorch's Linear weight: one row per output channel), quantized along K
// in groups of G = group_size elements (group_size 0: one group of K per row, "per channel"):
//
//   w[n, k] = fma(q[n, k], scale[n, g], offset[n, g])      g = k / group_size  (one f32 rounding)
//
// where the offset is -scale * zero_point (rounded to f32; exact for the symmetric int4 zero point
// 8 and for zero 0) or the float offset of an imported format (PyTorch int4: zero - 8 * scale).
//   s8: q signed int8 [-128, 127]; symmetric (zero point 0) or with an int8 zero point per group.
//   u4: q unsigned 0..15, two per byte: byte j of a row holds k = 2j in its LOW nibble and k = 2j+1
//       in its HIGH nibble (PyTorch's / torchao's plain order); symmetric = implied zero point 8,
//       or a uint8 zero point 0..15 per group. K must be even.
// Scales per (n, g) are finite and > 0; zero points lie in the weight type's range.
//
// Then, per output (m, n), with acc = sum over k of X[m, k] * w[n, k] in fp32, the GEMM epilogue
// (include/xk/gemm.hpp): x = alpha * acc, + beta * Y[m, n] (beta != 0 only), + bias[n] (f32[N]),
// act, + residual[m, n] (f32 or bf16), Y = x (rounded to nearest even for bf16 Y).
// X (A) and Y (C) are f32 or bf16 each; row-major with leading dimensions lda >= K, ldc >= N.
//
// How it runs (docs/woq.md):
//   M <= 16 (decode): the packed weights are streamed once, dequantized in registers (never a
//     dequantized copy of W); the sums of a group are scaled once per group:
//     acc = sum_g scale[n,g] * (sum_k X q) + offset[n,g] * (sum_k X) — the same value as the
//     formula above up to fp32 rounding. Threads split N.
//   M > 16 (prefill): blocks of W are dequantized (f32 for f32 X; rounded to bf16 for bf16 X, as
//     IPEX's lowp_mode BF16) into a cache-resident panel that runs through the GEMM kernels; on AMX
//     (bf16 X) straight into the AMX GEMM's tile layout, block by block inside its one call.
//   WoqDesc::compute = WoqCompute::int8 (opt-in, any M): X quantized per row to s8, exact integer
//     group sums with VPDPBUSD (see WoqCompute).
// Results do not depend on the thread count.
//
// Usage:
//   xk::WoqWeightDesc wd;  wd.N = 4096; wd.K = 4096; wd.type = xk::WoqWeightType::u4; wd.group_size = 128;
//   xk::WoqPackedWeight w = xk::woq_pack(wd, {qweight, scales, nullptr});   // once
//   xk::WoqDesc d;  d.M = 1; d.N = 4096; d.K = 4096; d.weight_type = xk::WoqWeightType::u4;
//   xk::WoqPlan plan(d);
//   plan.run({x, y}, w);                               // many times, any M plan, same weight
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "xk/gemm.hpp"
#include "xk/types.hpp"

namespace xk {

namespace detail {
struct WoqPacked;
struct WoqKernel;
}  // namespace detail

enum class WoqWeightType : int { s8 = 0, u4 = 1 };
constexpr const char* woq_weight_type_name(WoqWeightType t) noexcept {
    return t == WoqWeightType::s8 ? "s8" : t == WoqWeightType::u4 ? "u4" : "?";
}

// A quantized weight as the caller holds it.
struct WoqWeightDesc {
    int64_t N = 0, K = 0;
    WoqWeightType type = WoqWeightType::s8;
    int64_t group_size = 0;    // 0 = per output channel; else 32, 64, 128 or 256, dividing K
    bool zero_points = false;  // asymmetric: WoqWeightArgs::zero_points given (else symmetric)
    int64_t ld_w = 0;          // bytes between weight rows (0 = packed: K for s8, K/2 for u4)
};

struct WoqWeightArgs {
    const void* weights = nullptr;      // s8: int8 [N x ld_w]; u4: uint8 [N x ld_w], nibbles as above
    const float* scales = nullptr;      // [N x G] (G = K / group_size, 1 per channel), row n at n*G
    const void* zero_points = nullptr;  // [N x G]: s8: int8; u4: uint8 0..15 (read when zero_points)
};

// The weights in the kernels' own layout (blocks of 16 output channels), with their scales and
// offsets. Owned, immutable, shareable: one packed weight serves plans of every M.
class WoqPackedWeight {
public:
    WoqPackedWeight() = default;
    bool empty() const noexcept { return !data_; }
    int64_t N() const noexcept;
    int64_t K() const noexcept;
    int64_t group_size() const noexcept;  // K for a per-channel weight
    WoqWeightType type() const noexcept;
    bool has_offsets() const noexcept;    // false: symmetric s8 (offset 0)
    size_t size_bytes() const noexcept;
    std::string layout() const;           // e.g. "woq:u4:N4096:K4096:g128:off" ("" when empty)

private:
    friend struct WoqAccess;
    std::shared_ptr<const detail::WoqPacked> data_;
};

WoqPackedWeight woq_pack(const WoqWeightDesc& desc, const WoqWeightArgs& args);

// PyTorch: the inputs of torch._weight_int8pack_mm(x, w, scales): w int8 [N x K] (contiguous),
// scales [N] per output channel (scale_type f32, bf16 or f16, as torch allows x's dtype).
WoqPackedWeight woq_import_torch_int8pack(int64_t N, int64_t K, const int8_t* w, DType scale_type, const void* scales);

// PyTorch (>= 2.6): the inputs of torch._weight_int4pack_mm_for_cpu(x, w, group_size,
// scales_and_zeros): w uint8 [N x K/2] as made by torch._convert_weight_to_int4pack_for_cpu(q, 1)
// from q int32 [N x K] in 0..15, and scales_and_zeros [K/group_size x N x 2] (scale, zero) in
// sz_type (f32, bf16 or f16); w[n, k] = (q - 8) * scale + zero. The packed order depends on the
// vector width torch ran with: block_n = 64 (AVX-512 builds, the default here) or 32 (AVX2 /
// scalar), blocks of block_n rows; a last partial block (and N < block_n) pairs rows n, n+1.
// group_size 32, 64, 128 or 256, dividing K.
WoqPackedWeight woq_import_torch_int4pack_cpu(int64_t N, int64_t K, int64_t group_size, const uint8_t* w,
                                              DType sz_type, const void* scales_and_zeros, int block_n = 64);

// llama.cpp GGUF blocks (ggml type ids): Q8_0 (34 bytes per 32 weights: fp16 d, int8 qs[32];
// w = d * q) and Q4_0 (18 bytes: fp16 d, uint8 qs[16]; w = d * (q - 8) with element j in the low
// nibble of qs[j] and element 16 + j in its high nibble, j < 16). data: N rows of K / 32 blocks,
// row-major, as in a GGUF tensor of ne = {K, N}. Both convert without loss (group 32, f32 scales).
enum class GgufType : int { q4_0 = 2, q8_0 = 8 };
WoqPackedWeight woq_import_gguf(GgufType type, int64_t N, int64_t K, const void* data);

// The dequantized weights w[n, k] (f32 [N x K], ld = K): the formula above, for checks.
void woq_dequantize(const WoqPackedWeight& w, float* out);

// How the sums are computed.
//   exact: X as given (f32, or bf16 widened), fp32 sums of x * w (the formula above).
//   int8:  IPEX's lowp_mode INT8: each row of X is quantized to s8 symmetric inside the call,
//          sx[m] = max_k |x[m, k]| / 127 (1 for a zero row), xq = round_half_even(x * (1 / sx))
//          clamped to [-127, 127], and each group's integer sums are exact:
//            acc = sum_g scale[n,g] * (sx[m] * sum_k xq q) + offset[n,g] * (sx[m] * sum_k xq)
//          (VPDPBUSD on the packed weights: 4x the multiply-adds of an FMA a cycle). Errors are
//          those of the activation quantization (relative ~ 1/254 of max|x[m,:]| per element).
//          X must be finite. Kernels: avx512_vnni (with AVX512-VBMI), avx2_vnni (AVX-VNNI), avx2;
//          the reference below AVX2.
enum class WoqCompute : int { exact = 0, int8 = 1 };

// The product.
struct WoqDesc {
    int64_t M = 0, N = 0, K = 0;
    WoqWeightType weight_type = WoqWeightType::u4;
    DType a_type = DType::f32, c_type = DType::f32;  // f32 or bf16 each
    int64_t lda = 0, ldc = 0;                        // 0 = packed
    float alpha = 1.0f, beta = 0.0f;
    GemmEpilogue epilogue;
    DType residual_type = DType::f32;                // f32 or bf16
    int64_t ld_residual = 0;                         // 0 = packed (N)
    WoqCompute compute = WoqCompute::exact;
};

struct WoqArgs {
    const void* A = nullptr;         // X [M x lda], a_type
    void* C = nullptr;               // Y [M x ldc], c_type
    const float* bias = nullptr;     // f32[N] (epilogue.bias)
    const void* residual = nullptr;  // [M x ld_residual] (epilogue.residual)
};

class WoqPlan {
public:
    explicit WoqPlan(const WoqDesc& desc);  // validates, selects the kernel once
    ~WoqPlan();
    WoqPlan(const WoqPlan&) = default;
    WoqPlan& operator=(const WoqPlan&) = default;
    WoqPlan(WoqPlan&&) noexcept = default;
    WoqPlan& operator=(WoqPlan&&) noexcept = default;

    // Validates the pointers and the weight (its N, K and type must be the plan's) and computes Y.
    void run(const WoqArgs& args, const WoqPackedWeight& weight) const;
    const char* impl_name() const noexcept { return impl_name_; }
    const WoqDesc& desc() const noexcept { return desc_; }

private:
    WoqDesc desc_;
    std::shared_ptr<const detail::WoqKernel> kernel_;
    const char* impl_name_ = "";
};

// One-shot: validates, takes the kernel from the process-wide cache, runs.
void woq_gemm(const WoqDesc& desc, const WoqArgs& args, const WoqPackedWeight& weight);

}  // namespace xk
