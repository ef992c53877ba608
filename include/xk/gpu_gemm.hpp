// xkernels — GEMM on an OpenCL device with the CPU GEMM's descriptor (xk/gemm.hpp), so a caller
// switches device by passing a gpu::Context and buffers instead of host pointers. See docs/gpu.md.
//
//   xk::GemmDesc d;  d.M = 384; d.N = 768; d.K = 768;  d.trans_b = xk::Trans::T;
//   d.a_type = d.b_type = xk::DType::bf16;  d.epilogue.bias = true;  d.epilogue.act = xk::Activation::gelu_erf;
//   xk::gpu::Event e = xk::gpu::gemm(ctx, d, {x_buf, w_buf, y_buf, bias_buf});   // enqueued, asynchronous
//
// The math, layouts, leading dimensions, transposes, alpha / beta, the fused epilogue (bias,
// activation, residual) and the strided batch are those of include/xk/gemm.hpp. On the GPU:
//   a_type = b_type = f32              -> c_type f32
//   a_type = b_type = bf16 or f16      -> c_type f32, bf16 or f16 (products and sums in f32;
//                                         bf16 / f16 C rounded to nearest even at the end)
//   residual_type f32, bf16 or f16; int8 and mixed input types are Status::unsupported.
// The order of the k sums is the kernel's (tiles of k), not increasing k: results differ from
// the CPU's by fp32 rounding. Each operand is a gpu::Tensor (buffer + offset in elements of its
// type); the descriptor's extent of every operand read must lie inside its buffer, every buffer
// must belong to ctx, and C must not share memory with an input (checked: xk::Error naming the
// operand, nothing enqueued). One matrix of an operand may hold up to 2^31 - 1 elements
// (Status::unsupported past that).
//
// Kernels (XK_VERBOSE=1 prints which one ran and its parameters):
//   "gpu:xmx"      Intel XMX (DPAS) through cl_intel_subgroup_matrix_multiply_accumulate, for
//                  bf16 / f16 with trans_a = N, where the device reports the extension and
//                  cl_intel_subgroups with sub-group size 8;
//   "gpu:xmx_emu"  the same kernel source with the DPAS builtins emulated in portable OpenCL C
//                  (XK_GPU_XMX=emulate forces it on any device: for tests, slow);
//   "gpu:tiled"    everything else: register- and local-memory-tiled, its tile sizes chosen per
//                  (device, driver, types, transposes, shape class) by a built-in tuner that times
//                  a few candidates once (host time per call, as calls run) and keeps the winner
//                  on disk beside the program cache (gpu::cache_dir()/gemm_tune.txt);
//                  XK_GPU_TUNE=0 uses the device-type default.
//                  For small M x N on GPUs the candidates include split-K forms (",S<n>": n
//                  partial products in the context's f32 scratch workspace, kept between calls,
//                  then a reduce kernel with the epilogue); XK_GPU_SPLITK=0 leaves them out.
//   XK_GPU_XMX=0 never takes the XMX kernel.
#pragma once
#include <string>

#include "xk/gemm.hpp"
#include "xk/gpu.hpp"

namespace xk::gpu {

// The operands of one GEMM: A, B and C (required unless the problem is empty), bias (f32[N],
// when epilogue.bias) and residual (residual_type, when epilogue.residual).
struct GemmTensors {
    Tensor A, B, C, bias, residual;
};

// Validates, selects (and on first use of a shape class, tunes) the kernel and enqueues it on the
// context's queue. Returns the kernel's Event (empty when M, N or batch is 0: nothing to do).
Event gemm(const Context& ctx, const GemmDesc& desc, const GemmTensors& t);

// The kernel gemm() runs for desc on ctx, with its parameters, e.g.
// "gpu:tiled:MWG128,NWG128,KWG16,MDIMC16,NDIMC16,VWM4,VWN4,L1" (tunes when needed, like gemm()).
std::string gemm_kernel_name(const Context& ctx, const GemmDesc& desc);

}  // namespace xk::gpu
