// RoPE: every ISA's selection against a naive double-precision oracle; NeoX and GPT-J; partial
// rotary; GQA / MQA / q-only / k-only; packed, fused-qkv, padded-head and head-major layouts;
// cos / sin from an f32 or bf16 cache or computed (and the two agreeing); int64 / int32
// positions; misaligned pointers; 1 and 2 threads; bad input for every entry point (C API too).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/parallel.hpp"
#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/rope/rope.hpp"
#include "kernels/typed_matrix.hpp"
#include "xk/rope.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;
using xk::test::TypedMatrix;

// Tolerances against the exact result (double) of the stored inputs and cos / sin (for the
// compute mode: the exact cos / sin of the exact angle). Inputs are in [-1, 1).
//   f32:  x1*c - x2*s in fp32 plus fp32 rounding of cos / sin: absolute ~2e-7 -> atol 1e-6,
//         rtol 1e-5.
//   bf16: one rounding to bf16 (<= 2^-8 relative) on top -> rtol 2^-8 + 1e-5, atol 1e-6.
//   Elements outside [0, rotary_dim) of each head and outside the heads: bitwise unchanged.
constexpr double kF32Atol = 1e-6, kF32Rtol = 1e-5;
constexpr double kBf16Atol = 1e-6, kBf16Rtol = 1.0 / 256 + 1e-5;

namespace {

enum class Layout { packed, fused_qkv, padded_heads, head_major };
const char* layout_name(Layout l) {
    switch (l) {
        case Layout::packed: return "packed";
        case Layout::fused_qkv: return "fused_qkv";
        case Layout::padded_heads: return "padded_heads";
        case Layout::head_major: return "head_major";
    }
    return "?";
}

// One problem: q and k live in qbuf / kbuf (or both in qbuf for the fused layout) at element
// offsets q_off / k_off; strides are those of the (unresolved) descriptor, 0 meaning packed.
struct Problem {
    RopeDesc d;
    Layout layout = Layout::packed;
    TypedMatrix qbuf, kbuf;
    int64_t q_off = 0, k_off = 0;
    int64_t q_ts = 0, q_hs = 0, k_ts = 0, k_hs = 0;  // resolved strides, for the oracle
    std::vector<int64_t> pos64;
    std::vector<int32_t> pos32;
    TypedMatrix cache;

    void* q() { return d.q_heads ? elem(qbuf, q_off) : nullptr; }
    void* k() { return d.k_heads ? elem(layout == Layout::fused_qkv ? qbuf : kbuf, k_off) : nullptr; }
    const void* positions() const {
        return d.position_type == RopePositionType::s32 ? static_cast<const void*>(pos32.data()) : pos64.data();
    }
    RopeArgs args() {
        RopeArgs a;
        a.q = q();
        a.k = k();
        a.positions = positions();
        if (d.cos_sin == RopeCosSin::cache) a.cos_sin_cache = cache.data();
        return a;
    }
    static void* elem(TypedMatrix& m, int64_t off) { return static_cast<char*>(m.data()) + off * dtype_size(m.dtype()); }
    std::string describe() const {
        return detail::rope_kernel_desc(d).key() + " layout=" + layout_name(layout) + " tokens=" + std::to_string(d.tokens) +
               " q_heads=" + std::to_string(d.q_heads) + " k_heads=" + std::to_string(d.k_heads) +
               (d.cos_sin == RopeCosSin::compute ? " base=" + std::to_string(d.base) + " scale=" + std::to_string(d.scaling_factor) : "");
    }
};

int64_t span(int64_t tokens, int64_t heads, int64_t hd, int64_t ts, int64_t hs) {
    if (tokens == 0 || heads == 0) return 0;
    return (tokens - 1) * ts + (heads - 1) * hs + hd;
}

// The exact cos / sin table a model would build (double, rounded to the cache dtype).
TypedMatrix make_cache(DType t, int64_t max_pos, int64_t rot, double base, double scale) {
    TypedMatrix c(t, max_pos, rot);
    for (int64_t p = 0; p < max_pos; ++p)
        for (int64_t i = 0; i < rot / 2; ++i) {
            const double theta = (p / scale) * std::pow(base, -2.0 * i / rot);
            c.set(p, i, std::cos(theta));
            c.set(p, rot / 2 + i, std::sin(theta));
        }
    return c;
}

Problem make_problem(RopeStyle style, DType dt, int64_t tokens, int64_t nq, int64_t nk, int64_t hd, int64_t rot,
                     Layout layout, RopeCosSin cs, DType cache_dt, RopePositionType pt, size_t mis, uint64_t seed) {
    Problem p;
    RopeDesc& d = p.d;
    d.style = style;
    d.tokens = tokens;
    d.q_heads = nq;
    d.k_heads = nk;
    d.head_dim = hd;
    d.rotary_dim = rot;  // may be 0 = head_dim
    d.dtype = dt;
    d.position_type = pt;
    d.cos_sin = cs;
    p.layout = layout;
    switch (layout) {
        case Layout::packed:  // strides left 0: the descriptor's defaults
            p.q_hs = p.k_hs = hd;
            p.q_ts = nq * hd;
            p.k_ts = nk * hd;
            break;
        case Layout::fused_qkv:  // [tokens, (nq + 2 nk) * hd]: q, k, v column slices
            p.q_hs = p.k_hs = hd;
            p.q_ts = p.k_ts = (nq + 2 * nk) * hd;
            p.k_off = nq * hd;
            break;
        case Layout::padded_heads:
            p.q_hs = hd + 3;
            p.q_ts = nq * p.q_hs + 5;
            p.k_hs = hd + 1;
            p.k_ts = nk * p.k_hs + 2;
            break;
        case Layout::head_major:  // [heads, tokens, hd] with padding between heads
            p.q_ts = p.k_ts = hd;
            p.q_hs = tokens * hd + 4;
            p.k_hs = tokens * hd + 1;
            break;
    }
    if (layout != Layout::packed) {
        d.q_token_stride = p.q_ts;
        d.q_head_stride = p.q_hs;
        d.k_token_stride = p.k_ts;
        d.k_head_stride = p.k_hs;
    }
    const int64_t q_span = span(tokens, nq, hd, p.q_ts, p.q_hs), k_span = span(tokens, nk, hd, p.k_ts, p.k_hs);
    if (layout == Layout::fused_qkv) {
        p.qbuf = TypedMatrix(dt, 1, std::max(q_span, p.k_off + k_span) + 2 * nk * hd, 0, mis);
    } else {
        p.qbuf = TypedMatrix(dt, 1, std::max<int64_t>(q_span, 1), 0, mis);
        p.kbuf = TypedMatrix(dt, 1, std::max<int64_t>(k_span, 1), 0, mis + 1);
        p.kbuf.fill_uniform(-1, 1, seed + 1);
    }
    p.qbuf.fill_uniform(-1, 1, seed);

    const int64_t r = rot == 0 ? hd : rot;
    const int64_t max_pos = 64 + tokens;
    std::mt19937_64 g(seed + 2);
    for (int64_t t = 0; t < tokens; ++t) {
        // Unsorted, with repeats, covering 0 and max_pos - 1.
        int64_t v = static_cast<int64_t>(g() % max_pos);
        if (t == 0) v = max_pos - 1;
        if (t == 1) v = 0;
        p.pos64.push_back(v);
        p.pos32.push_back(static_cast<int32_t>(v));
    }
    if (cs == RopeCosSin::cache) {
        d.cache_dtype = cache_dt;
        d.max_position = max_pos;
        p.cache = make_cache(cache_dt, max_pos, r, 10000.0, 1.0);
    } else {
        d.base = seed % 2 ? 10000.0f : 500000.0f;
        d.scaling_factor = seed % 3 ? 1.0f : 2.5f;
    }
    return p;
}

// Expected contents of a buffer after the call: every element as before, except the rotated
// ones. exact[i] tells whether element i must be bitwise unchanged.
struct Expected {
    std::vector<double> v;
    std::vector<bool> rotated;
};

void oracle_tensor(const Problem& p, const TypedMatrix& before, int64_t off, int64_t heads, int64_t ts, int64_t hs,
                   Expected& e) {
    const RopeDesc& d = p.d;
    const int64_t hd = d.head_dim, rot = d.rotary_dim == 0 ? hd : d.rotary_dim, half = rot / 2;
    for (int64_t t = 0; t < d.tokens; ++t) {
        const int64_t pos = p.pos64[t];
        for (int64_t h = 0; h < heads; ++h) {
            const int64_t base = off + t * ts + h * hs;
            for (int64_t i = 0; i < half; ++i) {
                double c, s;
                if (d.cos_sin == RopeCosSin::cache) {
                    c = p.cache.get(pos, i);
                    s = p.cache.get(pos, half + i);
                } else {
                    const double theta = (static_cast<double>(pos) / d.scaling_factor) *
                                         std::pow(static_cast<double>(d.base), -2.0 * i / rot);
                    c = std::cos(theta);
                    s = std::sin(theta);
                }
                const int64_t i1 = d.style == RopeStyle::neox ? i : 2 * i;
                const int64_t i2 = d.style == RopeStyle::neox ? i + half : 2 * i + 1;
                const double x1 = before.get_at(base + i1), x2 = before.get_at(base + i2);
                e.v[base + i1] = x1 * c - x2 * s;
                e.v[base + i2] = x2 * c + x1 * s;
                e.rotated[base + i1] = e.rotated[base + i2] = true;
            }
        }
    }
}

Expected expect_for(const TypedMatrix& before) {
    Expected e;
    e.v.resize(before.cols());
    e.rotated.assign(before.cols(), false);
    for (int64_t i = 0; i < before.cols(); ++i) e.v[i] = before.get_at(i);
    return e;
}

::testing::AssertionResult check_buffer(const TypedMatrix& got, const Expected& e) {
    const double atol = got.dtype() == DType::bf16 ? kBf16Atol : kF32Atol;
    const double rtol = got.dtype() == DType::bf16 ? kBf16Rtol : kF32Rtol;
    for (int64_t i = 0; i < got.cols(); ++i) {
        const double g = got.get_at(i), w = e.v[i];
        if (e.rotated[i] ? !(std::fabs(g - w) <= atol + rtol * std::fabs(w)) : g != w)
            return ::testing::AssertionFailure() << "element " << i << (e.rotated[i] ? " (rotated)" : " (untouched)")
                                                 << ": got " << g << " want " << w;
    }
    return got.padding_intact();
}

// Runs `run` on p and checks every buffer against the oracle.
template <class Run>
::testing::AssertionResult run_and_check(Problem& p, Run&& run) {
    const TypedMatrix q0 = p.qbuf.clone();
    const TypedMatrix k0 = p.layout == Layout::fused_qkv ? TypedMatrix() : p.kbuf.clone();
    Expected eq = expect_for(q0);
    Expected ek = p.layout == Layout::fused_qkv ? Expected() : expect_for(k0);
    if (p.d.q_heads) oracle_tensor(p, q0, p.q_off, p.d.q_heads, p.q_ts, p.q_hs, eq);
    if (p.d.k_heads) {
        if (p.layout == Layout::fused_qkv)
            oracle_tensor(p, q0, p.k_off, p.d.k_heads, p.k_ts, p.k_hs, eq);
        else
            oracle_tensor(p, k0, p.k_off, p.d.k_heads, p.k_ts, p.k_hs, ek);
    }
    run();
    auto r = check_buffer(p.qbuf, eq);
    if (!r) return r << " (q buffer)";
    if (p.layout != Layout::fused_qkv) {
        r = check_buffer(p.kbuf, ek);
        if (!r) return r << " (k buffer)";
    }
    return ::testing::AssertionSuccess();
}

struct HeadShape {
    int64_t head_dim, rotary_dim;  // rotary_dim 0 = head_dim
};
// 62..160: the bf16 even / odd blocks (2 vlen elements of x1 / x2 for neox, of pairs for gptj:
// 16 on AVX2, 32 on AVX-512) with and without tails, full and partial rotary dims.
const HeadShape kHeadShapes[] = {{2, 0},   {6, 4},    {7, 6},    {16, 0},   {17, 16},   {40, 0},
                                 {62, 0},  {64, 0},   {72, 66},  {80, 32},  {96, 0},    {96, 48},
                                 {128, 0}, {128, 64}, {128, 96}, {160, 112}, {256, 0}};
struct Heads {
    int64_t q, k;
};
const Heads kHeads[] = {{1, 1}, {4, 1}, {8, 2}, {3, 0}, {0, 2}, {5, 5}};
const Layout kLayouts[] = {Layout::packed, Layout::fused_qkv, Layout::padded_heads, Layout::head_major};

}  // namespace

TEST(Rope, EveryIsaMatchesOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        // 2 threads: every call counts as large (bf16: the software-prefetching kernel variant)
        detail::set_nt_store_threshold(threads == 2 ? 0 : -1);
        for_each_isa([&](Isa isa) {
            uint64_t variant = 0;
            for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj}) {
                for (DType dt : {DType::f32, DType::bf16}) {
                    for (int cs = 0; cs < 3; ++cs) {  // cache f32, cache bf16, compute
                        for (const HeadShape& hs : kHeadShapes) {
                            ++variant;
                            const Heads heads = kHeads[variant % 6];
                            const Layout layout = kLayouts[variant % 4];
                            const int64_t tokens = variant % 5 == 0 ? 1 : (variant % 3 == 0 ? 33 : 5);
                            Problem p = make_problem(style, dt, tokens, heads.q, heads.k, hs.head_dim, hs.rotary_dim,
                                                     layout, cs == 2 ? RopeCosSin::compute : RopeCosSin::cache,
                                                     cs == 1 ? DType::bf16 : DType::f32,
                                                     variant % 2 ? RopePositionType::s32 : RopePositionType::s64,
                                                     variant % 3, 500 + variant);
                            const RopePlan plan(p.d);
                            EXPECT_STREQ(plan.impl_name(),
                                         detail::rope_registry().select(detail::rope_kernel_desc(plan.desc()), isa).name);
                            ASSERT_TRUE(run_and_check(p, [&] { plan.run(p.args()); }))
                                << p.describe() << " threads=" << threads;
                        }
                    }
                }
            }
        });
    }
    set_num_threads(0);
    detail::set_nt_store_threshold(-1);
}

TEST(Rope, SplitAcrossThreadsIsBitwiseIdentical) {
    // 256 tokens x 4 heads x 64: the grain gives several chunks, so 2 threads really split.
    auto make = [] {
        return make_problem(RopeStyle::neox, DType::bf16, 256, 4, 2, 64, 0, Layout::fused_qkv, RopeCosSin::compute,
                            DType::f32, RopePositionType::s64, 0, 77);
    };
    Problem a = make(), b = make();
    for_each_isa([&](Isa) {
        set_num_threads(1);
        ASSERT_TRUE(run_and_check(a, [&] { rope(a.d, a.args()); }));
        set_num_threads(2);
        EXPECT_EQ(detail::parallel_threads(b.d.tokens, detail::rope_token_grain(6, 64)), 2);
        ASSERT_TRUE(run_and_check(b, [&] { rope(b.d, b.args()); }));
        set_num_threads(0);
        ASSERT_EQ(std::memcmp(a.qbuf.data(), b.qbuf.data(), a.qbuf.elems() * 2), 0);
    });
    EXPECT_EQ(detail::parallel_threads(1, detail::rope_token_grain(32 + 8, 128)), 1);  // one token runs inline
}

TEST(Rope, ComputedCosSinAgreesWithCache) {
    for_each_isa([&](Isa) {
        for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj}) {
            for (double scale : {1.0, 3.0}) {
                for (double base : {10000.0, 1000000.0}) {
                    // Positions up to 40000: the cache holds the exact values rounded to fp32.
                    const int64_t tokens = 9, hd = 128, rot = 96, max_pos = 40001;
                    Problem a = make_problem(style, DType::f32, tokens, 4, 2, hd, rot, Layout::padded_heads,
                                             RopeCosSin::cache, DType::f32, RopePositionType::s64, 1, 3);
                    a.d.max_position = max_pos;
                    for (int64_t t = 0; t < tokens; ++t) a.pos64[t] = (t * 4999) % max_pos;
                    a.pos64[tokens - 1] = max_pos - 1;
                    // The exact table, rounded to fp32 (only the rows used are filled: the rest is never read).
                    a.cache = TypedMatrix(DType::f32, max_pos, rot);
                    for (int64_t pos : a.pos64)
                        for (int64_t i = 0; i < rot / 2; ++i) {
                            const double theta = (pos / scale) * std::pow(base, -2.0 * i / rot);
                            a.cache.set(pos, i, std::cos(theta));
                            a.cache.set(pos, rot / 2 + i, std::sin(theta));
                        }
                    Problem b = make_problem(style, DType::f32, tokens, 4, 2, hd, rot, Layout::padded_heads,
                                             RopeCosSin::compute, DType::f32, RopePositionType::s64, 1, 3);
                    b.pos64 = a.pos64;
                    b.d.base = static_cast<float>(base);
                    b.d.scaling_factor = static_cast<float>(scale);
                    ASSERT_TRUE(run_and_check(a, [&] { rope(a.d, a.args()); }));
                    ASSERT_TRUE(run_and_check(b, [&] { rope(b.d, b.args()); })) << b.describe();
                    ASSERT_TRUE(test::all_close(static_cast<const float*>(a.qbuf.data()),
                                                static_cast<const float*>(b.qbuf.data()), a.qbuf.cols(), 1e-6, 1e-6));
                    ASSERT_TRUE(test::all_close(static_cast<const float*>(a.kbuf.data()),
                                                static_cast<const float*>(b.kbuf.data()), a.kbuf.cols(), 1e-6, 1e-6));
                }
            }
        }
    });
}

// p through the registry entry impl, forced whatever the cap: its kernel is created (generated)
// and, where this machine runs its ISA, checked against the oracle; an entry that does not
// support p's descriptor passes.
template <class Impl>
::testing::AssertionResult run_forced(const Impl& impl, Problem& p, bool runs) {
    const RopePlan resolved(p.d);  // resolves strides and rotary_dim
    const auto kd = detail::rope_kernel_desc(resolved.desc());
    if (impl.supports && !impl.supports(kd)) return ::testing::AssertionSuccess();
    const auto sel = detail::rope_registry().get(kd, impl);
    if (!sel.kernel) return ::testing::AssertionFailure() << "no kernel from " << impl.name;
    if (!runs) return ::testing::AssertionSuccess();
    auto r = run_and_check(p, [&] { sel.kernel->run(resolved.desc(), p.args(), 0, p.d.tokens); });
    if (!r) r << "\n" << p.describe();
    return r;
}

TEST(Rope, EveryRegistryEntry) {
    // Each implementation forced, whatever the cap: run against the oracle where this machine has
    // its ISA, generated only elsewhere (a machine with AVX-512 / AVX512-BF16 runs them all).
    const auto& reg = detail::rope_registry();
    for (const auto& impl : reg.impls()) {
        SCOPED_TRACE(impl.name);
        const bool runs = isa_supported(impl.isa);
        uint64_t variant = 0;
        for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
            for (DType dt : {DType::f32, DType::bf16})
                for (int cs = 0; cs < 3; ++cs)
                    for (const HeadShape& hs : kHeadShapes) {
                        ++variant;
                        const Heads heads = kHeads[variant % 6];
                        Problem p = make_problem(style, dt, variant % 2 ? 3 : 1, heads.q, heads.k, hs.head_dim, hs.rotary_dim,
                                                 kLayouts[variant % 4], cs == 2 ? RopeCosSin::compute : RopeCosSin::cache,
                                                 cs == 1 ? DType::bf16 : DType::f32,
                                                 variant % 3 ? RopePositionType::s64 : RopePositionType::s32, variant % 3,
                                                 2000 + variant);
                        ASSERT_TRUE(run_forced(impl, p, runs));
                    }
        if (!runs) std::printf("[ generated only ] %s (needs %s)\n", impl.name, isa_name(impl.isa));
    }
}

TEST(Rope, EvenOddBlocksEveryTail) {
    // bf16: whole blocks of 2 vlen elements (16 on AVX2, 32 on AVX-512) of x1 / x2 (neox) or of
    // pairs (gptj) take the even / odd split, the rest the tail code. Every even rotary_dim up to
    // 132 (every tail after zero, one and two blocks of either width, for both styles) and 192 /
    // 256, full or partial, cos / sin from an f32 or bf16 cache or computed, decode-like (1 token)
    // and 16-token calls; every registry entry forced: run where this machine has its ISA,
    // generated only elsewhere.
    const auto& reg = detail::rope_registry();
    std::vector<int64_t> rots;
    for (int64_t r = 2; r <= 132; r += 2) rots.push_back(r);
    rots.push_back(192);
    rots.push_back(256);
    for (const auto& impl : reg.impls()) {
        SCOPED_TRACE(impl.name);
        const bool runs = isa_supported(impl.isa);
        uint64_t variant = 0;
        for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
            for (int cs = 0; cs < 3; ++cs)  // cache f32, cache bf16, compute
                for (int64_t rot : rots) {
                    ++variant;
                    const int64_t hd = variant % 2 ? rot : rot + 6;
                    for (int64_t tokens : {1, 16}) {
                        Problem p = make_problem(style, DType::bf16, tokens, 3, 1, hd, rot, Layout::packed,
                                                 cs == 2 ? RopeCosSin::compute : RopeCosSin::cache,
                                                 cs == 1 ? DType::bf16 : DType::f32,
                                                 variant % 3 ? RopePositionType::s64 : RopePositionType::s32, variant % 3,
                                                 7000 + variant);
                        ASSERT_TRUE(run_forced(impl, p, runs));
                    }
                }
        if (!runs) std::printf("[ generated only ] %s (needs %s)\n", impl.name, isa_name(impl.isa));
    }
}

TEST(Rope, LargestUnrolledHeadAndBeyond) {
    // The JIT kernels unroll one head (rotary_dim <= 1024): the largest one is generated for every
    // entry (its code must fit) and runs where the ISA exists; beyond it the plan falls back to
    // the reference.
    for (const auto& impl : detail::rope_registry().impls()) {
        for (DType dt : {DType::f32, DType::bf16})
            for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
                detail::RopeKernelDesc kd;
                kd.style = st;
                kd.head_dim = kd.rotary_dim = detail::kRopeJitMaxRotaryDim;
                kd.dtype = dt;
                if (impl.supports && !impl.supports(kd)) continue;
                ASSERT_TRUE(detail::rope_registry().get(kd, impl).kernel) << impl.name;
            }
    }
    for_each_isa([&](Isa) {
        for (int64_t hd : {detail::kRopeJitMaxRotaryDim, 2 * detail::kRopeJitMaxRotaryDim}) {
            Problem p = make_problem(RopeStyle::gptj, DType::bf16, 3, 2, 1, hd, 0, Layout::packed, RopeCosSin::cache,
                                     DType::f32, RopePositionType::s64, 0, 77);
            const RopePlan plan(p.d);
            if (hd > detail::kRopeJitMaxRotaryDim) EXPECT_STREQ(plan.impl_name(), "ref:scalar");
            ASSERT_TRUE(run_and_check(p, [&] { plan.run(p.args()); })) << p.describe();
        }
    });
}

TEST(Rope, ExactProperties) {
    for_each_isa([&](Isa) {
        // Position 0 is the identity (cos 1, sin 0), bitwise.
        Problem p = make_problem(RopeStyle::neox, DType::bf16, 3, 2, 1, 16, 0, Layout::packed, RopeCosSin::compute,
                                 DType::f32, RopePositionType::s64, 0, 5);
        p.pos64 = {0, 0, 0};
        const TypedMatrix q0 = p.qbuf.clone();
        rope(p.d, p.args());
        ASSERT_EQ(std::memcmp(q0.data(), p.qbuf.data(), q0.elems() * 2), 0);

        // Linear scaling: position 2p with factor 2 is position p with factor 1, bitwise.
        Problem a = make_problem(RopeStyle::gptj, DType::f32, 4, 2, 2, 32, 0, Layout::packed, RopeCosSin::compute,
                                 DType::f32, RopePositionType::s32, 0, 6);
        Problem b = make_problem(RopeStyle::gptj, DType::f32, 4, 2, 2, 32, 0, Layout::packed, RopeCosSin::compute,
                                 DType::f32, RopePositionType::s32, 0, 6);
        a.d.base = b.d.base = 10000.0f;
        a.d.scaling_factor = 2.0f;
        b.d.scaling_factor = 1.0f;
        a.pos32 = {2, 10, 4000, 0};
        b.pos32 = {1, 5, 2000, 0};
        rope(a.d, a.args());
        rope(b.d, b.args());
        ASSERT_EQ(std::memcmp(a.qbuf.data(), b.qbuf.data(), a.qbuf.elems() * 4), 0);
        ASSERT_EQ(std::memcmp(a.kbuf.data(), b.kbuf.data(), a.kbuf.elems() * 4), 0);

        // GPT-J on x equals NeoX on x with its pairs de-interleaved (same pair arithmetic), bitwise.
        const int64_t hd = 12, rot = 8, T = 3;
        Problem j = make_problem(RopeStyle::gptj, DType::f32, T, 1, 0, hd, rot, Layout::packed, RopeCosSin::cache,
                                 DType::f32, RopePositionType::s64, 0, 8);
        Problem n = make_problem(RopeStyle::neox, DType::f32, T, 1, 0, hd, rot, Layout::packed, RopeCosSin::cache,
                                 DType::f32, RopePositionType::s64, 0, 8);
        auto perm = [&](int64_t i) { return i < rot ? (i % 2 == 0 ? i / 2 : rot / 2 + i / 2) : i; };  // gptj -> neox
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < hd; ++i) n.qbuf.set_at(t * hd + perm(i), j.qbuf.get_at(t * hd + i));
        rope(j.d, j.args());
        rope(n.d, n.args());
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < hd; ++i)
                ASSERT_EQ(j.qbuf.get_at(t * hd + i), n.qbuf.get_at(t * hd + perm(i))) << "t=" << t << " i=" << i;
    });
}

TEST(Rope, NaNPayloadsOfAnF32CacheStayNaN) {
    // bf16 q / k round with + 0x8000 in the even / odd paths, which would turn a NaN whose bits are
    // 0x7fff8000..0x7fffffff (or the negative ones) into -0 / +0: an f32 cache's NaNs are made
    // quiet NaNs with zero low words first. Poisoned cos / sin entries must give NaN outputs on
    // every path.
    for_each_isa([&](Isa) {
        for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
            const int64_t hd = 64, half = hd / 2;
            Problem p = make_problem(st, DType::bf16, 2, 3, 1, hd, 0, Layout::packed, RopeCosSin::cache, DType::f32,
                                     RopePositionType::s64, 0, 21);
            p.pos64 = {5, 6};
            float* row = static_cast<float*>(p.cache.data()) + 5 * p.cache.ld();  // position 5: token 0
            const uint32_t bad[2] = {0x7fffffffu, 0xffffffffu};
            std::memcpy(row + 3, &bad[0], 4);          // cos of pair 3
            std::memcpy(row + half + 9, &bad[1], 4);   // sin of pair 9
            rope(p.d, p.args());
            for (int64_t h = 0; h < 3; ++h)
                for (int64_t pair : {3, 9}) {
                    const int64_t i0 = st == RopeStyle::neox ? pair : 2 * pair, i1 = st == RopeStyle::neox ? pair + half : 2 * pair + 1;
                    EXPECT_TRUE(std::isnan(p.qbuf.get_at(h * hd + i0)) && std::isnan(p.qbuf.get_at(h * hd + i1)))
                        << p.describe() << " head " << h << " pair " << pair;
                }
            // Token 1 (position 6, a clean row) is finite.
            for (int64_t i = 0; i < 3 * hd; ++i) ASSERT_TRUE(std::isfinite(p.qbuf.get_at(3 * hd + i))) << i;
        }
    });
}

TEST(Rope, ConvenienceForms) {
    for_each_isa([&](Isa) {
        for (int form = 0; form < 3; ++form) {  // f32 / f32 cache, bf16 / f32 cache, bf16 / bf16 cache
            const DType dt = form == 0 ? DType::f32 : DType::bf16;
            const DType ct = form == 2 ? DType::bf16 : DType::f32;
            Problem p = make_problem(form == 1 ? RopeStyle::gptj : RopeStyle::neox, dt, 7, 4, 2, 64, form == 2 ? 32 : 0,
                                     Layout::packed, RopeCosSin::cache, ct, RopePositionType::s64, 1, 40 + form);
            const auto* pos = p.pos64.data();
            ASSERT_TRUE(run_and_check(p, [&] {
                if (form == 0)
                    rope(p.d.style, 7, 4, 2, 64, p.d.rotary_dim, static_cast<float*>(p.q()), static_cast<float*>(p.k()),
                         pos, static_cast<const float*>(p.cache.data()), p.d.max_position);
                else if (form == 1)
                    rope(p.d.style, 7, 4, 2, 64, p.d.rotary_dim, static_cast<bf16*>(p.q()), static_cast<bf16*>(p.k()),
                         pos, static_cast<const float*>(p.cache.data()), p.d.max_position);
                else
                    rope(p.d.style, 7, 4, 2, 64, p.d.rotary_dim, static_cast<bf16*>(p.q()), static_cast<bf16*>(p.k()),
                         pos, static_cast<const bf16*>(p.cache.data()), p.d.max_position);
            })) << p.describe();
        }
    });
}

TEST(Rope, PlanResolvesDefaultsAndKernelIsKeyedWithoutRuntimeValues) {
    RopeDesc d;
    d.tokens = 3;
    d.q_heads = 4;
    d.k_heads = 2;
    d.head_dim = 64;
    d.max_position = 10;
    const RopePlan plan(d);
    EXPECT_EQ(plan.desc().rotary_dim, 64);
    EXPECT_EQ(plan.desc().q_head_stride, 64);
    EXPECT_EQ(plan.desc().q_token_stride, 256);
    EXPECT_EQ(plan.desc().k_token_stride, 128);
    // Tokens, head counts, strides and max_position are runtime values: no new kernel.
    Problem p = make_problem(RopeStyle::neox, DType::f32, 5, 3, 1, 48, 0, Layout::packed, RopeCosSin::cache,
                             DType::f32, RopePositionType::s64, 0, 1);
    rope(p.d, p.args());
    const uint64_t created = kernel_cache_stats().creations;
    Problem p2 = make_problem(RopeStyle::neox, DType::f32, 9, 8, 2, 48, 0, Layout::padded_heads, RopeCosSin::cache,
                              DType::f32, RopePositionType::s64, 0, 2);
    ASSERT_TRUE(run_and_check(p2, [&] { rope(p2.d, p2.args()); }));
    EXPECT_EQ(kernel_cache_stats().creations, created);
}

TEST(Rope, ZeroTokensIsANoOp) {
    RopeDesc d;
    d.tokens = 0;
    d.q_heads = 2;
    d.k_heads = 2;
    d.head_dim = 8;
    d.max_position = 4;
    rope(d, RopeArgs{});
    RopePlan(d).run(RopeArgs{});
    EXPECT_EQ(xk_rope_f32(XK_ROPE_NEOX, 0, 2, 2, 8, 0, nullptr, 0, 0, nullptr, 0, 0, nullptr, nullptr, 4), XK_SUCCESS);
}

TEST(Rope, BadDescriptor) {
    auto plan = [](const RopeDesc& d) { RopePlan p(d); };
    RopeDesc ok;
    ok.tokens = 4;
    ok.q_heads = 2;
    ok.k_heads = 1;
    ok.head_dim = 8;
    ok.max_position = 16;
    RopeDesc d = ok;
    plan(d);
    d.style = static_cast<RopeStyle>(3);
    XK_EXPECT_INVALID(plan(d), "xk::RopePlan: style=3 is not a RopeStyle");
    d = ok;
    d.cos_sin = static_cast<RopeCosSin>(5);
    XK_EXPECT_INVALID(plan(d), "cos_sin=5");
    d = ok;
    d.position_type = static_cast<RopePositionType>(9);
    XK_EXPECT_INVALID(plan(d), "position_type=9");
    d = ok;
    d.tokens = -1;
    XK_EXPECT_INVALID(plan(d), "tokens=-1 must be >= 0");
    d = ok;
    d.q_heads = -2;
    XK_EXPECT_INVALID(plan(d), "q_heads=-2");
    d = ok;
    d.k_heads = -1;
    XK_EXPECT_INVALID(plan(d), "k_heads=-1");
    d = ok;
    d.head_dim = 0;
    XK_EXPECT_INVALID(plan(d), "head_dim=0 must be >= 1");
    d = ok;
    d.q_heads = 8;
    d.k_heads = 3;
    XK_EXPECT_INVALID(plan(d), "k_heads=3 must divide q_heads=8 (GQA / MQA");
    d.k_heads = 16;
    XK_EXPECT_INVALID(plan(d), "k_heads=16 must divide q_heads=8");
    d = ok;
    d.rotary_dim = 7;
    XK_EXPECT_INVALID(plan(d), "rotary_dim=7 must be even");
    d = ok;
    d.head_dim = 7;
    XK_EXPECT_INVALID(plan(d), "rotary_dim=7 (= head_dim, as rotary_dim is 0) must be even");
    d = ok;
    d.rotary_dim = 10;
    XK_EXPECT_INVALID(plan(d), "rotary_dim=10 must be <= head_dim=8");
    d = ok;
    d.rotary_dim = -2;
    XK_EXPECT_INVALID(plan(d), "rotary_dim=-2");
    d = ok;
    d.dtype = DType::u8;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "dtype=u8 is not supported");
    d = ok;
    d.cache_dtype = DType::s32;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "cache_dtype=s32");
    d = ok;
    d.dtype = static_cast<DType>(17);
    XK_EXPECT_INVALID(plan(d), "dtype=17 is not a valid DType");
    d = ok;
    d.max_position = 0;
    XK_EXPECT_INVALID(plan(d), "max_position=0 must be >= 1");
    d = ok;
    d.max_position = std::numeric_limits<int64_t>::max() / 4;
    XK_EXPECT_INVALID(plan(d), "max_position*rotary_dim");
    // Strides.
    d = ok;
    d.q_head_stride = 7;
    XK_EXPECT_INVALID(plan(d), "q_head_stride=7 must be >= head_dim=8");
    d = ok;
    d.k_token_stride = 5;
    XK_EXPECT_INVALID(plan(d), "k_token_stride=5 must be >= head_dim=8");
    d = ok;
    d.q_token_stride = -16;
    XK_EXPECT_INVALID(plan(d), "q_token_stride=-16 must be >= 0");
    d = ok;
    d.q_heads = 4;
    d.q_token_stride = 16;  // 4 heads of 8 do not fit in 16 (token-major), and heads are not head-major either
    XK_EXPECT_INVALID(plan(d), "q_token_stride=16 and q_head_stride=8 make heads of different tokens overlap");
    d = ok;
    d.k_heads = 2;
    d.k_head_stride = 16;
    d.k_token_stride = 12;
    XK_EXPECT_INVALID(plan(d), "k_token_stride=12 and k_head_stride=16");
    d = ok;
    d.tokens = std::numeric_limits<int64_t>::max() / 8;
    d.q_token_stride = 1 << 20;
    XK_EXPECT_INVALID(plan(d), "overflows");
    d = ok;
    d.q_heads = std::numeric_limits<int64_t>::max() / 2;
    XK_EXPECT_INVALID(plan(d), "overflows");
    // compute mode parameters.
    d = ok;
    d.cos_sin = RopeCosSin::compute;
    plan(d);
    d.base = 0.0f;
    XK_EXPECT_INVALID(plan(d), "base=0 must be finite and > 0");
    d.base = std::numeric_limits<float>::infinity();
    XK_EXPECT_INVALID(plan(d), "base=inf");
    d.base = 10000.0f;
    d.scaling_factor = -1.0f;
    XK_EXPECT_INVALID(plan(d), "scaling_factor=-1 must be finite and > 0");
    d.scaling_factor = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(plan(d), "scaling_factor=nan");
    d = ok;
    d.head_dim = 0;
    XK_EXPECT_INVALID(rope(d, RopeArgs{}), "xk::rope: head_dim=0");
}

TEST(Rope, BadPointersPositionsAndOverlaps) {
    Problem p = make_problem(RopeStyle::neox, DType::f32, 6, 2, 1, 8, 0, Layout::packed, RopeCosSin::cache, DType::f32,
                             RopePositionType::s64, 0, 9);
    const RopePlan plan(p.d);
    const RopeArgs good = p.args();
    auto run = [&](const RopeArgs& a) { plan.run(a); };
    RopeArgs a = good;
    a.q = nullptr;
    XK_EXPECT_INVALID(run(a), "xk::RopePlan::run: q=null");
    a = good;
    a.k = nullptr;
    XK_EXPECT_INVALID(run(a), "k=null");
    a = good;
    a.positions = nullptr;
    XK_EXPECT_INVALID(run(a), "positions=null");
    a = good;
    a.cos_sin_cache = nullptr;
    XK_EXPECT_INVALID(run(a), "cos_sin_cache=null");
    {
        RopeDesc d = p.d;
        d.k_heads = 0;
        XK_EXPECT_INVALID(rope(d, good), "k=");
        XK_EXPECT_INVALID(rope(d, good), "is given but k_heads is 0");
        d = p.d;
        d.cos_sin = RopeCosSin::compute;
        XK_EXPECT_INVALID(rope(d, good), "cos_sin_cache=");
    }
    // Positions: beyond the cache, negative (int64 and int32); q and k untouched by a failed call.
    const TypedMatrix q0 = p.qbuf.clone(), k0 = p.kbuf.clone();
    p.pos64[3] = p.d.max_position;
    XK_EXPECT_INVALID(run(p.args()), "positions[3]=" + std::to_string(p.d.max_position) +
                                         " is beyond the cos_sin_cache (max_position=" + std::to_string(p.d.max_position) + ")");
    p.pos64[3] = 0;
    p.pos64[5] = -1;
    XK_EXPECT_INVALID(run(p.args()), "positions[5]=-1 must be >= 0");
    EXPECT_EQ(std::memcmp(q0.data(), p.qbuf.data(), q0.elems() * 4), 0);
    EXPECT_EQ(std::memcmp(k0.data(), p.kbuf.data(), k0.elems() * 4), 0);
    {
        RopeDesc d = p.d;
        d.position_type = RopePositionType::s32;
        d.cos_sin = RopeCosSin::compute;
        std::vector<int32_t> pos32 = {0, 1, 2, -7, 4, 5};
        RopeArgs b = good;
        b.positions = pos32.data();
        b.cos_sin_cache = nullptr;
        XK_EXPECT_INVALID(rope(d, b), "positions[3]=-7 must be >= 0");
        pos32[3] = 1 << 30;  // compute mode has no upper bound
        rope(d, b);
    }
    // Overlaps.
    a = good;
    a.k = static_cast<float*>(good.q) + 1;
    XK_EXPECT_INVALID(run(a), "overlaps q=");
    a = good;
    a.positions = good.q;
    XK_EXPECT_INVALID(run(a), "overlaps positions=");
    a = good;
    a.cos_sin_cache = good.k;
    XK_EXPECT_INVALID(run(a), "overlaps cos_sin_cache=");
}

TEST(Rope, CApi) {
    for (int form = 0; form < 4; ++form) {  // f32 cache, bf16 cache-f32, f32 theta, bf16 theta
        const DType dt = form % 2 ? DType::bf16 : DType::f32;
        const bool theta = form >= 2;
        Problem p = make_problem(form == 1 ? RopeStyle::gptj : RopeStyle::neox, dt, 5, 4, 2, 32, 16, Layout::padded_heads,
                                 theta ? RopeCosSin::compute : RopeCosSin::cache, DType::f32, RopePositionType::s64, 1,
                                 60 + form);
        const auto style = p.d.style == RopeStyle::gptj ? XK_ROPE_GPTJ : XK_ROPE_NEOX;
        const RopeDesc& d = p.d;
        xk_status s = XK_SUCCESS;
        ASSERT_TRUE(run_and_check(p, [&] {
            const auto* cache = static_cast<const float*>(p.cache.data());
            switch (form) {
                case 0:
                    s = xk_rope_f32(style, 5, 4, 2, 32, 16, static_cast<float*>(p.q()), d.q_token_stride, d.q_head_stride,
                                    static_cast<float*>(p.k()), d.k_token_stride, d.k_head_stride, p.pos64.data(), cache,
                                    d.max_position);
                    break;
                case 1:
                    s = xk_rope_bf16(style, 5, 4, 2, 32, 16, static_cast<uint16_t*>(p.q()), d.q_token_stride,
                                     d.q_head_stride, static_cast<uint16_t*>(p.k()), d.k_token_stride, d.k_head_stride,
                                     p.pos64.data(), cache, d.max_position);
                    break;
                case 2:
                    s = xk_rope_theta_f32(style, 5, 4, 2, 32, 16, static_cast<float*>(p.q()), d.q_token_stride,
                                          d.q_head_stride, static_cast<float*>(p.k()), d.k_token_stride, d.k_head_stride,
                                          p.pos64.data(), d.base, d.scaling_factor);
                    break;
                default:
                    s = xk_rope_theta_bf16(style, 5, 4, 2, 32, 16, static_cast<uint16_t*>(p.q()), d.q_token_stride,
                                           d.q_head_stride, static_cast<uint16_t*>(p.k()), d.k_token_stride,
                                           d.k_head_stride, p.pos64.data(), d.base, d.scaling_factor);
            }
        })) << "form " << form;
        ASSERT_EQ(s, XK_SUCCESS) << xk_last_error();
    }
    float q[64] = {}, k[64] = {}, cache[32] = {};
    int64_t pos[2] = {0, 5};
    EXPECT_EQ(xk_rope_f32(XK_ROPE_NEOX, 2, 2, 1, 8, 0, q, 0, 0, k, 0, 0, pos, cache, 4), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_rope_f32: positions[1]=5 is beyond the cos_sin_cache (max_position=4)"),
              std::string::npos)
        << xk_last_error();
    xk_rope_style bad_style;  // what a C caller passing 7 hands over (not a valid C++ value of the enum)
    const int seven = 7;
    std::memcpy(&bad_style, &seven, sizeof seven);
    EXPECT_EQ(xk_rope_f32(bad_style, 2, 2, 1, 8, 0, q, 0, 0, k, 0, 0, pos, cache, 4), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("style=7"), std::string::npos);
    uint16_t bq[64] = {}, bk[64] = {};
    EXPECT_EQ(xk_rope_bf16(XK_ROPE_GPTJ, 2, 2, 1, 8, 5, bq, 0, 0, bk, 0, 0, pos, cache, 8), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_rope_bf16: rotary_dim=5 must be even"), std::string::npos);
    EXPECT_EQ(xk_rope_theta_f32(XK_ROPE_NEOX, 2, 2, 1, 8, 0, q, 0, 0, k, 0, 0, pos, 0.0f, 1.0f), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_rope_theta_f32: base=0"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_rope_theta_bf16(XK_ROPE_NEOX, 2, 2, 1, 8, 0, bq, 0, 0, nullptr, 0, 0, pos, 10000.0f, 1.0f),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("k=null"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_rope_theta_bf16(XK_ROPE_NEOX, 2, 2, 1, 8, 0, bq, 0, 0, bk, 0, 0, pos, 10000.0f, 1.0f), XK_SUCCESS);
    EXPECT_STREQ(xk_last_error(), "");
}
