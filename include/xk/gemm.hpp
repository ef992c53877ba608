// xkernels — GEMM with fused epilogues, weight prepacking, fp32 / bf16 / int8.
//
// Layout: row-major. Sizes are int64_t, leading dimensions in elements, 0 = packed (the minimum).
//   op(A) is M x K:  A[m*lda + k] for Trans::N (lda >= K),  A[k*lda + m] for Trans::T (lda >= M)
//   op(B) is K x N:  B[k*ldb + n] for Trans::N (ldb >= N),  B[n*ldb + k] for Trans::T (ldb >= K)
//   C is M x N:      C[m*ldc + n]  (ldc >= N);  residual R[m*ld_residual + n]  (ld_residual >= N)
// M, N or K == 0 is allowed (as in BLAS): M or N == 0 does nothing; K == 0 makes the product 0
// (C still receives beta*C and the epilogue). Negative sizes are an xk::Error.
//
// Data types (a_type, b_type -> c_type):
//   f32  x f32  -> f32           fp32 accumulation
//   bf16 x bf16 -> f32 | bf16    products exact in fp32, fp32 accumulation; bf16 C rounded to
//                                nearest even at the very end. Where the AVX512-BF16 kernel runs
//                                (VDPBF16PS; picked only on CPUs where it beats widening to fp32),
//                                each pair of k adds its odd product, then its even one (another
//                                order than increasing k, each addition rounded to nearest even),
//                                and denormal inputs and sums are flushed to 0: results differ
//                                from the increasing-k sums by rounding and by < FLT_MIN terms
//   u8|s8 x s8  -> s32 | f32     s32 accumulation of (a - a_zero_point) * (b - b_zero_point)
//   u8|s8 x s8  -> u8 | s8       the f32 result requantized with c_scale and c_zero_point (below)
// Any other combination is an xk::Error with Status::unsupported naming the three types.
//
// The math, per output element (m, n); acc = sum over k = 0..K-1 of op(A)[m,k] * op(B)[k,n],
// accumulated in increasing k (fp32 for f32 / bf16, s32 for int8 — s32 wraps modulo 2^32 if a
// sum leaves its range; as |(a - a_zero_point)(b - b_zero_point)| <= 255*255, K <= 33025 never does):
//
//   f32 / bf16 inputs:   x = alpha * acc
//   int8 -> f32:         x = alpha * a_scale * b_scale[n] * float(acc)
//                        (b_scale[n] = b_scales[0] unless b_scale_per_channel)
//   then                 x = x + beta * C[m,n]       (only when beta != 0: beta == 0 never reads
//                                                     C, so NaN / garbage there cannot leak)
//                        x = x + bias[n]             (epilogue.bias; bias is f32[N])
//                        x = act(x)                  (epilogue.act; see xk::Activation)
//                        x = x + R[m,n]              (epilogue.residual; R is f32 or bf16)
//                        C[m,n] = x                  (rounded to bf16 when c_type is bf16)
//
//   int8 -> u8 | s8:     x as for int8 -> f32 (beta must be 0: C is never read), then
//                        q = nearbyint(x * inv_c_scale) + float(c_zero_point)   (round half to even)
//                        C[m,n] = q clamped to the type's range (u8 [0, 255], s8 [-128, 127])
//                        with inv_c_scale = 1.0f / *c_scale computed once in float. +Inf saturates
//                        to the maximum, -Inf to the minimum, and NaN (a NaN bias or residual)
//                        becomes the type's minimum (0 for u8, -128 for s8). This is PyTorch's
//                        quantized Linear / oneDNN's u8|s8 dst with a dst scale and zero point.
//
//   int8 -> s32:         C[m,n] = acc                (beta == 0)
//                        C[m,n] = C[m,n] + acc       (beta == 1, wrapping)
//                        alpha must be 1, beta 0 or 1, and the epilogue none: anything else is
//                        Status::unsupported (dequantize with c_type = f32 instead).
//
// alpha and beta may be any float (NaN and Inf propagate as IEEE arithmetic says; a NaN beta is
// not zero, so C is read). Zero points are per tensor and must lie in the range of their type
// (u8: [0, 255], s8: [-128, 127]; c_zero_point: c_type's); a_scale and b_scales are read for
// int8 -> f32 | u8 | s8, c_scale only for u8 | s8 C.
//
// Buffers: C must not overlap A, B, bias, the residual or the scales (checked). Pointers need
// only the alignment of their element type. A pointer may be null only when nothing is read
// through it (a zero-sized operand, or an epilogue / scale the descriptor does not use).
//
// Batched (strided): GemmDesc::batch products of the same shape in one call (one plan, one kernel
// selection, one parallel loop over the items), item i reading
//   A + i*batch_stride_a,  B + i*batch_stride_b,  residual + i*batch_stride_residual  and writing
//   C + i*batch_stride_c   (strides in elements of the operand's type).
// An input stride of 0 means the same matrix for every item (a shared weight: cuBLAS's strideB = 0);
// bias, scales and zero points are shared by all items. batch_stride_c = 0 means packed (M*ldc);
// a non-zero one must keep the items of C apart: >= the item's extent (M-1)*ldc + N, or the items
// side by side within the rows (>= N, with (batch-1)*batch_stride_c + N <= ldc: e.g. attention
// heads written into one [tokens x heads*64] matrix). Strides must be >= 0; batch = 0 does nothing
// (like M = 0); every operand's span over all items must fit in int64 bytes, and C's span over all
// items must not overlap any input's span over all items. Each item computes exactly what a single
// GEMM of the same descriptor (batch = 1) computes on those pointers, bit for bit, whatever the
// thread count. Threads: one parallel loop over the items, each item run by one thread (handed
// out as threads become free). Only where the items do not divide evenly over the threads and an
// item is large enough for its kernel to thread it well (t = M N K / 2^21 threads' worth, with
// 0.8 t > the leftover count: e.g. 3 items of 1024^3 on 2 threads) do the leftover items run
// afterwards one after another, each over all threads. A plan whose B is batched (batch_stride_b != 0) packs every item in pack_b (the PackedB
// then holds `batch` packed items and run(args, packed) gives item i its own); with
// batch_stride_b = 0 one packed B serves every item.
//
// Usage:
//   xk::GemmDesc d;  d.M = 64; d.N = 768; d.K = 768;  d.epilogue.bias = true;
//   d.epilogue.act = xk::Activation::gelu_erf;
//   xk::GemmPlan plan(d);                        // validates, selects + creates the kernel once
//   xk::PackedB w = plan.pack_b(weights);        // once (ipex.optimize-style weight prepacking)
//   plan.run({x, nullptr, y, bias}, w);          // many times, from any thread
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "xk/types.hpp"

namespace xk {

namespace detail {
struct GemmKernel;
struct GemmPacked;
struct GemmPlanState;
}  // namespace detail

enum class Trans : int { N = 0, T = 1 };

constexpr const char* trans_name(Trans t) noexcept {
    switch (t) {
        case Trans::N: return "N";
        case Trans::T: return "T";
    }
    return "?";
}

// Fused epilogue: x = act(x + bias[n]) + residual[m, n] (see the math above).
struct GemmEpilogue {
    bool bias = false;                  // add bias[n], f32[N] (GemmArgs::bias)
    Activation act = Activation::none;  // applied after bias, before the residual
    bool residual = false;              // add GemmArgs::residual[m*ld_residual + n] last
};

// The problem: shapes, layouts, types, scalars, epilogue. No pointers.
struct GemmDesc {
    int64_t M = 0, N = 0, K = 0;
    Trans trans_a = Trans::N, trans_b = Trans::N;
    int64_t lda = 0, ldb = 0, ldc = 0;  // 0 = packed
    DType a_type = DType::f32, b_type = DType::f32, c_type = DType::f32;
    float alpha = 1.0f, beta = 0.0f;
    GemmEpilogue epilogue;
    bool b_scale_per_channel = false;   // int8 -> f32|u8|s8: b_scales holds N values (else 1)
    DType residual_type = DType::f32;   // f32 or bf16
    int64_t ld_residual = 0;            // 0 = packed (N)
    // Strided batch (see "Batched" above): `batch` products; strides in elements, >= 0.
    int64_t batch = 1;                  // 0 does nothing
    int64_t batch_stride_a = 0;         // 0 = the same A for every item
    int64_t batch_stride_b = 0;         // 0 = the same B for every item (one PackedB for all)
    int64_t batch_stride_c = 0;         // 0 = packed (M*ldc)
    int64_t batch_stride_residual = 0;  // 0 = the same residual for every item
};

// Pointers of one execution. Types follow the descriptor (A: a_type, B: b_type, C: c_type, ...).
struct GemmArgs {
    const void* A = nullptr;
    const void* B = nullptr;            // not read by GemmPlan::run(args, packed_b)
    void* C = nullptr;
    const float* bias = nullptr;        // f32[N], read when epilogue.bias
    const void* residual = nullptr;     // read when epilogue.residual
    const float* a_scale = nullptr;     // int8 -> f32|u8|s8: one value, finite and > 0
    const float* b_scales = nullptr;    // int8 -> f32|u8|s8: one value, or N with b_scale_per_channel; finite and > 0
    int32_t a_zero_point = 0;           // int8: subtracted from every element of A
    int32_t b_zero_point = 0;           // int8: subtracted from every element of B
    const float* c_scale = nullptr;     // int8 -> u8|s8: one value, finite and > 0 (C = x / c_scale + c_zero_point)
    int32_t c_zero_point = 0;           // int8 -> u8|s8: added to the requantized C, in c_type's range
};

// B repacked into the layout a plan's kernel prefers (created by GemmPlan::pack_b). Owned,
// immutable and opaque; copies share the data. A PackedB is accepted by every plan whose kernel
// uses the same packed layout (typically: the same K, N, b_type and implementation — M, the
// epilogue and the scalars may differ, so one packed weight serves every batch size), and
// rejected with an xk::Error by any other plan. A batched PackedB (packed by a plan with batch > 1
// and batch_stride_b != 0) holds one packed B per item and serves plans of the same batch count.
class PackedB {
public:
    PackedB() = default;
    bool empty() const noexcept { return !data_; }
    size_t size_bytes() const noexcept;
    // The packed layout, e.g. "ref:plain:f32:K64:N128" ("" when empty); a batched PackedB of 96
    // items: the items' layout followed by ":batch96".
    std::string layout() const;

private:
    friend class GemmPlan;
    std::shared_ptr<const detail::GemmPacked> data_;
};

// A validated GEMM with its kernel selected and created once. Immutable; run() is const and
// may be called from several threads at once (on different C).
class GemmPlan {
public:
    // Validates desc (throws xk::Error) and selects the best implementation under the ISA cap.
    explicit GemmPlan(const GemmDesc& desc);
    ~GemmPlan();
    GemmPlan(const GemmPlan&) = default;
    GemmPlan& operator=(const GemmPlan&) = default;
    GemmPlan(GemmPlan&&) noexcept = default;
    GemmPlan& operator=(GemmPlan&&) noexcept = default;

    // Validates the pointers and computes C.
    void run(const GemmArgs& args) const;
    // Same with B taken from packed_b (args.B is not read).
    void run(const GemmArgs& args, const PackedB& packed_b) const;
    // Packs B (b_type, trans_b, ldb as in the descriptor) for run(args, packed); with batch > 1
    // and batch_stride_b != 0 every item's B (B + i*batch_stride_b).
    PackedB pack_b(const void* B) const;

    const char* impl_name() const noexcept { return impl_name_; }
    // The descriptor, with leading dimensions (and batch_stride_c) of 0 replaced by their packed value.
    const GemmDesc& desc() const noexcept { return desc_; }

private:
    GemmDesc desc_;  // as given, leading dimensions resolved
    std::shared_ptr<const detail::GemmKernel> kernel_;
    std::shared_ptr<const detail::GemmPlanState> state_;  // the spec and operand extents, for run()
    const char* impl_name_ = "";
    std::string pack_layout_;
};

// One-shot: validates, fetches the kernel from the process-wide cache, runs.
void gemm(const GemmDesc& desc, const GemmArgs& args);

// BLAS-style single precision, row-major: C = alpha * op(A) op(B) + beta * C.
// lda / ldb / ldc of 0 mean packed.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace xk
