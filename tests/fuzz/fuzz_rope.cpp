// libFuzzer target: the rope family of the C API (include/xk/c/rope.h, with the semantics and
// accuracy statements of include/xk/rope.hpp). See fuzz_common.hpp for the scheme. Calls: the four
// functions — xk_rope_f32 / _bf16 (cos / sin from a cos_sin_cache) and xk_rope_theta_f32 / _bf16
// (computed from base and scaling_factor) — NeoX and GPT-J, q_heads / k_heads with GQA / MQA, k
// NULL with k_heads = 0 (q NULL with q_heads = 0), rotary_dim 0 (= head_dim) or below head_dim,
// token-major and head-major layouts with padded strides, q and k as column slices of one packed
// qkv buffer, element-misaligned tensors, positions up to max_position - 1 (and up to INT64_MAX
// when computed), tokens = 0 with NULL pointers; huge sizes (no-ops or rejected, at once); ISA cap
// and thread count changes. A valid call is checked against a double-precision (long double for
// the angles) loop of the header's math (bound: see expect_tensor) and rerun with the cap at
// XK_ISA_SCALAR (the reference implementation), both results checked and compared with each other.
#include <algorithm>
#include <type_traits>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

constexpr int64_t kMaxTokens = 8;
constexpr int64_t kMaxHeads = 8;
constexpr int64_t kMaxHeadDim = 300;
constexpr int64_t kMaxPosition = 40;  // rows of a cos_sin_cache
// q / k values up to 1e30; cache entries up to 8 (cos / sin of scaled frequencies, or anything a
// caller baked in; short dyadic values up to 2040 go with q / k of that kind): the products stay
// finite, so fp32 and the double oracle agree on what is.
constexpr float kBig = 1e30f;
constexpr float kBigCache = 8.0f;
constexpr double kU = 0x1p-24;  // fp32 unit roundoff

using fz::enc;
using fz::kBf16;
using fz::val;

// The arguments of one call, as passed (strides 0 = packed, rotary_dim 0 = head_dim).
template <class T>
struct Args {
    xk_rope_style style = XK_ROPE_NEOX;
    int64_t tokens = 0, q_heads = 0, k_heads = 0, head_dim = 2, rotary_dim = 0;
    T* q = nullptr;
    int64_t q_ts = 0, q_hs = 0;
    T* k = nullptr;
    int64_t k_ts = 0, k_hs = 0;
    const int64_t* positions = nullptr;
    const float* cache = nullptr;  // xk_rope_f32 / _bf16
    int64_t max_position = 1;
    float base = 10000.0f, scaling = 1.0f;  // xk_rope_theta_*
};

const char* fn_name(bool theta, bool bf16) {
    static const char* const names[4] = {"xk_rope_f32", "xk_rope_theta_f32", "xk_rope_bf16", "xk_rope_theta_bf16"};
    return names[(theta ? 1 : 0) + (bf16 ? 2 : 0)];
}

template <class T>
xk_status invoke(bool theta, const Args<T>& a) {
    if constexpr (kBf16<T>) {
        if (theta)
            return xk_rope_theta_bf16(a.style, a.tokens, a.q_heads, a.k_heads, a.head_dim, a.rotary_dim, a.q, a.q_ts, a.q_hs,
                                      a.k, a.k_ts, a.k_hs, a.positions, a.base, a.scaling);
        return xk_rope_bf16(a.style, a.tokens, a.q_heads, a.k_heads, a.head_dim, a.rotary_dim, a.q, a.q_ts, a.q_hs, a.k,
                            a.k_ts, a.k_hs, a.positions, a.cache, a.max_position);
    } else {
        if (theta)
            return xk_rope_theta_f32(a.style, a.tokens, a.q_heads, a.k_heads, a.head_dim, a.rotary_dim, a.q, a.q_ts, a.q_hs,
                                     a.k, a.k_ts, a.k_hs, a.positions, a.base, a.scaling);
        return xk_rope_f32(a.style, a.tokens, a.q_heads, a.k_heads, a.head_dim, a.rotary_dim, a.q, a.q_ts, a.q_hs, a.k,
                           a.k_ts, a.k_hs, a.positions, a.cache, a.max_position);
    }
}

// One tensor's layout: strides as passed and resolved, and its extent in elements.
struct Layout {
    int64_t heads = 0, ts = 0, hs = 0, rts = 0, rhs = 0, extent = 0;
};

// A valid layout of `heads` heads: token-major ([tokens, heads, head_dim], strides 0, packed or
// padded) or head-major ([heads, tokens, head_dim]); a stride that is never applied (one head, one
// token, or no heads) may be anything >= 0.
Layout pick_layout(In& in, int64_t tokens, int64_t heads, int64_t hd) {
    Layout L;
    L.heads = heads;
    if (heads == 0) {
        if (in.pick(3) == 2) L.ts = in.pick(500), L.hs = in.pick(500);
        return L;
    }
    if (heads > 1 && in.pick(3) == 2) {  // head-major
        L.ts = L.rts = hd + in.pad();
        L.hs = L.rhs = std::max<int64_t>(tokens - 1, 0) * L.rts + hd + in.pad();
    } else {
        L.hs = in.coin() ? 0 : hd + in.pad();
        L.rhs = L.hs ? L.hs : hd;
        const int64_t head_span = (heads - 1) * L.rhs + hd;
        switch (in.pick(3)) {
            case 0: L.ts = 0; break;
            case 1: L.ts = heads * L.rhs + in.pad(); break;
            default: L.ts = head_span + in.pad(); break;
        }
        L.rts = L.ts ? L.ts : heads * L.rhs;
        if (heads == 1 && L.ts != 0 && in.pick(4) == 3) L.hs = in.pick(static_cast<int>(hd));  // one head: unused
    }
    if (tokens == 1 && in.pick(4) == 3) L.ts = in.pick(static_cast<int>(hd));  // one token: unused
    L.extent = tokens == 0 ? 0 : (tokens - 1) * L.rts + (heads - 1) * L.rhs + hd;
    return L;
}

// What an element of q / k must hold after a valid call.
enum Expect : signed char {
    kKeep,   // not rotated (beyond rotary_dim, stride padding, v of a qkv buffer): bytes as before
    kValue,  // want +- tol
    kExact,  // want exactly (the fp32 arithmetic is exact: see expect_tensor)
    kNaN,    // a NaN among the pair's inputs (x1, x2, cos, sin) reaches both outputs
    kAny,    // not checked (an infinity among the inputs)
};

struct Expected {
    std::vector<signed char> kind;
    std::vector<double> want, tol, tol_diff;  // tol_diff: between the JIT and the reference
    std::vector<double> away;                 // kExact: want with a tie rounded away (ties_away: documented)
    void reset(size_t n) {
        kind.assign(n, kKeep), want.assign(n, 0.0), tol.assign(n, 0.0), tol_diff.assign(n, 0.0), away.assign(n, 0.0);
    }
};

// Documented in rope.hpp (Rounding; found by this target): without AVX512-BF16 (caps XK_ISA_AVX2 to XK_ISA_AVX512_VNNI) the JIT
// writes whole blocks of bf16 q / k through JitIo::store2_eo_away, which rounds ties away from
// zero where the header rounds to nearest even: xk_rope_bf16(NEOX or GPTJ, tokens=1, q_heads=1,
// k_heads=0, head_dim=64, rotary_dim=0, q pairs (x1, x2) = (1, 2^-8), strides 0, k=NULL,
// positions={0}, cache row = 32 x cos 1, 32 x sin -1, max_position=1): x1 cos - x2 sin = 1 + 2^-8
// (exact in fp32, a bf16 tie) comes out 1.0078125, want 1. At those caps an exact result may be
// its tie rounded away. Remove once the library is fixed.
bool ties_away(xk_isa cap) { return cap >= XK_ISA_AVX2 && cap < XK_ISA_AVX512_BF16; }
double bf16_ties_away(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return fz::from_bf16(static_cast<uint16_t>((u + 0x8000u) >> 16));
}

// Documented in rope.hpp (Rounding; found by this target): at AVX512-BF16 (cap >= XK_ISA_AVX512_BF16) the JIT's bf16 stores
// through VCVTNE2PS2BF16 flush fp32 results below 2^-126 to zero, where the header rounds to
// nearest even (bf16 has denormals): xk_rope_bf16(NEOX, tokens=1, q_heads=1, k_heads=0,
// head_dim=64, rotary_dim=0, q all 0x0040 (2^-127), strides 0, k=NULL, positions={0}, cache row =
// 32 x cos 1, 32 x sin 0, max_position=1) gives q = 0, want 2^-127. At that cap a bf16 element
// whose value is below 2^-126 may be 0. Remove once the library is fixed.
bool flushed(bool bf16, xk_isa cap, double got, double want, double tol) {
    return bf16 && cap >= XK_ISA_AVX512_BF16 && got == 0 && std::fabs(want) < 0x1p-126 + tol;
}

template <class T>
struct Problem {
    bool theta = false, qkv = false;  // qkv: q and k in Q (one packed buffer), K unused
    Args<T> a;
    int64_t rot = 0;  // resolved rotary_dim
    Layout lq, lk;
    int64_t k_offset = 0;  // elements of k's first element from its buffer's data()
    Buf<T> Q, K;
    Buf<int64_t> P;
    Buf<float> C;
    Expected eq, ek;
    std::vector<unsigned char> q0, k0, p0, c0;
    Buf<T>& kbuf() { return qkv ? Q : K; }
    const char* name() const { return fn_name(theta, kBf16<T>); }
    void snapshot() { q0 = Q.snapshot(), k0 = K.snapshot(), p0 = P.snapshot(), c0 = C.snapshot(); }
    void restore() {
        if (!q0.empty()) std::memcpy(Q.bytes(), q0.data(), q0.size());
        if (!k0.empty()) std::memcpy(K.bytes(), k0.data(), k0.size());
    }
};

// cos / sin of one token: exact (long double) values and how far the library's fp32 ones may be
// from them (e_cs, absolute), or the cache's floats (e_cs = 0).
struct CosSin {
    std::vector<long double> c, s;
    double e_cs = 0;
    bool from_cache = false;
};

CosSin cos_sin_of(bool theta, float base, float scaling, int64_t rot, const float* cache, int64_t pos) {
    const int64_t half = rot / 2;
    CosSin cs;
    cs.c.resize(half), cs.s.resize(half);
    if (!theta) {
        cs.from_cache = true;
        for (int64_t i = 0; i < half; ++i) cs.c[i] = cache[pos * rot + i], cs.s[i] = cache[pos * rot + half + i];
        return cs;
    }
    // theta_i = (p / scaling_factor) base^(-2i / rotary_dim); the header: cos / sin are the exact
    // values rounded to fp32, the reference evaluating theta in double (a few double roundings of
    // p / s, the exponent, pow and the product: relative 2^-48 + |ln base| 2^-51 of theta), so
    // e_cs = 2^-24 (half an fp32 ulp of a value <= 1, and libm's cos / sin) + that error of theta.
    const long double p = static_cast<long double>(pos) / scaling;
    const double lnb = std::fabs(std::log(static_cast<double>(base)));
    double max_theta = 0;
    for (int64_t i = 0; i < half; ++i) {
        const long double th = p * std::pow(static_cast<long double>(base), -2.0L * i / rot);
        cs.c[i] = std::cos(th), cs.s[i] = std::sin(th);
        max_theta = std::max(max_theta, static_cast<double>(th));
    }
    cs.e_cs = 0x1p-24 + max_theta * (0x1p-48 + lnb * 0x1p-51);
    return cs;
}

// Expected values of one tensor (base: its first element in buf; e: buf's expectations).
//
// Bound. The header: fp32 math, (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin), bf16 rounded once
// to nearest even. Two products and a sum in fp32 (or a product and an FMA) are within
// 2u (|x1 cos| + |x2 sin|) of the exact value for the fp32 cos / sin used; those are off by at
// most e_cs (cos_sin_of), adding (|x1| + |x2|) e_cs; 2^-147 covers three roundings in the denormal
// range (2^-150 each). bf16: half a bf16 ulp of the result, 2^-8 relative, 2^-134 absolute (half
// the spacing of bf16 denormals).
// Between two implementations (tol_diff): the arithmetic of both, and for the computed cos / sin
// (theta) each side's e_cs (fuzz_rope found the JIT and the reference a float ulp apart there:
// 3.52011704 against 3.52011681, so their cos / sin need not be the same floats).
// Exact cases: with cache floats, when both products and their difference are floats, every
// fp32 evaluation gives that difference exactly, and the output must be it (f32) or its bf16
// rounded to nearest even.
template <class T>
void expect_tensor(const Problem<T>& p, const Buf<T>& buf, Expected& e, int64_t base, const Layout& L,
                   const std::vector<CosSin>& cs) {
    const Args<T>& a = p.a;
    const int64_t half = p.rot / 2;
    for (int64_t t = 0; t < a.tokens; ++t)
        for (int64_t h = 0; h < L.heads; ++h) {
            const int64_t o = base + t * L.rts + h * L.rhs;
            for (int64_t i = 0; i < half; ++i) {
                const int64_t i1 = a.style == XK_ROPE_NEOX ? i : 2 * i, i2 = a.style == XK_ROPE_NEOX ? i + half : 2 * i + 1;
                const double x1 = val(buf[o + i1]), x2 = val(buf[o + i2]);
                const long double c = cs[t].c[i], s = cs[t].s[i];
                const bool nan = std::isnan(x1) || std::isnan(x2) || std::isnan(c) || std::isnan(s);
                const bool finite = std::isfinite(x1) && std::isfinite(x2) && std::isfinite(c) && std::isfinite(s);
                const long double w1 = x1 * c - x2 * s, w2 = x2 * c + x1 * s;
                const double ecs = (std::fabs(x1) + std::fabs(x2)) * cs[t].e_cs;
                for (int j = 0; j < 2; ++j) {
                    const int64_t at = o + (j == 0 ? i1 : i2);
                    const long double w = j == 0 ? w1 : w2;
                    const long double terms = j == 0 ? std::fabs(x1 * c) + std::fabs(x2 * s) : std::fabs(x2 * c) + std::fabs(x1 * s);
                    const double arith = 2.01 * kU * static_cast<double>(terms);
                    e.kind[at] = nan ? kNaN : finite ? kValue : kAny;
                    e.want[at] = static_cast<double>(w);
                    double tol = arith + ecs + 0x1p-147, td = 2 * arith + 2 * ecs + 0x1p-146;
                    if (kBf16<T>) {
                        tol += 0x1p-8 * (std::fabs(e.want[at]) + tol) + 0x1p-134;
                        td += 0x1p-7 * (std::fabs(e.want[at]) + td) + 0x1p-133;
                    }
                    e.tol[at] = tol, e.tol_diff[at] = td;
                    // Exact: both products (exact in long double) are floats, their sum s is exact
                    // (Fast2Sum's error term is 0) and a float.
                    const long double t1 = j == 0 ? x1 * c : x2 * c, t2 = j == 0 ? -(x2 * s) : x1 * s;
                    const long double big = std::fabs(t1) >= std::fabs(t2) ? t1 : t2, small = big == t1 ? t2 : t1;
                    const long double sum = t1 + t2;
                    if (finite && cs[t].from_cache && static_cast<float>(t1) == t1 && static_cast<float>(t2) == t2 &&
                        small - (sum - big) == 0 && static_cast<float>(sum) == sum) {
                        e.kind[at] = kExact;
                        e.want[at] = val(enc<T>(static_cast<float>(sum)));
                        e.away[at] = kBf16<T> ? bf16_ties_away(static_cast<float>(sum)) : e.want[at];
                    }
                }
            }
        }
}

// Builds a valid call (in place: the pointers in p.a point into p's buffers).
template <class T>
void make_problem(In& in, bool theta, Problem<T>& p) {
    p.theta = theta;
    Args<T>& a = p.a;
    a.style = in.coin() ? XK_ROPE_GPTJ : XK_ROPE_NEOX;
    a.tokens = in.dim(0, kMaxTokens);
    a.head_dim = in.dim(2, kMaxHeadDim);
    const int64_t hd = a.head_dim;
    switch (in.pick(3)) {  // rotary_dim: 0 (= head_dim, if even), head_dim rounded down to even, or less
        case 0: a.rotary_dim = hd % 2 == 0 ? 0 : hd - 1; break;
        case 1: a.rotary_dim = hd / 2 * 2; break;
        default: a.rotary_dim = 2 * in.p.ConsumeIntegralInRange<int64_t>(1, hd / 2); break;
    }
    p.rot = a.rotary_dim ? a.rotary_dim : hd;
    a.q_heads = in.dim(0, kMaxHeads);
    if (a.q_heads == 0) {
        a.k_heads = in.dim(0, kMaxHeads);
    } else {  // 0 (no k), or a divisor of q_heads (MHA, GQA, MQA)
        std::vector<int64_t> divisors = {0};
        for (int64_t d = 1; d <= a.q_heads; ++d)
            if (a.q_heads % d == 0) divisors.push_back(d);
        a.k_heads = divisors[in.pick(static_cast<int>(divisors.size()))];
    }
    // Values: from In (ordinary to extreme, or non-finite too), or short dyadic ones, whose
    // products and sums are often exact in fp32 (and bf16 ties): the exact checks of
    // expect_tensor.
    const int values = in.pick(8);
    const bool nonfinite = values == 7, dyadic = values == 6;  // (an exhausted input reads 0: finite)
    auto value = [&](float big) {
        if (dyadic) return std::ldexp(static_cast<float>(in.coin() ? in.pick(9) - 4 : in.pick(511) - 255), in.pick(12) - 8);
        return nonfinite ? in.any_value(big) : in.value(big);
    };
    const size_t mis = in.pick(3);
    auto fill = [&](Buf<T>& b) {
        for (size_t i = 0; i < b.size(); ++i) b[i] = enc<T>(value(kBig));
    };
    p.qkv = a.q_heads > 0 && a.k_heads > 0 && in.pick(4) == 3;
    if (p.qkv) {  // [tokens, q_heads + 2 k_heads, head_dim] (+ padding per token): q, k, v
        const int64_t row = (a.q_heads + 2 * a.k_heads) * hd + in.pad();
        p.lq = Layout{a.q_heads, row, in.coin() ? 0 : hd, row, hd, 0};
        p.lk = Layout{a.k_heads, row, in.coin() ? 0 : hd, row, hd, 0};
        p.Q = Buf<T>(static_cast<size_t>(a.tokens * row), mis);
        p.k_offset = a.q_heads * hd;
    } else {
        p.lq = pick_layout(in, a.tokens, a.q_heads, hd);
        p.lk = pick_layout(in, a.tokens, a.k_heads, hd);
        p.Q = Buf<T>(static_cast<size_t>(p.lq.extent), mis);
        p.K = Buf<T>(static_cast<size_t>(p.lk.extent), mis);
    }
    fill(p.Q);
    fill(p.K);
    a.q_ts = p.lq.ts, a.q_hs = p.lq.hs, a.k_ts = p.lk.ts, a.k_hs = p.lk.hs;
    a.q = a.q_heads ? p.Q.data() : nullptr;
    a.k = a.k_heads ? p.kbuf().data() + p.k_offset : nullptr;

    // Positions: 0, the last row of the cache, anything in range; computed: also huge ones.
    if (!theta) a.max_position = in.dim(1, kMaxPosition);
    p.P = Buf<int64_t>(static_cast<size_t>(a.tokens), mis);
    for (int64_t t = 0; t < a.tokens; ++t) {
        switch (in.pick(4)) {
            case 0: p.P[t] = 0; break;
            case 1: p.P[t] = theta ? in.p.ConsumeIntegralInRange<int64_t>(0, int64_t(1) << 31) : a.max_position - 1; break;
            case 2: p.P[t] = theta ? (in.coin() ? std::numeric_limits<int64_t>::max() : int64_t(1) << in.pick(63)) : a.max_position - 1; break;
            default: p.P[t] = in.p.ConsumeIntegralInRange<int64_t>(0, theta ? 1 << 16 : a.max_position - 1); break;
        }
    }
    a.positions = p.P.data();
    if (theta) {
        static const float bases[] = {10000.0f, 500000.0f, 1.0f, 0.5f, std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::denorm_min()};
        const int kb = in.pick(7);
        a.base = kb < 6 ? bases[kb] : static_cast<float>(in.p.ConsumeFloatingPointInRange<double>(1e-3, 1e7));
        static const float scales[] = {1.0f, 2.0f, 8.0f, 0.25f, std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::denorm_min()};
        const int ks = in.pick(7);
        a.scaling = ks < 6 ? scales[ks] : static_cast<float>(in.p.ConsumeFloatingPointInRange<double>(1e-3, 100.0));
    } else {
        // The cache: cos / sin of r base^(-2i / rotary_dim) (as vLLM builds it), or anything.
        p.C = Buf<float>(static_cast<size_t>(a.max_position * p.rot), mis);
        const bool arbitrary = dyadic || in.pick(3) == 2;
        const double base = 1.0 + in.p.ConsumeFloatingPointInRange<double>(0.0, 1e6);
        const int64_t half = p.rot / 2;
        for (int64_t r = 0; r < a.max_position; ++r)
            for (int64_t i = 0; i < half; ++i) {
                const double th = static_cast<double>(r) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(p.rot));
                const bool any = dyadic || (arbitrary && in.coin());
                p.C[r * p.rot + i] = any ? value(kBigCache) : static_cast<float>(std::cos(th));
                p.C[r * p.rot + half + i] = any ? value(kBigCache) : static_cast<float>(std::sin(th));
            }
        a.cache = p.C.data();
    }
    if (a.tokens == 0 && in.coin()) a.q = a.k = nullptr, a.positions = nullptr, a.cache = nullptr;  // nothing is read

    // Expected q and k.
    p.eq.reset(p.Q.size());
    p.ek.reset(p.K.size());
    std::vector<CosSin> cs;
    for (int64_t t = 0; t < a.tokens; ++t) cs.push_back(cos_sin_of(theta, a.base, a.scaling, p.rot, p.C.data(), p.P[t]));
    expect_tensor(p, p.Q, p.eq, 0, p.lq, cs);
    expect_tensor(p, p.kbuf(), p.qkv ? p.eq : p.ek, p.k_offset, p.lk, cs);
    p.snapshot();
}

// Checks a q / k buffer after a valid call run with that cap.
template <class T>
void check_buffer(const Problem<T>& p, const Buf<T>& b, const Expected& e, const std::vector<unsigned char>& before,
                  const char* what, const char* name, xk_isa cap) {
    fz::expect_guards(b, what, name);
    const Args<T>& a = p.a;
    for (size_t i = 0; i < b.size(); ++i) {
        const double got = val(b[i]);
        bool ok = true;
        switch (e.kind[i]) {
            case kKeep: ok = std::memcmp(b.bytes() + i * sizeof(T), before.data() + i * sizeof(T), sizeof(T)) == 0; break;
            case kNaN: ok = std::isnan(got); break;
            case kExact:
                ok = got == e.want[i] || (kBf16<T> && ties_away(cap) && got == e.away[i]) || flushed(kBf16<T>, cap, got, e.want[i], 0);
                break;
            case kValue: ok = fz::close(got, e.want[i], 0, e.tol[i]) || flushed(kBf16<T>, cap, got, e.want[i], e.tol[i]); break;
            default: break;
        }
        if (!ok)
            fz::finding("%s: %s[%zu] = %.9g, want %s%.9g (+- %.3g); style=%d tokens=%lld q_heads=%lld k_heads=%lld "
                        "head_dim=%lld rotary_dim=%lld q strides %lld,%lld k strides %lld,%lld qkv=%d max_position=%lld "
                        "base=%g scaling=%g",
                        what, name, i, got,
                        e.kind[i] == kKeep ? "unchanged " : e.kind[i] == kNaN ? "NaN " : e.kind[i] == kExact ? "exactly " : "",
                        e.want[i], e.tol[i], static_cast<int>(a.style), static_cast<long long>(a.tokens),
                        static_cast<long long>(a.q_heads), static_cast<long long>(a.k_heads),
                        static_cast<long long>(a.head_dim), static_cast<long long>(a.rotary_dim),
                        static_cast<long long>(a.q_ts), static_cast<long long>(a.q_hs), static_cast<long long>(a.k_ts),
                        static_cast<long long>(a.k_hs), p.qkv, static_cast<long long>(a.max_position),
                        static_cast<double>(a.base), static_cast<double>(a.scaling));
    }
}

template <class T>
void check_valid(Problem<T>& p, xk_isa cap) {
    const std::string what = std::string(p.name()) + (cap == XK_ISA_SCALAR ? " (scalar)" : "");
    const char* w = what.c_str();
    check_buffer(p, p.Q, p.eq, p.q0, w, p.qkv ? "qkv" : "q", cap);
    check_buffer(p, p.K, p.ek, p.k0, w, "k", cap);
    fz::expect_unchanged(p.P, p.p0, w, "positions");  // inputs are never written
    fz::expect_unchanged(p.C, p.c0, w, "cos_sin_cache");
}

// The JIT result (jit, a copy of b after the first run) against the reference's (b).
template <class T>
void compare(const Problem<T>& p, const Buf<T>& jit, const Buf<T>& b, const Expected& e, const char* name, xk_isa cap) {
    for (size_t i = 0; i < b.size(); ++i) {
        if (e.kind[i] != kValue) continue;  // (kKeep, kExact, kNaN: checked exactly in both runs)
        const double j = val(jit[i]), r = val(b[i]);
        if (!fz::close(j, r, 0, e.tol_diff[i]) && !flushed(kBf16<T>, cap, j, r, e.tol_diff[i]))
            fz::finding("%s: %s[%zu] = %.9g at isa %d, %.9g at scalar (+- %.3g); style=%d tokens=%lld head_dim=%lld "
                        "rotary_dim=%lld",
                        p.name(), name, i, j, static_cast<int>(cap), r, e.tol_diff[i], static_cast<int>(p.a.style),
                        static_cast<long long>(p.a.tokens), static_cast<long long>(p.a.head_dim),
                        static_cast<long long>(p.a.rotary_dim));
    }
}

// Makes exactly one argument of a valid call wrong (as the header defines it); returns what.
template <class T>
const char* spoil(In& in, Problem<T>& p, Buf<T>& dummy) {
    Args<T>& a = p.a;
    const int64_t hd = a.head_dim;
    const bool any = a.tokens > 0 && a.positions != nullptr;
    const bool anyq = any && a.q_heads > 0, anyk = any && a.k_heads > 0;
    auto aligned8 = [](const void* q) { return reinterpret_cast<const int64_t*>(reinterpret_cast<uintptr_t>(q) / 8 * 8); };
    switch (in.pick(16)) {
        case 0: { const int v = in.bad_enum(2); std::memcpy(&a.style, &v, sizeof v); return "style enum"; }
        case 1: {
            const int64_t v = in.coin() ? -1 - in.pick(5) : std::numeric_limits<int64_t>::min();
            const int k = in.pick(3);
            (k == 0 ? a.tokens : k == 1 ? a.q_heads : a.k_heads) = v;
            return k == 0 ? "tokens < 0" : k == 1 ? "q_heads < 0" : "k_heads < 0";
        }
        case 2: a.head_dim = in.coin() ? 0 : -1 - in.pick(300); return "head_dim < 1";
        case 3:
            switch (in.pick(3)) {
                case 0: a.rotary_dim = -2 - 2 * in.pick(5); return "rotary_dim < 0";
                case 1: a.rotary_dim = hd + 1 + in.pick(4); return "rotary_dim > head_dim";
                default: a.rotary_dim = 1 + 2 * in.pick(static_cast<int>((hd + 1) / 2)); return "rotary_dim odd";
            }
        case 4: if (a.q_heads > 0 && a.k_heads > 0) { a.k_heads = a.q_heads + 1 + in.pick(3); return "k_heads does not divide q_heads"; } [[fallthrough]];
        case 5: {  // a stride below its minimum (negative: at any head count)
            const bool q = in.coin();
            int64_t& hs = q ? a.q_hs : a.k_hs;
            int64_t& ts = q ? a.q_ts : a.k_ts;
            const int64_t heads = q ? a.q_heads : a.k_heads;
            switch (in.pick(4)) {
                case 0: hs = -1 - in.pick(3); return "head_stride < 0";
                case 1: ts = -1 - in.pick(3); return "token_stride < 0";
                case 2: if (heads > 1) { hs = 1 + in.pick(static_cast<int>(hd - 1)); return "head_stride < head_dim"; } [[fallthrough]];
                default: if (heads > 0 && a.tokens > 1) { ts = 1 + in.pick(static_cast<int>(hd - 1)); return "token_stride < head_dim"; }
                         ts = std::numeric_limits<int64_t>::min(); return "token_stride < 0";
            }
        }
        case 6: {  // heads of different tokens overlapping: token t + 1's head h is token t's head h + 1
            const bool q = in.coin();
            const Layout& L = q ? p.lq : p.lk;
            if (a.tokens > 1 && L.heads > 1) {
                const bool token_major = L.rts >= (L.heads - 1) * L.rhs + hd;
                if (token_major) (q ? a.q_ts : a.k_ts) = L.rhs;
                else (q ? a.q_hs : a.k_hs) = L.rts;
                return "heads of different tokens overlap";
            }
            [[fallthrough]];
        }
        case 7: if (anyq) { a.q = nullptr; return "q null"; } [[fallthrough]];
        case 8: if (anyk) { a.k = nullptr; return "k null"; } [[fallthrough]];
        case 9: if (any && !p.theta) { a.cache = nullptr; return "cos_sin_cache null"; } [[fallthrough]];
        case 10:  // a pointer the counts say is unused (at any token count)
            if (a.k_heads == 0) { a.k = dummy.data(); return "k given with k_heads = 0"; }
            if (a.q_heads == 0) { a.q = dummy.data(); return "q given with q_heads = 0"; }
            [[fallthrough]];
        case 11:
            if (any) {
                int64_t& pos = p.P[in.pick(static_cast<int>(a.tokens))];
                if (p.theta || in.coin()) { pos = in.coin() ? -1 - in.pick(100) : std::numeric_limits<int64_t>::min(); return "position < 0"; }
                pos = in.coin() ? a.max_position + in.pick(3) : std::numeric_limits<int64_t>::max();
                return "position >= max_position";
            }
            [[fallthrough]];
        case 12:
            if (!p.theta) {
                static const int64_t bad[] = {0, -1, std::numeric_limits<int64_t>::min(), int64_t(1) << 62,
                                              std::numeric_limits<int64_t>::max()};
                a.max_position = bad[in.pick(5)];
                return "max_position < 1 or max_position*rotary_dim overflowing";
            } else {
                static const float bad[] = {0.0f, -0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                            -std::numeric_limits<float>::denorm_min()};
                const float v = bad[in.pick(7)];
                if (in.coin()) { a.base = v; return "base not finite or <= 0"; }
                a.scaling = v;
                return "scaling_factor not finite or <= 0";
            }
        case 13: if (anyq && anyk) { a.k = a.q + in.pick(static_cast<int>(hd)); return "k overlaps q"; } [[fallthrough]];
        case 14:
            if (anyq || anyk) {
                a.positions = aligned8(anyq ? a.q : a.k);
                return anyq ? "positions overlap q" : "positions overlap k";
            }
            [[fallthrough]];
        case 15:
            if ((anyq || anyk) && !p.theta) {
                a.cache = reinterpret_cast<const float*>(aligned8(anyq ? a.q : a.k));
                return anyq ? "cos_sin_cache overlaps q" : "cos_sin_cache overlaps k";
            }
            [[fallthrough]];
        default:
            // Extents beyond int64: heads * head_stride (or the head extent) for INT64_MAX heads,
            // or (tokens - 1) * token_stride for a token stride of INT64_MAX.
            if (a.tokens > 1 && a.q_heads > 0) { a.q_ts = std::numeric_limits<int64_t>::max(); return "q token extent overflowing"; }
            a.q_heads = std::numeric_limits<int64_t>::max();
            return "q_heads * head_stride overflowing";
    }
}

template <class T>
void op_rope(In& in, bool theta) {
    Problem<T> p;
    make_problem(in, theta, p);
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    const char* what = p.name();
    if (hostile) {
        Buf<T> dummy(static_cast<size_t>(p.a.head_dim) * 4);
        const char* wrong = spoil(in, p, dummy);
        const auto p0 = p.P.snapshot(), d0 = dummy.snapshot();  // (spoil may change a position)
        const xk_status s = fz::timed(what, [&] { return invoke<T>(theta, p.a); });
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(p.Q, p.q0, what, "q");
        fz::expect_unchanged(p.K, p.k0, what, "k");
        fz::expect_unchanged(p.P, p0, what, "positions");
        fz::expect_unchanged(p.C, p.c0, what, "cos_sin_cache");
        fz::expect_unchanged(dummy, d0, what, "an unused q / k");
        return;
    }
    xk_isa cap = XK_ISA_SCALAR;
    xk_get_max_isa(&cap);
    fz::expect_ok(fz::timed(what, [&] { return invoke<T>(theta, p.a); }), what);
    check_valid(p, cap);
    // The same call with the cap at scalar (the reference): checked alike, and the two results
    // within tol_diff of each other.
    if (cap == XK_ISA_SCALAR) return;
    const Buf<T> jq = p.Q, jk = p.K;
    p.restore();
    fz::set_cap(XK_ISA_SCALAR);
    const xk_status s = fz::timed(what, [&] { return invoke<T>(theta, p.a); });
    fz::set_cap(cap);
    fz::expect_ok(s, what);
    check_valid(p, XK_ISA_SCALAR);
    compare(p, jq, p.Q, p.eq, p.qkv ? "qkv" : "q", cap);
    compare(p, jk, p.K, p.ek, "k", cap);
}

// Huge sizes: tokens = 0 with huge head counts or head_dim is a no-op (valid, nothing touched, at
// once); a huge token count with null positions, or a huge head count with a null tensor, is
// rejected at once; never out of memory.
template <class T>
void op_huge(In& in, bool theta) {
    static const int64_t huge[] = {int64_t(1) << 20, int64_t(1) << 32, int64_t(1) << 40};
    Buf<T> q(64), k(64);
    Buf<int64_t> pos(8);
    Buf<float> cache(64);
    q.fill(enc<T>(1.0f)), k.fill(enc<T>(2.0f)), pos.fill(0), cache.fill(0.5f);
    const auto q0 = q.snapshot(), k0 = k.snapshot();
    Args<T> a;
    a.rotary_dim = 2;
    a.q = q.data();
    a.k_heads = in.coin() ? 1 : 0;
    a.k = a.k_heads ? k.data() : nullptr;
    a.positions = pos.data();
    a.cache = theta ? nullptr : cache.data();
    a.max_position = theta ? 1 : huge[in.pick(3)];
    const char* what = fn_name(theta, kBf16<T>);
    const char* wrong = "";
    switch (in.pick(3)) {
        case 0:  // a no-op
            a.tokens = 0;
            if (in.coin()) a.q_heads = huge[in.pick(3)], a.head_dim = 2 + 2 * in.pick(150);
            else a.q_heads = 1, a.head_dim = huge[in.pick(3)];
            if (in.coin()) a.q = a.k = nullptr, a.positions = nullptr, a.cache = nullptr, a.k_heads = 0;
            break;
        case 1:
            a.tokens = in.coin() ? huge[in.pick(3)] : std::numeric_limits<int64_t>::max();
            a.q_heads = 1, a.head_dim = 2 + 2 * in.pick(4);
            a.positions = nullptr;
            wrong = "huge tokens, positions null";
            break;
        default:
            a.tokens = 1 + in.pick(8);
            a.q_heads = huge[in.pick(3)], a.head_dim = 2 + 2 * in.pick(150);
            a.q = nullptr;
            wrong = "huge q_heads, q null";
            break;
    }
    const xk_status s = fz::timed(what, [&] { return invoke<T>(theta, a); });
    if (s == XK_OUT_OF_MEMORY)
        fz::finding("%s: tokens=%lld q_heads=%lld head_dim=%lld ran out of memory", what, static_cast<long long>(a.tokens),
                    static_cast<long long>(a.q_heads), static_cast<long long>(a.head_dim));
    if (wrong[0] == '\0') fz::expect_ok(s, what);
    else fz::expect_rejected(s, what, wrong);
    fz::expect_unchanged(q, q0, what, "q");
    fz::expect_unchanged(k, k0, what, "k");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        const int op = in.pick(10);
        if (op == 0) { fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); continue; }
        if (op == 1) { xk_set_num_threads(1 + in.pick(2)); continue; }
        const int f = in.pick(4);  // which of the four functions
        const bool theta = f & 1, bf16 = f & 2;
        if (op == 2) {
            if (bf16) op_huge<uint16_t>(in, theta);
            else op_huge<float>(in, theta);
        } else if (bf16) {
            op_rope<uint16_t>(in, theta);
        } else {
            op_rope<float>(in, theta);
        }
    }
    return 0;
}
