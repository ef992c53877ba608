// libFuzzer target: the attention family of the C API (include/xk/c/attention.h). See
// fuzz_common.hpp for the scheme. Calls:
//   xk_attention_f32 / _bf16: varlen batches (cu_seqlens, null when batch = 1), MHA / GQA / MQA,
//     head_dim 16 ... 128 and odd ones (the reference), causal with negative / zero / positive
//     offsets, an additive mask with -inf entries, lse or not; query blocks long enough for the
//     prefill kernel (>= 16 rows) and key ranges across its 64-key tiles;
//   xk_kv_cache_append (f32 / bf16 rows into f32 / bf16 caches, contiguous or paged with a shuffled
//     block table, positions in any order) checked against a model of the cache bytes, then
//     xk_cached_attention_f32 / _bf16 (decode and chunked-prefill shapes) over it — cache slots
//     never written hold NaN, so a kernel reading past a context shows;
//   xk_kv_cache_append_ex (f32 / bf16 / s8 caches, RoPE fused or not; stored rows against the
//     rotated sources, s8 within half a quantization step) and xk_cached_attention_plan_run over
//     it; xk_attention_plan_run equal to the one-shot call; hostile descriptors give no plan;
//   xk_attention_strided / xk_attention_plan_create_strided: padded strides, bitwise the packed call;
//   ISA cap and thread count (1 / 2: the key range split across threads and merged) changes.
// Valid calls are checked against a double-precision loop of attention.hpp's math within a bound
// built from the fp32 dot-product error of the scores (E = (head_dim + 2) u scale max_j sum_d
// |q_d k_jd|: weights move by at most e^(+-E)), the sums over keys and the vector exp; a bf16 o
// adds one rounding. A row that sees no key must be exactly o = 0, lse = -inf.
// Hostile calls (one argument wrong) must fail with a message and leave o, lse and the caches as
// they were.
#include <algorithm>
#include <numeric>
#include <string>
#include <type_traits>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;
using fz::Values;

constexpr double kU = 0x1p-24;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

using fz::narrow;
using fz::widen;

int64_t head_dim(In& in) {
    static const int64_t v[] = {16, 32, 64, 128, 80, 96, 7, 24, 1};
    return v[in.pick(9)];
}

// Inputs: moderate values (scores stay finite), zeros, denormals.
float data_value(In& in) { return in.value(8.0f); }

// One query row against keys [0, nk) visible where vis(j): o (double), lse; returns the score
// error bound E (see the header) in *err and max |v_j| over the visible keys in *vmax.
template <class K, class Vv, class Vis, class Mask>
void oracle_row(const std::vector<double>& q, int64_t nk, int64_t hd, double scale, K key, Vv val, Vis vis, Mask mask,
                std::vector<double>& o, double& lse, double& err, double& vmax, int64_t& seen) {
    std::vector<double> s(static_cast<size_t>(nk), -INFINITY);
    double mx = -INFINITY, amax = 0;
    seen = 0;
    vmax = 0;
    for (int64_t j = 0; j < nk; ++j) {
        if (!vis(j)) continue;
        double d = 0, a = 0;
        for (int64_t e = 0; e < hd; ++e) {
            d += q[e] * key(j, e);
            a += std::fabs(q[e] * key(j, e));
        }
        amax = std::max(amax, std::fabs(scale) * a);
        const double mj = mask(j);
        s[j] = scale * d + mj;
        if (s[j] == -INFINITY) continue;
        amax = std::max(amax, std::fabs(s[j]));
        mx = std::max(mx, s[j]);
        ++seen;
        for (int64_t e = 0; e < hd; ++e) vmax = std::max(vmax, std::fabs(val(j, e)));
    }
    err = (static_cast<double>(hd) + 4) * kU * amax;
    o.assign(static_cast<size_t>(hd), 0.0);
    if (mx == -INFINITY) {
        lse = -INFINITY;
        return;
    }
    double sum = 0;
    for (int64_t j = 0; j < nk; ++j) {
        if (s[j] == -INFINITY) continue;
        const double p = std::exp(s[j] - mx);
        sum += p;
        for (int64_t e = 0; e < hd; ++e) o[e] += p * val(j, e);
    }
    for (auto& x : o) x /= sum;
    lse = mx + std::log(sum);
}

// Checks one row of o (hd values at `got`) and its lse.
// Kernels that round to bf16 (amx:bf16 and dpbf16:bf16: bf16 caches, tasks of >= 16 rows; dpbf16:bf16
// on AMD CPUs its decode too): each
// p = exp(s - m) in [0, 1] (relative 2^-9: o moves by <= 2^-8 max|v| counting the sums), and an f32
// q (scores move by <= 2^-9 scale sum_d |q_d k_jd| = 2^-9 A: weights by e^(+-2^-8 A)). Set by the
// ops below before their checks (rounds_bf16: what the current ISA cap selects for that head_dim).
bool g_round_p = false, g_round_q = false;

bool rounds_bf16(int64_t hd) {
    xk_attention_desc d;
    xk_attention_desc_init(&d);
    d.batch = 1, d.q_tokens = d.kv_tokens = 1, d.q_heads = d.kv_heads = 1, d.head_dim = hd;
    d.dtype = d.o_dtype = XK_DTYPE_BF16;
    xk_attention_plan* p = nullptr;
    if (xk_attention_plan_create(&d, &p) != XK_SUCCESS || !p) return false;
    const std::string n = xk_attention_plan_impl_name(p);
    xk_attention_plan_destroy(p);
    return n.rfind("amx", 0) == 0 || n.rfind("dpbf16", 0) == 0;
}

template <class T>
void check_row(const char* what, const T* got, const float* lse_got, const std::vector<double>& want, double lse_want,
               double err, double vmax, int64_t seen, int64_t hd, const char* where) {
    const double amax = err / ((static_cast<double>(hd) + 4) * kU);  // (oracle_row's A)
    const double round_w = (g_round_p ? 0x1p-8 : 0.0) + (g_round_q ? 0x1p-7 * amax : 0.0);
    const double round_l = g_round_q ? 0x1p-8 * amax : 0.0;
    constexpr bool bf = std::is_same_v<T, uint16_t>;
    if (lse_want == -INFINITY) {
        for (int64_t e = 0; e < hd; ++e)
            if (widen(got[e]) != 0.0f) fz::finding("%s (%s): a row that sees no key: o[%lld] = %g, want 0", what, where, (long long)e, widen(got[e]));
        if (lse_got && *lse_got != -kInf) fz::finding("%s (%s): a row that sees no key: lse = %g, want -inf", what, where, *lse_got);
        return;
    }
    // Weights move by e^(+-2E) (scores) and ~(seen + 16) u (exp, sums): |o - want| <= that x max|v|.
    const double wrel = 2.5 * err + (static_cast<double>(seen) + 16) * 4 * kU + round_w;
    const double atol = vmax * std::min(wrel, 2.0) + 1e-37;
    for (int64_t e = 0; e < hd; ++e) {
        const double g = widen(got[e]);
        const double tol = atol + (bf ? 0x1p-8 * std::fabs(want[e]) : 0.0) + 4 * kU * std::fabs(want[e]);
        if (!fz::close(g, want[e], 0, tol))
            fz::finding("%s (%s): o[%lld] = %.9g, want %.9g (+- %.3g; E = %.3g, max|v| = %.3g, keys seen %lld)", what, where,
                        (long long)e, g, want[e], tol, err, vmax, (long long)seen);
    }
    if (lse_got) {
        const double tol =
            2.5 * err + (static_cast<double>(seen) + 16) * 4 * kU + 4 * kU * std::fabs(lse_want) + 1e-6 + round_l;
        if (!fz::close(*lse_got, lse_want, 0, tol))
            fz::finding("%s (%s): lse = %.9g, want %.9g (+- %.3g)", what, where, *lse_got, lse_want, tol);
    }
}

using fz::current_cap;

// ---- xk_attention_{f32,bf16} ------------------------------------------------------------------
template <class T>
xk_status sdpa_call(int64_t batch, int64_t tq, int64_t tk, int64_t qh, int64_t kvh, int64_t hd, const T* q, const T* k,
                    const T* v, T* o, float* lse, const int64_t* cq, const int64_t* ck, float scale, int causal,
                    int64_t off, const float* mask, int64_t ms) {
    if constexpr (std::is_same_v<T, float>)
        return xk_attention_f32(batch, tq, tk, qh, kvh, hd, q, k, v, o, lse, cq, ck, scale, causal, off, mask, ms);
    else
        return xk_attention_bf16(batch, tq, tk, qh, kvh, hd, q, k, v, o, lse, cq, ck, scale, causal, off, mask, ms);
}

template <class T>
void op_sdpa(In& in) {
    constexpr bool bf = std::is_same_v<T, uint16_t>;
    const char* what = bf ? "xk_attention_bf16" : "xk_attention_f32";
    const int64_t batch = in.dim(1, 3);
    const int64_t kvh = in.dim(1, 2), group = in.dim(1, 4), qh = kvh * group, hd = head_dim(in);
    std::vector<int64_t> lq(batch), lk(batch), cq(batch + 1, 0), ck(batch + 1, 0);
    for (int64_t b = 0; b < batch; ++b) {
        lq[b] = in.dim(0, 24);
        lk[b] = in.dim(0, 140);
        cq[b + 1] = cq[b] + lq[b];
        ck[b + 1] = ck[b] + lk[b];
    }
    const int64_t Tq = cq[batch], Tk = ck[batch];
    const int causal = in.coin() ? (in.coin() ? 1 : -3) : 0;  // any non-zero int means causal
    const int64_t off = causal ? in.p.ConsumeIntegralInRange<int64_t>(-4, 150) : 0;
    const bool has_mask = in.pick(3) == 0, want_lse = in.coin(), null_cu = batch == 1 && in.coin();
    const int64_t max_k = *std::max_element(lk.begin(), lk.end());
    const int64_t ms = has_mask ? (in.coin() && max_k == Tk ? 0 : max_k + in.pick(3)) : 0;
    const float scale = in.coin() ? 0.0f : static_cast<float>(in.p.ConsumeIntegralInRange<int>(-300, 300)) / 100.0f;

    Buf<T> q(Tq * qh * hd, in.pick(4)), k(Tk * kvh * hd, in.pick(4)), v(Tk * kvh * hd, in.pick(4));
    Buf<float> mask(has_mask ? Tq * (ms ? ms : Tk) : 0);
    {
        Values vals(in, q.size() + k.size() + v.size());
        for (size_t i = 0; i < q.size(); ++i) q[i] = narrow<T>(data_value(vals()));
        for (size_t i = 0; i < k.size(); ++i) k[i] = narrow<T>(data_value(vals()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = narrow<T>(data_value(vals()));
        for (size_t i = 0; i < mask.size(); ++i)
            mask[i] = vals().pick(6) == 0 ? -kInf : static_cast<float>(vals().p.ConsumeIntegralInRange<int>(-400, 400)) / 100.0f;
    }
    Buf<T> o0(Tq * qh * hd, in.pick(4));
    Buf<float> lse0(want_lse ? Tq * qh : 0);
    o0.fill(narrow<T>(1234.5f));
    lse0.fill(999.0f);

    // Hostile: one argument wrong (with queries: a call without any returns before the checks
    // that need the data).
    const bool hostile = Tq > 0 && in.pick(3) == 2;
    int64_t a_batch = batch, a_tq = Tq, a_tk = Tk, a_qh = qh, a_kvh = kvh, a_hd = hd, a_ms = ms;
    float a_scale = scale;
    bool q_null = false, k_null = false, o_null = false;
    std::vector<int64_t> cq_arg = cq, ck_arg = ck;
    const char* wrong = "";
    if (hostile) {
        switch (in.pick(10)) {
            case 0: a_batch = in.coin() ? -1 : std::numeric_limits<int64_t>::min(); wrong = "batch < 0"; break;
            case 1: a_qh = qh + 1; a_kvh = qh + 2; wrong = "q_heads not a multiple of kv_heads"; break;
            case 2: a_hd = in.coin() ? 0 : -1 - in.pick(9); wrong = "head_dim < 1"; break;
            case 3: a_tq = Tq + 1 + in.pick(3); wrong = "cu_seqlens_q[batch] != q_tokens"; break;
            case 4:
                if (batch >= 2) { cq_arg[1] = Tq + 5; wrong = "cu_seqlens_q decreasing"; }
                else { ck_arg[0] = 1; wrong = "cu_seqlens_k[0] != 0"; }
                break;
            case 5: a_scale = in.coin() ? kNaN : -kInf; wrong = "scale not finite"; break;
            case 6:
                if (Tq > 0) { q_null = true; wrong = "q null"; break; }
                [[fallthrough]];
            case 7:
                if (Tq > 0) { o_null = true; wrong = "o null"; break; }
                [[fallthrough]];
            case 8:
                if (Tq > 0 && Tk > 0) { k_null = true; wrong = "k null"; break; }
                [[fallthrough]];
            default:
                if (Tq > 0) { a_tq = kI64Max; cq_arg[batch] = kI64Max; wrong = "q_tokens overflows the q extent"; }
                else { a_kvh = -2; wrong = "kv_heads < 0"; }
                break;
        }
        if (has_mask && Tq > 0 && max_k > 0 && in.pick(4) == 0) {  // or instead a short mask stride
            a_batch = batch, a_tq = Tq, a_tk = Tk, a_qh = qh, a_kvh = kvh, a_hd = hd, a_scale = scale;
            q_null = k_null = o_null = false, cq_arg = cq, ck_arg = ck;
            a_ms = max_k - 1;
            if (a_ms == 0) a_ms = -1;
            wrong = "mask_stride below the longest key sequence";
        }
    }
    Buf<T> o = o0;
    Buf<float> lse = lse0;
    const xk_status s = fz::timed(what, [&] {
        return sdpa_call<T>(a_batch, a_tq, a_tk, a_qh, a_kvh, a_hd, q_null ? nullptr : q.data(), k_null ? nullptr : k.data(),
                            v.data(), o_null ? nullptr : o.data(), want_lse ? lse.data() : nullptr,
                            null_cu && !hostile ? nullptr : cq_arg.data(), null_cu && !hostile ? nullptr : ck_arg.data(), a_scale,
                            causal, off, has_mask ? mask.data() : nullptr, a_ms);
    });
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(o, o0.snapshot(), what, "o");
        fz::expect_unchanged(lse, lse0.snapshot(), what, "lse");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(o, what, "o");
    fz::expect_guards(lse, what, "lse");
    const char* cap_name = "";
    current_cap(&cap_name);
    g_round_p = bf && rounds_bf16(hd);  // (bf16 q: exact in bf16)
    g_round_q = false;
    const double sc = scale == 0.0f ? static_cast<double>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))) : scale;
    const int64_t mstride = ms ? ms : Tk;
    std::vector<double> qr(hd), orow;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < lq[b]; ++i)
            for (int64_t h = 0; h < qh; ++h) {
                const int64_t tok = cq[b] + i, kh = h / group;
                for (int64_t e = 0; e < hd; ++e) qr[e] = widen(q[(tok * qh + h) * hd + e]);
                double l = 0, err = 0, vmax = 0;
                int64_t seen = 0;
                oracle_row(
                    qr, lk[b], hd, sc, [&](int64_t j, int64_t e) { return (double)widen(k[((ck[b] + j) * kvh + kh) * hd + e]); },
                    [&](int64_t j, int64_t e) { return (double)widen(v[((ck[b] + j) * kvh + kh) * hd + e]); },
                    [&](int64_t j) { return !causal || j <= i + off; },
                    [&](int64_t j) { return has_mask ? static_cast<double>(mask[tok * mstride + j]) : 0.0; }, orow, l, err, vmax,
                    seen);
                check_row<T>(what, o.data() + (tok * qh + h) * hd, want_lse ? lse.data() + tok * qh + h : nullptr, orow, l, err,
                             vmax, seen, hd, cap_name);
            }
}

// ---- KV cache: append, cached attention --------------------------------------------------------
struct CacheSetup {
    xk_kv_cache_desc d;
    int64_t cap = 0;
    std::vector<int32_t> table;
};

// Element offset of (b, h, pos) in a K / V buffer (the header's layouts).
int64_t cache_off(const CacheSetup& c, int64_t b, int64_t h, int64_t pos) {
    const xk_kv_cache_desc& d = c.d;
    if (d.layout == XK_KV_CONTIGUOUS) return ((b * d.kv_heads + h) * d.capacity + pos) * d.head_dim;
    const int64_t blk = c.table[b * d.max_blocks_per_seq + pos / d.block_size];
    return ((blk * d.kv_heads + h) * d.block_size + pos % d.block_size) * d.head_dim;
}

template <class C, class Q>
void op_cache(In& in) {
    constexpr bool cbf = std::is_same_v<C, uint16_t>, qbf = std::is_same_v<Q, uint16_t>;
    const char* what_app = "xk_kv_cache_append";
    const char* what = qbf ? "xk_cached_attention_bf16" : "xk_cached_attention_f32";
    CacheSetup c;
    xk_kv_cache_desc_init(&c.d);
    xk_kv_cache_desc& d = c.d;
    d.layout = in.coin() ? XK_KV_CONTIGUOUS : XK_KV_PAGED;
    d.dtype = cbf ? XK_DTYPE_BF16 : XK_DTYPE_F32;
    d.batch = in.dim(1, 3);
    d.kv_heads = in.dim(1, 2);
    d.head_dim = head_dim(in);
    const int64_t group = in.dim(1, 4), qh = d.kv_heads * group, hd = d.head_dim;
    int64_t nelem = 0;
    if (d.layout == XK_KV_CONTIGUOUS) {
        d.capacity = in.dim(1, 150);
        c.cap = d.capacity;
        nelem = d.batch * d.kv_heads * d.capacity * hd;
    } else {
        static const int64_t bs[] = {16, 32, 64};
        d.block_size = bs[in.pick(3)];
        d.max_blocks_per_seq = in.dim(1, 4);
        d.num_blocks = d.batch * d.max_blocks_per_seq + in.pick(3);
        c.cap = d.max_blocks_per_seq * d.block_size;
        std::vector<int32_t> perm(d.num_blocks);
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t i = d.num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[in.pick(static_cast<int>(i + 1))]);
        c.table.assign(perm.begin(), perm.begin() + d.batch * d.max_blocks_per_seq);
        nelem = d.num_blocks * d.kv_heads * d.block_size * hd;
    }
    // Contexts and queries per sequence.
    std::vector<int64_t> ctx(d.batch), nq(d.batch), cu(d.batch + 1, 0);
    for (int64_t b = 0; b < d.batch; ++b) {
        ctx[b] = in.dim(0, c.cap);
        nq[b] = ctx[b] == 0 ? 0 : (in.coin() ? std::min<int64_t>(1, ctx[b]) : in.dim(0, std::min<int64_t>(ctx[b], 20)));
        cu[b + 1] = cu[b] + nq[b];
    }
    const int64_t T = cu[d.batch];
    // The cache: NaN everywhere (never-written slots must not be read), then one append of every
    // context position (positions in a shuffled order) from f32 or bf16 rows.
    Buf<C> kc(nelem), vc(nelem);
    kc.fill(narrow<C>(kNaN));
    vc.fill(narrow<C>(kNaN));
    std::vector<int64_t> seq, pos;
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t p = 0; p < ctx[b]; ++p) seq.push_back(b), pos.push_back(p);
    for (int64_t i = static_cast<int64_t>(seq.size()) - 1; i > 0; --i) {
        const int64_t j = in.pick(static_cast<int>(i + 1));
        std::swap(seq[i], seq[j]);
        std::swap(pos[i], pos[j]);
    }
    const int64_t tokens = static_cast<int64_t>(seq.size());
    const bool src_bf = in.coin();
    Buf<float> kn_f(src_bf ? 0 : tokens * d.kv_heads * hd, in.pick(4)), vn_f(src_bf ? 0 : tokens * d.kv_heads * hd);
    Buf<uint16_t> kn_h(src_bf ? tokens * d.kv_heads * hd : 0), vn_h(src_bf ? tokens * d.kv_heads * hd : 0, in.pick(4));
    {
        Values vals(in, 2 * tokens * d.kv_heads * hd);
        for (size_t i = 0; i < kn_f.size(); ++i) kn_f[i] = data_value(vals()), vn_f[i] = data_value(vals());
        for (size_t i = 0; i < kn_h.size(); ++i) kn_h[i] = fz::to_bf16(data_value(vals())), vn_h[i] = fz::to_bf16(data_value(vals()));
    }
    auto src = [&](bool isv, int64_t t, int64_t h, int64_t e) -> float {
        const size_t i = static_cast<size_t>((t * d.kv_heads + h) * hd + e);
        return src_bf ? fz::from_bf16(isv ? vn_h[i] : kn_h[i]) : (isv ? vn_f[i] : kn_f[i]);
    };
    // Hostile append (instead of the real one, then the real one follows).
    if (tokens > 0 && in.pick(4) == 0) {
        xk_kv_cache_desc bad = d;
        std::vector<int64_t> bseq = seq, bpos = pos;
        std::vector<int32_t> btable = c.table;
        const void* kp = src_bf ? static_cast<const void*>(kn_h.data()) : kn_f.data();
        int64_t btokens = tokens;
        int bsrc = src_bf ? XK_DTYPE_BF16 : XK_DTYPE_F32;
        const char* wrong = "";
        const int64_t t = in.pick(static_cast<int>(tokens));
        switch (in.pick(7)) {
            case 0: bpos[t] = in.coin() ? c.cap : -1; wrong = "position past capacity"; break;
            case 1: bseq[t] = in.coin() ? d.batch : -1; wrong = "seq id out of range"; break;
            case 2:
                if (d.layout == XK_KV_PAGED) {
                    btable[bseq[t] * d.max_blocks_per_seq + bpos[t] / d.block_size] = in.coin() ? static_cast<int32_t>(d.num_blocks) : -1;
                    wrong = "block index past the pool";
                    break;
                }
                [[fallthrough]];
            case 3: { const int v = in.bad_enum(2); std::memcpy(&bad.layout, &v, sizeof v); wrong = "layout not an xk_kv_layout"; break; }
            case 4: kp = nullptr; wrong = "k_new null"; break;
            case 5: btokens = -1 - in.pick(5); wrong = "tokens < 0"; break;
            default:
                if (d.layout == XK_KV_PAGED) { bad.block_size = 24; wrong = "block_size 24"; }
                else { bad.capacity = in.coin() ? 0 : kI64Max; wrong = "capacity bad"; }
                break;
        }
        if (in.pick(5) == 0) { bsrc = in.bad_enum(3); bseq = seq, bpos = pos, btable = c.table, bad = d, kp = src_bf ? static_cast<const void*>(kn_h.data()) : kn_f.data(), btokens = tokens; wrong = "src dtype unknown"; }
        const auto k0 = kc.snapshot(), v0 = vc.snapshot();
        const xk_status s = fz::timed(what_app, [&] {
            return xk_kv_cache_append(&bad, kc.data(), vc.data(), btable.empty() ? nullptr : btable.data(), btokens,
                                      static_cast<xk_dtype>(bsrc), kp,
                                      src_bf ? static_cast<const void*>(vn_h.data()) : vn_f.data(), bseq.data(), bpos.data());
        });
        fz::expect_rejected(s, what_app, wrong);
        fz::expect_unchanged(kc, k0, what_app, "k_cache");
        fz::expect_unchanged(vc, v0, what_app, "v_cache");
    }
    {
        const xk_status s = fz::timed(what_app, [&] {
            return xk_kv_cache_append(&d, kc.data(), vc.data(), c.table.empty() ? nullptr : c.table.data(), tokens,
                                      src_bf ? XK_DTYPE_BF16 : XK_DTYPE_F32,
                                      src_bf ? static_cast<const void*>(kn_h.data()) : kn_f.data(),
                                      src_bf ? static_cast<const void*>(vn_h.data()) : vn_f.data(), seq.data(), pos.data());
        });
        fz::expect_ok(s, what_app);
        fz::expect_guards(kc, what_app, "k_cache");
        fz::expect_guards(vc, what_app, "v_cache");
    }
    // The cache as it must be: the model (NaN, then each appended row converted).
    std::vector<C> km(nelem, narrow<C>(kNaN)), vm(nelem, narrow<C>(kNaN));
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < d.kv_heads; ++h)
            for (int64_t e = 0; e < hd; ++e) {
                const int64_t o = cache_off(c, seq[t], h, pos[t]) + e;
                km[o] = narrow<C>(src(false, t, h, e));
                vm[o] = narrow<C>(src(true, t, h, e));
            }
    if (nelem && (std::memcmp(km.data(), kc.data(), nelem * sizeof(C)) != 0 || std::memcmp(vm.data(), vc.data(), nelem * sizeof(C)) != 0))
        fz::finding("%s: the cache differs from the appended rows (layout %d, %lld tokens)", what_app, (int)d.layout, (long long)tokens);

    // Cached attention.
    if (T == 0 && in.coin()) return;
    Buf<Q> q(T * qh * hd, in.pick(4));
    {
        Values vals(in, q.size());
        for (size_t i = 0; i < q.size(); ++i) q[i] = narrow<Q>(data_value(vals()));
    }
    const float scale = in.coin() ? 0.0f : static_cast<float>(in.p.ConsumeIntegralInRange<int>(-300, 300)) / 100.0f;
    const bool want_lse = in.coin();
    Buf<Q> o0(T * qh * hd, in.pick(4));
    Buf<float> lse0(want_lse ? T * qh : 0);
    o0.fill(narrow<Q>(4321.0f));
    lse0.fill(-7.0f);
    const bool hostile = T > 0 && in.pick(3) == 2;
    xk_kv_cache_desc ad = d;
    std::vector<int64_t> actx = ctx, acu = cu;
    std::vector<int32_t> atable = c.table;
    int64_t a_qh = qh, a_T = T;
    float a_scale = scale;
    bool q_null = false;
    const char* wrong = "";
    if (hostile) {
        const int64_t b = in.pick(static_cast<int>(d.batch));
        switch (in.pick(7)) {
            case 0: actx[b] = in.coin() ? c.cap + 1 : nq[b] - 1; wrong = "context_lens out of range"; break;
            case 1:
                if (d.layout == XK_KV_PAGED && nq[b] > 0) {
                    atable[b * d.max_blocks_per_seq + in.pick(static_cast<int>((ctx[b] + d.block_size - 1) / d.block_size))] =
                        in.coin() ? static_cast<int32_t>(d.num_blocks) : -5;
                    wrong = "block index past the pool";
                    break;
                }
                [[fallthrough]];
            case 2:
                if (d.kv_heads > 1) {  // (every q_heads is a multiple of kv_heads = 1)
                    a_qh = qh + 1;
                    wrong = "q_heads not a multiple of kv_heads";
                    break;
                }
                [[fallthrough]];
            case 3:
                if (T > 0) { q_null = true; wrong = "q null"; break; }
                [[fallthrough]];
            case 4: a_T = T + 1; wrong = "cu_seqlens_q[batch] != q_tokens"; break;
            case 5: a_scale = in.coin() ? kInf : kNaN; wrong = "scale not finite"; break;
            default: { const int v = in.bad_enum(2); std::memcpy(&ad.dtype, &v, sizeof v); wrong = "cache dtype unknown"; break; }
        }
    }
    Buf<Q> o = o0;
    Buf<float> lse = lse0;
    const xk_status s = fz::timed(what, [&] {
        if constexpr (qbf)
            return xk_cached_attention_bf16(&ad, kc.data(), vc.data(), atable.empty() ? nullptr : atable.data(), a_T, a_qh,
                                            q_null ? nullptr : q.data(), o.data(), want_lse ? lse.data() : nullptr, acu.data(),
                                            actx.data(), a_scale);
        else
            return xk_cached_attention_f32(&ad, kc.data(), vc.data(), atable.empty() ? nullptr : atable.data(), a_T, a_qh,
                                           q_null ? nullptr : q.data(), o.data(), want_lse ? lse.data() : nullptr, acu.data(),
                                           actx.data(), a_scale);
    });
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(o, o0.snapshot(), what, "o");
        fz::expect_unchanged(lse, lse0.snapshot(), what, "lse");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(o, what, "o");
    fz::expect_guards(lse, what, "lse");
    const char* cap_name = "";
    current_cap(&cap_name);
    g_round_p = cbf && rounds_bf16(hd);
    g_round_q = g_round_p && !qbf;  // (an f32 q is rounded to bf16 there)
    const double sc = scale == 0.0f ? static_cast<double>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))) : scale;
    std::vector<double> qr(hd), orow;
    for (int64_t b = 0; b < d.batch; ++b)
        for (int64_t i = 0; i < nq[b]; ++i) {
            const int64_t tok = cu[b] + i, p = ctx[b] - nq[b] + i;
            for (int64_t h = 0; h < qh; ++h) {
                const int64_t kh = h / group;
                for (int64_t e = 0; e < hd; ++e) qr[e] = widen(q[(tok * qh + h) * hd + e]);
                double l = 0, err = 0, vmax = 0;
                int64_t seen = 0;
                oracle_row(
                    qr, ctx[b], hd, sc, [&](int64_t j, int64_t e) { return (double)widen(km[cache_off(c, b, kh, j) + e]); },
                    [&](int64_t j, int64_t e) { return (double)widen(vm[cache_off(c, b, kh, j) + e]); },
                    [&](int64_t j) { return j <= p; }, [](int64_t) { return 0.0; }, orow, l, err, vmax, seen);
                check_row<Q>(what, o.data() + (tok * qh + h) * hd, want_lse ? lse.data() + tok * qh + h : nullptr, orow, l, err,
                             vmax, seen, hd, cap_name);
            }
        }
}

// ---- full form: xk_kv_cache_append_ex (s8 caches, fused RoPE), xk_cached_attention_plan,
// xk_attention_plan --------------------------------------------------------------------------------
// The stored value of element e of a row of a cache buffer (s8: scale * int8).
double stored(const xk_kv_cache_desc& d, const unsigned char* buf, const float* sc, int64_t off, int64_t e) {
    if (d.dtype == XK_DTYPE_F32) { float v; std::memcpy(&v, buf + (off + e) * 4, 4); return v; }
    if (d.dtype == XK_DTYPE_BF16) { uint16_t v; std::memcpy(&v, buf + (off + e) * 2, 2); return fz::from_bf16(v); }
    return static_cast<double>(sc[off / d.head_dim]) * static_cast<int8_t>(buf[off + e]);
}

void op_ex(In& in) {
    const char* cap_name;
    current_cap(&cap_name);
    const char* what_app = "xk_kv_cache_append_ex";
    const char* what = "xk_cached_attention_plan_run";
    CacheSetup c;
    xk_kv_cache_desc_init(&c.d);
    xk_kv_cache_desc& d = c.d;
    d.layout = in.coin() ? XK_KV_CONTIGUOUS : XK_KV_PAGED;
    static const xk_dtype dts[] = {XK_DTYPE_S8, XK_DTYPE_F32, XK_DTYPE_BF16};
    d.dtype = dts[in.pick(3)];
    d.batch = in.dim(1, 2);
    d.kv_heads = in.dim(1, 2);
    d.head_dim = head_dim(in);
    const int64_t group = in.dim(1, 4), qh = d.kv_heads * group, hd = d.head_dim;
    if (d.layout == XK_KV_CONTIGUOUS) {
        d.capacity = in.dim(1, 100);
    } else {
        static const int64_t bs[] = {16, 32, 64};
        d.block_size = bs[in.pick(3)];
        d.max_blocks_per_seq = in.dim(1, 3);
        d.num_blocks = d.batch * d.max_blocks_per_seq + in.pick(3);
        std::vector<int32_t> perm(d.num_blocks);
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t i = d.num_blocks - 1; i > 0; --i) std::swap(perm[i], perm[in.pick(static_cast<int>(i + 1))]);
        c.table.assign(perm.begin(), perm.begin() + d.batch * d.max_blocks_per_seq);
    }
    int64_t nelem = 0, nsc = 0;
    fz::expect_ok(fz::timed("xk_kv_cache_sizes", [&] { return xk_kv_cache_sizes(&d, &nelem, &nsc, &c.cap); }), "xk_kv_cache_sizes");
    const int64_t es = d.dtype == XK_DTYPE_F32 ? 4 : d.dtype == XK_DTYPE_BF16 ? 2 : 1;
    const bool s8 = d.dtype == XK_DTYPE_S8;
    Buf<unsigned char> kc(nelem * es), vc(nelem * es);
    Buf<float> ksc(s8 ? nsc : 0), vsc(s8 ? nsc : 0);
    kc.fill(0);
    vc.fill(0);
    ksc.fill(kNaN);  // a scale never written must never be read
    vsc.fill(kNaN);
    xk_kv_cache cache{kc.data(), vc.data(), c.table.empty() ? nullptr : c.table.data(), s8 ? ksc.data() : nullptr,
                      s8 ? vsc.data() : nullptr};
    std::vector<int64_t> ctx(d.batch), seq, pos;
    for (int64_t b = 0; b < d.batch; ++b) {
        ctx[b] = in.dim(1, c.cap);
        for (int64_t p = 0; p < ctx[b]; ++p) seq.push_back(b), pos.push_back(p);
    }
    const int64_t tokens = static_cast<int64_t>(seq.size());
    Buf<float> kn(tokens * d.kv_heads * hd), vn(tokens * d.kv_heads * hd);
    for (int64_t i = 0; i < tokens * d.kv_heads * hd; ++i) kn.data()[i] = data_value(in), vn.data()[i] = data_value(in);
    xk_kv_append_args a;
    xk_kv_append_args_init(&a);
    a.tokens = tokens;
    a.src_dtype = XK_DTYPE_F32;
    a.k_new = kn.data();
    a.v_new = vn.data();
    a.seq_ids = seq.data();
    a.positions = pos.data();
    const bool rope = hd >= 2 && in.coin();
    const int64_t rdim = rope ? 2 * in.dim(1, hd / 2) : 0;
    std::vector<float> cs(rope ? static_cast<size_t>(c.cap * rdim) : 0);
    for (auto& x : cs) x = static_cast<float>(in.pick(2001) - 1000) / 1000.0f;
    if (rope) {
        a.rope_cos_sin = cs.data();
        a.rope_max_position = c.cap;
        a.rope_rotary_dim = rdim == hd && in.coin() ? 0 : rdim;
        a.rope_style = in.coin() ? XK_ROPE_NEOX : XK_ROPE_GPTJ;
    }
    if (in.pick(3) == 0) {  // hostile append: one thing wrong, nothing written
        xk_kv_append_args b = a;
        xk_kv_cache bc = cache;
        std::vector<int64_t> bpos = pos;
        const xk_kv_cache* cp = &bc;
        const xk_kv_append_args* ap = &b;
        const char* wrong = "";
        switch (in.pick(6)) {
            case 0: cp = nullptr; wrong = "cache null"; break;
            case 1: ap = nullptr; wrong = "args null"; break;
            case 2:
                if (s8) { (in.coin() ? bc.k_scale : bc.v_scale) = nullptr; wrong = "s8 scale null"; break; }
                [[fallthrough]];
            case 3: bpos[in.pick(static_cast<int>(tokens))] = c.cap + in.pick(3); b.positions = bpos.data(); wrong = "position past capacity"; break;
            case 4:
                if (rope) { b.rope_rotary_dim = in.coin() ? 1 : hd + 2; wrong = "rope_rotary_dim bad"; break; }
                [[fallthrough]];
            default: { const int v = in.bad_enum(in.coin() ? 2 : 6); std::memcpy(&b.src_dtype, &v, sizeof v); wrong = "src_dtype bad"; break; }
        }
        const auto k0 = kc.snapshot(), v0 = vc.snapshot(), s0 = ksc.snapshot(), s1 = vsc.snapshot();
        const xk_status st = fz::timed(what_app, [&] { return xk_kv_cache_append_ex(&d, cp, ap); });
        fz::expect_rejected(st, what_app, wrong);
        fz::expect_unchanged(kc, k0, what_app, "k cache");
        fz::expect_unchanged(vc, v0, what_app, "v cache");
        fz::expect_unchanged(ksc, s0, what_app, "k_scale");
        fz::expect_unchanged(vsc, s1, what_app, "v_scale");
        return;
    }
    fz::expect_ok(fz::timed(what_app, [&] { return xk_kv_cache_append_ex(&d, &cache, &a); }), what_app);
    fz::expect_guards(kc, what_app, "k cache");
    fz::expect_guards(vc, what_app, "v cache");
    // Stored rows against the (rotated) sources: f32 within the rotation's rounding, bf16 one
    // rounding more, s8 within half a quantization step (scale = max|row| / 127).
    std::vector<double> row(static_cast<size_t>(hd));
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < d.kv_heads; ++h)
            for (int which = 0; which < 2; ++which) {
                const float* src = (which ? vn : kn).data() + (t * d.kv_heads + h) * hd;
                double mag = 0;
                for (int64_t e = 0; e < hd; ++e) row[e] = src[e];
                if (rope && which == 0) {
                    const float* r = cs.data() + pos[t] * rdim;
                    for (int64_t i = 0; i < rdim / 2; ++i) {
                        const bool neox = a.rope_style == XK_ROPE_NEOX;
                        const int64_t i1 = neox ? i : 2 * i, i2 = neox ? i + rdim / 2 : 2 * i + 1;
                        const double x1 = src[i1], x2 = src[i2];
                        row[i1] = x1 * r[i] - x2 * r[rdim / 2 + i];
                        row[i2] = x2 * r[i] + x1 * r[rdim / 2 + i];
                        mag = std::max(mag, std::fabs(x1) + std::fabs(x2));
                    }
                }
                double amax = 0;
                for (int64_t e = 0; e < hd; ++e) amax = std::max(amax, std::fabs(row[e]));
                const int64_t off = cache_off(c, seq[t], h, pos[t]);
                const unsigned char* buf = (which ? vc : kc).data();
                const float* sc = which ? vsc.data() : ksc.data();
                for (int64_t e = 0; e < hd; ++e) {
                    const double got = stored(d, buf, sc, off, e);
                    double tol = 4 * kU * mag + 1e-38;
                    if (d.dtype == XK_DTYPE_BF16) tol += 0x1p-8 * std::fabs(row[e]);
                    if (s8) tol += amax / 127 * (0.5 + 1e-5) + 4 * kU * amax;
                    if (!fz::close(got, row[e], 0, tol))
                        fz::finding("%s (%s): token %lld head %lld %s[%lld] stored %.9g, want %.9g (+- %.3g)", what_app, cap_name,
                                    (long long)t, (long long)h, which ? "v" : "k", (long long)e, got, row[e], tol);
                }
            }
    // The plan: decode (one query per sequence) over the cache.
    xk_cached_attention_desc pd;
    xk_cached_attention_desc_init(&pd);
    pd.cache = d;
    pd.q_tokens = d.batch;
    pd.q_heads = qh;
    pd.q_dtype = pd.o_dtype = XK_DTYPE_F32;
    pd.kv_splits = in.pick(3);
    xk_cached_attention_plan* plan = nullptr;
    fz::expect_ok(fz::timed("xk_cached_attention_plan_create", [&] { return xk_cached_attention_plan_create(&pd, &plan); }),
                  "xk_cached_attention_plan_create");
    if (!plan || xk_cached_attention_plan_impl_name(plan)[0] == '\0') fz::finding("xk_cached_attention_plan_create: no plan / impl name");
    std::vector<int64_t> cu(d.batch + 1);
    std::iota(cu.begin(), cu.end(), 0);
    Buf<float> q(d.batch * qh * hd), o(d.batch * qh * hd);
    for (int64_t i = 0; i < d.batch * qh * hd; ++i) q.data()[i] = data_value(in);
    o.fill(kNaN);
    std::vector<float> lse(d.batch * qh, kNaN);
    if (in.pick(4) == 0) {  // hostile run
        std::vector<int64_t> bctx = ctx;
        bctx[in.pick(static_cast<int>(d.batch))] = c.cap + 1;
        const auto o0 = o.snapshot();
        const xk_status st = fz::timed(what, [&] {
            return xk_cached_attention_plan_run(plan, &cache, q.data(), o.data(), lse.data(), cu.data(), bctx.data());
        });
        fz::expect_rejected(st, what, "context_lens past capacity");
        fz::expect_unchanged(o, o0, what, "o");
    } else {
        fz::expect_ok(fz::timed(what, [&] {
            return xk_cached_attention_plan_run(plan, &cache, q.data(), o.data(), lse.data(), cu.data(), ctx.data());
        }), what);
        const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
        std::vector<double> qr(static_cast<size_t>(hd)), orow;
        for (int64_t b = 0; b < d.batch; ++b)
            for (int64_t h = 0; h < qh; ++h) {
                const int64_t kh = h / group;
                for (int64_t e = 0; e < hd; ++e) qr[e] = q.data()[(b * qh + h) * hd + e];
                double l = 0, err = 0, vmax = 0;
                int64_t seen = 0;
                oracle_row(
                    qr, ctx[b], hd, scale, [&](int64_t j, int64_t e) { return stored(d, kc.data(), ksc.data(), cache_off(c, b, kh, j), e); },
                    [&](int64_t j, int64_t e) { return stored(d, vc.data(), vsc.data(), cache_off(c, b, kh, j), e); },
                    [](int64_t) { return true; }, [](int64_t) { return 0.0; }, orow, l, err, vmax, seen);
                check_row<float>(what, o.data() + (b * qh + h) * hd, lse.data() + b * qh + h, orow, l, err, vmax, seen, hd, cap_name);
            }
    }
    xk_cached_attention_plan_destroy(plan);
}

// xk_attention_plan against the one-shot call (same kernel, same cut: bitwise equal); a
// descriptor with one thing wrong gives no plan.
// The small one-sequence SDPA descriptor of op_sdpa_plan / op_sdpa_strided (pick_dtype: f32 or
// bf16 by a coin, else f32).
xk_attention_desc small_sdpa_desc(In& in, bool pick_dtype) {
    xk_attention_desc d;
    xk_attention_desc_init(&d);
    d.batch = 1;
    d.q_tokens = in.dim(0, 40);
    d.kv_tokens = in.dim(0, 90);
    d.kv_heads = in.dim(1, 2);
    d.q_heads = d.kv_heads * in.dim(1, 3);
    d.head_dim = head_dim(in);
    d.dtype = d.o_dtype = pick_dtype && in.coin() ? XK_DTYPE_BF16 : XK_DTYPE_F32;
    d.causal = in.coin();
    d.causal_offset = in.dim(0, 5) - 2;
    return d;
}

void op_sdpa_plan(In& in) {
    const xk_attention_desc d = small_sdpa_desc(in, true);
    const bool bf = d.dtype == XK_DTYPE_BF16;
    xk_attention_plan* plan = nullptr;
    if (in.pick(4) == 0) {
        xk_attention_desc b = d;
        const char* wrong = "";
        switch (in.pick(3)) {
            case 0: b.q_heads = d.kv_heads * 2 + 1; b.kv_heads = 2; wrong = "q_heads not a multiple of kv_heads"; break;
            // (a huge positive head_dim is a valid descriptor for a plan: only the call's buffers
            // bound it, so the plan's hostile head_dim is one that is never valid)
            case 1: {
                const int64_t v[] = {0, -1, -7, std::numeric_limits<int64_t>::min()};
                b.head_dim = v[in.pick(4)];
                wrong = "head_dim bad";
                break;
            }
            default: { const int v = in.bad_enum(2); std::memcpy(&b.dtype, &v, sizeof v); wrong = "dtype bad"; break; }
        }
        plan = reinterpret_cast<xk_attention_plan*>(&b);  // must be reset to NULL
        fz::expect_rejected(fz::timed("xk_attention_plan_create", [&] { return xk_attention_plan_create(&b, &plan); }),
                            "xk_attention_plan_create", wrong);
        if (plan) fz::finding("xk_attention_plan_create: rejected (%s) but *plan is not NULL", wrong);
        return;
    }
    fz::expect_ok(fz::timed("xk_attention_plan_create", [&] { return xk_attention_plan_create(&d, &plan); }), "xk_attention_plan_create");
    const int64_t nq = d.q_tokens * d.q_heads * d.head_dim, nk = d.kv_tokens * d.kv_heads * d.head_dim;
    std::vector<float> qf(nq), kf(nk), vf(nk);
    for (auto& x : qf) x = data_value(in);
    for (auto& x : kf) x = data_value(in);
    for (auto& x : vf) x = data_value(in);
    std::vector<uint16_t> qh(nq), kh(nk), vh(nk);
    for (int64_t i = 0; i < nq; ++i) qh[i] = fz::to_bf16(qf[i]);
    for (int64_t i = 0; i < nk; ++i) kh[i] = fz::to_bf16(kf[i]), vh[i] = fz::to_bf16(vf[i]);
    std::vector<float> o1(nq, kNaN), o2(nq, kNaN), l1(d.q_tokens * d.q_heads, kNaN), l2 = l1;
    std::vector<uint16_t> h1(nq), h2(nq);
    const void* q = bf ? static_cast<const void*>(qh.data()) : qf.data();
    const void* k = bf ? static_cast<const void*>(kh.data()) : kf.data();
    const void* v = bf ? static_cast<const void*>(vh.data()) : vf.data();
    fz::expect_ok(fz::timed("xk_attention_plan_run", [&] {
        return xk_attention_plan_run(plan, q, k, v, bf ? static_cast<void*>(h1.data()) : o1.data(), l1.data(), nullptr,
                                     nullptr, nullptr, nullptr);
    }), "xk_attention_plan_run");
    fz::expect_ok(fz::timed("xk_attention_f32/bf16", [&] {
        return bf ? xk_attention_bf16(1, d.q_tokens, d.kv_tokens, d.q_heads, d.kv_heads, d.head_dim, qh.data(), kh.data(), vh.data(),
                                      h2.data(), l2.data(), nullptr, nullptr, 0.0f, d.causal, d.causal_offset, nullptr, 0)
                  : xk_attention_f32(1, d.q_tokens, d.kv_tokens, d.q_heads, d.kv_heads, d.head_dim, qf.data(), kf.data(), vf.data(),
                                     o2.data(), l2.data(), nullptr, nullptr, 0.0f, d.causal, d.causal_offset, nullptr, 0);
    }), "xk_attention_f32/bf16");
    // (memcmp of empty vectors would pass null pointers: UB even for 0 bytes)
    auto differ = [](const void* a, const void* b, size_t n) { return n != 0 && std::memcmp(a, b, n) != 0; };
    if ((bf ? differ(h1.data(), h2.data(), size_t(nq) * 2) : differ(o1.data(), o2.data(), size_t(nq) * 4)) ||
        differ(l1.data(), l2.data(), l1.size() * 4))
        fz::finding("xk_attention_plan_run: differs from the one-shot call (q_tokens %lld, kv_tokens %lld, hd %lld)",
                    (long long)d.q_tokens, (long long)d.kv_tokens, (long long)d.head_dim);
    xk_attention_plan_destroy(plan);
}

// xk_attention_strided / xk_attention_plan_create_strided: q / k / v / o at padded token and head
// strides (q / k / v as slices of one buffer, as a fused QKV projection lays them out) give the
// bits of the packed one-shot call; o's padding stays untouched. Hostile: a stride below the
// packed one (head < head_dim, token < the row), a negative one, a null desc: rejected, o unchanged,
// and no plan.
void op_sdpa_strided(In& in) {
    const xk_attention_desc d = small_sdpa_desc(in, false);
    const int64_t D = d.head_dim, Hq = d.q_heads, Hkv = d.kv_heads, Tq = d.q_tokens, Tk = d.kv_tokens;
    const int64_t nq = Tq * Hq * D, nk = Tk * Hkv * D;
    std::vector<float> qf(nq), kf(nk), vf(nk);
    for (auto& x : qf) x = data_value(in);
    for (auto& x : kf) x = data_value(in);
    for (auto& x : vf) x = data_value(in);
    std::vector<float> want(nq, kNaN), wl(Tq * Hq, kNaN);
    fz::expect_ok(fz::timed("xk_attention_f32", [&] {
        return xk_attention_f32(1, Tq, Tk, Hq, Hkv, D, qf.data(), kf.data(), vf.data(), want.data(), wl.data(), nullptr,
                                nullptr, 0.0f, d.causal, d.causal_offset, nullptr, 0);
    }), "xk_attention_f32");
    // Strided copies: head strides D + hp, token strides (q | k | v rows of one shared buffer when
    // the token counts match) + tp.
    xk_attention_strides st;
    xk_attention_strides_init(&st);
    const int64_t hp = in.pick(3) == 0 ? in.pick(5) : 0, tp = in.pick(5);
    const int64_t hs = D + hp;
    st.q_head = st.k_head = st.v_head = hs;
    st.o_head = in.coin() ? 0 : D + in.pick(3);
    st.q_token = Hq * hs + tp, st.k_token = st.v_token = Hkv * hs + tp;
    st.o_token = st.o_head == 0 ? (in.coin() ? 0 : Hq * D + in.pick(3)) : Hq * st.o_head + in.pick(3);
    const int64_t oh = st.o_head ? st.o_head : D, ot = st.o_token ? st.o_token : Hq * oh;
    std::vector<float> qs(std::max<int64_t>(Tq, 1) * st.q_token, kNaN), ks(std::max<int64_t>(Tk, 1) * st.k_token, kNaN),
        vs(std::max<int64_t>(Tk, 1) * st.v_token, kNaN);
    for (int64_t t = 0; t < Tq; ++t)
        for (int64_t h = 0; h < Hq; ++h)
            std::memcpy(&qs[t * st.q_token + h * hs], &qf[(t * Hq + h) * D], D * 4);
    for (int64_t t = 0; t < Tk; ++t)
        for (int64_t h = 0; h < Hkv; ++h) {
            std::memcpy(&ks[t * st.k_token + h * hs], &kf[(t * Hkv + h) * D], D * 4);
            std::memcpy(&vs[t * st.v_token + h * hs], &vf[(t * Hkv + h) * D], D * 4);
        }
    Buf<float> o(static_cast<size_t>(std::max<int64_t>(Tq, 1) * ot), in.pick(3));
    o.fill(-7.0f);
    if (in.pick(3) == 0) {
        xk_attention_strides b = st;
        const char* wrong = "";
        bool bad_desc = false;
        switch (in.pick(4)) {
            case 0:
                if (Hq < 2) return;
                b.q_head = D - 1 - in.pick(static_cast<int>(std::min<int64_t>(D, 4)));
                if (b.q_head == 0) b.q_head = -1;
                wrong = "q head stride < head_dim";
                break;
            case 1:
                if (Tk < 2) return;
                b.k_token = (Hkv - 1) * hs + D - 1 - in.pick(3);  // (0 would be "packed")
                if (b.k_token == 0) b.k_token = -1;
                wrong = "k token stride < its row";
                break;
            case 2: b.v_head = -1 - in.pick(5); wrong = "negative v head stride"; break;
            default: bad_desc = true; wrong = "desc null"; break;
        }
        const auto before = o.snapshot();
        fz::expect_rejected(fz::timed("xk_attention_strided", [&] {
            return xk_attention_strided(bad_desc ? nullptr : &d, &b, qs.data(), ks.data(), vs.data(), o.data(), nullptr,
                                        nullptr, nullptr, nullptr, nullptr);
        }), "xk_attention_strided", wrong);
        fz::expect_unchanged(o, before, "xk_attention_strided", "o");
        xk_attention_plan* plan = reinterpret_cast<xk_attention_plan*>(&b);  // must be reset to NULL
        fz::expect_rejected(fz::timed("xk_attention_plan_create_strided", [&] {
            return xk_attention_plan_create_strided(bad_desc ? nullptr : &d, &b, &plan);
        }), "xk_attention_plan_create_strided", wrong);
        if (plan) fz::finding("xk_attention_plan_create_strided: rejected (%s) but *plan is not NULL", wrong);
        return;
    }
    const bool use_plan = in.coin();
    if (use_plan) {
        xk_attention_plan* plan = nullptr;
        fz::expect_ok(fz::timed("xk_attention_plan_create_strided", [&] { return xk_attention_plan_create_strided(&d, &st, &plan); }),
                      "xk_attention_plan_create_strided");
        fz::expect_ok(fz::timed("xk_attention_plan_run", [&] {
            return xk_attention_plan_run(plan, qs.data(), ks.data(), vs.data(), o.data(), nullptr, nullptr, nullptr, nullptr, nullptr);
        }), "xk_attention_plan_run (strided)");
        xk_attention_plan_destroy(plan);
    } else {
        fz::expect_ok(fz::timed("xk_attention_strided", [&] {
            return xk_attention_strided(&d, &st, qs.data(), ks.data(), vs.data(), o.data(), nullptr, nullptr, nullptr,
                                        nullptr, nullptr);
        }), "xk_attention_strided");
    }
    fz::expect_guards(o, "xk_attention_strided", "o");
    for (int64_t t = 0; t < Tq; ++t)
        for (int64_t e = 0; e < ot; ++e) {
            const int64_t h = e / oh, dd = e % oh;
            const float got = o[static_cast<size_t>(t * ot + e)];
            if (h < Hq && dd < D) {
                const float w = want[(t * Hq + h) * D + dd];
                if (std::memcmp(&got, &w, 4) != 0)
                    fz::finding("xk_attention_strided: o[%lld, %lld, %lld] = %g differs from the packed call's %g (plan %d)",
                                (long long)t, (long long)h, (long long)dd, got, w, int(use_plan));
            } else if (got != -7.0f) {
                fz::finding("xk_attention_strided: wrote o's padding at token %lld, element %lld", (long long)t, (long long)e);
            }
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 8 && in.more(); ++calls) {
        switch (in.pick(10)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(1 + in.pick(2)); }), "xk_set_num_threads"); break;
            case 2: op_sdpa<float>(in); break;
            case 3: op_sdpa<uint16_t>(in); break;
            case 4: op_cache<float, float>(in); break;
            case 5: op_cache<uint16_t, float>(in); break;
            case 6: op_cache<uint16_t, uint16_t>(in); break;
            case 8: op_ex(in); break;
            case 9: in.coin() ? op_sdpa_plan(in) : op_sdpa_strided(in); break;
            default: op_cache<float, uint16_t>(in); break;
        }
    }
    return 0;
}
