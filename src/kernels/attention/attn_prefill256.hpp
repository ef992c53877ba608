// The AVX2 prefill kernel (many rows against a key range): the AVX-512 one's plan
// (attn_prefill512.hpp) over 8-lane vectors and 16 ymm registers. GEMM-shaped inner loops over
// tiles of 64 keys, fp32 FMA products (a bf16 K / V tile is widened once and reused by every row).
// Included inside the target-pragma region of attn_avx2.cpp after attn_simd.hpp (uses V256), in an
// anonymous namespace: nothing here may use the standard library's templates.
// Per tile of 64 keys:
//   pack:    K^T as 4 groups of 16 keys, each [head_dim][16] (8 x 8 transposes, widened), so a
//            group's 16 keys at one d are one 64-byte line; V widened into head_dim chunks of 16
//            values, each [64 keys][16] (contiguous per chunk: the cache's rows sit a
//            power-of-two stride apart, which would alias in L1);
//   scores:  6 rows x 16 keys of accumulators (12 ymm), per d 2 loads of K^T and 6 broadcasts of q;
//   softmax: online, per row over the 64 keys (8 vectors; visible lanes by an integer compare);
//   values:  6 rows x 16 head_dim values of accumulators, per key 2 loads of V and 6 broadcasts
//            of p.
// A paged cache's keys are addressed row by row (a 64-key tile may span 16- / 32-token blocks).
// Scratch (floats): K^T [hd x 64] | V [64 x hd] | S [R x 64] | corr [R] — attn_scratch_floats'
// prefill share.

constexpr int kP2Keys = 64;  // keys per tile
constexpr int kP2Rows = 6;   // rows per register block

template <class T>
inline const T* p2_row(const AttnKvSource& kv, const T* base, int64_t stride, int64_t j) {
    if (kv.blocks)
        return base + static_cast<int64_t>(kv.blocks[j / kv.block_size]) * kv.block_elems + (j % kv.block_size) * stride;
    return base + j * stride;
}

inline __m256 p2_load(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 p2_load(const uint16_t* p) { return V256::loadkv(p); }

// 8 x 8 dword transpose: rows r[0..8) -> columns written at out + i*ostride (i < 8).
inline void p2_transpose8(const __m256* r, float* out, int64_t ostride) {
    __m256 u[8];
    for (int g = 0; g < 8; g += 4) {
        const __m256 t0 = _mm256_unpacklo_ps(r[g], r[g + 1]), t1 = _mm256_unpackhi_ps(r[g], r[g + 1]);
        const __m256 t2 = _mm256_unpacklo_ps(r[g + 2], r[g + 3]), t3 = _mm256_unpackhi_ps(r[g + 2], r[g + 3]);
        u[g] = _mm256_shuffle_ps(t0, t2, 0x44);      // columns 0 | 4
        u[g + 1] = _mm256_shuffle_ps(t0, t2, 0xEE);  // 1 | 5
        u[g + 2] = _mm256_shuffle_ps(t1, t3, 0x44);  // 2 | 6
        u[g + 3] = _mm256_shuffle_ps(t1, t3, 0xEE);  // 3 | 7
    }
    for (int c = 0; c < 4; ++c) {
        _mm256_storeu_ps(out + c * ostride, _mm256_permute2f128_ps(u[c], u[c + 4], 0x20));
        _mm256_storeu_ps(out + (c + 4) * ostride, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31));
    }
}

// Scores of NB rows against one group of 16 keys: s[i*64 + j] = sum_d q[i*hd + d] * kt[d*16 + j].
template <int NB>
inline void p2_qk(const float* q, int64_t hd, const float* kt, float* s) {
    __m256 a[NB][2];
    for (int i = 0; i < NB; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
        const __m256 k0 = _mm256_loadu_ps(kt + d * 16), k1 = _mm256_loadu_ps(kt + d * 16 + 8);
        for (int i = 0; i < NB; ++i) {
            const __m256 b = _mm256_broadcast_ss(q + i * hd + d);
            a[i][0] = _mm256_fmadd_ps(b, k0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(b, k1, a[i][1]);
        }
    }
    for (int i = 0; i < NB; ++i) {
        _mm256_storeu_ps(s + i * 64, a[i][0]);
        _mm256_storeu_ps(s + i * 64 + 8, a[i][1]);
    }
}

// acc[i][0..16) = acc * corr[i] + sum_{j < n} p[i][j] vt[j] (one chunk of 16 head_dim values).
template <int NB>
inline void p2_pv(float* acc, int64_t hd, const float* P, const float* corr, const float* vt, int64_t n) {
    __m256 a[NB][2];
    for (int i = 0; i < NB; ++i) {
        const __m256 cr = _mm256_broadcast_ss(corr + i);
        a[i][0] = _mm256_mul_ps(_mm256_loadu_ps(acc + i * hd), cr);
        a[i][1] = _mm256_mul_ps(_mm256_loadu_ps(acc + i * hd + 8), cr);
    }
    for (int64_t j = 0; j < n; ++j) {
        const __m256 v0 = _mm256_loadu_ps(vt + j * 16), v1 = _mm256_loadu_ps(vt + j * 16 + 8);
        for (int i = 0; i < NB; ++i) {
            const __m256 p = _mm256_broadcast_ss(P + i * 64 + j);
            a[i][0] = _mm256_fmadd_ps(p, v0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(p, v1, a[i][1]);
        }
    }
    for (int i = 0; i < NB; ++i) {
        _mm256_storeu_ps(acc + i * hd, a[i][0]);
        _mm256_storeu_ps(acc + i * hd + 8, a[i][1]);
    }
}

// One task (R = tokens x group rows) over its key range; head_dim a multiple of 16.
template <class T>
void attn_prefill256(const AttnTask& t, float* m, float* l, float* acc) {
    const int64_t hd = t.head_dim, nch = hd / 16;
    const int64_t R = t.tokens * t.group;
    const float ninf = -__builtin_inff();
    float* kt = t.scratch;
    float* vbuf = kt + hd * 64;
    float* S = vbuf + hd * 64;
    float* corr = S + R * 64;
    attn_state_reset(R, hd, m, l, acc);
    const int64_t jmax = attn_key_end(t);
    const T* kbase = static_cast<const T*>(t.kv.k);
    const T* vbase = static_cast<const T*>(t.kv.v);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t j0 = t.j_begin; j0 < jmax; j0 += kP2Keys) {
        const int64_t n = jmax - j0 < kP2Keys ? jmax - j0 : kP2Keys;
        const int64_t ngroups = (n + 15) / 16;
        // ---- pack K^T per group of 16 keys (keys past n as 0)
        for (int64_t kg = 0; kg < ngroups; ++kg)
            for (int h = 0; h < 2; ++h) {
                const T* rows[8];
                for (int r = 0; r < 8; ++r) {
                    const int64_t j = kg * 16 + h * 8 + r;
                    rows[r] = j < n ? p2_row(t.kv, kbase, t.kv.k_stride, j0 + j) : nullptr;
                }
                float* dst = kt + kg * hd * 16 + h * 8;
                for (int64_t c = 0; c < hd; c += 8) {
                    __m256 r8[8];
                    for (int r = 0; r < 8; ++r) r8[r] = rows[r] ? p2_load(rows[r] + c) : _mm256_setzero_ps();
                    p2_transpose8(r8, dst + c * 16, 16);
                }
            }
        // ---- V: chunk c of key j at vbuf[c*64*16 + j*16]
        for (int64_t j = 0; j < n; ++j) {
            const T* src = p2_row(t.kv, vbase, t.kv.v_stride, j0 + j);
            for (int64_t c = 0; c < nch; ++c) {
                _mm256_storeu_ps(vbuf + c * 1024 + j * 16, p2_load(src + c * 16));
                _mm256_storeu_ps(vbuf + c * 1024 + j * 16 + 8, p2_load(src + c * 16 + 8));
            }
        }
        // ---- scores (row blocks whose tokens see none of the tile are skipped; limits grow
        //      with the token)
        for (int64_t rb = 0; rb < R; rb += kP2Rows) {
            const int64_t nb = R - rb < kP2Rows ? R - rb : kP2Rows;
            if (t.limit[(rb + nb - 1) / t.group] <= j0) continue;
            const float* qb = t.q + rb * hd;
            for (int64_t kg = 0; kg < ngroups; ++kg) {
                const float* kg_t = kt + kg * hd * 16;
                float* sb = S + rb * 64 + kg * 16;
                switch (nb) {
                    case 1: p2_qk<1>(qb, hd, kg_t, sb); break;
                    case 2: p2_qk<2>(qb, hd, kg_t, sb); break;
                    case 3: p2_qk<3>(qb, hd, kg_t, sb); break;
                    case 4: p2_qk<4>(qb, hd, kg_t, sb); break;
                    case 5: p2_qk<5>(qb, hd, kg_t, sb); break;
                    default: p2_qk<6>(qb, hd, kg_t, sb); break;
                }
            }
        }
        // ---- online softmax per row: S becomes P (P = 0 past the visible keys, up to n)
        for (int64_t r = 0; r < R; ++r) {
            const int64_t tok = r / t.group;
            int64_t cnt = t.limit[tok] - j0;
            if (cnt > n) cnt = n;
            float* s = S + r * 64;
            const float* mrow = t.mask ? t.mask + tok * t.mask_stride + j0 : nullptr;
            __m256 sv[8];
            __m256 mx = _mm256_set1_ps(ninf);
            for (int k = 0; k < 8; ++k) {
                const int64_t left = cnt - 8 * k;
                if (left <= 0) {
                    sv[k] = _mm256_set1_ps(ninf);
                    continue;
                }
                const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(left < 8 ? static_cast<int>(left) : 8), iota);
                __m256 x = _mm256_loadu_ps(s + 8 * k);
                if (mrow) x = _mm256_add_ps(x, _mm256_maskload_ps(mrow + 8 * k, live));
                sv[k] = _mm256_blendv_ps(_mm256_set1_ps(ninf), x, _mm256_castsi256_ps(live));
                mx = _mm256_max_ps(mx, sv[k]);
            }
            const float mt = V256::hmax(mx);
            const float mo = m[r];
            const float mn = mo > mt ? mo : mt;
            if (mn == ninf) {  // nothing visible yet
                for (int k = 0; k < 8; ++k) _mm256_storeu_ps(s + 8 * k, _mm256_setzero_ps());
                corr[r] = 1.0f;
                continue;
            }
            const float c = mo == ninf ? 0.0f : (mo == mn ? 1.0f : __builtin_expf(mo - mn));
            const __m256 mnv = _mm256_set1_ps(mn);
            __m256 sum = _mm256_setzero_ps();
            for (int k = 0; k < 8; ++k) {
                const __m256 x = _mm256_sub_ps(sv[k], mnv);
                const __m256 p = V256::exp_masked(x, x);
                _mm256_storeu_ps(s + 8 * k, p);
                sum = _mm256_add_ps(sum, p);
            }
            l[r] = l[r] * c + V256::hsum(sum);
            corr[r] = c;
            m[r] = mn;
        }
        // ---- values
        for (int64_t rb = 0; rb < R; rb += kP2Rows) {
            const int64_t nb = R - rb < kP2Rows ? R - rb : kP2Rows;
            if (t.limit[(rb + nb - 1) / t.group] <= j0) continue;
            const float* Pb = S + rb * 64;
            const float* cb = corr + rb;
            for (int64_t c = 0; c < nch; ++c) {
                float* ab = acc + rb * hd + c * 16;
                const float* vt = vbuf + c * 1024;
                switch (nb) {
                    case 1: p2_pv<1>(ab, hd, Pb, cb, vt, n); break;
                    case 2: p2_pv<2>(ab, hd, Pb, cb, vt, n); break;
                    case 3: p2_pv<3>(ab, hd, Pb, cb, vt, n); break;
                    case 4: p2_pv<4>(ab, hd, Pb, cb, vt, n); break;
                    case 5: p2_pv<5>(ab, hd, Pb, cb, vt, n); break;
                    default: p2_pv<6>(ab, hd, Pb, cb, vt, n); break;
                }
            }
        }
    }
}
