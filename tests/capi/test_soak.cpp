// Concurrency soak: 16 std::threads run every op family at once (gemm, conv2d, embedding_bag,
// norm, rope, quant, glu, softmax, eltwise, attention (SDPA, cached over contiguous / paged KV
// caches, kv_cache_append), woq, qconv, interaction, optim (Lamb / AdamW steps in place), vision
// (roi_align, nms)), C++ and C API mixed (the C plans of attention, xk_kv_cache_append_ex and the
// embedding backward / fused update among them, some of their shapes drawn from XK_SOAK_SEED):
//   - shared plans created before the soak and run concurrently (GemmPlan also with a shared
//     PackedB; xk_gemm_plan + xk_gemm_packed_b likewise),
//   - plans created, used and destroyed inside the thread (GemmPlan::pack_b included),
//   - one-shot calls (the shared kernel cache: every thread asks for the same keys, and for
//     different ones at the same time),
//   - calls that must fail (xk::Error / a status other than XK_SUCCESS, the message naming the
//     argument) and must leave the output as it was.
// Every thread writes its own output buffer, and every result is compared bit for bit with the
// one computed single-threaded before the soak (the library is deterministic for a given ISA and
// thread count; the thread count is set once, before). One thread clears the kernel cache and
// reads its statistics now and then (plans keep their kernels alive). The ISA cap is never
// touched here (process-wide, not for concurrent use). A second test checks that xk_last_error()
// is per thread. Run under ThreadSanitizer too (the tsan preset); iteration counts shrink there.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.hpp"
#include "common/gemm_capi.hpp"
#include "xk/xk.h"
#include "xk/xk.hpp"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define XK_SOAK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define XK_SOAK_SANITIZED 1
#endif
#endif
#ifndef XK_SOAK_SANITIZED
#define XK_SOAK_SANITIZED 0
#endif

using namespace xk;

namespace {

using xk::test::to_c;  // the GEMM C structs (common/gemm_capi.hpp)

constexpr int kThreads = 16;    // soak threads
constexpr int kLibThreads = 2;  // xk::set_num_threads during the soak (and for the expected results)
// Rounds: each soak thread runs every case this many times (in its own order, a variant per visit);
// XK_SOAK_ROUNDS=<n> overrides it for a longer soak. On 2 cores: Release ~5 s, TSan ~20 s.
#if XK_SOAK_SANITIZED
constexpr int kDefaultRounds = 16;
constexpr int kLastErrorIters = 1000;
#else
constexpr int kDefaultRounds = 100;
constexpr int kLastErrorIters = 3000;
#endif
constexpr int kBadEvery = 4;      // a thread makes a failing call after every 4th good one
constexpr int kClearEvery = 16;   // thread 0 clears the kernel cache after every 16th call
constexpr unsigned char kSentinel = 0xA5;

int soak_rounds() {
    const char* e = std::getenv("XK_SOAK_ROUNDS");
    const int n = e ? std::atoi(e) : 0;
    return n > 0 ? n : kDefaultRounds;
}

enum Family : int {
    kGemm, kConv, kEmbeddingBag, kNorm, kRope, kQuant, kGlu, kSoftmax, kEltwise,
    kAttention, kWoq, kQConv, kInteraction, kOptim, kVision, kFamilies
};
const char* const kFamilyName[kFamilies] = {"gemm", "conv2d", "embedding_bag", "norm", "rope",
                                            "quant", "glu", "softmax", "eltwise", "attention",
                                            "woq", "qconv", "interaction", "optim", "vision"};

enum Kind : int { kSharedPlan, kLocalPlan, kOneShot, kKinds };

using Bytes = std::vector<unsigned char>;
using Out = unsigned char*;

struct Variant {
    Kind kind;
    bool capi;
    std::string name;
    std::function<void(Out)> run;  // computes the case's output into out (throws on failure)
};

// A call that must fail: returns "" when it did as it must (see must_throw / must_fail).
using BadCall = std::function<std::string(Out)>;

struct Case {
    Family family;
    std::string name;
    size_t out_bytes = 0;
    Bytes init;                     // out before every call: the sentinel, or inputs of in-place ops
    std::vector<Variant> variants;  // each computes the same output
    std::vector<BadCall> bad;
    int every = 1;     // visited in every `every`-th round of a thread (heavy cases: > 1)
    std::string impl;  // implementation of the shared plan (for the log)
    Bytes expected;    // computed single-threaded before the soak

    Case(Family f, std::string n, size_t bytes) : family(f), name(std::move(n)), out_bytes(bytes), init(bytes, kSentinel) {}
    void prepare(Out out) const { std::memcpy(out, init.data(), out_bytes); }
    void add(Kind k, bool capi, const std::string& n, std::function<void(Out)> f) {
        variants.push_back(Variant{k, capi, n, std::move(f)});
    }
};

// Regions of an output buffer, each 64-byte aligned.
struct Layout {
    size_t bytes = 0;
    size_t add(size_t n) {
        const size_t off = bytes;
        bytes = (bytes + n + 63) / 64 * 64;
        return off;
    }
};

template <class T>
T* at(Out out, size_t off) {
    return reinterpret_cast<T*>(out + off);
}

const uint16_t* u16(const void* p) { return static_cast<const uint16_t*>(p); }
uint16_t* u16(void* p) { return static_cast<uint16_t*>(p); }

// n random elements of type t: f32 / bf16 in [-1, 1], u8 [0, 255], s8 [-128, 127], s32 [-1000, 1000].
Bytes random_bytes(DType t, size_t n, uint64_t seed) {
    Bytes v(n * dtype_size(t) + 16);
    void* p = v.data();
    switch (t) {
        case DType::f32: test::fill_uniform(static_cast<float*>(p), n, -1.0, 1.0, seed); break;
        case DType::bf16: test::fill_uniform(static_cast<bf16*>(p), n, -1.0, 1.0, seed); break;
        case DType::u8: test::fill_uniform(static_cast<uint8_t*>(p), n, 0.0, 255.0, seed); break;
        case DType::s8: test::fill_uniform(static_cast<int8_t*>(p), n, -128.0, 127.0, seed); break;
        case DType::s32: test::fill_uniform(static_cast<int32_t*>(p), n, -1000.0, 1000.0, seed); break;
    }
    return v;
}

template <class T>
std::vector<T> random_vec(size_t n, double lo, double hi, uint64_t seed) {
    std::vector<T> v(n);
    test::fill_uniform(v.data(), n, lo, hi, seed);
    return v;
}

// Collects failures from the worker threads (asserted on the main thread after the join).
class Failures {
public:
    void add(const std::string& msg) {
        count_.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mu_);
        if (msgs_.size() < 25) msgs_.push_back(msg);
    }
    int count() const { return count_.load(); }
    std::string summary() const {
        std::lock_guard<std::mutex> lock(mu_);
        std::string s;
        for (const auto& m : msgs_) s += "\n  " + m;
        return s;
    }

private:
    std::atomic<int> count_{0};
    mutable std::mutex mu_;
    std::vector<std::string> msgs_;
};

// Runs f, which must throw xk::Error(invalid_argument) whose message names `needle`.
template <class F>
std::string must_throw(F&& f, const char* needle) {
    try {
        f();
    } catch (const Error& e) {
        const std::string m = e.what();
        if (e.code() != Status::invalid_argument) return std::string("status ") + status_name(e.code()) + ": " + m;
        if (m.find(needle) == std::string::npos) return "message '" + m + "' does not name '" + needle + "'";
        return "";
    } catch (const std::exception& e) {
        return std::string("threw a non-xk exception: ") + e.what();
    }
    return "did not throw";
}

// A C call that must return XK_INVALID_ARGUMENT with this thread's xk_last_error() naming `needle`.
std::string must_fail(xk_status st, const char* needle) {
    const std::string m = xk_last_error();
    if (st == XK_SUCCESS) return "returned XK_SUCCESS";
    if (st != XK_INVALID_ARGUMENT) return "returned status " + std::to_string(st) + ": " + m;
    if (m.find(needle) == std::string::npos) return "xk_last_error() '" + m + "' does not name '" + needle + "'";
    return "";
}

// A C call that must succeed, leaving xk_last_error() empty on this thread.
void capi_ok(xk_status st, const char* call) {
    if (st != XK_SUCCESS)
        throw std::runtime_error(std::string(call) + " returned " + std::to_string(st) + ": " + xk_last_error());
    if (xk_last_error()[0] != '\0')
        throw std::runtime_error(std::string(call) + " succeeded but xk_last_error() is '" + xk_last_error() + "'");
}
#define XK_CAPI_OK(call) capi_ok((call), #call)

// ---- gemm ---------------------------------------------------------------------------------------

struct GemmData {
    GemmDesc d;
    Bytes A, B, residual;
    std::vector<float> bias, b_scales;
    float a_scale = 1.0f, c_scale = 0.25f;
    int32_t a_zp = 0, b_zp = 0, c_zp = 0;
    int64_t lda = 0, ldb = 0, ldc = 0;  // resolved

    GemmArgs args(void* C, bool with_b = true) const {
        GemmArgs a;
        a.A = A.data();
        a.B = with_b ? B.data() : nullptr;
        a.C = C;
        a.bias = d.epilogue.bias ? bias.data() : nullptr;
        a.residual = d.epilogue.residual ? residual.data() : nullptr;
        const bool int8 = d.a_type == DType::u8 || d.a_type == DType::s8;
        const bool requant = d.c_type == DType::u8 || d.c_type == DType::s8;
        a.a_scale = int8 && (d.c_type == DType::f32 || requant) ? &a_scale : nullptr;
        a.b_scales = int8 && (d.c_type == DType::f32 || requant) ? b_scales.data() : nullptr;
        a.a_zero_point = a_zp;
        a.b_zero_point = b_zp;
        a.c_scale = requant ? &c_scale : nullptr;
        a.c_zero_point = requant ? c_zp : 0;
        return a;
    }
};

using GemmExtra = std::function<void(const GemmData&, Out)>;

// One gemm case: C++ plan (shared / local, with and without PackedB), one-shot, C API plan
// (shared / local, packed), C one-shot, and `extra` (a BLAS-style C function) when given.
void add_gemm(std::vector<Case>& cases, const std::string& name, const GemmDesc& d, uint64_t seed,
              const std::string& extra_name = "", GemmExtra extra = nullptr) {
    auto g = std::make_shared<GemmData>();
    g->d = d;
    g->lda = d.lda ? d.lda : (d.trans_a == Trans::N ? d.K : d.M);
    g->ldb = d.ldb ? d.ldb : (d.trans_b == Trans::N ? d.N : d.K);
    g->ldc = d.ldc ? d.ldc : d.N;
    const int64_t ldr = d.ld_residual ? d.ld_residual : d.N;
    // batched descriptors here use packed item strides (or 0: shared): batch items of each
    const int64_t items = std::max<int64_t>(1, d.batch);
    g->A = random_bytes(d.a_type, items * (d.trans_a == Trans::N ? d.M : d.K) * g->lda, seed);
    g->B = random_bytes(d.b_type, items * (d.trans_b == Trans::N ? d.K : d.N) * g->ldb, seed + 1);
    g->residual = random_bytes(d.residual_type, items * d.M * ldr, seed + 2);
    g->bias = random_vec<float>(d.N, -1.0, 1.0, seed + 3);
    g->b_scales = random_vec<float>(d.N, 0.001, 0.01, seed + 4);
    g->a_scale = 0.03125f;
    g->a_zp = d.a_type == DType::u8 ? 3 : (d.a_type == DType::s8 ? -5 : 0);
    g->b_zp = d.b_type == DType::s8 ? 2 : 0;
    g->c_zp = d.c_type == DType::u8 ? 128 : d.c_type == DType::s8 ? -3 : 0;

    const size_t c_bytes = static_cast<size_t>(items * d.M * g->ldc) * dtype_size(d.c_type);
    Case c(kGemm, name, c_bytes);
    if (d.beta != 0.0f) {  // C is read: start from random values
        const Bytes c0 = random_bytes(d.c_type, d.M * g->ldc, seed + 5);
        std::memcpy(c.init.data(), c0.data(), c_bytes);
    }

    auto plan = std::make_shared<const GemmPlan>(d);
    auto packed = std::make_shared<const PackedB>(plan->pack_b(g->B.data()));
    c.impl = plan->impl_name();
    const xk_gemm_desc cd = to_c(d);
    xk_gemm_plan* cp_raw = nullptr;
    capi_ok(xk_gemm_plan_create(&cd, &cp_raw), "xk_gemm_plan_create");
    std::shared_ptr<xk_gemm_plan> cplan(cp_raw, xk_gemm_plan_destroy);
    xk_gemm_packed_b* cpk_raw = nullptr;
    capi_ok(xk_gemm_plan_pack_b(cplan.get(), g->B.data(), &cpk_raw), "xk_gemm_plan_pack_b");
    std::shared_ptr<xk_gemm_packed_b> cpacked(cpk_raw, xk_gemm_packed_b_destroy);

    // "amx:bf16:decode" (M 1..31 at the amx cap) runs the tiles for a PackedB and the vector
    // kernel for a plain B: two sums of different order, so its packed calls are a case of their own.
    const bool split = c.impl == "amx:bf16:decode";
    Case cp(kGemm, name + " (PackedB: tiles)", c_bytes);
    cp.impl = c.impl;
    cp.init = c.init;
    Case& P = split ? cp : c;
    c.add(kSharedPlan, false, "GemmPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    P.add(kSharedPlan, false, "GemmPlan::run(PackedB)", [g, plan, packed](Out out) { plan->run(g->args(out, false), *packed); });
    c.add(kLocalPlan, false, "local GemmPlan::run", [g](Out out) { GemmPlan(g->d).run(g->args(out)); });
    P.add(kLocalPlan, false, "local GemmPlan::pack_b + run", [g](Out out) {
        const GemmPlan p(g->d);
        const PackedB w = p.pack_b(g->B.data());
        p.run(g->args(out, false), w);
    });
    c.add(kOneShot, false, "xk::gemm", [g](Out out) { gemm(g->d, g->args(out)); });
    c.add(kSharedPlan, true, "xk_gemm_plan_run", [g, cplan](Out out) {
        const xk_gemm_args a = to_c(g->args(out));
        XK_CAPI_OK(xk_gemm_plan_run(cplan.get(), &a));
    });
    P.add(kSharedPlan, true, "xk_gemm_plan_run_packed", [g, cplan, cpacked](Out out) {
        const xk_gemm_args a = to_c(g->args(out, false));
        XK_CAPI_OK(xk_gemm_plan_run_packed(cplan.get(), &a, cpacked.get()));
    });
    P.add(kLocalPlan, true, "xk_gemm_plan_create + pack_b + run_packed + destroy", [g](Out out) {
        const xk_gemm_desc cd = to_c(g->d);
        xk_gemm_plan* p = nullptr;
        XK_CAPI_OK(xk_gemm_plan_create(&cd, &p));
        std::unique_ptr<xk_gemm_plan, void (*)(xk_gemm_plan*)> hold(p, xk_gemm_plan_destroy);
        xk_gemm_packed_b* w = nullptr;
        XK_CAPI_OK(xk_gemm_plan_pack_b(p, g->B.data(), &w));
        std::unique_ptr<xk_gemm_packed_b, void (*)(xk_gemm_packed_b*)> hold_w(w, xk_gemm_packed_b_destroy);
        const xk_gemm_args a = to_c(g->args(out, false));
        XK_CAPI_OK(xk_gemm_plan_run_packed(p, &a, w));
    });
    c.add(kOneShot, true, "xk_gemm", [g](Out out) {
        const xk_gemm_desc cd = to_c(g->d);
        const xk_gemm_args a = to_c(g->args(out));
        XK_CAPI_OK(xk_gemm(&cd, &a));
    });
    if (extra) c.add(kOneShot, true, extra_name, [g, extra](Out out) { extra(*g, out); });

    // Failing calls: a leading dimension below its minimum (one-shot), a null A (shared plan),
    // a null B (C plan), a negative M (C one-shot).
    c.bad.push_back([g](Out out) {
        GemmDesc bd = g->d;
        bd.lda = (g->d.trans_a == Trans::N ? g->d.K : g->d.M) - 1;
        return must_throw([&] { gemm(bd, g->args(out)); }, "lda=");
    });
    c.bad.push_back([g, plan](Out out) {
        GemmArgs a = g->args(out);
        a.A = nullptr;
        return must_throw([&] { plan->run(a); }, "A=null");
    });
    c.bad.push_back([g, cplan](Out out) {
        xk_gemm_args a = to_c(g->args(out));
        a.B = nullptr;
        return must_fail(xk_gemm_plan_run(cplan.get(), &a), "B=null");
    });
    c.bad.push_back([g](Out out) {
        xk_gemm_desc cd = to_c(g->d);
        cd.M = -7;
        const xk_gemm_args a = to_c(g->args(out));
        return must_fail(xk_gemm(&cd, &a), "M=-7");
    });
    cases.push_back(std::move(c));
    if (split) cases.push_back(std::move(cp));
}

GemmDesc gemm_desc(int64_t M, int64_t N, int64_t K, DType a, DType b, DType c) {
    GemmDesc d;
    d.M = M, d.N = N, d.K = K;
    d.a_type = a, d.b_type = b, d.c_type = c;
    return d;
}

void add_gemm_cases(std::vector<Case>& cases) {
    // f32, the small kernel (M, N, K <= 64), with xk_sgemm.
    add_gemm(cases, "f32 7x17x33", gemm_desc(7, 17, 33, DType::f32, DType::f32, DType::f32), 100, "xk_sgemm",
             [](const GemmData& g, Out out) {
                 XK_CAPI_OK(xk_sgemm(XK_TRANS_N, XK_TRANS_N, g.d.M, g.d.N, g.d.K, g.d.alpha,
                                     reinterpret_cast<const float*>(g.A.data()), 0,
                                     reinterpret_cast<const float*>(g.B.data()), 0, g.d.beta, at<float>(out, 0), 0));
             });
    {  // f32, B transposed, beta (C read), bias + gelu_erf + f32 residual, padded ldc.
        GemmDesc d = gemm_desc(17, 33, 65, DType::f32, DType::f32, DType::f32);
        d.trans_b = Trans::T;
        d.ldc = 37;
        d.alpha = 0.5f, d.beta = 0.75f;
        d.epilogue.bias = true, d.epilogue.act = Activation::gelu_erf, d.epilogue.residual = true;
        add_gemm(cases, "f32 17x33x65 B^T beta bias gelu_erf residual", d, 200);
    }
    {  // f32 decode shape (M <= 16, B too large for the direct kernel), bias + silu.
        GemmDesc d = gemm_desc(3, 257, 513, DType::f32, DType::f32, DType::f32);
        d.epilogue.bias = true, d.epilogue.act = Activation::silu;
        add_gemm(cases, "f32 3x257x513 bias silu", d, 300);
    }
    {  // f32 large enough for 2 threads, A transposed, relu.
        GemmDesc d = gemm_desc(65, 257, 513, DType::f32, DType::f32, DType::f32);
        d.trans_a = Trans::T;
        d.alpha = 0.75f;
        d.epilogue.act = Activation::relu;
        add_gemm(cases, "f32 65x257x513 A^T relu", d, 400);
    }
    {  // bf16 -> f32: A transposed with xk_gemm_bf16f32; bias + gelu_tanh.
        GemmDesc d = gemm_desc(17, 33, 65, DType::bf16, DType::bf16, DType::f32);
        d.trans_a = Trans::T;
        add_gemm(cases, "bf16->f32 17x33x65 A^T", d, 500, "xk_gemm_bf16f32", [](const GemmData& g, Out out) {
            XK_CAPI_OK(xk_gemm_bf16f32(XK_TRANS_T, XK_TRANS_N, g.d.M, g.d.N, g.d.K, g.d.alpha, u16(g.A.data()), 0,
                                       u16(g.B.data()), 0, g.d.beta, at<float>(out, 0), 0));
        });
        d.trans_a = Trans::N;
        d.M = 33, d.N = 17, d.K = 7;
        d.epilogue.bias = true, d.epilogue.act = Activation::gelu_tanh;
        add_gemm(cases, "bf16->f32 33x17x7 bias gelu_tanh", d, 550);
    }
    {  // bf16 -> bf16 with a bf16 residual, and plain with xk_gemm_bf16bf16.
        GemmDesc d = gemm_desc(7, 65, 17, DType::bf16, DType::bf16, DType::bf16);
        add_gemm(cases, "bf16->bf16 7x65x17", d, 600, "xk_gemm_bf16bf16", [](const GemmData& g, Out out) {
            XK_CAPI_OK(xk_gemm_bf16bf16(XK_TRANS_N, XK_TRANS_N, g.d.M, g.d.N, g.d.K, g.d.alpha, u16(g.A.data()), 0,
                                        u16(g.B.data()), 0, g.d.beta, at<uint16_t>(out, 0), 0));
        });
        d.M = 17, d.N = 33, d.K = 33;
        d.trans_b = Trans::T;
        d.epilogue.residual = true, d.residual_type = DType::bf16, d.epilogue.act = Activation::silu;
        add_gemm(cases, "bf16->bf16 17x33x33 B^T silu bf16-residual", d, 650);
    }
    {  // u8 x s8 -> s32, zero points, beta = 1 (C += sum), with xk_gemm_u8s8s32.
        GemmDesc d = gemm_desc(17, 33, 65, DType::u8, DType::s8, DType::s32);
        d.beta = 1.0f;
        add_gemm(cases, "u8s8->s32 17x33x65 beta=1", d, 700, "xk_gemm_u8s8s32", [](const GemmData& g, Out out) {
            XK_CAPI_OK(xk_gemm_u8s8s32(XK_TRANS_N, XK_TRANS_N, g.d.M, g.d.N, g.d.K,
                                       reinterpret_cast<const uint8_t*>(g.A.data()), 0, g.a_zp,
                                       reinterpret_cast<const int8_t*>(g.B.data()), 0, g.b_zp, g.d.beta,
                                       at<int32_t>(out, 0), 0));
        });
    }
    {  // u8 x s8 -> f32 with scales: per tensor with xk_gemm_u8s8f32; per channel + bias + relu.
        GemmDesc d = gemm_desc(33, 17, 65, DType::u8, DType::s8, DType::f32);
        d.alpha = 2.0f;
        add_gemm(cases, "u8s8->f32 33x17x65 scales", d, 800, "xk_gemm_u8s8f32", [](const GemmData& g, Out out) {
            XK_CAPI_OK(xk_gemm_u8s8f32(XK_TRANS_N, XK_TRANS_N, g.d.M, g.d.N, g.d.K, g.d.alpha,
                                       reinterpret_cast<const uint8_t*>(g.A.data()), 0, g.a_scale, g.a_zp,
                                       reinterpret_cast<const int8_t*>(g.B.data()), 0, g.b_scales.data(), 0, g.b_zp,
                                       g.d.beta, at<float>(out, 0), 0));
        });
        d.b_scale_per_channel = true;
        d.trans_b = Trans::T;
        d.epilogue.bias = true, d.epilogue.act = Activation::relu;
        add_gemm(cases, "u8s8->f32 33x17x65 B^T per-channel bias relu", d, 850);
    }
    {  // requantized u8 / s8 C (static int8 models), and strided batched products (attention).
        GemmDesc d = gemm_desc(33, 17, 65, DType::u8, DType::s8, DType::u8);
        d.epilogue.bias = true, d.epilogue.act = Activation::relu;
        add_gemm(cases, "u8s8->u8 33x17x65 requantized bias relu", d, 860);
        d = gemm_desc(17, 33, 65, DType::s8, DType::s8, DType::s8);
        d.b_scale_per_channel = true, d.trans_b = Trans::T;
        add_gemm(cases, "s8s8->s8 17x33x65 B^T per-channel requantized", d, 870);
        d = gemm_desc(33, 16, 24, DType::f32, DType::f32, DType::f32);
        d.batch = 12, d.batch_stride_a = 33 * 24, d.batch_stride_b = 24 * 16, d.batch_stride_c = 33 * 16;
        add_gemm(cases, "f32 batch 12 x 33x16x24", d, 880);
        d = gemm_desc(17, 33, 65, DType::bf16, DType::bf16, DType::f32);
        d.batch = 5, d.batch_stride_a = 17 * 65;  // B shared by the items (stride 0)
        add_gemm(cases, "bf16->f32 batch 5 x 17x33x65 shared B", d, 890);
    }
    {  // s8 x s8 -> f32 through xk_gemm_s8s8f32.
        GemmDesc d = gemm_desc(7, 17, 33, DType::s8, DType::s8, DType::f32);
        add_gemm(cases, "s8s8->f32 7x17x33", d, 900, "xk_gemm_s8s8f32", [](const GemmData& g, Out out) {
            XK_CAPI_OK(xk_gemm_s8s8f32(XK_TRANS_N, XK_TRANS_N, g.d.M, g.d.N, g.d.K, g.d.alpha,
                                       reinterpret_cast<const int8_t*>(g.A.data()), 0, g.a_scale, g.a_zp,
                                       reinterpret_cast<const int8_t*>(g.B.data()), 0, g.b_scales.data(), 0, g.b_zp,
                                       g.d.beta, at<float>(out, 0), 0));
        });
    }
}

// ---- conv2d -------------------------------------------------------------------------------------

struct ConvData {
    ConvDesc d;
    Bytes src, weights, residual;
    std::vector<float> bias;
    bool residual_in_place = false;  // residual == dst (the output buffer holds it on entry)
    ConvArgs args(Out out) const {
        return ConvArgs{src.data(), weights.data(), d.with_bias ? bias.data() : nullptr, out,
                        d.residual == ConvResidual::none ? nullptr : (residual_in_place ? out : residual.data())};
    }
};

xk_conv2d_desc to_c(const ConvDesc& d) {
    xk_conv2d_desc c;
    xk_conv2d_desc_init(&c, d.n, d.c, d.h, d.w, d.oc, d.kh, d.kw);
    c.stride_h = d.stride_h, c.stride_w = d.stride_w;
    c.pad_top = d.pad_top, c.pad_bottom = d.pad_bottom, c.pad_left = d.pad_left, c.pad_right = d.pad_right;
    c.dilation_h = d.dilation_h, c.dilation_w = d.dilation_w;
    c.groups = d.groups;
    c.layout = static_cast<xk_conv_layout>(d.layout);
    c.weight_layout = static_cast<xk_conv_weight_layout>(d.weight_layout);
    c.residual = static_cast<xk_conv_residual>(d.residual);
    c.activation = static_cast<xk_activation>(d.activation);
    return c;
}

void add_conv(std::vector<Case>& cases, const std::string& name, const ConvDesc& d, bool in_place, uint64_t seed) {
    auto g = std::make_shared<ConvData>();
    g->d = d;
    g->residual_in_place = in_place;
    g->src = random_bytes(d.src_dtype, d.src_elements(), seed);
    g->weights = random_bytes(d.weight_dtype, d.weight_elements(), seed + 1);
    g->bias = random_vec<float>(d.oc, -1.0, 1.0, seed + 2);
    g->residual = random_bytes(d.dst_dtype, d.dst_elements(), seed + 3);
    Case c(kConv, name, static_cast<size_t>(d.dst_elements()) * dtype_size(d.dst_dtype));
    if (in_place) std::memcpy(c.init.data(), g->residual.data(), c.out_bytes);

    auto plan = std::make_shared<const ConvPlan>(d);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "ConvPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local ConvPlan::run", [g](Out out) { ConvPlan(g->d).run(g->args(out)); });
    c.add(kOneShot, false, "xk::conv2d", [g](Out out) { conv2d(g->d, g->args(out)); });
    c.add(kOneShot, true, "xk_conv2d_*", [g](Out out) {
        const xk_conv2d_desc cd = to_c(g->d);
        const ConvArgs a = g->args(out);
        const auto* bias = static_cast<const float*>(a.bias);
        if (g->d.src_dtype == DType::f32)
            XK_CAPI_OK(xk_conv2d_f32(&cd, static_cast<const float*>(a.src), static_cast<const float*>(a.weights), bias,
                                     static_cast<float*>(a.dst), static_cast<const float*>(a.residual)));
        else if (g->d.dst_dtype == DType::bf16)
            XK_CAPI_OK(xk_conv2d_bf16(&cd, u16(a.src), u16(a.weights), bias, u16(a.dst), u16(a.residual)));
        else
            XK_CAPI_OK(xk_conv2d_bf16_f32(&cd, u16(a.src), u16(a.weights), bias, static_cast<float*>(a.dst),
                                          static_cast<const float*>(a.residual)));
    });
    c.bad.push_back([g, plan](Out out) {
        ConvArgs a = g->args(out);
        a.src = nullptr;
        return must_throw([&] { plan->run(a); }, "src=null");
    });
    c.bad.push_back([g](Out out) {
        ConvDesc bd = g->d;
        bd.stride_w = 0;
        return must_throw([&] { conv2d(bd, g->args(out)); }, "stride_w=0");
    });
    c.bad.push_back([g](Out out) {
        xk_conv2d_desc cd = to_c(g->d);
        cd.stride_h = 0;
        const ConvArgs a = g->args(out);
        const auto* bias = static_cast<const float*>(a.bias);
        xk_status st;
        if (g->d.src_dtype == DType::f32)
            st = xk_conv2d_f32(&cd, static_cast<const float*>(a.src), static_cast<const float*>(a.weights), bias,
                               static_cast<float*>(a.dst), static_cast<const float*>(a.residual));
        else if (g->d.dst_dtype == DType::bf16)
            st = xk_conv2d_bf16(&cd, u16(a.src), u16(a.weights), bias, u16(a.dst), u16(a.residual));
        else
            st = xk_conv2d_bf16_f32(&cd, u16(a.src), u16(a.weights), bias, static_cast<float*>(a.dst),
                                    static_cast<const float*>(a.residual));
        return must_fail(st, "stride_h=0");
    });
    cases.push_back(std::move(c));
}

void add_conv_cases(std::vector<Case>& cases) {
    {  // f32 NCHW / OIHW, 3x3 pad 1, bias + relu; 4 (n, oc-block) items: two threads.
        ConvDesc d;
        d.n = 2, d.c = 4, d.h = 8, d.w = 9, d.oc = 17, d.kh = 3, d.kw = 3;
        d.set_padding(1, 1);
        d.with_bias = true, d.activation = Activation::relu;
        add_conv(cases, "f32 nchw 2x4x8x9 oc17 3x3 bias relu", d, false, 1000);
    }
    {  // bf16 -> bf16 NHWC / OHWI, stride 2, asymmetric padding, bias + residual before gelu_tanh.
        ConvDesc d;
        d.n = 1, d.c = 8, d.h = 17, d.w = 7, d.oc = 7, d.kh = 3, d.kw = 1;
        d.set_stride(2, 1).set_padding(1, 0, 0, 0);
        d.layout = ConvLayout::nhwc, d.weight_layout = ConvWeightLayout::ohwi;
        d.src_dtype = d.weight_dtype = d.dst_dtype = DType::bf16;
        d.with_bias = true, d.residual = ConvResidual::add_before_activation, d.activation = Activation::gelu_tanh;
        add_conv(cases, "bf16 nhwc 1x8x17x7 oc7 3x1 s2 bias res-before gelu_tanh", d, false, 1100);
    }
    {  // bf16 -> f32 depthwise, dilation 2, in-place residual after silu.
        ConvDesc d;
        d.n = 2, d.c = 6, d.h = 9, d.w = 9, d.oc = 6, d.kh = 3, d.kw = 3, d.groups = 6;
        d.set_padding(2, 2).set_dilation(2, 2);
        d.src_dtype = d.weight_dtype = DType::bf16, d.dst_dtype = DType::f32;
        d.residual = ConvResidual::add_after_activation, d.activation = Activation::silu;
        add_conv(cases, "bf16->f32 depthwise 2x6x9x9 3x3 d2 in-place res-after silu", d, true, 1200);
    }
    {  // f32 1x1, 1x1 image (the smallest), NCHW activations with OHWI weights.
        ConvDesc d;
        d.n = 1, d.c = 7, d.h = 1, d.w = 1, d.oc = 1, d.kh = 1, d.kw = 1;
        d.weight_layout = ConvWeightLayout::ohwi;
        add_conv(cases, "f32 1x7x1x1 oc1 1x1", d, false, 1300);
    }
}

// ---- embedding_bag ------------------------------------------------------------------------------

struct EmbData {
    EmbeddingBagDesc d;
    int64_t num_bags = 0, num_indices = 0;
    Bytes table, indices, offsets, bad_offsets;
    std::vector<float> psw;
    EmbeddingBagArgs args(Out out, bool bad = false) const {
        EmbeddingBagArgs a;
        a.num_bags = num_bags;
        a.num_indices = num_indices;
        a.table = table.data();
        a.indices = indices.data();
        a.offsets = bad ? bad_offsets.data() : offsets.data();
        a.per_sample_weights = d.per_sample_weights ? psw.data() : nullptr;
        a.out = out;
        return a;
    }
};

xk_embedding_bag_desc to_c(const EmbeddingBagDesc& d) {
    xk_embedding_bag_desc c;
    xk_embedding_bag_desc_init(&c, d.num_embeddings, d.dim);
    c.ld_table = d.ld_table, c.ld_out = d.ld_out;
    c.mode = static_cast<xk_embedding_bag_mode>(d.mode);
    c.include_last_offset = d.include_last_offset ? 1 : 0;
    c.padding_idx = d.padding_idx;
    return c;
}

xk_status emb_capi(const EmbData& g, const xk_embedding_bag_desc& cd, int64_t num_bags, const void* offsets, Out out) {
    const float* psw = g.d.per_sample_weights ? g.psw.data() : nullptr;
    float* o = at<float>(out, 0);
    if (g.d.table_dtype == DType::bf16)
        return xk_embedding_bag_bf16_f32(&cd, u16(g.table.data()), g.num_indices,
                                         reinterpret_cast<const int64_t*>(g.indices.data()), num_bags,
                                         static_cast<const int64_t*>(offsets), psw, o);
    if (g.d.index_type == IndexType::i32)
        return xk_embedding_bag_f32_i32(&cd, reinterpret_cast<const float*>(g.table.data()), g.num_indices,
                                        reinterpret_cast<const int32_t*>(g.indices.data()), num_bags,
                                        static_cast<const int32_t*>(offsets), psw, o);
    return xk_embedding_bag_f32(&cd, reinterpret_cast<const float*>(g.table.data()), g.num_indices,
                                reinterpret_cast<const int64_t*>(g.indices.data()), num_bags,
                                static_cast<const int64_t*>(offsets), psw, o);
}

void add_embedding_bag(std::vector<Case>& cases, const std::string& name, const EmbeddingBagDesc& d, int64_t num_bags,
                       uint64_t seed) {
    auto g = std::make_shared<EmbData>();
    g->d = d;
    g->num_bags = num_bags;
    const int64_t ldt = d.ld_table ? d.ld_table : d.dim, ldo = d.ld_out ? d.ld_out : d.dim;
    g->table = random_bytes(d.table_dtype, d.num_embeddings * ldt, seed);
    // Bags of 0..5 entries (bag 1 empty), indices uniform over the table, some padding_idx.
    std::mt19937_64 rng(seed + 1);
    std::vector<int64_t> offs{0}, idx;
    for (int64_t b = 0; b < num_bags; ++b) {
        const int64_t len = b == 1 ? 0 : static_cast<int64_t>(rng() % 6);
        for (int64_t j = 0; j < len; ++j) {
            int64_t v = static_cast<int64_t>(rng() % static_cast<uint64_t>(d.num_embeddings));
            if (d.padding_idx >= 0 && rng() % 4 == 0) v = d.padding_idx;
            idx.push_back(v);
        }
        offs.push_back(static_cast<int64_t>(idx.size()));
    }
    if (!d.include_last_offset) offs.pop_back();
    g->num_indices = static_cast<int64_t>(idx.size());
    std::vector<int64_t> bad = offs;
    bad[1] = g->num_indices + 1;  // out of range (past num_indices)
    auto pack = [&](const std::vector<int64_t>& v) {
        Bytes b(v.size() * 8 + 8);
        for (size_t i = 0; i < v.size(); ++i) {
            if (d.index_type == IndexType::i32) {
                const int32_t x = static_cast<int32_t>(v[i]);
                std::memcpy(b.data() + 4 * i, &x, 4);
            } else {
                std::memcpy(b.data() + 8 * i, &v[i], 8);
            }
        }
        return b;
    };
    g->indices = pack(idx);
    g->offsets = pack(offs);
    g->bad_offsets = pack(bad);
    g->psw = random_vec<float>(idx.size() + 1, -1.0, 1.0, seed + 2);

    Case c(kEmbeddingBag, name, static_cast<size_t>(num_bags * ldo) * dtype_size(d.out_dtype));
    auto plan = std::make_shared<const EmbeddingBagPlan>(d);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "EmbeddingBagPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local EmbeddingBagPlan::run", [g](Out out) { EmbeddingBagPlan(g->d).run(g->args(out)); });
    c.add(kOneShot, false, "xk::embedding_bag", [g](Out out) { embedding_bag(g->d, g->args(out)); });
    const bool capi = d.out_dtype == DType::f32 && (d.table_dtype == DType::f32 || d.index_type == IndexType::i64);
    if (capi)
        c.add(kOneShot, true, "xk_embedding_bag_*", [g](Out out) {
            XK_CAPI_OK(emb_capi(*g, to_c(g->d), g->num_bags, g->offsets.data(), out));
        });
    c.bad.push_back([g, plan](Out out) {
        return must_throw([&] { plan->run(g->args(out, true)); }, "offsets");
    });
    c.bad.push_back([g](Out out) {
        EmbeddingBagArgs a = g->args(out);
        a.num_bags = -3;
        return must_throw([&] { embedding_bag(g->d, a); }, "num_bags=-3");
    });
    if (capi)
        c.bad.push_back([g](Out out) { return must_fail(emb_capi(*g, to_c(g->d), g->num_bags, g->bad_offsets.data(), out), "offsets"); });
    cases.push_back(std::move(c));
}

void add_embedding_bag_cases(std::vector<Case>& cases) {
    EmbeddingBagDesc d;
    d.num_embeddings = 65, d.dim = 17;
    d.per_sample_weights = true;
    add_embedding_bag(cases, "sum f32 i64 65x17 per-sample weights, 7 bags", d, 7, 2000);
    d = EmbeddingBagDesc();
    d.num_embeddings = 33, d.dim = 7, d.mode = EmbeddingBagMode::mean, d.padding_idx = 5;
    d.index_type = IndexType::i32, d.include_last_offset = true, d.ld_table = 9;
    add_embedding_bag(cases, "mean f32 i32 33x7 padding_idx include_last_offset ld_table", d, 17, 2100);
    d = EmbeddingBagDesc();
    d.num_embeddings = 100, d.dim = 257, d.mode = EmbeddingBagMode::max, d.table_dtype = DType::bf16;
    add_embedding_bag(cases, "max bf16->f32 i64 100x257, 65 bags", d, 65, 2200);
    d = EmbeddingBagDesc();
    d.num_embeddings = 1, d.dim = 33, d.table_dtype = DType::bf16, d.out_dtype = DType::bf16, d.ld_out = 40;
    add_embedding_bag(cases, "sum bf16->bf16 1x33 ld_out", d, 3, 2300);
}

// Backward of sum / mean bags fused with an SGD / Adagrad step, in place: the output buffer holds
// the table (and the Adagrad state); init = their random starting values, so every call takes the
// same step. xk::embedding_bag_backward_update and xk_embedding_bag_backward_update_f32 /
// _f32_i32 / _f32_gbf16 (whichever the index and gradient types allow). Shapes from the seed.
void add_embedding_backward(std::vector<Case>& cases, std::mt19937_64& rng) {
    struct Data {
        EmbeddingBagDesc d;
        EmbeddingBagUpdate u;  // state: set per call (it lives in the output buffer)
        int64_t num_bags = 0, num_indices = 0;
        Bytes indices, bad_indices, offsets, grad;
        std::vector<float> psw;
        size_t off_state = 0;
        EmbeddingBagArgs args(Out out, bool bad = false) const {
            EmbeddingBagArgs a;
            a.num_bags = num_bags, a.num_indices = num_indices;
            a.table = out;
            a.indices = bad ? bad_indices.data() : indices.data();
            a.offsets = offsets.data();
            a.per_sample_weights = d.per_sample_weights ? psw.data() : nullptr;
            return a;
        }
        EmbeddingBagUpdate update(Out out, float lr) const {
            EmbeddingBagUpdate x = u;
            x.lr = lr;
            x.state = u.optimizer == EmbeddingOptimizer::adagrad ? at<float>(out, off_state) : nullptr;
            return x;
        }
        bool has_capi() const { return d.index_type == IndexType::i64 || d.out_dtype == DType::f32; }
        xk_status capi(Out out, float lr, bool bad = false) const {
            const xk_embedding_bag_desc cd = to_c(d);
            const EmbeddingBagArgs a = args(out, bad);
            const EmbeddingBagUpdate x = update(out, lr);
            xk_embedding_update cu;
            xk_embedding_update_init(&cu);
            cu.optimizer = static_cast<xk_embedding_optimizer>(static_cast<int>(x.optimizer));
            cu.lr = x.lr, cu.eps = x.eps, cu.state = x.state, cu.ld_state = x.ld_state;
            float* table = at<float>(out, 0);
            if (d.out_dtype == DType::bf16)
                return xk_embedding_bag_backward_update_f32_gbf16(&cd, table, num_indices, static_cast<const int64_t*>(a.indices),
                                                                  num_bags, static_cast<const int64_t*>(a.offsets),
                                                                  a.per_sample_weights, u16(grad.data()), &cu);
            const auto* gr = reinterpret_cast<const float*>(grad.data());
            if (d.index_type == IndexType::i32)
                return xk_embedding_bag_backward_update_f32_i32(&cd, table, num_indices, static_cast<const int32_t*>(a.indices),
                                                                num_bags, static_cast<const int32_t*>(a.offsets),
                                                                a.per_sample_weights, gr, &cu);
            return xk_embedding_bag_backward_update_f32(&cd, table, num_indices, static_cast<const int64_t*>(a.indices),
                                                        num_bags, static_cast<const int64_t*>(a.offsets),
                                                        a.per_sample_weights, gr, &cu);
        }
    };
    auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
    for (int i = 0; i < 3; ++i) {
        auto g = std::make_shared<Data>();
        EmbeddingBagDesc& d = g->d;
        d.num_embeddings = pick(1, 200), d.dim = pick(1, 80);
        d.ld_table = pick(0, 1) ? d.dim + pick(1, 9) : 0;
        d.ld_out = pick(0, 1) ? d.dim + pick(1, 5) : 0;
        d.mode = pick(0, 1) ? EmbeddingBagMode::mean : EmbeddingBagMode::sum;
        // The three C entries in turn: int64 indices / f32 grad_out, int32 / f32, int64 / bf16.
        d.index_type = i == 1 ? IndexType::i32 : IndexType::i64;
        d.out_dtype = i == 2 ? DType::bf16 : DType::f32;  // grad_out's type
        d.per_sample_weights = d.mode == EmbeddingBagMode::sum && pick(0, 1);
        d.padding_idx = pick(0, 1) ? pick(0, d.num_embeddings - 1) : -1;
        d.include_last_offset = pick(0, 1) == 1;
        g->u.optimizer = i != 1 ? EmbeddingOptimizer::adagrad : EmbeddingOptimizer::sgd;
        g->u.lr = 0.05f, g->u.eps = 1e-8f;
        g->u.ld_state = g->u.optimizer == EmbeddingOptimizer::adagrad && pick(0, 1) ? d.dim + 3 : 0;
        g->num_bags = pick(1, 40);
        // Bags of 0..8 entries over a few hot rows and the rest (duplicates within and across bags).
        std::vector<int64_t> offs{0}, idx;
        for (int64_t b = 0; b < g->num_bags; ++b) {
            for (int64_t j = pick(0, 8); j > 0; --j)
                idx.push_back(pick(0, 1) ? pick(0, std::min<int64_t>(3, d.num_embeddings - 1)) : pick(0, d.num_embeddings - 1));
            offs.push_back(static_cast<int64_t>(idx.size()));
        }
        if (!d.include_last_offset) offs.pop_back();
        if (idx.empty()) idx.push_back(0), offs.back() = d.include_last_offset ? 1 : offs.back();
        g->num_indices = static_cast<int64_t>(idx.size());
        std::vector<int64_t> bad = idx;
        bad[bad.size() - 1] = d.num_embeddings;  // one past the table
        auto pack = [&](const std::vector<int64_t>& v) {
            Bytes b(v.size() * 8 + 8);
            for (size_t k = 0; k < v.size(); ++k) {
                if (d.index_type == IndexType::i32) {
                    const int32_t x = static_cast<int32_t>(v[k]);
                    std::memcpy(b.data() + 4 * k, &x, 4);
                } else {
                    std::memcpy(b.data() + 8 * k, &v[k], 8);
                }
            }
            return b;
        };
        g->indices = pack(idx), g->bad_indices = pack(bad), g->offsets = pack(offs);
        const int64_t ldo = d.ld_out ? d.ld_out : d.dim, ldt = d.ld_table ? d.ld_table : d.dim;
        g->grad = random_bytes(d.out_dtype, static_cast<size_t>(g->num_bags * ldo), rng());
        g->psw = random_vec<float>(idx.size(), -1.0, 1.0, rng());
        const size_t table_bytes = static_cast<size_t>(d.num_embeddings * ldt) * 4;
        const int64_t lds = g->u.ld_state ? g->u.ld_state : d.dim;
        const size_t state_bytes = static_cast<size_t>(d.num_embeddings * lds) * 4;
        const bool adagrad = g->u.optimizer == EmbeddingOptimizer::adagrad;
        Layout l;
        l.add(table_bytes);
        if (adagrad) g->off_state = l.add(state_bytes);
        char name[200];
        std::snprintf(name, sizeof name, "random backward %s %s %s grad %s %lldx%lld ld %lld/%lld %lld bags %lld entries%s%s%s",
                      adagrad ? "adagrad" : "sgd", d.mode == EmbeddingBagMode::mean ? "mean" : "sum",
                      d.index_type == IndexType::i32 ? "i32" : "i64", dtype_name(d.out_dtype),
                      static_cast<long long>(d.num_embeddings), static_cast<long long>(d.dim),
                      static_cast<long long>(d.ld_table), static_cast<long long>(d.ld_out),
                      static_cast<long long>(g->num_bags), static_cast<long long>(g->num_indices),
                      d.per_sample_weights ? " psw" : "", d.padding_idx >= 0 ? " padding_idx" : "",
                      d.include_last_offset ? " include_last_offset" : "");
        Case c(kEmbeddingBag, name, l.bytes);
        const std::vector<float> t0 = random_vec<float>(table_bytes / 4, -1.0, 1.0, rng());
        std::memcpy(c.init.data(), t0.data(), table_bytes);
        if (adagrad) {
            const std::vector<float> s0 = random_vec<float>(state_bytes / 4, 0.0, 0.5, rng());
            std::memcpy(c.init.data() + g->off_state, s0.data(), state_bytes);
        }
        c.impl = "xk::embedding_bag_backward_update";
        c.add(kOneShot, false, "xk::embedding_bag_backward_update", [g](Out out) {
            embedding_bag_backward_update(g->d, g->args(out), g->grad.data(), g->update(out, g->u.lr));
        });
        if (g->has_capi())
            c.add(kOneShot, true, "xk_embedding_bag_backward_update_*", [g](Out out) { XK_CAPI_OK(g->capi(out, g->u.lr)); });
        c.bad.push_back([g](Out out) {  // the last index past the table: no row may be updated
            return must_throw([&] { embedding_bag_backward_update(g->d, g->args(out, true), g->grad.data(), g->update(out, g->u.lr)); },
                              ("indices[" + std::to_string(g->num_indices - 1) + "]=").c_str());
        });
        if (g->has_capi()) {
            c.bad.push_back([g](Out out) {
                return must_fail(g->capi(out, g->u.lr, true), ("indices[" + std::to_string(g->num_indices - 1) + "]=").c_str());
            });
            c.bad.push_back([g](Out out) { return must_fail(g->capi(out, -0.5f), "update.lr=-0.5"); });
        }
        cases.push_back(std::move(c));
    }
}

// ---- norm ---------------------------------------------------------------------------------------

struct NormData {
    NormDesc d;
    Bytes x, weight, bias;
    bool in_place = false;  // x and y are the output buffer (y == x), as vLLM's fused_add_rms_norm
    size_t off_res = 0;     // residual (in and out, in place) in the output buffer
    NormArgs args(Out out) const {
        NormArgs a;
        a.x = in_place ? static_cast<const void*>(out) : x.data();
        a.y = out;
        a.weight = d.has_weight ? weight.data() : nullptr;
        a.bias = d.has_bias ? bias.data() : nullptr;
        if (d.fused_residual) a.residual = a.residual_out = out + off_res;
        return a;
    }
};

xk_status norm_capi(const NormData& g, const NormDesc& d, Out out) {
    const NormArgs a = g.args(out);
    const bool rms = d.kind == NormKind::rms_norm;
    if (d.x_dtype == DType::f32) {
        const auto* x = static_cast<const float*>(a.x);
        const auto* w = static_cast<const float*>(a.weight);
        const auto* b = static_cast<const float*>(a.bias);
        auto* y = static_cast<float*>(a.y);
        auto* r = static_cast<float*>(a.residual_out);
        if (!d.fused_residual)
            return rms ? xk_rms_norm_f32(d.rows, d.hidden, x, d.ld_x, w, d.eps, y, d.ld_y)
                       : xk_layer_norm_f32(d.rows, d.hidden, x, d.ld_x, w, b, d.eps, y, d.ld_y);
        return rms ? xk_fused_add_rms_norm_f32(d.rows, d.hidden, x, d.ld_x, r, d.ld_residual, w, d.eps, y, d.ld_y)
                   : xk_fused_add_layer_norm_f32(d.rows, d.hidden, x, d.ld_x, r, d.ld_residual, w, b, d.eps, y, d.ld_y);
    }
    const uint16_t* x = u16(a.x);
    const uint16_t* w = u16(a.weight);
    const uint16_t* b = u16(a.bias);
    uint16_t* y = u16(a.y);
    uint16_t* r = u16(a.residual_out);
    if (!d.fused_residual)
        return rms ? xk_rms_norm_bf16(d.rows, d.hidden, x, d.ld_x, w, d.eps, y, d.ld_y)
                   : xk_layer_norm_bf16(d.rows, d.hidden, x, d.ld_x, w, b, d.eps, y, d.ld_y);
    return rms ? xk_fused_add_rms_norm_bf16(d.rows, d.hidden, x, d.ld_x, r, d.ld_residual, w, d.eps, y, d.ld_y)
               : xk_fused_add_layer_norm_bf16(d.rows, d.hidden, x, d.ld_x, r, d.ld_residual, w, b, d.eps, y, d.ld_y);
}

// in_place: x is y (the output buffer holds x on entry; ld_x == ld_y, same dtype).
void add_norm(std::vector<Case>& cases, const std::string& name, const NormDesc& d, bool in_place, uint64_t seed) {
    auto g = std::make_shared<NormData>();
    g->d = d;
    g->in_place = in_place;
    const int64_t ldx = d.ld_x ? d.ld_x : d.hidden, ldy = d.ld_y ? d.ld_y : d.hidden;
    const int64_t ldr = d.ld_residual ? d.ld_residual : d.hidden;
    g->x = random_bytes(d.x_dtype, d.rows * ldx, seed);
    g->weight = random_bytes(d.weight_dtype, d.hidden, seed + 1);
    g->bias = random_bytes(d.weight_dtype, d.hidden, seed + 2);
    Layout l;
    const size_t y_bytes = static_cast<size_t>(d.rows * ldy) * dtype_size(d.y_dtype);
    l.add(y_bytes);
    const size_t r_bytes = d.fused_residual ? static_cast<size_t>(d.rows * ldr) * dtype_size(d.residual_dtype) : 0;
    if (d.fused_residual) g->off_res = l.add(r_bytes);
    Case c(kNorm, name, l.bytes);
    if (in_place) std::memcpy(c.init.data(), g->x.data(), y_bytes);
    if (d.fused_residual) {
        const Bytes r = random_bytes(d.residual_dtype, d.rows * ldr, seed + 3);
        std::memcpy(c.init.data() + g->off_res, r.data(), r_bytes);
    }

    auto plan = std::make_shared<const NormPlan>(d);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "NormPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local NormPlan::run", [g](Out out) { NormPlan(g->d).run(g->args(out)); });
    c.add(kOneShot, false, "xk::norm", [g](Out out) { norm(g->d, g->args(out)); });
    const bool same = d.x_dtype == d.y_dtype && d.x_dtype == d.weight_dtype &&
                      (!d.fused_residual || (d.residual_dtype == d.x_dtype && d.ld_residual == d.ld_residual_out));
    const bool packed = (d.ld_x == 0 || d.ld_x == d.hidden) && (d.ld_y == 0 || d.ld_y == d.hidden) &&
                        (d.ld_residual == 0 || d.ld_residual == d.hidden);
    // C API: one dtype for everything; weight / bias present or null as in the descriptor.
    if (same && (d.has_bias == false || d.kind == NormKind::layer_norm))
        c.add(kOneShot, true, "xk_*_norm_*", [g](Out out) { XK_CAPI_OK(norm_capi(*g, g->d, out)); });
    // The C++ convenience forms (packed rows, one dtype, weight and bias given).
    if (same && packed && d.has_weight) {
        const bool f32 = d.x_dtype == DType::f32;
        if (!d.fused_residual && d.kind == NormKind::rms_norm && !d.has_bias)
            c.add(kOneShot, false, "xk::rms_norm", [g, f32](Out out) {
                const NormArgs a = g->args(out);
                if (f32)
                    rms_norm(g->d.rows, g->d.hidden, static_cast<const float*>(a.x), static_cast<const float*>(a.weight),
                             g->d.eps, static_cast<float*>(a.y));
                else
                    rms_norm(g->d.rows, g->d.hidden, static_cast<const bf16*>(a.x), static_cast<const bf16*>(a.weight),
                             g->d.eps, static_cast<bf16*>(a.y));
            });
        if (!d.fused_residual && d.kind == NormKind::layer_norm && d.has_bias)
            c.add(kOneShot, false, "xk::layer_norm", [g, f32](Out out) {
                const NormArgs a = g->args(out);
                if (f32)
                    layer_norm(g->d.rows, g->d.hidden, static_cast<const float*>(a.x), static_cast<const float*>(a.weight),
                               static_cast<const float*>(a.bias), g->d.eps, static_cast<float*>(a.y));
                else
                    layer_norm(g->d.rows, g->d.hidden, static_cast<const bf16*>(a.x), static_cast<const bf16*>(a.weight),
                               static_cast<const bf16*>(a.bias), g->d.eps, static_cast<bf16*>(a.y));
            });
        if (d.fused_residual && in_place && d.kind == NormKind::rms_norm && !d.has_bias)
            c.add(kOneShot, false, "xk::fused_add_rms_norm", [g, f32](Out out) {
                const NormArgs a = g->args(out);
                if (f32)
                    fused_add_rms_norm(g->d.rows, g->d.hidden, static_cast<float*>(a.y), static_cast<float*>(a.residual_out),
                                       static_cast<const float*>(a.weight), g->d.eps);
                else
                    fused_add_rms_norm(g->d.rows, g->d.hidden, static_cast<bf16*>(a.y), static_cast<bf16*>(a.residual_out),
                                       static_cast<const bf16*>(a.weight), g->d.eps);
            });
    }
    c.bad.push_back([g](Out out) {
        NormDesc bd = g->d;
        bd.eps = -1.0f;
        return must_throw([&] { norm(bd, g->args(out)); }, "eps=");
    });
    c.bad.push_back([g, plan](Out out) {
        NormArgs a = g->args(out);
        a.weight = nullptr;
        if (!g->d.has_weight) a.x = nullptr;
        return must_throw([&] { plan->run(a); }, g->d.has_weight ? "weight=null" : "x=null");
    });
    if (same)
        c.bad.push_back([g](Out out) {
            NormDesc bd = g->d;
            bd.hidden = 0;
            return must_fail(norm_capi(*g, bd, out), "hidden=0");
        });
    cases.push_back(std::move(c));
}

void add_norm_cases(std::vector<Case>& cases) {
    NormDesc d;
    d.rows = 7, d.hidden = 33;
    add_norm(cases, "rms f32 7x33", d, false, 3000);
    d = NormDesc();
    d.kind = NormKind::layer_norm, d.rows = 17, d.hidden = 65, d.ld_x = 70, d.has_bias = true;
    d.x_dtype = d.y_dtype = d.weight_dtype = d.residual_dtype = DType::bf16;
    add_norm(cases, "layer bf16 17x65 ld_x=70 bias", d, false, 3100);
    d = NormDesc();
    d.kind = NormKind::layer_norm, d.rows = 1, d.hidden = 17, d.has_bias = true;
    add_norm(cases, "layer f32 1x17 bias", d, false, 3150);
    d = NormDesc();
    d.rows = 5, d.hidden = 129, d.fused_residual = true, d.eps = 1e-6f;
    d.x_dtype = d.y_dtype = d.weight_dtype = d.residual_dtype = DType::bf16;
    add_norm(cases, "fused add rms bf16 5x129 in place (vLLM)", d, true, 3200);
    d = NormDesc();
    d.kind = NormKind::layer_norm, d.rows = 65, d.hidden = 513, d.fused_residual = true, d.has_bias = true;
    d.ld_y = 520;
    add_norm(cases, "fused add layer f32 65x513 ld_y=520 (two threads)", d, false, 3300);
    d = NormDesc();
    d.rows = 33, d.hidden = 7, d.x_dtype = DType::bf16, d.y_dtype = DType::f32, d.weight_dtype = DType::f32;
    d.fused_residual = true, d.residual_dtype = DType::f32, d.has_bias = true;
    add_norm(cases, "fused add rms bf16->f32 33x7 f32 residual bias", d, false, 3400);
    d = NormDesc();
    d.rows = 17, d.hidden = 65, d.has_weight = false;
    add_norm(cases, "rms f32 17x65 no weight", d, false, 3500);
}

// ---- rope ---------------------------------------------------------------------------------------

struct RopeData {
    RopeDesc d;  // strides resolved
    Bytes positions, bad_positions, cache;
    size_t off_k = 0;
    RopeArgs args(Out out, bool bad = false) const {
        RopeArgs a;
        a.q = d.q_heads > 0 ? out : nullptr;
        a.k = d.k_heads > 0 ? out + off_k : nullptr;
        a.positions = bad ? bad_positions.data() : positions.data();
        a.cos_sin_cache = d.cos_sin == RopeCosSin::cache ? cache.data() : nullptr;
        return a;
    }
};

xk_status rope_capi(const RopeData& g, const RopeArgs& a, int64_t tokens) {
    const RopeDesc& d = g.d;
    const auto* pos = static_cast<const int64_t*>(a.positions);
    const auto* cache = static_cast<const float*>(a.cos_sin_cache);
    const auto st = static_cast<xk_rope_style>(d.style);
    if (d.dtype == DType::f32) {
        auto* q = static_cast<float*>(a.q);
        auto* k = static_cast<float*>(a.k);
        if (d.cos_sin == RopeCosSin::cache)
            return xk_rope_f32(st, tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, q, d.q_token_stride,
                               d.q_head_stride, k, d.k_token_stride, d.k_head_stride, pos, cache, d.max_position);
        return xk_rope_theta_f32(st, tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, q, d.q_token_stride,
                                 d.q_head_stride, k, d.k_token_stride, d.k_head_stride, pos, d.base, d.scaling_factor);
    }
    uint16_t* q = u16(a.q);
    uint16_t* k = u16(a.k);
    if (d.cos_sin == RopeCosSin::cache)
        return xk_rope_bf16(st, tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, q, d.q_token_stride,
                            d.q_head_stride, k, d.k_token_stride, d.k_head_stride, pos, cache, d.max_position);
    return xk_rope_theta_bf16(st, tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, q, d.q_token_stride,
                              d.q_head_stride, k, d.k_token_stride, d.k_head_stride, pos, d.base, d.scaling_factor);
}

void add_rope(std::vector<Case>& cases, const std::string& name, const RopeDesc& desc, uint64_t seed) {
    auto g = std::make_shared<RopeData>();
    auto plan = std::make_shared<const RopePlan>(desc);
    g->d = plan->desc();  // strides and rotary_dim resolved
    const RopeDesc& d = g->d;
    auto extent = [&](int64_t heads, int64_t ts, int64_t hs) -> int64_t {
        return d.tokens > 0 && heads > 0 ? (d.tokens - 1) * ts + (heads - 1) * hs + d.head_dim : 0;
    };
    const int64_t qn = extent(d.q_heads, d.q_token_stride, d.q_head_stride);
    const int64_t kn = extent(d.k_heads, d.k_token_stride, d.k_head_stride);
    Layout l;
    l.add(static_cast<size_t>(qn) * dtype_size(d.dtype));
    g->off_k = l.add(static_cast<size_t>(kn) * dtype_size(d.dtype));
    Case c(kRope, name, l.bytes);
    const Bytes q0 = random_bytes(d.dtype, qn, seed), k0 = random_bytes(d.dtype, kn, seed + 1);
    std::memcpy(c.init.data(), q0.data(), static_cast<size_t>(qn) * dtype_size(d.dtype));
    std::memcpy(c.init.data() + g->off_k, k0.data(), static_cast<size_t>(kn) * dtype_size(d.dtype));
    // Positions in [1, max_position) (compute: [1, 4096)); the bad copy has one out of range.
    std::mt19937_64 rng(seed + 2);
    const int64_t pmax = d.cos_sin == RopeCosSin::cache ? d.max_position : 4096;
    std::vector<int64_t> pos(static_cast<size_t>(d.tokens));
    for (auto& p : pos) p = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(pmax - 1));  // not 0: a rotation
    std::vector<int64_t> bad = pos;
    bad[bad.size() / 2] = d.cos_sin == RopeCosSin::cache ? d.max_position : -1;
    auto pack = [&](const std::vector<int64_t>& v) {
        Bytes b(v.size() * 8 + 8);
        for (size_t i = 0; i < v.size(); ++i) {
            if (d.position_type == RopePositionType::s32) {
                const int32_t x = static_cast<int32_t>(v[i]);
                std::memcpy(b.data() + 4 * i, &x, 4);
            } else {
                std::memcpy(b.data() + 8 * i, &v[i], 8);
            }
        }
        return b;
    };
    g->positions = pack(pos);
    g->bad_positions = pack(bad);
    if (d.cos_sin == RopeCosSin::cache) {
        // A real cos / sin table: row p = concat(cos(p * f_i), sin(p * f_i)).
        const int64_t r = d.rotary_dim, half = r / 2;
        std::vector<double> v(static_cast<size_t>(d.max_position * r));
        for (int64_t p = 0; p < d.max_position; ++p)
            for (int64_t i = 0; i < half; ++i) {
                const double th = static_cast<double>(p) * std::pow(10000.0, -2.0 * i / static_cast<double>(r));
                v[p * r + i] = std::cos(th);
                v[p * r + half + i] = std::sin(th);
            }
        g->cache.assign(v.size() * dtype_size(d.cache_dtype) + 16, 0);
        for (size_t i = 0; i < v.size(); ++i) {
            if (d.cache_dtype == DType::f32) {
                const float f = static_cast<float>(v[i]);
                std::memcpy(g->cache.data() + 4 * i, &f, 4);
            } else {
                const uint16_t b = bf16::from_float(static_cast<float>(v[i]));
                std::memcpy(g->cache.data() + 2 * i, &b, 2);
            }
        }
    }

    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "RopePlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local RopePlan::run", [g, desc](Out out) { RopePlan(desc).run(g->args(out)); });
    c.add(kOneShot, false, "xk::rope(desc)", [g, desc](Out out) { rope(desc, g->args(out)); });
    const bool packed = desc.q_token_stride == 0 && desc.q_head_stride == 0 && desc.k_token_stride == 0 &&
                        desc.k_head_stride == 0;
    const bool i64 = d.position_type == RopePositionType::s64;
    if (packed && i64 && d.cos_sin == RopeCosSin::cache && (d.dtype == DType::bf16 || d.cache_dtype == DType::f32))
        c.add(kOneShot, false, "xk::rope(vLLM form)", [g](Out out) {
            const RopeDesc& d = g->d;
            const RopeArgs a = g->args(out);
            const auto* pos = static_cast<const int64_t*>(a.positions);
            if (d.dtype == DType::f32)
                rope(d.style, d.tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, static_cast<float*>(a.q),
                     static_cast<float*>(a.k), pos, static_cast<const float*>(a.cos_sin_cache), d.max_position);
            else if (d.cache_dtype == DType::f32)
                rope(d.style, d.tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, static_cast<bf16*>(a.q),
                     static_cast<bf16*>(a.k), pos, static_cast<const float*>(a.cos_sin_cache), d.max_position);
            else
                rope(d.style, d.tokens, d.q_heads, d.k_heads, d.head_dim, d.rotary_dim, static_cast<bf16*>(a.q),
                     static_cast<bf16*>(a.k), pos, static_cast<const bf16*>(a.cos_sin_cache), d.max_position);
        });
    const bool capi = i64 && (d.cos_sin == RopeCosSin::compute || d.cache_dtype == DType::f32);
    if (capi)
        c.add(kOneShot, true, "xk_rope_*", [g](Out out) { XK_CAPI_OK(rope_capi(*g, g->args(out), g->d.tokens)); });
    // Positions are all checked before q or k is touched.
    c.bad.push_back([g, plan](Out out) { return must_throw([&] { plan->run(g->args(out, true)); }, "position"); });
    c.bad.push_back([g, desc](Out out) {
        RopeDesc bd = desc;
        bd.rotary_dim = desc.head_dim + 2;
        return must_throw([&] { rope(bd, g->args(out)); }, "rotary_dim=");
    });
    if (capi) c.bad.push_back([g](Out out) { return must_fail(rope_capi(*g, g->args(out, true), g->d.tokens), "position"); });
    cases.push_back(std::move(c));
}

void add_rope_cases(std::vector<Case>& cases) {
    RopeDesc d;
    d.tokens = 7, d.q_heads = 4, d.k_heads = 2, d.head_dim = 34, d.max_position = 64;
    add_rope(cases, "f32 neox 7 tok 4/2 heads hd34 f32 cache", d, 4000);
    d = RopeDesc();
    d.style = RopeStyle::gptj, d.dtype = DType::bf16;
    d.tokens = 17, d.q_heads = 3, d.k_heads = 1, d.head_dim = 66, d.rotary_dim = 32, d.max_position = 33;
    d.q_token_stride = 66, d.q_head_stride = 17 * 66;  // q head-major
    add_rope(cases, "bf16 gptj 17 tok 3/1 heads hd66 rot32 head-major q", d, 4100);
    d = RopeDesc();
    d.dtype = DType::bf16, d.cache_dtype = DType::bf16;
    d.tokens = 33, d.q_heads = 2, d.k_heads = 2, d.head_dim = 18, d.max_position = 100;
    add_rope(cases, "bf16 neox 33 tok 2/2 hd18 bf16 cache", d, 4200);
    d = RopeDesc();
    d.style = RopeStyle::gptj, d.cos_sin = RopeCosSin::compute, d.scaling_factor = 2.0f;
    d.tokens = 65, d.q_heads = 8, d.k_heads = 2, d.head_dim = 66;
    add_rope(cases, "f32 gptj compute 65 tok 8/2 hd66 (two threads)", d, 4300);
    d = RopeDesc();
    d.position_type = RopePositionType::s32;
    d.tokens = 17, d.q_heads = 5, d.k_heads = 0, d.head_dim = 8, d.rotary_dim = 4, d.max_position = 17;
    add_rope(cases, "f32 neox i32 positions 17 tok q only hd8 rot4", d, 4400);
    d = RopeDesc();
    d.style = RopeStyle::gptj, d.dtype = DType::bf16, d.cos_sin = RopeCosSin::compute;
    d.tokens = 1, d.q_heads = 1, d.k_heads = 1, d.head_dim = 2;
    add_rope(cases, "bf16 gptj compute 1 tok hd2", d, 4500);
}

// ---- quant --------------------------------------------------------------------------------------

struct QuantData {
    QuantDesc d;  // strides resolved
    Bytes src;
    std::vector<float> scales, bad_scales, smooth;
    std::vector<int32_t> zps;
    size_t off_scales = 0, off_zps = 0;  // per_token_dynamic outputs in the output buffer
    QuantArgs args(Out out, bool bad = false) const {
        QuantArgs a;
        a.src = src.data();
        a.dst = out;
        if (d.granularity != QuantGranularity::per_token_dynamic) {
            a.scales = bad ? bad_scales.data() : scales.data();
            a.zero_points = d.symmetric ? nullptr : zps.data();
        } else {
            a.scales_out = at<float>(out, off_scales);
            a.zero_points_out = at<int32_t>(out, off_zps);
        }
        a.smooth = d.smooth ? smooth.data() : nullptr;
        return a;
    }
};

using QuantCApi = std::function<xk_status(const QuantData&, Out, int64_t rows)>;

void add_quant(std::vector<Case>& cases, const std::string& name, const QuantDesc& desc, uint64_t seed,
               std::function<void(const QuantData&, Out)> convenience, QuantCApi capi) {
    auto g = std::make_shared<QuantData>();
    auto plan = std::make_shared<const QuantPlan>(desc);
    g->d = plan->desc();
    const QuantDesc& d = g->d;
    const bool quantize = plan->is_quantize();
    g->src = random_bytes(d.src_dtype, d.rows * d.ld_src, seed);
    if (d.src_dtype == DType::f32)  // [-2, 2] with scales of 0.004..0.02: some values saturate
        for (int64_t i = 0; i < d.rows * d.ld_src; ++i) reinterpret_cast<float*>(g->src.data())[i] *= 2.0f;
    const int64_t nch = d.granularity == QuantGranularity::per_tensor ? 1 : (d.axis == 1 ? d.cols : d.rows);
    g->scales = random_vec<float>(static_cast<size_t>(nch), 0.004, 0.02, seed + 1);
    g->bad_scales = g->scales;
    g->bad_scales[g->bad_scales.size() / 2] = -0.5f;
    const bool u8 = (quantize ? d.dst_dtype : d.src_dtype) == DType::u8;
    g->zps = random_vec<int32_t>(static_cast<size_t>(nch), u8 ? 100.0 : -20.0, u8 ? 156.0 : 20.0, seed + 2);
    g->smooth = random_vec<float>(static_cast<size_t>(d.cols), 0.5, 2.0, seed + 3);
    Layout l;
    l.add(static_cast<size_t>(d.rows * d.ld_dst) * dtype_size(d.dst_dtype));
    if (d.granularity == QuantGranularity::per_token_dynamic) {
        g->off_scales = l.add(static_cast<size_t>(d.rows) * 4);
        g->off_zps = l.add(static_cast<size_t>(d.rows) * 4);
    }
    Case c(kQuant, name, l.bytes);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "QuantPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local QuantPlan::run", [g, desc](Out out) { QuantPlan(desc).run(g->args(out)); });
    if (quantize)
        c.add(kOneShot, false, "xk::quantize", [g, desc](Out out) { xk::quantize(desc, g->args(out)); });
    else
        c.add(kOneShot, false, "xk::dequantize", [g, desc](Out out) { xk::dequantize(desc, g->args(out)); });
    if (convenience) c.add(kOneShot, false, "xk convenience form", [g, convenience](Out out) { convenience(*g, out); });
    if (capi) c.add(kOneShot, true, "xk_*quantize*", [g, capi](Out out) { XK_CAPI_OK(capi(*g, out, g->d.rows)); });

    if (d.granularity != QuantGranularity::per_token_dynamic)
        c.bad.push_back([g, plan](Out out) { return must_throw([&] { plan->run(g->args(out, true)); }, "scale"); });
    c.bad.push_back([g, desc, quantize](Out out) {
        QuantDesc bd = desc;
        bd.ld_src = desc.cols - 1;
        return must_throw([&] { quantize ? xk::quantize(bd, g->args(out)) : xk::dequantize(bd, g->args(out)); }, "ld_src=");
    });
    if (capi) c.bad.push_back([g, capi](Out out) { return must_fail(capi(*g, out, -2), "=-2"); });  // rows (n) = -2
    cases.push_back(std::move(c));
}

void add_quant_cases(std::vector<Case>& cases) {
    QuantDesc d;
    d.rows = 7, d.cols = 65, d.src_dtype = DType::f32, d.dst_dtype = DType::u8;
    add_quant(cases, "per-tensor f32->u8 7x65", d, 5000,
              [](const QuantData& g, Out out) {
                  quantize_per_tensor(g.d.rows * g.d.cols, reinterpret_cast<const float*>(g.src.data()), g.scales[0],
                                      g.zps[0], at<uint8_t>(out, 0));
              },
              [](const QuantData& g, Out out, int64_t rows) {
                  // rows < 0 makes n negative (the failing call).
                  return xk_quantize_per_tensor_f32_u8(rows < 0 ? rows : rows * g.d.cols,
                                                       reinterpret_cast<const float*>(g.src.data()), g.scales[0],
                                                       g.zps[0], at<uint8_t>(out, 0));
              });
    d = QuantDesc();
    d.rows = 17, d.cols = 33, d.ld_src = 40, d.ld_dst = 35, d.src_dtype = DType::f32, d.dst_dtype = DType::s8;
    d.granularity = QuantGranularity::per_channel, d.axis = 1;
    add_quant(cases, "per-channel(axis 1) f32->s8 17x33 strided", d, 5100, nullptr,
              [](const QuantData& g, Out out, int64_t rows) {
                  return xk_quantize_per_channel_f32_s8(rows, g.d.cols, reinterpret_cast<const float*>(g.src.data()),
                                                        g.d.ld_src, g.scales.data(), g.zps.data(), 1,
                                                        at<int8_t>(out, 0), g.d.ld_dst);
              });
    d = QuantDesc();
    d.rows = 33, d.cols = 17, d.src_dtype = DType::s8, d.dst_dtype = DType::f32;
    d.granularity = QuantGranularity::per_channel, d.axis = 0;
    add_quant(cases, "dequant per-channel(axis 0) s8->f32 33x17", d, 5200, nullptr,
              [](const QuantData& g, Out out, int64_t rows) {
                  return xk_dequantize_per_channel_s8_f32(rows, g.d.cols, reinterpret_cast<const int8_t*>(g.src.data()),
                                                          g.d.ld_src, g.scales.data(), g.zps.data(), 0,
                                                          at<float>(out, 0), g.d.ld_dst);
              });
    d = QuantDesc();
    d.rows = 65, d.cols = 257, d.src_dtype = DType::f32, d.dst_dtype = DType::u8;
    d.granularity = QuantGranularity::per_token_dynamic;
    add_quant(cases, "dynamic per-token f32->u8 65x257", d, 5300,
              [](const QuantData& g, Out out) {
                  quantize_dynamic_per_token(g.d.rows, g.d.cols, reinterpret_cast<const float*>(g.src.data()),
                                             at<uint8_t>(out, 0), at<float>(out, g.off_scales),
                                             at<int32_t>(out, g.off_zps), false);
              },
              [](const QuantData& g, Out out, int64_t rows) {
                  return xk_quantize_dynamic_per_token_f32_u8(rows, g.d.cols, reinterpret_cast<const float*>(g.src.data()),
                                                              0, nullptr, at<uint8_t>(out, 0), 0,
                                                              at<float>(out, g.off_scales), at<int32_t>(out, g.off_zps), 0);
              });
    d = QuantDesc();
    d.rows = 7, d.cols = 33, d.src_dtype = DType::bf16, d.dst_dtype = DType::s8;
    d.granularity = QuantGranularity::per_token_dynamic, d.symmetric = true, d.smooth = true;
    add_quant(cases, "dynamic per-token bf16->s8 7x33 symmetric smooth", d, 5400, nullptr,
              [](const QuantData& g, Out out, int64_t rows) {
                  return xk_quantize_dynamic_per_token_bf16_s8(rows, g.d.cols, u16(g.src.data()), 0, g.smooth.data(),
                                                               at<int8_t>(out, 0), 0, at<float>(out, g.off_scales),
                                                               at<int32_t>(out, g.off_zps), 1);
              });
    d = QuantDesc();
    d.rows = 1, d.cols = 17, d.src_dtype = DType::u8, d.dst_dtype = DType::bf16;
    add_quant(cases, "dequant per-tensor u8->bf16 17", d, 5500,
              [](const QuantData& g, Out out) {
                  dequantize_per_tensor(g.d.cols, reinterpret_cast<const uint8_t*>(g.src.data()), g.scales[0], g.zps[0],
                                        at<bf16>(out, 0));
              },
              nullptr);
}

// ---- glu ----------------------------------------------------------------------------------------

struct GluData {
    GluDesc d;  // strides resolved
    Bytes x;
    GluArgs args(Out out) const { return GluArgs{x.data(), out}; }
};

xk_status glu_capi(const GluData& g, const GluDesc& d, Out out) {
    const auto act = static_cast<xk_activation>(d.activation);
    if (d.x_dtype == DType::f32)
        return xk_glu_f32(act, d.rows, d.inner, reinterpret_cast<const float*>(g.x.data()), d.ld_x, at<float>(out, 0),
                          d.ld_y);
    return xk_glu_bf16(act, d.rows, d.inner, u16(g.x.data()), d.ld_x, at<uint16_t>(out, 0), d.ld_y);
}

void add_glu(std::vector<Case>& cases, const std::string& name, const GluDesc& desc, uint64_t seed) {
    auto g = std::make_shared<GluData>();
    auto plan = std::make_shared<const GluPlan>(desc);
    g->d = plan->desc();
    const GluDesc& d = g->d;
    g->x = random_bytes(d.x_dtype, d.rows * d.ld_x, seed);
    for (int64_t i = 0; d.x_dtype == DType::f32 && i < d.rows * d.ld_x; ++i)
        reinterpret_cast<float*>(g->x.data())[i] *= 4.0f;  // [-4, 4]: the activations' curved part
    Case c(kGlu, name, static_cast<size_t>(d.rows * d.ld_y) * dtype_size(d.y_dtype));
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "GluPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local GluPlan::run", [g, desc](Out out) { GluPlan(desc).run(g->args(out)); });
    c.add(kOneShot, false, "xk::glu", [g, desc](Out out) { glu(desc, g->args(out)); });
    const bool same = d.x_dtype == d.y_dtype;
    const bool packed = d.ld_x == 2 * d.inner && d.ld_y == d.inner;
    const Activation act = d.activation;
    if (same) c.add(kOneShot, true, "xk_glu_*", [g](Out out) { XK_CAPI_OK(glu_capi(*g, g->d, out)); });
    if (same && packed && (act == Activation::silu || act == Activation::gelu_erf || act == Activation::gelu_tanh)) {
        const bool f32 = d.x_dtype == DType::f32;
        c.add(kOneShot, false, "xk::silu_and_mul / gelu_and_mul", [g, f32, act](Out out) {
            const GluDesc& d = g->d;
            if (act == Activation::silu) {
                if (f32)
                    silu_and_mul(d.rows, d.inner, reinterpret_cast<const float*>(g->x.data()), at<float>(out, 0));
                else
                    silu_and_mul(d.rows, d.inner, reinterpret_cast<const bf16*>(g->x.data()), at<bf16>(out, 0));
            } else {
                const bool tanh = act == Activation::gelu_tanh;
                if (f32)
                    gelu_and_mul(d.rows, d.inner, reinterpret_cast<const float*>(g->x.data()), at<float>(out, 0), tanh);
                else
                    gelu_and_mul(d.rows, d.inner, reinterpret_cast<const bf16*>(g->x.data()), at<bf16>(out, 0), tanh);
            }
        });
        c.add(kOneShot, true, "xk_silu_and_mul_* / xk_gelu_and_mul_*", [g, f32, act](Out out) {
            const GluDesc& d = g->d;
            const int tanh = act == Activation::gelu_tanh ? 1 : 0;
            if (act == Activation::silu) {
                if (f32)
                    XK_CAPI_OK(xk_silu_and_mul_f32(d.rows, d.inner, reinterpret_cast<const float*>(g->x.data()),
                                                   at<float>(out, 0)));
                else
                    XK_CAPI_OK(xk_silu_and_mul_bf16(d.rows, d.inner, u16(g->x.data()), at<uint16_t>(out, 0)));
            } else {
                if (f32)
                    XK_CAPI_OK(xk_gelu_and_mul_f32(d.rows, d.inner, reinterpret_cast<const float*>(g->x.data()),
                                                   at<float>(out, 0), tanh));
                else
                    XK_CAPI_OK(xk_gelu_and_mul_bf16(d.rows, d.inner, u16(g->x.data()), at<uint16_t>(out, 0), tanh));
            }
        });
    }
    c.bad.push_back([g, desc](Out out) {
        GluDesc bd = desc;
        bd.ld_x = 2 * desc.inner - 1;
        return must_throw([&] { glu(bd, g->args(out)); }, "ld_x=");
    });
    c.bad.push_back([g, plan](Out out) {
        GluArgs a = g->args(out);
        a.x = nullptr;
        return must_throw([&] { plan->run(a); }, "x=null");
    });
    if (same)
        c.bad.push_back([g](Out out) {
            GluDesc bd = g->d;
            bd.rows = -4;
            return must_fail(glu_capi(*g, bd, out), "rows=-4");
        });
    cases.push_back(std::move(c));
}

void add_glu_cases(std::vector<Case>& cases) {
    GluDesc d;
    d.rows = 7, d.inner = 33;
    add_glu(cases, "silu f32 7x33", d, 6000);
    d = GluDesc();
    d.activation = Activation::gelu_erf, d.rows = 17, d.inner = 65, d.ld_x = 140, d.ld_y = 66;
    d.x_dtype = d.y_dtype = DType::bf16;
    add_glu(cases, "gelu_erf bf16 17x65 strided", d, 6100);
    d = GluDesc();
    d.activation = Activation::gelu_tanh, d.rows = 5, d.inner = 17, d.x_dtype = d.y_dtype = DType::bf16;
    add_glu(cases, "gelu_tanh bf16 5x17", d, 6200);
    d = GluDesc();
    d.activation = Activation::silu, d.rows = 33, d.inner = 7, d.x_dtype = DType::bf16, d.y_dtype = DType::f32;
    add_glu(cases, "silu bf16->f32 33x7", d, 6300);
    d = GluDesc();
    d.activation = Activation::gelu_erf, d.rows = 65, d.inner = 257;
    add_glu(cases, "gelu_erf f32 65x257 (two threads)", d, 6400);
    d = GluDesc();
    d.activation = Activation::relu, d.rows = 1, d.inner = 1;
    add_glu(cases, "relu f32 1x1", d, 6500);
}

// ---- softmax ------------------------------------------------------------------------------------

struct SoftmaxData {
    SoftmaxDesc d;  // strides resolved
    Bytes x;
    SoftmaxArgs args(Out out) const { return SoftmaxArgs{x.data(), out}; }
};

xk_status softmax_capi(const SoftmaxData& g, const SoftmaxDesc& d, Out out) {
    if (d.x_dtype == DType::f32)
        return xk_softmax_f32(d.rows, d.cols, reinterpret_cast<const float*>(g.x.data()), d.ld_x, at<float>(out, 0),
                              d.ld_y, d.scale, d.causal ? 1 : 0, d.causal_offset);
    return xk_softmax_bf16(d.rows, d.cols, u16(g.x.data()), d.ld_x, at<uint16_t>(out, 0), d.ld_y, d.scale,
                           d.causal ? 1 : 0, d.causal_offset);
}

void add_softmax(std::vector<Case>& cases, const std::string& name, const SoftmaxDesc& desc, uint64_t seed) {
    auto g = std::make_shared<SoftmaxData>();
    auto plan = std::make_shared<const SoftmaxPlan>(desc);
    g->d = plan->desc();
    const SoftmaxDesc& d = g->d;
    g->x = random_bytes(d.x_dtype, d.rows * d.ld_x, seed);
    for (int64_t i = 0; d.x_dtype == DType::f32 && i < d.rows * d.ld_x; ++i)
        reinterpret_cast<float*>(g->x.data())[i] *= 8.0f;
    Case c(kSoftmax, name, static_cast<size_t>(d.rows * d.ld_y) * dtype_size(d.y_dtype));
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "SoftmaxPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local SoftmaxPlan::run", [g, desc](Out out) { SoftmaxPlan(desc).run(g->args(out)); });
    c.add(kOneShot, false, "xk::softmax(desc)", [g, desc](Out out) { softmax(desc, g->args(out)); });
    const bool same = d.x_dtype == d.y_dtype;
    if (same) c.add(kOneShot, true, "xk_softmax_*", [g](Out out) { XK_CAPI_OK(softmax_capi(*g, g->d, out)); });
    if (same && !d.causal && d.ld_x == d.cols && d.ld_y == d.cols)
        c.add(kOneShot, false, "xk::softmax(packed)", [g](Out out) {
            const SoftmaxDesc& d = g->d;
            if (d.x_dtype == DType::f32)
                softmax(d.rows, d.cols, reinterpret_cast<const float*>(g->x.data()), at<float>(out, 0), d.scale);
            else
                softmax(d.rows, d.cols, reinterpret_cast<const bf16*>(g->x.data()), at<bf16>(out, 0), d.scale);
        });
    c.bad.push_back([g, desc](Out out) {
        SoftmaxDesc bd = desc;
        bd.scale = 0.0f;
        return must_throw([&] { softmax(bd, g->args(out)); }, "scale=");
    });
    c.bad.push_back([g, plan](Out out) {
        SoftmaxArgs a = g->args(out);
        a.x = nullptr;
        return must_throw([&] { plan->run(a); }, "x=null");
    });
    if (same)
        c.bad.push_back([g](Out out) {
            SoftmaxDesc bd = g->d;
            bd.scale = -2.0f;
            return must_fail(softmax_capi(*g, bd, out), "scale=-2");
        });
    cases.push_back(std::move(c));
}

void add_softmax_cases(std::vector<Case>& cases) {
    SoftmaxDesc d;
    d.rows = 7, d.cols = 33, d.scale = 0.125f;
    add_softmax(cases, "f32 7x33 scale 1/8", d, 7000);
    d = SoftmaxDesc();
    d.rows = 17, d.cols = 65, d.causal = true, d.causal_offset = 48, d.x_dtype = d.y_dtype = DType::bf16;
    add_softmax(cases, "bf16 17x65 causal offset 48", d, 7100);
    d = SoftmaxDesc();
    d.rows = 65, d.cols = 300, d.ld_x = 301, d.ld_y = 305, d.causal = true, d.causal_offset = -3, d.scale = 0.5f;
    add_softmax(cases, "f32 65x300 strided causal offset -3 (two threads)", d, 7200);
    d = SoftmaxDesc();
    d.rows = 5, d.cols = 17, d.x_dtype = DType::bf16, d.y_dtype = DType::f32;
    add_softmax(cases, "bf16->f32 5x17", d, 7300);
    d = SoftmaxDesc();
    d.rows = 3, d.cols = 1;
    add_softmax(cases, "f32 3x1", d, 7400);
}

// ---- eltwise ------------------------------------------------------------------------------------

void add_axpby(std::vector<Case>& cases, int64_t n, float alpha, float beta, uint64_t seed) {
    auto x = std::make_shared<const std::vector<float>>(random_vec<float>(static_cast<size_t>(n), -1.0, 1.0, seed));
    Case c(kEltwise, "axpby n=" + std::to_string(n), static_cast<size_t>(n) * 4);
    const std::vector<float> y0 = random_vec<float>(static_cast<size_t>(n), -1.0, 1.0, seed + 1);
    std::memcpy(c.init.data(), y0.data(), c.out_bytes);  // y is updated in place
    c.impl = "xk::axpby";
    c.add(kOneShot, false, "xk::axpby", [x, n, alpha, beta](Out out) { axpby(n, alpha, x->data(), beta, at<float>(out, 0)); });
    c.add(kOneShot, true, "xk_axpby",
          [x, n, alpha, beta](Out out) { XK_CAPI_OK(xk_axpby(n, alpha, x->data(), beta, at<float>(out, 0))); });
    c.bad.push_back([x, alpha, beta](Out out) {
        return must_throw([&] { axpby(-1, alpha, x->data(), beta, at<float>(out, 0)); }, "n=-1");
    });
    c.bad.push_back([n, alpha, beta](Out out) { return must_fail(xk_axpby(n, alpha, nullptr, beta, at<float>(out, 0)), "x=null"); });
    cases.push_back(std::move(c));

    Case s(kEltwise, "scale n=" + std::to_string(n), static_cast<size_t>(n) * 4);
    s.impl = "xk::scale";
    s.add(kOneShot, false, "xk::scale", [x, n, alpha](Out out) { scale(n, alpha, x->data(), at<float>(out, 0)); });
    s.add(kOneShot, false, "xk::axpby(beta 0)",
          [x, n, alpha](Out out) { axpby(n, alpha, x->data(), 0.0f, at<float>(out, 0)); });
    s.bad.push_back([x, alpha](Out out) {
        // Partial overlap of x and y.
        return must_throw([&] { scale(8, alpha, at<float>(out, 0), at<float>(out, 4)); }, "overlap");
    });
    cases.push_back(std::move(s));
}

// ---- attention ----------------------------------------------------------------------------------

xk_kv_cache_desc to_c(const KvCacheDesc& d) {
    xk_kv_cache_desc c;
    xk_kv_cache_desc_init(&c);
    c.layout = static_cast<xk_kv_layout>(static_cast<int>(d.layout));
    c.dtype = static_cast<xk_dtype>(static_cast<int>(d.dtype));
    c.batch = d.batch, c.kv_heads = d.kv_heads, c.head_dim = d.head_dim;
    c.capacity = d.capacity, c.block_size = d.block_size, c.num_blocks = d.num_blocks;
    c.max_blocks_per_seq = d.max_blocks_per_seq;
    return c;
}

struct SdpaData {
    AttentionDesc d;  // packed tensors (the C API's form)
    Bytes q, k, v;
    // The same q / k / v in padded rows (xk_attention_strided / xk_attention_plan_create_strided):
    // head stride head_dim + 3, token stride heads * (head_dim + 3) + 5; o stays packed (strides given).
    Bytes qs, ks, vs;
    xk_attention_strides st;
    std::vector<float> mask;
    std::vector<int64_t> cu_q, cu_k;  // empty: batch 1, all tokens
    size_t off_lse = 0;
    AttentionArgs args(Out out) const {
        AttentionArgs a;
        a.q = q.data(), a.k = k.data(), a.v = v.data();
        a.o = out;
        a.lse = at<float>(out, off_lse);
        a.mask = d.has_mask ? mask.data() : nullptr;
        a.cu_seqlens_q = cu_q.empty() ? nullptr : cu_q.data();
        a.cu_seqlens_k = cu_k.empty() ? nullptr : cu_k.data();
        return a;
    }
};

xk_status sdpa_capi(const SdpaData& g, const AttentionDesc& d, Out out) {
    const AttentionArgs a = g.args(out);
    const int causal = d.causal ? 1 : 0;
    if (d.dtype == DType::f32)
        return xk_attention_f32(d.batch, d.q_tokens, d.kv_tokens, d.q_heads, d.kv_heads, d.head_dim,
                                static_cast<const float*>(a.q), static_cast<const float*>(a.k),
                                static_cast<const float*>(a.v), static_cast<float*>(a.o), a.lse, a.cu_seqlens_q,
                                a.cu_seqlens_k, d.scale, causal, d.causal_offset, a.mask, d.mask_stride);
    return xk_attention_bf16(d.batch, d.q_tokens, d.kv_tokens, d.q_heads, d.kv_heads, d.head_dim, u16(a.q), u16(a.k),
                             u16(a.v), u16(a.o), a.lse, a.cu_seqlens_q, a.cu_seqlens_k, d.scale, causal,
                             d.causal_offset, a.mask, d.mask_stride);
}

xk_attention_desc to_c(const AttentionDesc& d) {
    xk_attention_desc c;
    xk_attention_desc_init(&c);
    c.batch = d.batch, c.q_tokens = d.q_tokens, c.kv_tokens = d.kv_tokens;
    c.q_heads = d.q_heads, c.kv_heads = d.kv_heads, c.head_dim = d.head_dim;
    c.dtype = static_cast<xk_dtype>(static_cast<int>(d.dtype));
    c.o_dtype = static_cast<xk_dtype>(static_cast<int>(d.o_dtype));
    c.scale = d.scale;
    c.causal = d.causal ? 1 : 0;
    c.causal_offset = d.causal_offset;
    c.has_mask = d.has_mask ? 1 : 0;
    c.mask_stride = d.mask_stride;
    return c;
}

std::shared_ptr<xk_attention_plan> make_attention_plan(const xk_attention_desc& cd) {
    xk_attention_plan* p = nullptr;
    XK_CAPI_OK(xk_attention_plan_create(&cd, &p));
    return std::shared_ptr<xk_attention_plan>(p, xk_attention_plan_destroy);
}

xk_status sdpa_plan_run(const xk_attention_plan* p, const SdpaData& g, Out out, const void* q) {
    const AttentionArgs a = g.args(out);
    return xk_attention_plan_run(p, q, a.k, a.v, a.o, a.lse, a.mask, a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k);
}

// Packed [tokens x heads x hd] elements of es bytes copied to rows of token stride ts, head stride hs.
Bytes padded_copy(const Bytes& src, int64_t tokens, int64_t heads, int64_t hd, size_t es, int64_t ts, int64_t hs) {
    Bytes dst(static_cast<size_t>(tokens * ts) * es, 0x7F);  // (padding: large finite values, never read)
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < heads; ++h)
            std::memcpy(dst.data() + static_cast<size_t>(t * ts + h * hs) * es,
                        src.data() + static_cast<size_t>((t * heads + h) * hd) * es, static_cast<size_t>(hd) * es);
    return dst;
}

xk_status sdpa_strided_capi(const SdpaData& g, const xk_attention_strides* st, Out out) {
    const AttentionArgs a = g.args(out);
    const xk_attention_desc cd = to_c(g.d);
    return xk_attention_strided(&cd, st, g.qs.data(), g.ks.data(), g.vs.data(), a.o, a.lse, a.mask, a.cu_seqlens_q,
                                a.cu_seqlens_k, a.seqused_k);
}

std::shared_ptr<xk_attention_plan> make_attention_plan_strided(const xk_attention_desc& cd, const xk_attention_strides& st) {
    xk_attention_plan* p = nullptr;
    XK_CAPI_OK(xk_attention_plan_create_strided(&cd, &st, &p));
    return std::shared_ptr<xk_attention_plan>(p, xk_attention_plan_destroy);
}

xk_status sdpa_strided_plan_run(const xk_attention_plan* p, const SdpaData& g, Out out) {
    const AttentionArgs a = g.args(out);
    return xk_attention_plan_run(p, g.qs.data(), g.ks.data(), g.vs.data(), a.o, a.lse, a.mask, a.cu_seqlens_q,
                                 a.cu_seqlens_k, a.seqused_k);
}

// Fused SDPA over packed q / k / v: AttentionPlan (shared / local), xk::attention, xk_attention_*,
// the C plan (shared / local).
void add_sdpa(std::vector<Case>& cases, const std::string& name, const AttentionDesc& d, std::vector<int64_t> cu_q,
              std::vector<int64_t> cu_k, uint64_t seed) {
    auto g = std::make_shared<SdpaData>();
    g->d = d;
    g->cu_q = std::move(cu_q);
    g->cu_k = std::move(cu_k);
    g->q = random_bytes(d.dtype, d.q_tokens * d.q_heads * d.head_dim, seed);
    g->k = random_bytes(d.dtype, d.kv_tokens * d.kv_heads * d.head_dim, seed + 1);
    g->v = random_bytes(d.dtype, d.kv_tokens * d.kv_heads * d.head_dim, seed + 2);
    if (d.has_mask) {  // [-2, 0] with every 7th entry -inf (a key the query must not see)
        const int64_t ms = d.mask_stride ? d.mask_stride : d.kv_tokens;
        g->mask = random_vec<float>(static_cast<size_t>(d.q_tokens * ms), -2.0, 0.0, seed + 3);
        for (size_t i = 3; i < g->mask.size(); i += 7) g->mask[i] = -std::numeric_limits<float>::infinity();
    }
    {  // padded copies for the strided C entry points
        const size_t es = dtype_size(d.dtype);
        const int64_t hs = d.head_dim + 3;
        xk_attention_strides_init(&g->st);
        g->st.q_head = g->st.k_head = g->st.v_head = hs;
        g->st.q_token = d.q_heads * hs + 5;
        g->st.k_token = g->st.v_token = d.kv_heads * hs + 5;
        g->st.o_head = d.head_dim, g->st.o_token = d.q_heads * d.head_dim;  // packed, given explicitly
        g->qs = padded_copy(g->q, d.q_tokens, d.q_heads, d.head_dim, es, g->st.q_token, hs);
        g->ks = padded_copy(g->k, d.kv_tokens, d.kv_heads, d.head_dim, es, g->st.k_token, hs);
        g->vs = padded_copy(g->v, d.kv_tokens, d.kv_heads, d.head_dim, es, g->st.v_token, hs);
    }
    Layout l;
    l.add(static_cast<size_t>(d.q_tokens * d.q_heads * d.head_dim) * dtype_size(d.o_dtype));
    g->off_lse = l.add(static_cast<size_t>(d.q_tokens * d.q_heads) * 4);
    Case c(kAttention, name, l.bytes);
    auto plan = std::make_shared<const AttentionPlan>(d);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "AttentionPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local AttentionPlan::run", [g](Out out) { AttentionPlan(g->d).run(g->args(out)); });
    c.add(kOneShot, false, "xk::attention", [g](Out out) { attention(g->d, g->args(out)); });
    const bool capi = d.dtype == d.o_dtype;
    if (capi) c.add(kOneShot, true, "xk_attention_*", [g](Out out) { XK_CAPI_OK(sdpa_capi(*g, g->d, out)); });
    // The C plan (xk_attention_plan_*): shared, and created / run / destroyed in the thread.
    auto cplan = make_attention_plan(to_c(d));
    EXPECT_STREQ(xk_attention_plan_impl_name(cplan.get()), plan->impl_name()) << name;
    c.add(kSharedPlan, true, "xk_attention_plan_run",
          [g, cplan](Out out) { XK_CAPI_OK(sdpa_plan_run(cplan.get(), *g, out, g->q.data())); });
    c.add(kLocalPlan, true, "xk_attention_plan_create + run + destroy", [g](Out out) {
        auto p = make_attention_plan(to_c(g->d));
        XK_CAPI_OK(sdpa_plan_run(p.get(), *g, out, g->q.data()));
    });
    // The strided C entry points (padded q / k / v): one call, a shared strided plan, and one
    // created / run / destroyed in the thread.
    c.add(kOneShot, true, "xk_attention_strided", [g](Out out) { XK_CAPI_OK(sdpa_strided_capi(*g, &g->st, out)); });
    auto splan = make_attention_plan_strided(to_c(d), g->st);
    EXPECT_STREQ(xk_attention_plan_impl_name(splan.get()), plan->impl_name()) << name;
    c.add(kSharedPlan, true, "xk_attention_plan_create_strided (shared) + run",
          [g, splan](Out out) { XK_CAPI_OK(sdpa_strided_plan_run(splan.get(), *g, out)); });
    c.add(kLocalPlan, true, "xk_attention_plan_create_strided + run + destroy", [g](Out out) {
        auto p = make_attention_plan_strided(to_c(g->d), g->st);
        XK_CAPI_OK(sdpa_strided_plan_run(p.get(), *g, out));
    });
    c.bad.push_back([g](Out out) {
        AttentionDesc bd = g->d;
        bd.kv_heads = 3;  // does not divide q_heads
        return must_throw([&] { attention(bd, g->args(out)); }, "q_heads=");
    });
    c.bad.push_back([g](Out out) {  // a head stride below head_dim: rejected, nothing written
        xk_attention_strides bs = g->st;
        bs.k_head = g->d.head_dim - 1;
        return must_fail(sdpa_strided_capi(*g, &bs, out), "stride");
    });
    c.bad.push_back([g](Out) {  // the same for the plan: no plan comes back
        xk_attention_strides bs = g->st;
        bs.q_head = g->d.head_dim - 1;
        const xk_attention_desc cd = to_c(g->d);
        xk_attention_plan* p = reinterpret_cast<xk_attention_plan*>(&bs);  // a non-NULL sentinel
        const std::string why = must_fail(xk_attention_plan_create_strided(&cd, &bs, &p), "stride");
        if (p != nullptr) return why + " (and *plan is not NULL)";
        return why;
    });
    c.bad.push_back([g, cplan](Out out) { return must_fail(sdpa_plan_run(cplan.get(), *g, out, nullptr), "q=null"); });
    c.bad.push_back([g](Out) {  // a descriptor the plan rejects: no plan comes back
        xk_attention_desc bd = to_c(g->d);
        bd.kv_heads = 3;
        xk_attention_plan* p = reinterpret_cast<xk_attention_plan*>(&bd);  // a non-NULL sentinel
        const std::string why = must_fail(xk_attention_plan_create(&bd, &p), "q_heads=");
        if (p != nullptr) return why + " (and *plan is not NULL)";
        return why;
    });
    c.bad.push_back([g, plan](Out out) {
        AttentionArgs a = g->args(out);
        a.v = nullptr;
        return must_throw([&] { plan->run(a); }, "v=null");
    });
    if (capi)
        c.bad.push_back([g](Out out) {
            AttentionDesc bd = g->d;
            bd.scale = std::numeric_limits<float>::infinity();
            return must_fail(sdpa_capi(*g, bd, out), "scale=inf");
        });
    cases.push_back(std::move(c));
}

struct CachedData {
    CachedAttentionDesc d;
    Bytes q, kc, vc;
    std::vector<float> ks, vs;  // s8 caches: the row scales
    std::vector<int32_t> table;
    std::vector<int64_t> cu, ctx, bad_ctx;
    size_t off_lse = 0;
    CachedAttentionArgs args(Out out, bool bad = false) const {
        CachedAttentionArgs a;
        a.q = q.data();
        a.o = out;
        a.lse = at<float>(out, off_lse);
        a.cu_seqlens_q = cu.data();
        a.context_lens = bad ? bad_ctx.data() : ctx.data();
        a.cache = KvCache{const_cast<unsigned char*>(kc.data()), const_cast<unsigned char*>(vc.data()),
                          table.empty() ? nullptr : table.data(), ks.empty() ? nullptr : const_cast<float*>(ks.data()),
                          vs.empty() ? nullptr : const_cast<float*>(vs.data())};
        return a;
    }
};

xk_cached_attention_desc to_c(const CachedAttentionDesc& d) {
    xk_cached_attention_desc c;
    xk_cached_attention_desc_init(&c);
    c.cache = to_c(d.cache);
    c.q_tokens = d.q_tokens, c.q_heads = d.q_heads;
    c.q_dtype = static_cast<xk_dtype>(static_cast<int>(d.q_dtype));
    c.o_dtype = static_cast<xk_dtype>(static_cast<int>(d.o_dtype));
    c.scale = d.scale;
    c.kv_splits = d.kv_splits;
    return c;
}

xk_kv_cache to_c(const KvCache& k) { return xk_kv_cache{k.k, k.v, k.block_table, k.k_scale, k.v_scale}; }

std::shared_ptr<xk_cached_attention_plan> make_cached_plan(const xk_cached_attention_desc& cd) {
    xk_cached_attention_plan* p = nullptr;
    XK_CAPI_OK(xk_cached_attention_plan_create(&cd, &p));
    return std::shared_ptr<xk_cached_attention_plan>(p, xk_cached_attention_plan_destroy);
}

xk_status cached_plan_run(const xk_cached_attention_plan* p, const CachedAttentionArgs& a) {
    const xk_kv_cache kc = to_c(a.cache);
    return xk_cached_attention_plan_run(p, &kc, a.q, a.o, a.lse, a.cu_seqlens_q, a.context_lens);
}

xk_status cached_capi(const CachedData& g, const xk_kv_cache_desc& cd, const CachedAttentionArgs& a) {
    const CachedAttentionDesc& d = g.d;
    if (d.q_dtype == DType::f32)
        return xk_cached_attention_f32(&cd, a.cache.k, a.cache.v, a.cache.block_table, d.q_tokens, d.q_heads,
                                       static_cast<const float*>(a.q), static_cast<float*>(a.o), a.lse, a.cu_seqlens_q,
                                       a.context_lens, d.scale);
    return xk_cached_attention_bf16(&cd, a.cache.k, a.cache.v, a.cache.block_table, d.q_tokens, d.q_heads, u16(a.q),
                                    u16(a.o), a.lse, a.cu_seqlens_q, a.context_lens, d.scale);
}

// Attention of new queries over a filled KV cache (the cache bytes are random: every slot a
// call reads is some K / V row): CachedAttentionPlan (shared / local), xk::cached_attention,
// xk_cached_attention_* (which has kv_splits automatic: a case with explicit kv_splits sums the
// key pieces in another order, so it has no C API variant).
void add_cached(std::vector<Case>& cases, const std::string& name, const CachedAttentionDesc& d,
                std::vector<int64_t> cu, std::vector<int64_t> ctx, uint64_t seed) {
    auto g = std::make_shared<CachedData>();
    g->d = d;
    g->cu = std::move(cu);
    g->ctx = std::move(ctx);
    g->bad_ctx = g->ctx;
    g->bad_ctx[0] = kv_cache_capacity(d.cache) + 1;
    const int64_t hd = d.cache.head_dim;
    g->q = random_bytes(d.q_dtype, d.q_tokens * d.q_heads * hd, seed);
    g->kc = random_bytes(d.cache.dtype, kv_cache_elements(d.cache), seed + 1);
    g->vc = random_bytes(d.cache.dtype, kv_cache_elements(d.cache), seed + 2);
    if (d.cache.dtype == DType::s8) {  // row scales of an int8 cache (values up to ~1)
        g->ks = random_vec<float>(static_cast<size_t>(kv_cache_scale_elements(d.cache)), 0.001, 0.008, seed + 4);
        g->vs = random_vec<float>(static_cast<size_t>(kv_cache_scale_elements(d.cache)), 0.001, 0.008, seed + 5);
    }
    if (d.cache.layout == KvLayout::paged) {  // the pool's blocks in a shuffled order
        std::vector<int32_t> blocks(static_cast<size_t>(d.cache.num_blocks));
        std::iota(blocks.begin(), blocks.end(), 0);
        std::mt19937_64 rng(seed + 3);
        std::shuffle(blocks.begin(), blocks.end(), rng);
        g->table.resize(static_cast<size_t>(d.cache.batch * d.cache.max_blocks_per_seq));
        for (size_t i = 0; i < g->table.size(); ++i) g->table[i] = blocks[i % blocks.size()];
    }
    Layout l;
    l.add(static_cast<size_t>(d.q_tokens * d.q_heads * hd) * dtype_size(d.o_dtype));
    g->off_lse = l.add(static_cast<size_t>(d.q_tokens * d.q_heads) * 4);
    Case c(kAttention, name, l.bytes);
    auto plan = std::make_shared<const CachedAttentionPlan>(d);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "CachedAttentionPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local CachedAttentionPlan::run",
          [g](Out out) { CachedAttentionPlan(g->d).run(g->args(out)); });
    c.add(kOneShot, false, "xk::cached_attention", [g](Out out) { cached_attention(g->d, g->args(out)); });
    const bool capi = d.q_dtype == d.o_dtype && d.kv_splits == 0 && d.cache.dtype != DType::s8;
    if (capi)
        c.add(kOneShot, true, "xk_cached_attention_*",
              [g](Out out) { XK_CAPI_OK(cached_capi(*g, to_c(g->d.cache), g->args(out))); });
    // The C plan (xk_cached_attention_plan_*, any kv_splits / dtypes): shared and local.
    auto cplan = make_cached_plan(to_c(d));
    EXPECT_STREQ(xk_cached_attention_plan_impl_name(cplan.get()), plan->impl_name()) << name;
    c.add(kSharedPlan, true, "xk_cached_attention_plan_run",
          [g, cplan](Out out) { XK_CAPI_OK(cached_plan_run(cplan.get(), g->args(out))); });
    c.add(kLocalPlan, true, "xk_cached_attention_plan_create + run + destroy",
          [g](Out out) { XK_CAPI_OK(cached_plan_run(make_cached_plan(to_c(g->d)).get(), g->args(out))); });
    c.bad.push_back([g, cplan](Out out) {
        return must_fail(cached_plan_run(cplan.get(), g->args(out, true)), "context_lens[0]=");
    });
    c.bad.push_back([g](Out) {  // a descriptor the plan rejects: no plan comes back
        xk_cached_attention_desc bd = to_c(g->d);
        bd.q_heads = 3;
        xk_cached_attention_plan* p = reinterpret_cast<xk_cached_attention_plan*>(&bd);  // a non-NULL sentinel
        const std::string why = must_fail(xk_cached_attention_plan_create(&bd, &p), "q_heads=3");
        if (p != nullptr) return why + " (and *plan is not NULL)";
        return why;
    });
    c.bad.push_back([g, plan](Out out) {  // context past the capacity (checked before anything is written)
        return must_throw([&] { plan->run(g->args(out, true)); }, "context_lens[0]=");
    });
    c.bad.push_back([g](Out out) {
        CachedAttentionDesc bd = g->d;
        bd.q_heads = 3;  // not a multiple of kv_heads (2)
        return must_throw([&] { cached_attention(bd, g->args(out)); }, "q_heads=3");
    });
    if (capi)
        c.bad.push_back([g](Out out) {
            CachedAttentionArgs a = g->args(out);
            a.q = nullptr;
            return must_fail(cached_capi(*g, to_c(g->d.cache), a), "q=null");
        });
    cases.push_back(std::move(c));
}

// kv_cache_append: new K / V rows written into the cache in place (the output buffer holds both
// caches, and the row scales of an s8 cache; init = their random contents): xk::kv_cache_append,
// xk_kv_cache_append (f32 / bf16 caches without RoPE) and xk_kv_cache_append_ex. rope_dim > 0:
// RoPE (style neox / gptj, rotary_dim rope_dim) fused on K, positions below the cache capacity.
// The (sequence, position) slots must be distinct (two tokens on one slot: either may win).
struct KvAppendOpts {
    DType src = DType::f32;
    int64_t rope_dim = 0;
    RopeStyle style = RopeStyle::neox;
};
void add_kv_append(std::vector<Case>& cases, const std::string& name, const KvCacheDesc& cd,
                   std::vector<int64_t> seq_ids, std::vector<int64_t> positions, uint64_t seed,
                   const KvAppendOpts& opt = KvAppendOpts()) {
    struct Data {
        KvCacheDesc d;
        KvAppendOpts o;
        Bytes k_new, v_new;
        std::vector<float> cos_sin;  // [capacity x rope_dim]
        std::vector<int32_t> table;
        std::vector<int64_t> seq, pos, bad_pos, bad_seq;
        size_t off_v = 0, off_ks = 0, off_vs = 0;
        int64_t tokens = 0;
        KvCache cache(Out out) const {
            const bool s8 = d.dtype == DType::s8;
            return KvCache{out, out + off_v, table.empty() ? nullptr : table.data(),
                           s8 ? at<float>(out, off_ks) : nullptr, s8 ? at<float>(out, off_vs) : nullptr};
        }
        KvAppendArgs args(bool bad = false) const {
            KvAppendArgs a;
            a.tokens = tokens;
            a.src_dtype = o.src;
            a.k_new = k_new.data(), a.v_new = v_new.data();
            a.seq_ids = seq.data();
            a.positions = bad ? bad_pos.data() : pos.data();
            if (o.rope_dim > 0) {
                a.rope_cos_sin = cos_sin.data();
                a.rope_max_position = kv_cache_capacity(d);
                a.rope_rotary_dim = o.rope_dim;
                a.rope_style = o.style;
            }
            return a;
        }
        xk_status capi_ex(Out out, const KvAppendArgs& a) const {
            const xk_kv_cache_desc cd = to_c(d);
            const xk_kv_cache kc = to_c(cache(out));
            xk_kv_append_args ca;
            xk_kv_append_args_init(&ca);
            ca.tokens = a.tokens;
            ca.src_dtype = static_cast<xk_dtype>(static_cast<int>(a.src_dtype));
            ca.k_new = a.k_new, ca.v_new = a.v_new;
            ca.seq_ids = a.seq_ids, ca.positions = a.positions;
            ca.rope_cos_sin = a.rope_cos_sin;
            ca.rope_max_position = a.rope_max_position;
            ca.rope_rotary_dim = a.rope_rotary_dim;
            ca.rope_style = static_cast<xk_rope_style>(static_cast<int>(a.rope_style));
            return xk_kv_cache_append_ex(&cd, &kc, &ca);
        }
    };
    auto g = std::make_shared<Data>();
    g->d = cd;
    g->o = opt;
    g->tokens = static_cast<int64_t>(seq_ids.size());
    g->seq = std::move(seq_ids);
    g->pos = std::move(positions);
    g->bad_pos = g->pos;
    g->bad_pos[g->tokens > 1 ? 1 : 0] = kv_cache_capacity(cd);
    g->bad_seq = g->seq;
    g->bad_seq[0] = cd.batch;
    const int64_t row = cd.kv_heads * cd.head_dim;
    g->k_new = random_bytes(opt.src, g->tokens * row, seed);
    g->v_new = random_bytes(opt.src, g->tokens * row, seed + 1);
    if (opt.rope_dim > 0) {  // vLLM's cos_sin_cache: row p = cos(p w_i) | sin(p w_i)
        const int64_t cap = kv_cache_capacity(cd), half = opt.rope_dim / 2;
        g->cos_sin.resize(static_cast<size_t>(cap * opt.rope_dim));
        for (int64_t p = 0; p < cap; ++p)
            for (int64_t i = 0; i < half; ++i) {
                const double th = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(opt.rope_dim));
                g->cos_sin[static_cast<size_t>(p * opt.rope_dim + i)] = static_cast<float>(std::cos(th));
                g->cos_sin[static_cast<size_t>(p * opt.rope_dim + half + i)] = static_cast<float>(std::sin(th));
            }
    }
    if (cd.layout == KvLayout::paged) {  // sequence b owns blocks b, b + batch, ... (interleaved)
        g->table.resize(static_cast<size_t>(cd.batch * cd.max_blocks_per_seq));
        for (int64_t b = 0; b < cd.batch; ++b)
            for (int64_t j = 0; j < cd.max_blocks_per_seq; ++j)
                g->table[static_cast<size_t>(b * cd.max_blocks_per_seq + j)] =
                    static_cast<int32_t>((j * cd.batch + b) % cd.num_blocks);
    }
    const bool s8 = cd.dtype == DType::s8;
    const size_t cache_bytes = static_cast<size_t>(kv_cache_elements(cd)) * dtype_size(cd.dtype);
    const size_t scale_bytes = s8 ? static_cast<size_t>(kv_cache_scale_elements(cd)) * 4 : 0;
    Layout l;
    l.add(cache_bytes);
    g->off_v = l.add(cache_bytes);
    if (s8) g->off_ks = l.add(scale_bytes), g->off_vs = l.add(scale_bytes);
    Case c(kAttention, name, l.bytes);
    const Bytes k0 = random_bytes(cd.dtype, kv_cache_elements(cd), seed + 2);
    const Bytes v0 = random_bytes(cd.dtype, kv_cache_elements(cd), seed + 3);
    std::memcpy(c.init.data(), k0.data(), cache_bytes);
    std::memcpy(c.init.data() + g->off_v, v0.data(), cache_bytes);
    if (s8) {
        const std::vector<float> ks = random_vec<float>(scale_bytes / 4, 0.001, 0.008, seed + 4);
        const std::vector<float> vs = random_vec<float>(scale_bytes / 4, 0.001, 0.008, seed + 5);
        std::memcpy(c.init.data() + g->off_ks, ks.data(), scale_bytes);
        std::memcpy(c.init.data() + g->off_vs, vs.data(), scale_bytes);
    }
    c.impl = "xk::kv_cache_append";
    c.add(kOneShot, false, "xk::kv_cache_append", [g](Out out) { kv_cache_append(g->d, g->cache(out), g->args()); });
    auto capi = [g](Out out, const int64_t* seq, const int64_t* pos) {
        const xk_kv_cache_desc cd = to_c(g->d);
        const KvCache kc = g->cache(out);
        return xk_kv_cache_append(&cd, kc.k, kc.v, kc.block_table, g->tokens,
                                  static_cast<xk_dtype>(static_cast<int>(g->o.src)), g->k_new.data(), g->v_new.data(),
                                  seq, pos);
    };
    const bool plain = !s8 && opt.rope_dim == 0;  // what xk_kv_cache_append can say
    if (plain)
        c.add(kOneShot, true, "xk_kv_cache_append",
              [g, capi](Out out) { XK_CAPI_OK(capi(out, g->seq.data(), g->pos.data())); });
    c.add(kOneShot, true, "xk_kv_cache_append_ex", [g](Out out) { XK_CAPI_OK(g->capi_ex(out, g->args())); });
    c.bad.push_back([g](Out out) {  // token 0 is valid: nothing at all may be written
        return must_throw([&] { kv_cache_append(g->d, g->cache(out), g->args(true)); },
                          g->tokens > 1 ? "positions[1]=" : "positions[0]=");
    });
    if (plain)
        c.bad.push_back([g, capi](Out out) {
            return must_fail(capi(out, g->bad_seq.data(), g->pos.data()), ("seq_ids[0]=" + std::to_string(g->d.batch)).c_str());
        });
    c.bad.push_back([g](Out out) {
        KvAppendArgs a = g->args();
        a.seq_ids = g->bad_seq.data();
        return must_fail(g->capi_ex(out, a), ("seq_ids[0]=" + std::to_string(g->d.batch)).c_str());
    });
    c.bad.push_back([g](Out out) {  // a position past the cache (RoPE fused: past its table too)
        const KvAppendArgs a = g->args(true);
        return must_fail(g->capi_ex(out, a), g->tokens > 1 ? "positions[1]=" : "positions[0]=");
    });
    cases.push_back(std::move(c));
}

void add_attention_cases(std::vector<Case>& cases) {
    {  // SDPA f32, 5 tokens, GQA 4 / 2 heads x 64, causal.
        AttentionDesc d;
        d.q_tokens = d.kv_tokens = 5;
        d.q_heads = 4, d.kv_heads = 2, d.head_dim = 64;
        d.causal = true;
        add_sdpa(cases, "sdpa f32 5 tok 4/2 heads hd64 causal", d, {}, {}, 9000);
    }
    {  // SDPA bf16, two variable-length sequences (2 / 3 queries over 3 / 4 keys), additive mask
       // with -inf entries, bottom-right causal.
        AttentionDesc d;
        d.batch = 2, d.q_tokens = 5, d.kv_tokens = 7;
        d.q_heads = 4, d.kv_heads = 2, d.head_dim = 64;
        d.dtype = d.o_dtype = DType::bf16;
        d.causal = true, d.causal_offset = 1;
        d.has_mask = true, d.mask_stride = 4;
        add_sdpa(cases, "sdpa bf16 varlen 2+3 q / 3+4 kv mask causal+1", d, {0, 2, 5}, {0, 3, 7}, 9100);
    }
    {  // Decode (sequence 0: 1 query) and chunked prefill (sequence 1: 4 queries) over a contiguous
       // f32 cache, f32 q / o.
        CachedAttentionDesc d;
        d.cache.layout = KvLayout::contiguous, d.cache.dtype = DType::f32;
        d.cache.batch = 2, d.cache.kv_heads = 2, d.cache.head_dim = 64, d.cache.capacity = 24;
        d.q_tokens = 5, d.q_heads = 4;
        add_cached(cases, "cached contiguous f32 cache 1+4 q ctx 9/21", d, {0, 1, 5}, {9, 21}, 9200);
    }
    {  // Paged bf16 cache (blocks of 16, shuffled), bf16 q / o: decode 2 sequences + 3 queries.
        CachedAttentionDesc d;
        d.cache.layout = KvLayout::paged, d.cache.dtype = DType::bf16;
        d.cache.batch = 3, d.cache.kv_heads = 2, d.cache.head_dim = 64;
        d.cache.block_size = 16, d.cache.num_blocks = 9, d.cache.max_blocks_per_seq = 3;
        d.q_tokens = 5, d.q_heads = 4;
        d.q_dtype = d.o_dtype = DType::bf16;
        add_cached(cases, "cached paged bf16 cache 1+1+3 q ctx 40/7/33", d, {0, 1, 2, 5}, {40, 7, 33}, 9300);
    }
    {  // Paged f32 cache, bf16 q -> f32 o, 3 key pieces per sequence merged (flash-decoding split).
        CachedAttentionDesc d;
        d.cache.layout = KvLayout::paged, d.cache.dtype = DType::f32;
        d.cache.batch = 2, d.cache.kv_heads = 2, d.cache.head_dim = 64;
        d.cache.block_size = 32, d.cache.num_blocks = 12, d.cache.max_blocks_per_seq = 6;
        d.q_tokens = 2, d.q_heads = 4;
        d.q_dtype = DType::bf16;
        d.kv_splits = 3;
        add_cached(cases, "cached paged f32 cache decode ctx 190/129 kv_splits 3", d, {0, 1, 2}, {190, 129}, 9400);
    }
    {  // Append 3 f32 tokens into a paged bf16 cache (rounded), 2 sequences.
        KvCacheDesc cd;
        cd.layout = KvLayout::paged, cd.dtype = DType::bf16;
        cd.batch = 2, cd.kv_heads = 2, cd.head_dim = 64;
        cd.block_size = 16, cd.num_blocks = 4, cd.max_blocks_per_seq = 2;
        add_kv_append(cases, "kv_cache_append f32 -> paged bf16 3 tokens", cd, {0, 1, 1}, {17, 0, 31}, 9500);
    }
}

// Shapes drawn from the soak's seed (XK_SOAK_SEED): SDPA, cached attention (f32 / bf16 / s8
// caches, contiguous / paged, any kv_splits) and appends (s8 caches, bf16 sources, fused RoPE),
// each through C++ and the C plans / xk_kv_cache_append_ex. Small: a few hundred us a call.
void add_random_attention_cases(std::vector<Case>& cases, std::mt19937_64& rng) {
    auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
    const int64_t head_dims[] = {16, 32, 48, 64, 80, 128};
    const DType io[] = {DType::f32, DType::bf16};
    const DType cache_types[] = {DType::f32, DType::bf16, DType::s8};
    for (int i = 0; i < 2; ++i) {  // SDPA: 1..3 sequences of 1..4 queries over as many keys or more
        AttentionDesc d;
        d.batch = pick(1, 3);
        d.kv_heads = pick(1, 2);
        d.q_heads = d.kv_heads << pick(0, 2);  // 1, 2, 4 or 8: kv_heads = 3 never divides it
        d.head_dim = head_dims[pick(0, 5)];
        d.dtype = io[pick(0, 1)], d.o_dtype = io[pick(0, 1)];
        d.causal = pick(0, 1) == 1;
        d.has_mask = pick(0, 1) == 1;
        std::vector<int64_t> cu_q{0}, cu_k{0};
        int64_t longest = 0;
        for (int64_t b = 0; b < d.batch; ++b) {
            const int64_t lq = pick(1, 4), lk = lq + pick(0, 5);
            cu_q.push_back(cu_q.back() + lq), cu_k.push_back(cu_k.back() + lk);
            longest = std::max(longest, lk);
        }
        d.q_tokens = cu_q.back(), d.kv_tokens = cu_k.back();
        d.mask_stride = d.has_mask ? longest + pick(0, 3) : 0;
        char name[160];
        std::snprintf(name, sizeof name, "random sdpa %s->%s batch %lld %lld/%lld heads hd%lld%s%s",
                      dtype_name(d.dtype), dtype_name(d.o_dtype), static_cast<long long>(d.batch),
                      static_cast<long long>(d.q_heads), static_cast<long long>(d.kv_heads),
                      static_cast<long long>(d.head_dim), d.causal ? " causal" : "", d.has_mask ? " mask" : "");
        add_sdpa(cases, name, d, cu_q, cu_k, rng());
    }
    for (int i = 0; i < 2; ++i) {  // cached attention
        CachedAttentionDesc d;
        d.cache.layout = pick(0, 1) ? KvLayout::paged : KvLayout::contiguous;
        d.cache.dtype = cache_types[i == 0 ? 2 : pick(0, 1)];  // an s8 cache, then f32 or bf16
        d.cache.batch = pick(1, 3), d.cache.kv_heads = 2, d.cache.head_dim = head_dims[pick(0, 5)];
        if (d.cache.layout == KvLayout::contiguous) {
            d.cache.capacity = pick(8, 40);
        } else {
            d.cache.block_size = int64_t{16} << pick(0, 2);
            d.cache.max_blocks_per_seq = pick(1, 3);
            d.cache.num_blocks = pick(1, d.cache.batch * d.cache.max_blocks_per_seq);
        }
        d.q_heads = 2 * pick(1, 3);
        d.q_dtype = io[pick(0, 1)], d.o_dtype = io[pick(0, 1)];
        d.kv_splits = pick(0, 2);
        const int64_t cap = kv_cache_capacity(d.cache);
        std::vector<int64_t> cu{0}, ctx;
        for (int64_t b = 0; b < d.cache.batch; ++b) {  // sequence 0 has a query at least
            ctx.push_back(pick(1, cap));
            cu.push_back(cu.back() + pick(b == 0 ? 1 : 0, std::min<int64_t>(ctx.back(), 3)));
        }
        d.q_tokens = cu.back();
        char name[160];
        std::snprintf(name, sizeof name, "random cached %s %s cache %s->%s batch %lld q %lld heads %lld hd%lld splits %lld",
                      kv_layout_name(d.cache.layout), dtype_name(d.cache.dtype), dtype_name(d.q_dtype),
                      dtype_name(d.o_dtype), static_cast<long long>(d.cache.batch), static_cast<long long>(d.q_tokens),
                      static_cast<long long>(d.q_heads), static_cast<long long>(d.cache.head_dim),
                      static_cast<long long>(d.kv_splits));
        add_cached(cases, name, d, cu, ctx, rng());
    }
    for (int i = 0; i < 2; ++i) {  // appends: distinct (sequence, position) slots
        KvCacheDesc cd;
        cd.layout = pick(0, 1) ? KvLayout::paged : KvLayout::contiguous;
        cd.dtype = cache_types[i == 0 ? 2 : pick(0, 2)];  // one s8 cache at least
        cd.batch = pick(1, 3), cd.kv_heads = pick(1, 2), cd.head_dim = head_dims[pick(0, 5)];
        if (cd.layout == KvLayout::contiguous) {
            cd.capacity = pick(4, 40);
        } else {
            cd.block_size = 16, cd.max_blocks_per_seq = pick(1, 2);
            cd.num_blocks = cd.batch * cd.max_blocks_per_seq;  // every sequence its own blocks
        }
        const int64_t cap = kv_cache_capacity(cd), tokens = pick(1, 5);
        std::vector<int64_t> seq, pos;
        while (static_cast<int64_t>(seq.size()) < tokens) {
            const int64_t b = pick(0, cd.batch - 1), p = pick(0, cap - 1);
            bool taken = false;
            for (size_t t = 0; t < seq.size(); ++t) taken = taken || (seq[t] == b && pos[t] == p);
            if (!taken) seq.push_back(b), pos.push_back(p);
        }
        KvAppendOpts o;
        o.src = io[pick(0, 1)];
        o.rope_dim = i == 0 || pick(0, 1) ? 2 * pick(1, cd.head_dim / 2) : 0;
        o.style = pick(0, 1) ? RopeStyle::gptj : RopeStyle::neox;
        char name[160];
        std::snprintf(name, sizeof name, "random kv_cache_append %s -> %s %s %lld tokens kv_heads %lld hd%lld rope %lld %s",
                      dtype_name(o.src), kv_layout_name(cd.layout), dtype_name(cd.dtype), static_cast<long long>(tokens),
                      static_cast<long long>(cd.kv_heads), static_cast<long long>(cd.head_dim),
                      static_cast<long long>(o.rope_dim), o.style == RopeStyle::gptj ? "gptj" : "neox");
        add_kv_append(cases, name, cd, seq, pos, rng(), o);
    }
}

// ---- woq ----------------------------------------------------------------------------------------

struct WoqData {
    WoqDesc d;
    WoqWeightDesc wd;
    Bytes x, residual, qweights, zero_points;
    std::vector<float> scales, bias;
    WoqArgs args(Out out) const {
        WoqArgs a;
        a.A = x.data();
        a.C = out;
        a.bias = d.epilogue.bias ? bias.data() : nullptr;
        a.residual = d.epilogue.residual ? residual.data() : nullptr;
        return a;
    }
    WoqWeightArgs wargs() const {
        return WoqWeightArgs{qweights.data(), scales.data(), wd.zero_points ? zero_points.data() : nullptr};
    }
};

xk_woq_desc to_c(const WoqDesc& d) {
    xk_woq_desc c;
    xk_woq_desc_init(&c);
    c.M = d.M, c.N = d.N, c.K = d.K;
    c.weight_type = static_cast<xk_woq_type>(static_cast<int>(d.weight_type));
    c.a_type = static_cast<xk_dtype>(static_cast<int>(d.a_type));
    c.c_type = static_cast<xk_dtype>(static_cast<int>(d.c_type));
    c.lda = d.lda, c.ldc = d.ldc;
    c.alpha = d.alpha, c.beta = d.beta;
    c.bias = d.epilogue.bias ? 1 : 0;
    c.act = static_cast<xk_activation>(static_cast<int>(d.epilogue.act));
    c.residual = d.epilogue.residual ? 1 : 0;
    c.residual_type = static_cast<xk_dtype>(static_cast<int>(d.residual_type));
    c.ld_residual = d.ld_residual;
    return c;
}

std::shared_ptr<xk_woq_weight> woq_capi_pack(const WoqData& g) {
    const WoqWeightArgs wa = g.wargs();
    xk_woq_weight* w = nullptr;
    XK_CAPI_OK(xk_woq_pack(static_cast<xk_woq_type>(static_cast<int>(g.wd.type)), g.wd.N, g.wd.K, g.wd.group_size,
                           wa.weights, g.wd.ld_w, wa.scales, wa.zero_points, &w));
    return std::shared_ptr<xk_woq_weight>(w, xk_woq_weight_destroy);
}

// WoqPlan (shared, with one packed weight shared by every thread; local, packing its own),
// xk::woq_gemm, and the C API (a shared xk_woq_weight; pack + gemm + destroy inside the call).
// The C descriptor has no compute mode: WoqCompute::int8 cases are C++ only.
void add_woq(std::vector<Case>& cases, const std::string& name, const WoqDesc& d, const WoqWeightDesc& wd,
             uint64_t seed) {
    auto g = std::make_shared<WoqData>();
    g->d = d;
    g->wd = wd;
    const bool u4 = wd.type == WoqWeightType::u4;
    const int64_t lda = d.lda ? d.lda : d.K, ldc = d.ldc ? d.ldc : d.N, ldr = d.ld_residual ? d.ld_residual : d.N;
    const int64_t ldw = wd.ld_w ? wd.ld_w : (u4 ? wd.K / 2 : wd.K), G = wd.group_size ? wd.K / wd.group_size : 1;
    g->x = random_bytes(d.a_type, d.M * lda, seed);
    g->residual = random_bytes(d.residual_type, d.M * ldr, seed + 1);
    g->bias = random_vec<float>(static_cast<size_t>(d.N), -1.0, 1.0, seed + 2);
    g->qweights = random_bytes(DType::u8, wd.N * ldw, seed + 3);  // any byte: s8 or two nibbles
    g->scales = random_vec<float>(static_cast<size_t>(wd.N * G), 0.002, 0.02, seed + 4);
    g->zero_points = u4 ? random_bytes(DType::u8, wd.N * G, seed + 5) : random_bytes(DType::s8, wd.N * G, seed + 5);
    if (u4)
        for (int64_t i = 0; i < wd.N * G; ++i) g->zero_points[static_cast<size_t>(i)] &= 15;
    Case c(kWoq, name, static_cast<size_t>(d.M * ldc) * dtype_size(d.c_type));
    auto plan = std::make_shared<const WoqPlan>(d);
    auto packed = std::make_shared<const WoqPackedWeight>(woq_pack(wd, g->wargs()));
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "WoqPlan::run", [g, plan, packed](Out out) { plan->run(g->args(out), *packed); });
    c.add(kLocalPlan, false, "woq_pack + local WoqPlan::run",
          [g](Out out) { WoqPlan(g->d).run(g->args(out), woq_pack(g->wd, g->wargs())); });
    c.add(kOneShot, false, "xk::woq_gemm", [g, packed](Out out) { woq_gemm(g->d, g->args(out), *packed); });
    const bool capi = d.compute == WoqCompute::exact;
    std::shared_ptr<xk_woq_weight> cw = capi ? woq_capi_pack(*g) : nullptr;
    if (capi) {
        c.add(kOneShot, true, "xk_woq_gemm (shared xk_woq_weight)", [g, cw](Out out) {
            const xk_woq_desc cd = to_c(g->d);
            const WoqArgs a = g->args(out);
            const xk_woq_args ca{a.A, a.C, a.bias, a.residual};
            XK_CAPI_OK(xk_woq_gemm(&cd, &ca, cw.get()));
        });
        c.add(kLocalPlan, true, "xk_woq_pack + xk_woq_gemm + destroy", [g](Out out) {
            const std::shared_ptr<xk_woq_weight> w = woq_capi_pack(*g);
            const xk_woq_desc cd = to_c(g->d);
            const WoqArgs a = g->args(out);
            const xk_woq_args ca{a.A, a.C, a.bias, a.residual};
            XK_CAPI_OK(xk_woq_gemm(&cd, &ca, w.get()));
        });
    }
    c.bad.push_back([g, packed](Out out) {
        WoqDesc bd = g->d;
        bd.lda = g->d.K - 1;
        return must_throw([&] { woq_gemm(bd, g->args(out), *packed); }, "lda=");
    });
    c.bad.push_back([g, plan, packed](Out out) {
        WoqArgs a = g->args(out);
        a.A = nullptr;
        return must_throw([&] { plan->run(a, *packed); }, "A=null");
    });
    // A weight of another shape (the plan's N, K and type must match).
    WoqWeightDesc od = wd;
    od.N = wd.N + 16;
    od.zero_points = false;
    od.ld_w = 0;
    const Bytes oq = random_bytes(DType::u8, od.N * (u4 ? od.K / 2 : od.K), seed + 6);
    const std::vector<float> os = random_vec<float>(static_cast<size_t>(od.N * G), 0.002, 0.02, seed + 7);
    auto other = std::make_shared<const WoqPackedWeight>(woq_pack(od, WoqWeightArgs{oq.data(), os.data(), nullptr}));
    c.bad.push_back([g, plan, other](Out out) {
        return must_throw([&] { plan->run(g->args(out), *other); }, "weight=");
    });
    if (capi)
        c.bad.push_back([g, cw](Out out) {
            xk_woq_desc cd = to_c(g->d);
            cd.M = -1;
            const WoqArgs a = g->args(out);
            const xk_woq_args ca{a.A, a.C, a.bias, a.residual};
            return must_fail(xk_woq_gemm(&cd, &ca, cw.get()), "M=-1");
        });
    cases.push_back(std::move(c));
}

void add_woq_cases(std::vector<Case>& cases) {
    WoqWeightDesc wd;
    WoqDesc d;
    // int4, groups of 32, symmetric, decode (M = 1), f32.
    wd.N = 48, wd.K = 128, wd.type = WoqWeightType::u4, wd.group_size = 32;
    d.M = 1, d.N = 48, d.K = 128, d.weight_type = WoqWeightType::u4;
    add_woq(cases, "u4 g32 sym M=1 f32 48x128", d, wd, 9600);
    // int4, groups of 64 with zero points, M = 7, bf16 X -> f32 Y, bias + silu, bf16 residual.
    wd.N = 33, wd.K = 128, wd.group_size = 64, wd.zero_points = true;
    d = WoqDesc();
    d.M = 7, d.N = 33, d.K = 128, d.weight_type = WoqWeightType::u4, d.a_type = DType::bf16;
    d.epilogue.bias = true, d.epilogue.act = Activation::silu, d.epilogue.residual = true;
    d.residual_type = DType::bf16;
    add_woq(cases, "u4 g64 zp M=7 bf16->f32 33x128 bias silu bf16-residual", d, wd, 9700);
    // int8 per channel with zero points, strided rows, M = 7, bf16 X / Y, lda / ldc padded.
    wd = WoqWeightDesc();
    wd.N = 40, wd.K = 96, wd.type = WoqWeightType::s8, wd.zero_points = true, wd.ld_w = 100;
    d = WoqDesc();
    d.M = 7, d.N = 40, d.K = 96, d.weight_type = WoqWeightType::s8, d.a_type = d.c_type = DType::bf16;
    d.lda = 100, d.ldc = 41;
    add_woq(cases, "s8 per-channel zp M=7 bf16 40x96 ld_w/lda/ldc padded", d, wd, 9800);
    // int8-compute mode (X quantized per row inside the call, exact integer group sums).
    wd = WoqWeightDesc();
    wd.N = 48, wd.K = 128, wd.type = WoqWeightType::u4, wd.group_size = 32, wd.zero_points = true;
    d = WoqDesc();
    d.M = 7, d.N = 48, d.K = 128, d.weight_type = WoqWeightType::u4, d.compute = WoqCompute::int8;
    d.epilogue.bias = true;
    add_woq(cases, "int8-compute u4 g32 zp M=7 f32 48x128 bias", d, wd, 9900);
}

// ---- qconv --------------------------------------------------------------------------------------

struct QConvData {
    QConvDesc d;
    Bytes src;
    Bytes weights;  // s8
    std::vector<float> weight_scales, bias;
    float src_scale = 0.02f, dst_scale = 0.05f;
    int32_t src_zp = 0, dst_zp = 0;
    QConvArgs args(Out out) const {
        QConvArgs a;
        a.src = src.data();
        a.weights = reinterpret_cast<const int8_t*>(weights.data());
        a.bias = d.with_bias ? bias.data() : nullptr;
        a.dst = out;
        a.src_scale = src_scale, a.src_zero_point = src_zp;
        a.weight_scales = weight_scales.data();
        a.dst_scale = dst_scale, a.dst_zero_point = dst_zp;
        return a;
    }
};

xk_status qconv_capi(const QConvData& g, const QConvDesc& d, Out out) {
    xk_conv2d_desc c;
    xk_conv2d_desc_init(&c, d.n, d.c, d.h, d.w, d.oc, d.kh, d.kw);
    c.stride_h = d.stride_h, c.stride_w = d.stride_w;
    c.pad_top = d.pad_top, c.pad_bottom = d.pad_bottom, c.pad_left = d.pad_left, c.pad_right = d.pad_right;
    c.dilation_h = d.dilation_h, c.dilation_w = d.dilation_w;
    c.layout = XK_CONV_NHWC;
    c.weight_layout = XK_CONV_OHWI;
    c.activation = static_cast<xk_activation>(static_cast<int>(d.activation));
    const QConvArgs a = g.args(out);
    return xk_qconv2d(&c, static_cast<xk_dtype>(static_cast<int>(d.src_dtype)),
                      static_cast<xk_dtype>(static_cast<int>(d.dst_dtype)), a.src, a.src_scale, a.src_zero_point,
                      a.weights, a.weight_scales, a.bias, a.dst, a.dst_scale, a.dst_zero_point);
}

// QConvPlan (shared: packing per call, and with weights packed once and shared; local: packing
// its own), xk::qconv2d, xk_qconv2d. Integer sums are exact: every path gives the same bytes.
void add_qconv(std::vector<Case>& cases, const std::string& name, const QConvDesc& d, uint64_t seed) {
    auto g = std::make_shared<QConvData>();
    g->d = d;
    const int64_t oh = (d.h + d.pad_top + d.pad_bottom - d.dilation_h * (d.kh - 1) - 1) / d.stride_h + 1;
    const int64_t ow = (d.w + d.pad_left + d.pad_right - d.dilation_w * (d.kw - 1) - 1) / d.stride_w + 1;
    g->src = random_bytes(d.src_dtype, d.n * d.h * d.w * d.c, seed);
    g->weights = random_bytes(DType::s8, d.oc * d.kh * d.kw * d.c, seed + 1);
    g->weight_scales = random_vec<float>(static_cast<size_t>(d.oc), 0.001, 0.01, seed + 2);
    g->bias = random_vec<float>(static_cast<size_t>(d.oc), -2.0, 2.0, seed + 3);
    g->src_zp = d.src_dtype == DType::u8 ? 120 : -3;
    g->dst_zp = d.dst_dtype == DType::u8 ? 128 : (d.dst_dtype == DType::s8 ? 5 : 0);
    Case c(kQConv, name, static_cast<size_t>(d.n * oh * ow * d.oc) * dtype_size(d.dst_dtype));
    auto plan = std::make_shared<const QConvPlan>(d);
    auto packed = std::make_shared<const QConvPackedWeights>(plan->pack_weights(g->args(nullptr).weights));
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "QConvPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kSharedPlan, false, "QConvPlan::run(packed)", [g, plan, packed](Out out) {
        QConvArgs a = g->args(out);
        a.weights = nullptr;  // not read
        plan->run(a, *packed);
    });
    c.add(kLocalPlan, false, "local QConvPlan::pack_weights + run", [g](Out out) {
        const QConvPlan p(g->d);
        const QConvPackedWeights w = p.pack_weights(g->args(out).weights);
        p.run(g->args(out), w);
    });
    c.add(kOneShot, false, "xk::qconv2d", [g](Out out) { qconv2d(g->d, g->args(out)); });
    c.add(kOneShot, true, "xk_qconv2d", [g](Out out) { XK_CAPI_OK(qconv_capi(*g, g->d, out)); });
    c.bad.push_back([g, plan](Out out) {
        QConvArgs a = g->args(out);
        a.src_scale = 0.0f;
        return must_throw([&] { plan->run(a); }, "src_scale=");
    });
    // Packed weights of another descriptor (one more output channel).
    QConvDesc od = d;
    od.oc = d.oc + 1;
    const Bytes ow8 = random_bytes(DType::s8, od.oc * od.kh * od.kw * od.c, seed + 4);
    auto other = std::make_shared<const QConvPackedWeights>(QConvPlan(od).pack_weights(reinterpret_cast<const int8_t*>(ow8.data())));
    c.bad.push_back([g, plan, other](Out out) {
        return must_throw([&] { plan->run(g->args(out), *other); }, "packed_weights");
    });
    c.bad.push_back([g](Out out) {
        QConvDesc bd = g->d;
        bd.stride_h = 0;
        return must_fail(qconv_capi(*g, bd, out), "stride_h=0");
    });
    cases.push_back(std::move(c));
}

void add_qconv_cases(std::vector<Case>& cases) {
    {  // u8 -> u8 (requantized), 3x3 pad 1, bias + relu (im2col row blocks).
        QConvDesc d;
        d.n = 1, d.c = 8, d.h = 6, d.w = 7, d.oc = 16, d.kh = 3, d.kw = 3;
        d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
        d.src_dtype = DType::u8, d.dst_dtype = DType::u8;
        d.with_bias = true, d.activation = Activation::relu;
        add_qconv(cases, "u8->u8 1x8x6x7 oc16 3x3 pad1 bias relu", d, 10000);
    }
    {  // s8 -> f32, 1x1 stride 1 (the direct GEMM), 2 images.
        QConvDesc d;
        d.n = 2, d.c = 16, d.h = 4, d.w = 5, d.oc = 7;
        d.src_dtype = DType::s8, d.dst_dtype = DType::f32;
        add_qconv(cases, "s8->f32 2x16x4x5 oc7 1x1", d, 10100);
    }
    {  // u8 -> s8, 3x1 stride 2, asymmetric padding, dilation 2 in h, bias.
        QConvDesc d;
        d.n = 1, d.c = 5, d.h = 11, d.w = 6, d.oc = 9, d.kh = 3, d.kw = 1;
        d.stride_h = 2, d.pad_top = 2, d.pad_bottom = 1, d.dilation_h = 2;
        d.src_dtype = DType::u8, d.dst_dtype = DType::s8;
        d.with_bias = true;
        add_qconv(cases, "u8->s8 1x5x11x6 oc9 3x1 s2 d2 pad(2,1) bias", d, 10200);
    }
}

// ---- interaction --------------------------------------------------------------------------------

struct InterData {
    InteractionDesc d;
    int64_t batch = 0, out_dim = 0, ld_out = 0;
    std::vector<Bytes> feats;
    std::vector<int64_t> ld;         // per feature
    std::vector<const void*> fptr;   // into feats
    Bytes grad_out;                  // backward
    std::vector<size_t> off_grad;    // backward: grad_features[f] in the output buffer
    InteractionArgs args(Out out) const {
        InteractionArgs a;
        a.batch = batch;
        a.features = fptr.data();
        a.ld_features = ld.data();
        a.out = out;
        a.ld_out = ld_out;
        return a;
    }
    // grads: num_features pointers into out (the caller's storage)
    InteractionBackwardArgs bargs(Out out, std::vector<void*>& grads) const {
        grads.clear();
        for (size_t off : off_grad) grads.push_back(out + off);
        InteractionBackwardArgs a;
        a.batch = batch;
        a.features = fptr.data();
        a.ld_features = ld.data();
        a.grad_out = grad_out.data();
        a.ld_grad_out = ld_out;
        a.grad_features = grads.data();
        return a;
    }
};

xk_interaction_desc to_c(const InteractionDesc& d) {
    xk_interaction_desc c;
    c.num_features = d.num_features, c.dim = d.dim;
    c.dtype = static_cast<xk_dtype>(static_cast<int>(d.dtype));
    c.self_interaction = d.self_interaction ? 1 : 0;
    return c;
}

// Forward (backward = false: out rows of ld_out) or backward (the gradients of every feature,
// packed, from a grad_out of ld_out): InteractionPlan (shared / local), xk::interaction_*,
// xk_interaction_*. Features each with its own row stride (dim + 2f).
void add_interaction(std::vector<Case>& cases, const std::string& name, const InteractionDesc& d, int64_t batch,
                     int64_t ld_pad, bool backward, uint64_t seed) {
    auto g = std::make_shared<InterData>();
    g->d = d;
    g->batch = batch;
    auto plan = std::make_shared<const InteractionPlan>(d);
    g->out_dim = plan->out_dim();
    g->ld_out = g->out_dim + ld_pad;
    for (int64_t f = 0; f < d.num_features; ++f) {
        g->ld.push_back(d.dim + 2 * f);
        g->feats.push_back(random_bytes(d.dtype, batch * g->ld.back(), seed + static_cast<uint64_t>(f)));
    }
    for (const Bytes& b : g->feats) g->fptr.push_back(b.data());
    const size_t es = dtype_size(d.dtype);
    Layout l;
    if (backward) {
        g->grad_out = random_bytes(d.dtype, batch * g->ld_out, seed + 100);
        for (int64_t f = 0; f < d.num_features; ++f) g->off_grad.push_back(l.add(static_cast<size_t>(batch * d.dim) * es));
    } else {
        l.add(static_cast<size_t>(batch * g->ld_out) * es);
    }
    Case c(kInteraction, name, l.bytes);
    c.impl = plan->impl_name();
    if (!backward) {
        c.add(kSharedPlan, false, "InteractionPlan::forward", [g, plan](Out out) { plan->forward(g->args(out)); });
        c.add(kLocalPlan, false, "local InteractionPlan::forward",
              [g](Out out) { InteractionPlan(g->d).forward(g->args(out)); });
        c.add(kOneShot, false, "xk::interaction_forward", [g](Out out) { interaction_forward(g->d, g->args(out)); });
        c.add(kOneShot, true, "xk_interaction_forward", [g](Out out) {
            const xk_interaction_desc cd = to_c(g->d);
            XK_CAPI_OK(xk_interaction_forward(&cd, g->batch, g->fptr.data(), g->ld.data(), out, g->ld_out));
        });
        c.bad.push_back([g, plan](Out out) {
            InteractionArgs a = g->args(out);
            a.ld_out = g->out_dim - 1;
            return must_throw([&] { plan->forward(a); }, "ld_out=");
        });
        c.bad.push_back([g](Out out) {
            std::vector<const void*> f = g->fptr;
            f[1] = nullptr;
            InteractionArgs a = g->args(out);
            a.features = f.data();
            return must_throw([&] { interaction_forward(g->d, a); }, "features[1]=null");
        });
        c.bad.push_back([g](Out out) {
            xk_interaction_desc cd = to_c(g->d);
            cd.dim = 0;
            return must_fail(xk_interaction_forward(&cd, g->batch, g->fptr.data(), g->ld.data(), out, g->ld_out), "dim=0");
        });
    } else {
        c.add(kSharedPlan, false, "InteractionPlan::backward", [g, plan](Out out) {
            std::vector<void*> gr;
            plan->backward(g->bargs(out, gr));
        });
        c.add(kLocalPlan, false, "local InteractionPlan::backward", [g](Out out) {
            std::vector<void*> gr;
            InteractionPlan(g->d).backward(g->bargs(out, gr));
        });
        c.add(kOneShot, false, "xk::interaction_backward", [g](Out out) {
            std::vector<void*> gr;
            interaction_backward(g->d, g->bargs(out, gr));
        });
        c.add(kOneShot, true, "xk_interaction_backward", [g](Out out) {
            std::vector<void*> gr;
            const InteractionBackwardArgs a = g->bargs(out, gr);
            const xk_interaction_desc cd = to_c(g->d);
            XK_CAPI_OK(xk_interaction_backward(&cd, a.batch, a.features, a.ld_features, a.grad_out, a.ld_grad_out,
                                               a.grad_features, nullptr));
        });
        c.bad.push_back([g, plan](Out out) {
            std::vector<void*> gr;
            InteractionBackwardArgs a = g->bargs(out, gr);
            a.grad_out = nullptr;
            return must_throw([&] { plan->backward(a); }, "grad_out=null");
        });
        c.bad.push_back([g](Out out) {
            std::vector<void*> gr;
            const InteractionBackwardArgs a = g->bargs(out, gr);
            const xk_interaction_desc cd = to_c(g->d);
            return must_fail(xk_interaction_backward(&cd, a.batch, a.features, a.ld_features, a.grad_out,
                                                     g->out_dim - 1, a.grad_features, nullptr),
                             "ld_grad_out=");
        });
    }
    cases.push_back(std::move(c));
}

void add_interaction_cases(std::vector<Case>& cases) {
    InteractionDesc d;
    d.num_features = 4, d.dim = 16;
    add_interaction(cases, "forward f32 batch 5 N=4 D=16", d, 5, 0, false, 11000);
    d = InteractionDesc();
    d.num_features = 3, d.dim = 33, d.dtype = DType::bf16, d.self_interaction = true;
    add_interaction(cases, "forward bf16 batch 7 N=3 D=33 self ld_out+3", d, 7, 3, false, 11100);
    d = InteractionDesc();
    d.num_features = 5, d.dim = 17;
    add_interaction(cases, "backward f32 batch 6 N=5 D=17 ld_grad_out+1", d, 6, 1, true, 11200);
}

// ---- optim --------------------------------------------------------------------------------------

// One Lamb or AdamW step, in place: the output buffer holds param (+ param_lo), the states and
// (Lamb) the trust ratio; init holds their starting values, so every call takes the same step
// from the same state. lamb_step / adam_step and xk_lamb_step / xk_adam_step (f32 grads only).
void add_optim(std::vector<Case>& cases, const std::string& name, bool lamb, int64_t n, OptimParamType pt,
               DType grad_dtype, int64_t step, uint64_t seed, int every = 1) {
    struct Data {
        bool lamb = false;
        int64_t n = 0, step = 0;
        OptimParamType pt = OptimParamType::f32;
        DType gt = DType::f32;
        Bytes grad;
        size_t off_lo = 0, off_m = 0, off_v = 0, off_vmax = 0, off_trust = 0;
        LambOptions lo;
        AdamOptions ao;
        OptimTensors t(Out out) const {
            OptimTensors x;
            x.n = n;
            x.param_type = pt;
            x.param = out;
            x.param_lo = pt == OptimParamType::bf16_split ? at<uint16_t>(out, off_lo) : nullptr;
            x.grad_dtype = gt;
            x.grad = grad.data();
            return x;
        }
        xk_status capi(Out out, double lr) const {
            const OptimTensors x = t(out);
            const int ptc = pt == OptimParamType::f32 ? XK_OPTIM_PARAM_F32 : XK_OPTIM_PARAM_BF16_SPLIT;
            const auto* gr = static_cast<const float*>(x.grad);
            if (lamb) {
                xk_lamb_options o;
                xk_lamb_options_init(&o);
                o.lr = lr, o.beta1 = lo.beta1, o.beta2 = lo.beta2, o.eps = lo.eps, o.weight_decay = lo.weight_decay;
                return xk_lamb_step(&o, ptc, n, x.param, x.param_lo, gr, at<float>(out, off_m), at<float>(out, off_v),
                                    step, at<float>(out, off_trust));
            }
            xk_adam_options o;
            xk_adam_options_init(&o);
            o.lr = lr, o.beta1 = ao.beta1, o.beta2 = ao.beta2, o.eps = ao.eps, o.weight_decay = ao.weight_decay;
            o.adamw = ao.adamw, o.amsgrad = ao.amsgrad, o.maximize = ao.maximize;
            return xk_adam_step(&o, ptc, n, x.param, x.param_lo, gr, at<float>(out, off_m), at<float>(out, off_v),
                                ao.amsgrad ? at<float>(out, off_vmax) : nullptr, step);
        }
        void cpp(Out out, const LambOptions& l, const AdamOptions& a, int64_t s) const {
            if (lamb)
                *at<float>(out, off_trust) = lamb_step(l, t(out), at<float>(out, off_m), at<float>(out, off_v), s);
            else
                adam_step(a, t(out), at<float>(out, off_m), at<float>(out, off_v),
                          a.amsgrad ? at<float>(out, off_vmax) : nullptr, s);
        }
    };
    auto g = std::make_shared<Data>();
    g->lamb = lamb, g->n = n, g->step = step, g->pt = pt, g->gt = grad_dtype;
    g->lo.lr = 2e-2, g->lo.weight_decay = 0.01;
    g->ao.lr = 1e-2, g->ao.weight_decay = 0.05, g->ao.adamw = true, g->ao.amsgrad = true;
    g->grad = random_bytes(grad_dtype, n, seed);
    const bool split = pt == OptimParamType::bf16_split;
    const size_t un = static_cast<size_t>(n);
    Layout l;
    l.add(un * (split ? 2 : 4));
    if (split) g->off_lo = l.add(un * 2);
    g->off_m = l.add(un * 4);
    g->off_v = l.add(un * 4);
    if (!lamb) g->off_vmax = l.add(un * 4);
    if (lamb) g->off_trust = l.add(4);
    Case c(kOptim, name, l.bytes);
    c.every = every;
    // The starting state: parameters in [-1, 1] (split: f32 masters cut in halves), m in [-0.1,
    // 0.1], v (and vmax >= v) in [0, 0.01].
    const std::vector<float> p0 = random_vec<float>(un, -1.0, 1.0, seed + 1);
    for (size_t i = 0; i < un; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &p0[i], 4);
        if (split) {
            const uint16_t hi = static_cast<uint16_t>(bits >> 16), lo = static_cast<uint16_t>(bits & 0xffff);
            std::memcpy(c.init.data() + 2 * i, &hi, 2);
            std::memcpy(c.init.data() + g->off_lo + 2 * i, &lo, 2);
        } else {
            std::memcpy(c.init.data() + 4 * i, &bits, 4);
        }
    }
    const std::vector<float> m0 = random_vec<float>(un, -0.1, 0.1, seed + 2);
    const std::vector<float> v0 = random_vec<float>(un, 0.0, 0.01, seed + 3);
    std::memcpy(c.init.data() + g->off_m, m0.data(), un * 4);
    std::memcpy(c.init.data() + g->off_v, v0.data(), un * 4);
    if (!lamb) {
        std::vector<float> vmax = random_vec<float>(un, 0.0, 0.01, seed + 4);
        for (size_t i = 0; i < un; ++i) vmax[i] = std::max(vmax[i], v0[i]);
        std::memcpy(c.init.data() + g->off_vmax, vmax.data(), un * 4);
    }
    c.impl = lamb ? "xk::lamb_step" : "xk::adam_step";
    c.add(kOneShot, false, lamb ? "xk::lamb_step" : "xk::adam_step",
          [g](Out out) { g->cpp(out, g->lo, g->ao, g->step); });
    const bool capi = grad_dtype == DType::f32;
    if (capi)
        c.add(kOneShot, true, lamb ? "xk_lamb_step" : "xk_adam_step",
              [g](Out out) { XK_CAPI_OK(g->capi(out, g->lamb ? g->lo.lr : g->ao.lr)); });
    c.bad.push_back([g](Out out) {
        LambOptions l = g->lo;
        AdamOptions a = g->ao;
        l.beta2 = a.beta2 = 1.0;
        return must_throw([&] { g->cpp(out, l, a, g->step); }, "beta2=1");
    });
    c.bad.push_back([g](Out out) { return must_throw([&] { g->cpp(out, g->lo, g->ao, 0); }, "step=0"); });
    if (capi) c.bad.push_back([g](Out out) { return must_fail(g->capi(out, -0.5), "lr=-0.5"); });
    cases.push_back(std::move(c));
}

void add_optim_cases(std::vector<Case>& cases) {
    add_optim(cases, "lamb f32 n=1000 step 3", true, 1000, OptimParamType::f32, DType::f32, 3, 12000);
    // Two 64 Ki-element chunks of the norm sums: two threads. ~40x the cost of the others: every
    // 4th round.
    add_optim(cases, "lamb bf16-split n=70001 step 2", true, 70001, OptimParamType::bf16_split, DType::f32, 2, 12100, 4);
    add_optim(cases, "adamw amsgrad f32 n=333 step 5", false, 333, OptimParamType::f32, DType::f32, 5, 12200);
    add_optim(cases, "adamw amsgrad bf16-split bf16 grad n=77 step 1", false, 77, OptimParamType::bf16_split,
              DType::bf16, 1, 12300);
}

// ---- vision -------------------------------------------------------------------------------------

xk_roi_align_desc to_c(const RoiAlignDesc& d) {
    xk_roi_align_desc c;
    xk_roi_align_desc_init(&c, d.n, d.c, d.h, d.w, d.num_rois, d.pooled_h, d.pooled_w);
    c.spatial_scale = d.spatial_scale;
    c.sampling_ratio = d.sampling_ratio;
    c.aligned = d.aligned ? 1 : 0;
    c.layout = static_cast<xk_conv_layout>(static_cast<int>(d.layout));
    return c;
}

// ROIAlign: RoiAlignPlan (shared / local), xk::roi_align, xk_roi_align_*. Boxes inside the
// image, across its border and one far outside (every sample reads 0).
void add_roi_align(std::vector<Case>& cases, const std::string& name, const RoiAlignDesc& d, uint64_t seed) {
    struct Data {
        RoiAlignDesc d;
        Bytes src;
        std::vector<float> boxes, bad_boxes;
        RoiAlignArgs args(Out out, bool bad = false) const {
            return RoiAlignArgs{src.data(), bad ? bad_boxes.data() : boxes.data(), out};
        }
        xk_status capi(const xk_roi_align_desc& cd, Out out) const {
            if (d.dtype == DType::f32)
                return xk_roi_align_f32(&cd, reinterpret_cast<const float*>(src.data()), boxes.data(), at<float>(out, 0));
            return xk_roi_align_bf16(&cd, u16(src.data()), boxes.data(), at<uint16_t>(out, 0));
        }
    };
    auto g = std::make_shared<Data>();
    g->d = d;
    g->src = random_bytes(d.dtype, d.n * d.c * d.h * d.w, seed);
    std::mt19937_64 rng(seed + 1);
    auto u = [&](double lo, double hi) { return static_cast<float>(lo + (hi - lo) * (rng() % 10000) / 10000.0); };
    const float W = static_cast<float>(d.w) / d.spatial_scale, H = static_cast<float>(d.h) / d.spatial_scale;
    for (int64_t k = 0; k < d.num_rois; ++k) {
        const float x1 = u(-0.2 * W, 0.9 * W), y1 = u(-0.2 * H, 0.9 * H);
        float box[5] = {static_cast<float>(k % d.n), x1, y1, x1 + u(0.5, 0.6 * W), y1 + u(0.5, 0.6 * H)};
        if (k == d.num_rois - 1) box[1] = box[3] = 3 * W, box[2] = 2 * H, box[4] = 3 * H;  // outside
        g->boxes.insert(g->boxes.end(), box, box + 5);
    }
    g->bad_boxes = g->boxes;
    g->bad_boxes[5] = static_cast<float>(d.n);  // box 1: batch index out of range
    Case c(kVision, name, static_cast<size_t>(d.num_rois * d.c * d.pooled_h * d.pooled_w) * dtype_size(d.dtype));
    auto plan = std::make_shared<const RoiAlignPlan>(d);
    c.impl = plan->impl_name();
    c.add(kSharedPlan, false, "RoiAlignPlan::run", [g, plan](Out out) { plan->run(g->args(out)); });
    c.add(kLocalPlan, false, "local RoiAlignPlan::run", [g](Out out) { RoiAlignPlan(g->d).run(g->args(out)); });
    c.add(kOneShot, false, "xk::roi_align", [g](Out out) { roi_align(g->d, g->args(out)); });
    c.add(kOneShot, true, "xk_roi_align_*", [g](Out out) { XK_CAPI_OK(g->capi(to_c(g->d), out)); });
    c.bad.push_back([g, plan](Out out) { return must_throw([&] { plan->run(g->args(out, true)); }, "boxes[1][0]"); });
    c.bad.push_back([g](Out out) {
        RoiAlignDesc bd = g->d;
        bd.spatial_scale = 0.0f;
        return must_throw([&] { roi_align(bd, g->args(out)); }, "spatial_scale=");
    });
    c.bad.push_back([g](Out out) {
        xk_roi_align_desc cd = to_c(g->d);
        cd.pooled_h = 0;
        return must_fail(g->capi(cd, out), "pooled_h=0");
    });
    cases.push_back(std::move(c));
}

// NMS (plain or batched by class): xk::nms and xk_nms / xk_batched_nms. The output buffer holds
// the kept count and keep[] (entries past the count stay as they were).
void add_nms(std::vector<Case>& cases, const std::string& name, const NmsDesc& d, uint64_t seed) {
    struct Data {
        NmsDesc d;
        std::vector<float> boxes, scores;
        std::vector<int64_t> cls;
        size_t off_keep = 0;
        NmsArgs args(Out out) const {
            return NmsArgs{boxes.data(), scores.data(), d.batched ? cls.data() : nullptr, at<int64_t>(out, off_keep)};
        }
        xk_status capi(Out out, int64_t m) const {
            int64_t* keep = at<int64_t>(out, off_keep);
            int64_t* count = at<int64_t>(out, 0);
            if (d.batched)
                return xk_batched_nms(m, boxes.data(), scores.data(), cls.data(), d.iou_threshold, d.score_threshold,
                                      d.max_output, keep, count);
            return xk_nms(m, boxes.data(), scores.data(), d.iou_threshold, d.score_threshold, d.max_output, keep, count);
        }
    };
    auto g = std::make_shared<Data>();
    g->d = d;
    const int64_t M = d.num_boxes;
    std::mt19937_64 rng(seed);
    auto u = [&](double lo, double hi) { return static_cast<float>(lo + (hi - lo) * (rng() % 10000) / 10000.0); };
    for (int64_t i = 0; i < M; ++i) {  // clustered: many overlaps
        const float x = u(0, 40), y = u(0, 40), w = u(4, 20), h = u(4, 20);
        g->boxes.insert(g->boxes.end(), {x, y, x + w, y + h});
        g->scores.push_back(i % 9 == 4 ? g->scores[static_cast<size_t>(i - 1)] : u(0, 1));  // some ties
        g->cls.push_back(static_cast<int64_t>(rng() % 3));
    }
    const int64_t cap = d.max_output > 0 ? std::min(M, d.max_output) : M;
    Layout l;
    l.add(8);
    g->off_keep = l.add(static_cast<size_t>(cap) * 8);
    Case c(kVision, name, l.bytes);
    c.impl = nms_impl_name(d);
    c.add(kOneShot, false, "xk::nms", [g](Out out) { *at<int64_t>(out, 0) = nms(g->d, g->args(out)); });
    c.add(kOneShot, true, d.batched ? "xk_batched_nms" : "xk_nms", [g](Out out) { XK_CAPI_OK(g->capi(out, g->d.num_boxes)); });
    c.bad.push_back([g](Out out) {
        NmsDesc bd = g->d;
        bd.iou_threshold = std::numeric_limits<float>::quiet_NaN();
        return must_throw([&] { nms(bd, g->args(out)); }, "iou_threshold=nan");
    });
    c.bad.push_back([g](Out out) {
        NmsArgs a = g->args(out);
        a.keep = nullptr;
        return must_throw([&] { nms(g->d, a); }, "keep=null");
    });
    c.bad.push_back([g](Out out) { return must_fail(g->capi(out, -1), "num_boxes=-1"); });
    cases.push_back(std::move(c));
}

void add_vision_cases(std::vector<Case>& cases) {
    RoiAlignDesc r;
    r.n = 2, r.c = 3, r.h = 10, r.w = 12, r.num_rois = 5, r.pooled_h = 3, r.pooled_w = 3;
    r.spatial_scale = 0.5f, r.aligned = true;
    add_roi_align(cases, "roi_align f32 nchw 2x3x10x12 5 rois 3x3 scale 1/2 aligned adaptive", r, 13000);
    r = RoiAlignDesc();
    r.n = 1, r.c = 17, r.h = 9, r.w = 7, r.num_rois = 4, r.pooled_h = 2, r.pooled_w = 4;
    r.sampling_ratio = 2, r.layout = ConvLayout::nhwc, r.dtype = DType::bf16;
    add_roi_align(cases, "roi_align bf16 nhwc 1x17x9x7 4 rois 2x4 sampling 2", r, 13100);
    NmsDesc n;
    n.num_boxes = 40, n.iou_threshold = 0.3f;
    add_nms(cases, "nms 40 boxes iou 0.3", n, 13200);
    n = NmsDesc();
    n.num_boxes = 37, n.iou_threshold = 0.5f, n.score_threshold = 0.2f, n.max_output = 9, n.batched = true;
    add_nms(cases, "batched nms 37 boxes 3 classes score > 0.2 max 9", n, 13300);
}

// The seed of the randomised shapes (XK_SOAK_SEED=<n> for others; printed by the soak).
uint64_t soak_seed() {
    const char* e = std::getenv("XK_SOAK_SEED");
    return e && *e ? std::strtoull(e, nullptr, 10) : 20261127;
}

std::vector<Case> build_cases() {
    std::vector<Case> cases;
    std::mt19937_64 rng(soak_seed());
    add_gemm_cases(cases);
    add_conv_cases(cases);
    add_embedding_bag_cases(cases);
    add_norm_cases(cases);
    add_rope_cases(cases);
    add_quant_cases(cases);
    add_glu_cases(cases);
    add_softmax_cases(cases);
    add_axpby(cases, 1, 0.5f, -2.0f, 8000);
    add_axpby(cases, 17, 1.5f, 0.25f, 8100);
    add_axpby(cases, 70001, -0.75f, 1.0f, 8200);  // two chunks of 2^16: two threads
    add_attention_cases(cases);
    add_random_attention_cases(cases, rng);
    add_embedding_backward(cases, rng);
    add_woq_cases(cases);
    add_qconv_cases(cases);
    add_interaction_cases(cases);
    add_optim_cases(cases);
    add_vision_cases(cases);
    return cases;
}

// Per-thread tallies.
struct Tally {
    uint64_t calls[kFamilies][kKinds] = {};
    uint64_t capi[kFamilies] = {};
    uint64_t bad[kFamilies] = {};
    uint64_t clears = 0;
};

// Where out and want first differ.
std::string first_difference(const unsigned char* out, const Bytes& want, size_t n) {
    size_t first = n, count = 0;
    for (size_t i = 0; i < n; ++i)
        if (out[i] != want[i]) first = std::min(first, i), ++count;
    if (count == 0) return "no difference";
    char msg[160];
    std::snprintf(msg, sizeof msg, "%zu of %zu bytes differ, the first at %zu (got 0x%02x, want 0x%02x)", count, n,
                  first, out[first], want[first]);
    return msg;
}

void soak_thread(int tid, const std::vector<Case>& cases, int rounds, size_t max_bytes, const std::atomic<bool>& go,
                 Failures& fail, Tally& tally) {
    test::Buffer<unsigned char> buf(max_bytes);
    Out out = buf.data();
    std::mt19937_64 rng(7919 * static_cast<uint64_t>(tid) + 1);
    std::vector<size_t> order(cases.size());
    std::iota(order.begin(), order.end(), size_t{0});
    KernelCacheStats last{};
    uint64_t n = 0;
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    for (int round = 0; round < rounds; ++round) {
        // Round 0: every thread in the same order (the same cache keys at the same moment, the
        // cache just cleared); then each its own order.
        if (round > 0) std::shuffle(order.begin(), order.end(), rng);
        for (size_t i : order) {
            const Case& c = cases[i];
            if ((round + tid) % c.every != 0) continue;  // threads visit a heavy case in different rounds
            const Variant& v = c.variants[(static_cast<size_t>(tid) + static_cast<size_t>(round) + i) % c.variants.size()];
            auto where = [&] {
                return std::string(kFamilyName[c.family]) + " / " + c.name + " / " + v.name + " (thread " +
                       std::to_string(tid) + ", round " + std::to_string(round) + ")";
            };
            c.prepare(out);
            try {
                v.run(out);
                if (std::memcmp(out, c.expected.data(), c.out_bytes) != 0)
                    fail.add(where() + ": result differs from the single-threaded one: " +
                             first_difference(out, c.expected, c.out_bytes));
            } catch (const std::exception& e) {
                fail.add(where() + ": threw " + e.what());
            }
            ++tally.calls[c.family][v.kind];
            if (v.capi) ++tally.capi[c.family];
            ++n;
            if ((n + static_cast<uint64_t>(tid)) % kBadEvery == 0 && !c.bad.empty()) {
                const BadCall& bad = c.bad[(n / kBadEvery) % c.bad.size()];
                c.prepare(out);
                std::string why;
                try {
                    why = bad(out);
                } catch (const std::exception& e) {
                    why = std::string("threw ") + e.what();
                }
                if (!why.empty()) fail.add(where() + ": failing call #" + std::to_string((n / kBadEvery) % c.bad.size()) + ": " + why);
                if (std::memcmp(out, c.init.data(), c.out_bytes) != 0)
                    fail.add(where() + ": failing call #" + std::to_string((n / kBadEvery) % c.bad.size()) +
                             " wrote the output: " + first_difference(out, c.init, c.out_bytes));
                ++tally.bad[c.family];
            }
            if (tid == 0 && n % kClearEvery == 0) {
                // Plans hold their kernels: clearing under running plans and one-shot calls is safe.
                const KernelCacheStats s = kernel_cache_stats();
                if (s.size > s.capacity || s.hits < last.hits || s.creations < last.creations ||
                    s.evictions < last.evictions)
                    fail.add("kernel_cache_stats went backwards or over capacity: hits " + std::to_string(s.hits) +
                             " creations " + std::to_string(s.creations) + " size " + std::to_string(s.size) +
                             " capacity " + std::to_string(s.capacity));
                last = s;
                clear_kernel_cache();
                ++tally.clears;
            }
        }
    }
}

}  // namespace

TEST(Soak, AllFamiliesSixteenThreads) {
    const auto t0 = std::chrono::steady_clock::now();
    const int rounds = soak_rounds();
    set_num_threads(kLibThreads);
    std::vector<Case> cases = build_cases();
    size_t max_bytes = 0;
    for (const Case& c : cases) max_bytes = std::max(max_bytes, c.out_bytes);

    // Expected results, single-threaded: the first variant, twice (the same bits), then every
    // other variant must agree with it bit for bit, and each failing call must fail cleanly.
    test::Buffer<unsigned char> buf(max_bytes);
    Out out = buf.data();
    for (Case& c : cases) {
        SCOPED_TRACE(std::string(kFamilyName[c.family]) + " / " + c.name + " [" + c.impl + "]");
        ASSERT_FALSE(c.variants.empty());
        c.prepare(out);
        ASSERT_NO_THROW(c.variants[0].run(out)) << c.variants[0].name;
        c.expected.assign(out, out + c.out_bytes);
        // The op wrote something (a result equal to the initial bytes would prove nothing).
        EXPECT_NE(std::memcmp(c.expected.data(), c.init.data(), c.out_bytes), 0) << "output untouched";
        for (const Variant& v : c.variants) {
            c.prepare(out);
            ASSERT_NO_THROW(v.run(out)) << v.name;
            EXPECT_EQ(std::memcmp(out, c.expected.data(), c.out_bytes), 0)
                << v.name << " differs from " << c.variants[0].name << ": "
                << first_difference(out, c.expected, c.out_bytes);
        }
        for (size_t b = 0; b < c.bad.size(); ++b) {
            c.prepare(out);
            EXPECT_EQ(c.bad[b](out), "") << "failing call #" << b;
            EXPECT_EQ(std::memcmp(out, c.init.data(), c.out_bytes), 0) << "failing call #" << b << " wrote the output";
        }
    }
    ASSERT_FALSE(HasFailure()) << "the single-threaded baseline is wrong; no soak";

    // The soak: the cache starts empty, so round 0 has all 16 threads creating the same kernels.
    clear_kernel_cache();
    const KernelCacheStats before = kernel_cache_stats();
    Failures fail;
    std::vector<Tally> tallies(kThreads);
    std::atomic<bool> go{false};
    const auto t1 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back(soak_thread, t, std::cref(cases), rounds, max_bytes, std::cref(go), std::ref(fail),
                             std::ref(tallies[static_cast<size_t>(t)]));
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    const auto t2 = std::chrono::steady_clock::now();
    const KernelCacheStats after = kernel_cache_stats();

    Tally sum;
    for (const Tally& t : tallies) {
        for (int f = 0; f < kFamilies; ++f) {
            for (int k = 0; k < kKinds; ++k) sum.calls[f][k] += t.calls[f][k];
            sum.capi[f] += t.capi[f];
            sum.bad[f] += t.bad[f];
        }
        sum.clears += t.clears;
    }
    uint64_t total = 0;
    for (int f = 0; f < kFamilies; ++f) {
        int ncases = 0;
        for (const Case& c : cases) ncases += c.family == f;
        const uint64_t calls = sum.calls[f][kSharedPlan] + sum.calls[f][kLocalPlan] + sum.calls[f][kOneShot];
        total += calls + sum.bad[f];
        std::printf("[soak] %-13s %2d cases: %6llu calls (shared plan %llu, local plan %llu, one-shot %llu; C API %llu "
                    "of them) + %llu failing calls\n",
                    kFamilyName[f], ncases, static_cast<unsigned long long>(calls),
                    static_cast<unsigned long long>(sum.calls[f][kSharedPlan]),
                    static_cast<unsigned long long>(sum.calls[f][kLocalPlan]),
                    static_cast<unsigned long long>(sum.calls[f][kOneShot]), static_cast<unsigned long long>(sum.capi[f]),
                    static_cast<unsigned long long>(sum.bad[f]));
        EXPECT_GT(calls, 0u) << kFamilyName[f];
    }
    const double setup_s = std::chrono::duration<double>(t1 - t0).count();
    const double soak_s = std::chrono::duration<double>(t2 - t1).count();
    std::printf("[soak] %d threads x %d rounds, %d library threads, shapes of seed %llu: %llu calls in %.2f s (setup "
                "%.2f s); %llu cache clears, kernels created %llu, cache hits %llu\n",
                kThreads, rounds, kLibThreads, static_cast<unsigned long long>(soak_seed()),
                static_cast<unsigned long long>(total), soak_s, setup_s,
                static_cast<unsigned long long>(sum.clears),
                static_cast<unsigned long long>(after.creations - before.creations),
                static_cast<unsigned long long>(after.hits - before.hits));
    if (std::getenv("XK_SOAK_VERBOSE"))
        for (const Case& c : cases) std::printf("[soak]   %-13s %-60s %s\n", kFamilyName[c.family], c.name.c_str(), c.impl.c_str());

    EXPECT_EQ(fail.count(), 0) << fail.count() << " failures in the soak threads:" << fail.summary();
    EXPECT_GT(sum.clears, 0u);
    // The cache was cleared under the threads: kernels were created again, and shared.
    EXPECT_GT(after.creations, before.creations);
    EXPECT_GT(after.hits, before.hits);
    EXPECT_LE(after.size, after.capacity);
    set_num_threads(0);
}

// xk_last_error() is per thread: threads making failing calls (each with its own bad value) keep
// seeing their own message while the others succeed and see "".
TEST(Soak, CApiLastErrorIsPerThread) {
    // The main thread's own failure first: the threads below must not change what it sees.
    ASSERT_EQ(xk_axpby(-999, 1.0f, nullptr, 1.0f, nullptr), XK_INVALID_ARGUMENT);
    const std::string main_message = xk_last_error();
    ASSERT_NE(main_message.find("n=-999"), std::string::npos) << main_message;
    Failures fail;
    std::atomic<bool> go{false};
    std::atomic<uint64_t> calls{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            std::vector<float> x = random_vec<float>(33, -1.0, 1.0, 100 + t), y(33, 0.0f);
            const std::vector<float> sx = random_vec<float>(2 * 17, -1.0, 1.0, 200 + t);
            std::vector<float> sy(2 * 17);
            const int64_t bad_n = -(1000 + t);
            const std::string mine_axpby = "n=" + std::to_string(bad_n);
            const float bad_scale = -static_cast<float>(t + 1) - 0.5f;  // "-1.5" is no prefix of "-10.5"
            const std::string mine_softmax = "scale=-" + std::to_string(t + 1) + ".5";
            uint64_t n = 0;
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            for (int i = 0; i < kLastErrorIters; ++i) {
                const bool failing = (t + i / 8) % 2 == 0;  // each thread alternates phases, half fail at a time
                if (failing) {
                    const bool soft = i % 3 == 0;
                    const xk_status st = soft ? xk_softmax_f32(2, 17, sx.data(), 0, sy.data(), 0, bad_scale, 0, 0)
                                              : xk_axpby(bad_n, 1.0f, x.data(), 1.0f, y.data());
                    const std::string& mine = soft ? mine_softmax : mine_axpby;
                    if (st != XK_INVALID_ARGUMENT) fail.add("thread " + std::to_string(t) + ": failing call returned " + std::to_string(st));
                    for (int k = 0; k < 3; ++k) {
                        const std::string m = xk_last_error();
                        if (m.find(mine) == std::string::npos)
                            fail.add("thread " + std::to_string(t) + ": xk_last_error() '" + m + "' is not its own ('" + mine + "')");
                        std::this_thread::yield();
                    }
                    n += 1;
                } else {
                    const xk_status st = i % 2 ? xk_axpby(33, 0.5f, x.data(), 0.5f, y.data())
                                               : xk_softmax_f32(2, 17, sx.data(), 0, sy.data(), 0, 0.5f, 0, 0);
                    if (st != XK_SUCCESS) fail.add("thread " + std::to_string(t) + ": good call returned " + std::to_string(st) + ": " + xk_last_error());
                    std::this_thread::yield();
                    const std::string m = xk_last_error();
                    if (!m.empty()) fail.add("thread " + std::to_string(t) + ": xk_last_error() after success is '" + m + "'");
                    n += 1;
                }
            }
            calls.fetch_add(n);
        });
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    std::printf("[soak] xk_last_error: %d threads, %llu C calls (half failing, each thread its own message)\n", kThreads,
                static_cast<unsigned long long>(calls.load()));
    EXPECT_EQ(fail.count(), 0) << fail.summary();
    EXPECT_EQ(calls.load(), static_cast<uint64_t>(kThreads) * kLastErrorIters);
    EXPECT_EQ(xk_last_error(), main_message);
    const float one = 1.0f;
    float y1 = 0.0f;
    ASSERT_EQ(xk_axpby(1, 1.0f, &one, 0.0f, &y1), XK_SUCCESS);  // a success clears it
    EXPECT_STREQ(xk_last_error(), "");
}
