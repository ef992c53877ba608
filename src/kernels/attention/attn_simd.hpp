// The vector attention kernel, written once over a small SIMD wrapper V (attn_avx512.cpp: 16
// lanes, attn_avx2.cpp: 8 lanes). Included inside a target-pragma region of those files, in an
// anonymous namespace: nothing here may use the standard library's templates.
//
// One task = rows (query tokens x the q heads of one kv head) against a key range, in tiles of 16
// keys:
//   scores:  for each key row k_j (widened once from bf16), for blocks of up to 8 q rows, the
//            products q_r * k_j summed into one vector per (row, key) — dot products along
//            head_dim, the q rows read from L1 — then 16 such vectors reduced at once into the
//            16 scores of the row (a transpose-and-add tree, ~3 instructions a score);
//   softmax: online: per row, the tile max, the correction exp(m_old - m_new) of the running
//            state, p = exp(s - m_new) (vector exp, masked lanes exactly 0), l updated;
//   values:  acc[r] = acc[r] * corr[r] + sum_j p[r][j] v_j: head_dim in pairs of vectors, rows in
//            blocks held in registers, each v_j chunk loaded (widened) once per row block and
//            multiplied by the broadcast p.
// K and V are each read once per task (decode: once per kv head, shared by its q heads: GQA).

// bf16 K / V with an even number of vector chunks are widened a pair of chunks at a time: one
// 2W-element load split into its even and odd elements (a shift and an and: 2 instructions per 2W
// values instead of 4); q is stored in that order and acc comes out in it (attn_task permutes).
template <class T, int NC>
constexpr bool attn_pair = sizeof(T) == 2 && NC % 2 == 0;

// Online softmax once per chunk of n keys (scores of row r at S + r * ld, masked lanes -inf): per
// row the chunk max, the correction of the running state (m, l; acc [R x hd] rescaled where it
// moved; corr[r] its factor), p = exp(s - m) in place of s (masked lanes exactly 0), l updated.
template <class V>
inline void attn_softmax_chunk(int64_t R, int64_t n, float* S, int64_t ld, int64_t hd, float* m, float* l, float* corr,
                               float* acc) {
    constexpr int64_t W = V::W;
    const float ninf = -__builtin_inff();
    const int64_t nvec = (n + 15) / 16 * (16 / W);
    bool rescale = false;
    for (int64_t r = 0; r < R; ++r) {
        float* s = S + r * ld;
        typename V::reg mx = V::set1(ninf);
        for (int64_t k = 0; k < nvec; ++k) mx = V::max(mx, V::load(s + k * W));
        const float mt = V::hmax(mx);
        const float mo = m[r];
        const float mn = mo > mt ? mo : mt;
        if (mn == ninf) {  // nothing visible yet
            for (int64_t k = 0; k < nvec; ++k) V::store(s + k * W, V::zero());
            corr[r] = 1.0f;
            continue;
        }
        const float c = mo == ninf ? 0.0f : (mo == mn ? 1.0f : __builtin_expf(mo - mn));
        typename V::reg sum = V::zero();
        const typename V::reg mnv = V::set1(mn);
        for (int64_t k = 0; k < nvec; ++k) {
            const typename V::reg sv = V::load(s + k * W);
            const typename V::reg p = V::exp_masked(V::sub(sv, mnv), sv);
            sum = V::add(sum, p);
            V::store(s + k * W, p);
        }
        l[r] = l[r] * c + V::hsum(sum);
        corr[r] = c;
        m[r] = mn;
        rescale |= c != 1.0f;
    }
    if (rescale)
        for (int64_t r = 0; r < R; ++r)
            if (corr[r] != 1.0f) {
                const typename V::reg cr = V::set1(corr[r]);
                for (int64_t k = 0; k < hd / W; ++k) V::store(acc + r * hd + k * W, V::mul(V::load(acc + r * hd + k * W), cr));
            }
}

template <class V, class T, int NB, int CG, int NC>
inline void attn_dots(const float* q, int64_t hd, const T* kr, float* z) {
    // z[i*16*W ...]: the vector of row i (of NB) for this key.
    typename V::reg a[NB];
    for (int i = 0; i < NB; ++i) a[i] = V::zero();
    for (int c0 = 0; c0 < NC; c0 += CG) {
        typename V::reg kv[CG];
        if constexpr (attn_pair<T, NC>) {
            for (int c = 0; c < CG; c += 2) {
                if (c0 + c < NC) V::loadkv_pair(kr + (c0 + c) * V::W, kv[c], kv[c + 1]);
                else kv[c] = kv[c + 1] = V::zero();  // (never read: set for GCC's uninitialized analysis)
            }
        } else {
            for (int c = 0; c < CG; ++c) kv[c] = c0 + c < NC ? V::loadkv(kr + (c0 + c) * V::W) : V::zero();
        }
        for (int i = 0; i < NB; ++i)
            for (int c = 0; c < CG; ++c)
                if (c0 + c < NC) a[i] = V::fma(V::load(q + i * hd + (c0 + c) * V::W), kv[c], a[i]);
    }
    for (int i = 0; i < NB; ++i) V::store(z + i * 16 * V::W, a[i]);
}

// Key-blocked dot products (V::kKeyBlocked, AVX-512): NB q rows x 4 keys at once, so each q chunk
// is loaded once for 4 keys and NB*4 (x2 for NB <= 2) independent FMA chains hide the latency;
// each row's 4 vectors are then folded into one (V::reduce4: per 128-bit lane the 4 keys' partial
// sums) stored at u + i*W.
template <class V, class T, int NB, int NC>
inline __attribute__((always_inline)) void attn_dots4(const float* q, int64_t hd, const T* const* kp, float* u) {
    constexpr bool pair = attn_pair<T, NC>;
    constexpr int CS = pair ? 2 : 1;
    constexpr bool dual = NB <= 2;
    typename V::reg a[NB][4], b[NB][4];
    for (int i = 0; i < NB; ++i)
        for (int k = 0; k < 4; ++k) a[i][k] = b[i][k] = V::zero();
    for (int c = 0; c < NC; c += CS) {
        typename V::reg ke[4], ko[4];
        for (int k = 0; k < 4; ++k) {
            if constexpr (pair)
                V::loadkv_pair(kp[k] + c * V::W, ke[k], ko[k]);
            else
                ke[k] = V::loadkv(kp[k] + c * V::W);
        }
        for (int i = 0; i < NB; ++i) {
            const typename V::reg qe = V::load(q + i * hd + c * V::W);
            if constexpr (pair) {
                const typename V::reg qo = V::load(q + i * hd + (c + 1) * V::W);
                for (int k = 0; k < 4; ++k) {
                    a[i][k] = V::fma(qe, ke[k], a[i][k]);
                    if constexpr (dual)
                        b[i][k] = V::fma(qo, ko[k], b[i][k]);
                    else
                        a[i][k] = V::fma(qo, ko[k], a[i][k]);
                }
            } else {
                for (int k = 0; k < 4; ++k) {
                    if (dual && (c & 1))
                        b[i][k] = V::fma(qe, ke[k], b[i][k]);
                    else
                        a[i][k] = V::fma(qe, ke[k], a[i][k]);
                }
            }
        }
    }
    for (int i = 0; i < NB; ++i) {
        if constexpr (dual)
            for (int k = 0; k < 4; ++k) a[i][k] = V::add(a[i][k], b[i][k]);
        V::store(u + i * V::W, V::reduce4(a[i][0], a[i][1], a[i][2], a[i][3]));
    }
}

// Prefetches spread over a tile's score loop (attn_prefetch_spread): the K / V rows of the tile
// `distance` ahead, k / v its first rows (null: none), n rows, ks / vs / rb bytes.
struct AttnPf {
    const char* k = nullptr;
    const char* v = nullptr;
    int64_t ks = 0, vs = 0, n = 0, rb = 0;
    bool l2 = false;  // PREFETCHT1 (attn_prefetch_khint() 2) instead of PREFETCHT0
};

// The 16 scores of NB rows (q rows qb) against the tile's keys kt (n of them; the others repeat
// the last key and are masked later) to out + i*os; pf: prefetches to issue on the way.

template <class V, class T, int NB, int NC>
void attn_scores_tile(const float* qb, int64_t hd, const T* kt, int64_t ks, int64_t n, float* U, float* out,
                      int64_t os, const AttnPf& pf) {
    for (int g = 0; g < 4; ++g) {
        if (pf.k)  // the rows of 4 keys ahead per 4 keys computed: no burst the fill buffers stall on
            for (int64_t jj = 4 * g; jj < 4 * g + 4 && jj < pf.n; ++jj)
                for (int64_t b = 0; b < pf.rb; b += 64) {
                    if (pf.l2) {
                        __builtin_prefetch(pf.k + jj * pf.ks + b, 0, 2);
                        if (pf.v) __builtin_prefetch(pf.v + jj * pf.vs + b, 0, 2);
                    } else {
                        __builtin_prefetch(pf.k + jj * pf.ks + b, 0, 3);
                        if (pf.v) __builtin_prefetch(pf.v + jj * pf.vs + b, 0, 3);
                    }
                }
        const T* kp[4];
        for (int k = 0; k < 4; ++k) kp[k] = kt + (4 * g + k < n ? 4 * g + k : n - 1) * ks;
        attn_dots4<V, T, NB, NC>(qb, hd, kp, U + g * 4 * V::W);
    }
    for (int i = 0; i < NB; ++i) V::reduce_final(U + i * V::W, 4 * V::W, out + i * os);
}

template <class T>
inline void attn_tile_ptrs(const AttnKvSource& kv, const T* kbase, const T* vbase, int64_t j0, const T*& kt,
                           const T*& vt) {
    if (kv.blocks) {
        const int64_t boff = static_cast<int64_t>(kv.blocks[j0 / kv.block_size]) * kv.block_elems;
        kt = kbase + boff + (j0 % kv.block_size) * kv.k_stride;
        vt = vbase + boff + (j0 % kv.block_size) * kv.v_stride;
    } else {
        kt = kbase + j0 * kv.k_stride;
        vt = vbase + j0 * kv.v_stride;
    }
}

// V prefetch of the P.V loop (attn_prefetch_mode 2): the V rows `dist` keys ahead (below jlim),
// the lines of this pass's vectors, with locality hint (0..3; dist 0 = none).
struct AttnPvPf {
    int64_t dist = 0, jlim = 0;
    int hint = 2;
};

template <int H>
inline __attribute__((always_inline)) void attn_pf_lines(const char* p, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, H);
}

// acc[NB rows x the CV vectors from chunk cv] += P.V over keys [j0, je) (one softmax chunk,
// several tiles: the accumulators stay in registers across them). P row i at P + i*ps.
template <class V, class T, int NB, int CV, int NC, int H = 2>
void attn_pv(float* acc, int64_t hd, const float* P, int64_t ps, const AttnKvSource& kv, const T* vbase, int64_t j0,
             int64_t je, int cv, const AttnPvPf& pf) {
    typename V::reg a[NB][CV];
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < CV; ++c) a[i][c] = V::load(acc + i * hd + (cv + c) * V::W);
    for (int64_t jt = j0; jt < je; jt += 16) {
        const T* kt;
        const T* vt;
        attn_tile_ptrs(kv, vbase, vbase, jt, kt, vt);
        const int64_t n = je - jt < 16 ? je - jt : 16;
        const float* Pt = P + (jt - j0);
        const char* vpf = nullptr;  // the V rows of the tile pf.dist keys ahead: this pass's lines
        int64_t npf = 0;
        constexpr int64_t pass_bytes = int64_t{CV} * V::W * static_cast<int64_t>(sizeof(T));
        if (pf.dist > 0 && jt + pf.dist < pf.jlim) {
            const T* kd;
            const T* vd;
            attn_tile_ptrs(kv, vbase, vbase, jt + pf.dist, kd, vd);
            vpf = reinterpret_cast<const char*>(vd + cv * V::W);
            npf = pf.jlim - (jt + pf.dist) < 16 ? pf.jlim - (jt + pf.dist) : 16;
        }
        for (int64_t jj = 0; jj < n; ++jj) {
            if (jj < npf) attn_pf_lines<H>(vpf + jj * kv.v_stride * static_cast<int64_t>(sizeof(T)), pass_bytes);
            typename V::reg vr[CV];
            if constexpr (attn_pair<T, NC> && CV % 2 == 0) {
                for (int c = 0; c < CV; c += 2) V::loadkv_pair(vt + jj * kv.v_stride + (cv + c) * V::W, vr[c], vr[c + 1]);
            } else {
                for (int c = 0; c < CV; ++c) vr[c] = V::loadkv(vt + jj * kv.v_stride + (cv + c) * V::W);
            }
            for (int i = 0; i < NB; ++i) {
                const typename V::reg p = V::set1(Pt[i * ps + jj]);
                for (int c = 0; c < CV; ++c) a[i][c] = V::fma(p, vr[c], a[i][c]);
            }
        }
    }
    for (int i = 0; i < NB; ++i)
        for (int c = 0; c < CV; ++c) V::store(acc + i * hd + (cv + c) * V::W, a[i][c]);
}


template <class V, class T, int NC>
void attn_task(const AttnTask& t, float* m, float* l, float* acc) {
    constexpr int W = V::W;
    constexpr int CG = V::kDotChunks;   // k chunks held in registers by the dot loop
    constexpr int CV = (V::kPvWide && NC % 4 == 0) ? 4 : (NC % 2 == 0 ? 2 : 1);
    constexpr int RB = CV == 4 ? 6 : V::kPvRows;  // rows per block of the P.V loop
    const int64_t hd = static_cast<int64_t>(NC) * W;
    const int64_t R = t.tokens * t.group;
    // Keys are taken in chunks of CH (decode: 256; a tile of 16 when the rows are many): scores of
    // the whole chunk first, then one softmax step per row, then P.V — the running state is
    // corrected once per chunk instead of once per tile.
    const int64_t CH = R < 16 ? kAttnDecodeChunk : 16;
    float* S = t.scratch;        // [R x CH]: scores, then probabilities
    float* corr = S + R * CH;    // [R]
    float* z = corr + R + 16;    // [8 x 16 x W] dot vectors
    constexpr bool pair = attn_pair<T, NC>;
    static_assert(!pair || (CV % 2 == 0 && CG % 2 == 0), "pairs of chunks");
    const float* q = t.q;
    if constexpr (pair) {  // q rows in the even / odd order of each pair of chunks
        float* qp = z + 8 * 16 * W;
        for (int64_t r = 0; r < R; ++r)
            for (int64_t b = 0; b < hd; b += 2 * W)
                for (int i = 0; i < W; ++i) {
                    qp[r * hd + b + i] = t.q[r * hd + b + 2 * i];
                    qp[r * hd + b + W + i] = t.q[r * hd + b + 2 * i + 1];
                }
        q = qp;
    }
    attn_state_reset(R, hd, m, l, acc);
    int64_t lim_min, lim_max;
    attn_limit_range(t, lim_min, lim_max);
    const int64_t jmax = t.j_end < lim_max ? t.j_end : lim_max;
    const T* kbase = static_cast<const T*>(t.kv.k);
    const T* vbase = static_cast<const T*>(t.kv.v);
    const int64_t row_bytes = hd * static_cast<int64_t>(sizeof(T));
    const int64_t pf_tiles = attn_prefetch_tiles();
    const int pf_mode = attn_prefetch_mode(static_cast<int>(sizeof(T)));
    const int pf_khint = attn_prefetch_khint();
    const bool pf_spread = V::kKeyBlocked && pf_mode != 0;
    const bool pf_split = pf_spread && pf_mode == 2;  // K from the score loop, V from the P.V loop
    AttnPvPf vpf;
    if (pf_split && pf_tiles > 0 && R < 16) {
        vpf.dist = CH;  // the next chunk's V
        vpf.jlim = jmax;
        vpf.hint = attn_prefetch_vhint();
    }
    for (int64_t c0 = t.j_begin; c0 < jmax; c0 += CH) {
      const int64_t ce = jmax - c0 < CH ? jmax : c0 + CH;
      // Phase 1: the chunk's scores, S[r*CH + j - c0] (masked lanes -inf).
      for (int64_t j0 = c0; j0 < ce; j0 += 16) {
        const int64_t n = ce - j0 < 16 ? ce - j0 : 16;
        const T* kt;
        const T* vt;
        attn_tile_ptrs(t.kv, kbase, vbase, j0, kt, vt);
        // Prefetch the keys / values pf_tiles tiles ahead (decode is a stream through DRAM; the
        // hardware prefetchers alone leave it latency-bound). Spread (default): issued by the score
        // loop 4 keys at a time into L1 — at 1 thread the K / V stream then overlaps the compute
        // (device Xeon, bench_attention decode rows, 1 thread: bf16 7.6-8.2 -> 8.4-12.1 GB/s, f32
        // 8.5-9.3 -> 11.0-13.0, read loop 11.3-13.1), where the burst of a whole tile serialised them.
        const int64_t jp = j0 + 16 * pf_tiles;
        AttnPf apf;
        if (pf_tiles > 0 && R < 16 && jp < jmax) {  // (prefill tiles are reused by many rows: no prefetch)
            const T* kp;
            const T* vp;
            attn_tile_ptrs(t.kv, kbase, vbase, jp, kp, vp);
            const int64_t np = jmax - jp < 16 ? jmax - jp : 16;
            if (pf_spread) {
                apf.k = reinterpret_cast<const char*>(kp);
                apf.v = pf_split ? nullptr : reinterpret_cast<const char*>(vp);
                apf.ks = t.kv.k_stride * static_cast<int64_t>(sizeof(T));
                apf.vs = t.kv.v_stride * static_cast<int64_t>(sizeof(T));
                apf.n = np;
                apf.rb = row_bytes;
                apf.l2 = pf_khint == 2;
            } else
            for (int64_t jj = 0; jj < np; ++jj)
                for (int64_t b = 0; b < row_bytes; b += 64) {
                    __builtin_prefetch(reinterpret_cast<const char*>(kp + jj * t.kv.k_stride) + b, 0, 2);
                    __builtin_prefetch(reinterpret_cast<const char*>(vp + jj * t.kv.v_stride) + b, 0, 2);
                }
        }
        // Scores.
        if constexpr (V::kKeyBlocked) {
            float* U = z;  // [4 rows x 4 key groups x W]
            for (int64_t rb = 0; rb < R; rb += 4) {
                if (rb) apf.k = nullptr;  // (the first row block issues them)
                const int64_t nb = R - rb < 4 ? R - rb : 4;
                const float* qb = q + rb * hd;
                float* so = S + rb * CH + (j0 - c0);
                const int64_t ks = t.kv.k_stride;
                switch (nb) {
                    case 1: attn_scores_tile<V, T, 1, NC>(qb, hd, kt, ks, n, U, so, CH, apf); break;
                    case 2: attn_scores_tile<V, T, 2, NC>(qb, hd, kt, ks, n, U, so, CH, apf); break;
                    case 3: attn_scores_tile<V, T, 3, NC>(qb, hd, kt, ks, n, U, so, CH, apf); break;
                    default: attn_scores_tile<V, T, 4, NC>(qb, hd, kt, ks, n, U, so, CH, apf); break;
                }
            }
        } else
        for (int64_t rb = 0; rb < R; rb += 8) {
            const int64_t nb = R - rb < 8 ? R - rb : 8;
            const float* qb = q + rb * hd;
            for (int64_t jj = 0; jj < n; ++jj) {
                const T* kr = kt + jj * t.kv.k_stride;
                float* zj = z + jj * W;
                switch (nb) {
                    case 1: attn_dots<V, T, 1, CG, NC>(qb, hd, kr, zj); break;
                    case 2: attn_dots<V, T, 2, CG, NC>(qb, hd, kr, zj); break;
                    case 3: attn_dots<V, T, 3, CG, NC>(qb, hd, kr, zj); break;
                    case 4: attn_dots<V, T, 4, CG, NC>(qb, hd, kr, zj); break;
                    case 5: attn_dots<V, T, 5, CG, NC>(qb, hd, kr, zj); break;
                    case 6: attn_dots<V, T, 6, CG, NC>(qb, hd, kr, zj); break;
                    case 7: attn_dots<V, T, 7, CG, NC>(qb, hd, kr, zj); break;
                    default: attn_dots<V, T, 8, CG, NC>(qb, hd, kr, zj); break;
                }
            }
            for (int64_t i = 0; i < nb; ++i) {
                for (int64_t jj = n; jj < 16; ++jj) V::store(z + (i * 16 + jj) * W, V::zero());
                V::reduce_tile(z + i * 16 * W, S + (rb + i) * CH + (j0 - c0));
            }
        }
        if constexpr (sizeof(T) == 1) {  // s8 cache: s *= the keys' scales
            float ksc[16];
            const float* kscp = t.kv.k_scale + attn_scale_index(t.kv, j0);
            for (int64_t jj = 0; jj < 16; ++jj) ksc[jj] = jj < n ? kscp[jj] : 0.0f;
            for (int64_t r = 0; r < R; ++r)
                for (int k = 0; k < 16 / W; ++k) {
                    float* sp = S + r * CH + (j0 - c0) + k * W;
                    V::store(sp, V::mul(V::load(sp), V::load(ksc + k * W)));
                }
        }
        // Mask (only where some lane of the tile is not plainly visible).
        attn_mask_tile(t, R, j0, n, lim_min, S + (j0 - c0), CH);
      }
      // Phase 2: online softmax once per chunk.
      attn_softmax_chunk<V>(R, ce - c0, S, CH, hd, m, l, corr, acc);
      if constexpr (sizeof(T) == 1) {  // s8 cache: p *= the values' scales (l keeps the plain p)
          for (int64_t j0 = c0; j0 < ce; j0 += 16) {
              const int64_t n = ce - j0 < 16 ? ce - j0 : 16;
              float vsc[16];
              const float* vscp = t.kv.v_scale + attn_scale_index(t.kv, j0);
              for (int64_t jj = 0; jj < 16; ++jj) vsc[jj] = jj < n ? vscp[jj] : 0.0f;
              for (int64_t r = 0; r < R; ++r)
                  for (int k = 0; k < 16 / W; ++k) {
                      float* pp = S + r * CH + (j0 - c0) + k * W;
                      V::store(pp, V::mul(V::load(pp), V::load(vsc + k * W)));
                  }
          }
      }
      // Phase 3: acc += P.V over the chunk.
      for (int cv = 0; cv < NC; cv += CV) {
          for (int64_t rb = 0; rb < R; rb += RB) {
              const int64_t nb = R - rb < RB ? R - rb : RB;
              float* ab = acc + rb * hd;
              const float* Pb = S + rb * CH;
              AttnPvPf pv = vpf;  // (the first row block issues them)
              if (rb) pv.dist = 0;
#define XK_PV1(k, h) attn_pv<V, T, k, CV, NC, h>(ab, hd, Pb, CH, t.kv, vbase, c0, ce, cv, pv)
#define XK_PV(k)                         \
    do {                                  \
        switch (pv.dist ? pv.hint : 3) {  \
            case 0: XK_PV1(k, 0); break;  \
            case 1: XK_PV1(k, 1); break;  \
            case 2: XK_PV1(k, 2); break;  \
            default: XK_PV1(k, 3); break; \
        }                                 \
    } while (0)
              switch (nb) {
                  case 1: XK_PV(1); break;
                  case 2: XK_PV(2); break;
                  case 3: XK_PV(3); break;
                  case 4: XK_PV(4); break;
                  case 5: XK_PV((RB >= 5 ? 5 : 4)); break;
                  case 6: XK_PV((RB >= 6 ? 6 : 4)); break;
                  case 7: XK_PV((RB >= 7 ? 7 : 4)); break;
                  default: XK_PV(RB); break;
              }
#undef XK_PV
#undef XK_PV1
          }
      }
    }
    if constexpr (pair) {  // acc back to the natural order
        float* tmp = z;
        for (int64_t r = 0; r < R; ++r) {
            float* a = acc + r * hd;
            for (int64_t b = 0; b < hd; b += 2 * W) {
                for (int i = 0; i < 2 * W; ++i) tmp[i] = a[b + i];
                for (int i = 0; i < W; ++i) {
                    a[b + 2 * i] = tmp[i];
                    a[b + 2 * i + 1] = tmp[W + i];
                }
            }
        }
    }
}


template <class V, class T>
void attn_dispatch(const AttnTask& t, float* m, float* l, float* acc) {
    switch (t.head_dim / V::W) {
#define XK_ATTN_NC(nc) \
    case nc:                                             \
        if constexpr (attn_hd_compiled(nc * V::W)) {     \
            attn_task<V, T, nc>(t, m, l, acc);           \
            return;                                      \
        }                                                \
        break;
        XK_ATTN_CASES
#undef XK_ATTN_NC
    }
    __builtin_trap();
}
