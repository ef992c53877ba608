// GEMM: xk beside oneDNN (matmul), OpenBLAS (cblas_sgemm) and libxsmm (small f32 kernels), on the
// same data and thread count. (Debian's OpenBLAS is built without BUILD_BFLOAT16, so it has no
// cblas_sbgemm: the bf16 peer is oneDNN alone; int8 likewise.)
//
// Names: gemm/<dtype>/<provider>/<MxNxK>[_bias_gelu|_prepacked]/threads:<t>   (_bias_gelu: the
//        fused bias + gelu_erf epilogue; oneDNN with a bias and an eltwise post-op; _prepacked:
//        B packed once outside the loop, xk's PackedB beside oneDNN's reordered weights)
//   dtype     f32 (f32 x f32 -> f32), bf16 (bf16 x bf16 -> f32), u8s8s32 (u8 x s8 -> s32)
//   provider  xk, onednn, openblas, libxsmm, xk_tuned (f32, 256^3 and larger but 4096^3: a plan
//             made with xk::set_gemm_autotune on, which times xk's kernel against oneDNN once and
//             runs the faster; the label says which and how long the timing plan took to build)
//   threads   1 or 2: xk::set_num_threads, omp_set_num_threads (oneDNN's OpenMP runtime, set
//             before its primitive is created) and openblas_set_num_threads; libxsmm's
//             small-matrix kernels are single-threaded, so they run with threads:1 only.
// Counter GFLOPS = 2 M N K / wall time (every benchmark uses real time).
//
// Every provider reads the same row-major A (M x K) and B (K x N) and writes its own C; B is in
// its plain layout for everyone (xk runs GemmPlan::run without a PackedB, oneDNN gets plain
// `ab` weights), alpha = 1, beta = 0. Once per benchmark, outside the timed loop, a peer's C is
// compared with xk's (shapes up to 256^3): a mismatch is reported with SkipWithError. The u8 data
// is 7-bit (0..127): oneDNN's AVX2 int8 GEMM saturates pairs of u8*s8 products to s16 (vpmaddubsw)
// and so differs from the exact s32 sum on full-range u8 input.
// xk's f32 GEMM runs the JIT kernels (the label names the implementation the plan selected);
// bf16 runs the blocked JIT kernel (A and B widened to f32 as they are packed; the reference for
// M = 1 with N <= 16, M = 2 with N <= 8, M N K <= 64); int8 is still the scalar reference: expect it to be slow.
//
// bf16 beside fp32 and oneDNN (`_paired`): gemm/bf16/xk/<MxNxK>_paired/threads:<t> runs, call by
// call in turn, xk's bf16 -> f32 plan, xk's f32 plan of the same shape (f32 data) and oneDNN's
// bf16 -> f32 matmul (plain `ab` weights), each timed on its own (manual time = the bf16 calls);
// counters GFLOPS (xk bf16), F32_GFLOPS (xk f32), ONEDNN_GFLOPS (oneDNN bf16, when it can create
// one: it throws on AVX2-only CPUs or under ONEDNN_MAX_CPU_ISA=AVX2, and its reference `ref:any`
// is timed only up to 512^3), bf16/f32 and bf16/onednn (ratios). Alternating gives the three the
// same phases of a shared host. Thread counts from XK_BENCH_THREADS (default 1,2); the label names
// xk's kernel and oneDNN's implementation. xk's bf16 C is compared with oneDNN's (SkipWithError if
// they differ by more than 1e-4 |C|max: both sum exact bf16 products in fp32).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <libxsmm.h>

#include <immintrin.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "bench_util.hpp"
#include "common/parallel.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

namespace {

struct Shape {
    int64_t M, N, K;
    std::string name() const { return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K); }
    double flops() const { return 2.0 * double(M) * double(N) * double(K); }
};

const std::vector<Shape> kShapes = {{8, 8, 8}, {16, 16, 16},  {32, 32, 32},    {64, 64, 64},     {23, 23, 23},  {32, 64, 16},
                                    {256, 256, 256}, {1024, 1024, 1024}, {384, 3072, 768}, {1, 4096, 4096}};
// fp32 only (the bf16 / int8 kinds run on xk's scalar reference, far too slow for these): the
// cubes of issue 3 and BERT-base's other Linear shape.
const std::vector<Shape> kF32Extra = {{512, 512, 512}, {2048, 2048, 2048}, {4096, 4096, 4096}, {384, 768, 768}};
// The fused bias + gelu_erf epilogue (the BERT FFN up-projection), beside the plain GEMM above.
const Shape kFused = {384, 3072, 768};
// Weights packed once (a Linear layer's production path): BERT-base's two Linear shapes and 1024^3.
const std::vector<Shape> kPrepacked = {{1024, 1024, 1024}, {384, 768, 768}, {384, 3072, 768}};
const Shape kExtraLowPrecision = {128, 128, 128};

enum class Kind { f32, bf16, u8s8s32 };
const char* kind_name(Kind k) { return k == Kind::f32 ? "f32" : k == Kind::bf16 ? "bf16" : "u8s8s32"; }

// Inputs of one (kind, shape), generated once and shared by every provider.
struct Data {
    Shape s;
    std::vector<float> A, B;               // f32
    std::vector<xk::bf16> Ah, Bh;          // bf16
    std::vector<uint8_t> Au;               // u8
    std::vector<int8_t> Bs;                // s8
    std::vector<float> want_f;             // xk's C (f32 / bf16 kinds), for the peers' check
    std::vector<int32_t> want_i;           // xk's C (u8s8s32)
    bool have_want = false;
};

std::mutex g_mu;

Data& data(Kind k, const Shape& s) {
    static std::map<std::string, std::unique_ptr<Data>> cache;
    std::lock_guard<std::mutex> lock(g_mu);
    auto& slot = cache[std::string(kind_name(k)) + s.name()];
    if (slot) return *slot;
    slot = std::make_unique<Data>();
    Data& d = *slot;
    d.s = s;
    std::mt19937_64 g(12345);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const size_t na = size_t(s.M * s.K), nb = size_t(s.K * s.N);
    if (k == Kind::f32) {
        d.A.resize(na), d.B.resize(nb);
        for (float& v : d.A) v = u(g);
        for (float& v : d.B) v = u(g);
    } else if (k == Kind::bf16) {
        d.Ah.resize(na), d.Bh.resize(nb);
        for (auto& v : d.Ah) v = xk::bf16(u(g));
        for (auto& v : d.Bh) v = xk::bf16(u(g));
    } else {
        // 7-bit A: peers that multiply with vpmaddubsw (AVX2 / AVX-512 without VNNI, oneDNN 2.6
        // included) saturate each pair of u8*s8 products to s16, which full-range u8 data overflows.
        std::uniform_int_distribution<int> ua(0, 127), ub(-128, 127);
        d.Au.resize(na), d.Bs.resize(nb);
        for (auto& v : d.Au) v = static_cast<uint8_t>(ua(g));
        for (auto& v : d.Bs) v = static_cast<int8_t>(ub(g));
    }
    return d;
}

xk::GemmDesc xk_desc(Kind k, const Shape& s) {
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    if (k == Kind::bf16) d.a_type = d.b_type = xk::DType::bf16;
    if (k == Kind::u8s8s32) d.a_type = xk::DType::u8, d.b_type = xk::DType::s8, d.c_type = xk::DType::s32;
    return d;
}

xk::GemmArgs xk_args(Kind k, const Data& d, void* C) {
    xk::GemmArgs a;
    a.A = k == Kind::f32 ? static_cast<const void*>(d.A.data())
          : k == Kind::bf16 ? static_cast<const void*>(d.Ah.data())
                            : static_cast<const void*>(d.Au.data());
    a.B = k == Kind::f32 ? static_cast<const void*>(d.B.data())
          : k == Kind::bf16 ? static_cast<const void*>(d.Bh.data())
                            : static_cast<const void*>(d.Bs.data());
    a.C = C;
    return a;
}

void set_threads(int t) {
    xk::set_num_threads(t);
#if defined(_OPENMP)
    omp_set_num_threads(t);
#endif
    openblas_set_num_threads(t);
}

bool checked(const Shape& s) { return double(s.M) * double(s.N) * double(s.K) <= 256.0 * 256.0 * 256.0; }

// xk's result, computed once, for the peers' check.
void ensure_want(Kind k, Data& d) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (d.have_want) return;
    const size_t nc = size_t(d.s.M * d.s.N);
    if (k == Kind::u8s8s32) {
        d.want_i.resize(nc);
        xk::gemm(xk_desc(k, d.s), xk_args(k, d, d.want_i.data()));
    } else {
        d.want_f.resize(nc);
        xk::gemm(xk_desc(k, d.s), xk_args(k, d, d.want_f.data()));
    }
    d.have_want = true;
}

// Compares a peer's C with xk's; on mismatch marks the benchmark as failed.
template <class T>
void check_result(benchmark::State& state, Kind k, Data& d, const std::vector<T>& got) {
    if (!checked(d.s)) return;
    ensure_want(k, d);
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double w = k == Kind::u8s8s32 ? double(d.want_i[i]) : double(d.want_f[i]);
        max_err = std::max(max_err, std::fabs(double(got[i]) - w));
        max_ref = std::max(max_ref, std::fabs(w));
    }
    const double tol = k == Kind::u8s8s32 ? 0.0 : 1e-4 * std::max(1.0, max_ref);
    if (max_err > tol)
        state.SkipWithError(("result differs from xk's: max |diff| = " + std::to_string(max_err)).c_str());
}

// Rows that carry Peak% (xk::bench::PeakYardstick: an FMA loop run between the calls): f32 and
// large enough (>= 10^8 flops a call) that the paused timer's cost is nothing beside a call.
bool peak_row(Kind k, const Shape& s) { return k == Kind::f32 && s.flops() >= 1e8; }

// The timed loop of a row: call() once an iteration; on Peak% rows the FMA yardstick runs between
// the calls with the timer paused.
template <class F>
void timed_calls(benchmark::State& state, Kind k, const Shape& s, F&& call) {
    xk::bench::PeakYardstick peak(state, peak_row(k, s), s.flops());
    for (auto _ : state) {
        peak.begin();
        call();
        peak.end();
        benchmark::ClobberMemory();
    }
    peak.finish();
}

void finish(benchmark::State& state, const Shape& s) {
    state.counters["GFLOPS"] = benchmark::Counter(s.flops() * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- providers -------------------------------------------------------------------------------

void bench_xk(benchmark::State& state, Kind k, Shape s, int threads) {
    set_threads(threads);
    Data& d = data(k, s);
    const xk::GemmPlan plan(xk_desc(k, s));
    std::vector<float> Cf(k == Kind::u8s8s32 ? 0 : size_t(s.M * s.N));
    std::vector<int32_t> Ci(k == Kind::u8s8s32 ? size_t(s.M * s.N) : 0);
    const xk::GemmArgs args = xk_args(k, d, k == Kind::u8s8s32 ? static_cast<void*>(Ci.data()) : Cf.data());
    timed_calls(state, k, s, [&] { plan.run(args); });
    state.SetLabel(plan.impl_name());
    finish(state, s);
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// xk with measured routing (xk::set_gemm_autotune): the plan times its kernel against oneDNN's
// matmul once per shape and thread count (the first construction in the process; later ones read
// the decision) and runs the faster. Label: the implementation it runs, and what tuning cost.
void bench_xk_tuned(benchmark::State& state, Kind k, Shape s, int threads) {
    set_threads(threads);
    Data& d = data(k, s);
    xk::set_gemm_autotune(true);
    const double t0 = now_ms();
    const xk::GemmPlan plan(xk_desc(k, s));
    const double ms = now_ms() - t0;
    xk::set_gemm_autotune(false);
    static std::map<std::string, double> first_ms;  // the construction that timed (benchmarks run one at a time)
    const double tune_ms = first_ms.emplace(s.name() + "/" + std::to_string(threads), ms).first->second;
    std::vector<float> C(size_t(s.M * s.N));
    const xk::GemmArgs args = xk_args(k, d, C.data());
    for (auto _ : state) {
        plan.run(args);
        benchmark::ClobberMemory();
    }
    check_result(state, k, d, C);
    char label[96];
    std::snprintf(label, sizeof label, "%s (tuned; plan took %.1f ms)", plan.impl_name(), tune_ms);
    state.SetLabel(label);
    finish(state, s);
}

void bench_onednn(benchmark::State& state, Kind k, Shape s, int threads) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    set_threads(threads);
    Data& d = data(k, s);
    const dt at = k == Kind::f32 ? dt::f32 : k == Kind::bf16 ? dt::bf16 : dt::u8;
    const dt bt = k == Kind::f32 ? dt::f32 : k == Kind::bf16 ? dt::bf16 : dt::s8;
    const dt ct = k == Kind::u8s8s32 ? dt::s32 : dt::f32;
    std::vector<float> Cf(k == Kind::u8s8s32 ? 0 : size_t(s.M * s.N));
    std::vector<int32_t> Ci(k == Kind::u8s8s32 ? size_t(s.M * s.N) : 0);
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, at, tag::ab), b_md({s.K, s.N}, bt, tag::ab),
            c_md({s.M, s.N}, ct, tag::ab);
        dnnl::matmul::primitive_desc pd;
        try {
            pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), eng);
        } catch (const dnnl::error&) {
            if (k == Kind::bf16) {
                state.SkipWithError("oneDNN has no bf16 matmul on this CPU");
                return;
            }
            throw;
        }
        const dnnl::matmul prim(pd);
        const xk::GemmArgs a = xk_args(k, d, nullptr);
        dnnl::memory am(a_md, eng, const_cast<void*>(a.A)), bm(b_md, eng, const_cast<void*>(a.B));
        dnnl::memory cm(c_md, eng, k == Kind::u8s8s32 ? static_cast<void*>(Ci.data()) : Cf.data());
        const std::unordered_map<int, dnnl::memory> margs = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        timed_calls(state, k, s, [&] {
            prim.execute(strm, margs);
            strm.wait();
        });
        state.SetLabel(pd.impl_info_str());
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
        return;
    }
    finish(state, s);
    if (k == Kind::u8s8s32)
        check_result(state, k, d, Ci);
    else
        check_result(state, k, d, Cf);
}

void bench_openblas(benchmark::State& state, Kind k, Shape s, int threads) {
    set_threads(threads);
    Data& d = data(k, s);
    std::vector<float> C(size_t(s.M * s.N));
    const auto M = blasint(s.M), N = blasint(s.N), K = blasint(s.K);
    timed_calls(state, k, s, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, d.A.data(), K, d.B.data(), N, 0.0f,
                    C.data(), N);
    });
    finish(state, s);
    check_result(state, k, d, C);
}

// libxsmm is column-major: row-major C = A B is column-major C^T = B^T A^T, i.e. a column-major
// GEMM with m = N, n = M, k = K, "A" = our B (ld N), "B" = our A (ld K), ldc = N.
void bench_libxsmm(benchmark::State& state, Kind, Shape s, int threads) {
    static const bool init = [] {
        libxsmm_init();
        return true;
    }();
    (void)init;
    set_threads(threads);
    Data& d = data(Kind::f32, s);
    std::vector<float> C(size_t(s.M * s.N));
    const libxsmm_blasint m = s.N, n = s.M, k = s.K, lda = s.N, ldb = s.K, ldc = s.N;
    const float alpha = 1.0f, beta = 0.0f;
    const libxsmm_smmfunction kernel = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, nullptr, nullptr);
    if (!kernel) {
        state.SkipWithError("libxsmm could not generate this kernel");
        return;
    }
    for (auto _ : state) {
        kernel(d.B.data(), d.A.data(), C.data());
        benchmark::ClobberMemory();
    }
    finish(state, s);
    check_result(state, Kind::f32, d, C);
}

// Prepacked weights (`_prepacked`): B packed once outside the timed loop, as a Linear layer's
// weight is (ipex.optimize / oneDNN's reordered weights): xk runs GemmPlan::run(args, PackedB),
// oneDNN its matmul with weights in the format it prefers (tag any, reordered once). The same A,
// B, and the result is checked against xk's unpacked C (shapes up to 256^3, as above).
void bench_xk_prepacked(benchmark::State& state, Kind k, Shape s, int threads) {
    set_threads(threads);
    Data& d = data(k, s);
    const xk::GemmPlan plan(xk_desc(k, s));
    const xk::PackedB w = plan.pack_b(d.B.data());
    std::vector<float> C(size_t(s.M * s.N));
    xk::GemmArgs args = xk_args(k, d, C.data());
    args.B = nullptr;
    timed_calls(state, k, s, [&] { plan.run(args, w); });
    state.SetLabel(plan.impl_name());
    finish(state, s);
    check_result(state, k, d, C);
}

void bench_onednn_prepacked(benchmark::State& state, Kind k, Shape s, int threads) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    set_threads(threads);
    Data& d = data(k, s);
    std::vector<float> C(size_t(s.M * s.N));
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, dt::f32, tag::ab), b_plain({s.K, s.N}, dt::f32, tag::ab),
            b_any({s.K, s.N}, dt::f32, tag::any), c_md({s.M, s.N}, dt::f32, tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
        const dnnl::matmul prim(pd);
        dnnl::memory am(a_md, eng, d.A.data()), plain(b_plain, eng, d.B.data()), cm(c_md, eng, C.data());
        dnnl::memory bm = plain;
        if (pd.weights_desc() != b_plain) {
            bm = dnnl::memory(pd.weights_desc(), eng);
            dnnl::reorder(plain, bm).execute(strm, plain, bm);
            strm.wait();
        }
        const std::unordered_map<int, dnnl::memory> margs = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        timed_calls(state, k, s, [&] {
            prim.execute(strm, margs);
            strm.wait();
        });
        state.SetLabel(pd.impl_info_str());
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
        return;
    }
    finish(state, s);
    check_result(state, k, d, C);
}

// Bias + gelu_erf fused into the GEMM: xk's epilogue, oneDNN's matmul with a bias and an
// eltwise_gelu_erf post-op. (OpenBLAS has no epilogue: it would need a second pass.)
std::vector<float>& fused_bias(int64_t n) {
    static std::vector<float> b;
    std::lock_guard<std::mutex> lock(g_mu);
    if (static_cast<int64_t>(b.size()) != n) {
        b.resize(size_t(n));
        std::mt19937_64 g(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& v : b) v = u(g);
    }
    return b;
}

void bench_xk_fused(benchmark::State& state, Kind k, Shape s, int threads) {
    set_threads(threads);
    Data& d = data(k, s);
    xk::GemmDesc desc = xk_desc(k, s);
    desc.epilogue.bias = true;
    desc.epilogue.act = xk::Activation::gelu_erf;
    const xk::GemmPlan plan(desc);
    std::vector<float> C(size_t(s.M * s.N));
    xk::GemmArgs args = xk_args(k, d, C.data());
    args.bias = fused_bias(s.N).data();
    timed_calls(state, k, s, [&] { plan.run(args); });
    state.SetLabel(plan.impl_name());
    finish(state, s);
}

void bench_onednn_fused(benchmark::State& state, Kind k, Shape s, int threads) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    set_threads(threads);
    Data& d = data(k, s);
    std::vector<float> C(size_t(s.M * s.N));
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, dt::f32, tag::ab), b_md({s.K, s.N}, dt::f32, tag::ab),
            bias_md({1, s.N}, dt::f32, tag::ab), c_md({s.M, s.N}, dt::f32, tag::ab);
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
        dnnl::primitive_attr attr;
        attr.set_post_ops(po);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, eng);
        const dnnl::matmul prim(pd);
        dnnl::memory am(a_md, eng, d.A.data()), bm(b_md, eng, d.B.data()), biasm(bias_md, eng, fused_bias(s.N).data()),
            cm(c_md, eng, C.data());
        const std::unordered_map<int, dnnl::memory> margs = {
            {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}};
        timed_calls(state, k, s, [&] {
            prim.execute(strm, margs);
            strm.wait();
        });
        state.SetLabel(pd.impl_info_str());
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
        return;
    }
    finish(state, s);
}


// ---- bf16 beside fp32 and oneDNN, interleaved (`_paired`, see the top) -----------------------------

const std::vector<Shape> kBf16Paired = {{512, 512, 512},  {1024, 1024, 1024}, {2048, 2048, 2048},
                                        {384, 768, 768}, {384, 3072, 768},   {384, 768, 3072}};

void bench_bf16_paired(benchmark::State& state, Kind, Shape s, int threads) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    using clock = std::chrono::steady_clock;
    set_threads(threads);
    Data& h = data(Kind::bf16, s);
    Data& f = data(Kind::f32, s);
    const xk::GemmPlan pb(xk_desc(Kind::bf16, s)), pf(xk_desc(Kind::f32, s));
    std::vector<float> Cb(size_t(s.M * s.N)), Cf(Cb.size()), Co(Cb.size());
    const xk::GemmArgs ab = xk_args(Kind::bf16, h, Cb.data()), af = xk_args(Kind::f32, f, Cf.data());
    // oneDNN's bf16 matmul, if it can make one (and it is not its reference on a large shape).
    std::string onednn_impl = "none";
    std::unique_ptr<dnnl::engine> eng;
    std::unique_ptr<dnnl::stream> strm;
    std::unique_ptr<dnnl::matmul> prim;
    std::unordered_map<int, dnnl::memory> margs;
    try {
        eng = std::make_unique<dnnl::engine>(dnnl::engine::kind::cpu, 0);
        strm = std::make_unique<dnnl::stream>(*eng);
        const dnnl::memory::desc a_md({s.M, s.K}, dt::bf16, tag::ab), b_md({s.K, s.N}, dt::bf16, tag::ab),
            c_md({s.M, s.N}, dt::f32, tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), *eng);
        onednn_impl = pd.impl_info_str();
        if (onednn_impl.rfind("ref", 0) != 0 || s.flops() <= 2.0 * 512 * 512 * 512) {
            prim = std::make_unique<dnnl::matmul>(pd);
            margs = {{DNNL_ARG_SRC, dnnl::memory(a_md, *eng, const_cast<xk::bf16*>(h.Ah.data()))},
                     {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, *eng, const_cast<xk::bf16*>(h.Bh.data()))},
                     {DNNL_ARG_DST, dnnl::memory(c_md, *eng, Co.data())}};
        } else {
            onednn_impl += " (not timed)";
        }
    } catch (const dnnl::error& e) {
        onednn_impl = std::string("none: ") + e.what();
        prim.reset();
    }
    auto run_onednn = [&] {
        prim->execute(*strm, margs);
        strm->wait();
    };
    // Warm-up (code generation, first touch), then the check against oneDNN.
    pb.run(ab);
    pf.run(af);
    if (prim) {
        run_onednn();
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < Cb.size(); ++i) {
            max_err = std::max(max_err, std::fabs(double(Cb[i]) - double(Co[i])));
            max_ref = std::max(max_ref, std::fabs(double(Co[i])));
        }
        if (max_err > 1e-4 * std::max(1.0, max_ref)) {
            state.SkipWithError(("bf16 result differs from oneDNN's: max |diff| = " + std::to_string(max_err)).c_str());
            return;
        }
    }
    double tb = 0, tf = 0, to = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        pb.run(ab);
        const auto t1 = clock::now();
        pf.run(af);
        const auto t2 = clock::now();
        if (prim) run_onednn();
        const auto t3 = clock::now();
        const double b = std::chrono::duration<double>(t1 - t0).count();
        tb += b;
        tf += std::chrono::duration<double>(t2 - t1).count();
        to += std::chrono::duration<double>(t3 - t2).count();
        state.SetIterationTime(b);
        benchmark::ClobberMemory();
    }
    const double n = double(state.iterations()), gf = s.flops() * 1e-9;
    if (n > 0) {
        state.counters["GFLOPS"] = gf * n / tb;
        state.counters["F32_GFLOPS"] = gf * n / tf;
        state.counters["bf16/f32"] = tf / tb;
        if (prim) {
            state.counters["ONEDNN_GFLOPS"] = gf * n / to;
            state.counters["bf16/onednn"] = to / tb;
        }
    }
    state.SetLabel(std::string(pb.impl_name()) + " | f32 " + pf.impl_name() + " | onednn " + onednn_impl);
}

using BenchFn = void (*)(benchmark::State&, Kind, Shape, int);

void add(Kind k, const char* provider, BenchFn fn, const Shape& s, int threads, const char* suffix = "") {
    const std::string name = std::string("gemm/") + kind_name(k) + "/" + provider + "/" + s.name() + suffix +
                             "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { fn(st, k, s, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
}

bool register_all() {
    for (Kind k : {Kind::f32, Kind::bf16, Kind::u8s8s32}) {
        std::vector<Shape> shapes = kShapes;
        if (k != Kind::f32) shapes.insert(shapes.begin() + 5, kExtraLowPrecision);
        if (k == Kind::f32) shapes.insert(shapes.end() - 1, kF32Extra.begin(), kF32Extra.end());
        for (const Shape& s : shapes) {
            for (int threads : {1, 2}) {
                add(k, "xk", bench_xk, s, threads);
                add(k, "onednn", bench_onednn, s, threads);
                if (k == Kind::f32) add(k, "openblas", bench_openblas, s, threads);
                if (k == Kind::f32 && s.M >= 256 && s.K < 4096)
                    add(k, "xk_tuned", bench_xk_tuned, s, threads);
                if (k == Kind::f32 && threads == 1 && s.M <= 64 && s.N <= 64 && s.K <= 64)
                    add(k, "libxsmm", bench_libxsmm, s, threads);
            }
        }
    }
    for (const Shape& s : kPrepacked)
        for (int threads : {1, 2}) {
            add(Kind::f32, "xk", bench_xk_prepacked, s, threads, "_prepacked");
            add(Kind::f32, "onednn", bench_onednn_prepacked, s, threads, "_prepacked");
        }
    for (int threads : {1, 2}) {
        add(Kind::f32, "xk", bench_xk_fused, kFused, threads, "_bias_gelu");
        add(Kind::f32, "onednn", bench_onednn_fused, kFused, threads, "_bias_gelu");
    }
    for (const Shape& s : kBf16Paired)
        for (int threads : xk::bench::thread_counts()) {
            const std::string name = "gemm/bf16/xk/" + s.name() + "_paired/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { bench_bf16_paired(st, Kind::bf16, s, threads); })
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
        }
    return true;
}

[[maybe_unused]] const bool g_registered = register_all();

// ---- decode (GEMV): M = 1 and 16, weights rotated over >= 1 GiB -----------------------------------
//
// y[M x N] = x[M x K] * W^T with the Linear weight W[N x K] (PyTorch's layout, op(B) = Trans::T),
// as in LLM decode. Each provider owns ceil(1 GiB / weight bytes) copies of the weight (in its
// own prepacked form where it has one) and every iteration uses the next copy, so the weights
// come from DRAM, not from the 32 MiB L3. Names:
//   gemm/f32/xk/<MxNxK>/decode:packed        GemmPlan::run(args, PackedB) (the production path)
//   gemm/f32/xk/<MxNxK>/decode:BT            unpacked W[N x K] (trans_b = T)
//   gemm/f32/xk/<MxNxK>/decode:BN            unpacked [K x N] (trans_b = N)
//   gemm/f32/onednn/<MxNxK>/decode:packed    matmul with weights in its preferred format (any, reordered once)
//   gemm/f32/onednn/<MxNxK>/decode:BT        matmul with plain W[N x K] weights (tag ba)
//   gemm/f32/onednn/<MxNxK>/decode:BN        matmul with a plain [K x N] B (tag ab)
//   gemm/f32/openblas/<MxNxK>/decode:BT      cblas_sgemm(NoTrans, Trans) (M = 1: cblas_sgemv too)
//   gemm/f32/bandwidth/read[+prefetch][x4]:1GiB  vectorised sum over 1 GiB (x4: four streams per
//                                            thread in lockstep): the read bandwidth
// Counters: GFLOPS, GBPS = weight bytes / time, BW% = GBPS / the read bandwidth with the same
// thread count (the best pass seen in this process: 3 passes of each sum before the first decode
// benchmark of that thread count, raised by the bandwidth benchmarks).
namespace decode {

constexpr size_t kRotateBytes = size_t(1) << 30;

const std::vector<Shape> kDecodeShapes = {{1, 4096, 4096}, {1, 11008, 4096}, {1, 4096, 11008},
                                          {16, 4096, 4096}, {16, 11008, 4096}, {16, 4096, 11008}};

size_t copies_for(const Shape& s) {
    const size_t wbytes = size_t(s.N * s.K) * 4;
    return (kRotateBytes + wbytes - 1) / wbytes;
}

// Rotated raw weights of the current shape (freed when another shape is asked for, so that at
// most one set of a few GiB is alive).
struct RawWeights {
    std::string key;
    std::vector<std::vector<float>> copies;  // each N*K floats
    std::vector<float> x;                    // M x K
};

RawWeights& raw(const Shape& s, bool trans_n) {
    static RawWeights r;
    (void)trans_n;  // the same random values serve both layouts
    const std::string key = s.name();
    if (r.key == key) return r;
    r.copies.clear();
    r.copies.shrink_to_fit();
    r.key = key;
    std::mt19937_64 g(777);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(size_t(s.N * s.K));
    for (float& v : w) v = u(g);
    const size_t n = copies_for(s);
    r.copies.assign(n, w);
    r.x.resize(size_t(s.M * s.K));
    for (float& v : r.x) v = u(g);
    return r;
}

// Sum of n floats (4 independent vector accumulators) read as `streams` equal parts in lockstep,
// 1 KiB of each per step (the decode kernels read several panels at once: one stream alone
// under-reads a Zen 3 core); with `pf`, one prefetch per KiB and stream 8 KiB ahead (on Zen 3 this
// sparse hint keeps the hardware prefetchers streaming across pages and reads faster than the
// hardware alone; a prefetch of every line reads slower).
__attribute__((target("avx2,fma"))) double sum_range(const float* p, size_t n, bool pf, int streams) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const size_t part = n / size_t(streams) / 256 * 256;  // floats per stream, whole KiBs
    for (size_t i = 0; i < part; i += 256)
        for (int st = 0; st < streams; ++st) {
            const float* q = p + size_t(st) * part + i;
            if (pf) _mm_prefetch(reinterpret_cast<const char*>(q) + 8192, _MM_HINT_T0);
            for (size_t j = 0; j < 256; j += 32) {
                a0 = _mm256_add_ps(a0, _mm256_load_ps(q + j));
                a1 = _mm256_add_ps(a1, _mm256_load_ps(q + j + 8));
                a2 = _mm256_add_ps(a2, _mm256_load_ps(q + j + 16));
                a3 = _mm256_add_ps(a3, _mm256_load_ps(q + j + 24));
            }
        }
    alignas(32) float t[8];
    _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    double r = 0;
    for (float v : t) r += v;
    for (size_t i = part * size_t(streams); i < n; ++i) r += p[i];
    return r;
}

struct BwBuffer {
    float* p = nullptr;
    size_t n = 0;
    BwBuffer() {
        n = kRotateBytes / 4;
        p = static_cast<float*>(std::aligned_alloc(64, kRotateBytes));
        for (size_t i = 0; i < n; ++i) p[i] = 1.0f;
    }
    ~BwBuffer() { std::free(p); }
};

// One pass over 1 GiB split over `threads` threads (xk's parallel_for); returns GB/s.
double read_pass(const BwBuffer& b, int threads, bool pf, int streams, double* sink) {
    xk::set_num_threads(threads);
    std::vector<double> part(size_t(threads), 0.0);
    const auto t0 = std::chrono::steady_clock::now();
    xk::detail::parallel_for(threads, 1, [&](int64_t t0_, int64_t t1_) {
        for (int64_t t = t0_; t < t1_; ++t) {
            const size_t beg = b.n / size_t(threads) * size_t(t);
            const size_t end = t + 1 == threads ? b.n : b.n / size_t(threads) * size_t(t + 1);
            part[size_t(t)] = sum_range(b.p + beg, end - beg, pf, streams);
        }
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (double v : part) *sink += v;
    return double(kRotateBytes) / sec * 1e-9;
}

// Read bandwidth per thread count, measured once: the best of 3 passes of each sum (1 and 4 streams, with and
// without prefetch). Also raised by the bandwidth benchmarks when they see more.
std::map<int, double>& bw_table() {
    static std::map<int, double> bw;
    return bw;
}
double read_bandwidth(int threads) {
    auto& bw = bw_table();
    auto it = bw.find(threads);
    if (it != bw.end()) return it->second;
    BwBuffer b;
    double sink = 0, best = 0;
    for (int i = 0; i < 3; ++i)
        for (int streams : {1, 4})
            for (bool pf : {false, true}) best = std::max(best, read_pass(b, threads, pf, streams, &sink));
    benchmark::DoNotOptimize(sink);
    return bw[threads] = best;
}

void finish_decode(benchmark::State& state, const Shape& s) {
    const double wbytes = double(s.N) * double(s.K) * 4.0;
    state.counters["GFLOPS"] = benchmark::Counter(s.flops() * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["GBPS"] = benchmark::Counter(wbytes * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

// BW% (a plain counter, as the rate is known only at the end): weight bytes over the real time
// of the timed loop, against read_bandwidth(threads).
struct Timer {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    double sec() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

void add_bw_pct(benchmark::State& state, const Shape& s, int threads, double sec) {
    if (sec <= 0 || state.iterations() == 0) return;
    const double gbps = double(s.N) * double(s.K) * 4.0 * double(state.iterations()) / sec * 1e-9;
    state.counters["BW%"] = 100.0 * gbps / read_bandwidth(threads);
}

void bench_bandwidth(benchmark::State& state, int threads, bool pf, int streams) {
    BwBuffer b;
    double sink = 0, best = 0;
    for (auto _ : state) best = std::max(best, read_pass(b, threads, pf, streams, &sink));
    benchmark::DoNotOptimize(sink);
    double& known = bw_table()[threads];
    known = std::max(known, best);
    state.counters["GBPS"] = benchmark::Counter(double(kRotateBytes) * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

enum class XkMode { packed, bt, bn };

void bench_xk_decode(benchmark::State& state, Shape s, int threads, XkMode mode) {
    (void)read_bandwidth(threads);  // measured before the weights are allocated
    RawWeights& r = raw(s, mode == XkMode::bn);
    set_threads(threads);
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    d.trans_b = mode == XkMode::bn ? xk::Trans::N : xk::Trans::T;
    const xk::GemmPlan plan(d);
    std::vector<xk::PackedB> packed;
    if (mode == XkMode::packed)
        for (const auto& w : r.copies) packed.push_back(plan.pack_b(w.data()));
    std::vector<float> C(size_t(s.M * s.N));
    xk::GemmArgs a;
    a.A = r.x.data(), a.C = C.data();
    const size_t n = r.copies.size();
    size_t i = 0;
    Timer t;
    for (auto _ : state) {
        if (mode == XkMode::packed) {
            plan.run(a, packed[i]);
        } else {
            a.B = r.copies[i].data();
            plan.run(a);
        }
        benchmark::ClobberMemory();
        i = i + 1 == n ? 0 : i + 1;
    }
    const double sec = t.sec();
    state.SetLabel(std::string(plan.impl_name()) + " x" + std::to_string(n));
    finish_decode(state, s);
    add_bw_pct(state, s, threads, sec);
}

void bench_onednn_decode(benchmark::State& state, Shape s, int threads, bool packed, bool bn = false) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    (void)read_bandwidth(threads);
    RawWeights& r = raw(s, false);
    set_threads(threads);
    std::vector<float> C(size_t(s.M * s.N));
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, dt::f32, tag::ab), c_md({s.M, s.N}, dt::f32, tag::ab);
        // W[N x K] viewed as K x N (tag ba), or a plain [K x N] B (tag ab: decode:BN)
        const dnnl::memory::desc w_plain({s.K, s.N}, dt::f32, bn ? tag::ab : tag::ba);
        const dnnl::memory::desc w_md = packed ? dnnl::memory::desc({s.K, s.N}, dt::f32, tag::any) : w_plain;
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, c_md), eng);
        const dnnl::matmul prim(pd);
        std::vector<dnnl::memory> ws;
        for (auto& w : r.copies) {
            dnnl::memory plain(w_plain, eng, w.data());
            if (packed && pd.weights_desc() != w_plain) {
                dnnl::memory m(pd.weights_desc(), eng);
                dnnl::reorder(plain, m).execute(strm, plain, m);
                strm.wait();
                ws.push_back(m);
            } else {
                ws.push_back(plain);
            }
        }
        dnnl::memory am(a_md, eng, r.x.data()), cm(c_md, eng, C.data());
        const size_t n = ws.size();
        size_t i = 0;
        Timer t;
        for (auto _ : state) {
            prim.execute(strm, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, ws[i]}, {DNNL_ARG_DST, cm}});
            strm.wait();
            i = i + 1 == n ? 0 : i + 1;
        }
        const double sec = t.sec();
        state.SetLabel(std::string(pd.impl_info_str()) + " x" + std::to_string(n));
        finish_decode(state, s);
        add_bw_pct(state, s, threads, sec);
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
    }
}

void bench_openblas_decode(benchmark::State& state, Shape s, int threads, bool gemv) {
    (void)read_bandwidth(threads);
    RawWeights& r = raw(s, false);
    set_threads(threads);
    std::vector<float> C(size_t(s.M * s.N));
    const auto M = blasint(s.M), N = blasint(s.N), K = blasint(s.K);
    const size_t n = r.copies.size();
    size_t i = 0;
    Timer t;
    for (auto _ : state) {
        const float* W = r.copies[i].data();
        if (gemv)  // y[N] = W[N x K] x[K]
            cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W, K, r.x.data(), 1, 0.0f, C.data(), 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, r.x.data(), K, W, K, 0.0f, C.data(), N);
        benchmark::ClobberMemory();
        i = i + 1 == n ? 0 : i + 1;
    }
    const double sec = t.sec();
    state.SetLabel((gemv ? "sgemv x" : "sgemm x") + std::to_string(n));
    finish_decode(state, s);
    add_bw_pct(state, s, threads, sec);
}

void add_decode(const std::string& provider, const Shape& s, const std::string& variant, int threads,
                std::function<void(benchmark::State&)> fn) {
    const std::string name = "gemm/f32/" + provider + "/" + s.name() + "/decode:" + variant + "/threads:" +
                             std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(), std::move(fn))->UseRealTime()->Unit(benchmark::kMillisecond);
}

bool register_decode() {
    for (int threads : {1, 2})
        for (int streams : {1, 4})
        for (bool pf : {false, true}) {
            const std::string bn = std::string("gemm/f32/bandwidth/read") + (pf ? "+prefetch" : "") +
                                   (streams > 1 ? "x" + std::to_string(streams) : std::string()) +
                                   ":1GiB/threads:" + std::to_string(threads);
            benchmark::RegisterBenchmark(bn.c_str(), [threads, pf, streams](benchmark::State& st) {
                bench_bandwidth(st, threads, pf, streams);
            })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
        }
    // Grouped by shape and weight layout: the rotated copies are generated once per group.
    for (const Shape& s : kDecodeShapes) {
        for (int threads : {1, 2}) {
            add_decode("xk", s, "packed", threads, [=](benchmark::State& st) { bench_xk_decode(st, s, threads, XkMode::packed); });
            add_decode("xk", s, "BT", threads, [=](benchmark::State& st) { bench_xk_decode(st, s, threads, XkMode::bt); });
            add_decode("onednn", s, "packed", threads, [=](benchmark::State& st) { bench_onednn_decode(st, s, threads, true); });
            add_decode("onednn", s, "BT", threads, [=](benchmark::State& st) { bench_onednn_decode(st, s, threads, false); });
            add_decode("openblas", s, "BT", threads, [=](benchmark::State& st) { bench_openblas_decode(st, s, threads, false); });
            if (s.M == 1)
                add_decode("openblas", s, "BT-sgemv", threads, [=](benchmark::State& st) { bench_openblas_decode(st, s, threads, true); });
        }
        for (int threads : {1, 2}) {
            add_decode("xk", s, "BN", threads, [=](benchmark::State& st) { bench_xk_decode(st, s, threads, XkMode::bn); });
            add_decode("onednn", s, "BN", threads,
                       [=](benchmark::State& st) { bench_onednn_decode(st, s, threads, false, true); });
        }
    }
    return true;
}

[[maybe_unused]] const bool g_decode_registered = register_decode();

}  // namespace decode

}  // namespace
