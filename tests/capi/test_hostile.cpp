// Hostile inputs (issue 33): regression tests for the fixes of fcecd66 and 1ebcc9e.
//
//   PlanCost*           a plan (or one-shot call) of a huge descriptor costs neither time nor
//                       memory in proportion to a size (gemm M = 2^40, N = 1, K = 0 took 40-90 s
//                       to create, then failed with out_of_memory), autotune off and on, every ISA.
//   CEnum*              out-of-range ints in every enum-typed argument / field of the C API are
//                       XK_INVALID_ARGUMENT naming the argument, nothing written (the old code
//                       loaded them as enums: UB, stopped by UBSan's enum check in the asan build).
//   RopeUnusedPointer   a pointer its head count (or cos_sin) says is unused is rejected at
//                       every token count (it was accepted with tokens = 0).
//   EmbeddingBagNull*   table / indices / per_sample_weights are required whenever
//                       num_indices > 0, even when no bag reads an index.
//   QuantDynamic*       a non-finite x (or x * smooth) is rejected before anything is written.
//   Int8Scales          int8 -> f32 scales must be finite and > 0.
//   SoftmaxBf16Large    {1e10, 0, 1, 2} in bf16 (and rows of +-1e38) are exact.
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "common/gemm_capi.hpp"
#include "xk/xk.h"
#include "xk/xk.hpp"

namespace {

using xk::test::to_c;  // the GEMM C structs (common/gemm_capi.hpp)

using namespace xk;
using xk::test::for_each_isa;

constexpr int64_t kP20 = int64_t(1) << 20;
constexpr int64_t kP40 = int64_t(1) << 40;
constexpr int64_t kP50 = int64_t(1) << 50;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Restores the process-wide settings a test changes, also when an assertion returns early.
struct AutotuneGuard {
    bool old = get_gemm_autotune();
    ~AutotuneGuard() { set_gemm_autotune(old); }
};
struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

// ---- 1. plans of huge descriptors ---------------------------------------------------------------

// The outcome of one creation: success, or the code of the xk::Error it threw.
struct Outcome {
    bool ok = false;
    Status code = Status::success;
    std::string message;
    bool failed = false;  // an expectation below failed (stall, out of memory, stray exception)
};

// Runs make() (a plan creation or a one-shot call) and expects it to succeed or throw an
// xk::Error other than out_of_memory, within 2 s. The 2 s bound is a stall check with a ~1000x
// margin over what these creations cost (a millisecond or less, also under ASan; the old code
// took 40-90 s for gemm M = 2^40, N = 1, K = 0), not a timing: it fails only when the work grows
// with a size.
template <class F>
Outcome expect_cheap(const std::string& what, F&& make) {
    Outcome o;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        make();
        o.ok = true;
    } catch (const Error& e) {
        o.code = e.code();
        o.message = e.what();
        o.failed = e.code() == Status::out_of_memory;
        EXPECT_NE(e.code(), Status::out_of_memory) << what << ": " << e.what();
    } catch (const std::bad_alloc&) {
        o.failed = true;
        ADD_FAILURE() << what << ": std::bad_alloc escaped (allocated in proportion to a size)";
    } catch (const std::exception& e) {
        o.failed = true;
        ADD_FAILURE() << what << ": a non-xk exception escaped: " << e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= 2.0) o.failed = true;
    EXPECT_LT(s, 2.0) << what << ": took " << s << " s (stall check, 1000x margin)";
    return o;
}

struct GemmTypes {
    DType a, b, c;
    const char* name;
};
const GemmTypes kGemmTypes[] = {
    {DType::f32, DType::f32, DType::f32, "f32"},
    {DType::bf16, DType::bf16, DType::f32, "bf16->f32"},
    {DType::bf16, DType::bf16, DType::bf16, "bf16->bf16"},
    {DType::u8, DType::s8, DType::s32, "u8s8->s32"},
    {DType::s8, DType::s8, DType::f32, "s8s8->f32"},
};

struct Shape {
    int64_t M, N, K;
};
const Shape kHugeGemmShapes[] = {
    {kP40, 1, 0},  // the reported case (all leading dimensions 0 = packed)
    {1, kP40, 0},
    {kP40, 1, 1},
    {1, 1, kP40},
    {kP20, kP20, kP20},
};

// 0: none, 1: bias + relu, 2: + f32 residual, 3: + bf16 residual.
GemmDesc gemm_desc(const GemmTypes& t, const Shape& s, int epilogue, Trans ta, Trans tb) {
    GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    d.trans_a = ta, d.trans_b = tb;
    d.a_type = t.a, d.b_type = t.b, d.c_type = t.c;
    if (epilogue >= 1) d.epilogue.bias = true, d.epilogue.act = Activation::relu;
    if (epilogue >= 2) d.epilogue.residual = true, d.residual_type = epilogue == 3 ? DType::bf16 : DType::f32;
    if (t.c == DType::f32 && (t.a == DType::s8 || t.a == DType::u8)) d.b_scale_per_channel = epilogue % 2 == 1;
    return d;
}

std::string shape_str(const Shape& s) {
    return "M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
}

// Every GEMM type and epilogue, on every huge shape: GemmPlan, xk_gemm_plan_create, and the
// one-shot entries (whose argument check fails fast on the null pointers: they must not reach
// any size-proportional work either). A shape whose creation failed once (a regression: each
// such creation may stall for a minute) is not tried again, so that a broken build fails in
// seconds rather than hours.
void huge_gemm_plans(bool autotune) {
    set_gemm_autotune(autotune);
    bool shape_failed[std::size(kHugeGemmShapes)] = {};
    for_each_isa([&](Isa) {
        for (size_t si = 0; si < std::size(kHugeGemmShapes); ++si)
            for (const GemmTypes& t : kGemmTypes)
                for (int ep = 0; ep < 4; ++ep) {
                    const Shape& s = kHugeGemmShapes[si];
                    // int8 -> s32 has no epilogue: Status::unsupported, as fast as the rest.
                    const bool valid = !(t.c == DType::s32 && ep > 0);
                    for (int tr = 0; tr < 2; ++tr) {
                        if (shape_failed[si]) continue;
                        if (tr == 1 && !(s.N == 1 && s.K == 0)) continue;  // transposes: the reported case
                        const Trans tt = tr ? Trans::T : Trans::N;
                        const GemmDesc d = gemm_desc(t, s, ep, tt, tt);
                        const std::string what = std::string("gemm ") + t.name + " " + shape_str(s) + " epilogue " +
                                                 std::to_string(ep) + (tr ? " TT" : " NN") +
                                                 (autotune ? " autotune" : "");
                        const Outcome o = expect_cheap("GemmPlan " + what, [&] { GemmPlan p(d); });
                        // Valid descriptors: the plan must be created.
                        if (valid) EXPECT_TRUE(o.ok) << "GemmPlan " << what << ": " << o.message;
                        else EXPECT_EQ(o.code, Status::unsupported) << "GemmPlan " << what << ": " << o.message;
                        if (o.failed) {
                            shape_failed[si] = true;
                            continue;
                        }
                        const xk_gemm_desc cd = to_c(d);
                        xk_gemm_plan* plan = nullptr;
                        xk_status st = XK_SUCCESS;
                        const Outcome oc =
                            expect_cheap("xk_gemm_plan_create " + what, [&] { st = xk_gemm_plan_create(&cd, &plan); });
                        EXPECT_EQ(st, valid ? XK_SUCCESS : XK_UNSUPPORTED)
                            << "xk_gemm_plan_create " << what << ": " << xk_last_error();
                        EXPECT_EQ(plan != nullptr, valid);
                        xk_gemm_plan_destroy(plan);
                        // One-shot: null operands, rejected before any work.
                        const Outcome one = expect_cheap("xk::gemm " + what, [&] { gemm(d, GemmArgs{}); });
                        EXPECT_FALSE(one.ok) << "xk::gemm " << what << " with null pointers succeeded";
                        EXPECT_EQ(one.code, valid ? Status::invalid_argument : Status::unsupported) << one.message;
                        xk_gemm_args ca;
                        xk_gemm_args_init(&ca);
                        const Outcome o1 = expect_cheap("xk_gemm " + what, [&] { st = xk_gemm(&cd, &ca); });
                        EXPECT_EQ(st, valid ? XK_INVALID_ARGUMENT : XK_UNSUPPORTED)
                            << "xk_gemm " << what << ": " << xk_last_error();
                        if (oc.failed || one.failed || o1.failed) shape_failed[si] = true;
                    }
                }
    });
}

TEST(PlanCost, GemmHugeAutotuneOff) {
    AutotuneGuard g;
    huge_gemm_plans(false);
}

TEST(PlanCost, GemmHugeAutotuneOn) {
    AutotuneGuard g;
    huge_gemm_plans(true);
}

// The other families' plans (and one-shot forms with null pointers), autotune off and on.
// After a failure the rest of the sweep is skipped (as in huge_gemm_plans: a regression fails
// once, quickly, instead of stalling on every descriptor).
template <class F>
void cheap_unless_failed(const std::string& what, F&& make) {
    if (::testing::Test::HasFailure()) return;
    expect_cheap(what, make);
}

void huge_other_plans() {
    for_each_isa([&](Isa) {
        // conv: huge n / c / h / w / oc, f32 and bf16, both layout pairings.
        for (int layout = 0; layout < 2; ++layout)
            for (int bf = 0; bf < 2; ++bf)
                for (int which = 0; which < 6; ++which) {
                    ConvDesc d;
                    d.layout = layout ? ConvLayout::nhwc : ConvLayout::nchw;
                    d.weight_layout = layout ? ConvWeightLayout::ohwi : ConvWeightLayout::oihw;
                    if (bf) d.src_dtype = d.weight_dtype = d.dst_dtype = DType::bf16;
                    d.with_bias = true;
                    d.activation = Activation::relu;
                    switch (which) {
                        case 0: d.n = kP40; break;
                        case 1: d.h = kP40; break;
                        case 2: d.w = kP40; break;
                        case 3: d.c = kP40; break;
                        case 4: d.oc = kP40; break;
                        case 5: d.h = d.w = kP20, d.c = d.oc = 64, d.kh = d.kw = 3, d.set_padding(1, 1); break;
                    }
                    const std::string what = "conv case " + std::to_string(which) + " layout " +
                                             std::to_string(layout) + (bf ? " bf16" : " f32");
                    cheap_unless_failed("ConvPlan " + what, [&] { ConvPlan p(d); });
                    cheap_unless_failed("xk::conv2d " + what, [&] { conv2d(d, ConvArgs{}); });
                }
        // embedding_bag: num_embeddings = 2^50.
        for (int mode = 0; mode < 3; ++mode)
            for (int64_t dim : {int64_t(1), int64_t(64)})
                for (DType tt : {DType::f32, DType::bf16}) {
                    EmbeddingBagDesc d;
                    d.num_embeddings = kP50;
                    d.dim = dim;
                    d.mode = static_cast<EmbeddingBagMode>(mode);
                    d.table_dtype = tt;
                    const std::string what = "embedding_bag mode " + std::to_string(mode) + " dim " + std::to_string(dim);
                    cheap_unless_failed("EmbeddingBagPlan " + what, [&] { EmbeddingBagPlan p(d); });
                    EmbeddingBagArgs a;
                    a.num_bags = 1;
                    a.num_indices = kP40;
                    cheap_unless_failed("xk::embedding_bag " + what, [&] { embedding_bag(d, a); });
                }
        // norm: rows = 2^40, hidden = 1 and rows = 1, hidden = 2^40.
        for (const Shape& s : {Shape{kP40, 1, 0}, Shape{1, kP40, 0}})
            for (NormKind k : {NormKind::rms_norm, NormKind::layer_norm})
                for (DType t : {DType::f32, DType::bf16})
                    for (bool fused : {false, true}) {
                        NormDesc d;
                        d.kind = k;
                        d.rows = s.M;
                        d.hidden = s.N;
                        d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
                        d.has_bias = k == NormKind::layer_norm;
                        d.fused_residual = fused;
                        const std::string what = std::string("norm ") + norm_kind_name(k) + " rows " +
                                                 std::to_string(s.M) + " hidden " + std::to_string(s.N);
                        cheap_unless_failed("NormPlan " + what, [&] { NormPlan p(d); });
                        cheap_unless_failed("xk::norm " + what, [&] { norm(d, NormArgs{}); });
                    }
        // rope: tokens = 2^40 (cache of 2^40 positions, and computed cos / sin).
        for (int cs = 0; cs < 2; ++cs)
            for (DType t : {DType::f32, DType::bf16})
                for (RopeStyle st : {RopeStyle::neox, RopeStyle::gptj}) {
                    RopeDesc d;
                    d.style = st;
                    d.tokens = kP40;
                    d.q_heads = 8;
                    d.k_heads = 2;
                    d.head_dim = 128;
                    d.dtype = t;
                    d.cos_sin = cs ? RopeCosSin::compute : RopeCosSin::cache;
                    d.max_position = cs ? 0 : kP40;
                    const std::string what = "rope tokens 2^40 cos_sin " + std::to_string(cs);
                    cheap_unless_failed("RopePlan " + what, [&] { RopePlan p(d); });
                    cheap_unless_failed("xk::rope " + what, [&] { rope(d, RopeArgs{}); });
                }
        // glu: rows = 2^40 (and inner = 2^40).
        for (const Shape& s : {Shape{kP40, 1, 0}, Shape{kP40, 4096, 0}, Shape{1, kP40, 0}})
            for (Activation act : {Activation::silu, Activation::gelu_erf, Activation::gelu_tanh, Activation::relu,
                                   Activation::none})
                for (DType t : {DType::f32, DType::bf16}) {
                    GluDesc d;
                    d.activation = act;
                    d.rows = s.M;
                    d.inner = s.N;
                    d.x_dtype = d.y_dtype = t;
                    const std::string what = "glu rows " + std::to_string(s.M) + " inner " + std::to_string(s.N);
                    cheap_unless_failed("GluPlan " + what, [&] { GluPlan p(d); });
                    cheap_unless_failed("xk::glu " + what, [&] { glu(d, GluArgs{}); });
                }
        // softmax: rows = 2^40 and cols = 2^40.
        for (const Shape& s : {Shape{kP40, 1, 0}, Shape{kP40, 128, 0}, Shape{1, kP40, 0}})
            for (bool causal : {false, true})
                for (DType t : {DType::f32, DType::bf16}) {
                    SoftmaxDesc d;
                    d.rows = s.M;
                    d.cols = s.N;
                    d.x_dtype = d.y_dtype = t;
                    d.causal = causal;
                    const std::string what = "softmax rows " + std::to_string(s.M) + " cols " + std::to_string(s.N);
                    cheap_unless_failed("SoftmaxPlan " + what, [&] { SoftmaxPlan p(d); });
                    cheap_unless_failed("xk::softmax " + what, [&] { softmax(d, SoftmaxArgs{}); });
                }
        // quant: rows = 2^40, each granularity, quantize and dequantize.
        for (int g = 0; g < 4; ++g)
            for (int64_t cols : {int64_t(1), int64_t(64)})
                for (int dir = 0; dir < 3; ++dir) {
                    QuantDesc d;
                    d.rows = kP40;
                    d.cols = cols;
                    d.granularity = g == 3 ? QuantGranularity::per_token_dynamic
                                           : g == 0 ? QuantGranularity::per_tensor : QuantGranularity::per_channel;
                    d.axis = g == 1 ? 0 : 1;
                    if (dir == 0) d.src_dtype = DType::f32, d.dst_dtype = DType::u8;
                    if (dir == 1) d.src_dtype = DType::bf16, d.dst_dtype = DType::s8, d.smooth = true;
                    if (dir == 2) {
                        if (g == 3) continue;  // dynamic is quantize-only
                        d.src_dtype = DType::u8, d.dst_dtype = DType::f32;
                    }
                    const std::string what = "quant granularity " + std::to_string(g) + " dir " + std::to_string(dir) +
                                             " cols " + std::to_string(cols);
                    cheap_unless_failed("QuantPlan " + what, [&] { QuantPlan p(d); });
                    cheap_unless_failed("xk::quantize/dequantize " + what, [&] {
                        if (dir == 2) dequantize(d, QuantArgs{});
                        else quantize(d, QuantArgs{});
                    });
                }
    });
}

TEST(PlanCost, OtherFamiliesHuge) {
    AutotuneGuard g;
    for (bool autotune : {false, true}) {
        SCOPED_TRACE(autotune ? "autotune on" : "autotune off");
        set_gemm_autotune(autotune);
        huge_other_plans();
    }
}

// ---- 2. C API enums out of range ----------------------------------------------------------------

// 77, 1000, -1, INT_MIN and the bit pattern 0x80000000 (INT_MIN again, spelled as a C caller
// might). The C enums have a fixed underlying type int in C++ (XK_ENUM_INT), so every one of
// these is a value of the type and static_cast is well defined.
const int kBadEnums[] = {77, 1000, -1, INT_MIN, static_cast<int>(0x80000000u)};

template <class E>
E bad(int v) {
    return static_cast<E>(v);
}

// st must be XK_INVALID_ARGUMENT and xk_last_error() must name the argument with its value.
::testing::AssertionResult rejected(xk_status st, const std::string& arg, int v) {
    const std::string msg = xk_last_error();
    const std::string needle = arg + "=" + std::to_string(v);
    if (st != XK_INVALID_ARGUMENT)
        return ::testing::AssertionFailure() << "status " << static_cast<int>(st) << " (want XK_INVALID_ARGUMENT="
                                             << static_cast<int>(XK_INVALID_ARGUMENT) << "), message '" << msg << "'";
    if (!contains(msg, needle))
        return ::testing::AssertionFailure() << "message '" << msg << "' does not name '" << needle << "'";
    return ::testing::AssertionSuccess();
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

constexpr float kSentinel = -12345.5f;
constexpr uint16_t kSentinelBf16 = 0xC640;  // -12288 in bf16

TEST(CEnum, GemmDesc) {
    const int64_t M = 2, N = 3, K = 4;
    std::vector<float> A(M * K, 1.0f), B(K * N, 1.0f), bias(N, 0.5f), R(M * N, 0.25f);
    std::vector<float> C(M * N, kSentinel);
    const std::vector<float> C0 = C;
    // The field set to v; residual_type only matters with residual = 1 (set in both).
    enum Field { trans_a, trans_b, a_type, b_type, c_type, act, residual_type };
    const char* names[] = {"trans_a", "trans_b", "a_type", "b_type", "c_type", "act", "residual_type"};
    for (int f = trans_a; f <= residual_type; ++f)
        for (int v : kBadEnums) {
            SCOPED_TRACE(std::string(names[f]) + "=" + std::to_string(v));
            xk_gemm_desc d;
            xk_gemm_desc_init(&d);
            d.M = M, d.N = N, d.K = K;
            d.bias = 1;
            d.residual = 1;
            switch (f) {
                case trans_a: d.trans_a = bad<xk_trans>(v); break;
                case trans_b: d.trans_b = bad<xk_trans>(v); break;
                case a_type: d.a_type = bad<xk_dtype>(v); break;
                case b_type: d.b_type = bad<xk_dtype>(v); break;
                case c_type: d.c_type = bad<xk_dtype>(v); break;
                case act: d.act = bad<xk_activation>(v); break;
                case residual_type: d.residual_type = bad<xk_dtype>(v); break;
            }
            xk_gemm_args a;
            xk_gemm_args_init(&a);
            a.A = A.data(), a.B = B.data(), a.C = C.data(), a.bias = bias.data(), a.residual = R.data();
            EXPECT_TRUE(rejected(xk_gemm(&d, &a), names[f], v)) << "xk_gemm";
            EXPECT_TRUE(same_bytes(C, C0)) << "xk_gemm wrote C";
            xk_gemm_plan* plan = reinterpret_cast<xk_gemm_plan*>(&d);  // must be reset to NULL
            EXPECT_TRUE(rejected(xk_gemm_plan_create(&d, &plan), names[f], v)) << "xk_gemm_plan_create";
            EXPECT_EQ(plan, nullptr);
            xk_gemm_plan_destroy(plan == reinterpret_cast<xk_gemm_plan*>(&d) ? nullptr : plan);
        }
    // The same descriptor with valid enums runs (the sentinel check above is meaningful).
    xk_gemm_desc d;
    xk_gemm_desc_init(&d);
    d.M = M, d.N = N, d.K = K;
    xk_gemm_args a;
    xk_gemm_args_init(&a);
    a.A = A.data(), a.B = B.data(), a.C = C.data();
    ASSERT_EQ(xk_gemm(&d, &a), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(C[0], static_cast<float>(K));
}

TEST(CEnum, GemmBlasTrans) {
    const int64_t M = 2, N = 3, K = 4;
    std::vector<float> Af(M * K, 1.0f), Bf(K * N, 1.0f);
    std::vector<uint16_t> Ah(M * K, 0x3F80), Bh(K * N, 0x3F80);
    std::vector<uint8_t> Au(M * K, 1);
    std::vector<int8_t> As(M * K, 1), Bs(K * N, 1);
    const float b_scales[3] = {1.0f, 1.0f, 1.0f};
    for (int which = 0; which < 2; ++which)
        for (int v : kBadEnums) {
            const xk_trans ta = which == 0 ? bad<xk_trans>(v) : XK_TRANS_N;
            const xk_trans tb = which == 1 ? bad<xk_trans>(v) : XK_TRANS_N;
            const char* arg = which == 0 ? "trans_a" : "trans_b";
            SCOPED_TRACE(std::string(arg) + "=" + std::to_string(v));
            std::vector<float> Cf(M * N, kSentinel);
            std::vector<uint16_t> Ch(M * N, kSentinelBf16);
            std::vector<int32_t> Ci(M * N, 0x5A5A5A5A);
            const auto Cf0 = Cf;
            const auto Ch0 = Ch;
            const auto Ci0 = Ci;
            EXPECT_TRUE(rejected(xk_sgemm(ta, tb, M, N, K, 1.0f, Af.data(), 0, Bf.data(), 0, 0.0f, Cf.data(), 0), arg, v))
                << "xk_sgemm";
            EXPECT_TRUE(rejected(
                xk_gemm_bf16f32(ta, tb, M, N, K, 1.0f, Ah.data(), 0, Bh.data(), 0, 0.0f, Cf.data(), 0), arg, v))
                << "xk_gemm_bf16f32";
            EXPECT_TRUE(rejected(
                xk_gemm_bf16bf16(ta, tb, M, N, K, 1.0f, Ah.data(), 0, Bh.data(), 0, 0.0f, Ch.data(), 0), arg, v))
                << "xk_gemm_bf16bf16";
            EXPECT_TRUE(rejected(
                xk_gemm_u8s8s32(ta, tb, M, N, K, Au.data(), 0, 0, Bs.data(), 0, 0, 0.0f, Ci.data(), 0), arg, v))
                << "xk_gemm_u8s8s32";
            EXPECT_TRUE(rejected(
                xk_gemm_s8s8s32(ta, tb, M, N, K, As.data(), 0, 0, Bs.data(), 0, 0, 0.0f, Ci.data(), 0), arg, v))
                << "xk_gemm_s8s8s32";
            EXPECT_TRUE(rejected(xk_gemm_u8s8f32(ta, tb, M, N, K, 1.0f, Au.data(), 0, 1.0f, 0, Bs.data(), 0, b_scales,
                                                 1, 0, 0.0f, Cf.data(), 0),
                                 arg, v))
                << "xk_gemm_u8s8f32";
            EXPECT_TRUE(rejected(xk_gemm_s8s8f32(ta, tb, M, N, K, 1.0f, As.data(), 0, 1.0f, 0, Bs.data(), 0, b_scales,
                                                 0, 0, 0.0f, Cf.data(), 0),
                                 arg, v))
                << "xk_gemm_s8s8f32";
            EXPECT_TRUE(same_bytes(Cf, Cf0));
            EXPECT_TRUE(same_bytes(Ch, Ch0));
            EXPECT_TRUE(same_bytes(Ci, Ci0));
        }
}

TEST(CEnum, Conv2d) {
    enum Field { layout, weight_layout, residual, activation };
    const char* names[] = {" layout", "weight_layout", " residual", " activation"};  // " ": not a suffix match
    std::vector<float> src(4, 1.0f), w(1, 1.0f), dst(4, kSentinel);
    std::vector<uint16_t> src_h(4, 0x3F80), w_h(1, 0x3F80), dst_h(4, kSentinelBf16);
    const auto dst0 = dst;
    const auto dst_h0 = dst_h;
    for (int f = layout; f <= activation; ++f)
        for (int v : kBadEnums) {
            SCOPED_TRACE(std::string(names[f]) + "=" + std::to_string(v));
            xk_conv2d_desc d;
            ASSERT_EQ(xk_conv2d_desc_init(&d, 1, 1, 2, 2, 1, 1, 1), XK_SUCCESS);
            switch (f) {
                case layout: d.layout = bad<xk_conv_layout>(v); break;
                case weight_layout: d.weight_layout = bad<xk_conv_weight_layout>(v); break;
                case residual: d.residual = bad<xk_conv_residual>(v); break;
                case activation: d.activation = bad<xk_activation>(v); break;
            }
            EXPECT_TRUE(rejected(xk_conv2d_f32(&d, src.data(), w.data(), nullptr, dst.data(), nullptr), names[f], v))
                << "xk_conv2d_f32";
            EXPECT_TRUE(rejected(xk_conv2d_bf16_f32(&d, src_h.data(), w_h.data(), nullptr, dst.data(), nullptr),
                                 names[f], v))
                << "xk_conv2d_bf16_f32";
            EXPECT_TRUE(rejected(xk_conv2d_bf16(&d, src_h.data(), w_h.data(), nullptr, dst_h.data(), nullptr),
                                 names[f], v))
                << "xk_conv2d_bf16";
            EXPECT_TRUE(same_bytes(dst, dst0));
            EXPECT_TRUE(same_bytes(dst_h, dst_h0));
        }
    xk_conv2d_desc d;
    ASSERT_EQ(xk_conv2d_desc_init(&d, 1, 1, 2, 2, 1, 1, 1), XK_SUCCESS);
    ASSERT_EQ(xk_conv2d_f32(&d, src.data(), w.data(), nullptr, dst.data(), nullptr), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(dst[0], 1.0f);
}

TEST(CEnum, EmbeddingBagMode) {
    const std::vector<float> table = {1, 2, 3, 4, 5, 6, 7, 8};  // 4 x 2
    const std::vector<uint16_t> table_h(8, 0x3F80);
    const int64_t idx[2] = {0, 3}, off[1] = {0};
    const int32_t idx32[2] = {0, 3}, off32[1] = {0};
    for (int v : kBadEnums) {
        SCOPED_TRACE("mode=" + std::to_string(v));
        xk_embedding_bag_desc d;
        ASSERT_EQ(xk_embedding_bag_desc_init(&d, 4, 2), XK_SUCCESS);
        d.mode = bad<xk_embedding_bag_mode>(v);
        std::vector<float> out(2, kSentinel);
        const auto out0 = out;
        EXPECT_TRUE(rejected(xk_embedding_bag_f32(&d, table.data(), 2, idx, 1, off, nullptr, out.data()), "mode", v))
            << "xk_embedding_bag_f32";
        EXPECT_TRUE(rejected(xk_embedding_bag_f32_i32(&d, table.data(), 2, idx32, 1, off32, nullptr, out.data()),
                             "mode", v))
            << "xk_embedding_bag_f32_i32";
        EXPECT_TRUE(rejected(xk_embedding_bag_bf16_f32(&d, table_h.data(), 2, idx, 1, off, nullptr, out.data()),
                             "mode", v))
            << "xk_embedding_bag_bf16_f32";
        EXPECT_TRUE(same_bytes(out, out0));
    }
}

TEST(CEnum, RopeStyle) {
    const int64_t tokens = 2, heads = 1, hd = 4;
    const std::vector<float> cache(8 * hd, 0.5f);
    const int64_t pos[2] = {1, 2};
    for (int v : kBadEnums) {
        SCOPED_TRACE("style=" + std::to_string(v));
        const xk_rope_style s = bad<xk_rope_style>(v);
        std::vector<float> q(tokens * heads * hd, kSentinel), k(tokens * heads * hd, kSentinel);
        std::vector<uint16_t> qh(q.size(), kSentinelBf16), kh(k.size(), kSentinelBf16);
        const auto q0 = q;
        const auto qh0 = qh;
        EXPECT_TRUE(rejected(xk_rope_f32(s, tokens, heads, heads, hd, 0, q.data(), 0, 0, k.data(), 0, 0, pos,
                                         cache.data(), 8),
                             "style", v))
            << "xk_rope_f32";
        EXPECT_TRUE(rejected(xk_rope_bf16(s, tokens, heads, heads, hd, 0, qh.data(), 0, 0, kh.data(), 0, 0, pos,
                                          cache.data(), 8),
                             "style", v))
            << "xk_rope_bf16";
        EXPECT_TRUE(rejected(xk_rope_theta_f32(s, tokens, heads, heads, hd, 0, q.data(), 0, 0, k.data(), 0, 0, pos,
                                               10000.0f, 1.0f),
                             "style", v))
            << "xk_rope_theta_f32";
        EXPECT_TRUE(rejected(xk_rope_theta_bf16(s, tokens, heads, heads, hd, 0, qh.data(), 0, 0, kh.data(), 0, 0, pos,
                                                10000.0f, 1.0f),
                             "style", v))
            << "xk_rope_theta_bf16";
        EXPECT_TRUE(same_bytes(q, q0));
        EXPECT_TRUE(same_bytes(k, q0));
        EXPECT_TRUE(same_bytes(qh, qh0));
        EXPECT_TRUE(same_bytes(kh, qh0));
    }
}

TEST(CEnum, GluActivation) {
    const int64_t rows = 3, inner = 5;
    const std::vector<float> x(rows * 2 * inner, 1.0f);
    const std::vector<uint16_t> xh(rows * 2 * inner, 0x3F80);
    for (int v : kBadEnums) {
        SCOPED_TRACE("act=" + std::to_string(v));
        std::vector<float> y(rows * inner, kSentinel);
        std::vector<uint16_t> yh(rows * inner, kSentinelBf16);
        const auto y0 = y;
        const auto yh0 = yh;
        EXPECT_TRUE(rejected(xk_glu_f32(bad<xk_activation>(v), rows, inner, x.data(), 0, y.data(), 0), "activation", v))
            << "xk_glu_f32";
        EXPECT_TRUE(
            rejected(xk_glu_bf16(bad<xk_activation>(v), rows, inner, xh.data(), 0, yh.data(), 0), "activation", v))
            << "xk_glu_bf16";
        EXPECT_TRUE(same_bytes(y, y0));
        EXPECT_TRUE(same_bytes(yh, yh0));
    }
}

TEST(CEnum, Isa) {
    xk_isa before;
    ASSERT_EQ(xk_get_max_isa(&before), XK_SUCCESS);
    for (int v : kBadEnums) {
        SCOPED_TRACE("isa=" + std::to_string(v));
        EXPECT_TRUE(rejected(xk_set_max_isa(bad<xk_isa>(v)), "cap", v)) << "xk_set_max_isa";
        xk_isa after;
        ASSERT_EQ(xk_get_max_isa(&after), XK_SUCCESS);
        EXPECT_EQ(static_cast<int>(after), static_cast<int>(before)) << "the cap changed";
        const char* name = xk_isa_name(bad<xk_isa>(v));
        ASSERT_NE(name, nullptr);
        EXPECT_STREQ(name, "unknown");
    }
    EXPECT_STREQ(xk_isa_name(XK_ISA_AVX512_BF16), "avx512_bf16");
}

// ---- 3. rope: a pointer its count says is unused ------------------------------------------------

TEST(RopeUnusedPointer, CppAndC) {
    const int64_t hd = 8, heads = 2, max_pos = 16;
    const std::vector<float> cache(max_pos * hd, 0.5f);
    const std::vector<int64_t> pos = {0, 1, 2, 3, 4};
    for (int64_t tokens : {int64_t(0), int64_t(5)}) {
        SCOPED_TRACE("tokens=" + std::to_string(tokens));
        std::vector<float> q(5 * heads * hd, kSentinel), k(5 * heads * hd, kSentinel);
        std::vector<uint16_t> qh(q.size(), kSentinelBf16), kh(k.size(), kSentinelBf16);
        const auto f0 = q;
        const auto h0 = qh;
        auto untouched = [&] {
            EXPECT_TRUE(same_bytes(q, f0));
            EXPECT_TRUE(same_bytes(k, f0));
            EXPECT_TRUE(same_bytes(qh, h0));
            EXPECT_TRUE(same_bytes(kh, h0));
        };
        // C++: k given with k_heads = 0; q given with q_heads = 0; a cache given with compute.
        for (int c = 0; c < 3; ++c) {
            RopeDesc d;
            d.tokens = tokens;
            d.head_dim = hd;
            d.q_heads = c == 1 ? 0 : heads;
            d.k_heads = c == 0 ? 0 : heads;
            d.cos_sin = c == 2 ? RopeCosSin::compute : RopeCosSin::cache;
            d.max_position = max_pos;
            RopeArgs a;
            a.q = q.data(), a.k = k.data(), a.positions = pos.data();
            a.cos_sin_cache = cache.data();
            const char* needle = c == 0 ? "k=0x" : c == 1 ? "q=0x" : "cos_sin_cache=0x";
            XK_EXPECT_INVALID(rope(d, a), needle);
            XK_EXPECT_INVALID(RopePlan(d).run(a), needle);
            untouched();
            // The same without the stray pointer is accepted.
            if (c == 0) a.k = nullptr;
            if (c == 1) a.q = nullptr;
            if (c == 2) a.cos_sin_cache = nullptr;
            std::vector<float> q2(q.size(), 1.0f), k2(k.size(), 1.0f);
            if (a.q) a.q = q2.data();
            if (a.k) a.k = k2.data();
            EXPECT_NO_THROW(rope(d, a));
            EXPECT_NO_THROW(RopePlan(d).run(a));
        }
        // C API: a non-null k with k_heads = 0, a non-null q with q_heads = 0.
        EXPECT_EQ(xk_rope_f32(XK_ROPE_NEOX, tokens, heads, 0, hd, 0, q.data(), 0, 0, k.data(), 0, 0, pos.data(),
                              cache.data(), max_pos),
                  XK_INVALID_ARGUMENT);
        EXPECT_TRUE(contains(xk_last_error(), "k=0x")) << xk_last_error();
        EXPECT_EQ(xk_rope_bf16(XK_ROPE_GPTJ, tokens, heads, 0, hd, 0, qh.data(), 0, 0, kh.data(), 0, 0, pos.data(),
                               cache.data(), max_pos),
                  XK_INVALID_ARGUMENT);
        EXPECT_TRUE(contains(xk_last_error(), "k=0x")) << xk_last_error();
        EXPECT_EQ(xk_rope_theta_f32(XK_ROPE_NEOX, tokens, 0, heads, hd, 0, q.data(), 0, 0, k.data(), 0, 0, pos.data(),
                                    10000.0f, 1.0f),
                  XK_INVALID_ARGUMENT);
        EXPECT_TRUE(contains(xk_last_error(), "q=0x")) << xk_last_error();
        EXPECT_EQ(xk_rope_theta_bf16(XK_ROPE_GPTJ, tokens, heads, 0, hd, 0, qh.data(), 0, 0, kh.data(), 0, 0,
                                     pos.data(), 10000.0f, 1.0f),
                  XK_INVALID_ARGUMENT);
        EXPECT_TRUE(contains(xk_last_error(), "k=0x")) << xk_last_error();
        untouched();
        // A null k with k_heads = 0 is accepted.
        std::vector<float> q2(q.size(), 1.0f);
        EXPECT_EQ(xk_rope_f32(XK_ROPE_NEOX, tokens, heads, 0, hd, 0, q2.data(), 0, 0, nullptr, 0, 0, pos.data(),
                              cache.data(), max_pos),
                  XK_SUCCESS)
            << xk_last_error();
        EXPECT_EQ(xk_rope_theta_f32(XK_ROPE_NEOX, tokens, heads, 0, hd, 0, q2.data(), 0, 0, nullptr, 0, 0, pos.data(),
                                    10000.0f, 1.0f),
                  XK_SUCCESS)
            << xk_last_error();
    }
}

// ---- 4. embedding_bag: table / indices required whenever num_indices > 0 ------------------------

TEST(EmbeddingBagNull, CppAndC) {
    const int64_t dim = 3;
    const std::vector<float> table(4 * dim, 1.0f);
    const std::vector<uint16_t> table_h(4 * dim, 0x3F80);
    const std::vector<int64_t> idx = {0, 1, 2};
    const std::vector<int32_t> idx32 = {0, 1, 2};
    const std::vector<float> psw = {1, 1, 1};
    // Bag layouts where no bag reads an index: no bags; two empty bags (offsets all 0, with the
    // last offset given so the last bag ends at 0 too).
    struct Layout {
        int64_t num_bags;
        bool include_last;
    };
    for (const Layout& l : {Layout{0, false}, Layout{0, true}, Layout{2, true}}) {
        SCOPED_TRACE("num_bags=" + std::to_string(l.num_bags) + " include_last_offset=" + std::to_string(l.include_last));
        const std::vector<int64_t> off(l.num_bags + 1, 0);
        const std::vector<int32_t> off32(l.num_bags + 1, 0);
        std::vector<float> out(2 * dim, kSentinel);
        const auto out0 = out;
        EmbeddingBagDesc d;
        d.num_embeddings = 4;
        d.dim = dim;
        d.include_last_offset = l.include_last;
        // C++: null table / indices / per_sample_weights with num_indices = 3.
        for (int which = 0; which < 3; ++which) {
            EmbeddingBagDesc dd = d;
            dd.per_sample_weights = which == 2;
            EmbeddingBagArgs a;
            a.num_bags = l.num_bags;
            a.num_indices = 3;
            a.table = which == 0 ? nullptr : table.data();
            a.indices = which == 1 ? nullptr : idx.data();
            a.per_sample_weights = nullptr;
            a.offsets = off.data();
            a.out = out.data();
            const char* needle = which == 0 ? "table=null" : which == 1 ? "indices=null" : "per_sample_weights=null";
            XK_EXPECT_INVALID(embedding_bag(dd, a), needle);
            XK_EXPECT_INVALID(EmbeddingBagPlan(dd).run(a), needle);
            EXPECT_TRUE(same_bytes(out, out0));
            // Given, the same call succeeds.
            if (which == 0) a.table = table.data();
            if (which == 1) a.indices = idx.data();
            if (which == 2) a.per_sample_weights = psw.data();
            EXPECT_NO_THROW(embedding_bag(dd, a));
            out = out0;
        }
        // C API.
        xk_embedding_bag_desc cd;
        ASSERT_EQ(xk_embedding_bag_desc_init(&cd, 4, dim), XK_SUCCESS);
        cd.include_last_offset = l.include_last;
        auto expect_null = [&](xk_status st, const char* needle, const char* fn) {
            EXPECT_EQ(st, XK_INVALID_ARGUMENT) << fn << ": " << xk_last_error();
            EXPECT_TRUE(contains(xk_last_error(), needle)) << fn << ": '" << xk_last_error() << "' lacks " << needle;
            EXPECT_TRUE(same_bytes(out, out0)) << fn;
        };
        expect_null(xk_embedding_bag_f32(&cd, nullptr, 3, idx.data(), l.num_bags, off.data(), nullptr, out.data()),
                    "table=null", "xk_embedding_bag_f32");
        expect_null(xk_embedding_bag_f32(&cd, table.data(), 3, nullptr, l.num_bags, off.data(), nullptr, out.data()),
                    "indices=null", "xk_embedding_bag_f32");
        expect_null(xk_embedding_bag_f32_i32(&cd, nullptr, 3, idx32.data(), l.num_bags, off32.data(), nullptr,
                                             out.data()),
                    "table=null", "xk_embedding_bag_f32_i32");
        expect_null(xk_embedding_bag_f32_i32(&cd, table.data(), 3, nullptr, l.num_bags, off32.data(), nullptr,
                                             out.data()),
                    "indices=null", "xk_embedding_bag_f32_i32");
        expect_null(xk_embedding_bag_bf16_f32(&cd, nullptr, 3, idx.data(), l.num_bags, off.data(), nullptr,
                                              out.data()),
                    "table=null", "xk_embedding_bag_bf16_f32");
        expect_null(xk_embedding_bag_bf16_f32(&cd, table_h.data(), 3, nullptr, l.num_bags, off.data(), nullptr,
                                              out.data()),
                    "indices=null", "xk_embedding_bag_bf16_f32");
        // num_indices = 0: null table and indices are fine (the bags are empty: zeros).
        EmbeddingBagArgs a;
        a.num_bags = l.num_bags;
        a.num_indices = 0;
        a.offsets = off.data();
        a.out = out.data();
        EXPECT_NO_THROW(embedding_bag(d, a));
        EXPECT_NO_THROW(EmbeddingBagPlan(d).run(a));
        for (int64_t i = 0; i < l.num_bags * dim; ++i) EXPECT_EQ(out[i], 0.0f) << i;
        out = out0;
        EXPECT_EQ(xk_embedding_bag_f32(&cd, nullptr, 0, nullptr, l.num_bags, off.data(), nullptr, out.data()),
                  XK_SUCCESS)
            << xk_last_error();
        EXPECT_EQ(xk_embedding_bag_f32_i32(&cd, nullptr, 0, nullptr, l.num_bags, off32.data(), nullptr, out.data()),
                  XK_SUCCESS)
            << xk_last_error();
        EXPECT_EQ(xk_embedding_bag_bf16_f32(&cd, nullptr, 0, nullptr, l.num_bags, off.data(), nullptr, out.data()),
                  XK_SUCCESS)
            << xk_last_error();
    }
}

// ---- 5. dynamic per-token quantize: non-finite x rejected before anything is written -----------

constexpr int64_t kQRows = 64, kQCols = 300;

// One dynamic quantization of a kQRows x kQCols input; outputs sentinel-filled. kind: 0..3 the C
// functions (f32_u8, f32_s8, bf16_u8, bf16_s8), 4 xk::quantize, 5 QuantPlan::run (these two:
// f32 -> u8 when asymmetric, bf16 -> s8 when symmetric).
struct DynCase {
    std::vector<float> x;       // f32 values (rounded to bf16 for the bf16 forms)
    std::vector<float> smooth;  // empty: none
    bool symmetric = false;
};

struct DynOut {
    std::vector<uint8_t> q = std::vector<uint8_t>(kQRows * kQCols, 0xA5);
    std::vector<float> scales = std::vector<float>(kQRows, kSentinel);
    std::vector<int32_t> zps = std::vector<int32_t>(kQRows, 0x13572468);
};

// Runs it; returns the status and the message ("" on success).
std::pair<xk_status, std::string> run_dynamic(int kind, const DynCase& c, DynOut& o) {
    const bool bf = kind == 2 || kind == 3 || (kind >= 4 && c.symmetric);
    std::vector<uint16_t> xh(c.x.size());
    for (size_t i = 0; i < c.x.size(); ++i) xh[i] = bf16::from_float(c.x[i]);
    const float* smooth = c.smooth.empty() ? nullptr : c.smooth.data();
    const int sym = c.symmetric;
    xk_status st = XK_SUCCESS;
    switch (kind) {
        case 0:
            st = xk_quantize_dynamic_per_token_f32_u8(kQRows, kQCols, c.x.data(), 0, smooth, o.q.data(), 0,
                                                      o.scales.data(), o.zps.data(), sym);
            break;
        case 1:
            st = xk_quantize_dynamic_per_token_f32_s8(kQRows, kQCols, c.x.data(), 0, smooth,
                                                      reinterpret_cast<int8_t*>(o.q.data()), 0, o.scales.data(),
                                                      o.zps.data(), sym);
            break;
        case 2:
            st = xk_quantize_dynamic_per_token_bf16_u8(kQRows, kQCols, xh.data(), 0, smooth, o.q.data(), 0,
                                                       o.scales.data(), o.zps.data(), sym);
            break;
        case 3:
            st = xk_quantize_dynamic_per_token_bf16_s8(kQRows, kQCols, xh.data(), 0, smooth,
                                                       reinterpret_cast<int8_t*>(o.q.data()), 0, o.scales.data(),
                                                       o.zps.data(), sym);
            break;
        default: {
            QuantDesc d;
            d.rows = kQRows, d.cols = kQCols;
            d.src_dtype = bf ? DType::bf16 : DType::f32;
            d.dst_dtype = bf ? DType::s8 : DType::u8;
            d.granularity = QuantGranularity::per_token_dynamic;
            d.symmetric = c.symmetric;
            d.smooth = smooth != nullptr;
            QuantArgs a;
            a.src = bf ? static_cast<const void*>(xh.data()) : static_cast<const void*>(c.x.data());
            a.dst = o.q.data();
            a.scales_out = o.scales.data();
            a.zero_points_out = o.zps.data();
            a.smooth = smooth;
            try {
                if (kind == 4) quantize(d, a);
                else QuantPlan(d).run(a);
            } catch (const Error& e) {
                return {static_cast<xk_status>(static_cast<int>(e.code())), e.what()};
            }
            return {XK_SUCCESS, ""};
        }
    }
    return {st, st == XK_SUCCESS ? std::string() : std::string(xk_last_error())};
}

const char* kDynNames[] = {"xk_quantize_dynamic_per_token_f32_u8", "xk_quantize_dynamic_per_token_f32_s8",
                           "xk_quantize_dynamic_per_token_bf16_u8", "xk_quantize_dynamic_per_token_bf16_s8",
                           "xk::quantize", "xk::QuantPlan::run"};

DynCase dyn_base(bool smooth, bool symmetric) {
    DynCase c;
    c.x.resize(kQRows * kQCols);
    xk::test::fill_uniform(c.x.data(), c.x.size(), -4.0, 4.0, 77);
    if (smooth) {
        c.smooth.resize(kQCols);
        xk::test::fill_uniform(c.smooth.data(), c.smooth.size(), 0.5, 2.0, 78);
    }
    c.symmetric = symmetric;
    return c;
}

// The call is rejected with XK_INVALID_ARGUMENT naming `needle`, and q, scales, zero points are
// exactly as they were.
void expect_dyn_rejected(int kind, const DynCase& c, const std::string& needle, const std::string& what) {
    DynOut o;
    const DynOut o0;
    const auto [st, msg] = run_dynamic(kind, c, o);
    EXPECT_EQ(st, XK_INVALID_ARGUMENT) << kDynNames[kind] << " " << what << ": '" << msg << "'";
    EXPECT_TRUE(contains(msg, needle)) << kDynNames[kind] << " " << what << ": '" << msg << "' does not name " << needle;
    EXPECT_TRUE(same_bytes(o.q, o0.q)) << kDynNames[kind] << " " << what << ": q was written";
    EXPECT_TRUE(same_bytes(o.scales, o0.scales)) << kDynNames[kind] << " " << what << ": scales were written";
    EXPECT_TRUE(same_bytes(o.zps, o0.zps)) << kDynNames[kind] << " " << what << ": zero_points were written";
}

// A non-finite x (or x * smooth overflowing to +-inf) is data, not bad input (docs/quant.md): the
// call succeeds as the static quantizer would (NaN -> the zero point, +-inf saturate), the row's
// parameters come from its finite values, and every other row is bit for bit the all-finite
// call's. The smooth vector is a parameter: a non-finite smooth[c] is still rejected, nothing
// written.
TEST(QuantDynamic, NonFiniteDataQuantizesLikeTheStaticPath) {
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        SCOPED_TRACE("threads=" + std::to_string(threads));
        for (int kind = 0; kind < 6; ++kind)
            for (bool smooth : {false, true})
                for (bool sym : {false, true}) {
                    const DynCase base = dyn_base(smooth, sym);
                    const bool s8 = kind == 1 || kind == 3 || (kind >= 4 && sym);
                    const int qmin = s8 ? -128 : 0, qmax = s8 ? 127 : 255;
                    auto qv = [&](const DynOut& o, int64_t i) {
                        return s8 ? static_cast<int>(static_cast<int8_t>(o.q[i])) : static_cast<int>(o.q[i]);
                    };
                    DynOut want;
                    {  // Control: finite input succeeds and writes every output.
                        const DynOut o0;
                        const auto [st, msg] = run_dynamic(kind, base, want);
                        ASSERT_EQ(st, XK_SUCCESS) << kDynNames[kind] << ": " << msg;
                        EXPECT_FALSE(same_bytes(want.scales, o0.scales));
                        EXPECT_NE(want.scales[kQRows - 1], kSentinel);
                        EXPECT_NE(want.zps[kQRows - 1], o0.zps[kQRows - 1]);
                    }
                    auto check = [&](const DynCase& c, int64_t r, int64_t col, int want_q, const std::string& what,
                                     bool others_same = true) {
                        DynOut o;
                        const auto [st, msg] = run_dynamic(kind, c, o);
                        ASSERT_EQ(st, XK_SUCCESS) << kDynNames[kind] << " " << what << ": " << msg;
                        for (int64_t rr = 0; rr < kQRows; ++rr) {
                            if (rr == r || !others_same) continue;
                            ASSERT_EQ(std::memcmp(&o.q[rr * kQCols], &want.q[rr * kQCols], kQCols), 0)
                                << kDynNames[kind] << " " << what << ": row " << rr << " changed";
                            ASSERT_EQ(o.scales[rr], want.scales[rr]) << kDynNames[kind] << " " << what << " row " << rr;
                            ASSERT_EQ(o.zps[rr], want.zps[rr]) << kDynNames[kind] << " " << what << " row " << rr;
                        }
                        EXPECT_TRUE(std::isfinite(o.scales[r]) && o.scales[r] > 0)
                            << kDynNames[kind] << " " << what << ": scale " << o.scales[r];
                        const int zp = o.zps[r];
                        const int got = qv(o, r * kQCols + col);
                        EXPECT_EQ(got, want_q == INT32_MIN ? zp : want_q) << kDynNames[kind] << " " << what;
                    };
                    for (int64_t r : {kQRows - 1, int64_t(0)})
                        for (float v : {kNaN, kInf, -kInf}) {
                            DynCase c = base;
                            const int64_t col = 17 + r % 5;
                            c.x[r * kQCols + col] = v;
                            check(c, r, col, std::isnan(v) ? INT32_MIN : v > 0 ? qmax : qmin,
                                  "x[" + std::to_string(r) + "][" + std::to_string(col) + "]=" + std::to_string(v) +
                                      (smooth ? " smooth" : "") + (sym ? " symmetric" : ""));
                            if (HasFatalFailure()) return;
                        }
                    if (smooth) {
                        // x * smooth overflows to -inf in the last row (finite x, finite smooth).
                        DynCase c = base;
                        c.x[(kQRows - 1) * kQCols + 299] = -1e30f;
                        c.smooth[299] = 1e30f;
                        // (smooth[299] changes column 299 of every row: only the overflowing row is checked)
                        check(c, kQRows - 1, 299, qmin, "x*smooth overflow", false);
                        if (HasFatalFailure()) return;
                        // smooth[c] = inf: the smooth vector itself is rejected, naming smooth[c].
                        DynCase c2 = base;
                        c2.smooth[5] = kInf;
                        expect_dyn_rejected(kind, c2, "smooth[5]", "smooth[5]=inf");
                    }
                }
    }
}

// ---- 6. int8 -> f32 scales must be finite and > 0 -----------------------------------------------

TEST(Int8Scales, RejectedUnlessFinitePositive) {
    const int64_t M = 3, N = 5, K = 4;
    std::vector<uint8_t> Au(M * K);
    std::vector<int8_t> As(M * K), B(K * N);
    for (int64_t i = 0; i < M * K; ++i) Au[i] = static_cast<uint8_t>(i % 7 + 1), As[i] = static_cast<int8_t>(i % 5 - 2);
    for (int64_t i = 0; i < K * N; ++i) B[i] = static_cast<int8_t>(i % 9 - 4);
    const float bads[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, -1.0f};
    const int64_t bad_n = 3;
    // where: 0 a_scale, 1 b_scales[bad_n] per channel, 2 b_scales[0] per tensor.
    for (int where = 0; where < 3; ++where)
        for (float v : bads)
            for (int s8 = 0; s8 < 2; ++s8) {
                const bool per_channel = where == 1;
                float a_scale = where == 0 ? v : 0.5f;
                std::vector<float> bs(per_channel ? N : 1, 0.25f);
                if (where == 1) bs[bad_n] = v;
                if (where == 2) bs[0] = v;
                const std::string needle = where == 0 ? "a_scale=" : where == 1 ? "b_scales[3]=" : "b_scales[0]=";
                SCOPED_TRACE(needle + std::to_string(v) + (s8 ? " s8s8" : " u8s8"));
                std::vector<float> C(M * N, kSentinel);
                const auto C0 = C;
                const xk_status st =
                    s8 ? xk_gemm_s8s8f32(XK_TRANS_N, XK_TRANS_N, M, N, K, 1.0f, As.data(), 0, a_scale, 0, B.data(), 0,
                                         bs.data(), per_channel, 0, 0.0f, C.data(), 0)
                       : xk_gemm_u8s8f32(XK_TRANS_N, XK_TRANS_N, M, N, K, 1.0f, Au.data(), 0, a_scale, 0, B.data(), 0,
                                         bs.data(), per_channel, 0, 0.0f, C.data(), 0);
                EXPECT_EQ(st, XK_INVALID_ARGUMENT) << xk_last_error();
                EXPECT_TRUE(contains(xk_last_error(), needle)) << xk_last_error();
                EXPECT_TRUE(same_bytes(C, C0));
                // C++: xk::gemm and GemmPlan::run, under every ISA (plans of each level).
                GemmDesc d;
                d.M = M, d.N = N, d.K = K;
                d.a_type = s8 ? DType::s8 : DType::u8, d.b_type = DType::s8, d.c_type = DType::f32;
                d.b_scale_per_channel = per_channel;
                GemmArgs a;
                a.A = s8 ? static_cast<const void*>(As.data()) : static_cast<const void*>(Au.data());
                a.B = B.data();
                a.C = C.data();
                a.a_scale = &a_scale;
                a.b_scales = bs.data();
                for_each_isa([&](Isa) {
                    XK_EXPECT_INVALID(gemm(d, a), needle);
                    XK_EXPECT_INVALID(GemmPlan(d).run(a), needle);
                    const GemmPlan p(d);
                    XK_EXPECT_INVALID(p.run(a, p.pack_b(B.data())), needle);
                    EXPECT_TRUE(same_bytes(C, C0));
                });
            }
    // A tiny positive scale is a scale: accepted (a_scale and every b_scale 1e-30).
    for (int s8 = 0; s8 < 2; ++s8)
        for (int per_channel = 0; per_channel < 2; ++per_channel) {
            std::vector<float> bs(per_channel ? N : 1, 1e-30f);
            std::vector<float> C(M * N, kSentinel);
            const xk_status st =
                s8 ? xk_gemm_s8s8f32(XK_TRANS_N, XK_TRANS_N, M, N, K, 1.0f, As.data(), 0, 1e-30f, 0, B.data(), 0,
                                     bs.data(), per_channel, 0, 0.0f, C.data(), 0)
                   : xk_gemm_u8s8f32(XK_TRANS_N, XK_TRANS_N, M, N, K, 1.0f, Au.data(), 0, 1e-30f, 0, B.data(), 0,
                                     bs.data(), per_channel, 0, 0.0f, C.data(), 0);
            EXPECT_EQ(st, XK_SUCCESS) << xk_last_error();
            EXPECT_NE(C[0], kSentinel);
            GemmDesc d;
            d.M = M, d.N = N, d.K = K;
            d.a_type = s8 ? DType::s8 : DType::u8, d.b_type = DType::s8, d.c_type = DType::f32;
            d.b_scale_per_channel = per_channel;
            const float one = 1.0f;
            GemmArgs a;
            a.A = s8 ? static_cast<const void*>(As.data()) : static_cast<const void*>(Au.data());
            a.B = B.data();
            a.C = C.data();
            a.a_scale = &one;
            a.b_scales = bs.data();
            EXPECT_NO_THROW(gemm(d, a));
            EXPECT_NO_THROW(GemmPlan(d).run(a));
        }
}

// ---- 7. softmax: large finite logits, bf16 ------------------------------------------------------

TEST(SoftmaxBf16Large, ExactRows) {
    const float rows_in[][4] = {
        {1e10f, 0, 1, 2},        // the reported row, 1e10 rounded to bf16
        {1e38f, 0, 1, 2},        // near the top of the range
        {0, 1, 1e38f, 2},        // the max elsewhere
        {-1e38f, -1e38f, -1e38f, -1e38f},  // all equal: 1/4 each
        {1e38f, -1e38f, 1e38f, -1e38f},    // two tied maxima: 1/2 each
        {-1e38f, 5, -1e38f, 5},            // 1/2 each, the others 0
    };
    const float want[][4] = {
        {1, 0, 0, 0}, {1, 0, 0, 0}, {0, 0, 1, 0}, {0.25f, 0.25f, 0.25f, 0.25f}, {0.5f, 0, 0.5f, 0}, {0, 0.5f, 0, 0.5f},
    };
    const int64_t rows = sizeof(rows_in) / sizeof(rows_in[0]);
    std::vector<uint16_t> x(rows * 4);
    std::vector<float> xf(rows * 4);
    for (int64_t r = 0; r < rows; ++r)
        for (int j = 0; j < 4; ++j) {
            x[r * 4 + j] = bf16::from_float(rows_in[r][j]);
            xf[r * 4 + j] = rows_in[r][j];
        }
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            // Each row alone (the reported call shape), then all rows in one call.
            for (int64_t r = 0; r <= rows; ++r) {
                const int64_t r0 = r == rows ? 0 : r, n = r == rows ? rows : 1;
                std::vector<uint16_t> y(n * 4, kSentinelBf16);
                ASSERT_EQ(xk_softmax_bf16(n, 4, x.data() + r0 * 4, 0, y.data(), 0, 1.0f, 0, 0), XK_SUCCESS)
                    << xk_last_error();
                std::vector<float> yf(n * 4, kSentinel);
                ASSERT_EQ(xk_softmax_f32(n, 4, xf.data() + r0 * 4, 0, yf.data(), 0, 1.0f, 0, 0), XK_SUCCESS)
                    << xk_last_error();
                for (int64_t i = 0; i < n; ++i)
                    for (int j = 0; j < 4; ++j) {
                        EXPECT_EQ(bf16::to_float(y[i * 4 + j]), want[r0 + i][j])
                            << "bf16 row " << r0 + i << " col " << j << " threads " << threads;
                        EXPECT_EQ(yf[i * 4 + j], want[r0 + i][j])
                            << "f32 row " << r0 + i << " col " << j << " threads " << threads;
                    }
            }
        });
    }
}

}  // namespace
