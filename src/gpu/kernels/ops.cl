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

#ifndef XK_WG
#define XK_WG 128  // work-group size of the row kernels (a power of two)
#endif

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

// Sum over the work-group (all XK_WG work-items call it); buf has XK_WG floats.
inline float wg_sum(float v, __local float* buf) {
    const int lid = get_local_id(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = XK_WG / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] += buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
inline float wg_max(float v, __local float* buf) {
    const int lid = get_local_id(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = XK_WG / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = fmax(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

#ifndef XK_OP
#define XK_OP 0  // 0: every op
#endif

#if XK_OP == 0 || XK_OP == 1
// ---- RMSNorm / LayerNorm ------------------------------------------------------------------------
// One work-group per row. dts = x | y << 8 | res << 16 | w << 24. flags: 1 weight, 2 bias,
// 4 fused residual, 8 layer_norm, 16 aligned (every row base a multiple of 4 elements). With the residual, h = round_res(x + residual) is written to
// residual_out in the first pass and read back (by the same work-item) in the later ones.
__kernel __attribute__((reqd_work_group_size(XK_WG, 1, 1)))
void xk_norm(__global const uchar* x, ulong x_off, ulong ld_x,
             __global uchar* y, ulong y_off, ulong ld_y,
             __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,
             __global const uchar* res, ulong res_off, ulong ld_res,
             __global uchar* res_out, ulong ro_off, ulong ld_ro,
             ulong hidden, float eps, int dts, int flags) {
    __local float buf[XK_WG];
    const int dx = dts & 0xff, dy = (dts >> 8) & 0xff, dr = (dts >> 16) & 0xff, dw = (dts >> 24) & 0xff;
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0);
    const ulong n4 = hidden / 4, tail = hidden - n4 * 4;
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    const bool fused = (flags & 4) != 0, al = (flags & 16) != 0;
    const ulong rr = res_off + row * ld_res, ror = ro_off + row * ld_ro;
    // h source for the later passes
    __global const uchar* hp = fused ? (__global const uchar*)res_out : x;
    const ulong hr = fused ? ror : xr;
    const int dh = fused ? dr : dx;

    float s1 = 0.0f, s2 = 0.0f;
    for (ulong c = lid; c < n4; c += XK_WG) {
        float4 h = ld4(x, xr + c * 4, dx, al);
        if (fused) {
            h += ld4(res, rr + c * 4, dr, al);
            st4(res_out, ror + c * 4, dr, h, al);
            h = ld4(res_out, ror + c * 4, dr, al);  // the rounded h
        }
        s1 += h.x + h.y + h.z + h.w;
        s2 += h.x * h.x + h.y * h.y + h.z * h.z + h.w * h.w;
    }
    if ((ulong)lid < tail) {
        const ulong i = n4 * 4 + lid;
        float h = ld1(x, xr + i, dx);
        if (fused) {
            h += ld1(res, rr + i, dr);
            st1(res_out, ror + i, dr, h);
            h = ld1(res_out, ror + i, dr);
        }
        s1 += h;
        s2 += h * h;
    }
    const bool layer = (flags & 8) != 0;
    float mean = 0.0f, rstd;
    if (layer) {
        mean = wg_sum(s1, buf) / (float)hidden;
        float v = 0.0f;  // second pass: centred squares (no cancellation)
        for (ulong c = lid; c < n4; c += XK_WG) {
            const float4 d = ld4(hp, hr + c * 4, dh, al) - mean;
            v += d.x * d.x + d.y * d.y + d.z * d.z + d.w * d.w;
        }
        if ((ulong)lid < tail) {
            const float d = ld1(hp, hr + n4 * 4 + lid, dh) - mean;
            v += d * d;
        }
        rstd = rsqrt(wg_sum(v, buf) / (float)hidden + eps);
    } else {
        rstd = rsqrt(wg_sum(s2, buf) / (float)hidden + eps);
    }
    const bool hw = (flags & 1) != 0, hb = (flags & 2) != 0;
    for (ulong c = lid; c < n4; c += XK_WG) {
        float4 o = (ld4(hp, hr + c * 4, dh, al) - mean) * rstd;
        if (hw) o *= ld4(w, w_off + c * 4, dw, al);
        if (hb) o += ld4(b, b_off + c * 4, dw, al);
        st4(y, yr + c * 4, dy, o, al);
    }
    if ((ulong)lid < tail) {
        const ulong i = n4 * 4 + lid;
        float o = (ld1(hp, hr + i, dh) - mean) * rstd;
        if (hw) o *= ld1(w, w_off + i, dw);
        if (hb) o += ld1(b, b_off + i, dw);
        st1(y, yr + i, dy, o);
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
// global (ceil(inner / 4), rows): each work-item 4 consecutive columns.
__kernel void xk_glu(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                     ulong inner, int dts, int activation, int aligned) {
    const int dx = dts & 0xff, dy = (dts >> 8) & 0xff;
    const bool al = aligned != 0;
    const ulong c = get_global_id(0) * 4, row = get_global_id(1);
    if (c >= inner) return;
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    if (c + 4 <= inner) {
        const float4 g = ld4(x, xr + c, dx, al), u = ld4(x, xr + inner + c, dx, al);
        float4 o;
        if (activation == 4) {
            o = g / (1.0f + exp(-g)) * u;
        } else {
            o = (float4)(act(g.x, activation), act(g.y, activation), act(g.z, activation), act(g.w, activation)) * u;
        }
        st4(y, yr + c, dy, o, al);
    } else {
        for (ulong i = c; i < inner; ++i) st1(y, yr + i, dy, act(ld1(x, xr + i, dx), activation) * ld1(x, xr + inner + i, dx));
    }
}

#endif

#if XK_OP == 0 || XK_OP == 3
// ---- softmax over the last dimension, scale, causal mask ----------------------------------------
// One work-group per row; columns j >= visible are 0. visible = cols, or with causal
// clamp(row + causal_offset + 1, 0, cols).
__kernel __attribute__((reqd_work_group_size(XK_WG, 1, 1)))
void xk_softmax(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off, ulong ld_y,
                ulong cols, float scale, int causal, long causal_offset, int dts, int aligned) {
    __local float buf[XK_WG];
    const int dx = dts & 0xff, dy = (dts >> 8) & 0xff;
    const bool al = aligned != 0;
    const ulong row = get_group_id(0);
    const int lid = get_local_id(0);
    const ulong xr = x_off + row * ld_x, yr = y_off + row * ld_y;
    ulong vis = cols;
    if (causal) {
        const long p = (long)row + causal_offset + 1;
        vis = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
    }
    const ulong n4 = vis / 4, tail = vis - n4 * 4;
    float m = -INFINITY;
    for (ulong c = lid; c < n4; c += XK_WG) {
        const float4 t = ld4(x, xr + c * 4, dx, al);
        m = fmax(m, fmax(fmax(t.x, t.y), fmax(t.z, t.w)));
    }
    if ((ulong)lid < tail) m = fmax(m, ld1(x, xr + n4 * 4 + lid, dx));
    m = wg_max(m, buf) * scale;  // scale > 0: max(scale x) = scale max(x)
    float s = 0.0f;
    for (ulong c = lid; c < n4; c += XK_WG) {
        const float4 e = exp(ld4(x, xr + c * 4, dx, al) * scale - m);
        s += e.x + e.y + e.z + e.w;
    }
    if ((ulong)lid < tail) s += exp(ld1(x, xr + n4 * 4 + lid, dx) * scale - m);
    const float inv = 1.0f / wg_sum(s, buf);
    const ulong c4 = cols / 4;
    for (ulong c = lid; c < c4; c += XK_WG) {
        const ulong j = c * 4;
        float4 o;
        if (j + 4 <= vis) {
            o = exp(ld4(x, xr + j, dx, al) * scale - m) * inv;
        } else {
            o = (float4)(0.0f);
            if (j + 0 < vis) o.x = exp(ld1(x, xr + j + 0, dx) * scale - m) * inv;
            if (j + 1 < vis) o.y = exp(ld1(x, xr + j + 1, dx) * scale - m) * inv;
            if (j + 2 < vis) o.z = exp(ld1(x, xr + j + 2, dx) * scale - m) * inv;
        }
        st4(y, yr + j, dy, o, al);
    }
    const ulong ctail = cols - c4 * 4;
    if ((ulong)lid < ctail) {
        const ulong j = c4 * 4 + lid;
        st1(y, yr + j, dy, j < vis ? exp(ld1(x, xr + j, dx) * scale - m) * inv : 0.0f);
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
#endif
