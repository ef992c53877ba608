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

// The v2 row kernels' groups: <= XK_MAXWG2 work-items (their float2 reduction buffer stays 4 KB,
// the local memory of the kernels before them, so the L1 left beside it is the same).
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
// Softmax's (max, sum) in one reduction (two barriers): each item gives its local max m and
// s = sum exp(v - m) over its values; returns (M, S = sum s exp(m - M)). Stage 1: items 0..7 merge
// the items t, t + 8, ...; stage 2: every item merges the 8 partials (same order everywhere).
// An item with m = -inf (no visible value) adds nothing.
inline float2 wg_maxsum(float m, float s, __local float2* buf, __local float4* buf2) {
    const int lid = get_local_id(0), wg = get_local_size(0);
    buf[lid] = (float2)(m, s);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < 8; t += wg) {
        float mm = -INFINITY, ss = 0.0f;
        for (int j = t; j < wg; j += 8) mm = fmax(mm, buf[j].x);
        if (mm != -INFINITY)
            for (int j = t; j < wg; j += 8) {
                const float2 e = buf[j];
                if (e.x != -INFINITY) ss += e.y * exp(e.x - mm);
            }
        ((__local float2*)buf2)[t] = (float2)(mm, ss);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float4 p0 = buf2[0], p1 = buf2[1], p2 = buf2[2], p3 = buf2[3];
    const float M = fmax(fmax(fmax(p0.x, p0.z), fmax(p1.x, p1.z)), fmax(fmax(p2.x, p2.z), fmax(p3.x, p3.z)));
    if (M == -INFINITY) return (float2)(M, 0.0f);
    float S = 0.0f;
    const float4 p[4] = {p0, p1, p2, p3};
    for (int j = 0; j < 4; ++j) {
        if (p[j].x != -INFINITY) S += p[j].y * exp(p[j].x - M);
        if (p[j].z != -INFINITY) S += p[j].w * exp(p[j].z - M);
    }
    return (float2)(M, S);
}

#ifndef XK_OP
#define XK_OP 0  // 0: every op
#endif
#ifndef XK_NV
#define XK_NV 4  // 8-element chunks a work-item keeps in registers (row ops)
#endif
#ifndef XK_NV16
#define XK_NV16 8  // the same for the bf16 row kernels (twice the elements, packed: the same registers)
#endif

// Chunk-of-8 accessors of the v2 row kernels (norm2 / softmax2), per storage type: f32 a float8
// (two float4), bf16 packed (uint4). Row bases multiples of 8 elements.
#define LDX_F32(p, i) ((float8)(*((__global const float4*)((__global const float*)(p) + (i))), \
                                *((__global const float4*)((__global const float*)(p) + (i) + 4))))
#define CV_F32(r) (r)
#define PK_F32(v) (v)
#define STX_F32(p, i, r) do { __global float4* q_ = (__global float4*)((__global float*)(p) + (i)); q_[0] = (r).lo; q_[1] = (r).hi; } while (0)
#define LD1_F32(p, i) (((__global const float*)(p))[i])
#define RAW_F32 float8
#define NVC_F32 XK_NV
#define EPI_F32 2
#define LDX_BF16(p, i) ldr(p, i)
#define CV_BF16(r) bf8_f(r)
#define PK_BF16(v) f_bf8(v)
#define STX_BF16(p, i, r) str(p, i, r)
#define LD1_BF16(p, i) bf16_to_f(((__global const ushort*)(p))[i])
#define RAW_BF16 uint4
#define NVC_BF16 XK_NV16
#define EPI_BF16 4

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


// ---- RMSNorm / LayerNorm, every tensor bf16 --------------------------------------------------------
// The host takes these when x, y, weight, bias and the residual are bf16, every row base and
// hidden are multiples of 8 elements and the row fits in registers (chunks <= wg * XK_NV16).
// Same arguments and results as xk_norm. The weight (and LayerNorm's bias) rows are loaded with
// the row, before the reduction, so no L2 round trip follows it.
// LAYER: a constant at each call (the two kernels below), so each is compiled for its kind.
inline void norm_bf16(const bool LAYER, __local float* buf, __local float4* buf2, __global const uchar* x, ulong x_off,
                      ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y, __global const uchar* w, ulong w_off,
                      __global const uchar* b, ulong b_off, __global const uchar* res, ulong res_off, ulong ld_res,
                      __global uchar* res_out, ulong ro_off, ulong ld_ro, ulong hidden, float eps, int flags) {
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const uint nc = (uint)(hidden / 8);
    const bool fused = (flags & 4) != 0, hw = (flags & 1) != 0, hb = (flags & 2) != 0;
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    const ulong rr = res_off + row * ld_res, ror = ro_off + row * ld_ro;
    const float inv_n = 1.0f / (float)hidden;
    uint4 h[XK_NV16], wr[XK_NV16], br[XK_NV16];
    #pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg, cc = (c < nc ? c : nc - 1) * 8;
        h[j] = ldr(x, xr + cc);
        wr[j] = hw ? ldr(w, w_off + cc) : (uint4)(0x3f80u | (0x3f80u << 16));
        br[j] = (LAYER && hb) ? ldr(b, b_off + cc) : (uint4)(0u);
    }
    if (fused) {
        uint4 r[XK_NV16];
        #pragma unroll
        for (int j = 0; j < XK_NV16; ++j) {
            const uint c = lid + (uint)j * wg;
            r[j] = ldr(res, rr + (c < nc ? c : nc - 1) * 8);
        }
        #pragma unroll
        for (int j = 0; j < XK_NV16; ++j) {
            const uint c = lid + (uint)j * wg;
            h[j] = f_bf8(bf8_f(h[j]) + bf8_f(r[j]));
            if (c < nc) str(res_out, ror + c * 8, h[j]);
        }
    }
    float s1 = 0.0f, s2 = 0.0f;
    #pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg;
        const float8 v = c < nc ? bf8_f(h[j]) : (float8)(0.0f);
        s1 += hsum8(v);
        s2 += hsum8(v * v);
    }
    float mean = 0.0f, rstd;
    if (LAYER) {
        mean = wg_sum(s1, buf, buf2) * inv_n;
        float var = 0.0f;
        #pragma unroll
        for (int j = 0; j < XK_NV16; ++j) {
            const uint c = lid + (uint)j * wg;
            const float8 d = c < nc ? bf8_f(h[j]) - mean : (float8)(0.0f);
            var += hsum8(d * d);
        }
        rstd = rsqrt(wg_sum(var, buf, buf2) * inv_n + eps);
    } else {
        rstd = rsqrt(wg_sum(s2, buf, buf2) * inv_n + eps);
    }
    #pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nc) {
            float8 o = (bf8_f(h[j]) - mean) * rstd;
            if (hw) o *= bf8_f(wr[j]);
            if (hb) o += LAYER ? bf8_f(br[j]) : bf8_f(ldr(b, b_off + c * 8));
            str(y, yr + c * 8, f_bf8(o));
        }
    }
}
#define XK_NORM_BF16_KERNEL(NAME, LAYER) \
    __kernel void NAME(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y, \
                       __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off, \
                       __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off, \
                       ulong ld_ro, ulong hidden, float eps, int dts, int flags) { \
        __local float buf[XK_MAXWG]; \
        __local float4 buf2[8]; \
        norm_bf16(LAYER, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, \
                  ro_off, ld_ro, hidden, eps, flags); \
    }
XK_NORM_BF16_KERNEL(xk_norm_bf16_rms, false)
XK_NORM_BF16_KERNEL(xk_norm_bf16_ln, true)

// ---- RMSNorm / LayerNorm v2: every tensor f32, or every tensor bf16 ---------------------------------
// Taken (unless XK_GPU_ROW_V2=0) when every row base and hidden are multiples of 8 elements and
// the row fits in registers: f32 XK_NV chunks of 8 per work-item (two float4 each), bf16 XK_NV16
// packed (a uint4 each). Every load of the row (and the residual) is issued before the first use
// (clamped indices); with the residual, h = x + residual is stored (to residual_out, maybe the
// residual itself) after the reduction, with y. One reduction per row (two barriers): RMSNorm sum x^2; LayerNorm sum d and
// sum d^2 together, d = x - K with K the row's first x (+ residual) (a shift near the data, so
// sum d^2 / n - mean_d^2 does not cancel). Only the row is held across the barriers: the weight
// and bias are read after the reduction (the same 8-16 KB for every row: L1 / L2 hits), in groups
// of XK_EPI chunks issued together, so the registers held are the row's, not row + weight + bias.
inline void norm2_f32(const bool LAYER, const bool PRE, __local float2* buf, __local float4* buf2, __global const uchar* x, ulong x_off, ulong ld_x,
                     __global uchar* y, ulong y_off, ulong ld_y, __global const uchar* w, ulong w_off, __global const uchar* b,
                     ulong b_off, __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out,
                     ulong ro_off, ulong ld_ro, ulong hidden, float eps, int flags) {
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const uint nc = (uint)(hidden / 8);
    const bool fused = (flags & 4) != 0, hw = (flags & 1) != 0, hb = (flags & 2) != 0;
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    const ulong rr = res_off + row * ld_res, ror = ro_off + row * ld_ro;
    const float inv_n = 1.0f / (float)hidden;
    RAW_F32 h[NVC_F32];
    #pragma unroll
    for (int j = 0; j < NVC_F32; ++j) {
        const uint c = lid + (uint)j * wg;
        h[j] = LDX_F32(x, xr + (c < nc ? c : nc - 1) * 8);
    }
    RAW_F32 wp[NVC_F32], bp[NVC_F32];  // PRE: the weight / bias with the row
    if (PRE) {
        #pragma unroll
        for (int j = 0; j < NVC_F32; ++j) {
            const uint c = lid + (uint)j * wg, cc = (c < nc ? c : nc - 1) * 8;
            if (hw) wp[j] = LDX_F32(w, w_off + cc);
            if (hb) bp[j] = LDX_F32(b, b_off + cc);
        }
    }
    float K = 0.0f;
    if (LAYER) K = LD1_F32(x, xr);
    if (fused) {
        RAW_F32 r[NVC_F32];
        #pragma unroll
        for (int j = 0; j < NVC_F32; ++j) {
            const uint c = lid + (uint)j * wg;
            r[j] = LDX_F32(res, rr + (c < nc ? c : nc - 1) * 8);
        }
        if (LAYER) K += LD1_F32(res, rr);
        #pragma unroll
        for (int j = 0; j < NVC_F32; ++j) {
            h[j] = PK_F32(CV_F32(h[j]) + CV_F32(r[j]));
        }
    }
    float2 s = (float2)(0.0f);
    #pragma unroll
    for (int j = 0; j < NVC_F32; ++j) {
        const uint c = lid + (uint)j * wg;
        const float8 d = c < nc ? CV_F32(h[j]) - K : (float8)(0.0f);
        if (LAYER) s.x += hsum8(d);
        s.y += hsum8(d * d);
    }
    float mean = 0.0f, rstd;
    if (LAYER) {
        const float2 t = wg_sum2(s, buf, buf2) * inv_n;
        mean = K + t.x;
        rstd = rsqrt(fmax(t.y - t.x * t.x, 0.0f) + eps);
    } else {
        rstd = rsqrt(wg_sum(s.y, (__local float*)buf, buf2) * inv_n + eps);
    }
    #pragma unroll
    for (int j0 = 0; j0 < NVC_F32; j0 += EPI_F32) {
        RAW_F32 wr[EPI_F32], br[EPI_F32];
        #pragma unroll
        for (int j = 0; j < EPI_F32; ++j) {
            const uint c = lid + (uint)(j0 + j) * wg, cc = (c < nc ? c : nc - 1) * 8;
            if (hw) wr[j] = PRE ? wp[j0 + j] : LDX_F32(w, w_off + cc);
            if (hb) br[j] = PRE ? bp[j0 + j] : LDX_F32(b, b_off + cc);
        }
        #pragma unroll
        for (int j = 0; j < EPI_F32; ++j) {
            const uint c = lid + (uint)(j0 + j) * wg;
            if (c < nc) {
                if (fused) STX_F32(res_out, ror + c * 8, h[j0 + j]);  // after the barriers: K read the residual
                float8 o = (CV_F32(h[j0 + j]) - mean) * rstd;
                if (hw) o *= CV_F32(wr[j]);
                if (hb) o += CV_F32(br[j]);
                STX_F32(y, yr + c * 8, PK_F32(o));
            }
        }
    }
}
inline void norm2_bf16(const bool LAYER, const bool PRE, __local float2* buf, __local float4* buf2, __global const uchar* x, ulong x_off, ulong ld_x,
                     __global uchar* y, ulong y_off, ulong ld_y, __global const uchar* w, ulong w_off, __global const uchar* b,
                     ulong b_off, __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out,
                     ulong ro_off, ulong ld_ro, ulong hidden, float eps, int flags) {
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const uint nc = (uint)(hidden / 8);
    const bool fused = (flags & 4) != 0, hw = (flags & 1) != 0, hb = (flags & 2) != 0;
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    const ulong rr = res_off + row * ld_res, ror = ro_off + row * ld_ro;
    const float inv_n = 1.0f / (float)hidden;
    RAW_BF16 h[NVC_BF16];
    #pragma unroll
    for (int j = 0; j < NVC_BF16; ++j) {
        const uint c = lid + (uint)j * wg;
        h[j] = LDX_BF16(x, xr + (c < nc ? c : nc - 1) * 8);
    }
    RAW_BF16 wp[NVC_BF16], bp[NVC_BF16];  // PRE: the weight / bias with the row
    if (PRE) {
        #pragma unroll
        for (int j = 0; j < NVC_BF16; ++j) {
            const uint c = lid + (uint)j * wg, cc = (c < nc ? c : nc - 1) * 8;
            if (hw) wp[j] = LDX_BF16(w, w_off + cc);
            if (hb) bp[j] = LDX_BF16(b, b_off + cc);
        }
    }
    float K = 0.0f;
    if (LAYER) K = LD1_BF16(x, xr);
    if (fused) {
        RAW_BF16 r[NVC_BF16];
        #pragma unroll
        for (int j = 0; j < NVC_BF16; ++j) {
            const uint c = lid + (uint)j * wg;
            r[j] = LDX_BF16(res, rr + (c < nc ? c : nc - 1) * 8);
        }
        if (LAYER) K += LD1_BF16(res, rr);
        #pragma unroll
        for (int j = 0; j < NVC_BF16; ++j) {
            h[j] = PK_BF16(CV_BF16(h[j]) + CV_BF16(r[j]));
        }
    }
    float2 s = (float2)(0.0f);
    #pragma unroll
    for (int j = 0; j < NVC_BF16; ++j) {
        const uint c = lid + (uint)j * wg;
        const float8 d = c < nc ? CV_BF16(h[j]) - K : (float8)(0.0f);
        if (LAYER) s.x += hsum8(d);
        s.y += hsum8(d * d);
    }
    float mean = 0.0f, rstd;
    if (LAYER) {
        const float2 t = wg_sum2(s, buf, buf2) * inv_n;
        mean = K + t.x;
        rstd = rsqrt(fmax(t.y - t.x * t.x, 0.0f) + eps);
    } else {
        rstd = rsqrt(wg_sum(s.y, (__local float*)buf, buf2) * inv_n + eps);
    }
    #pragma unroll
    for (int j0 = 0; j0 < NVC_BF16; j0 += EPI_BF16) {
        RAW_BF16 wr[EPI_BF16], br[EPI_BF16];
        #pragma unroll
        for (int j = 0; j < EPI_BF16; ++j) {
            const uint c = lid + (uint)(j0 + j) * wg, cc = (c < nc ? c : nc - 1) * 8;
            if (hw) wr[j] = PRE ? wp[j0 + j] : LDX_BF16(w, w_off + cc);
            if (hb) br[j] = PRE ? bp[j0 + j] : LDX_BF16(b, b_off + cc);
        }
        #pragma unroll
        for (int j = 0; j < EPI_BF16; ++j) {
            const uint c = lid + (uint)(j0 + j) * wg;
            if (c < nc) {
                if (fused) STX_BF16(res_out, ror + c * 8, h[j0 + j]);  // after the barriers: K read the residual
                float8 o = (CV_BF16(h[j0 + j]) - mean) * rstd;
                if (hw) o *= CV_BF16(wr[j]);
                if (hb) o += CV_BF16(br[j]);
                STX_BF16(y, yr + c * 8, PK_BF16(o));
            }
        }
    }
}
// *_pre: the weight and bias loaded with the row (XK_GPU_NORM_PRELOAD=1: a same-run comparison).
__kernel void xk_norm2_f32_rms(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_f32(false, false, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_f32_rms_pre(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_f32(false, true, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_f32_ln(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_f32(true, false, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_f32_ln_pre(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_f32(true, true, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_bf16_rms(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_bf16(false, false, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_bf16_rms_pre(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_bf16(false, true, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_bf16_ln(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_bf16(true, false, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
}
__kernel void xk_norm2_bf16_ln_pre(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
                     __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,
                     ulong ld_ro, ulong hidden, float eps, int dts, int flags) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[16];
    norm2_bf16(true, true, buf, buf2, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out, ro_off,
             ld_ro, hidden, eps, flags);
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
// (chunks <= wg * XK_NV16): every chunk loaded (packed, clamped index) before the first use;
// the math of xk_softmax.
__kernel void xk_softmax_bf16(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off,
                              ulong ld_y, ulong cols, float scale, int causal, long causal_offset, int dts, int aligned) {
    __local float buf[XK_MAXWG];
    __local float4 buf2[8];
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    ulong vis = cols;
    if (causal) {
        const long p = (long)row + causal_offset + 1;
        vis = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
    }
    const uint nc = (uint)(cols / 8), nvis = (uint)((vis + 7) / 8);
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    uint4 r[XK_NV16];
#pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg;
        r[j] = ldr(x, xr + (c < nvis ? c : 0) * 8);  // chunks past the visible ones: never used
    }
    float8 v[XK_NV16];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg;
        const long nv = (long)vis - (long)c * 8;  // visible lanes of this chunk
        v[j] = select((float8)(-INFINITY), bf8_f(r[j]) * scale, lane < (int8)((int)(nv < 8 ? (nv < 0 ? 0 : nv) : 8)));
        m = fmax(m, hmax8(v[j]));
    }
    m = wg_max(m, buf, buf2);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nvis) {
            v[j] = exp(v[j] - m);  // -inf lanes -> 0
            s += hsum8(v[j]);
        } else {
            v[j] = (float8)(0.0f);
        }
    }
    const float inv = 1.0f / wg_sum(s, buf, buf2);
#pragma unroll
    for (int j = 0; j < XK_NV16; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nc) str(y, yr + c * 8, f_bf8(c < nvis ? v[j] * inv : (float8)(0.0f)));
    }
}


// ---- softmax v2: x and y both f32 or both bf16 (unless XK_GPU_ROW_V2=0) ---------------------------
// cols a multiple of 8, row bases multiples of 8 elements, the row in registers (f32 XK_NV chunks
// of 8 per work-item, bf16 XK_NV16 packed). One reduction per row (two barriers, wg_maxsum)
// instead of a max then a sum: each item exponentiates its values against its own max m_i and
// the result is scaled by exp(m_i - M) / S, S = sum over items of s_i exp(m_i - M).
__kernel void xk_softmax2_f32(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off,
                              ulong ld_y, ulong cols, float scale, int causal, long causal_offset, int dts, int aligned) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[4];
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    ulong vis = cols;
    if (causal) {
        const long p = (long)row + causal_offset + 1;
        vis = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
    }
    const uint nc = (uint)(cols / 8), nvis = (uint)((vis + 7) / 8);
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    RAW_F32 r[NVC_F32];
    #pragma unroll
    for (int j = 0; j < NVC_F32; ++j) {
        const uint c = lid + (uint)j * wg;
        r[j] = LDX_F32(x, xr + (c < nvis ? c : 0) * 8);  // chunks past the visible ones: never used
    }
    // max of the visible raw values (scale > 0: max(x * scale) = scale * max(x), the same rounding)
    float mx = -INFINITY;
    #pragma unroll
    for (int j = 0; j < NVC_F32; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nvis) {
            float8 t = CV_F32(r[j]);
            const long nv = (long)vis - (long)c * 8;  // visible lanes of this chunk (>= 1)
            if (nv < 8) t = select((float8)(-INFINITY), t, lane < (int8)((int)nv));
            mx = fmax(mx, hmax8(t));
        }
    }
    const float m = mx * scale;
    float8 v[NVC_F32];
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < NVC_F32; ++j) {
        const uint c = lid + (uint)j * wg;
        float8 e = (float8)(0.0f);
        if (c < nvis && m != -INFINITY) {
            e = exp(CV_F32(r[j]) * scale - m);
            const long nv = (long)vis - (long)c * 8;
            if (nv < 8) e = select((float8)(0.0f), e, lane < (int8)((int)nv));
        }
        v[j] = e;
        s += hsum8(e);
    }
    const float2 ms = wg_maxsum(m, s, buf, buf2);
    const float f = m == -INFINITY ? 0.0f : exp(m - ms.x) / ms.y;
    #pragma unroll
    for (int j = 0; j < NVC_F32; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nc) STX_F32(y, yr + c * 8, PK_F32(c < nvis ? v[j] * f : (float8)(0.0f)));
    }
}

__kernel void xk_softmax2_bf16(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off,
                              ulong ld_y, ulong cols, float scale, int causal, long causal_offset, int dts, int aligned) {
    __local float2 buf[XK_MAXWG2];
    __local float4 buf2[4];
    const ulong row = get_group_id(0);
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    ulong vis = cols;
    if (causal) {
        const long p = (long)row + causal_offset + 1;
        vis = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
    }
    const uint nc = (uint)(cols / 8), nvis = (uint)((vis + 7) / 8);
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    RAW_BF16 r[NVC_BF16];
    #pragma unroll
    for (int j = 0; j < NVC_BF16; ++j) {
        const uint c = lid + (uint)j * wg;
        r[j] = LDX_BF16(x, xr + (c < nvis ? c : 0) * 8);  // chunks past the visible ones: never used
    }
    // max of the visible raw values (scale > 0: max(x * scale) = scale * max(x), the same rounding)
    float mx = -INFINITY;
    #pragma unroll
    for (int j = 0; j < NVC_BF16; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nvis) {
            float8 t = CV_BF16(r[j]);
            const long nv = (long)vis - (long)c * 8;  // visible lanes of this chunk (>= 1)
            if (nv < 8) t = select((float8)(-INFINITY), t, lane < (int8)((int)nv));
            mx = fmax(mx, hmax8(t));
        }
    }
    const float m = mx * scale;
    float8 v[NVC_BF16];
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < NVC_BF16; ++j) {
        const uint c = lid + (uint)j * wg;
        float8 e = (float8)(0.0f);
        if (c < nvis && m != -INFINITY) {
            e = exp(CV_BF16(r[j]) * scale - m);
            const long nv = (long)vis - (long)c * 8;
            if (nv < 8) e = select((float8)(0.0f), e, lane < (int8)((int)nv));
        }
        v[j] = e;
        s += hsum8(e);
    }
    const float2 ms = wg_maxsum(m, s, buf, buf2);
    const float f = m == -INFINITY ? 0.0f : exp(m - ms.x) / ms.y;
    #pragma unroll
    for (int j = 0; j < NVC_BF16; ++j) {
        const uint c = lid + (uint)j * wg;
        if (c < nc) STX_BF16(y, yr + c * 8, PK_BF16(c < nvis ? v[j] * f : (float8)(0.0f)));
    }
}
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
#ifdef XK_HAVE_FP64
        const double inv_freq = pow((double)base, -2.0 * (double)i / (double)rotary_dim);
        const double theta = ((double)p / (double)scaling) * inv_freq;
        cs = (float)cos(theta);
        sn = (float)sin(theta);
#else
        const float inv_freq = pow(base, -2.0f * (float)i / (float)rotary_dim);
        const float theta = ((float)p / scaling) * inv_freq;
        cs = cos(theta);
        sn = sin(theta);
#endif
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
#ifdef XK_HAVE_FP64
            const double inv_freq = pow((double)base, -2.0 * (double)(i + j) / (double)rotary_dim);
            const double theta = ((double)p / (double)scaling) * inv_freq;
            c8[j] = (float)cos(theta);
            s8[j] = (float)sin(theta);
#else
            const float inv_freq = pow(base, -2.0f * (float)(i + j) / (float)rotary_dim);
            const float theta = ((float)p / scaling) * inv_freq;
            c8[j] = cos(theta);
            s8[j] = sin(theta);
#endif
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

// xk_rope8 for bf16 q and k with the heads of a token shared (unless XK_GPU_ROW_V2=0): a work-item
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
#ifdef XK_HAVE_FP64
            const double inv_freq = pow((double)base, -2.0 * (double)(i + j) / (double)rotary_dim);
            const double theta = ((double)p / (double)scaling) * inv_freq;
            c8[j] = (float)cos(theta);
            s8[j] = (float)sin(theta);
#else
            const float inv_freq = pow(base, -2.0f * (float)(i + j) / (float)rotary_dim);
            const float theta = ((float)p / scaling) * inv_freq;
            c8[j] = cos(theta);
            s8[j] = sin(theta);
#endif
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
#ifdef XK_HAVE_FP64
            const double inv_freq = pow((double)base, -2.0 * (double)(i + j) / (double)rotary_dim);
            const double theta = ((double)p / (double)scaling) * inv_freq;
            c4[j] = (float)cos(theta);
            s4[j] = (float)sin(theta);
#else
            const float inv_freq = pow(base, -2.0f * (float)(i + j) / (float)rotary_dim);
            const float theta = ((float)p / scaling) * inv_freq;
            c4[j] = cos(theta);
            s4[j] = sin(theta);
#endif
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
