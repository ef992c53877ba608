// xkernels — the second step of split-K GEMM (src/gpu/kernels/gemm.cl with SPLITK > 1): C =
// epilogue(sum of the SPLITK partial products in the f32 workspace W). W holds, for each batch
// item b and split s, an M x N matrix (ld N) at W + (b * S + s) * M * N. One work item per element
// of C: global (N, M, batch). C_T / R_T as gemm.cl.
#include "gemm_common.h"

__kernel void xk_gemm_splitk_reduce(const int M, const int N, const int S, const __global float* restrict W,
                                    __global c_t* C, const ulong c_off, const int ldc, const ulong c_bs,
                                    const float alpha, const float beta, const int flags, const int act,
                                    const __global float* restrict bias, const ulong bias_off,
                                    const __global r_t* restrict R, const ulong r_off, const int ldr, const ulong r_bs) {
    const int n = get_global_id(0), m = get_global_id(1);
    const size_t item = get_global_id(2);
    if (n >= N || m >= M) return;
    const size_t mn = (size_t)M * N;
    const __global float* w = W + item * S * mn + (size_t)m * N + n;
    float acc = 0.0f;
    for (int s = 0; s < S; ++s) acc += w[s * mn];
    xk_epilogue(acc, m, n, C + c_off + item * c_bs, ldc, alpha, beta, flags, act, bias + bias_off, R + r_off + item * r_bs, ldr);
}
