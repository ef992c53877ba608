// The row kernels (RMSNorm / LayerNorm, softmax) for rows held in registers, written once and
// included by ops.cl once per storage type (no include guard). The includer defines:
//   XT         name suffix (f32, bf16, f16)       RAW      the raw register type of 8 elements
//   LDR(p, i)  8 elements from element i          STR(p, i, r)  store them (i a multiple of 8)
//   CV(r)      RAW -> float8                      PK(v)    float8 -> RAW (rounded to the type)
//   LD1(p, i)  one element as float               NVC      8-element chunks per work-item
//   EPI        chunks of weights loaded together after the reduction (divides NVC)
// (this file #undef's them at its end).
// Preconditions (checked on the host): every tensor of the type, every row base and the row
// length multiples of 8 elements, rows of at most S * NVC chunks, S the work-items of a row (the
// group, or XK_SEG). Item i of a row takes the chunks i, i + S, ...; every load of a row is
// issued before its first use (indices clamped, never branched around).
// Forms (the host picks one per (op, dtype); see ops.cpp):
//   _pre kernels  the norms load the weight (and bias) once, with the first row, and keep them in
//                 registers (else after each row's reduction, EPI chunks at a time: L1 / L2 hits)
//   _split kernel softmax reduces the max, then the sum (two reductions); else both in one (each
//                 item exponentiates against its own max, rescaled at the store)
//   XK_PERSIST=1  (build option) a group loops over the rows g, g + G, ... (G = the number of
//                 groups) and issues the next row's loads before the current row's reduction;
//                 else one row per group
//   XK_WG=n       (build option) the group size known at compile time (reqd_work_group_size)
//   XK_FUSED=0|1, XK_HB=0|1 (build options) norms: the residual / the bias known at compile time
//   XK_REXP=1     (build option) softmax: exponentials recomputed at the store, not held
//   XK_WF=1       (build option) _pre norms: weight / bias held widened (float8), not packed
//   XK_FEPI=1     (build option) norms: y = fma(fma(x, rstd, -mean rstd), w, b) (two operations
//                 per element instead of four; x rstd - mean rstd cancels where x is near the mean
//                 and |mean| >> std: an error of ulp(mean rstd), below a 16-bit ulp for 16-bit data)
//   XK_SEG=s      (build option, a power of two <= 32) s work-items per row, wg / s rows per group
//                 (short rows; reductions within the segment: no barrier with XK_PTX); else the
//                 group is the row's
#define XCAT2(a, b) a##b
#define XCAT(a, b) XCAT2(a, b)

#if XK_OP == 0 || XK_OP == 1
// XK_WF=1: the weights held with the row (_pre) widened once to float8 (more registers, no
// widening per row); else as loaded.
#if XK_WF
#define WTYPE float8
#define WLD(p, i) CV(LDR(p, i))
#define WCV(v) (v)
#else
#define WTYPE RAW
#define WLD(p, i) LDR(p, i)
#define WCV(v) CV(v)
#endif
// RMSNorm / LayerNorm. Arguments as xk_norm plus rows (the number of rows); red: the reductions'
// local memory (XK_RED4 float4 declared in the kernel). RMSNorm: one reduction (sum x^2). LayerNorm: sum d and sum d^2 together,
// d = x - K with K the row's first element (a shift near the data, so sum d^2 / n - mean_d^2 does
// not cancel when the mean is far from 0). With the residual, h = round(x + residual) is stored to
// residual_out (RMSNorm: before the reduction; LayerNorm: after it, since every item reads K
// from the residual, which residual_out may be) and normalised as rounded.
inline void XCAT(rnorm_, XT)(const bool LAYER, const bool PRE, __global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y,
                             ulong y_off, ulong ld_y, __global const uchar* w, ulong w_off, __global const uchar* b,
                             ulong b_off, __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out,
                             ulong ro_off, ulong ld_ro, ulong hidden, float eps, int flags, ulong rows,
                             __local float2* red) {
    const uint lid = get_local_id(0), wg = XK_WG ? XK_WG : get_local_size(0);
    const uint S = XK_SEG ? XK_SEG : wg, sl = XK_SEG ? lid % S : lid;  // items per row, this item's index in its row
    const ulong rpg = wg / S, sub = lid / S;                             // rows per group, this item's row in it
    const uint nc = (uint)(hidden / 8);
    // XK_FUSED / XK_HB >= 0 (build options, the spec form): the residual / bias known at compile
    // time (no registers for an absent residual's rows or bias); else from flags.
    const bool fused = XK_FUSED >= 0 ? XK_FUSED != 0 : (flags & 4) != 0, hw = (flags & 1) != 0;
    const bool hb = XK_HB >= 0 ? XK_HB != 0 : (flags & 2) != 0;
    const float inv_n = 1.0f / (float)hidden;
    const ulong G = (XK_PERSIST ? get_num_groups(0) : 1) * rpg;  // rows from one iteration to the next
    uint cc[NVC];  // clamped element offsets of the chunks
    #pragma unroll
    for (int j = 0; j < NVC; ++j) {
        const uint c = sl + (uint)j * S;
        cc[j] = (c < nc ? c : nc - 1) * 8;
    }
    WTYPE wp[NVC], bp[NVC];  // PRE: held as loaded (RAW) or, XK_WF, widened once (float8)
    if (PRE) {
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            if (hw) wp[j] = WLD(w, w_off + cc[j]);
            if (hb) bp[j] = WLD(b, b_off + cc[j]);
        }
    }
    // Rows base + sub; the loop is uniform over the group (a row past the last is computed on
    // the last row's data, not stored).
    ulong base = get_group_id(0) * rpg;
    ulong lr = base + sub < rows ? base + sub : rows - 1;
    RAW h[NVC], r[NVC];
    float K = 0.0f;
    #pragma unroll
    for (int j = 0; j < NVC; ++j) {
        h[j] = LDR(x, x_off + lr * ld_x + cc[j]);
        if (fused) r[j] = LDR(res, res_off + lr * ld_res + cc[j]);
    }
    if (LAYER) K = LD1(x, x_off + lr * ld_x) + (fused ? LD1(res, res_off + lr * ld_res) : 0.0f);
    int par = 0;
    for (;;) {
        const bool valid = base + sub < rows;
        const ulong nbase = base + G;
        RAW hn[NVC], rn[NVC];
        float Kn = 0.0f;
        ulong nlr = lr;
        if (XK_PERSIST) {  // the next row's loads, issued before this row's reduction
            nlr = nbase + sub < rows ? nbase + sub : rows - 1;
            #pragma unroll
            for (int j = 0; j < NVC; ++j) {
                hn[j] = LDR(x, x_off + nlr * ld_x + cc[j]);
                if (fused) rn[j] = LDR(res, res_off + nlr * ld_res + cc[j]);
            }
            if (LAYER) Kn = LD1(x, x_off + nlr * ld_x) + (fused ? LD1(res, res_off + nlr * ld_res) : 0.0f);
        }
        const ulong yr = y_off + lr * ld_y, ror = ro_off + lr * ld_ro;
        if (fused) {
            #pragma unroll
            for (int j = 0; j < NVC; ++j) {
                h[j] = PK(CV(h[j]) + CV(r[j]));
                if (!LAYER && valid && sl + (uint)j * S < nc) STR(res_out, ror + (sl + (uint)j * S) * 8, h[j]);
            }
        }
        float8 a1 = (float8)(0.0f), a2 = (float8)(0.0f);  // per lane: one add / fma per element
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            const float8 d = sl + (uint)j * S < nc ? CV(h[j]) - K : (float8)(0.0f);
            if (LAYER) a1 += d;
            a2 = fma(d, d, a2);
        }
        const float2 s = (float2)(LAYER ? hsum8(a1) : 0.0f, hsum8(a2));
        float mean = 0.0f, rstd;
        if (LAYER) {
            const float2 t = red_sum2(s, red, par) * inv_n;
            mean = K + t.x;
            rstd = rsqrt(fmax(t.y - t.x * t.x, 0.0f) + eps);
        } else {
            rstd = rsqrt(red_sum(s.y, red, par) * inv_n + eps);
        }
        const float nmr = -mean * rstd;
        #pragma unroll
        for (int j0 = 0; j0 < NVC; j0 += EPI) {
            float8 wr[EPI], br[EPI];  // widened
            #pragma unroll
            for (int j = 0; j < EPI; ++j) {
                if (hw) wr[j] = PRE ? WCV(wp[j0 + j]) : CV(LDR(w, w_off + cc[j0 + j]));
                if (hb) br[j] = PRE ? WCV(bp[j0 + j]) : CV(LDR(b, b_off + cc[j0 + j]));
            }
            #pragma unroll
            for (int j = 0; j < EPI; ++j) {
                const uint c = sl + (uint)(j0 + j) * S;
                if (valid && c < nc) {
                    if (LAYER && fused) STR(res_out, ror + c * 8, h[j0 + j]);
                    float8 o;
                    if (XK_FEPI) {  // two fmas per element: x rstd - mean rstd, then w, b
                        o = fma(CV(h[j0 + j]), (float8)(rstd), (float8)(nmr));
                        if (hw && hb) o = fma(o, wr[j], br[j]);
                        else if (hw) o *= wr[j];
                        else if (hb) o += br[j];
                    } else {
                        o = (CV(h[j0 + j]) - mean) * rstd;
                        if (hw) o *= wr[j];
                        if (hb) o += br[j];
                    }
                    STR(y, yr + c * 8, PK(o));
                }
            }
        }
        base = nbase;
        if (!XK_PERSIST || base >= rows) break;
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            h[j] = hn[j];
            if (fused) r[j] = rn[j];
        }
        K = Kn;
        lr = nlr;
        par ^= 1;
    }
}
#define XK_RNORM_KERNEL(NAME, LAYER, PRE)                                                                                \
    XK_WG_ATTR __kernel void NAME(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off,      \
                       ulong ld_y, __global const uchar* w, ulong w_off, __global const uchar* b, ulong b_off,           \
                       __global const uchar* res, ulong res_off, ulong ld_res, __global uchar* res_out, ulong ro_off,    \
                       ulong ld_ro, ulong hidden, float eps, int dts, int flags, ulong rows) {                           \
        __local float4 red4[XK_RED4];                                                                                    \
        XCAT(rnorm_, XT)(LAYER, PRE, x, x_off, ld_x, y, y_off, ld_y, w, w_off, b, b_off, res, res_off, ld_res, res_out,    \
                         ro_off, ld_ro, hidden, eps, flags, rows, (__local float2*)red4);                                \
    }
XK_RNORM_KERNEL(XCAT(xk_rnorm_rms_, XT), false, false)
XK_RNORM_KERNEL(XCAT(xk_rnorm_ln_, XT), true, false)
XK_RNORM_KERNEL(XCAT(xk_rnorm_rms_pre_, XT), false, true)
XK_RNORM_KERNEL(XCAT(xk_rnorm_ln_pre_, XT), true, true)
#undef XK_RNORM_KERNEL
#undef WTYPE
#undef WLD
#undef WCV
#endif

#if XK_OP == 0 || XK_OP == 3
// Softmax. Arguments as xk_softmax plus rows. Columns j >= visible are 0 (visible = cols,
// or with causal clamp(row + causal_offset + 1, 0, cols)); a row that sees nothing is all 0.
// exp(x scale - m) as exp2(x (scale log2 e) - m'), m' the max in that domain.
inline void XCAT(rsoftmax_, XT)(const bool SPLIT, __global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y,
                                ulong y_off, ulong ld_y, ulong cols, float scale, int causal, long causal_offset,
                                ulong rows, __local float2* red) {
    const uint lid = get_local_id(0), wg = XK_WG ? XK_WG : get_local_size(0);
    const uint S = XK_SEG ? XK_SEG : wg, sl = XK_SEG ? lid % S : lid;
    const ulong rpg = wg / S, sub = lid / S;
    const uint nc = (uint)(cols / 8);
    const ulong G = (XK_PERSIST ? get_num_groups(0) : 1) * rpg;
    const float sl2 = scale * M_LOG2E_F;
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    ulong base = get_group_id(0) * rpg;
    ulong lr = base + sub < rows ? base + sub : rows - 1;
    ulong vis = cols;
    if (causal) {
        const long p = (long)lr + causal_offset + 1;
        vis = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
    }
    RAW r[NVC];
    {
        const uint nvis = (uint)((vis + 7) / 8);
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            const uint c = sl + (uint)j * S;
            r[j] = LDR(x, x_off + lr * ld_x + (c < nvis ? c : 0) * 8);  // chunks past the visible ones: not used
        }
    }
    int par = 0;
    for (;;) {
        const bool valid = base + sub < rows;
        const ulong nbase = base + G;
        ulong nvs = cols, nlr = lr;
        RAW rn[NVC];
        if (XK_PERSIST) {
            nlr = nbase + sub < rows ? nbase + sub : rows - 1;
            if (causal) {
                const long p = (long)nlr + causal_offset + 1;
                nvs = p <= 0 ? 0 : ((ulong)p < cols ? (ulong)p : cols);
            }
            const uint nnv = (uint)((nvs + 7) / 8);
            #pragma unroll
            for (int j = 0; j < NVC; ++j) {
                const uint c = sl + (uint)j * S;
                rn[j] = LDR(x, x_off + nlr * ld_x + (c < nnv ? c : 0) * 8);
            }
        }
        const uint nvis = (uint)((vis + 7) / 8);
        // max of the visible raw values (scale > 0: the max of x sl2 is sl2 times the max of x)
        float8 mx8 = (float8)(-INFINITY);
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            const uint c = sl + (uint)j * S;
            if (c < nvis) {
                float8 t = CV(r[j]);
                const long nv = (long)vis - (long)c * 8;  // visible lanes of this chunk (>= 1)
                if (nv < 8) t = select((float8)(-INFINITY), t, lane < (int8)((int)nv));
                mx8 = fmax(mx8, t);
            }
        }
        const float mx = hmax8(mx8);
        float m = mx * sl2;
        if (SPLIT) m = red_max(m, red, 0);  // (split: halves 0 and 1 for the max and the sum)
        // XK_REXP=1: the exponentials recomputed at the store (the same expression, the same
        // values) instead of held in registers (8 floats per chunk beside the packed row).
        float8 v[XK_REXP ? 1 : NVC], sacc = (float8)(0.0f);
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            const uint c = sl + (uint)j * S;
            float8 e = (float8)(0.0f);
            if (c < nvis && m != -INFINITY) {
                e = exp2(CV(r[j]) * sl2 - m);
                const long nv = (long)vis - (long)c * 8;
                if (nv < 8) e = select((float8)(0.0f), e, lane < (int8)((int)nv));
            }
            if (!XK_REXP) v[j] = e;
            sacc += e;
        }
        const float s = hsum8(sacc);
        float f;
        if (SPLIT) {
            const float S2 = red_sum(s, red, 1);
            f = m == -INFINITY ? 0.0f : 1.0f / S2;
        } else {
            const float2 ms = red_maxsum(m, s, red, par);
            f = m == -INFINITY ? 0.0f : exp2(m - ms.x) / ms.y;
        }
        const ulong yr = y_off + lr * ld_y;
        #pragma unroll
        for (int j = 0; j < NVC; ++j) {
            const uint c = sl + (uint)j * S;
            if (XK_REXP) {
                if (valid && c < nc) {
                    float8 e = (float8)(0.0f);
                    if (c < nvis && m != -INFINITY) {
                        e = exp2(CV(r[j]) * sl2 - m);
                        const long nv = (long)vis - (long)c * 8;
                        if (nv < 8) e = select((float8)(0.0f), e, lane < (int8)((int)nv));
                    }
                    STR(y, yr + c * 8, PK(e * f));
                }
            } else if (valid && c < nc) {
                STR(y, yr + c * 8, PK(c < nvis ? v[j] * f : (float8)(0.0f)));
            }
        }
        base = nbase;
        if (!XK_PERSIST || base >= rows) break;
        #pragma unroll
        for (int j = 0; j < NVC; ++j) r[j] = rn[j];
        vis = nvs;
        lr = nlr;
        par ^= 1;
    }
}
#define XK_RSOFTMAX_KERNEL(NAME, SPLIT)                                                                                  \
    XK_WG_ATTR __kernel void NAME(__global const uchar* x, ulong x_off, ulong ld_x, __global uchar* y, ulong y_off,      \
                       ulong ld_y, ulong cols, float scale, int causal, long causal_offset, int dts, int aligned,        \
                       ulong rows) {                                                                                     \
        __local float4 red4[XK_RED4];                                                                                    \
        XCAT(rsoftmax_, XT)(SPLIT, x, x_off, ld_x, y, y_off, ld_y, cols, scale, causal, causal_offset, rows,             \
                            (__local float2*)red4);                                                                      \
    }
XK_RSOFTMAX_KERNEL(XCAT(xk_rsoftmax_, XT), false)
XK_RSOFTMAX_KERNEL(XCAT(xk_rsoftmax_split_, XT), true)
#undef XK_RSOFTMAX_KERNEL
#endif

#undef XT
#undef RAW
#undef LDR
#undef STR
#undef CV
#undef PK
#undef LD1
#undef NVC
#undef EPI
