// Sequential-order f32 decode (AVX-512, tasks of < 16 rows over an f32 cache, head_dim a multiple
// of 16 up to 128). Included inside attn_avx512.cpp's target-pragma region, in its anonymous
// namespace, after attn_simd.hpp (V512, attn_dots4's reduce4, attn_tile_ptrs).
//
// The same products as attn_simd.hpp's decode (fp32 FMA, one online-softmax step per chunk), in an
// order the hardware prefetchers follow without software prefetch: every load of a K or V row
// reads it whole and in address order, rows in key order, K of a chunk as one sweep and then V.
//   scores: per tile of 16 keys and pair of q rows (the pair's q in registers), each of 4 keys'
//           rows read line by line (one FMA chain per row and key), the 4 keys' vectors folded by
//           reduce4; the second pair of rows re-reads the tile from L1;
//   P.V:    per tile, per pair of q rows, acc for the whole head_dim in registers (2 x 8 vectors),
//           each V row read whole; the other pairs re-read the tile from L1;
//   chunks: kAttnSeqChunk keys (2048): K streams through 2048 keys, then V, so each stream restarts
//           once per 2048 keys instead of once per 256.
// No software prefetch: on Zen 4 (dev host, 1 thread, CPU time, interleaved in one process with
// the intr:avx512 form-2 decode, 2k / 8k / 32k tokens, b 1 and 8) the hardware prefetchers alone
// stream this order at 17.4-21.5 GB/s against 14.5-17.6 for the other decode with its prefetch;
// prefetching this order (T1 far, T0 next tile, or both) made it slower (13-17), prefetching only
// the first tiles of each sweep no faster. On the device Xeon it is slower than form 1 at 8k / 32k
// tokens (docs/attention.md): the default is AMD only (attn_decode_seq).

template <int NB, int NC>
inline __attribute__((always_inline)) void seq_dots4(const float* qb, const float* const* kp, float* u) {
    constexpr int64_t hd = NC * 16;
    __m512 qv[NB][NC];
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < NC; ++c) qv[i][c] = _mm512_loadu_ps(qb + i * hd + c * 16);
    __m512 a[NB][4];
    for (int i = 0; i < NB; ++i)
        for (int k = 0; k < 4; ++k) a[i][k] = _mm512_setzero_ps();
    for (int k = 0; k < 4; ++k)
        for (int c = 0; c < NC; ++c) {
            const __m512 kv = _mm512_loadu_ps(kp[k] + c * 16);
            for (int i = 0; i < NB; ++i) a[i][k] = _mm512_fmadd_ps(qv[i][c], kv, a[i][k]);
        }
    for (int i = 0; i < NB; ++i) _mm512_storeu_ps(u + i * 16, V512::reduce4(a[i][0], a[i][1], a[i][2], a[i][3]));
}

// The 16 scores of NB (<= 2) rows qb against the tile's keys kt (n; the others repeat the last key
// and are masked later) to out + i*os.
template <int NB, int NC>
void seq_scores_tile(const float* qb, const float* kt, int64_t ks, int64_t n, float* U, float* out, int64_t os) {
    for (int g = 0; g < 4; ++g) {
        const float* kp[4];
        for (int k = 0; k < 4; ++k) kp[k] = kt + (4 * g + k < n ? 4 * g + k : n - 1) * ks;
        seq_dots4<NB, NC>(qb, kp, U + g * 64);
    }
    for (int i = 0; i < NB; ++i) V512::reduce_final(U + i * 16, 64, out + i * os);
}

// acc[NB rows x hd] += P.V over one tile (n keys, V rows vt), P row i at Pt + i*ps.
template <int NB, int NC>
void seq_pv_tile(float* acc, const float* Pt, int64_t ps, const float* vt, int64_t vs, int64_t n) {
    constexpr int64_t hd = NC * 16;
    __m512 a[NB][NC];
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < NC; ++c) a[i][c] = _mm512_loadu_ps(acc + i * hd + c * 16);
    for (int64_t jj = 0; jj < n; ++jj) {
        __m512 vr[NC];
        for (int c = 0; c < NC; ++c) vr[c] = _mm512_loadu_ps(vt + jj * vs + c * 16);
        for (int i = 0; i < NB; ++i) {
            const __m512 p = _mm512_set1_ps(Pt[i * ps + jj]);
            for (int c = 0; c < NC; ++c) a[i][c] = _mm512_fmadd_ps(p, vr[c], a[i][c]);
        }
    }
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < NC; ++c) _mm512_storeu_ps(acc + i * hd + c * 16, a[i][c]);
}

template <int NC>
void attn_decode_seq_task(const AttnTask& t, float* m, float* l, float* acc) {
    constexpr int64_t hd = NC * 16, CH = kAttnSeqChunk;
    const int64_t R = t.tokens * t.group;
    float* S = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(t.scratch) + 63) & ~uintptr_t(63));  // [R x CH]
    float* U = S + R * CH;  // [2 rows x 4 key groups x 16]
    float* corr = U + 4 * 64;
    attn_state_reset(R, hd, m, l, acc);
    int64_t lim_min, lim_max;
    attn_limit_range(t, lim_min, lim_max);
    const int64_t jmax = t.j_end < lim_max ? t.j_end : lim_max;
    const float* kbase = static_cast<const float*>(t.kv.k);
    const float* vbase = static_cast<const float*>(t.kv.v);
    const int64_t ks = t.kv.k_stride, vs = t.kv.v_stride;
    for (int64_t c0 = t.j_begin; c0 < jmax; c0 += CH) {
        const int64_t ce = jmax - c0 < CH ? jmax : c0 + CH;
        // Scores of the chunk, S[r*CH + j - c0] (masked lanes -inf).
        for (int64_t j0 = c0; j0 < ce; j0 += 16) {
            const int64_t n = ce - j0 < 16 ? ce - j0 : 16;
            const float* kt;
            const float* vt;
            attn_tile_ptrs(t.kv, kbase, vbase, j0, kt, vt);
            for (int64_t rb = 0; rb < R; rb += 2) {
                if (R - rb >= 2)
                    seq_scores_tile<2, NC>(t.q + rb * hd, kt, ks, n, U, S + rb * CH + (j0 - c0), CH);
                else
                    seq_scores_tile<1, NC>(t.q + rb * hd, kt, ks, n, U, S + rb * CH + (j0 - c0), CH);
            }
            attn_mask_tile(t, R, j0, n, lim_min, S + (j0 - c0), CH);
        }
        // Online softmax once per chunk (attn_simd.hpp's, zmm).
        attn_softmax_chunk<V512>(R, ce - c0, S, CH, hd, m, l, corr, acc);
        // acc += P.V, tile by tile.
        for (int64_t jt = c0; jt < ce; jt += 16) {
            const int64_t n = ce - jt < 16 ? ce - jt : 16;
            const float* kt;
            const float* vt;
            attn_tile_ptrs(t.kv, kbase, vbase, jt, kt, vt);
            for (int64_t rb = 0; rb < R; rb += 2) {
                if (R - rb >= 2)
                    seq_pv_tile<2, NC>(acc + rb * hd, S + rb * CH + (jt - c0), CH, vt, vs, n);
                else
                    seq_pv_tile<1, NC>(acc + rb * hd, S + rb * CH + (jt - c0), CH, vt, vs, n);
            }
        }
    }
}

// Runs the task if it is one for this kernel (f32 cache, < 16 rows, head_dim 16 ... 128).
bool run_decode_seq(const AttnTask& t, float* m, float* l, float* acc) {
    if (t.tokens * t.group >= kAttnPrefillRows) return false;
    switch (t.head_dim) {
        case 16: attn_decode_seq_task<1>(t, m, l, acc); return true;
        case 32: attn_decode_seq_task<2>(t, m, l, acc); return true;
        case 48: attn_decode_seq_task<3>(t, m, l, acc); return true;
        case 64: attn_decode_seq_task<4>(t, m, l, acc); return true;
        case 80: attn_decode_seq_task<5>(t, m, l, acc); return true;
        case 96: attn_decode_seq_task<6>(t, m, l, acc); return true;
#if !(defined(XK_SANITIZER_BUILD) && XK_SANITIZER_BUILD)  // (attn_hd_compiled: not in sanitizer builds)
        case 112: attn_decode_seq_task<7>(t, m, l, acc); return true;
#endif
        case 128: attn_decode_seq_task<8>(t, m, l, acc); return true;
    }
    return false;
}
