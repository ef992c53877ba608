// GPU GEMM (xk/gpu_gemm.hpp): every kernel — the tiled kernel in its default and in each tuner
// candidate configuration, the XMX kernel through its emulation (and natively where the device
// has XMX) — against a double-precision loop of include/xk/gemm.hpp's math, over odd sizes,
// leading dimensions, offsets, transposes, each dtype, each epilogue and a batch; bad input.
// Runs on whatever device gpu::Context() selects (PoCL in CI); skips when there is none.
// PoCL compiles each -D variant (about a second): the sweeps share few variants.
//
// Tolerances, |got - want| <= atol + rtol |want|, the oracle fed the same rounded inputs:
//   f32 C:   atol = 2e-6 (K + 1), rtol = 1e-5      (fp32 sums of K products of |x| <= 1 in tiles)
//   f16 C:   atol = 2e-6 (K + 1) + 1e-3, rtol = 1e-3   (one rounding to f16: 2^-11)
//   bf16 C:  atol = 2e-6 (K + 1) + 1e-2, rtol = 8e-3   (one rounding to bf16: 2^-8)
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/activation.hpp"
#include "common/test_util.hpp"
#include "gpu/gemm/gpu_gemm.hpp"
#include "xk/gpu.hpp"
#include "xk/gpu_gemm.hpp"

#if __has_include(<CL/cl.h>)
#include "gpu/runtime.hpp"
#define XK_TEST_HAVE_CL 1
#endif

namespace {

using xk::DType;
using xk::GemmDesc;
using xk::Trans;
namespace gpu = xk::gpu;
using gpu::detail::GemmKernelKind;
using gpu::detail::GemmOptions;

bool have_device() {
    if (!gpu::built_with_opencl()) return false;
    return !gpu::devices().empty();
}

gpu::Context& ctx() {
    static gpu::Context c;
    return c;
}

#define NEED_DEVICE() \
    if (!have_device()) GTEST_SKIP() << "no OpenCL device (built with OpenCL: " << gpu::built_with_opencl() << ")"

// Host values of an operand stored as `t`, with their rounded doubles.
struct HostMat {
    DType t;
    std::vector<uint8_t> bytes;
    std::vector<double> val;
    HostMat(DType type, int64_t n, uint64_t seed, double lo = -1, double hi = 1) : t(type) {
        std::mt19937_64 g(seed);
        std::uniform_real_distribution<double> d(lo, hi);
        bytes.resize(size_t(std::max<int64_t>(n, 1)) * xk::dtype_size(type));
        val.resize(size_t(n));
        for (int64_t i = 0; i < n; ++i) {
            const float f = float(d(g));
            if (type == DType::f32) {
                std::memcpy(&bytes[i * 4], &f, 4);
                val[i] = f;
            } else if (type == DType::bf16) {
                const xk::bf16 h(f);
                std::memcpy(&bytes[i * 2], &h.bits, 2);
                val[i] = h.to_float();
            } else {
                const xk::f16 h(f);
                std::memcpy(&bytes[i * 2], &h.bits, 2);
                val[i] = h.to_float();
            }
        }
    }
};

double load_as_double(DType t, const std::vector<uint8_t>& b, int64_t i) {
    if (t == DType::f32) {
        float f;
        std::memcpy(&f, &b[i * 4], 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, &b[i * 2], 2);
    return t == DType::bf16 ? xk::bf16::to_float(h) : xk::f16::to_float(h);
}

struct Case {
    int64_t M, N, K;
    Trans ta = Trans::N, tb = Trans::N;
    DType ab = DType::f32, c = DType::f32;
    int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // added to the packed leading dimensions
    int64_t off = 0;                          // element offset of every operand
    float alpha = 1.0f, beta = 0.0f;
    bool bias = false, resid = false;
    xk::Activation act = xk::Activation::none;
    DType rtype = DType::f32;
    int64_t batch = 1;
};

// Runs one case through gemm_ex with `opt` and compares with the double loop. Returns the kernel name.
std::string run_case(const Case& cs, const GemmOptions& opt = {}) {
    GemmDesc d;
    d.M = cs.M, d.N = cs.N, d.K = cs.K;
    d.trans_a = cs.ta, d.trans_b = cs.tb;
    d.a_type = d.b_type = cs.ab;
    d.c_type = cs.c;
    const int64_t ar = cs.ta == Trans::T ? cs.K : cs.M, ac = cs.ta == Trans::T ? cs.M : cs.K;
    const int64_t br = cs.tb == Trans::T ? cs.N : cs.K, bc = cs.tb == Trans::T ? cs.K : cs.N;
    d.lda = ac + cs.pad_a, d.ldb = bc + cs.pad_b, d.ldc = cs.N + cs.pad_c;
    d.alpha = cs.alpha, d.beta = cs.beta;
    d.epilogue.bias = cs.bias, d.epilogue.residual = cs.resid, d.epilogue.act = cs.act;
    d.residual_type = cs.rtype;
    d.ld_residual = cs.N + 3;
    d.batch = cs.batch;
    const int64_t sa = ar * d.lda, sb = br * d.ldb, sc = cs.M * d.ldc, sr = cs.M * d.ld_residual;
    if (cs.batch > 1) d.batch_stride_a = sa, d.batch_stride_b = sb, d.batch_stride_c = sc, d.batch_stride_residual = sr;
    const int64_t nb = std::max<int64_t>(cs.batch, 1);
    HostMat A(cs.ab, cs.off + nb * sa, 1), B(cs.ab, cs.off + nb * sb, 2), C0(cs.c, cs.off + nb * sc, 3);
    HostMat bias(DType::f32, cs.off + cs.N, 4), R(cs.rtype, cs.off + nb * sr, 5);
    gpu::GemmTensors t;
    auto up = [](const HostMat& h) {
        gpu::Buffer b(ctx(), int64_t(h.bytes.size()));
        b.write(h.bytes.data(), b.bytes());
        return b;
    };
    t.A = gpu::Tensor(up(A), cs.off);
    t.B = gpu::Tensor(up(B), cs.off);
    t.C = gpu::Tensor(up(C0), cs.off);
    t.bias = gpu::Tensor(up(bias), cs.off);
    t.residual = gpu::Tensor(up(R), cs.off);
    std::string name;
    gpu::detail::gemm_ex(ctx(), d, t, opt, &name).wait();
    std::vector<uint8_t> out(C0.bytes.size());
    t.C.buffer.read(out.data(), int64_t(out.size()));

    const double atol0 = 2e-6 * double(cs.K + 1);
    const double atol = cs.c == DType::f32 ? atol0 : cs.c == DType::f16 ? atol0 + 1e-3 : atol0 + 1e-2;
    const double rtol = cs.c == DType::f32 ? 1e-5 : cs.c == DType::f16 ? 1e-3 : 8e-3;
    int bad = 0;
    for (int64_t b = 0; b < nb; ++b)
        for (int64_t m = 0; m < cs.M; ++m)
            for (int64_t n = 0; n < cs.N; ++n) {
                double acc = 0;
                for (int64_t k = 0; k < cs.K; ++k) {
                    const int64_t ai = cs.ta == Trans::T ? k * d.lda + m : m * d.lda + k;
                    const int64_t bi = cs.tb == Trans::T ? n * d.ldb + k : k * d.ldb + n;
                    acc += A.val[cs.off + b * sa + ai] * B.val[cs.off + b * sb + bi];
                }
                const int64_t ci = cs.off + b * sc + m * d.ldc + n;
                double x = cs.alpha * acc;
                if (cs.beta != 0.0f) x += cs.beta * C0.val[ci];
                if (cs.bias) x += bias.val[cs.off + n];
                x = xk::detail::apply_activation(cs.act, float(x));
                if (cs.resid) x += R.val[cs.off + b * sr + m * d.ld_residual + n];
                const double got = load_as_double(cs.c, out, ci);
                if (!(std::fabs(got - x) <= atol + rtol * std::fabs(x)) && bad++ < 5)
                    ADD_FAILURE() << name << " " << cs.M << "x" << cs.N << "x" << cs.K << " item " << b << " (" << m
                                  << "," << n << "): got " << got << " want " << x;
            }
    EXPECT_EQ(bad, 0) << name << " " << cs.M << "x" << cs.N << "x" << cs.K;
    // Outside C's rows (the leading-dimension padding) nothing is written.
    for (int64_t i = 0; i < int64_t(out.size()) / xk::dtype_size(cs.c); ++i) {
        const int64_t r = i - cs.off;
        const bool inside = r >= 0 && r < nb * sc && (r % sc) % d.ldc < cs.N;
        if (!inside && load_as_double(cs.c, out, i) != C0.val.at(size_t(i))) {
            ADD_FAILURE() << name << ": wrote outside C at element " << i;
            break;
        }
    }
    return name;
}

// The sweeps run one small configuration of the tiled kernel (the CPU form on CPU devices), so
// that each type / transpose variant compiles quickly; EveryTunerCandidate runs the tuner's
// configurations (the default among them) on fewer shapes.
GemmOptions tiled_default() {
    GemmOptions o;
    o.kind = GemmKernelKind::tiled;
    o.force_config = true;
    gpu::detail::GemmConfig& c = o.config;
    if (ctx().device().type == "cpu")
        c.mwg = 2, c.nwg = 16, c.kwg = 16, c.mdimc = 1, c.ndimc = 2, c.vwm = 1, c.vwn = 8, c.use_local = 0;
    else
        c.mwg = 16, c.nwg = 16, c.kwg = 16, c.mdimc = 4, c.ndimc = 4, c.vwm = 1, c.vwn = 1, c.use_local = 1;
    return o;
}

const std::vector<std::array<int64_t, 3>> kSizes = {{1, 1, 1},   {7, 17, 13}, {17, 7, 33},  {33, 65, 17},
                                                    {130, 67, 45}, {1023, 3, 7}, {5, 131, 1023}, {64, 64, 64}};

}  // namespace

TEST(GpuGemm, TiledF32OddSizesAndEpilogues) {
    NEED_DEVICE();
    std::printf("[xk] device: %s / %s\n", ctx().device().platform_name.c_str(), ctx().device().name.c_str());
    for (auto [M, N, K] : kSizes) {
        Case c{M, N, K};
        run_case(c, tiled_default());
        c.pad_a = 3, c.pad_b = 5, c.pad_c = 2, c.off = 3;  // unaligned rows: the scalar staging path
        c.alpha = 0.5f, c.beta = -1.25f, c.bias = true, c.resid = true, c.act = xk::Activation::gelu_erf;
        run_case(c, tiled_default());
    }
    const xk::Activation acts[] = {xk::Activation::relu, xk::Activation::gelu_tanh, xk::Activation::silu};
    for (xk::Activation a : acts) {
        Case c{19, 37, 21};
        c.act = a, c.bias = true;
        run_case(c, tiled_default());
    }
    Case z{9, 11, 0};  // K == 0: beta C + epilogue only
    z.beta = 2.0f, z.bias = true;
    run_case(z, tiled_default());
}

TEST(GpuGemm, TiledTransposesAndBatch) {
    NEED_DEVICE();
    for (Trans ta : {Trans::N, Trans::T})
        for (Trans tb : {Trans::N, Trans::T}) {
            for (auto [M, N, K] : {std::array<int64_t, 3>{7, 17, 13}, {65, 33, 40}, {1, 129, 17}}) {
                Case c{M, N, K, ta, tb};
                run_case(c, tiled_default());
                c.pad_a = 4, c.pad_b = 8;  // 16-byte aligned rows: the float4 staging path
                c.beta = 0.5f;
                run_case(c, tiled_default());
            }
        }
    Case b{13, 21, 19};
    b.batch = 3, b.resid = true, b.bias = true, b.act = xk::Activation::relu;
    run_case(b, tiled_default());
}

TEST(GpuGemm, EveryTunerCandidate) {
    NEED_DEVICE();
    for (const auto& cfg : gpu::detail::gemm_candidates(ctx())) {
        GemmOptions o;
        o.kind = GemmKernelKind::tiled;
        o.force_config = true;
        o.config = cfg;
        for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {37, 45, 29}, {129, 131, 67}}) {
            Case c{M, N, K};
            c.bias = true, c.act = xk::Activation::silu;
            EXPECT_NE(run_case(c, o).find(cfg.str()), std::string::npos);
            c.pad_a = 4, c.pad_b = 4, c.pad_c = 1;
            run_case(c, o);
        }
    }
}

// The local-memory (GPU) form (register prefetch, float4 staging in all four transpose forms,
// float4 / float2 local reads) also runs on a CPU device: a 32 x 32 tile with 4 x 4 per work item
// and float4 reads with N N, and the GPU candidate 64 x 64 (float2 reads) with T T. (PoCL takes
// long to build the 128 x 128 candidates; on a GPU EveryTunerCandidate runs them.)
TEST(GpuGemm, LocalMemoryFormOnAnyDevice) {
    NEED_DEVICE();
    gpu::detail::GemmConfig small;
    small.mwg = 32, small.nwg = 32, small.kwg = 16, small.mdimc = 8, small.ndimc = 8, small.vwm = 4, small.vwn = 4;
    small.use_local = 1;
    const auto all = gpu::detail::gemm_candidates_for(false);
    ASSERT_GE(all.size(), 4u);
    const gpu::detail::GemmConfig cfgs[2] = {small, all[3]};
    const auto& di = ctx().device();
    for (int ci = 0; ci < 2; ++ci) {
        ASSERT_TRUE(cfgs[ci].valid(di.max_work_group_size, di.local_mem_bytes)) << cfgs[ci].str();
        GemmOptions o;
        o.kind = GemmKernelKind::tiled;
        o.force_config = true;
        o.config = cfgs[ci];
        const Trans t = ci == 0 ? Trans::N : Trans::T;
        for (auto [M, N, K] : {std::array<int64_t, 3>{130, 131, 67}, {1, 7, 33}}) {
            Case c{M, N, K, t, t};
            c.pad_a = 4, c.pad_b = 4, c.bias = true;  // aligned rows: float4 staging, K tail element-wise
            EXPECT_NE(run_case(c, o).find(cfgs[ci].str()), std::string::npos);
            c.pad_a = 1, c.pad_b = 3;
            run_case(c, o);
        }
    }
}

// Split-K (partial products in an f32 workspace + the reduce kernel with the epilogue): the CPU
// form and the local-memory form, K split unevenly (the last splits short or empty), each
// epilogue, bf16 C, a batch; the configuration string round-trips through the tuning file format.
TEST(GpuGemm, SplitK) {
    NEED_DEVICE();
    gpu::detail::GemmConfig cpu = tiled_default().config, loc;
    loc.mwg = 32, loc.nwg = 32, loc.kwg = 16, loc.mdimc = 8, loc.ndimc = 8, loc.vwm = 4, loc.vwn = 4, loc.use_local = 1;
    cpu.splitk = 3;
    loc.splitk = 4;
    for (const auto& cfg : {cpu, loc}) {
        gpu::detail::GemmConfig back;
        ASSERT_TRUE(gpu::detail::GemmConfig::parse(cfg.str(), back)) << cfg.str();
        EXPECT_EQ(back.splitk, cfg.splitk);
        GemmOptions o;
        o.kind = GemmKernelKind::tiled;
        o.force_config = true;
        o.config = cfg;
        for (auto [M, N, K] : {std::array<int64_t, 3>{7, 17, 100}, {33, 45, 20}, {65, 70, 129}}) {
            Case c{M, N, K};
            EXPECT_NE(run_case(c, o).find(",S"), std::string::npos);
            c.pad_a = 4, c.pad_b = 4, c.alpha = 0.5f, c.beta = -1.5f, c.bias = true, c.resid = true;
            c.act = xk::Activation::gelu_erf;
            run_case(c, o);
        }
        if (cfg.splitk != 3) continue;  // half types once (each variant is a program build)
        Case h{19, 37, 70, Trans::T, Trans::T, DType::bf16, DType::bf16};
        h.rtype = DType::bf16, h.resid = true, h.off = 3, h.batch = 2;
        run_case(h, o);
    }
    gpu::detail::GemmConfig bad;
    EXPECT_FALSE(gpu::detail::GemmConfig::parse("MWG64,NWG64,KWG16,MDIMC8,NDIMC8,VWM1,VWN1,L1,Sx", bad));
}

#ifdef XK_TEST_HAVE_CL
// A steady-state split-K call creates no OpenCL object: no allocation (the workspace is the
// context's scratch, kept between calls), no program build or load, no kernel object, and the
// same result each time; empty_cache() drops the scratch and the next call grows it again. Two
// threads sharing the context's scratch get the results of one thread.
TEST(GpuGemm, SplitKSteadyStateCreatesNothing) {
    NEED_DEVICE();
    GemmOptions o = tiled_default();
    o.config.splitk = 3;
    struct Call {
        GemmDesc d;
        gpu::GemmTensors t;
        std::vector<float> run(const GemmOptions& opt) const {
            gpu::detail::gemm_ex(ctx(), d, t, opt).wait();
            return t.C.buffer.to_host<float>();
        }
    };
    auto make = [](int64_t M, int64_t N, int64_t K, uint64_t seed) {
        Call c;
        c.d.M = M, c.d.N = N, c.d.K = K;
        c.d.epilogue.bias = true;
        HostMat A(DType::f32, M * K, seed), B(DType::f32, K * N, seed + 1), bias(DType::f32, N, seed + 2);
        c.t.A = gpu::Buffer(ctx(), int64_t(A.bytes.size()));
        c.t.B = gpu::Buffer(ctx(), int64_t(B.bytes.size()));
        c.t.bias = gpu::Buffer(ctx(), int64_t(bias.bytes.size()));
        c.t.C = gpu::Buffer(ctx(), M * N * 4);
        c.t.A.buffer.write(A.bytes.data(), c.t.A.buffer.bytes());
        c.t.B.buffer.write(B.bytes.data(), c.t.B.buffer.bytes());
        c.t.bias.buffer.write(bias.bytes.data(), c.t.bias.buffer.bytes());
        return c;
    };
    const Call big = make(33, 45, 96, 11), small = make(9, 20, 64, 21);
    const std::vector<float> want_big = big.run(o), want_small = small.run(o);  // warm: builds, scratch grown
    const auto m0 = ctx().memory_stats();
    const auto p0 = gpu::detail::program_cache_stats(ctx());
    const auto s0 = gpu::detail::scratch_stats(ctx());
    EXPECT_GE(s0.bytes, 3 * 33 * 45 * 4);
    for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(big.run(o), want_big);
        EXPECT_EQ(small.run(o), want_small);  // a smaller workspace: the same scratch
    }
    const auto m1 = ctx().memory_stats();
    const auto p1 = gpu::detail::program_cache_stats(ctx());
    const auto s1 = gpu::detail::scratch_stats(ctx());
    EXPECT_EQ(m1.num_allocs, m0.num_allocs);
    EXPECT_EQ(m1.num_segments, m0.num_segments);
    EXPECT_EQ(m1.allocated_bytes, m0.allocated_bytes);
    EXPECT_EQ(p1.source_builds, p0.source_builds);
    EXPECT_EQ(p1.disk_hits, p0.disk_hits);
    EXPECT_EQ(p1.kernels_created, p0.kernels_created);
    EXPECT_EQ(s1.grows, s0.grows);
    EXPECT_EQ(s1.bytes, s0.bytes);

    ctx().finish();
    ctx().empty_cache();
    EXPECT_EQ(gpu::detail::scratch_stats(ctx()).bytes, 0);
    EXPECT_EQ(big.run(o), want_big);
    EXPECT_EQ(gpu::detail::scratch_stats(ctx()).grows, s0.grows + 1);

    // Two threads, each its own operands, the context's one scratch.
    std::vector<int> bad(2, 0);
    auto work = [&](int id) {
        const Call& c = id ? small : big;
        const std::vector<float>& w = id ? want_small : want_big;
        for (int r = 0; r < 4; ++r) {
            gpu::detail::gemm_ex(ctx(), c.d, c.t, o);
            if (c.t.C.buffer.to_host<float>() != w) ++bad[size_t(id)];  // blocking read: after its own gemm
        }
    };
    std::thread t0(work, 0), t1(work, 1);
    t0.join();
    t1.join();
    EXPECT_EQ(bad[0] + bad[1], 0);
}
#endif  // XK_TEST_HAVE_CL

TEST(GpuGemm, HalfTypesTiled) {
    NEED_DEVICE();
    struct T {
        DType ab, c, r;
        Trans tb;
    };
    const T types[] = {{DType::bf16, DType::f32, DType::f32, Trans::T},
                       {DType::bf16, DType::bf16, DType::bf16, Trans::N},
                       {DType::f16, DType::f16, DType::f16, Trans::N}};
    for (const T& ty : types)
        for (auto [M, N, K] : {std::array<int64_t, 3>{1, 7, 17}, {33, 17, 64}, {67, 130, 129}}) {
            Case c{M, N, K, Trans::N, ty.tb, ty.ab, ty.c};
            c.rtype = ty.r;
            run_case(c, tiled_default());
            c.pad_a = 4, c.pad_b = 4, c.beta = 0.75f, c.bias = true, c.resid = true;
            c.act = xk::Activation::gelu_tanh;
            run_case(c, tiled_default());
        }
}

TEST(GpuGemm, XmxEmulated) {
    NEED_DEVICE();
    GemmOptions o;
    o.kind = GemmKernelKind::xmx_emulated;
    o.tune = 0;
    struct T {
        DType ab, c;
        Trans tb;
    };
    const T types[] = {{DType::bf16, DType::f32, Trans::T}, {DType::f16, DType::f16, Trans::N}};
    for (const T& ty : types)
        for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {7, 17, 13}, {33, 40, 64}, {70, 45, 1023}}) {
            Case c{M, N, K, Trans::N, ty.tb, ty.ab, ty.c};
            EXPECT_EQ(run_case(c, o).rfind("gpu:xmx_emu", 0), 0u);
            c.pad_a = 1, c.pad_b = 1, c.off = 1;  // odd rows: the guarded loads instead of block reads
            c.beta = -0.5f, c.bias = true, c.resid = true, c.act = xk::Activation::gelu_erf;
            run_case(c, o);
        }
    Case b{9, 20, 35, Trans::N, Trans::T, DType::bf16, DType::f32};
    b.batch = 2;
    run_case(b, o);
    // f32 or op(A) = A^T has no XMX form: the tiled kernel runs instead.
    Case f{9, 20, 35};
    EXPECT_EQ(run_case(f, o).rfind("gpu:tiled", 0), 0u);
}

TEST(GpuGemm, XmxNativeWhereAvailable) {
    NEED_DEVICE();
    const auto& di = ctx().device();
    if (!di.intel_subgroup_matrix || !di.intel_subgroups) GTEST_SKIP() << "no cl_intel_subgroup_matrix_multiply_accumulate";
    GemmOptions o;
    o.kind = GemmKernelKind::xmx;
    for (auto [M, N, K] : {std::array<int64_t, 3>{7, 17, 13}, {130, 67, 1023}}) {
        Case c{M, N, K, Trans::N, Trans::T, DType::bf16, DType::f32};
        EXPECT_EQ(run_case(c, o).rfind("gpu:xmx:", 0), 0u);
        c.ab = DType::f16, c.c = DType::f16, c.tb = Trans::N, c.bias = true;
        run_case(c, o);
    }
}

TEST(GpuGemm, SelectionByEnvironment) {
    NEED_DEVICE();
    GemmDesc d;
    d.M = 8, d.N = 8, d.K = 16;
    d.a_type = d.b_type = DType::bf16;
    setenv("XK_GPU_XMX", "emulate", 1);
    EXPECT_EQ(gpu::gemm_kernel_name(ctx(), d).rfind("gpu:xmx_emu:", 0), 0u);
    setenv("XK_GPU_XMX", "0", 1);
    setenv("XK_GPU_TUNE", "0", 1);
    EXPECT_EQ(gpu::gemm_kernel_name(ctx(), d), "gpu:tiled:" + gpu::detail::gemm_default_config(ctx()).str());
    unsetenv("XK_GPU_XMX");
    unsetenv("XK_GPU_TUNE");
    // The public gemm() under XK_GPU_XMX=emulate runs the emulated kernel on a real problem.
    setenv("XK_GPU_XMX", "emulate", 1);
    Case c{5, 9, 20, Trans::N, Trans::T, DType::bf16, DType::f32};
    EXPECT_EQ(run_case(c).rfind("gpu:xmx_emu:", 0), 0u);
    unsetenv("XK_GPU_XMX");
}

TEST(GpuGemm, TunerKeepsItsWinnerOnDisk) {
    NEED_DEVICE();
    const std::string file = gpu::detail::gemm_tune_file();
    if (file.empty()) GTEST_SKIP() << "disk cache off";
    GemmOptions o;
    o.kind = GemmKernelKind::tiled;
    o.tune = 1;
    Case c{40, 72, 24};  // tuned once per shape class: this one is M m, N m, K m (the candidates' programs are built above)
    const std::string name = run_case(c, o);
    ASSERT_EQ(name.rfind("gpu:tiled:", 0), 0u);
    const std::string cfg = name.substr(10);
    std::ifstream in(file);
    std::string line, last;
    bool found = false;
    while (std::getline(in, line))
        if (line.find(":NN:MmNmKm") != std::string::npos && line.find(ctx().device().name) != std::string::npos)
            found = true, last = line.substr(line.find('\t') + 1);
    ASSERT_TRUE(found) << file;
    EXPECT_EQ(last, cfg);
    // A fresh process (simulated: the in-memory results dropped) reads the winner back, untimed.
    gpu::detail::gemm_tuner_clear_memory();
    Case c2{50, 100, 30};
    EXPECT_EQ(run_case(c2, o), name);
    std::printf("[xk] tuned %s -> %s\n", "f32 NN MmNmKm", cfg.c_str());
}

TEST(GpuGemm, BadInput) {
    NEED_DEVICE();
    GemmDesc d;
    d.M = 8, d.N = 8, d.K = 8;
    gpu::Buffer a(ctx(), 64 * 4), b(ctx(), 64 * 4), c(ctx(), 64 * 4), small(ctx(), 63 * 4);
    const std::vector<float> sentinel(64, 7.0f);
    c.write(sentinel.data(), c.bytes());
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {small, b, c}), "A=");
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {a, small, c}), "B=");
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {a, b, small}), "C=");
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {gpu::Tensor(a, 1), b, c}), "A=");
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {gpu::Tensor(a, -1), b, c}), "A.offset=-1");
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {a, b, a}), "C=");
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {a, gpu::Buffer(), c}), "B");
    GemmDesc e = d;
    e.lda = 7;
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c}), "lda=7");
    e = d, e.ldc = 3;
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c}), "ldc=3");
    e = d, e.M = -1;
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c}), "M=-1");
    e = d, e.epilogue.bias = true;
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c}), "bias");
    e = d, e.epilogue.residual = true;
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c, gpu::Tensor(), small}), "residual");
    e = d, e.epilogue.act = static_cast<xk::Activation>(99);
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c}), "epilogue.act=99");
    e = d, e.a_type = e.b_type = DType::s8, e.c_type = DType::s32;
    XK_EXPECT_ERROR(gpu::gemm(ctx(), e, {a, b, c}), xk::Status::unsupported, "a_type=s8");
    e = d, e.b_type = DType::bf16;
    XK_EXPECT_ERROR(gpu::gemm(ctx(), e, {a, b, c}), xk::Status::unsupported, "b_type=bf16");
    e = d, e.batch = 2, e.batch_stride_c = 4;
    XK_EXPECT_INVALID(gpu::gemm(ctx(), e, {a, b, c}), "batch_stride_c=4");
    // A buffer of another context.
    gpu::Context other(ctx().device().platform_index >= 0 ? gpu::selected_device_index() : 0);
    gpu::Buffer foreign(other, 64 * 4);
    XK_EXPECT_INVALID(gpu::gemm(ctx(), d, {foreign, b, c}), "A");
    // Nothing was enqueued: C still holds the sentinel.
    ctx().finish();
    std::vector<float> back(64);
    c.read(back.data(), c.bytes());
    EXPECT_EQ(back, sentinel);
    // Empty problems do nothing and need no buffers.
    e = d, e.M = 0;
    EXPECT_FALSE(gpu::gemm(ctx(), e, {}).valid());
}

#include "xk/c/gpu.h"

// The C entry point (xk/c/gpu.h): a bf16 Linear with bias, gelu and a bf16 residual against the
// double loop; rejected calls name the argument and leave C as it was.
TEST(GpuGemmCapi, LinearAndBadInput) {
    NEED_DEVICE();
    setenv("XK_GPU_TUNE", "0", 1);  // the default configuration: one program build on a cold cache
    xk_gpu_context c = nullptr;
    ASSERT_EQ(xk_gpu_context_create(-1, &c), XK_SUCCESS) << xk_last_error();
    const int64_t M = 19, N = 37, K = 45;
    xk_gemm_desc d;
    xk_gemm_desc_init(&d);
    d.M = M, d.N = N, d.K = K;
    d.trans_b = XK_TRANS_T;
    d.a_type = d.b_type = XK_DTYPE_BF16;
    d.c_type = XK_DTYPE_F32;
    d.bias = 1, d.act = XK_ACT_GELU_TANH, d.residual = 1, d.residual_type = XK_DTYPE_BF16;
    HostMat A(DType::bf16, M * K, 11), B(DType::bf16, N * K, 12), bias(DType::f32, N, 13), R(DType::bf16, M * N, 14);
    auto up = [&](const HostMat& h, xk_gpu_buffer* b) {
        ASSERT_EQ(xk_gpu_buffer_create(c, int64_t(h.bytes.size()), b), XK_SUCCESS);
        ASSERT_EQ(xk_gpu_buffer_write(*b, 0, h.bytes.data(), int64_t(h.bytes.size())), XK_SUCCESS);
    };
    xk_gpu_buffer ba = nullptr, bb = nullptr, bbias = nullptr, br = nullptr, bc = nullptr;
    up(A, &ba), up(B, &bb), up(bias, &bbias), up(R, &br);
    ASSERT_EQ(xk_gpu_buffer_create(c, M * N * 4, &bc), XK_SUCCESS);
    const std::vector<float> sentinel(size_t(M * N), 3.5f);
    ASSERT_EQ(xk_gpu_buffer_write(bc, 0, sentinel.data(), M * N * 4), XK_SUCCESS);
    const xk_gpu_tensor none{nullptr, 0};
    xk_gpu_gemm_tensors t{{ba, 0}, {bb, 0}, {bc, 0}, {bbias, 0}, {br, 0}};

    // Rejected: each names its argument, nothing enqueued.
    auto rejects = [&](xk_status st, const char* needle) {
        EXPECT_NE(st, XK_SUCCESS) << needle;
        EXPECT_NE(std::string(xk_last_error()).find(needle), std::string::npos) << xk_last_error();
    };
    rejects(xk_gpu_gemm(nullptr, &d, &t), "ctx");
    rejects(xk_gpu_gemm(c, nullptr, &t), "desc");
    rejects(xk_gpu_gemm(c, &d, nullptr), "t");
    xk_gemm_desc e = d;
    e.a_type = static_cast<xk_dtype>(77);
    rejects(xk_gpu_gemm(c, &e, &t), "a_type");
    e = d, e.ldb = K - 1;
    rejects(xk_gpu_gemm(c, &e, &t), "ldb=");
    e = d, e.trans_a = static_cast<xk_trans>(5);
    rejects(xk_gpu_gemm(c, &e, &t), "trans_a=5");
    xk_gpu_gemm_tensors u = t;
    u.A.offset = 1;  // one element past: A's extent no longer fits
    rejects(xk_gpu_gemm(c, &d, &u), "A=");
    u = t, u.bias = none;
    rejects(xk_gpu_gemm(c, &d, &u), "bias");
    u = t, u.C = {ba, 0};
    rejects(xk_gpu_gemm(c, &d, &u), "C=");
    ASSERT_EQ(xk_gpu_finish(c), XK_SUCCESS);
    std::vector<float> got(size_t(M * N));
    ASSERT_EQ(xk_gpu_buffer_read(bc, 0, got.data(), M * N * 4), XK_SUCCESS);
    EXPECT_EQ(got, sentinel);

    char name[128];
    ASSERT_EQ(xk_gpu_gemm_kernel_name(c, &d, name, sizeof name), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(std::string(name).rfind("gpu:", 0), 0u) << name;
    char tiny[4];
    ASSERT_EQ(xk_gpu_gemm_kernel_name(c, &d, tiny, sizeof tiny), XK_SUCCESS);
    EXPECT_EQ(std::string(tiny), std::string(name).substr(0, 3));
    rejects(xk_gpu_gemm_kernel_name(c, &d, name, 0), "size=0");
    rejects(xk_gpu_gemm_kernel_name(c, &d, nullptr, 8), "buf");

    ASSERT_EQ(xk_gpu_gemm(c, &d, &t), XK_SUCCESS) << xk_last_error();
    EXPECT_STREQ(xk_last_error(), "");
    ASSERT_EQ(xk_gpu_finish(c), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_buffer_read(bc, 0, got.data(), M * N * 4), XK_SUCCESS);
    const double atol = 2e-6 * double(K + 1), rtol = 1e-5;
    int bad = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += A.val[m * K + k] * B.val[n * K + k];
            double x = xk::detail::apply_activation(xk::Activation::gelu_tanh, float(acc + bias.val[n]));
            x += R.val[m * N + n];
            if (!(std::fabs(got[m * N + n] - x) <= atol + rtol * std::fabs(x)) && bad++ < 5)
                ADD_FAILURE() << "(" << m << "," << n << "): got " << got[m * N + n] << " want " << x;
        }
    EXPECT_EQ(bad, 0);
    // Empty problem: nothing to do, no buffers needed.
    e = d, e.M = 0;
    const xk_gpu_gemm_tensors empty{none, none, none, none, none};
    EXPECT_EQ(xk_gpu_gemm(c, &e, &empty), XK_SUCCESS) << xk_last_error();
    for (xk_gpu_buffer b : {ba, bb, bbias, br, bc}) xk_gpu_buffer_destroy(b);
    xk_gpu_context_destroy(c);
    unsetenv("XK_GPU_TUNE");
}
