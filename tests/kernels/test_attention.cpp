// Attention: every ISA's selection against a naive double-precision attention: varlen batches,
// causal with offsets, additive masks (incl. -inf), seqused_k padding, MHA / GQA / MQA, head_dim
// 64 / 80 / 96 / 128 / 256 and odd ones (reference only), lengths 1 and odd, strided q / k / v /
// o, misaligned pointers; the KV cache (contiguous and paged with shuffled block tables, f32 and
// bf16), append, decode and chunked prefill over it (equal to one-shot prefill), decode split over
// threads (flash-decoding) equal to unsplit, 1 and 2 threads; bad input naming the argument with
// nothing written.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/test_util.hpp"
#include "kernels/attention/attention.hpp"
#include "kernels/gemm/amx_tile.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/attention.hpp"
#include "xk/c/attention.h"
#include "xk/llm.hpp"
#include "kernels/softmax/softmax.hpp"
#include "xk/runtime.hpp"

using namespace xk;

// Whether the level the sweep is at runs bf16 caches on AMX tiles or their AVX512-BF16 form
// (amx:bf16, dpbf16:bf16: q and p rounded to bf16).
static bool g_amx_bf16 = false;

// for_each_isa, skipping the ISA levels that select the attention implementations (f32 and bf16
// caches) an earlier level of the same sweep already ran (avx512 and avx512_vnni pick intr:avx512;
// avx512_bf16 picks dpbf16:bf16 for bf16 caches).
static void for_each_isa(const std::function<void(xk::Isa)>& body) {
    std::vector<std::string> seen;
    xk::test::for_each_isa([&](xk::Isa isa) {
        xk::detail::AttnKernelDesc kd;
        kd.head_dim = 64;
        std::string name = xk::detail::attention_registry().select(kd, isa).name;
        kd.kv_dtype = xk::DType::bf16;
        const std::string bname = xk::detail::attention_registry().select(kd, isa).name;
        name += "," + bname;
        if (std::find(seen.begin(), seen.end(), name) != seen.end()) return;
        seen.push_back(name);
        g_amx_bf16 = bname.rfind("amx", 0) == 0 || bname.rfind("dpbf16", 0) == 0;
        body(isa);
        g_amx_bf16 = false;
    });
}

// Tolerances against the exact (double) attention of the stored inputs (values in [-1, 1), q
// and k scaled so scores span a few units):
//   f32 output:  fp32 dot products and sums over <= ~600 keys, a vector exp of ~2 ulp:
//                atol 2e-5, rtol 2e-4 on o; lse atol 1e-4.
//   bf16 output: one more rounding to bf16 (<= 2^-8 relative): atol 2e-5, rtol 2^-8 + 2e-4.
//   (bf16 q / k / v are exact inputs: the oracle reads the same bf16 values.)
constexpr double kF32Atol = 2e-5, kF32Rtol = 2e-4, kLseAtol = 1e-4;
constexpr double kBf16Atol = 2e-5, kBf16Rtol = 1.0 / 256 + 2e-4;
//   s8 cache: against the dequantized cache (scale * int8, what the kernel reads): the f32
//                tolerances; against the unquantized f32 K / V (values in [-1, 1), head_dim 128,
//                per-row scale max|x| / 127, error <= scale / 2 per element): atol 2e-2.
constexpr double kS8QuantAtol = 2e-2;
//   AMX (amx:bf16, bf16 caches, >= 16 rows; the emulated tiles here, the real ones on AMX
//                machines): q rounded to bf16 (exact for bf16 q: the kernel divides the scale
//                out first) and each p = exp(s - m) in [0, 1] rounded to bf16 (relative 2^-9)
//                before P.V, l summed from the unrounded p: |o - o_exact| <= 2^-9 max|v| from
//                p, plus the bf16 q rounding of f32 queries (2^-9 |q| per element, scores within
//                ~2^-9 * |s|): atol 2^-9 + 2e-5 (observed <= 9e-4 on the emulated cases), lse
//                unchanged for bf16 q (kLseAtol), 2e-3 for f32 q.
constexpr double kAmxAtol = 1.0 / 512 + 2e-5, kAmxLseAtolF32q = 2e-3;

namespace {

// Sanitizer builds run smaller sweeps (every path still taken).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

const double kNinf = -std::numeric_limits<double>::infinity();

float rnd(std::mt19937_64& g, double lo = -1, double hi = 1) {
    return static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(g));
}

// Storage of f32 or bf16 values (bf16: rounded at creation; value() reads what is stored).
struct Tensor {
    DType t = DType::f32;
    std::vector<float> f;
    std::vector<uint16_t> h;
    size_t misalign = 0;  // elements of offset inside the storage
    Tensor() = default;
    Tensor(DType type, size_t n, size_t mis = 0) : t(type), misalign(mis) {
        if (t == DType::f32) f.assign(n + mis, 0.0f); else h.assign(n + mis, 0);
    }
    void fill(std::mt19937_64& g, double lo = -1, double hi = 1) {
        for (auto& x : f) x = rnd(g, lo, hi);
        for (auto& x : h) x = bf16(rnd(g, lo, hi)).bits;
    }
    void* data() { return t == DType::f32 ? static_cast<void*>(f.data() + misalign) : static_cast<void*>(h.data() + misalign); }
    double value(size_t i) const {
        return t == DType::f32 ? f[i + misalign] : bf16::from_bits(h[i + misalign]).to_float();
    }
    void set(size_t i, float v) {
        if (t == DType::f32) f[i + misalign] = v; else h[i + misalign] = bf16(v).bits;
    }
    size_t size() const { return (t == DType::f32 ? f.size() : h.size()) - misalign; }
};

// Naive attention of one query row over keys [0, nk) with visibility vis(j) and mask(j).
template <class K, class Vf, class Vis, class Mask>
void naive_row(const std::vector<double>& q, int64_t nk, int64_t hd, double scale, K key, Vf val, Vis vis, Mask mask,
               std::vector<double>& o, double& lse) {
    std::vector<double> s(static_cast<size_t>(nk), kNinf);
    double mx = kNinf;
    for (int64_t j = 0; j < nk; ++j) {
        if (!vis(j)) continue;
        double d = 0;
        for (int64_t e = 0; e < hd; ++e) d += q[e] * key(j, e);
        s[j] = scale * d + mask(j);
        mx = std::max(mx, s[j]);
    }
    o.assign(static_cast<size_t>(hd), 0.0);
    if (mx == kNinf) {
        lse = kNinf;
        return;
    }
    double sum = 0;
    for (int64_t j = 0; j < nk; ++j) {
        if (s[j] == kNinf) continue;
        const double p = std::exp(s[j] - mx);
        sum += p;
        for (int64_t e = 0; e < hd; ++e) o[e] += p * val(j, e);
    }
    for (auto& x : o) x /= sum;
    lse = mx + std::log(sum);
}

::testing::AssertionResult close(const Tensor& got, const std::vector<double>& want, const std::vector<size_t>& idx,
                                 double atol, double rtol) {
    size_t bad = 0;
    std::string msg;
    for (size_t i = 0; i < idx.size(); ++i) {
        const double g = got.value(idx[i]), w = want[i];
        if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
            if (bad < 5) msg += "\n  [" + std::to_string(idx[i]) + "] got " + std::to_string(g) + " want " + std::to_string(w);
            ++bad;
        }
    }
    if (!bad) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << idx.size() << " differ:" << msg;
}

::testing::AssertionResult close_lse(const std::vector<float>& got, const std::vector<double>& want) {
    for (size_t i = 0; i < got.size(); ++i) {
        const bool ok = (want[i] == kNinf && got[i] == -std::numeric_limits<float>::infinity()) ||
                        std::fabs(got[i] - want[i]) <= kLseAtol;
        if (!ok)
            return ::testing::AssertionFailure() << "lse[" << i << "] got " << got[i] << " want " << want[i];
    }
    return ::testing::AssertionSuccess();
}

// ---- xk::attention -----------------------------------------------------------------------------

struct SdpaCase {
    std::vector<int64_t> lq, lk;       // per sequence
    std::vector<int64_t> used;         // seqused_k (empty = none)
    int64_t q_heads = 4, kv_heads = 2, hd = 64;
    DType dtype = DType::f32, o_dtype = DType::f32;
    bool causal = false;
    int64_t offset = 0;
    bool mask = false;
    int64_t pad = 0;                   // extra elements per token row (strides)
    size_t misalign = 0;
    double scale = 0.3;
};

void run_sdpa(const SdpaCase& c, uint64_t seed) {
    std::mt19937_64 g(seed);
    const int64_t B = static_cast<int64_t>(c.lq.size());
    std::vector<int64_t> cq(B + 1, 0), ck(B + 1, 0);
    for (int64_t b = 0; b < B; ++b) {
        cq[b + 1] = cq[b] + c.lq[b];
        ck[b + 1] = ck[b] + c.lk[b];
    }
    const int64_t Tq = cq[B], Tk = ck[B], hd = c.hd;
    const int64_t qts = c.q_heads * hd + c.pad, kts = c.kv_heads * hd + c.pad;
    Tensor q(c.dtype, Tq * qts, c.misalign), k(c.dtype, Tk * kts, c.misalign), v(c.dtype, Tk * kts, c.misalign);
    q.fill(g);
    k.fill(g);
    v.fill(g);
    Tensor o(c.o_dtype, Tq * qts, c.misalign);
    const int64_t max_k = Tk + 1;
    std::vector<float> mask;
    if (c.mask) {
        mask.resize(static_cast<size_t>(Tq * max_k));
        for (auto& x : mask) x = (g() % 7 == 0) ? -std::numeric_limits<float>::infinity() : rnd(g, -2, 2);
    }
    std::vector<float> lse(static_cast<size_t>(Tq * c.q_heads), 123.0f);
    AttentionDesc d;
    d.batch = B;
    d.q_tokens = Tq;
    d.kv_tokens = Tk;
    d.q_heads = c.q_heads;
    d.kv_heads = c.kv_heads;
    d.head_dim = hd;
    d.dtype = c.dtype;
    d.o_dtype = c.o_dtype;
    d.scale = static_cast<float>(c.scale);
    d.causal = c.causal;
    d.causal_offset = c.offset;
    d.has_mask = c.mask;
    d.mask_stride = c.mask ? max_k : 0;
    d.q_token_stride = d.o_token_stride = qts;
    d.k_token_stride = d.v_token_stride = kts;
    AttentionArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = o.data();
    a.lse = lse.data();
    a.mask = c.mask ? mask.data() : nullptr;
    a.cu_seqlens_q = cq.data();
    a.cu_seqlens_k = ck.data();
    a.seqused_k = c.used.empty() ? nullptr : c.used.data();
    attention(d, a);

    const int64_t group = c.q_heads / c.kv_heads;
    std::vector<double> want, want_lse;
    std::vector<size_t> idx;
    std::vector<double> qr(static_cast<size_t>(hd)), orow;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t nk = c.used.empty() ? c.lk[b] : c.used[b];
        for (int64_t i = 0; i < c.lq[b]; ++i) {
            const int64_t tok = cq[b] + i;
            for (int64_t h = 0; h < c.q_heads; ++h) {
                const int64_t kh = h / group;
                for (int64_t e = 0; e < hd; ++e) qr[e] = q.value(tok * qts + h * hd + e);
                double l = 0;
                naive_row(
                    qr, nk, hd, static_cast<double>(static_cast<float>(c.scale)),
                    [&](int64_t j, int64_t e) { return k.value((ck[b] + j) * kts + kh * hd + e); },
                    [&](int64_t j, int64_t e) { return v.value((ck[b] + j) * kts + kh * hd + e); },
                    [&](int64_t j) { return !c.causal || j <= i + c.offset; },
                    [&](int64_t j) { return c.mask ? static_cast<double>(mask[tok * max_k + j]) : 0.0; }, orow, l);
                for (int64_t e = 0; e < hd; ++e) {
                    want.push_back(orow[e]);
                    idx.push_back(static_cast<size_t>(tok * qts + h * hd + e));
                }
                want_lse.push_back(l);
            }
        }
    }
    const bool bf = c.o_dtype == DType::bf16;
    const double atol = g_amx_bf16 && c.dtype == DType::bf16 ? kAmxAtol : (bf ? kBf16Atol : kF32Atol);
    EXPECT_TRUE(close(o, want, idx, atol, bf ? kBf16Rtol : kF32Rtol));
    EXPECT_TRUE(close_lse(lse, want_lse));
    // Padding between rows untouched.
    if (c.pad > 0 && Tq > 0) EXPECT_EQ(o.value(static_cast<size_t>(c.q_heads * hd)), 0.0);
}

TEST(Attention, SdpaShapesAgainstNaive) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t seed = 1;
            for (DType dt : {DType::f32, DType::bf16})
                for (int64_t hd : std::vector<int64_t>(kSanitized ? std::vector<int64_t>{80, 256, 7}
                                                                  : std::vector<int64_t>{64, 80, 96, 128, 256, 24, 7})) {
                    SdpaCase c;
                    c.lq = {1, 17, 5};
                    c.lk = {1, 33, 70};
                    c.hd = hd;
                    c.dtype = dt;
                    c.o_dtype = dt;
                    c.q_heads = 4;
                    c.kv_heads = 2;
                    SCOPED_TRACE("hd=" + std::to_string(hd) + " dtype=" + dtype_name(dt));
                    run_sdpa(c, seed++);
                    c.causal = true;
                    c.offset = 40;
                    run_sdpa(c, seed++);
                }
        });
    }
    set_num_threads(0);
}

TEST(Attention, SdpaCausalMaskPaddingGqaMqa) {
    for_each_isa([&](Isa) {
        uint64_t seed = 100;
        for (auto heads : std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {8, 2}, {6, 1}, {1, 1}})
            for (int variant = 0; variant < 6; ++variant) {
                SdpaCase c;
                c.q_heads = heads.first;
                c.kv_heads = heads.second;
                c.hd = 128;
                c.lq = {7, 1, 130};
                c.lk = {7, 19, 130};
                c.dtype = variant % 2 ? DType::bf16 : DType::f32;
                c.o_dtype = variant == 3 ? DType::f32 : c.dtype;
                c.causal = variant != 2;
                c.offset = variant == 4 ? -3 : (variant == 5 ? 5 : 0);  // -3: first rows see nothing
                c.mask = variant >= 2;
                if (variant == 1 || variant == 5) c.used = {5, 0, 77};
                c.pad = variant == 3 ? 5 : 0;
                c.misalign = variant == 4 ? 1 : 0;
                SCOPED_TRACE("heads=" + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) +
                             " variant=" + std::to_string(variant));
                run_sdpa(c, seed++);
            }
    });
}

// Scores spread over +-40 (scale 4, std ~11): the prefill kernels' running max moves by more than its
// lazy slack across tiles (rescaled acc / l), probabilities far below the max underflow to 0,
// -inf mask entries; with and without the next-tile prefetch (XK_ATTN_PREFILL_PF's two forms).
TEST(Attention, PrefillWideScoreRange) {
    for_each_isa([&](Isa isa) {
        uint64_t seed = 300;
        for (int pf : {0, 1}) {
            if (pf && isa != Isa::avx512) continue;
            xk::detail::attn_prefill_prefetch_override(pf);
            for (int variant = 0; variant < 3; ++variant) {
                SdpaCase c;
                c.q_heads = 4;
                c.kv_heads = 2;
                c.hd = 64;
                c.lq = {kSanitized ? 70 : 200};
                c.lk = c.lq;
                c.dtype = variant == 1 ? DType::bf16 : DType::f32;
                c.o_dtype = c.dtype;
                c.causal = variant != 2;
                c.mask = variant == 2;
                c.scale = 4.0;
                SCOPED_TRACE("variant=" + std::to_string(variant) + " pf=" + std::to_string(pf));
                run_sdpa(c, seed++);
            }
        }
        xk::detail::attn_prefill_prefetch_override(-1);
    });
}

// ---- the AMX prefill kernel's data flow (emulated tiles: runs without AMX) ----------------------

// The tile model (amx_tile_emulate) over the AMX GEMM's own packing of B (both trans_b forms: the
// attention packs K like B^T and V like B), A in place with a packed K tail, then accumulating:
// the layouts and semantics the attention kernel relies on, against a double GEMM.
TEST(Attention, AmxTileModelMatchesGemmPacking) {
    const int64_t M = 32, N = 45, K = 70, nkb = (K + 31) / 32;
    std::mt19937_64 g(5);
    std::vector<uint16_t> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(K * N));
    for (auto& x : A) x = bf16(rnd(g)).bits;
    for (auto& x : B) x = bf16(rnd(g)).bits;
    auto val = [](uint16_t h) { return static_cast<double>(bf16::from_bits(h).to_float()); };
    std::vector<uint16_t> tail(32 * 32, 0);  // k 64..69 of A's rows, zero-padded
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 64; k < K; ++k) tail[static_cast<size_t>(m * 32 + k - 64)] = A[static_cast<size_t>(m * K + k)];
    for (Trans tb : {Trans::N, Trans::T}) {
        detail::GemmSpec s;
        s.M = M;
        s.N = N;
        s.K = K;
        s.trans_b = tb;
        s.lda = K;
        s.ldb = tb == Trans::T ? K : N;
        s.ldc = N;
        s.a_type = s.b_type = DType::bf16;
        auto packed = detail::create_gemm_amx_bf16(s)->pack_b(B.data());  // (generates, runs no tile code)
        for (int64_t nb = 0; nb * 32 < N; ++nb) {
            alignas(64) float acc[32 * 32];
            detail::AmxTileArgs ta;
            ta.a = A.data();
            ta.lda = K * 2;
            ta.a_step = 64;
            ta.steps = K / 32;
            ta.a_tail = tail.data();
            ta.b = static_cast<const uint8_t*>(packed->data) + nb * nkb * detail::kAmxTileStepBytes;
            ta.acc = acc;
            for (int pass = 0; pass < 2; ++pass) {  // the second pass accumulates: twice the product
                ta.accumulate = pass;
                detail::amx_tile_emulate(&ta);
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < 32; ++n) {
                        double want = 0;
                        for (int64_t k = 0; nb * 32 + n < N && k < K; ++k)
                            want += val(A[static_cast<size_t>(m * K + k)]) *
                                    val(B[static_cast<size_t>(tb == Trans::T ? (nb * 32 + n) * K + k : k * N + nb * 32 + n)]);
                        ASSERT_NEAR(acc[m * 32 + n], (pass + 1) * want, 1e-5 * (pass + 1) * K)
                            << "trans_b=" << (tb == Trans::T) << " nb=" << nb << " m=" << m << " n=" << n;
                    }
            }
        }
    }
}

struct AmxTaskCase {
    int64_t tokens, group, hd, nk;
    int64_t offset = INT64_MIN;  // causal: token t sees keys j <= t + offset (INT64_MIN: all)
    bool mask = false, f32q = false;
    int64_t block_size = 0;      // paged
    int64_t j_begin = 0, j_end = -1;
};

// One task through create_attention_amx(kd, /*emulate_tiles=*/true, tile_acc) (dp: the same data
// flow on VDPBF16PS, create_attention_dpbf16, with its decode (< 16 rows) on VDPBF16PS as dp_decode
// says: 1 / 0 / -1 the default) against attention_reference (normalised o and lse: the running max
// differs by the rounding of the scores).
void run_amx_task(const AmxTaskCase& c, uint64_t seed, int tile_acc, bool dp = false, int dp_decode = -1) {
    std::mt19937_64 g(seed);
    const int64_t R = c.tokens * c.group, hd = c.hd, stride = hd + 16;  // padded key rows
    const float scale = 0.3f;
    // K / V: contiguous rows, or blocks of a shuffled pool
    const int64_t nblocks = c.block_size ? (c.nk + c.block_size - 1) / c.block_size : 0;
    const int64_t rows_alloc = c.block_size ? (nblocks + 2) * c.block_size : c.nk;
    std::vector<uint16_t> kc(static_cast<size_t>(rows_alloc * stride)), vc(kc.size());
    for (auto& x : kc) x = bf16(rnd(g)).bits;
    for (auto& x : vc) x = bf16(rnd(g)).bits;
    std::vector<int32_t> table(static_cast<size_t>(nblocks + 2));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), g);
    std::vector<float> q(static_cast<size_t>(R * hd));
    for (auto& x : q) x = (c.f32q ? rnd(g) : bf16(rnd(g)).to_float()) * scale;
    std::vector<int64_t> lim(static_cast<size_t>(c.tokens));
    for (int64_t t = 0; t < c.tokens; ++t)
        lim[t] = c.offset == INT64_MIN ? c.nk : std::clamp<int64_t>(t + c.offset + 1, 0, c.nk);
    std::vector<float> mask(static_cast<size_t>(c.tokens * (c.nk + 3)));
    for (auto& x : mask) x = g() % 6 == 0 ? -std::numeric_limits<float>::infinity() : rnd(g, -2, 2);
    detail::AttnTask t;
    t.tokens = c.tokens;
    t.group = c.group;
    t.head_dim = hd;
    t.q = q.data();
    t.scale = scale;
    t.limit = lim.data();
    if (c.mask) {
        t.mask = mask.data();
        t.mask_stride = c.nk + 3;
    }
    t.kv.k = kc.data();
    t.kv.v = vc.data();
    t.kv.k_stride = t.kv.v_stride = stride;
    if (c.block_size) {
        t.kv.blocks = table.data();
        t.kv.block_size = c.block_size;
        t.kv.block_elems = c.block_size * stride;
    }
    t.j_begin = c.j_begin;
    t.j_end = c.j_end < 0 ? c.nk : c.j_end;
    std::vector<float> scratch(static_cast<size_t>(detail::attn_scratch_floats(R, hd)));
    t.scratch = scratch.data();
    detail::AttnKernelDesc kd;
    kd.head_dim = hd;
    kd.kv_dtype = DType::bf16;
    std::vector<float> mr(R), lr(R), ar(static_cast<size_t>(R * hd)), me(R), le(R), ae(ar.size(), 7.0f);
    detail::attention_reference(kd, t, mr.data(), lr.data(), ar.data());
    std::fill(scratch.begin(), scratch.end(), std::numeric_limits<float>::quiet_NaN());  // reads only what it writes
    (dp ? detail::create_attention_dpbf16(kd, tile_acc, dp_decode) : detail::create_attention_amx(kd, true, tile_acc))
        ->run(t, me.data(), le.data(), ae.data());
    const double lse_tol = c.f32q ? kAmxLseAtolF32q : kLseAtol;
    for (int64_t r = 0; r < R; ++r) {
        if (lr[r] == 0.0f) {  // sees no key of the range
            ASSERT_EQ(le[r], 0.0f) << "r=" << r;
            ASSERT_EQ(me[r], -std::numeric_limits<float>::infinity()) << "r=" << r;
            for (int64_t d = 0; d < hd; ++d) ASSERT_EQ(ae[r * hd + d], 0.0f) << "r=" << r;
            continue;
        }
        ASSERT_GT(le[r], 0.0f) << "r=" << r;
        ASSERT_NEAR(me[r] + std::log(le[r]), mr[r] + std::log(lr[r]), lse_tol) << "r=" << r;
        for (int64_t d = 0; d < hd; ++d)
            ASSERT_NEAR(ae[r * hd + d] / le[r], ar[r * hd + d] / lr[r], kAmxAtol) << "r=" << r << " d=" << d;
    }
}

TEST(Attention, AmxPrefillEmulatedTilesAgainstReference) {
    if (!isa_supported(Isa::avx512_bf16)) GTEST_SKIP() << "the kernel's vector code needs AVX512_BF16";
    std::vector<AmxTaskCase> cases = {
        {17, 1, 64, 17, 0},                                    // causal square, 1..17 keys per row
        {33, 4, 128, 100, 67, true},                           // GQA 4, causal bottom-right, mask
        {20, 1, 64, 1, -3},                                    // one key, first rows see nothing
        {16, 1, 96, 65, INT64_MIN, true},                      // one key past a 64-key tile
        {9, 2, 128, 130, 121, false, false, 64, 64, 130},      // paged 64, a split key range
        {48, 1, 64, 77, 29, false, true, 32},                  // paged 32, f32 q
        {17, 2, 48, 70, 53},                                   // head_dim 48: the avx512 fallback
        {3, 4, 64, 40, 37},                                    // 12 rows: the decode path
        {48, 2, 64, 600, 560, true},                           // 3 key tiles of 256, 3 row blocks, mask
        {40, 2, 64, 333, 300},                                 // 2 key tiles, the last one short
    };
    if (!kSanitized) {
        cases.push_back({100, 1, 64, 100, INT64_MIN, false, false, 16});  // paged 16, non-causal
        cases.push_back({40, 3, 256, 150, 110, true});                  // head_dim 256
    }
    uint64_t seed = 900;
    for (const AmxTaskCase& c : cases) {
        SCOPED_TRACE("tokens=" + std::to_string(c.tokens) + " group=" + std::to_string(c.group) +
                     " hd=" + std::to_string(c.hd) + " nk=" + std::to_string(c.nk));
        for (int tile_acc : {1, 0}) {  // P V added on the tiles / with AVX-512
            run_amx_task(c, seed, tile_acc);
            run_amx_task(c, seed, tile_acc, /*dp=*/true);  // the tiles' products on VDPBF16PS (dpbf16:bf16)
        }
        ++seed;
    }
}

// The VDPBF16PS decode of dpbf16:bf16 (tasks of < 16 rows; default on AMD CPUs, forced here on any
// AVX512-BF16 machine) against attention_reference: chunks of 256 keys and odd tails, GQA / MHA
// groups, causal limits per token, masks, paged blocks, split key ranges, f32 q, head_dim 32..256.
TEST(Attention, DpBf16DecodeAgainstReference) {
    if (!isa_supported(Isa::avx512_bf16)) GTEST_SKIP() << "VDPBF16PS needs AVX512_BF16";
    std::vector<AmxTaskCase> cases = {
        {1, 4, 128, 1001},                                // GQA 4, 4 chunks, odd tail
        {1, 1, 64, 17},                                   // MHA, one tile + 1 key
        {1, 1, 128, 1},                                   // one key
        {3, 4, 128, 300, 297, true},                      // 12 rows, causal bottom-right, mask
        {1, 8, 96, 531, INT64_MIN, false, true},          // 8 rows (2 row blocks), head_dim 96, f32 q
        {2, 7, 32, 77, 75},                               // 14 rows, head_dim 32
        {1, 4, 128, 700, INT64_MIN, false, false, 16, 64, 599},  // paged 16, a split key range
        {1, 2, 256, 290, INT64_MIN, true, false, 64},     // paged 64, head_dim 256, mask
        {5, 3, 64, 40, -2},                               // 15 rows, first tokens see nothing
    };
    uint64_t seed = 1900;
    for (const AmxTaskCase& c : cases) {
        SCOPED_TRACE("tokens=" + std::to_string(c.tokens) + " group=" + std::to_string(c.group) +
                     " hd=" + std::to_string(c.hd) + " nk=" + std::to_string(c.nk));
        run_amx_task(c, seed, 1, /*dp=*/true, /*dp_decode=*/1);
        run_amx_task(c, seed, 1, /*dp=*/true, /*dp_decode=*/0);  // the intr:avx512 decode
        ++seed;
    }
}

// ---- KV cache, decode, chunked prefill ---------------------------------------------------------

struct CacheFixture {
    KvCacheDesc cd;
    Tensor kc, vc;
    std::vector<int32_t> table;
    // Per sequence, the K / V rows (as stored in the cache dtype) in position order: [pos][h][d].
    std::vector<Tensor> ks, vs;
    // s8 caches: the int8 rows and their scales (ks / vs are then the f32 sources, overwritten
    // by append() with the dequantized values the kernel sees).
    std::vector<int8_t> k8, v8;
    std::vector<float> ksc, vsc;

    CacheFixture(KvLayout layout, DType dtype, int64_t batch, int64_t kv_heads, int64_t hd, int64_t capacity,
                 int64_t block_size, uint64_t seed, size_t misalign = 0) {
        std::mt19937_64 g(seed);
        cd.layout = layout;
        cd.dtype = dtype;
        cd.batch = batch;
        cd.kv_heads = kv_heads;
        cd.head_dim = hd;
        if (layout == KvLayout::contiguous) {
            cd.capacity = capacity;
        } else {
            cd.block_size = block_size;
            cd.max_blocks_per_seq = (capacity + block_size - 1) / block_size;
            cd.num_blocks = batch * cd.max_blocks_per_seq + 3;
            std::vector<int32_t> perm(static_cast<size_t>(cd.num_blocks));
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), g);
            table.assign(perm.begin(), perm.begin() + batch * cd.max_blocks_per_seq);
        }
        const int64_t n = kv_cache_elements(cd);
        const DType st = dtype == DType::s8 ? DType::f32 : dtype;
        if (dtype == DType::s8) {
            k8.assign(static_cast<size_t>(n), 0);
            v8.assign(static_cast<size_t>(n), 0);
            ksc.assign(static_cast<size_t>(kv_cache_scale_elements(cd)), 0.0f);
            vsc.assign(ksc.size(), 0.0f);
        } else {
            kc = Tensor(dtype, static_cast<size_t>(n), misalign);
            vc = Tensor(dtype, static_cast<size_t>(n), misalign);
        }
        const int64_t cap = kv_cache_capacity(cd);
        for (int64_t b = 0; b < batch; ++b) {
            ks.emplace_back(st, static_cast<size_t>(cap * kv_heads * hd));
            vs.emplace_back(st, static_cast<size_t>(cap * kv_heads * hd));
            ks.back().fill(g);
            vs.back().fill(g);
        }
    }
    KvCache cache() {
        const int32_t* bt = table.empty() ? nullptr : table.data();
        if (cd.dtype == DType::s8) return KvCache{k8.data(), v8.data(), bt, ksc.data(), vsc.data()};
        return KvCache{kc.data(), vc.data(), bt};
    }
    // Scale index of (sequence b, position p, head h) in an s8 cache.
    int64_t srow(int64_t b, int64_t p, int64_t h) const {
        if (cd.layout == KvLayout::contiguous) return (b * cd.kv_heads + h) * cd.capacity + p;
        return (static_cast<int64_t>(table[b * cd.max_blocks_per_seq + p / cd.block_size]) * cd.kv_heads + h) *
                   cd.block_size + p % cd.block_size;
    }
    // Appends positions [p0, p1) of sequence b (from ks / vs, same dtype) with one call.
    void append(int64_t b, int64_t p0, int64_t p1) {
        const int64_t row = cd.kv_heads * cd.head_dim;
        KvAppendArgs a;
        a.tokens = p1 - p0;
        a.src_dtype = cd.dtype == DType::s8 ? DType::f32 : cd.dtype;
        const int es = dtype_size(a.src_dtype);
        a.k_new = static_cast<char*>(ks[b].data()) + p0 * row * es;
        a.v_new = static_cast<char*>(vs[b].data()) + p0 * row * es;
        std::vector<int64_t> seq(static_cast<size_t>(a.tokens), b), pos(static_cast<size_t>(a.tokens));
        std::iota(pos.begin(), pos.end(), p0);
        a.seq_ids = seq.data();
        a.positions = pos.data();
        kv_cache_append(cd, cache(), a);
        if (cd.dtype != DType::s8) return;
        // Quantization within half a step; the sources become what the cache holds.
        for (int64_t p = p0; p < p1; ++p)
            for (int64_t h = 0; h < cd.kv_heads; ++h) {
                const int64_t r = srow(b, p, h);
                for (int which = 0; which < 2; ++which) {
                    Tensor& src = which ? vs[b] : ks[b];
                    const float sc = (which ? vsc : ksc)[r];
                    const int8_t* q8 = (which ? v8 : k8).data() + r * cd.head_dim;
                    for (int64_t e = 0; e < cd.head_dim; ++e) {
                        const size_t i = static_cast<size_t>((p * cd.kv_heads + h) * cd.head_dim + e);
                        const float deq = sc * q8[e];
                        EXPECT_LE(std::fabs(deq - src.value(i)), sc * 0.5001 + 1e-7) << "row " << r << " e " << e;
                        src.set(i, deq);
                    }
                }
            }
    }
};

// Queries: n_b per sequence with context ctx_b; returns o (f32) and checks against naive.
void check_cached(CacheFixture& f, const std::vector<int64_t>& nq, const std::vector<int64_t>& ctx, int64_t q_heads,
                  DType q_dtype, int64_t splits, uint64_t seed, std::vector<float>* out = nullptr,
                  const std::vector<float>* qin = nullptr, double atol = kF32Atol, double rtol = kF32Rtol,
                  size_t q_misalign = 0) {
    std::mt19937_64 g(seed);
    const int64_t B = f.cd.batch, hd = f.cd.head_dim, kvh = f.cd.kv_heads;
    std::vector<int64_t> cu(B + 1, 0);
    for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + nq[b];
    const int64_t T = cu[B];
    Tensor q(q_dtype, static_cast<size_t>(T * q_heads * hd), q_misalign);
    if (qin) {
        for (size_t i = 0; i < qin->size(); ++i) q.set(i, (*qin)[i]);
    } else {
        q.fill(g);
    }
    Tensor o(DType::f32, static_cast<size_t>(T * q_heads * hd));
    std::vector<float> lse(static_cast<size_t>(T * q_heads));
    CachedAttentionDesc d;
    d.cache = f.cd;
    d.q_tokens = T;
    d.q_heads = q_heads;
    d.q_dtype = q_dtype;
    d.kv_splits = splits;
    CachedAttentionArgs a;
    a.q = q.data();
    a.o = o.data();
    a.lse = lse.data();
    a.cu_seqlens_q = cu.data();
    a.context_lens = ctx.data();
    a.cache = f.cache();
    cached_attention(d, a);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const int64_t group = q_heads / kvh;
    std::vector<double> want, want_lse, qr(static_cast<size_t>(hd)), orow;
    std::vector<size_t> idx;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < nq[b]; ++i) {
            const int64_t tok = cu[b] + i, pos = ctx[b] - nq[b] + i;
            for (int64_t h = 0; h < q_heads; ++h) {
                const int64_t kh = h / group;
                for (int64_t e = 0; e < hd; ++e) qr[e] = q.value(static_cast<size_t>((tok * q_heads + h) * hd + e));
                double l = 0;
                naive_row(
                    qr, ctx[b], hd, scale, [&](int64_t j, int64_t e) { return f.ks[b].value((j * kvh + kh) * hd + e); },
                    [&](int64_t j, int64_t e) { return f.vs[b].value((j * kvh + kh) * hd + e); },
                    [&](int64_t j) { return j <= pos; }, [](int64_t) { return 0.0; }, orow, l);
                for (int64_t e = 0; e < hd; ++e) {
                    want.push_back(orow[e]);
                    idx.push_back(static_cast<size_t>((tok * q_heads + h) * hd + e));
                }
                want_lse.push_back(l);
            }
        }
    const bool amx = g_amx_bf16 && f.cd.dtype == DType::bf16;
    EXPECT_TRUE(close(o, want, idx, amx ? std::max(atol, kAmxAtol) : atol, rtol));
    if (atol == kF32Atol) EXPECT_TRUE(close_lse(lse, want_lse));
    if (out) *out = o.f;
}

TEST(Attention, DecodeOverCacheContiguousAndPaged) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t seed = 7;
            for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
                for (DType dt : {DType::f32, DType::bf16})
                    for (int64_t bs : {16, 64}) {
                        if (layout == KvLayout::contiguous && bs == 64) continue;
                        SCOPED_TRACE(std::string(kv_layout_name(layout)) + " " + dtype_name(dt) + " bs=" + std::to_string(bs));
                        const int64_t cap = kSanitized ? 300 : 600;
                        CacheFixture f(layout, dt, 3, 2, 128, cap, bs, seed++);
                        const std::vector<int64_t> ctx = {1, cap / 2 + 33, cap};
                        for (int64_t b = 0; b < 3; ++b) f.append(b, 0, ctx[b]);
                        std::vector<float> o1, o7;
                        check_cached(f, {1, 1, 1}, ctx, 8, dt, 1, seed, &o1);
                        check_cached(f, {1, 1, 1}, ctx, 8, dt, 7, seed, &o7);  // flash-decoding split
                        check_cached(f, {1, 1, 1}, ctx, 8, dt, 0, seed);
                        // split equals unsplit (within the f32 tolerance; the VDPBF16PS decode of
                        // dpbf16:bf16 rounds p = exp(s - m) to bf16 against each piece's own m:
                        // within that rounding, kAmxAtol)
                        std::vector<double> w(o1.begin(), o1.end());
                        std::vector<size_t> idx(o1.size());
                        std::iota(idx.begin(), idx.end(), 0);
                        Tensor t7(DType::f32, o7.size());
                        t7.f = o7;
                        const bool prounded = g_amx_bf16 && dt == DType::bf16;
                        EXPECT_TRUE(close(t7, w, idx, prounded ? kAmxAtol : 1e-6, prounded ? 0.0 : 1e-5));
                    }
        });
    }
    set_num_threads(0);
}

// Decode under each prefetch form of the vector kernels (spread over the score loop: the default;
// a tile's burst: XK_ATTN_PF_SPREAD=0; none; spread 1 tile ahead): odd context lengths 1 / 7 / 17 /
// 1023 in one batch (prefetches near and past each sequence's end, across shuffled paged blocks),
// GQA and MQA, misaligned cache and q pointers; against the double reference.
TEST(Attention, DecodePrefetchFormsOddLengths) {
    struct Pf { int64_t tiles; int spread; };
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            uint64_t seed = 91;
            std::vector<Pf> forms = {{-1, -1}};
            if (threads == 1 && isa == Isa::avx512) forms = {{-1, -1}, {4, 0}, {0, -1}, {1, 1}, {2, 2}, {1, 2}};
            for (const Pf& pf : forms) {
                xk::detail::attn_prefetch_override(pf.tiles, pf.spread);
                const bool dflt = pf.tiles < 0;  // the other forms: paged GQA only
                for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
                    for (DType dt : {DType::f32, DType::bf16})
                        for (int64_t kvh : {2, 1}) {  // 8 q heads: GQA 4, MQA
                            if (!dflt && (layout == KvLayout::contiguous || kvh == 1)) continue;
                            SCOPED_TRACE(std::string(kv_layout_name(layout)) + " " + dtype_name(dt) + " kv_heads=" +
                                         std::to_string(kvh) + " pf=" + std::to_string(pf.tiles) + "/" +
                                         std::to_string(pf.spread));
                            const int64_t cap = kSanitized ? 301 : 1023;
                            CacheFixture f(layout, dt, 4, kvh, 128, cap, 16, seed++, /*misalign=*/1);
                            const std::vector<int64_t> ctx = {1, 7, 17, cap};
                            for (int64_t b = 0; b < 4; ++b) f.append(b, 0, ctx[b]);
                            check_cached(f, {1, 1, 1, 1}, ctx, 8, dt, 0, seed, nullptr, nullptr, kF32Atol, kF32Rtol,
                                         /*q_misalign=*/3);
                        }
            }
            xk::detail::attn_prefetch_override(-1, -1);
        });
    }
    set_num_threads(0);
}

// The sequential-order f32 decode (attn_seq_decode.hpp; default on AMD CPUs) forced on and off:
// context lengths 1 / 7 / 17 / cap (cap past one 2048-key chunk outside sanitizer builds), GQA 4,
// MQA and MHA with several query tokens per sequence (chunked prefill rows: 3 / 12 rows, odd row
// counts take the one-row tail), head_dim 128 and 80, paged (shuffled blocks) and contiguous,
// misaligned cache and q pointers, the automatic split and 3 pieces; against the double reference.
TEST(Attention, DecodeSequentialOrderF32) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            if (isa != Isa::avx512) return;  // (the f32 kernel of every level above it)
            uint64_t seed = 131;
            for (int seq : {1, 0}) {
                xk::detail::attn_decode_seq_override(seq);
                for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
                    for (int64_t kvh : {2, 1, 8})
                        for (int64_t hd : {128, 80}) {
                            if (hd == 80 && (layout == KvLayout::contiguous || kvh != 2)) continue;
                            if (seq == 0 && (layout == KvLayout::contiguous || hd != 128)) continue;
                            SCOPED_TRACE(std::string(kv_layout_name(layout)) + " kv_heads=" + std::to_string(kvh) +
                                         " hd=" + std::to_string(hd) + " seq=" + std::to_string(seq));
                            const int64_t cap = kSanitized ? 301 : 2100;
                            CacheFixture f(layout, DType::f32, 4, kvh, hd, cap, 16, seed++, /*misalign=*/1);
                            const std::vector<int64_t> ctx = {1, 7, 17, cap};
                            for (int64_t b = 0; b < 4; ++b) f.append(b, 0, ctx[b]);
                            // queries per sequence: 1 (decode); MHA / GQA also 3 (chunked prefill rows)
                            const std::vector<int64_t> nq = kvh == 1 ? std::vector<int64_t>{1, 1, 1, 1}
                                                                     : std::vector<int64_t>{1, 3, 1, 3};
                            for (int64_t splits : {0, 3})
                                check_cached(f, nq, ctx, 8, DType::f32, splits, seed, nullptr, nullptr, kF32Atol,
                                             kF32Rtol, /*q_misalign=*/3);
                        }
            }
            xk::detail::attn_decode_seq_override(-1);
        });
    }
    set_num_threads(0);
}

// s8 cache: append quantizes (checked in CacheFixture::append), decode / chunked prefill over it
// equal the naive attention of the dequantized cache, and stay near that of the f32 sources.
TEST(Attention, Int8CacheDecodeAndPrefill) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t seed = 300;
            for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
                for (int64_t hd : {128, 80}) {
                    SCOPED_TRACE(std::string(kv_layout_name(layout)) + " hd=" + std::to_string(hd));
                    const int64_t cap = kSanitized ? 200 : 530, bs = 32;
                    CacheFixture f(layout, DType::s8, 3, 2, hd, cap, bs, seed++);
                    const std::vector<Tensor> k0 = f.ks, v0 = f.vs;  // unquantized
                    const std::vector<int64_t> ctx = {1, cap / 2 + 17, cap};
                    for (int64_t b = 0; b < 3; ++b) f.append(b, 0, ctx[b]);
                    check_cached(f, {1, 1, 1}, ctx, 8, DType::f32, 1, seed);
                    check_cached(f, {1, 1, 1}, ctx, 8, DType::bf16, 0, seed);  // split over threads
                    check_cached(f, {1, 9, 23}, ctx, 4, DType::f32, 0, seed);  // chunked prefill (>= 16 rows)
                    const std::vector<Tensor> kd = f.ks, vd = f.vs;
                    f.ks = k0;
                    f.vs = v0;
                    check_cached(f, {1, 1, 1}, ctx, 8, DType::f32, 0, seed, nullptr, nullptr, kS8QuantAtol, 0.0);
                    f.ks = kd;
                    f.vs = vd;
                }
        });
    }
    set_num_threads(0);
}

TEST(Attention, ChunkedPrefillEqualsOneShot) {
    for_each_isa([&](Isa) {
        uint64_t seed = 50;
        for (KvLayout layout : {KvLayout::contiguous, KvLayout::paged})
            for (DType dt : {DType::f32, DType::bf16}) {
                SCOPED_TRACE(std::string(kv_layout_name(layout)) + " " + dtype_name(dt));
                const int64_t L = 77, n1 = 30, q_heads = 4, hd = 64;
                CacheFixture f(layout, dt, 2, 1, hd, 128, 32, seed++);  // MQA
                std::mt19937_64 g(seed);
                std::vector<float> qall(static_cast<size_t>(2 * L * q_heads * hd));
                for (auto& x : qall) x = rnd(g);
                // One shot: both sequences, all L tokens.
                f.append(0, 0, L);
                f.append(1, 0, L);
                std::vector<float> one;
                check_cached(f, {L, L}, {L, L}, q_heads, dt, 0, seed, &one, &qall);
                // Chunked: first n1 tokens at context n1, then the rest at context L (sequence 0),
                // sequence 1 idle (0 queries) in the first call.
                std::vector<float> q1(qall.begin(), qall.begin() + n1 * q_heads * hd), c1, c2;
                check_cached(f, {n1, 0}, {n1, L}, q_heads, dt, 0, seed, &c1, &q1);
                std::vector<float> q2(qall.begin() + n1 * q_heads * hd, qall.begin() + L * q_heads * hd);
                check_cached(f, {L - n1, 0}, {L, 0}, q_heads, dt, 0, seed, &c2, &q2);
                c1.insert(c1.end(), c2.begin(), c2.end());
                ASSERT_EQ(c1.size(), static_cast<size_t>(L * q_heads * hd));
                for (size_t i = 0; i < c1.size(); ++i) ASSERT_NEAR(c1[i], one[i], 1e-6) << i;
            }
    });
}

TEST(Attention, AppendConvertsAndPlaces) {
    // f32 rows into a bf16 paged cache: rounded to nearest even, placed by the block table.
    KvCacheDesc cd;
    cd.layout = KvLayout::paged;
    cd.dtype = DType::bf16;
    cd.batch = 2;
    cd.kv_heads = 2;
    cd.head_dim = 16;
    cd.block_size = 16;
    cd.num_blocks = 4;
    cd.max_blocks_per_seq = 2;
    std::vector<int32_t> table = {3, 1, 0, 2};
    std::vector<uint16_t> kc(static_cast<size_t>(kv_cache_elements(cd))), vc(kc.size());
    std::vector<float> kn(2 * 32), vn(2 * 32);
    for (size_t i = 0; i < kn.size(); ++i) {
        kn[i] = 0.1f * static_cast<float>(i) + 0.01f;
        vn[i] = -kn[i];
    }
    std::vector<int64_t> seq = {1, 0}, pos = {17, 3};
    KvAppendArgs a;
    a.tokens = 2;
    a.src_dtype = DType::f32;
    a.k_new = kn.data();
    a.v_new = vn.data();
    a.seq_ids = seq.data();
    a.positions = pos.data();
    kv_cache_append(cd, KvCache{kc.data(), vc.data(), table.data()}, a);
    for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 16; ++e) {
            // token 0: seq 1, pos 17 -> block table[1][1] = 2, slot 1
            EXPECT_EQ(kc[((2 * 2 + h) * 16 + 1) * 16 + e], bf16(kn[h * 16 + e]).bits);
            EXPECT_EQ(vc[((2 * 2 + h) * 16 + 1) * 16 + e], bf16(vn[h * 16 + e]).bits);
            // token 1: seq 0, pos 3 -> block 3, slot 3
            EXPECT_EQ(kc[((3 * 2 + h) * 16 + 3) * 16 + e], bf16(kn[32 + h * 16 + e]).bits);
        }
}

TEST(Attention, AppendFusedRope) {
    // K rotated at its cache position (neox / gptj, partial rotary) and stored rounded once; V as is.
    // Tolerance: f32 cache 4 ulp of the largest term; bf16 cache one bf16 rounding more (2^-8).
    std::mt19937_64 g(17);
    for (DType cdt : {DType::f32, DType::bf16})
        for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
            for (int64_t rdim : {int64_t(0), int64_t(32)}) {
                KvCacheDesc cd;
                cd.layout = KvLayout::paged;
                cd.dtype = cdt;
                cd.batch = 2;
                cd.kv_heads = 2;
                cd.head_dim = 64;
                cd.block_size = 16;
                cd.num_blocks = 6;
                cd.max_blocks_per_seq = 3;
                std::vector<int32_t> table = {4, 0, 2, 1, 5, 3};
                Tensor kc(cdt, static_cast<size_t>(kv_cache_elements(cd))), vc(cdt, kc.size());
                const int64_t tokens = 7, hd = 64, rd = rdim ? rdim : hd, maxp = 48;
                std::vector<float> kn(tokens * 2 * hd), vn(kn.size()), cs(maxp * rd);
                for (auto& x : kn) x = rnd(g);
                for (auto& x : vn) x = rnd(g);
                for (int64_t p = 0; p < maxp; ++p)
                    for (int64_t i = 0; i < rd / 2; ++i) {
                        const double th = p * std::pow(10000.0, -2.0 * i / rd);
                        cs[p * rd + i] = static_cast<float>(std::cos(th));
                        cs[p * rd + rd / 2 + i] = static_cast<float>(std::sin(th));
                    }
                std::vector<int64_t> seq = {0, 1, 1, 0, 1, 0, 1}, pos = {0, 47, 3, 20, 16, 33, 5};
                KvAppendArgs a;
                a.tokens = tokens;
                a.k_new = kn.data();
                a.v_new = vn.data();
                a.seq_ids = seq.data();
                a.positions = pos.data();
                a.rope_cos_sin = cs.data();
                a.rope_max_position = maxp;
                a.rope_rotary_dim = rdim;
                a.rope_style = style;
                kv_cache_append(cd, KvCache{kc.data(), vc.data(), table.data()}, a);
                for (int64_t t = 0; t < tokens; ++t)
                    for (int64_t h = 0; h < 2; ++h) {
                        const int64_t blk = table[seq[t] * 3 + pos[t] / 16];
                        const size_t base = static_cast<size_t>(((blk * 2 + h) * 16 + pos[t] % 16) * hd);
                        const float* x = kn.data() + (t * 2 + h) * hd;
                        for (int64_t e = 0; e < hd; ++e) {
                            double want = x[e];
                            if (e < rd) {
                                const int64_t half = rd / 2;
                                const bool neox = style == RopeStyle::neox;
                                const int64_t i = neox ? e % half : e / 2;
                                const bool first = neox ? e < half : e % 2 == 0;
                                const int64_t o = neox ? (first ? e + half : e - half) : (first ? e + 1 : e - 1);
                                const double co = cs[pos[t] * rd + i], si = cs[pos[t] * rd + half + i];
                                want = first ? x[e] * co - x[o] * si : x[e] * co + x[o] * si;
                            }
                            const double tol = 4 * 0x1p-24 * 2 + (cdt == DType::bf16 ? std::fabs(want) / 256 : 0.0);
                            ASSERT_NEAR(kc.value(base + e), want, tol) << "t=" << t << " h=" << h << " e=" << e;
                            ASSERT_EQ(vc.value(base + e), static_cast<double>(cdt == DType::bf16 ? bf16(vn[(t * 2 + h) * hd + e]).to_float()
                                                                                                 : vn[(t * 2 + h) * hd + e]));
                        }
                    }
                // Bad input: a position past the RoPE table, an odd rotary_dim; nothing written.
                const Tensor k0 = kc;
                pos[2] = maxp;
                XK_EXPECT_INVALID(kv_cache_append(cd, KvCache{kc.data(), vc.data(), table.data()}, a), "positions[2]=48");
                pos[2] = 3;
                a.rope_rotary_dim = 7;
                XK_EXPECT_INVALID(kv_cache_append(cd, KvCache{kc.data(), vc.data(), table.data()}, a), "rope_rotary_dim=7");
                EXPECT_TRUE(kc.f == k0.f && kc.h == k0.h);
            }
}

// ---- bad input ---------------------------------------------------------------------------------

TEST(Attention, BadInputNamesArgumentWritesNothing) {
    CacheFixture f(KvLayout::paged, DType::f32, 2, 2, 64, 64, 16, 3);
    const std::vector<float> k0 = f.kc.f;
    std::vector<float> kn(2 * 2 * 64, 1.0f);
    std::vector<int64_t> seq = {0, 1}, pos = {5, 64};
    KvAppendArgs a;
    a.tokens = 2;
    a.k_new = kn.data();
    a.v_new = kn.data();
    a.seq_ids = seq.data();
    a.positions = pos.data();
    XK_EXPECT_INVALID(kv_cache_append(f.cd, f.cache(), a), "positions[1]=64");
    EXPECT_EQ(f.kc.f, k0);  // the valid token 0 was not written either
    pos[1] = 3;
    f.table[1 * f.cd.max_blocks_per_seq] = static_cast<int32_t>(f.cd.num_blocks);  // past the pool
    XK_EXPECT_INVALID(kv_cache_append(f.cd, f.cache(), a), "block_table[1][0]");
    EXPECT_EQ(f.kc.f, k0);
    f.table[1 * f.cd.max_blocks_per_seq] = 0;
    seq[0] = 2;
    XK_EXPECT_INVALID(kv_cache_append(f.cd, f.cache(), a), "seq_ids[0]=2");
    seq[0] = 0;
    a.k_new = nullptr;
    XK_EXPECT_INVALID(kv_cache_append(f.cd, f.cache(), a), "k_new=null");
    a.k_new = kn.data();
    KvCacheDesc bad = f.cd;
    bad.block_size = 24;
    XK_EXPECT_INVALID(kv_cache_append(bad, f.cache(), a), "cache.block_size=24");
    EXPECT_EQ(f.kc.f, k0);

    // cached_attention
    std::vector<float> q(2 * 6 * 64, 0.5f), o(q.size(), 7.0f);
    std::vector<int64_t> cu = {0, 1, 2}, ctx = {10, 65};
    CachedAttentionDesc d;
    d.cache = f.cd;
    d.q_tokens = 2;
    d.q_heads = 6;
    CachedAttentionArgs ca;
    ca.q = q.data();
    ca.o = o.data();
    ca.cu_seqlens_q = cu.data();
    ca.context_lens = ctx.data();
    ca.cache = f.cache();
    XK_EXPECT_INVALID(cached_attention(d, ca), "context_lens[1]=65");
    ctx[1] = 20;
    f.table[1 * f.cd.max_blocks_per_seq + 1] = -1;
    XK_EXPECT_INVALID(cached_attention(d, ca), "block_table[1][1]=-1");
    d.q_heads = 5;
    XK_EXPECT_INVALID(cached_attention(d, ca), "q_heads=5");
    d.q_heads = 6;
    ca.q = nullptr;
    XK_EXPECT_INVALID(cached_attention(d, ca), "q=null");
    ca.q = q.data();
    cu[2] = 3;
    XK_EXPECT_INVALID(cached_attention(d, ca), "cu_seqlens_q[2]=3");
    for (float x : o) ASSERT_EQ(x, 7.0f);

    // attention
    AttentionDesc s;
    s.q_tokens = 2;
    s.kv_tokens = 2;
    s.q_heads = 4;
    s.kv_heads = 3;
    s.head_dim = 64;
    AttentionArgs sa;
    sa.q = sa.k = sa.v = q.data();
    sa.o = o.data();
    XK_EXPECT_INVALID(attention(s, sa), "q_heads=4");
    s.kv_heads = 2;
    sa.v = nullptr;
    XK_EXPECT_INVALID(attention(s, sa), "v=null");
    sa.v = q.data();
    s.scale = std::numeric_limits<float>::infinity();
    XK_EXPECT_INVALID(attention(s, sa), "scale=inf");
    s.scale = 0.0f;
    s.q_head_stride = 10;
    XK_EXPECT_INVALID(attention(s, sa), "q_head_stride=10");
    for (float x : o) ASSERT_EQ(x, 7.0f);

    // C API
    xk_kv_cache_desc ccd;
    xk_kv_cache_desc_init(&ccd);
    { const int bad_layout = 7; std::memcpy(&ccd.layout, &bad_layout, sizeof bad_layout); }
    ccd.dtype = XK_DTYPE_F32;
    ccd.batch = 1;
    ccd.kv_heads = 1;
    ccd.head_dim = 16;
    ccd.capacity = 4;
    EXPECT_EQ(xk_kv_cache_append(&ccd, kn.data(), kn.data(), nullptr, 0, XK_DTYPE_F32, nullptr, nullptr, nullptr, nullptr),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("cache.layout=7"), std::string::npos) << xk_last_error();
}

TEST(Attention, CApiDecodeMatchesCpp) {
    CacheFixture f(KvLayout::contiguous, DType::bf16, 2, 2, 64, 40, 0, 9);
    f.append(0, 0, 40);
    f.append(1, 0, 11);
    std::vector<float> q(2 * 4 * 64), o1(q.size()), o2(q.size());
    std::mt19937_64 g(4);
    for (auto& x : q) x = rnd(g);
    std::vector<int64_t> cu = {0, 1, 2}, ctx = {40, 11};
    CachedAttentionDesc d;
    d.cache = f.cd;
    d.q_tokens = 2;
    d.q_heads = 4;
    CachedAttentionArgs a;
    a.q = q.data();
    a.o = o1.data();
    a.cu_seqlens_q = cu.data();
    a.context_lens = ctx.data();
    a.cache = f.cache();
    cached_attention(d, a);
    xk_kv_cache_desc cd;
    xk_kv_cache_desc_init(&cd);
    cd.layout = XK_KV_CONTIGUOUS;
    cd.dtype = XK_DTYPE_BF16;
    cd.batch = 2;
    cd.kv_heads = 2;
    cd.head_dim = 64;
    cd.capacity = 40;
    ASSERT_EQ(xk_cached_attention_f32(&cd, f.kc.data(), f.vc.data(), nullptr, 2, 4, q.data(), o2.data(), nullptr,
                                      cu.data(), ctx.data(), 0.0f),
              XK_SUCCESS)
        << xk_last_error();
    EXPECT_EQ(o1, o2);
}

// ---- plans ---------------------------------------------------------------------------------------

// The full-form C API: an s8 cache filled by xk_kv_cache_append_ex (RoPE fused) equals the C++
// append, xk_cached_attention_plan_run equals cached_attention, xk_attention_plan_run equals
// xk_attention_f32; rejected calls name the argument, write nothing and give no plan.
TEST(Attention, CApiPlansAppendExS8) {
    const int64_t B = 2, H = 2, hd = 64, cap = 48, T = 30;
    CacheFixture f(KvLayout::paged, DType::s8, B, H, hd, cap, 16, 21);
    xk_kv_cache_desc cd;
    xk_kv_cache_desc_init(&cd);
    cd.layout = XK_KV_PAGED;
    cd.dtype = XK_DTYPE_S8;
    cd.batch = B;
    cd.kv_heads = H;
    cd.head_dim = hd;
    cd.block_size = 16;
    cd.num_blocks = f.cd.num_blocks;
    cd.max_blocks_per_seq = f.cd.max_blocks_per_seq;
    int64_t ne = 0, ns = 0, cp = 0;
    ASSERT_EQ(xk_kv_cache_sizes(&cd, &ne, &ns, &cp), XK_SUCCESS);
    EXPECT_EQ(ne, kv_cache_elements(f.cd));
    EXPECT_EQ(ns, kv_cache_scale_elements(f.cd));
    EXPECT_EQ(cp, cap);
    std::mt19937_64 g(5);
    std::vector<float> kn(T * H * hd), vn(kn.size()), cs(cap * 32);
    for (auto& x : kn) x = rnd(g);
    for (auto& x : vn) x = rnd(g);
    for (auto& x : cs) x = rnd(g);
    std::vector<int64_t> seq(T), pos(T);
    for (int64_t t = 0; t < T; ++t) seq[t] = t % 2, pos[t] = t / 2;
    KvAppendArgs a;
    a.tokens = T;
    a.k_new = kn.data();
    a.v_new = vn.data();
    a.seq_ids = seq.data();
    a.positions = pos.data();
    a.rope_cos_sin = cs.data();
    a.rope_max_position = cap;
    a.rope_rotary_dim = 32;
    a.rope_style = RopeStyle::gptj;
    kv_cache_append(f.cd, f.cache(), a);
    std::vector<int8_t> k2(f.k8.size(), 0), v2(f.v8.size(), 0);
    std::vector<float> ks2(f.ksc.size(), 0.0f), vs2(f.vsc.size(), 0.0f);
    xk_kv_cache cc{k2.data(), v2.data(), f.table.data(), ks2.data(), vs2.data()};
    xk_kv_append_args ca;
    xk_kv_append_args_init(&ca);
    ca.tokens = T;
    ca.src_dtype = XK_DTYPE_F32;
    ca.k_new = kn.data();
    ca.v_new = vn.data();
    ca.seq_ids = seq.data();
    ca.positions = pos.data();
    ca.rope_cos_sin = cs.data();
    ca.rope_max_position = cap;
    ca.rope_rotary_dim = 32;
    ca.rope_style = XK_ROPE_GPTJ;
    // Rejected: no k_scale for an s8 cache; a position past the capacity.
    cc.k_scale = nullptr;
    EXPECT_EQ(xk_kv_cache_append_ex(&cd, &cc, &ca), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("cache.k_scale"), std::string::npos) << xk_last_error();
    cc.k_scale = ks2.data();
    std::vector<int64_t> bad = pos;
    bad[3] = cap;
    ca.positions = bad.data();
    EXPECT_EQ(xk_kv_cache_append_ex(&cd, &cc, &ca), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("positions[3]"), std::string::npos) << xk_last_error();
    EXPECT_TRUE(std::all_of(k2.begin(), k2.end(), [](int8_t x) { return x == 0; }));
    EXPECT_TRUE(std::all_of(ks2.begin(), ks2.end(), [](float x) { return x == 0.0f; }));
    ca.positions = pos.data();
    ASSERT_EQ(xk_kv_cache_append_ex(&cd, &cc, &ca), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(k2, f.k8);
    EXPECT_EQ(v2, f.v8);
    EXPECT_EQ(ks2, f.ksc);
    EXPECT_EQ(vs2, f.vsc);
    // Cached plan (decode) against cached_attention.
    std::vector<float> q(B * 4 * hd), o1(q.size()), o2(q.size(), -1.0f);
    for (auto& x : q) x = rnd(g);
    std::vector<int64_t> cu = {0, 1, 2}, ctx = {T / 2, T / 2};
    CachedAttentionDesc d;
    d.cache = f.cd;
    d.q_tokens = B;
    d.q_heads = 4;
    CachedAttentionArgs ar;
    ar.q = q.data();
    ar.o = o1.data();
    ar.cu_seqlens_q = cu.data();
    ar.context_lens = ctx.data();
    ar.cache = f.cache();
    cached_attention(d, ar);
    xk_cached_attention_desc pd;
    xk_cached_attention_desc_init(&pd);
    pd.cache = cd;
    pd.q_tokens = B;
    pd.q_heads = 4;
    pd.q_dtype = pd.o_dtype = XK_DTYPE_F32;
    xk_cached_attention_plan* plan = nullptr;
    pd.q_heads = 5;
    EXPECT_EQ(xk_cached_attention_plan_create(&pd, &plan), XK_INVALID_ARGUMENT);
    EXPECT_EQ(plan, nullptr);
    EXPECT_NE(std::string(xk_last_error()).find("q_heads=5"), std::string::npos) << xk_last_error();
    pd.q_heads = 4;
    ASSERT_EQ(xk_cached_attention_plan_create(&pd, &plan), XK_SUCCESS) << xk_last_error();
    EXPECT_STRNE(xk_cached_attention_plan_impl_name(plan), "");
    std::vector<int64_t> badctx = {T / 2, cap + 1};
    EXPECT_EQ(xk_cached_attention_plan_run(plan, &cc, q.data(), o2.data(), nullptr, cu.data(), badctx.data()),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("context_lens[1]"), std::string::npos) << xk_last_error();
    EXPECT_TRUE(std::all_of(o2.begin(), o2.end(), [](float x) { return x == -1.0f; }));
    ASSERT_EQ(xk_cached_attention_plan_run(plan, &cc, q.data(), o2.data(), nullptr, cu.data(), ctx.data()), XK_SUCCESS)
        << xk_last_error();
    EXPECT_EQ(o1, o2);
    xk_cached_attention_plan_destroy(plan);
    // SDPA plan against the one-shot C call.
    const int64_t L = 37;
    std::vector<float> sq(L * 4 * hd), sk(L * 2 * hd), sv(sk.size()), so1(sq.size()), so2(sq.size());
    for (auto& x : sq) x = rnd(g);
    for (auto& x : sk) x = rnd(g);
    for (auto& x : sv) x = rnd(g);
    xk_attention_desc ad;
    xk_attention_desc_init(&ad);
    ad.batch = 1;
    ad.q_tokens = ad.kv_tokens = L;
    ad.q_heads = 4;
    ad.kv_heads = 2;
    ad.head_dim = hd;
    ad.dtype = ad.o_dtype = XK_DTYPE_F32;
    ad.causal = 1;
    xk_attention_plan* sp = nullptr;
    ASSERT_EQ(xk_attention_plan_create(&ad, &sp), XK_SUCCESS) << xk_last_error();
    ASSERT_EQ(xk_attention_plan_run(sp, sq.data(), sk.data(), sv.data(), so1.data(), nullptr, nullptr, nullptr, nullptr,
                                    nullptr),
              XK_SUCCESS)
        << xk_last_error();
    ASSERT_EQ(xk_attention_f32(1, L, L, 4, 2, hd, sq.data(), sk.data(), sv.data(), so2.data(), nullptr, nullptr, nullptr,
                               0.0f, 1, 0, nullptr, 0),
              XK_SUCCESS);
    EXPECT_EQ(so1, so2);
    xk_attention_plan_destroy(sp);
    // The strided entry points: packed strides equal the packed call; bad input names the argument,
    // gives no plan and writes nothing.
    xk_attention_strides st;
    xk_attention_strides_init(&st);
    std::vector<float> so3(sq.size(), -1.0f);
    ASSERT_EQ(xk_attention_strided(&ad, &st, sq.data(), sk.data(), sv.data(), so3.data(), nullptr, nullptr, nullptr,
                                   nullptr, nullptr),
              XK_SUCCESS)
        << xk_last_error();
    EXPECT_EQ(so3, so2);
    std::fill(so3.begin(), so3.end(), -1.0f);
    st.q_head = hd - 1;  // below head_dim
    EXPECT_EQ(xk_attention_strided(&ad, &st, sq.data(), sk.data(), sv.data(), so3.data(), nullptr, nullptr, nullptr,
                                   nullptr, nullptr),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("stride"), std::string::npos) << xk_last_error();
    EXPECT_TRUE(std::all_of(so3.begin(), so3.end(), [](float x) { return x == -1.0f; }));
    sp = nullptr;
    EXPECT_NE(xk_attention_plan_create_strided(&ad, &st, &sp), XK_SUCCESS);
    EXPECT_EQ(sp, nullptr);
    EXPECT_NE(xk_attention_plan_create_strided(nullptr, nullptr, &sp), XK_SUCCESS);
    EXPECT_EQ(sp, nullptr);
}

TEST(Attention, PlansEqualOneShotAndValidateOnce) {
    for_each_isa([&](Isa) {
        std::mt19937_64 g(21);
        // SDPA: GQA, causal, bf16, a query block long enough for the prefill kernel.
        const int64_t T = 70, qh = 8, kvh = 2, hd = 64;
        Tensor q(DType::bf16, T * qh * hd), k(DType::bf16, T * kvh * hd), v(DType::bf16, T * kvh * hd);
        q.fill(g);
        k.fill(g);
        v.fill(g);
        Tensor o1(DType::bf16, T * qh * hd), o2(DType::bf16, T * qh * hd);
        AttentionDesc d;
        d.q_tokens = d.kv_tokens = T;
        d.q_heads = qh;
        d.kv_heads = kvh;
        d.head_dim = hd;
        d.dtype = d.o_dtype = DType::bf16;
        d.causal = true;
        AttentionArgs a;
        a.q = q.data();
        a.k = k.data();
        a.v = v.data();
        a.o = o1.data();
        attention(d, a);
        const AttentionPlan plan(d);
        EXPECT_NE(std::string(plan.impl_name()), "");
        EXPECT_EQ(plan.desc().q_token_stride, qh * hd);
        a.o = o2.data();
        plan.run(a);
        plan.run(a);
        EXPECT_EQ(o1.h, o2.h);
        // Cached: paged decode of 3 sequences (GQA 4).
        CacheFixture f(KvLayout::paged, DType::f32, 3, 2, 64, 100, 16, 5);
        const std::vector<int64_t> ctx = {100, 1, 37};
        for (int64_t b = 0; b < 3; ++b) f.append(b, 0, ctx[b]);
        std::vector<float> cq(3 * 8 * 64), c1(cq.size()), c2(cq.size());
        for (auto& x : cq) x = rnd(g);
        std::vector<int64_t> cu = {0, 1, 2, 3};
        CachedAttentionDesc cd;
        cd.cache = f.cd;
        cd.q_tokens = 3;
        cd.q_heads = 8;
        CachedAttentionArgs ca;
        ca.q = cq.data();
        ca.o = c1.data();
        ca.cu_seqlens_q = cu.data();
        ca.context_lens = ctx.data();
        ca.cache = f.cache();
        cached_attention(cd, ca);
        const CachedAttentionPlan cplan(cd);
        ca.o = c2.data();
        cplan.run(ca);
        EXPECT_EQ(c1, c2);
        // Run-time arguments are still checked, nothing written.
        std::vector<int64_t> bad_ctx = {113, 1, 37};  // capacity 7 blocks x 16
        ca.context_lens = bad_ctx.data();
        std::fill(c2.begin(), c2.end(), 3.0f);
        XK_EXPECT_INVALID(cplan.run(ca), "context_lens[0]=113");
        for (float x : c2) ASSERT_EQ(x, 3.0f);
    });
    // Descriptor errors at construction.
    AttentionDesc d;
    d.q_tokens = 1;
    d.kv_tokens = 1;
    d.q_heads = 5;
    d.kv_heads = 2;
    d.head_dim = 64;
    XK_EXPECT_INVALID(AttentionPlan{d}, "q_heads=5");
    d.q_heads = 4;
    d.scale = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(AttentionPlan{d}, "scale=nan");
    CachedAttentionDesc cd;
    cd.cache.layout = KvLayout::paged;
    cd.cache.batch = 1;
    cd.cache.kv_heads = 1;
    cd.cache.head_dim = 64;
    cd.cache.block_size = 24;
    cd.cache.num_blocks = 1;
    cd.cache.max_blocks_per_seq = 1;
    cd.q_heads = 1;
    XK_EXPECT_INVALID(CachedAttentionPlan{cd}, "cache.block_size=24");
    // A plan of an enormous shape is created at once (nothing sized by tokens).
    AttentionDesc big;
    big.q_tokens = big.kv_tokens = int64_t(1) << 30;
    big.q_heads = big.kv_heads = 1;
    big.head_dim = 128;
    EXPECT_NE(std::string(AttentionPlan(big).impl_name()), "");
}

// ---- softmax: additive mask (broadcast over heads) and per-row valid lengths --------------------

TEST(Attention, SoftmaxMaskAndValidLens) {
    // rows = heads x queries (head-major), one [queries x cols] mask broadcast over the heads.
    xk::test::for_each_isa([&](Isa) {
        for (bool causal : {false, true})
            for (bool has_mask : {false, true})
                for (DType dt : {DType::f32, DType::bf16}) {
                    const int64_t heads = 3, queries = 7, cols = 37, ld_mask = 40;
                    const int64_t rows = heads * queries;
                    std::mt19937_64 g(11);
                    Tensor x(dt, static_cast<size_t>(rows * cols)), y(dt, static_cast<size_t>(rows * cols));
                    x.fill(g, -3, 3);
                    std::vector<float> mask(static_cast<size_t>(queries * ld_mask));
                    for (auto& m : mask) m = (g() % 5 == 0) ? -std::numeric_limits<float>::infinity() : rnd(g, -2, 2);
                    std::vector<int64_t> lens(static_cast<size_t>(rows));
                    for (auto& l : lens) l = static_cast<int64_t>(g() % (cols + 1));
                    lens[0] = 0;
                    lens[1] = cols;
                    SoftmaxDesc d;
                    d.rows = rows;
                    d.cols = cols;
                    d.x_dtype = d.y_dtype = dt;
                    d.scale = 0.7f;
                    d.causal = causal;
                    d.causal_offset = 20;
                    d.has_mask = has_mask;
                    d.ld_mask = ld_mask;
                    d.mask_rows = queries;
                    SoftmaxArgs a;
                    a.x = x.data();
                    a.y = y.data();
                    a.mask = has_mask ? mask.data() : nullptr;
                    a.valid_lens = lens.data();
                    softmax(d, a);
                    std::vector<double> want;
                    std::vector<size_t> idx;
                    for (int64_t r = 0; r < rows; ++r) {
                        int64_t v = std::min<int64_t>(lens[r], cols);
                        if (causal) v = std::min<int64_t>(v, std::max<int64_t>(0, r + 20 + 1));
                        std::vector<double> sv(static_cast<size_t>(cols), kNinf);
                        double mx = kNinf;
                        for (int64_t j = 0; j < v; ++j) {
                            sv[j] = 0.7 * x.value(r * cols + j) + (has_mask ? mask[(r % queries) * ld_mask + j] : 0.0);
                            mx = std::max(mx, sv[j]);
                        }
                        double sum = 0;
                        for (int64_t j = 0; j < v; ++j)
                            if (mx != kNinf) sum += std::exp(sv[j] - mx);
                        for (int64_t j = 0; j < cols; ++j) {
                            want.push_back(j < v && mx != kNinf ? std::exp(sv[j] - mx) / sum : 0.0);
                            idx.push_back(static_cast<size_t>(r * cols + j));
                        }
                    }
                    SCOPED_TRACE(std::string("causal=") + (causal ? "1" : "0") + " mask=" + (has_mask ? "1" : "0") +
                                 " " + dtype_name(dt));
                    EXPECT_TRUE(close(y, want, idx, 1e-6, dt == DType::bf16 ? 1.0 / 256 + 1e-5 : 1e-5));
                }
    });
    // Bad input: a valid length past cols, a mask without has_mask; nothing written.
    std::vector<float> x(4 * 8, 1.0f), y(4 * 8, 5.0f), mask(4 * 8, 0.0f);
    std::vector<int64_t> lens = {1, 2, 9, 0};
    SoftmaxDesc d;
    d.rows = 4;
    d.cols = 8;
    SoftmaxArgs a;
    a.x = x.data();
    a.y = y.data();
    a.valid_lens = lens.data();
    XK_EXPECT_INVALID(softmax(d, a), "valid_lens[2]=9");
    a.valid_lens = nullptr;
    a.mask = mask.data();
    XK_EXPECT_INVALID(softmax(d, a), "has_mask is false");
    d.has_mask = true;
    d.ld_mask = 3;
    XK_EXPECT_INVALID(softmax(d, a), "ld_mask=3");
    for (float v : y) ASSERT_EQ(v, 5.0f);
}

}  // namespace
