// int8 Linear layers (xk::QLinearPlan) beside our fp32 Linear (GemmPlan f32 with a PackedB and
// the same bias epilogue), the two timed alternately in the same loop on the same inputs:
//
//   qlinear/f32/xk/<dynamic_per_token|dynamic_per_tensor>/<MxNxK>/nt:<N>
//       Y[M x N] = X[M x K] W^T + bias, X f32 quantized inside each call (per token: s8 symmetric
//       per row; per tensor: u8 asymmetric), int8 weights packed once, f32 Y.
//   qlinear/u8/xk/static_per_tensor/<MxNxK>/nt:<N>   u8 X in, u8 Y out (requantized)
//   smoothquant/<f32|bf16>/xk/observe/4096x4096/nt:<N>   SmoothQuantCalibrator::observe (GBPS)
//
// Counters: GFLOPS (2 M N K per call of the int8 Linear, quantization included), fp32_GFLOPS (the
// fp32 Linear's, same loop), x_fp32 (their ratio: the target is >= 1.5 on VNNI / AMX).
// cpu_GFLOPS / cpu_x_fp32: the same from the process's CPU time of each call (on a loaded host the
// 1-thread rows' wall times include other processes' time slices).
// Operands are not rotated (the weights stay where a layer's weights would between calls).
#include <time.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "xk/gemm.hpp"
#include "xk/qlinear.hpp"

namespace {

namespace xb = xk::bench;
using xk::DType;
using Clock = std::chrono::steady_clock;

double cpu_now() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Shape {
    int64_t M, N, K;
};

void BM_qlinear(benchmark::State& state, Shape sh, xk::QLinearQuant q, int nt) {
    xb::ScopedThreads threads(nt);
    const int64_t M = sh.M, N = sh.N, K = sh.K;
    std::vector<float> W(N * K), x(M * K), bias(N), y(M * N), y32(M * N);
    for (int64_t i = 0; i < N * K; ++i) W[i] = static_cast<float>(xb::detail::unit(1, i) - 0.5) * 0.1f;
    for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(xb::detail::unit(2, i) - 0.5) * 4.0f;
    for (int64_t i = 0; i < N; ++i) bias[i] = static_cast<float>(xb::detail::unit(3, i));
    const bool st = q == xk::QLinearQuant::static_per_tensor;
    std::vector<uint8_t> xq(M * K), yq(M * N);
    for (int64_t i = 0; i < M * K; ++i) xq[i] = static_cast<uint8_t>(xb::detail::unit(4, i) * 255);

    xk::QLinearDesc d;
    d.N = N, d.K = K, d.quant = q, d.epilogue.bias = true;
    if (st) d.x_type = DType::u8, d.y_type = DType::u8;
    const xk::QLinearPlan lin(d, {DType::f32, W.data(), 0, nullptr});
    xk::QLinearArgs a;
    a.x = st ? static_cast<const void*>(xq.data()) : x.data();
    a.y = st ? static_cast<void*>(yq.data()) : y.data();
    a.bias = bias.data();
    if (st) a.x_scale = 0.02f, a.x_zero_point = 128, a.y_scale = 0.05f, a.y_zero_point = 128;

    // fp32 Linear: Y = X W^T + bias with W packed once
    xk::GemmDesc g;
    g.M = M, g.N = N, g.K = K, g.trans_b = xk::Trans::T, g.epilogue.bias = true;
    const xk::GemmPlan fp(g);
    const xk::PackedB wp = fp.pack_b(W.data());
    xk::GemmArgs ga;
    ga.A = x.data(), ga.C = y32.data(), ga.bias = bias.data();

    lin.run(M, a);
    fp.run(ga, wp);
    double t8 = 0, t32 = 0, c8 = 0, c32 = 0;
    for (auto _ : state) {
        const double u0 = cpu_now();
        const auto t0 = Clock::now();
        lin.run(M, a);
        const auto t1 = Clock::now();
        const double u1 = cpu_now();
        fp.run(ga, wp);
        const auto t2 = Clock::now();
        c8 += u1 - u0;
        c32 += cpu_now() - u1;
        const double s8 = std::chrono::duration<double>(t1 - t0).count();
        t8 += s8;
        t32 += std::chrono::duration<double>(t2 - t1).count();
        state.SetIterationTime(s8);
        benchmark::ClobberMemory();
    }
    const double flops = 2.0 * double(M) * double(N) * double(K);
    const double it = static_cast<double>(state.iterations());
    state.counters["GFLOPS"] = flops * it / t8 * 1e-9;
    state.counters["fp32_GFLOPS"] = flops * it / t32 * 1e-9;
    state.counters["x_fp32"] = t32 / t8;
    if (c8 > 0 && c32 > 0) {
        state.counters["cpu_GFLOPS"] = flops * it / c8 * 1e-9;
        state.counters["cpu_x_fp32"] = c32 / c8;
    }
    state.SetLabel(std::string(lin.impl_name()) + " vs " + fp.impl_name());
}

// SmoothQuant calibration: per-channel abs-max of a 4096 x 4096 f32 / bf16 activation matrix (not
// rotated: 64 / 32 MiB, beyond the LLC of the dev host), GBPS = bytes of x per call.
void BM_observe(benchmark::State& state, DType t, int nt) {
    xb::ScopedThreads threads(nt);
    const int64_t rows = 4096, K = 4096;
    std::vector<float> x(rows * K);
    for (int64_t i = 0; i < rows * K; ++i) x[i] = static_cast<float>(xb::detail::unit(5, i) - 0.5);
    std::vector<xk::bf16> xbf;
    if (t == DType::bf16) {
        xbf.resize(rows * K);
        for (int64_t i = 0; i < rows * K; ++i) xbf[i] = xk::bf16(x[i]);
    }
    xk::SmoothQuantCalibrator cal(K);
    for (auto _ : state) {
        if (t == DType::bf16) cal.observe(rows, xbf.data());
        else cal.observe(rows, x.data());
        benchmark::ClobberMemory();
    }
    xb::set_gbps(state, double(rows * K) * xk::dtype_size(t));
}

const bool registered = [] {
    for (DType t : {DType::f32, DType::bf16})
        for (int nt : xb::thread_counts())
            benchmark::RegisterBenchmark(
                xb::join_name({"smoothquant", xk::dtype_name(t), "xk", "observe", "4096x4096", "nt:" + std::to_string(nt)}).c_str(),
                [t, nt](benchmark::State& st) { BM_observe(st, t, nt); })
                ->UseRealTime();
    const std::vector<int> nts = xb::thread_counts();
    const Shape shapes[] = {{384, 3072, 768}, {128, 4096, 4096}, {1, 4096, 4096}};
    for (const Shape& s : shapes)
        for (auto q : {xk::QLinearQuant::dynamic_per_token, xk::QLinearQuant::dynamic_per_tensor,
                       xk::QLinearQuant::static_per_tensor})
            for (int nt : nts) {
                const std::string name = xb::join_name(
                    {"qlinear", q == xk::QLinearQuant::static_per_tensor ? "u8" : "f32", "xk", xk::qlinear_quant_name(q),
                     std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K), "nt:" + std::to_string(nt)});
                benchmark::RegisterBenchmark(name.c_str(), [s, q, nt](benchmark::State& st) { BM_qlinear(st, s, q, nt); })
                    ->UseManualTime();
            }
    return true;
}();

}  // namespace
