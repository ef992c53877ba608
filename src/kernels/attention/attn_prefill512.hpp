// The AVX-512 prefill kernel (many rows against a key range): GEMM-shaped inner loops over tiles
// of 64 keys, fp32 FMA products (a bf16 K / V tile is widened once and reused by every row).
// Included inside the target-pragma region of attn_avx512.cpp, in an anonymous namespace.
// (VDPBF16PS issues at half the FMA rate on Sapphire Rapids — the same MACs per cycle as fp32
// FMA — so bf16 products would only cost accuracy here; AMX is the way past this rate.)
// Per tile of 64 keys:
//   pack:    K^T [head_dim][64] (16 x 16 transposes, widened); V copied (widened) to a
//            contiguous [64][head_dim];
//   scores:  6 rows x 64 keys of accumulators (24 zmm), per head_dim step 4 loads of K^T and 6
//            broadcasts of q — the 6 x 64 GEMM microkernel;
//   softmax: online, per row over the 64 keys (4 vectors; visible lanes as a mask register);
//   values:  6 rows x 64 head_dim values of accumulators, per key (pair) 4 loads of V and 6
//            broadcasts of p.
// A paged cache's keys are addressed row by row (a 64-key tile may span 16- / 32-token blocks).

constexpr int kPfKeys = 64;  // keys per tile
constexpr int kPfRows = 6;   // rows per register block

template <class T>
inline const T* pf_row(const AttnKvSource& kv, const T* base, int64_t stride, int64_t j) {
    if (kv.blocks)
        return base + static_cast<int64_t>(kv.blocks[j / kv.block_size]) * kv.block_elems + (j % kv.block_size) * stride;
    return base + j * stride;
}

// 16 x 16 dword transpose: rows r[0..16) -> columns written at out + i*ostride (i < 16).
inline void pf_transpose16(__m512* r, float* out, int64_t ostride) {
    __m512 u[16], v[16];
    for (int g = 0; g < 16; g += 4) {
        const __m512 t0 = _mm512_unpacklo_ps(r[g], r[g + 1]), t1 = _mm512_unpackhi_ps(r[g], r[g + 1]);
        const __m512 t2 = _mm512_unpacklo_ps(r[g + 2], r[g + 3]), t3 = _mm512_unpackhi_ps(r[g + 2], r[g + 3]);
        u[g] = _mm512_shuffle_ps(t0, t2, 0x44);
        u[g + 1] = _mm512_shuffle_ps(t0, t2, 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t1, t3, 0x44);
        u[g + 3] = _mm512_shuffle_ps(t1, t3, 0xEE);
    }
    for (int h = 0; h < 16; h += 8)
        for (int m = 0; m < 4; ++m) {
            v[h + m] = _mm512_shuffle_f32x4(u[h + m], u[h + 4 + m], 0x88);
            v[h + 4 + m] = _mm512_shuffle_f32x4(u[h + m], u[h + 4 + m], 0xDD);
        }
    for (int m = 0; m < 8; ++m) {
        _mm512_storeu_ps(out + m * ostride, _mm512_shuffle_f32x4(v[m], v[m + 8], 0x88));
        _mm512_storeu_ps(out + (m + 8) * ostride, _mm512_shuffle_f32x4(v[m], v[m + 8], 0xDD));
    }
}

inline __m512 pf_widen(const uint16_t* p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline __m512 pf_load(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 pf_load(const uint16_t* p) { return pf_widen(p); }

#include "kernels/attention/attn_exp512.hpp"  // attn_exp2_512

// Lazy running max: m moves when a score passes m + kPfSlack (natural units; p <= e^8 until then).
constexpr float kPfSlack = 8.0f;

// Scores of NB rows (f32 products): s[i*64 + j] = sum_d q[i*hd + d] * kt[d*64 + j].
template <int NB>
inline void pf_qk_f32(const float* q, int64_t hd, const float* kt, float* s) {
    __m512 a[NB][4];
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < 4; ++c) a[i][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
        const __m512 k0 = _mm512_loadu_ps(kt + d * 64), k1 = _mm512_loadu_ps(kt + d * 64 + 16);
        const __m512 k2 = _mm512_loadu_ps(kt + d * 64 + 32), k3 = _mm512_loadu_ps(kt + d * 64 + 48);
        for (int i = 0; i < NB; ++i) {
            const __m512 b = _mm512_set1_ps(q[i * hd + d]);
            a[i][0] = _mm512_fmadd_ps(b, k0, a[i][0]);
            a[i][1] = _mm512_fmadd_ps(b, k1, a[i][1]);
            a[i][2] = _mm512_fmadd_ps(b, k2, a[i][2]);
            a[i][3] = _mm512_fmadd_ps(b, k3, a[i][3]);
        }
    }
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(s + i * 64 + c * 16, a[i][c]);
}

// acc[i][c0*16 ...] = acc * corr[i] + sum_j p[i][j] v_j over CV vectors (f32 products).
template <int NB, int CV>
inline void pf_pv_f32(float* acc, int64_t hd, const float* P, const float* corr, const float* const* vrow, int64_t n,
                      int c0) {
    __m512 a[NB][CV];
    for (int i = 0; i < NB; ++i) {
        const __m512 cr = _mm512_set1_ps(corr[i]);
        for (int c = 0; c < CV; ++c) a[i][c] = _mm512_mul_ps(_mm512_loadu_ps(acc + i * hd + (c0 + c) * 16), cr);
    }
    for (int64_t j = 0; j < n; ++j) {
        __m512 v[CV];
        for (int c = 0; c < CV; ++c) v[c] = _mm512_loadu_ps(vrow[j] + (c0 + c) * 16);
        for (int i = 0; i < NB; ++i) {
            const __m512 p = _mm512_set1_ps(P[i * 64 + j]);
            for (int c = 0; c < CV; ++c) a[i][c] = _mm512_fmadd_ps(p, v[c], a[i][c]);
        }
    }
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < CV; ++c) _mm512_storeu_ps(acc + i * hd + (c0 + c) * 16, a[i][c]);
}

// Row blocks whose tokens see none of the tile (causal) are left alone: their p are 0, corr 1.
template <int CV>
inline void pf_pv_block(const AttnTask& t, int64_t j0, float* acc, int64_t hd, int64_t R, const float* S,
                        const float* corr, const float* const* vrow, int64_t n, int c0) {
    for (int64_t rb = 0; rb < R; rb += kPfRows) {
        const int64_t nb = R - rb < kPfRows ? R - rb : kPfRows;
        if (t.limit[(rb + nb - 1) / t.group] <= j0) continue;
        float* ab = acc + rb * hd;
        const float* Pb = S + rb * 64;
        const float* cb = corr + rb;
        switch (nb) {
            case 1: pf_pv_f32<1, CV>(ab, hd, Pb, cb, vrow, n, c0); break;
            case 2: pf_pv_f32<2, CV>(ab, hd, Pb, cb, vrow, n, c0); break;
            case 3: pf_pv_f32<3, CV>(ab, hd, Pb, cb, vrow, n, c0); break;
            case 4: pf_pv_f32<4, CV>(ab, hd, Pb, cb, vrow, n, c0); break;
            case 5: pf_pv_f32<5, CV>(ab, hd, Pb, cb, vrow, n, c0); break;
            default: pf_pv_f32<6, CV>(ab, hd, Pb, cb, vrow, n, c0); break;
        }
    }
}

// Scratch floats the prefill kernel needs for R rows of head_dim hd.
inline int64_t pf_scratch_floats(int64_t R, int64_t hd) { return 2 * hd * 64 + R * 81 + 64; }

// One task (R = tokens x group rows) over its key range. head_dim = 16*NC.
template <class T, int NC>
void attn_prefill(const AttnTask& t, float* m, float* l, float* acc) {
    constexpr int64_t hd = 16 * NC;
    const int64_t R = t.tokens * t.group;
    const float ninf = -__builtin_inff();
    // Scratch (floats): K^T [hd x 64] | V [64 x hd] | S [R x 64] | corr [R].
    float* kt = t.scratch;
    float* vbuf = kt + hd * 64;
    float* S = vbuf + hd * 64;
    float* corr = S + R * 64;
    float* lvec = corr + R;  // [R x 16]: partial sums of l
    attn_state_reset(R, hd, m, l, acc);
    for (int64_t r = 0; r < R; ++r) _mm512_storeu_ps(lvec + r * 16, _mm512_setzero_ps());
    const int64_t jmax = attn_key_end(t);
    const T* kbase = static_cast<const T*>(t.kv.k);
    const T* vbase = static_cast<const T*>(t.kv.v);
    const float* vrow[kPfKeys];
    const bool pf_next = attn_prefill_prefetch();
    for (int64_t j0 = t.j_begin; j0 < jmax; j0 += kPfKeys) {
        const int64_t n = jmax - j0 < kPfKeys ? jmax - j0 : kPfKeys;
        // ---- pack K^T (keys past n as 0)
        for (int kg = 0; kg < 4; ++kg) {
            const T* rows[16];
            for (int r = 0; r < 16; ++r) {
                const int64_t j = j0 + kg * 16 + r;
                rows[r] = j < j0 + n ? pf_row(t.kv, kbase, t.kv.k_stride, j) : nullptr;
            }
            for (int c = 0; c < NC; ++c) {
                __m512 r16[16];
                for (int r = 0; r < 16; ++r) r16[r] = rows[r] ? pf_load(rows[r] + c * 16) : _mm512_setzero_ps();
                pf_transpose16(r16, kt + c * 16 * 64 + kg * 16, 64);
            }
        }
        // ---- V rows, copied (bf16: widened) into a contiguous tile: the cache's rows sit a
        //      power-of-two stride apart (heads x head_dim), which would alias in L1
        for (int64_t j = 0; j < n; ++j) {
            const T* src = pf_row(t.kv, vbase, t.kv.v_stride, j0 + j);
            for (int c = 0; c < NC; ++c) _mm512_storeu_ps(vbuf + j * hd + c * 16, pf_load(src + c * 16));
            vrow[j] = vbuf + j * hd;
        }
        // ---- the next tile's K / V rows prefetched during this tile's scores, spread over its
        //      row blocks: a head's rows sit heads*head_dim apart (a power of two: they alias in a
        //      few L2 sets and come from L3 / DRAM every task), and the pack above would wait on
        //      each of them
        const int64_t jn = j0 + kPfKeys;
        const int64_t npf = pf_next ? (jmax - jn < kPfKeys ? jmax - jn : kPfKeys) : 0;
        constexpr int64_t row_lines = (hd * static_cast<int64_t>(sizeof(T)) + 63) / 64;
        const int64_t pf_total = npf > 0 ? 2 * npf * row_lines : 0;
        int64_t blocks_live = 0;
        for (int64_t rb = 0; rb < R; rb += kPfRows) {
            const int64_t nb = R - rb < kPfRows ? R - rb : kPfRows;
            if (t.limit[(rb + nb - 1) / t.group] > j0) ++blocks_live;
        }
        const int64_t pf_per = blocks_live ? (pf_total + blocks_live - 1) / blocks_live : 0;
        int64_t pf_done = 0;
        for (int64_t rb = 0; rb < R; rb += kPfRows) {
            const int64_t nb = R - rb < kPfRows ? R - rb : kPfRows;
            if (t.limit[(rb + nb - 1) / t.group] <= j0) continue;
            for (int64_t e = pf_done + pf_per < pf_total ? pf_done + pf_per : pf_total; pf_done < e; ++pf_done) {
                const int64_t line = pf_done >> 1, key = line / row_lines, off = (line % row_lines) * 64;
                const T* row = (pf_done & 1) ? pf_row(t.kv, vbase, t.kv.v_stride, jn + key)
                                             : pf_row(t.kv, kbase, t.kv.k_stride, jn + key);
                __builtin_prefetch(reinterpret_cast<const char*>(row) + off, 0, 2);
            }
            const float* qb = t.q + rb * hd;
            float* sb = S + rb * 64;
            switch (nb) {
                case 1: pf_qk_f32<1>(qb, hd, kt, sb); break;
                case 2: pf_qk_f32<2>(qb, hd, kt, sb); break;
                case 3: pf_qk_f32<3>(qb, hd, kt, sb); break;
                case 4: pf_qk_f32<4>(qb, hd, kt, sb); break;
                case 5: pf_qk_f32<5>(qb, hd, kt, sb); break;
                default: pf_qk_f32<6>(qb, hd, kt, sb); break;
            }
        }
        // ---- online softmax per row: S becomes P. p = 2^(s log2e - m log2e) (VREDUCEPS + a
        //      degree-5 polynomial + VSCALEFPS; masked lanes -inf -> clamped to -200 -> exactly 0).
        //      The running max is lazy: m moves only when a score passes m + kPfSlack (p <= e^slack
        //      meanwhile, exact after o = acc / l): most tiles need no horizontal max, no
        //      correction of acc and l. l is kept as 16 partial sums per row (summed at the end).
        for (int64_t r = 0; r < R; ++r) {
            const int64_t tok = r / t.group;
            int64_t cnt = t.limit[tok] - j0;
            if (cnt > n) cnt = n;
            float* s = S + r * 64;
            __m512 sv[4];
            const float* mrow = t.mask ? t.mask + tok * t.mask_stride + j0 : nullptr;
            for (int k = 0; k < 4; ++k) {
                const int64_t left = cnt - 16 * k;
                const __mmask16 km = left >= 16 ? static_cast<__mmask16>(0xFFFF)
                                                : (left <= 0 ? static_cast<__mmask16>(0)
                                                             : static_cast<__mmask16>((1u << left) - 1));
                __m512 x = _mm512_maskz_loadu_ps(km, s + k * 16);
                if (mrow) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(km, mrow + k * 16));
                sv[k] = _mm512_mask_mov_ps(_mm512_set1_ps(ninf), km, x);
            }
            const __m512 mx = _mm512_max_ps(_mm512_max_ps(sv[0], sv[1]), _mm512_max_ps(sv[2], sv[3]));
            const float mo = m[r];
            float c = 1.0f;
            if (mo == ninf || _mm512_cmp_ps_mask(mx, _mm512_set1_ps(mo + kPfSlack), _CMP_GT_OQ)) {
                const float mt = _mm512_reduce_max_ps(mx);
                if (mt == ninf) {  // nothing visible yet (mo is -inf too)
                    for (int k = 0; k < 4; ++k) _mm512_storeu_ps(s + k * 16, _mm512_setzero_ps());
                    corr[r] = 1.0f;
                    continue;
                }
                c = mo == ninf ? 0.0f : __builtin_expf(mo - mt);
                m[r] = mt;
            }
            const __m512 mlv = _mm512_set1_ps(m[r] * 1.44269504088896341f);
            __m512 sum = _mm512_setzero_ps();
            for (int k = 0; k < 4; ++k) {
                const __m512 p = attn_exp2_512(_mm512_cmp_ps_mask(sv[k], _mm512_set1_ps(ninf), _CMP_NEQ_OQ), _mm512_fmsub_ps(sv[k], _mm512_set1_ps(1.44269504088896341f), mlv));
                _mm512_storeu_ps(s + k * 16, p);
                sum = _mm512_add_ps(sum, p);
            }
            float* lv = lvec + r * 16;
            _mm512_storeu_ps(lv, c == 1.0f ? _mm512_add_ps(_mm512_loadu_ps(lv), sum)
                                           : _mm512_fmadd_ps(_mm512_loadu_ps(lv), _mm512_set1_ps(c), sum));
            corr[r] = c;
        }
        // ---- values
        int c0 = 0;
        for (; c0 + 4 <= NC; c0 += 4) pf_pv_block<4>(t, j0, acc, hd, R, S, corr, vrow, n, c0);
        if (c0 + 2 <= NC) {
            pf_pv_block<2>(t, j0, acc, hd, R, S, corr, vrow, n, c0);
            c0 += 2;
        }
        if (c0 < NC) pf_pv_block<1>(t, j0, acc, hd, R, S, corr, vrow, n, c0);
    }
    for (int64_t r = 0; r < R; ++r) l[r] = _mm512_reduce_add_ps(_mm512_loadu_ps(lvec + r * 16));
}
