// VDPBF16PS decode (dpbf16:bf16, tasks of < 16 rows over a bf16 cache, head_dim a multiple of 32
// up to 256). Included inside attn_amx.cpp's target-pragma region (avx512bf16), in its anonymous
// namespace, after attn_exp512.hpp.
//
// The intr:avx512 decode (attn_simd.hpp) widens every bf16 K / V element to fp32 and spends
// 2 x 4 x 128 FP32 FMAs per key and GQA group of 4 rows (~89 cycles a key and kv head on Zen 4
// measured, ~20 GB/s of K + V at 1 thread: its compute rate). Here both products take
// VDPBF16PS, 32 multiply-adds an instruction at the FMA's issue rate on Zen 4, and nothing is
// widened:
//   q:      divided by the scale again and rounded to bf16 once per task (bf16 queries come back
//           exactly, as in amx:bf16); the scale (x log2 e) is applied to the f32 scores;
//   scores: per 4 keys and up to 4 rows, per 32 elements of head_dim one VDPBF16PS of the q
//           row with each key row as it lies in the cache (16 independent chains; 2 x 8 for
//           <= 2 rows), each row's 4 vectors folded by a shuffle tree (as attn_simd.hpp);
//   softmax: once per chunk of 256 keys and row, in log2 units (attn_exp2_512), p rounded to
//           bf16 (l sums the unrounded p, as amx:bf16);
//   P.V:    per pair of keys, the two V rows interleaved 16-bit-wise (VPUNPCKL/HWD: 2
//           instructions per 32 values of both keys) and one VDPBF16PS per 16 values and row
//           with the pair (p_j, p_j+1) broadcast; acc kept per 32 values in that interleaved
//           order during the task, natural at its end.
//   P.V runs tile by tile (per tile the passes over head_dim, acc loaded / stored around each):
//           a tile's V rows are read whole while fresh (passes over the whole chunk, as
//           attn_simd.hpp's, read each row's lines in two sweeps: slower DRAM stream on Zen 4).
// Prefetch: the score loop the K rows kDpdKFar tiles ahead, the P.V loop the V rows kDpdVFar keys
// ahead (PREFETCHT1, into L2), both the next tile's rows (PREFETCHT0, into L1).
// Roundings: those of amx:bf16 (docs/attention.md accuracy); the tests run it against the double
// reference (create_attention_dpbf16(kd, tile_acc, /*dp_decode=*/1)).

// The rows of the tile of 16 keys from j0 (a tile never crosses a block of a paged cache).
inline void dpd_tile_ptrs(const AttnKvSource& kv, const uint16_t* kbase, const uint16_t* vbase, int64_t j0,
                          const uint16_t*& kt, const uint16_t*& vt) {
    if (kv.blocks) {
        const int64_t boff = static_cast<int64_t>(kv.blocks[j0 / kv.block_size]) * kv.block_elems;
        kt = kbase + boff + (j0 % kv.block_size) * kv.k_stride;
        vt = vbase + boff + (j0 % kv.block_size) * kv.v_stride;
    } else {
        kt = kbase + j0 * kv.k_stride;
        vt = vbase + j0 * kv.v_stride;
    }
}

inline __m512 dpd_reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    return _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
}

// u[g*64 ...] (g < 4: reduce4 of keys 4g..4g+3) -> the 16 sums in key order.
inline __m512 dpd_reduce_final(const float* u) {
    const __m512 u0 = _mm512_loadu_ps(u), u1 = _mm512_loadu_ps(u + 64), u2 = _mm512_loadu_ps(u + 128),
                 u3 = _mm512_loadu_ps(u + 192);
    const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// NB q rows (bf16, row stride hd) x the 4 key rows kp: per row the 4 dot vectors folded into u + i*16.
template <int NB, int NK>
inline __attribute__((always_inline)) void dpd_dots4(const uint16_t* qb, const uint16_t* const* kp, float* u) {
    constexpr int64_t hd = 32 * NK;
    constexpr bool dual = NB <= 2;
    __m512 a[NB][4], b[NB][4];
    for (int i = 0; i < NB; ++i)
        for (int k = 0; k < 4; ++k) a[i][k] = b[i][k] = _mm512_setzero_ps();
    for (int c = 0; c < NK; ++c) {
        __m512bh kv[4];
        for (int k = 0; k < 4; ++k) kv[k] = (__m512bh)_mm512_loadu_si512(kp[k] + c * 32);
        for (int i = 0; i < NB; ++i) {
            const __m512bh qv = (__m512bh)_mm512_loadu_si512(qb + i * hd + c * 32);
            for (int k = 0; k < 4; ++k) {
                if (dual && (c & 1))
                    b[i][k] = _mm512_dpbf16_ps(b[i][k], qv, kv[k]);
                else
                    a[i][k] = _mm512_dpbf16_ps(a[i][k], qv, kv[k]);
            }
        }
    }
    for (int i = 0; i < NB; ++i) {
        if constexpr (dual)
            for (int k = 0; k < 4; ++k) a[i][k] = _mm512_add_ps(a[i][k], b[i][k]);
        _mm512_storeu_ps(u + i * 16, dpd_reduce4(a[i][0], a[i][1], a[i][2], a[i][3]));
    }
}

// The 16 scores x = q.k * sl2 of NB rows (qb) against the tile's keys kt (n of them, stride ks;
// the others repeat the last key: masked later) to out + i*os; the K rows of pk (pn rows) prefetched
// into L2, those of pk2 (pn2 rows) into L1.
template <int NB, int NK>
void dpd_scores_tile(const uint16_t* qb, const uint16_t* kt, int64_t ks, int64_t n, float* U, float* out, int64_t os,
                     __m512 sl2, const uint16_t* pk, int64_t pn, const uint16_t* pk2, int64_t pn2) {
    for (int g = 0; g < 4; ++g) {
        if (pk)
            for (int64_t jj = 4 * g; jj < 4 * g + 4 && jj < pn; ++jj)
                for (int64_t b = 0; b < NK * 64; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(pk + jj * ks) + b, 0, 2);
        if (pk2)
            for (int64_t jj = 4 * g; jj < 4 * g + 4 && jj < pn2; ++jj)
                for (int64_t b = 0; b < NK * 64; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(pk2 + jj * ks) + b, 0, 3);
        const uint16_t* kp[4];
        for (int k = 0; k < 4; ++k) kp[k] = kt + (4 * g + k < n ? 4 * g + k : n - 1) * ks;
        dpd_dots4<NB, NK>(qb, kp, U + g * 64);
    }
    for (int i = 0; i < NB; ++i) _mm512_storeu_ps(out + i * os, _mm512_mul_ps(dpd_reduce_final(U + i * 16), sl2));
}

// acc[NB rows][CP x 32 values from d0] (interleaved order) += P.V over one tile (V rows vt, n
// keys; P rows (bf16, key pairs) at Pt + i*ps); the V rows of vpf (npf) prefetched into L2, of
// vpf2 (npf2) into L1 (this pass's lines).
template <int NB, int CP, int NK>
void dpd_pv(float* acc, const uint16_t* Pt, int64_t ps, const uint16_t* vt, int64_t vs, int64_t n, int d0,
            const uint16_t* vpf, int64_t npf, const uint16_t* vpf2, int64_t npf2) {
    constexpr int64_t hd = 32 * NK;
    __m512 a[NB][2 * CP];
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < 2 * CP; ++c) a[i][c] = _mm512_loadu_ps(acc + i * hd + d0 + c * 16);
    if (vpf) vpf += d0; else npf = 0;  // (no pointer arithmetic on a null prefetch source)
    if (vpf2) vpf2 += d0; else npf2 = 0;
    {
        for (int64_t jj = 0; jj < n; jj += 2) {
            for (int64_t r = jj; r < jj + 2 && r < npf; ++r)
                for (int b = 0; b < CP * 64; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(vpf + r * vs) + b, 0, 2);
            for (int64_t r = jj; r < jj + 2 && r < npf2; ++r)
                for (int b = 0; b < CP * 64; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(vpf2 + r * vs) + b, 0, 3);
            const uint16_t* r0 = vt + jj * vs + d0;
            const uint16_t* r1 = jj + 1 < n ? r0 + vs : r0;  // (odd end: p of the pair's second key is 0)
            __m512i lo[CP], hi[CP];
            for (int c = 0; c < CP; ++c) {
                const __m512i x0 = _mm512_loadu_si512(r0 + c * 32), x1 = _mm512_loadu_si512(r1 + c * 32);
                lo[c] = _mm512_unpacklo_epi16(x0, x1);
                hi[c] = _mm512_unpackhi_epi16(x0, x1);
            }
            for (int i = 0; i < NB; ++i) {
                int32_t pair;
                std::memcpy(&pair, Pt + i * ps + jj, 4);
                const __m512bh pp = (__m512bh)_mm512_set1_epi32(pair);
                for (int c = 0; c < CP; ++c) {
                    a[i][2 * c] = _mm512_dpbf16_ps(a[i][2 * c], pp, (__m512bh)lo[c]);
                    a[i][2 * c + 1] = _mm512_dpbf16_ps(a[i][2 * c + 1], pp, (__m512bh)hi[c]);
                }
            }
        }
    }
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < 2 * CP; ++c) _mm512_storeu_ps(acc + i * hd + d0 + c * 16, a[i][c]);
}

// Prefetch distances of the VDPBF16PS decode (Zen 4, bench_attention bf16 decode b 1 8k / 32k at 1
// thread, best of 8 CPU times per setting on the loaded dev host, one sweep: the intr:avx512 form-2
// distances (K 2 tiles, V a chunk ahead, T1) 19-21 GB/s; + the next tile into L1 22-25; K 4 tiles /
// V 128 keys + the next tile 22-27, the best or tied in each row; the rows of docs/attention.md
// measured afterwards: 20-23).
constexpr int64_t kDpdKFar = 4, kDpdVFar = 128;

template <int NK>
void attn_decode_dp(const AttnTask& t, float* m, float* l, float* acc) {
    constexpr int64_t hd = 32 * NK, CH = kAttnDecodeChunk;
    const int64_t R = t.tokens * t.group;
    const float ninf = -__builtin_inff();
    // Scratch: S [R x CH] f32 (x = s * scale * log2 e), P [R x CH] bf16, q [R x hd] bf16, U, corr.
    float* S = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(t.scratch) + 63) & ~uintptr_t(63));
    uint16_t* P = reinterpret_cast<uint16_t*>(S + R * CH);
    uint16_t* qb = P + R * CH;
    float* U = reinterpret_cast<float*>(qb + R * hd);
    float* corr = U + 4 * 64;
    // q: divide the scale out (bf16 queries exact again) unless it is extreme (as amx:bf16).
    const float as = std::fabs(t.scale);
    const bool unscale = as >= 0x1p-24f && as <= 0x1p24f;
    const __m512 qmul = _mm512_set1_ps(unscale ? 1.0f / t.scale : 1.0f);
    const __m512 sl2 = _mm512_set1_ps((unscale ? t.scale : 1.0f) * kLog2e);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < NK; ++c) to_bf16_32(t.q + r * hd + c * 32, qmul, qb + r * hd + c * 32);
    attn_state_reset(R, hd, m, l, acc);  // (m in log2 units until the end)
    int64_t lim_min, lim_max;
    attn_limit_range(t, lim_min, lim_max);
    const int64_t jmax = t.j_end < lim_max ? t.j_end : lim_max;
    const uint16_t* kbase = static_cast<const uint16_t*>(t.kv.k);
    const uint16_t* vbase = static_cast<const uint16_t*>(t.kv.v);
    const int64_t ks = t.kv.k_stride;
    // Prefetch distances (XK_ATTN_PF=0: none): the K rows kDpdKFar tiles and the V rows kDpdVFar
    // keys ahead into L2 (PREFETCHT1), both the next tile's rows into L1 (PREFETCHT0).
    const bool pf_on = attn_prefetch_tiles() > 0;
    const int64_t pf_tiles = pf_on ? kDpdKFar : 0, near = pf_on ? 1 : 0, vfar = kDpdVFar;
    for (int64_t c0 = t.j_begin; c0 < jmax; c0 += CH) {
        const int64_t ce = jmax - c0 < CH ? jmax : c0 + CH;
        // Phase 1: the chunk's scores.
        for (int64_t j0 = c0; j0 < ce; j0 += 16) {
            const int64_t n = ce - j0 < 16 ? ce - j0 : 16;
            const uint16_t* kt;
            const uint16_t* vt;
            dpd_tile_ptrs(t.kv, kbase, vbase, j0, kt, vt);
            const uint16_t* pk = nullptr;
            int64_t pn = 0;
            const uint16_t* pk2 = nullptr;
            int64_t pn2 = 0;
            if (near > 0 && j0 + 16 * near < jmax) {
                const uint16_t* pv;
                dpd_tile_ptrs(t.kv, kbase, vbase, j0 + 16 * near, pk2, pv);
                pn2 = jmax - (j0 + 16 * near) < 16 ? jmax - (j0 + 16 * near) : 16;
            }
            const int64_t jp = j0 + 16 * pf_tiles;
            if (pf_tiles > 0 && jp < jmax) {
                const uint16_t* pv;
                dpd_tile_ptrs(t.kv, kbase, vbase, jp, pk, pv);
                pn = jmax - jp < 16 ? jmax - jp : 16;
            }
            for (int64_t rb = 0; rb < R; rb += 4) {
                const int64_t nb = R - rb < 4 ? R - rb : 4;
                const uint16_t* q = qb + rb * hd;
                float* so = S + rb * CH + (j0 - c0);
                const uint16_t* p = rb ? nullptr : pk;  // (the first row block issues them)
                const uint16_t* p2 = rb ? nullptr : pk2;
                switch (nb) {
                    case 1: dpd_scores_tile<1, NK>(q, kt, ks, n, U, so, CH, sl2, p, pn, p2, pn2); break;
                    case 2: dpd_scores_tile<2, NK>(q, kt, ks, n, U, so, CH, sl2, p, pn, p2, pn2); break;
                    case 3: dpd_scores_tile<3, NK>(q, kt, ks, n, U, so, CH, sl2, p, pn, p2, pn2); break;
                    default: dpd_scores_tile<4, NK>(q, kt, ks, n, U, so, CH, sl2, p, pn, p2, pn2); break;
                }
            }
            attn_mask_tile(t, R, j0, n, lim_min, S + (j0 - c0), CH, kLog2e);  // (natural mask -> log2 units)
        }
        // Phase 2: online softmax per row (log2 units), p rounded to bf16 into P.
        const int64_t nvec = (ce - c0 + 15) / 16;
        bool rescale = false;
        for (int64_t r = 0; r < R; ++r) {
            float* s = S + r * CH;
            uint16_t* pr = P + r * CH;
            __m512 mx = _mm512_set1_ps(ninf);
            for (int64_t k = 0; k < nvec; ++k) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + k * 16));
            const float mt = _mm512_reduce_max_ps(mx);
            const float mo = m[r];
            const float mn = mo > mt ? mo : mt;
            if (mn == ninf) {  // nothing visible yet
                for (int64_t k = 0; k < nvec; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + k * 16), _mm256_setzero_si256());
                corr[r] = 1.0f;
                continue;
            }
            const float c = mo == ninf ? 0.0f : (mo == mn ? 1.0f : std::exp2(mo - mn));
            __m512 sum = _mm512_setzero_ps();
            const __m512 mnv = _mm512_set1_ps(mn);
            for (int64_t k = 0; k < nvec; ++k) {
                const __m512 sv = _mm512_loadu_ps(s + k * 16);
                const __mmask16 keep = _mm512_cmp_ps_mask(sv, _mm512_set1_ps(ninf), _CMP_NEQ_OQ);
                const __m512 p = attn_exp2_512(keep, _mm512_sub_ps(sv, mnv));
                sum = _mm512_add_ps(sum, p);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(pr + k * 16), (__m256i)_mm512_cvtneps_pbh(p));
            }
            l[r] = l[r] * c + _mm512_reduce_add_ps(sum);
            corr[r] = c;
            m[r] = mn;
            rescale |= c != 1.0f;
        }
        if (rescale)
            for (int64_t r = 0; r < R; ++r)
                if (corr[r] != 1.0f) {
                    const __m512 cr = _mm512_set1_ps(corr[r]);
                    for (int64_t k = 0; k < hd / 16; ++k)
                        _mm512_storeu_ps(acc + r * hd + k * 16, _mm512_mul_ps(_mm512_loadu_ps(acc + r * hd + k * 16), cr));
                }
        // Phase 3: acc += P.V over the chunk, tile by tile, 64 values of head_dim a pass (the first
        // row block prefetches the V rows of the tile a chunk ahead).
        for (int64_t jt = c0; jt < ce; jt += 16) {
            const int64_t n = ce - jt < 16 ? ce - jt : 16;
            const uint16_t* kt;
            const uint16_t* vt;
            dpd_tile_ptrs(t.kv, kbase, vbase, jt, kt, vt);
            const uint16_t* vpf = nullptr;
            int64_t npf = 0;
            if (pf_on && jt + vfar < jmax) {
                const uint16_t* kd;
                dpd_tile_ptrs(t.kv, kbase, vbase, jt + vfar, kd, vpf);
                npf = jmax - (jt + vfar) < 16 ? jmax - (jt + vfar) : 16;
            }
            const uint16_t* vpf2 = nullptr;
            int64_t npf2 = 0;
            if (near > 0 && jt + 16 * near < jmax) {
                const uint16_t* kd;
                dpd_tile_ptrs(t.kv, kbase, vbase, jt + 16 * near, kd, vpf2);
                npf2 = jmax - (jt + 16 * near) < 16 ? jmax - (jt + 16 * near) : 16;
            }
            for (int d0 = 0; d0 < NK * 32; d0 += 64) {
                const bool two = d0 + 64 <= NK * 32;
                for (int64_t rb = 0; rb < R; rb += 4) {
                    const int64_t nb = R - rb < 4 ? R - rb : 4;
                    float* ab = acc + rb * hd;
                    const uint16_t* Pt = P + rb * CH + (jt - c0);
                    const uint16_t* pv = rb ? nullptr : vpf;
                    const uint16_t* pv2 = rb ? nullptr : vpf2;
#define XK_DPD_PV(k)                                                                              \
    do {                                                                                          \
        if (two)                                                                                  \
            dpd_pv<k, 2, NK>(ab, Pt, CH, vt, t.kv.v_stride, n, d0, pv, npf, pv2, npf2);                      \
        else                                                                                      \
            dpd_pv<k, 1, NK>(ab, Pt, CH, vt, t.kv.v_stride, n, d0, pv, npf, pv2, npf2);                      \
    } while (0)
                    switch (nb) {
                        case 1: XK_DPD_PV(1); break;
                        case 2: XK_DPD_PV(2); break;
                        case 3: XK_DPD_PV(3); break;
                        default: XK_DPD_PV(4); break;
                    }
#undef XK_DPD_PV
                }
            }
        }
    }
    // acc back to the natural order (per 32 values: lo lane L = values 8L..8L+3, hi = 8L+4..8L+7),
    // m back to natural units.
    float tmp[32];
    for (int64_t r = 0; r < R; ++r) {
        float* a = acc + r * hd;
        for (int64_t c = 0; c < NK; ++c) {
            std::memcpy(tmp, a + c * 32, sizeof tmp);
            for (int L = 0; L < 4; ++L)
                for (int e = 0; e < 4; ++e) {
                    a[c * 32 + 8 * L + e] = tmp[4 * L + e];
                    a[c * 32 + 8 * L + 4 + e] = tmp[16 + 4 * L + e];
                }
        }
        if (m[r] != ninf) m[r] *= kLn2;
    }
}

void run_dp_decode(const AttnTask& t, float* m, float* l, float* acc) {
    switch (t.head_dim / 32) {
#define XK_DP_CASE(nc)                                                                    \
    case nc:                                                                              \
        if constexpr (attn_hd_compiled(nc * 32)) return attn_decode_dp<nc>(t, m, l, acc); \
        break;
        XK_DP_CASE(1) XK_DP_CASE(2) XK_DP_CASE(3) XK_DP_CASE(4) XK_DP_CASE(5) XK_DP_CASE(6) XK_DP_CASE(7) XK_DP_CASE(8)
#undef XK_DP_CASE
    }
    __builtin_trap();
}
