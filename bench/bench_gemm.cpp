// GEMM: xk beside oneDNN (matmul), OpenBLAS (cblas_sgemm) and libxsmm (small f32 kernels), on the
// same data and thread count. (Debian's OpenBLAS is built without BUILD_BFLOAT16, so it has no
// cblas_sbgemm: the bf16 peer is oneDNN alone; int8 likewise.)
//
// Names: gemm/<dtype>/<provider>/<MxNxK>[_bias_gelu]/threads:<t>   (_bias_gelu: the fused
//        bias + gelu_erf epilogue; oneDNN with a bias and an eltwise post-op)
//   dtype     f32 (f32 x f32 -> f32), bf16 (bf16 x bf16 -> f32), u8s8s32 (u8 x s8 -> s32)
//   provider  xk, onednn, openblas, libxsmm
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
// its bf16 / int8 paths are still the scalar reference: expect those to be slow.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <libxsmm.h>

#include <cmath>
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
    for (auto _ : state) {
        plan.run(args);
        benchmark::ClobberMemory();
    }
    state.SetLabel(plan.impl_name());
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
        for (auto _ : state) {
            prim.execute(strm, margs);
            strm.wait();
        }
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
    for (auto _ : state) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, d.A.data(), K, d.B.data(), N, 0.0f,
                    C.data(), N);
        benchmark::ClobberMemory();
    }
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
    for (auto _ : state) {
        plan.run(args);
        benchmark::ClobberMemory();
    }
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
        for (auto _ : state) {
            prim.execute(strm, margs);
            strm.wait();
        }
        state.SetLabel(pd.impl_info_str());
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
        return;
    }
    finish(state, s);
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
                if (k == Kind::f32 && threads == 1 && s.M <= 64 && s.N <= 64 && s.K <= 64)
                    add(k, "libxsmm", bench_libxsmm, s, threads);
            }
        }
    }
    for (int threads : {1, 2}) {
        add(Kind::f32, "xk", bench_xk_fused, kFused, threads, "_bias_gelu");
        add(Kind::f32, "onednn", bench_onednn_fused, kFused, threads, "_bias_gelu");
    }
    return true;
}

[[maybe_unused]] const bool g_registered = register_all();

}  // namespace
