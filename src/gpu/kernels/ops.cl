// Memory-bound LLM ops (src/gpu/ops.cpp): RMSNorm / LayerNorm (+ residual), GLU, softmax, RoPE.
// One program for every dtype combination: storage types are runtime codes (xk::DType values:
// 0 f32, 1 bf16, 5 f16), uniform across a launch, so one build per context serves every call
// (PoCL compiles slowly; the branch on a uniform code costs nothing next to the memory traffic).
// Each op is built as a program of its own (-DXK_OP=1 norm, 2 glu, 3 softmax, 4 rope): smaller
// programs load faster from the disk cache (PoCL: ~35 ms for all four, a few ms for one).
// Math in f32; bf16 stores round to nearest even (NaN stays NaN), f16 stores with vstore_half_rte.
// Offsets and strides are in elements of the tensor's dtype; every pointer is the sub-buffer's
// base (uchar*), so any element offset works (vloadn needs only the scalar's alignment).

#define DT_F32 0
#define DT_BF16 1
#define DT_F16 5


#if defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define XK_HAVE_FP64 1
#endif

// RoPE's angle of pair i at position p (computed, not cached): cos / sin of
// (p / scaling) * base^(-2 i / rotary_dim), in double where the device has it.
inline void rope_cs(long p, ulong i, ulong rotary_dim, float base, float scaling, float* c, float* s) {
#ifdef XK_HAVE_FP64
    const double inv_freq = pow((double)base, -2.0 * (double)i / (double)rotary_dim);
    const double theta = ((double)p / (double)scaling) * inv_freq;
    *c = (float)cos(theta);
    *s = (float)sin(theta);
#else
    const float inv_freq = pow(base, -2.0f * (float)i / (float)rotary_dim);
    const float theta = ((float)p / scaling) * inv_freq;
    *c = cos(theta);
    *s = sin(theta);
#endif
}
inline float bf16_to_f(ushort b) { return as_float(((uint)b) << 16); }
inline ushort f_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

// Four at once, branch-free (vectorizes on CPU devices): NaN -> quiet NaN, else nearest even.
inline ushort4 f4_to_bf16(float4 f) {
    const uint4 u = as_uint4(f);
    const uint4 r = (u + (uint4)(0x7fffu) + ((u >> 16) & (uint4)(1u))) >> 16;
    const uint4 q = (u >> 16) | (uint4)(0x40u);
    return convert_ushort4(select(r, q, as_uint4(isnan(f))));
}

inline float ld1(__global const uchar* p, ulong i, int dt) {
    if (dt == DT_F32) return ((__global const float*)p)[i];
    if (dt == DT_BF16) return bf16_to_f(((__global const ushort*)p)[i]);
    return vload_half(i, (__global const half*)p);
}
inline void st1(__global uchar* p, ulong i, int dt, float v) {
    if (dt == DT_F32) ((__global float*)p)[i] = v;
    else if (dt == DT_BF16) ((__global ushort*)p)[i] = f_to_bf16(v);
    else vstore_half_rte(v, i, (__global half*)p);
}
// 4 consecutive elements starting at element i. al: the address is aligned to 4 elements (the
// host checked every row base), so one vector access serves (else vloadn: any element offset).
inline float4 ld4(__global const uchar* p, ulong i, int dt, bool al) {
    if (dt == DT_F32) return al ? *((__global const float4*)((__global const float*)p + i)) : vload4(0, (__global const float*)p + i);
    if (dt == DT_BF16) {
        const ushort4 b = al ? *((__global const ushort4*)((__global const ushort*)p + i)) : vload4(0, (__global const ushort*)p + i);
        return as_float4(convert_uint4(b) << 16);
    }
    return al ? vloada_half4(0, (__global const half*)p + i) : vload_half4(0, (__global const half*)p + i);
}
inline void st4(__global uchar* p, ulong i, int dt, float4 v, bool al) {
    if (dt == DT_F32) {
        if (al) *((__global float4*)((__global float*)p + i)) = v;
        else vstore4(v, 0, (__global float*)p + i);
    } else if (dt == DT_BF16) {
        const ushort4 b = f4_to_bf16(v);
        if (al) *((__global ushort4*)((__global ushort*)p + i)) = b;
        else vstore4(b, 0, (__global ushort*)p + i);
    } else {
        if (al) vstorea_half4_rte(v, 0, (__global half*)p + i);
        else vstore_half4_rte(v, 0, (__global half*)p + i);
    }
}

// ---- 8 elements at once (16-byte loads of bf16 / f16, two float4 of f32) -------------------------
// al: 2 = the element index is a multiple of 8 (every row base checked on the host), 1 = of 4, 0 =
// any (vloadn: the scalar's alignment only).
inline ushort8 f8_to_bf16(float8 f) {
    const uint8 u = as_uint8(f);
    const uint8 r = (u + (uint8)(0x7fffu) + ((u >> 16) & (uint8)(1u))) >> 16;
    const uint8 q = (u >> 16) | (uint8)(0x40u);
    return convert_ushort8(select(r, q, as_uint8(isnan(f))));
}
inline float8 ld8(__global const uchar* p, ulong i, int dt, int al) {
    if (dt == DT_F32) {
        __global const float* f = (__global const float*)p + i;
        if (al >= 1) return (float8)(*((__global const float4*)f), *((__global const float4*)(f + 4)));
        return vload8(0, f);
    }
    if (dt == DT_BF16) {
        __global const ushort* h = (__global const ushort*)p + i;
        const ushort8 b = al == 2 ? *((__global const ushort8*)h) : vload8(0, h);
        return as_float8(convert_uint8(b) << 16);
    }
    return al == 2 ? vloada_half8(0, (__global const half*)p + i) : vload_half8(0, (__global const half*)p + i);
}
inline void st8(__global uchar* p, ulong i, int dt, float8 v, int al) {
    if (dt == DT_F32) {
        __global float* f = (__global float*)p + i;
        if (al >= 1) {
            *((__global float4*)f) = v.lo;
            *((__global float4*)(f + 4)) = v.hi;
        } else {
            vstore8(v, 0, f);
        }
    } else if (dt == DT_BF16) {
        const ushort8 b = f8_to_bf16(v);
        __global ushort* h = (__global ushort*)p + i;
        if (al == 2) *((__global ushort8*)h) = b;
        else vstore8(b, 0, h);
    } else {
        if (al == 2) vstorea_half8_rte(v, 0, (__global half*)p + i);
        else vstore_half8_rte(v, 0, (__global half*)p + i);
    }
}
// nv (1..8) valid elements from i; the others are `fill`.
inline float8 ldv(__global const uchar* p, ulong i, uint nv, int dt, int al, float fill) {
    if (nv >= 8) return ld8(p, i, dt, al);
    float e[8];
    for (uint k = 0; k < 8; ++k) e[k] = k < nv ? ld1(p, i + k, dt) : fill;
    return vload8(0, e);
}
inline void stv(__global uchar* p, ulong i, uint nv, int dt, float8 v, int al) {
    if (nv >= 8) {
        st8(p, i, dt, v, al);
        return;
    }
    float e[8];
    vstore8(v, 0, e);
    for (uint k = 0; k < nv; ++k) st1(p, i + k, dt, e[k]);
}
inline float hsum8(float8 v) {
    const float4 a = v.lo + v.hi;
    return (a.x + a.y) + (a.z + a.w);
}
inline float hmax8(float8 v) {
    const float4 a = fmax(v.lo, v.hi);
    return fmax(fmax(a.x, a.y), fmax(a.z, a.w));
}
// Lanes >= nv set to 0.
inline float8 mask8(float8 v, uint nv) {
    if (nv >= 8) return v;
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    return select((float8)(0.0f), v, lane < (int8)((int)nv));
}


// ---- bf16 kept packed: 8 elements in a uint4 (element 2k in the low half of word k) ---------------
// The bf16 kernels below hold rows as these raw words (4 registers per 8 elements, as many bytes
// per register as f32), issue every load of a work-item before its first use (indices clamped,
// never branched around), and carry twice the elements per work-item of the f32 forms.
inline float8 bf8_f(uint4 r) {
    float8 f;
    f.even = as_float4(r << 16);
    f.odd = as_float4(r & (uint4)(0xffff0000u));
    return f;
}
inline uint4 f_bf8(float8 v) { return as_uint4(f8_to_bf16(v)); }
inline uint4 ldr(__global const uchar* p, ulong i) { return *((__global const uint4*)((__global const ushort*)p + i)); }
inline void str(__global uchar* p, ulong i, uint4 v) { *((__global uint4*)((__global ushort*)p + i)) = v; }

// ---- work-group reductions: two barriers whatever the size -------------------------------------
// Every work-item of the group calls them (uniform control flow); buf holds XK_MAXWG floats,
// buf2 32 (8 float4). Stage 1: items 0..31 each combine the values lid, lid + 32, ...; stage 2:
// every item combines the 32 partials (8 float4 local reads, broadcast) in the same order:
// identical results in every item. Consecutive calls may reuse the buffers (the first barrier of
// the next call orders them).
#ifndef XK_MAXWG
#define XK_MAXWG 1024
#endif
inline float wg_sum(float v, __local float* buf, __local float4* buf2) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 32; t += wg) {
        float s = 0.0f;
        for (int j = t; j < wg; j += 32) s += buf[j];
        ((__local float*)buf2)[t] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 r = buf2[0];
    for (int j = 1; j < 8; ++j) r += buf2[j];
    return (r.x + r.y) + (r.z + r.w);
}
inline float wg_max(float v, __local float* buf, __local float4* buf2) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 32; t += wg) {
        float s = -INFINITY;
        for (int j = t; j < wg; j += 32) s = fmax(s, buf[j]);
        ((__local float*)buf2)[t] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 r = buf2[0];
    for (int j = 1; j < 8; ++j) r = fmax(r, buf2[j]);
    return fmax(fmax(r.x, r.y), fmax(r.z, r.w));
}

// The row kernels' groups (ops_row.h): <= XK_MAXWG2 work-items (the reduction buffer: about 4 KB).
#ifndef XK_MAXWG2
#define XK_MAXWG2 512
#endif
// (sum a, sum b) of every work-item in one reduction (two barriers): LayerNorm's moments.
// buf: XK_MAXWG2 float2, buf2: 16 float4 (32 float2 partials). Same order in every item.
inline float2 wg_sum2(float2 v, __local float2* buf, __local float4* buf2) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 32; t += wg) {
        float2 s = (float2)(0.0f);
        for (int j = t; j < wg; j += 32) s += buf[j];
        ((__local float2*)buf2)[t] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 r = buf2[0];
    for (int j = 1; j < 16; ++j) r += buf2[j];
    return r.xy + r.zw;
}

// ---- the row kernels' reductions (ops_row.h) -----------------------------------------------------
// red_*(value, red, par): every work-item of the group calls them (uniform control flow) and gets
// the same result (the same summation order in every item). `red`: XK_RED4 float4 of local memory
// declared in the kernel (16-byte aligned: the tree reads its partials as float4), par (0 / 1):
// alternate on consecutive calls. Groups <= XK_MAXWG2 work-items.
// XK_PTX=1 (NVIDIA only, set by the host): each warp reduces with shfl.sync.bfly (inline PTX),
// lane 0 of each warp writes its partial to red[par * 32 + warp], one barrier, every item adds
// the <= 16 partials (64 float2; the two halves let the next call write without a barrier).
// Otherwise a local-memory tree in two barriers (wg + 32 float2): items 0..31 add the values lid,
// lid + 32, ..., then every item adds the 32 partials; consecutive calls may reuse the buffer
// (the first barrier of the next call orders them), so par is not used.
#ifndef XK_PTX
#define XK_PTX 0
#endif
#ifndef XK_SEG
#define XK_SEG 0
#endif
#if XK_PTX && XK_SEG
#define XK_RED4 1                      // unused
#elif XK_PTX
#define XK_RED4 32                     // 2 x 32 float2
#elif XK_SEG
#define XK_RED4 XK_MAXWG2              // 2 x wg float2
#else
#define XK_RED4 ((XK_MAXWG2 + 32) / 2) // wg + 32 float2
#endif
#if XK_PTX
inline float shx(float v, int m) {
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
    return r;
}
#endif
// (m, s) pairs in the log2 domain: merged = (M, sum s 2^(m - M)); m = -inf adds nothing.
inline float2 ms_merge(float2 a, float2 b) {
    const float M = fmax(a.x, b.x);
    if (M == -INFINITY) return (float2)(M, 0.0f);
    return (float2)(M, (a.x == -INFINITY ? 0.0f : a.y * exp2(a.x - M)) + (b.x == -INFINITY ? 0.0f : b.y * exp2(b.x - M)));
}
#if XK_SEG
// XK_SEG (a power of two <= 32): each row is reduced by its XK_SEG consecutive work-items (several
// rows per group). PTX: a butterfly of shuffles within the segment (the same value in every lane:
// each step adds the same two numbers in both partners); else the segment's values in local
// memory (2 wg float2: par alternates halves), one barrier, every item adds them in order.
#if XK_PTX
inline float2 red_sum2(float2 v, __local float2* red, int par) {
    for (int m = XK_SEG / 2; m >= 1; m >>= 1) {
        v.x += shx(v.x, m);
        v.y += shx(v.y, m);
    }
    return v;
}
inline float red_max(float v, __local float2* red, int par) {
    for (int m = XK_SEG / 2; m >= 1; m >>= 1) v = fmax(v, shx(v, m));
    return v;
}
inline float2 red_maxsum(float m, float s, __local float2* red, int par) {
    float2 v = (float2)(m, s);
    for (int k = XK_SEG / 2; k >= 1; k >>= 1) v = ms_merge(v, (float2)(shx(v.x, k), shx(v.y, k)));
    return v;
}
#else
inline float2 red_sum2(float2 v, __local float2* red, int par) {
    const uint lid = get_local_id(0);
    __local float2* p = red + par * get_local_size(0);
    p[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint b0 = lid & ~(uint)(XK_SEG - 1);
    float2 s = p[b0];
    for (int k = 1; k < XK_SEG; ++k) s += p[b0 + k];
    return s;
}
inline float red_max(float v, __local float2* red, int par) {
    const uint lid = get_local_id(0);
    __local float2* p = red + par * get_local_size(0);
    p[lid].x = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint b0 = lid & ~(uint)(XK_SEG - 1);
    float s = p[b0].x;
    for (int k = 1; k < XK_SEG; ++k) s = fmax(s, p[b0 + k].x);
    return s;
}
inline float2 red_maxsum(float m, float s, __local float2* red, int par) {
    const uint lid = get_local_id(0);
    __local float2* p = red + par * get_local_size(0);
    p[lid] = (float2)(m, s);
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint b0 = lid & ~(uint)(XK_SEG - 1);
    float2 r = p[b0];
    for (int k = 1; k < XK_SEG; ++k) r = ms_merge(r, p[b0 + k]);
    return r;
}
#endif
#elif XK_PTX
inline float2 warp_sum2(float2 v) {
    for (int m = 16; m >= 1; m >>= 1) {
        v.x += shx(v.x, m);
        v.y += shx(v.y, m);
    }
    return v;
}
inline float2 red_sum2(float2 v, __local float2* red, int par) {
    const int lid = get_local_id(0), nw = (get_local_size(0) + 31) >> 5;
    __local float2* p = red + par * 32;
    v = warp_sum2(v);
    if ((lid & 31) == 0) p[lid >> 5] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float2 s = p[0];
    for (int j = 1; j < nw; ++j) s += p[j];
    return s;
}
inline float red_max(float v, __local float2* red, int par) {
    const int lid = get_local_id(0), nw = (get_local_size(0) + 31) >> 5;
    __local float* p = (__local float*)(red + par * 32);
    for (int m = 16; m >= 1; m >>= 1) v = fmax(v, shx(v, m));
    if ((lid & 31) == 0) p[lid >> 5] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = p[0];
    for (int j = 1; j < nw; ++j) s = fmax(s, p[j]);
    return s;
}
inline float2 red_maxsum(float m, float s, __local float2* red, int par) {
    const int lid = get_local_id(0), nw = (get_local_size(0) + 31) >> 5;
    __local float2* p = red + par * 32;
    float2 v = (float2)(m, s);
    for (int k = 16; k >= 1; k >>= 1) v = ms_merge(v, (float2)(shx(v.x, k), shx(v.y, k)));
    if ((lid & 31) == 0) p[lid >> 5] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float2 r = p[0];
    for (int j = 1; j < nw; ++j) r = ms_merge(r, p[j]);
    return r;
}
#else
inline float2 red_sum2(float2 v, __local float2* red, int par) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    __local float2* buf = red;
    __local float2* part = red + wg;
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 32; t += wg) {
        float2 s = (float2)(0.0f);
        for (int j = t; j < wg; j += 32) s += buf[j];
        part[t] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 r = ((__local float4*)part)[0];
    for (int j = 1; j < 16; ++j) r += ((__local float4*)part)[j];
    return r.xy + r.zw;
}
inline float red_max(float v, __local float2* red, int par) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    __local float* buf = (__local float*)red;
    __local float* part = (__local float*)(red + wg);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 32; t += wg) {
        float s = -INFINITY;
        for (int j = t; j < wg; j += 32) s = fmax(s, buf[j]);
        part[t] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 r = ((__local float4*)part)[0];
    for (int j = 1; j < 8; ++j) r = fmax(r, ((__local float4*)part)[j]);
    return fmax(fmax(r.x, r.y), fmax(r.z, r.w));
}
// Softmax's (max, sum) in one reduction, log2 domain: each item gives its local max m and
// s = sum 2^(v - m) over its values; returns (M, S = sum s 2^(m - M)). Stage 1: items 0..7 merge
// the items t, t + 8, ...; stage 2: every item merges the 8 partials. m = -inf adds nothing.
inline float2 red_maxsum(float m, float s, __local float2* red, int par) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    __local float2* buf = red;
    __local float2* part = red + wg;
    buf[lid] = (float2)(m, s);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 8; t += wg) {
        float mm = -INFINITY, ss = 0.0f;
        for (int j = t; j < wg; j += 8) mm = fmax(mm, buf[j].x);
        if (mm != -INFINITY)
            for (int j = t; j < wg; j += 8) {
                const float2 e = buf[j];
                if (e.x != -INFINITY) ss += e.y * exp2(e.x - mm);
            }
        part[t] = (float2)(mm, ss);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float M = part[0].x;
    for (int j = 1; j < 8; ++j) M = fmax(M, part[j].x);
    if (M == -INFINITY) return (float2)(M, 0.0f);
    float S = 0.0f;
    for (int j = 0; j < 8; ++j) {
        const float2 e = part[j];
        if (e.x != -INFINITY) S += e.y * exp2(e.x - M);
    }
    return (float2)(M, S);
}
#endif
inline float red_sum(float v, __local float2* red, int par) { return red_sum2((float2)(v, 0.0f), red, par).x; }

// bf16 packing of the row kernels: XK_PTX_CVT=1 (NVIDIA sm_80+, set by the host) cvt.rn.bf16x2.f32
// (2 elements per instruction; NaN -> the canonical NaN), else f_bf8 (integer rounding).
#ifndef XK_PTX_CVT
#define XK_PTX_CVT 0
#endif
#if XK_PTX_CVT
inline uint cvt_bf2(float lo, float hi) {
    uint r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
inline uint4 pk_bf8(float8 v) { return (uint4)(cvt_bf2(v.s0, v.s1), cvt_bf2(v.s2, v.s3), cvt_bf2(v.s4, v.s5), cvt_bf2(v.s6, v.s7)); }
#else
inline uint4 pk_bf8(float8 v) { return f_bf8(v); }
#endif


#ifndef XK_OP
#define XK_OP 0  // 0: every op
#endif
#ifndef XK_NV
#define XK_NV 4  // 8-element chunks a work-item keeps in registers (row ops)
#endif

#if XK_OP == 0 || XK_OP == 1
// ---- RMSNorm / LayerNorm ------------------------------------------------------------------------
// One work-group per row (any power-of-two size <= XK_MAXWG), each work-item chunks of 8 elements
// lid, lid + wg, ... When the row fits (chunks <= wg * XK_NV) it is read once into registers;
// longer rows take two or three passes (the later ones from cache).
// dts = x | y << 8 | res << 16 | w << 24. flags: 1 weight, 2 bias, 4 fused residual, 8 layer_norm,
// 16 / 32 alignment (every row base a multiple of 4 / 8 elements). With the residual,
// h = round_res(x + residual) is written to residual_out and used (as rounded) for the norm.
inline float8 round_to(float8 v, int dt, __global const uchar* p, ulong i, uint nv, int al) {
    if (dt == DT_F32) return v;
    if (dt == DT_BF16) return as_float8(convert_uint8(f8_to_bf16(v)) << 16);
    return ldv(p, i, nv, dt, al, 0.0f);  // f16: read back what was stored
}
__kernel void xk_norm(__global const uchar* x, ulong x_off, ulong ld_x,
                      __global uchar* y, ulong y_off, ulong ld_y,
                      __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                      __global const uchar* res, ulong res_off, ulong ld_res,
                      __global uchar* res_out, ulong ro_off, ulong ld_ro,
                      ulong hidden, float eps, int dts, int flags) {
    __local float buf[XK_MAXWG];
    __local float4 buf2[8];
    const int dx = dts & 0xff, dy = (dts >> 8) & 0xff, dr = (dts >> 16) & 0xff, dw = (dts >> 24) & 0xff;
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const ulong nc = (hidden + 7) / 8;
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    const bool fused = (flags & 4) != 0, layer = (flags & 8) != 0, hw = (flags & 1) != 0, hb = (flags & 2) != 0;
    const int al = (flags & 32) ? 2 : (flags & 16) ? 1 : 0;
    const ulong rr = res_off + row * ld_res, ror = ro_off + row * ld_ro;
    __global const uchar* hp = fused ? (__global const uchar*)res_out : x;
    const ulong hr = fused ? ror : xr;
    const int dh = fused ? dr : dx;
    const float inv_n = 1.0f / (float)hidden;

    if (nc <= (ulong)wg * XK_NV) {
        float8 h[XK_NV];
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int j = 0; j < XK_NV; ++j) {
            const ulong c = lid + (ulong)j * wg;
            float8 v = (float8)(0.0f);
            if (c < nc) {
                const ulong e = c * 8;
                const uint nv = hidden - e >= 8 ? 8 : (uint)(hidden - e);
                v = ldv(x, xr + e, nv, dx, al, 0.0f);
                if (fused) {
                    v += ldv(res, rr + e, nv, dr, al, 0.0f);
                    stv(res_out, ror + e, nv, dr, v, al);
                    v = mask8(round_to(v, dr, res_out, ror + e, nv, al), nv);
                }
            }
            h[j] = v;
            s1 += hsum8(v);
            s2 += hsum8(v * v);
        }
        float mean = 0.0f, rstd;
        if (layer) {
            mean = wg_sum(s1, buf, buf2) * inv_n;
            float var = 0.0f;
#pragma unroll
            for (int j = 0; j < XK_NV; ++j) {
                const ulong c = lid + (ulong)j * wg;
                if (c < nc) {
                    const uint nv = hidden - c * 8 >= 8 ? 8 : (uint)(hidden - c * 8);
                    const float8 d = mask8(h[j] - mean, nv);
                    var += hsum8(d * d);
                }
            }
            rstd = rsqrt(wg_sum(var, buf, buf2) * inv_n + eps);
        } else {
            rstd = rsqrt(wg_sum(s2, buf, buf2) * inv_n + eps);
        }
#pragma unroll
        for (int j = 0; j < XK_NV; ++j) {
            const ulong c = lid + (ulong)j * wg;
            if (c < nc) {
                const ulong e = c * 8;
                const uint nv = hidden - e >= 8 ? 8 : (uint)(hidden - e);
                float8 o = (h[j] - mean) * rstd;
                if (hw) o *= ldv(w, w_off + e, nv, dw, al, 0.0f);
                if (hb) o += ldv(b, b_off + e, nv, dw, al, 0.0f);
                stv(y, yr + e, nv, dy, o, al);
            }
        }
        return;
    }
    // Long rows: passes over the row.
    float s1 = 0.0f, s2 = 0.0f;
    for (ulong c = lid; c < nc; c += wg) {
        const ulong e = c * 8;
        const uint nv = hidden - e >= 8 ? 8 : (uint)(hidden - e);
        float8 v = ldv(x, xr + e, nv, dx, al, 0.0f);
        if (fused) {
            v += ldv(res, rr + e, nv, dr, al, 0.0f);
            stv(res_out, ror + e, nv, dr, v, al);
            v = mask8(round_to(v, dr, res_out, ror + e, nv, al), nv);
        }
        s1 += hsum8(v);
        s2 += hsum8(v * v);
    }
    float mean = 0.0f, rstd;
    if (layer) {
        mean = wg_sum(s1, buf, buf2) * inv_n;
        float var = 0.0f;
        for (ulong c = lid; c < nc; c += wg) {
            const ulong e = c * 8;
            const uint nv = hidden - e >= 8 ? 8 : (uint)(hidden - e);
            const float8 d = mask8(ldv(hp, hr + e, nv, dh, al, 0.0f) - mean, nv);
            var += hsum8(d * d);
        }
        rstd = rsqrt(wg_sum(var, buf, buf2) * inv_n + eps);
    } else {
        rstd = rsqrt(wg_sum(s2, buf, buf2) * inv_n + eps);
    }
    for (ulong c = lid; c < nc; c += wg) {
        const ulong e = c * 8;
        const uint nv = hidden - e >= 8 ? 8 : (uint)(hidden - e);
        float8 o = (ldv(hp, hr + e, nv, dh, al, 0.0f) - mean) * rstd;
        if (hw) o *= ldv(w, w_off + e, nv, dw, al, 0.0f);
        if (hb) o += ldv(b, b_off + e, nv, dw, al, 0.0f);
        stv(y, yr + e, nv, dy, o, al);
    }
}

#endif

#if XK_OP == 0 || XK_OP == 2
// ---- GLU: y[r, i] = act(x[r, i]) * x[r, inner + i] -------------------------------------------------
inline float act(float g, int a) {
    switch (a) {
        case 1: return fmax(g, 0.0f);                                                       // relu
        case 2: return 0.5f * g * (1.0f + erf(g * 0.70710678118654752f));                    // gelu_erf
        case 3: return 0.5f * g * (1.0f + tanh(0.7978845608028654f * (g + 0.044715f * g * g * g)));  // gelu_tanh
        case 4: return g / (1.0f + exp(-g));                                                 // silu
        default: return g;                                                                   // none
    }
}
// global (ceil(inner / 8) rounded up to the group, rows): each work-item 8 consecutive columns.
// aligned: 2 / 1 = every row base (gate and up) a multiple of 8 / 4 elements.
__kernel void xk_glu(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     ulong inner, int dts, int activation, int aligned) {
    const int dx = dts & 0xff, dy = (dts >> 8) & 0xff;
    const ulong c = get_global_id(0) * 8, row = get_global_id(1);
    if (c >= inner) return;
    const uint nv = inner - c >= 8 ? 8 : (uint)(inner - c);
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    const float8 g = ldv(x, xr + c, nv, dx, aligned, 0.0f), u = ldv(x, xr + inner + c, nv, dx, aligned, 0.0f);
    float8 o;
    if (activation == 4) {
        o = g / (1.0f + exp(-g)) * u;
    } else if (activation == 1) {
        o = fmax(g, (float8)(0.0f)) * u;
    } else {
        float e[8];
        vstore8(g, 0, e);
        for (int k = 0; k < 8; ++k) e[k] = act(e[k], activation);
        o = vload8(0, e) * u;
    }
    stv(y, yr + c, nv, dy, o, aligned);
}


// bf16 x and y, inner a multiple of 16, every row base (gate and up) a multiple of 8 elements:
// 16 columns per work-item (two 16-byte loads of gate, two of up, issued together), the math of
// xk_glu. global (inner / 16 rounded up to the group, rows).
__kernel void xk_glu_bf16(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                          ulong inner, int dts, int activation, int aligned) {
    const ulong c = get_global_id(0) * 16, row = get_global_id(1);
    if (c >= inner) return;
    const ulong xr = x_off + row * ld_x + c, yr = y_off + row * ld_y + c;
    const uint4 g0 = ldr(x, xr), g1 = ldr(x, xr + 8), u0 = ldr(x, xr + inner), u1 = ldr(x, xr + inner + 8);
    float8 o[2];
    const float8 g[2] = {bf8_f(g0), bf8_f(g1)}, u[2] = {bf8_f(u0), bf8_f(u1)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        if (activation == 4) {
            o[h] = g[h] / (1.0f + exp(-g[h])) * u[h];
        } else if (activation == 1) {
            o[h] = fmax(g[h], (float8)(0.0f)) * u[h];
        } else {
            float e[8];
            vstore8(g[h], 0, e);
            for (int k = 0; k < 8; ++k) e[k] = act(e[k], activation);
            o[h] = vload8(0, e) * u[h];
        }
    }
    str(y, yr, f_bf8(o[0]));
    str(y, yr + 8, f_bf8(o[1]));
}
#endif

#if XK_OP == 0 || XK_OP == 3
// ---- softmax over the last dimension, scale, causal mask ----------------------------------------
// One work-group per row (layout as xk_norm: chunks of 8, in registers when the row fits);
// columns j >= visible are 0. visible = cols, or with causal clamp(row + causal_offset + 1, 0, cols).
__kernel void xk_softmax(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                         ulong cols, float scale, int causal, long causal_offset, int dts, int aligned) {
    __local float buf[XK_MAXWG];
    __local float4 buf2[8];
    const int dx = dts & 0xff, dy = (dts >> 8) & 0xff;
    const int al = aligned;
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    ulong vis = cols;
    if (causal) {
        const long p = (long)row + causal_offset + 1;
        vis = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
    }
    const ulong nc = (cols + 7) / 8, nvis = (vis + 7) / 8;
    if (nc <= (ulong)wg * XK_NV) {
        float8 v[XK_NV];
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < XK_NV; ++j) {
            const ulong c = lid + (ulong)j * wg;
            v[j] = (float8)(-INFINITY);
            if (c < nvis) {
                const ulong e = c * 8;
                const uint nv = vis - e >= 8 ? 8 : (uint)(vis - e);
                v[j] = ldv(x, xr + e, nv, dx, al, -INFINITY) * scale;
                m = fmax(m, hmax8(v[j]));
            }
        }
        m = wg_max(m, buf, buf2);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < XK_NV; ++j) {
            const ulong c = lid + (ulong)j * wg;
            if (c < nvis) {
                v[j] = exp(v[j] - m);  // -inf lanes -> 0
                s += hsum8(v[j]);
            } else {
                v[j] = (float8)(0.0f);
            }
        }
        const float inv = 1.0f / wg_sum(s, buf, buf2);
#pragma unroll
        for (int j = 0; j < XK_NV; ++j) {
            const ulong c = lid + (ulong)j * wg;
            if (c < nc) {
                const ulong e = c * 8;
                const uint nv = cols - e >= 8 ? 8 : (uint)(cols - e);
                stv(y, yr + e, nv, dy, c < nvis ? v[j] * inv : (float8)(0.0f), al);
            }
        }
        return;
    }
    float m = -INFINITY;
    for (ulong c = lid; c < nvis; c += wg) {
        const ulong e = c * 8;
        const uint nv = vis - e >= 8 ? 8 : (uint)(vis - e);
        m = fmax(m, hmax8(ldv(x, xr + e, nv, dx, al, -INFINITY) * scale));
    }
    m = wg_max(m, buf, buf2);
    float s = 0.0f;
    for (ulong c = lid; c < nvis; c += wg) {
        const ulong e = c * 8;
        const uint nv = vis - e >= 8 ? 8 : (uint)(vis - e);
        s += hsum8(exp(ldv(x, xr + e, nv, dx, al, -INFINITY) * scale - m));
    }
    const float inv = 1.0f / wg_sum(s, buf, buf2);
    for (ulong c = lid; c < nc; c += wg) {
        const ulong e = c * 8;
        const uint nv = cols - e >= 8 ? 8 : (uint)(cols - e);
        float8 o = (float8)(0.0f);
        if (c < nvis) {
            const uint nvv = vis - e >= 8 ? 8 : (uint)(vis - e);
            o = exp(ldv(x, xr + e, nvv, dx, al, -INFINITY) * scale - m) * inv;
        }
        stv(y, yr + e, nv, dy, o, al);
    }
}


// bf16 x and y, cols a multiple of 8, row bases multiples of 8 elements, the row in registers
#endif

#if XK_OP == 0 || XK_OP == 4
// ---- RoPE, in place on q and k ------------------------------------------------------------------
// One work-item per rotated pair: id = (tok * heads + head) * rotary_dim / 2 + i, id < total.
// flags: 1 gptj (else neox), 2 compute (else cache), 4 positions s32 (else s64). A position out
// of range leaves the token untouched.
__kernel void xk_rope(__global uchar* q, ulong q_off, ulong q_ts, ulong q_hs, ulong q_heads,
                      __global uchar* k, ulong k_off, ulong k_ts, ulong k_hs,
                      __global const uchar* positions, ulong p_off,
                      __global const uchar* cache, ulong c_off, ulong max_position, int cache_dt,
                      ulong rotary_dim, float base, float scaling, int dt, int flags, ulong heads, ulong total) {
    const ulong id = get_global_id(0);
    if (id >= total) return;
    const ulong half_r = rotary_dim / 2;
    const ulong i = id % half_r, th = id / half_r, head = th % heads, tok = th / heads;
    long p;
    if (flags & 4) p = ((__global const int*)positions)[p_off + tok];
    else p = ((__global const long*)positions)[p_off + tok];
    float cs, sn;
    if (flags & 2) {
        if (p < 0) return;
        rope_cs(p, i, rotary_dim, base, scaling, &cs, &sn);
    } else {
        if (p < 0 || (ulong)p >= max_position) return;
        const ulong row = c_off + (ulong)p * rotary_dim;
        cs = ld1(cache, row + i, cache_dt);
        sn = ld1(cache, row + half_r + i, cache_dt);
    }
    __global uchar* t;
    ulong base_i;
    if (head < q_heads) {
        t = q;
        base_i = q_off + tok * q_ts + head * q_hs;
    } else {
        t = k;
        base_i = k_off + tok * k_ts + (head - q_heads) * k_hs;
    }
    const ulong i1 = (flags & 1) ? base_i + 2 * i : base_i + i;
    const ulong i2 = (flags & 1) ? i1 + 1 : i1 + half_r;
    const float x1 = ld1(t, i1, dt), x2 = ld1(t, i2, dt);
    st1(t, i1, dt, x1 * cs - x2 * sn);
    st1(t, i2, dt, x2 * cs + x1 * sn);
}

// Eight rotated pairs per work-item for bf16 / f16 q and k, neox style (rotary_dim / 2 a multiple
// of 8; every head base, the cache rows and rotary_dim / 2 multiples of 8 elements): x1 and x2
// are one 16-byte load each, cos / sin 8 cache entries each; the math of xk_rope4.
// id = (tok * heads + head) * rotary_dim / 16 + i8, id < total.
__kernel void xk_rope8(__global uchar* q, ulong q_off, ulong q_ts, ulong q_hs, ulong q_heads,
                       __global uchar* k, ulong k_off, ulong k_ts, ulong k_hs,
                       __global const uchar* positions, ulong p_off,
                       __global const uchar* cache, ulong c_off, ulong max_position, int cache_dt,
                       ulong rotary_dim, float base, float scaling, int dt, int flags, ulong heads, ulong total) {
    const ulong id = get_global_id(0);
    if (id >= total) return;
    const ulong half_r = rotary_dim / 2, q8 = half_r / 8;
    ulong i, head, tok;
    if (total <= 0xffffffffUL) {
        const uint id32 = (uint)id, q32 = (uint)q8, th = id32 / q32;
        i = (ulong)(id32 - th * q32) * 8;
        head = th % (uint)heads;
        tok = th / (uint)heads;
    } else {
        const ulong th = id / q8;
        i = (id % q8) * 8;
        head = th % heads;
        tok = th / heads;
    }
    long p;
    if (flags & 4) p = ((__global const int*)positions)[p_off + tok];
    else p = ((__global const long*)positions)[p_off + tok];
    __global uchar* t;
    ulong base_i;
    if (head < q_heads) {
        t = q;
        base_i = q_off + tok * q_ts + head * q_hs;
    } else {
        t = k;
        base_i = k_off + tok * k_ts + (head - q_heads) * k_hs;
    }
    // q / k loaded before the position check's branch: their latency overlaps the cache's.
    const float8 x1 = ld8(t, base_i + i, dt, 2), x2 = ld8(t, base_i + half_r + i, dt, 2);
    float8 cs, sn;
    if (flags & 2) {
        if (p < 0) return;
        float c8[8], s8[8];
        for (int j = 0; j < 8; ++j) {
            rope_cs(p, i + j, rotary_dim, base, scaling, &c8[j], &s8[j]);
        }
        cs = vload8(0, c8);
        sn = vload8(0, s8);
    } else {
        if (p < 0 || (ulong)p >= max_position) return;
        const ulong row = c_off + (ulong)p * rotary_dim;
        cs = ld8(cache, row + i, cache_dt, 2);
        sn = ld8(cache, row + half_r + i, cache_dt, 2);
    }
    st8(t, base_i + i, dt, x1 * cs - x2 * sn, 2);
    st8(t, base_i + half_r + i, dt, x2 * cs + x1 * sn, 2);
}

// xk_rope8 for bf16 q and k with the heads of a token shared: a work-item
// takes 8 pairs (i8) of XK_RH heads hg, hg + HG, ... (HG = ceil(heads / XK_RH)) of one token, so
// the position and the cos / sin (cache reads or the computed values) are fetched once per
// XK_RH heads, and its 2 * XK_RH 16-byte q / k loads are issued together (kept packed).
// id = (tok * HG + hg) * rotary_dim / 16 + i8, id < total. Same preconditions as xk_rope8.
#ifndef XK_RH
#define XK_RH 4
#endif
__kernel void xk_rope8h(__global uchar* q, ulong q_off, ulong q_ts, ulong q_hs, ulong q_heads,
                        __global uchar* k, ulong k_off, ulong k_ts, ulong k_hs,
                        __global const uchar* positions, ulong p_off,
                        __global const uchar* cache, ulong c_off, ulong max_position, int cache_dt,
                        ulong rotary_dim, float base, float scaling, int dt, int flags, ulong heads, ulong total) {
    const ulong id = get_global_id(0);
    if (id >= total) return;
    const ulong half_r = rotary_dim / 2, q8 = half_r / 8, hgs = (heads + XK_RH - 1) / XK_RH;
    ulong i, hg, tok;
    if (total <= 0xffffffffUL) {
        const uint id32 = (uint)id, q32 = (uint)q8, th = id32 / q32;
        i = (ulong)(id32 - th * q32) * 8;
        hg = th % (uint)hgs;
        tok = th / (uint)hgs;
    } else {
        const ulong th = id / q8;
        i = (id % q8) * 8;
        hg = th % hgs;
        tok = th / hgs;
    }
    long p;
    if (flags & 4) p = ((__global const int*)positions)[p_off + tok];
    else p = ((__global const long*)positions)[p_off + tok];
    __global uchar* t[XK_RH];
    ulong bi[XK_RH];
    uint4 x1[XK_RH], x2[XK_RH];
#pragma unroll
    for (int r = 0; r < XK_RH; ++r) {
        ulong h = hg + (ulong)r * hgs;
        if (h >= heads) h = hg;  // clamped (not stored)
        if (h < q_heads) {
            t[r] = q;
            bi[r] = q_off + tok * q_ts + h * q_hs;
        } else {
            t[r] = k;
            bi[r] = k_off + tok * k_ts + (h - q_heads) * k_hs;
        }
        x1[r] = ldr(t[r], bi[r] + i);
        x2[r] = ldr(t[r], bi[r] + half_r + i);
    }
    float8 cs, sn;
    if (flags & 2) {
        if (p < 0) return;
        float c8[8], s8[8];
        for (int j = 0; j < 8; ++j) {
            rope_cs(p, i + j, rotary_dim, base, scaling, &c8[j], &s8[j]);
        }
        cs = vload8(0, c8);
        sn = vload8(0, s8);
    } else {
        if (p < 0 || (ulong)p >= max_position) return;
        const ulong row = c_off + (ulong)p * rotary_dim;
        cs = ld8(cache, row + i, cache_dt, 2);
        sn = ld8(cache, row + half_r + i, cache_dt, 2);
    }
#pragma unroll
    for (int r = 0; r < XK_RH; ++r) {
        if (hg + (ulong)r * hgs < heads) {
            const float8 a = bf8_f(x1[r]), b2 = bf8_f(x2[r]);
            str(t[r], bi[r] + i, f_bf8(a * cs - b2 * sn));
            str(t[r], bi[r] + half_r + i, f_bf8(b2 * cs + a * sn));
        }
    }
}

// Four rotated pairs per work-item (rotary_dim / 2 a multiple of 4): id = (tok * heads + head) *
// rotary_dim / 8 + i4, id < total. neox: x1 = 4 consecutive of the first half, x2 the same of the
// second; gptj: 8 consecutive elements = 4 (x1, x2) pairs. flags as xk_rope, plus 16: every head
// base, the cache rows and rotary_dim / 2 multiples of 4 elements (vector accesses; else vloadn),
// 32: head bases multiples of 8 (gptj's 8-element accesses).
__kernel void xk_rope4(__global uchar* q, ulong q_off, ulong q_ts, ulong q_hs, ulong q_heads,
                       __global uchar* k, ulong k_off, ulong k_ts, ulong k_hs,
                       __global const uchar* positions, ulong p_off,
                       __global const uchar* cache, ulong c_off, ulong max_position, int cache_dt,
                       ulong rotary_dim, float base, float scaling, int dt, int flags, ulong heads, ulong total) {
    const ulong id = get_global_id(0);
    if (id >= total) return;
    const ulong half_r = rotary_dim / 2, q4 = half_r / 4;
    ulong i, head, tok;
    if (total <= 0xffffffffUL) {  // 32-bit divisions (64-bit ones are long instruction sequences on GPUs)
        const uint id32 = (uint)id, q32 = (uint)q4, th = id32 / q32;
        i = (ulong)(id32 - th * q32) * 4;
        head = th % (uint)heads;
        tok = th / (uint)heads;
    } else {
        const ulong th = id / q4;
        i = (id % q4) * 4;
        head = th % heads;
        tok = th / heads;
    }
    const bool al = (flags & 16) != 0;
    long p;
    if (flags & 4) p = ((__global const int*)positions)[p_off + tok];
    else p = ((__global const long*)positions)[p_off + tok];
    float4 cs, sn;
    if (flags & 2) {
        if (p < 0) return;
        float c4[4], s4[4];
        for (int j = 0; j < 4; ++j) {
            rope_cs(p, i + j, rotary_dim, base, scaling, &c4[j], &s4[j]);
        }
        cs = vload4(0, c4);
        sn = vload4(0, s4);
    } else {
        if (p < 0 || (ulong)p >= max_position) return;
        const ulong row = c_off + (ulong)p * rotary_dim;
        cs = ld4(cache, row + i, cache_dt, al);
        sn = ld4(cache, row + half_r + i, cache_dt, al);
    }
    __global uchar* t;
    ulong base_i;
    if (head < q_heads) {
        t = q;
        base_i = q_off + tok * q_ts + head * q_hs;
    } else {
        t = k;
        base_i = k_off + tok * k_ts + (head - q_heads) * k_hs;
    }
    if (flags & 1) {  // gptj: pairs interleaved
        const int al8 = (flags & 32) ? 2 : al ? 1 : 0;
        const float8 v = ld8(t, base_i + 2 * i, dt, al8);
        const float4 x1 = v.even, x2 = v.odd;
        float8 o;
        o.even = x1 * cs - x2 * sn;
        o.odd = x2 * cs + x1 * sn;
        st8(t, base_i + 2 * i, dt, o, al8);
    } else {
        const float4 x1 = ld4(t, base_i + i, dt, al), x2 = ld4(t, base_i + half_r + i, dt, al);
        st4(t, base_i + i, dt, x1 * cs - x2 * sn, al);
        st4(t, base_i + half_r + i, dt, x2 * cs + x1 * sn, al);
    }
}
#endif

// ---- the row kernels per storage type (ops_row.h) ------------------------------------------------
#ifndef XK_RV
#define XK_RV 8  // 16-byte vectors of a row per work-item: 8 bf16 / f16 chunks of 8, 4 f32 chunks
#endif
#ifndef XK_PERSIST
#define XK_PERSIST 0
#endif
#ifndef XK_FUSED
#define XK_FUSED -1  // norms: -1 the residual from the flags, 0 / 1 known at compile time
#endif
#ifndef XK_HB
#define XK_HB -1     // norms: -1 the bias from the flags, 0 / 1 known at compile time
#endif
#ifndef XK_WF
#define XK_WF 0      // _pre norms: 1 = weights held widened
#endif
#ifndef XK_FEPI
#define XK_FEPI 0    // norms: 1 = the two-fma epilogue
#endif
#ifndef XK_REXP
#define XK_REXP 0    // softmax: 1 = exponentials recomputed at the store
#endif
#ifndef XK_WG
#define XK_WG 0
#define XK_WG_ATTR
#else
#define XK_WG_ATTR __attribute__((reqd_work_group_size(XK_WG, 1, 1)))
#endif
#if XK_OP == 0 || XK_OP == 1 || XK_OP == 3
// f32: a float8 (two float4 accesses) per chunk.
#define XT f32
#define RAW float8
#define LDR(p, i) ((float8)(*((__global const float4*)((__global const float*)(p) + (i))), \
                            *((__global const float4*)((__global const float*)(p) + (i) + 4))))
#define STR(p, i, r) do { __global float4* q_ = (__global float4*)((__global float*)(p) + (i)); q_[0] = (r).lo; q_[1] = (r).hi; } while (0)
#define CV(r) (r)
#define PK(v) (v)
#define LD1(p, i) (((__global const float*)(p))[i])
#define NVC (XK_RV >= 2 ? XK_RV / 2 : 1)
#define EPI (NVC >= 2 ? 2 : 1)
#include "ops_row.h"
// bf16: kept packed, a uint4 per chunk (the registers of 4 floats).
#define XT bf16
#define RAW uint4
#define LDR(p, i) ldr(p, i)
#define STR(p, i, r) str(p, i, r)
#define CV(r) bf8_f(r)
#define PK(v) pk_bf8(v)
#define LD1(p, i) bf16_to_f(((__global const ushort*)(p))[i])
#define NVC XK_RV
#define EPI (NVC >= 4 ? 4 : NVC)
#include "ops_row.h"
// f16: widened at the load (vloada_half8), rounded at the store (vstorea_half8_rte). PK is not a
// rounding here, so the host sends f16 norms with a residual to xk_norm.
#define XT f16
#define RAW float8
#define LDR(p, i) vloada_half8(0, (__global const half*)(p) + (i))
#define STR(p, i, r) vstorea_half8_rte((r), 0, (__global half*)(p) + (i))
#define CV(r) (r)
#define PK(v) (v)
#define LD1(p, i) vload_half((i), (__global const half*)(p))
#define NVC (XK_RV >= 2 ? XK_RV / 2 : 1)
#define EPI (NVC >= 2 ? 2 : 1)
#include "ops_row.h"
#endif

