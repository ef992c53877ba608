// xkernels — portable OpenCL C emulation of the Intel XMX (DPAS) builtins gemm_xmx.cl uses, for
// devices without cl_intel_subgroup_matrix_multiply_accumulate / cl_intel_subgroups (PoCL, NVIDIA).
// Included by gemm_xmx.cl unless XK_XMX_NATIVE is defined; the kernel source is the same.
//
// A subgroup of 8 is emulated by a slice of the work-group: the 8 consecutive work items of
// dimension 0 (the kernel's local size in dimension 0 is a multiple of 8). Lane data moves
// through local memory the kernel declares with XK_XMX_SCRATCH (8 ints per work item), with
// barriers, so every work item of the work-group must reach each emulated matrix_mad call (the
// kernel keeps them out of divergent control flow, as the native builtins require anyway).
//
// Semantics emulated (cl_intel_subgroup_matrix_multiply_accumulate, sub-group size 8, K = 16):
//   float8 intel_sub_group_{f16_f16,bf16_bf16}_matrix_mad_k16(int8 a, int8 b, float8 acc)
//   a: 8 rows of A (component i = row i), lane l holding A[i][2l] (low half) and A[i][2l+1];
//   b: the column n = lane of B, component i holding B[2i][n] (low half) and B[2i+1][n];
//   result component i = acc.s<i> + sum_k A[i][k] * B[k][lane] (products and sums in f32).
//   uint intel_sub_group_block_read(const __global uint* p): lane l gets p[l];
//   uint8 intel_sub_group_block_read8(const __global uint* p): component i of lane l is p[8i + l].
#ifndef XK_XMX_EMULATION_H
#define XK_XMX_EMULATION_H

#define XK_XMX_EMULATED 1
#define xk_sg_lane() ((int)(get_local_id(0) % 8))
#define xk_sg_index() ((int)((get_local_id(1) * get_local_size(0) + get_local_id(0)) / 8))
#define XK_XMX_ATTR
#define XK_XMX_SCRATCH __local int xk_xmx_scratch[XK_XMX_WG_SIZE * 8]

inline uint xk_emu_block_read(const __global uint* p) { return p[xk_sg_lane()]; }
inline uint8 xk_emu_block_read8(const __global uint* p) {
    const int l = xk_sg_lane();
    return (uint8)(p[l], p[8 + l], p[16 + l], p[24 + l], p[32 + l], p[40 + l], p[48 + l], p[56 + l]);
}
#define intel_sub_group_block_read(p) xk_emu_block_read(p)
#define intel_sub_group_block_read8(p) xk_emu_block_read8(p)

// IEEE half bits -> float, exact (denormals included).
inline float xk_emu_half(uint h) {
    const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        const float f = (float)m * 5.9604644775390625e-8f;  // m * 2^-24
        return s ? -f : f;
    }
    if (e == 31) return as_float(s | 0x7f800000u | (m << 13));
    return as_float(s | ((e + 112u) << 23) | (m << 13));
}
inline float xk_emu_lo(uint w, int bf16) { return bf16 ? as_float(w << 16) : xk_emu_half(w & 0xffffu); }
inline float xk_emu_hi(uint w, int bf16) { return bf16 ? as_float(w & 0xffff0000u) : xk_emu_half(w >> 16); }

inline float8 xk_emu_mad_k16(int8 a, int8 b, float8 acc, __local int* scratch, int bf16) {
    __local int* s = scratch + xk_sg_index() * 64;
    vstore8(a, 0, s + xk_sg_lane() * 8);  // s[lane * 8 + row] = this lane's dword of each row
    barrier(CLK_LOCAL_MEM_FENCE);
    int bv[8];
    float out[8];
    vstore8(b, 0, bv);
    vstore8(acc, 0, out);
    for (int i = 0; i < 8; ++i) {
        float sum = out[i];
        for (int kk = 0; kk < 8; ++kk) {
            const uint aw = (uint)s[kk * 8 + i], bw = (uint)bv[kk];
            sum = fma(xk_emu_lo(aw, bf16), xk_emu_lo(bw, bf16), sum);
            sum = fma(xk_emu_hi(aw, bf16), xk_emu_hi(bw, bf16), sum);
        }
        out[i] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is free for the next call
    return vload8(0, out);
}
#define intel_sub_group_f16_f16_matrix_mad_k16(a, b, acc) xk_emu_mad_k16((a), (b), (acc), xk_xmx_scratch, 0)
#define intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, acc) xk_emu_mad_k16((a), (b), (acc), xk_xmx_scratch, 1)

#endif  // XK_XMX_EMULATION_H
