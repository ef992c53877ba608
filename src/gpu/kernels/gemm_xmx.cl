// xkernels — GEMM on Intel XMX (DPAS) through cl_intel_subgroup_matrix_multiply_accumulate:
// f16 x f16 or bf16 x bf16 inputs (AB_T: 2 f16, 1 bf16), f32 accumulation, f32 / bf16 / f16 C with
// the fused epilogue of gemm_common.h. op(A) = A (row-major M x K, lda); op(B) per TRANS_B:
// 0: B is K x N (ldb), 1: B is N x K (ldb), the Linear-weight layout, whose k pairs are already
// the DPAS "VNNI" packing.
//
// Subgroups of 8 (intel_reqd_sub_group_size(8): DG2 / Arc / Flex class DPAS). A work-group is
// SG_N x SG_M subgroups (local size 8 * SG_N x SG_M); each subgroup computes (8 MR) x (8 NR) of C
// as MR x NR DPAS blocks (float8 each: row i in component i, column = lane), 16 of K per step.
// A rows are read with intel_sub_group_block_read where the 8 x 16 block lies inside A and rows
// are 4-byte aligned (XK_VEC_A), else with guarded loads (rows past M clamped, k past K zero).
// Without the extension (XK_XMX_NATIVE undefined) xmx_emulation.h supplies the builtins.
#ifdef XK_XMX_NATIVE
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#define xk_sg_lane() ((int)get_sub_group_local_id())
#define XK_XMX_ATTR __attribute__((intel_reqd_sub_group_size(8)))
#define XK_XMX_SCRATCH
#else
#define XK_XMX_WG_SIZE (8 * SG_N * SG_M)
#include "xmx_emulation.h"
#endif

#include "gemm_common.h"

#if AB_T == 1
#define XK_MAD(a, b, c) intel_sub_group_bf16_bf16_matrix_mad_k16((a), (b), (c))
#else
#define XK_MAD(a, b, c) intel_sub_group_f16_f16_matrix_mad_k16((a), (b), (c))
#endif

__kernel XK_XMX_ATTR __attribute__((reqd_work_group_size(8 * SG_N, SG_M, 1)))
void xk_gemm_xmx(const int M, const int N, const int K,
                 const __global ushort* restrict A, const ulong a_off, const int lda, const ulong a_bs,
                 const __global ushort* restrict B, const ulong b_off, const int ldb, const ulong b_bs,
                 __global c_t* C, const ulong c_off, const int ldc, const ulong c_bs,
                 const float alpha, const float beta, const int flags, const int act,
                 const __global float* restrict bias, const ulong bias_off,
                 const __global r_t* restrict R, const ulong r_off, const int ldr, const ulong r_bs) {
    XK_XMX_SCRATCH;
    const size_t item = get_global_id(2);
    A += a_off + item * a_bs;
    B += b_off + item * b_bs;
    C += c_off + item * c_bs;
    bias += bias_off;
    R += r_off + item * r_bs;
    const int lane = xk_sg_lane();
    const int m_base = get_group_id(1) * (SG_M * MR * 8) + get_local_id(1) * (MR * 8);
    const int n_base = get_group_id(0) * (SG_N * NR * 8) + (get_local_id(0) / 8) * (NR * 8);

    float8 acc[MR][NR];
    for (int r = 0; r < MR; ++r)
        for (int c = 0; c < NR; ++c) acc[r][c] = (float8)(0.0f);

    for (int k0 = 0; k0 < K; k0 += 16) {
        const bool kfull = k0 + 16 <= K;
        int8 a[MR], b[NR];
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const int mb = m_base + r * 8;
            uint av[8];
            if (kfull && (flags & XK_VEC_A) && mb + 8 <= M) {
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    av[i] = intel_sub_group_block_read((const __global uint*)(A + (size_t)(mb + i) * lda + k0));
            } else {
                const int k = k0 + 2 * lane;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const __global ushort* row = A + (size_t)min(mb + i, M - 1) * lda;
                    const uint lo = k < K ? row[k] : 0u, hi = k + 1 < K ? row[k + 1] : 0u;
                    av[i] = lo | (hi << 16);
                }
            }
            a[r] = as_int8(vload8(0, av));
        }
#pragma unroll
        for (int c = 0; c < NR; ++c) {
            const int n = min(n_base + c * 8 + lane, N - 1);
            uint bv[8];
#if TRANS_B == 1
            const __global ushort* col = B + (size_t)n * ldb;
            if (kfull && (flags & XK_VEC_B)) {
                vstore8(vload8(0, (const __global uint*)(col + k0)), 0, bv);
            } else {
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const int k = k0 + 2 * i;
                    const uint lo = k < K ? col[k] : 0u, hi = k + 1 < K ? col[k + 1] : 0u;
                    bv[i] = lo | (hi << 16);
                }
            }
#else
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int k = k0 + 2 * i;
                const uint lo = k < K ? B[(size_t)k * ldb + n] : 0u;
                const uint hi = k + 1 < K ? B[(size_t)(k + 1) * ldb + n] : 0u;
                bv[i] = lo | (hi << 16);
            }
#endif
            b[c] = as_int8(vload8(0, bv));
        }
#pragma unroll
        for (int r = 0; r < MR; ++r)
#pragma unroll
            for (int c = 0; c < NR; ++c) acc[r][c] = XK_MAD(a[r], b[c], acc[r][c]);
    }

    for (int r = 0; r < MR; ++r)
        for (int c = 0; c < NR; ++c) {
            float o[8];
            vstore8(acc[r][c], 0, o);
            const int n = n_base + c * 8 + lane;
            for (int i = 0; i < 8; ++i) {
                const int m = m_base + r * 8 + i;
                if (m < M && n < N) xk_epilogue(o[i], m, n, C, ldc, alpha, beta, flags, act, bias, R, ldr);
            }
        }
}
