// The memory-bound LLM ops: RMSNorm, LayerNorm (beside oneDNN 2.6's layer_normalization), RoPE,
// SwiGLU / GeGLU and softmax, on DRAM-resident tensors (rotated over XK_BENCH_ROTATE_MB, default
// 1 GiB) and on decode shapes (cache-resident, per-call time).
//
//   rms_norm/<f32|bf16>/xk/4096x4096/nt:<N>            y = rms_norm(x) * w (w in the same dtype)
//   rms_norm/<f32|bf16>/xk/16384x8192/nt:<N>
//   layer_norm/<f32|bf16>/<xk|onednn>/4096x4096/<scale_shift|plain>/nt:<N>
//   layer_norm/<f32|bf16>/<xk|onednn>/16384x8192/<scale_shift|plain>/nt:<N>
//   rms_norm/<f32|bf16>/xk/4096x4096/residual[/apart]/nt:<N>   the pre-norm block: h = x + r, y = norm(h),
//   layer_norm/<f32|bf16>/xk/4096x4096/scale_shift/residual[/apart]/nt:<N>   in place like vLLM's
//                                                       fused_add_rms_norm (r = h, x = y), or apart
//                                                       (residual_out and y of their own)
//   rope/<f32|bf16>/xk/<neox|gptj>/2048x32x128/nt:<N>   q and k [2048 tokens, 32 heads, 128], in place
//   swiglu/<f32|bf16>/xk/4096x11008/nt:<N>              y [4096 x 11008] = silu(gate) * up
//   geglu/<f32|bf16>/xk/4096x11008/nt:<N>               gelu_erf
//   geglu_tanh/<f32|bf16>/xk/4096x11008/nt:<N>          gelu_tanh (GeGLU with the tanh approximation)
//   softmax/<f32|bf16>/xk/16384x4096[/causal]/nt:<N>
//   <op>/<bf16|f32>/xk/decode/t:<1|4|16>/h:4096/nt:<N>  one call through a Plan, cache-resident (swiglu: /i:11008)
//   layer_norm/<f32|bf16>/onednn/decode/...              the primitive's execute() per call
//
// Copy% (DRAM rows): the row's GB/s over that of a copy with non-temporal stores on the same
// threads, the copy run between the row's calls (timer paused; xk::bench::CopyYardstick) so both
// are measured in the same stretch of the host's drifting speed; CopyGBPS: that copy's GB/s. RoPE
// (in place, regular stores) is measured against an in-place copy x[i] = x[i] (see CopyYardstick).
// GBPS: bytes read + written per call: x and y (norm; residual rows: x and r read, r and y
// written), q and k twice plus the cache rows read (rope), x and y (glu: 2I in, I out), x and y
// (softmax); weights and biases are counted too (one row). oneDNN's layer norm takes f32 scale /
// shift (its API in 2.6); xk's uses weights in the activation dtype. oneDNN's bf16 layer norm
// needs AVX-512 in 2.6: on an AVX2 machine the benchmark reports the primitive creation error
// instead of a number.
#include <cmath>
#include <dnnl.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "bench_util.hpp"
#include "xk/llm.hpp"
#include "xk/norm.hpp"
#include "xk/rope.hpp"

namespace {

namespace xb = xk::bench;
using xk::DType;

int esize(DType t) { return xk::dtype_size(t); }
const char* dname(DType t) { return xk::dtype_name(t); }
std::string shape2(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

// ---- norm ---------------------------------------------------------------------------------------
struct NormCase {
    xk::NormKind kind;
    DType dt;
    int64_t rows, hidden;
    bool affine;  // layer_norm: weight + bias (scale_shift) or none (plain); rms_norm: weight
    bool dram;    // rotated DRAM-resident sets, else one cache-resident set (decode)
    // The pre-norm block, h = x + r, y = norm(h): none, in place (residual_out = r, y = x, like vLLM's
    // fused_add_rms_norm) or apart (residual_out and y arrays of their own, as eager code makes them).
    enum class Residual { none, in_place, apart } residual = Residual::none;
};

size_t norm_bytes(const NormCase& c) {
    const size_t es = esize(c.dt);
    size_t b = (c.residual != NormCase::Residual::none ? 4 : 2) * static_cast<size_t>(c.rows * c.hidden) * es;
    if (c.affine) b += (c.kind == xk::NormKind::layer_norm ? 2 : 1) * c.hidden * es;
    return b;
}

xb::RotatingBuffers& norm_buffers(const NormCase& c) {
    const size_t es = esize(c.dt), n = static_cast<size_t>(c.rows * c.hidden);
    const std::string key = std::string("norm/") + dname(c.dt) + "/" + shape2(c.rows, c.hidden) + (c.dram ? "/dram" : "") +
                            (c.residual == NormCase::Residual::in_place ? "/residual"
                             : c.residual == NormCase::Residual::apart  ? "/residual/apart"
                                                                        : "");
    const size_t h = static_cast<size_t>(c.hidden);
    std::vector<size_t> arrays = {n * es, n * es, h * es, h * es, h * 4, h * 4};
    if (c.residual != NormCase::Residual::none) arrays.push_back(n * es);  // 6: the residual stream (in, and out in place)
    if (c.residual == NormCase::Residual::apart) arrays.push_back(n * es);  // 7: residual_out apart
    return xb::cached_rotating_buffers(key, arrays,
                                       c.dram ? xb::rotate_bytes() : 0, [c](xb::RotatingBuffers& b) {
                                           if (c.dt == DType::bf16) {
                                               b.fill_uniform<xk::bf16>(0, -2, 2, 1);
                                               b.fill_uniform<xk::bf16>(2, 0.5, 1.5, 3);
                                               b.fill_uniform<xk::bf16>(3, -0.5, 0.5, 4);
                                           } else {
                                               b.fill_uniform<float>(0, -2, 2, 1);
                                               b.fill_uniform<float>(2, 0.5, 1.5, 3);
                                               b.fill_uniform<float>(3, -0.5, 0.5, 4);
                                           }
                                           b.fill_uniform<float>(1, 0, 0, 2);  // y: touched once
                                           b.fill_uniform<float>(4, 0.5, 1.5, 5);
                                           b.fill_uniform<float>(5, -0.5, 0.5, 6);
                                           if (c.residual != NormCase::Residual::none) {
                                               if (c.dt == DType::bf16) b.fill_uniform<xk::bf16>(6, -2, 2, 7);
                                               else b.fill_uniform<float>(6, -2, 2, 7);
                                           }
                                       });
}

void BM_norm_xk(benchmark::State& state, NormCase c, int nt) {
    xb::ScopedThreads threads(nt);
    xb::RotatingBuffers& bufs = norm_buffers(c);
    xk::NormDesc d;
    d.kind = c.kind;
    d.rows = c.rows;
    d.hidden = c.hidden;
    d.x_dtype = d.y_dtype = d.weight_dtype = c.dt;
    d.has_weight = c.affine;
    d.has_bias = c.affine && c.kind == xk::NormKind::layer_norm;
    d.eps = 1e-5f;
    if (c.residual != NormCase::Residual::none) {
        d.fused_residual = true;
        d.residual_dtype = c.dt;
    }
    const xk::NormPlan plan(d);
    xb::CopyYardstick copy(state, c.dram, static_cast<double>(norm_bytes(c)));
    for (auto _ : state) {
        const size_t s = bufs.next();
        xk::NormArgs a;
        a.x = bufs.get<char>(s, 0);
        a.y = bufs.get<char>(s, c.residual == NormCase::Residual::in_place ? 0 : 1);
        if (c.residual != NormCase::Residual::none) a.residual = a.residual_out = bufs.get<char>(s, 6);
        if (c.residual == NormCase::Residual::apart) a.residual_out = bufs.get<char>(s, 7);
        if (d.has_weight) a.weight = bufs.get<char>(s, 2);
        if (d.has_bias) a.bias = bufs.get<char>(s, 3);
        copy.begin();
        plan.run(a);
        copy.end();
        benchmark::ClobberMemory();
    }
    copy.finish();
    xb::set_gbps(state, static_cast<double>(norm_bytes(c)));
    state.SetLabel(std::string(plan.impl_name()) + (c.dram ? ", " + std::to_string(bufs.sets()) + " sets" : ""));
}

void BM_layer_norm_onednn(benchmark::State& state, NormCase c, int nt) {
    xb::ScopedThreads threads(nt);
    try {
        using tag = dnnl::memory::format_tag;
        const auto dt = c.dt == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc md({c.rows, c.hidden}, dt, tag::ab);
        const dnnl::memory::desc smd({c.hidden}, dnnl::memory::data_type::f32, tag::a);
        const auto flags = c.affine ? (dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift)
                                    : dnnl::normalization_flags::none;
        const dnnl::layer_normalization_forward::primitive_desc pd(
            dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, md, 1e-5f, flags), eng);
        const dnnl::layer_normalization_forward prim(pd);
        xb::RotatingBuffers& bufs = norm_buffers(c);
        // Memory objects per set, made once (execute() is what a framework calls per step).
        std::vector<std::unordered_map<int, dnnl::memory>> args(bufs.sets());
        for (size_t s = 0; s < bufs.sets(); ++s) {
            args[s] = {{DNNL_ARG_SRC, dnnl::memory(md, eng, bufs.get<char>(s, 0))},
                       {DNNL_ARG_DST, dnnl::memory(md, eng, bufs.get<char>(s, 1))}};
            if (c.affine) {
                args[s].insert({DNNL_ARG_SCALE, dnnl::memory(smd, eng, bufs.get<char>(s, 4))});
                args[s].insert({DNNL_ARG_SHIFT, dnnl::memory(smd, eng, bufs.get<char>(s, 5))});
            }
        }
        size_t bytes = norm_bytes(c);
        if (c.affine) bytes += 2 * c.hidden * (4 - esize(c.dt));  // f32 scale / shift
        xb::CopyYardstick copy(state, c.dram, static_cast<double>(bytes));
        for (auto _ : state) {
            auto& arg = args[bufs.next()];
            copy.begin();
            prim.execute(strm, arg);
            strm.wait();
            copy.end();
            benchmark::ClobberMemory();
        }
        copy.finish();
        xb::set_gbps(state, static_cast<double>(bytes));
        state.SetLabel(pd.impl_info_str());
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
    }
}

// ---- rope ---------------------------------------------------------------------------------------
struct RopeCase {
    xk::RopeStyle style;
    DType dt;
    int64_t tokens, heads, head_dim;
    bool dram;
};

constexpr int64_t kMaxPosition = 4096;

void BM_rope_xk(benchmark::State& state, RopeCase c, int nt) {
    xb::ScopedThreads threads(nt);
    const size_t es = esize(c.dt), n = static_cast<size_t>(c.tokens * c.heads * c.head_dim);
    const std::string key = std::string("rope/") + dname(c.dt) + "/" + std::to_string(c.tokens) + (c.dram ? "/dram" : "");
    xb::RotatingBuffers& bufs = xb::cached_rotating_buffers(
        key, {n * es, n * es, static_cast<size_t>(c.tokens) * 8, static_cast<size_t>(kMaxPosition * c.head_dim) * 4},
        c.dram ? xb::rotate_bytes() : 0, [c, n](xb::RotatingBuffers& b) {
            for (int a = 0; a < 2; ++a) {
                if (c.dt == DType::bf16) b.fill_uniform<xk::bf16>(a, -1, 1, 1 + a);
                else b.fill_uniform<float>(a, -1, 1, 1 + a);
            }
            b.fill_uniform<int64_t>(2, 0, static_cast<double>(kMaxPosition - 1), 3);
            // A real cos / sin cache (rows: cos of half the rotary angles, then their sin): with
            // random values instead the rotation is no rotation, and q / k, rotated in place again
            // at every iteration, decay into denormals (whose arithmetic is microcoded: the
            // decode rows ran 3x slower than the DRAM ones).
            for (size_t set = 0; set < b.sets(); ++set) {
                float* cache = b.get<float>(set, 3);
                const int64_t half = c.head_dim / 2;
                for (int64_t p = 0; p < kMaxPosition; ++p)
                    for (int64_t i = 0; i < half; ++i) {
                        const double theta = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
                        cache[p * c.head_dim + i] = static_cast<float>(std::cos(theta));
                        cache[p * c.head_dim + half + i] = static_cast<float>(std::sin(theta));
                    }
            }
            (void)n;
        });
    xk::RopeDesc d;
    d.style = c.style;
    d.tokens = c.tokens;
    d.q_heads = d.k_heads = c.heads;
    d.head_dim = c.head_dim;
    d.dtype = c.dt;
    d.max_position = kMaxPosition;
    const xk::RopePlan plan(d);
    const double bytes = static_cast<double>(4 * n * es + c.tokens * (8 + c.head_dim * 4));
    xb::CopyYardstick copy(state, c.dram, bytes, /*in_place=*/true);  // q and k rotated in place
    for (auto _ : state) {
        const size_t s = bufs.next();
        xk::RopeArgs a;
        a.q = bufs.get<char>(s, 0);
        a.k = bufs.get<char>(s, 1);
        a.positions = bufs.get<int64_t>(s, 2);
        a.cos_sin_cache = bufs.get<float>(s, 3);
        copy.begin();
        plan.run(a);
        copy.end();
        benchmark::ClobberMemory();
    }
    copy.finish();
    xb::set_gbps(state, bytes);
    state.SetLabel(std::string(plan.impl_name()) + (c.dram ? ", " + std::to_string(bufs.sets()) + " sets" : ""));
}

// ---- glu ----------------------------------------------------------------------------------------
struct GluCase {
    xk::Activation act;
    DType dt;
    int64_t rows, inner;
    bool dram;
};

void BM_glu_xk(benchmark::State& state, GluCase c, int nt) {
    xb::ScopedThreads threads(nt);
    const size_t es = esize(c.dt), n = static_cast<size_t>(c.rows * c.inner);
    const std::string key = std::string("glu/") + dname(c.dt) + "/" + shape2(c.rows, c.inner) + (c.dram ? "/dram" : "");
    xb::RotatingBuffers& bufs =
        xb::cached_rotating_buffers(key, {2 * n * es, n * es}, c.dram ? xb::rotate_bytes() : 0, [c](xb::RotatingBuffers& b) {
            if (c.dt == DType::bf16) b.fill_uniform<xk::bf16>(0, -4, 4, 1);
            else b.fill_uniform<float>(0, -4, 4, 1);
            b.fill_uniform<float>(1, 0, 0, 2);
        });
    xk::GluDesc d;
    d.activation = c.act;
    d.rows = c.rows;
    d.inner = c.inner;
    d.x_dtype = d.y_dtype = c.dt;
    const xk::GluPlan plan(d);
    xb::CopyYardstick copy(state, c.dram, static_cast<double>(3 * n * es));
    for (auto _ : state) {
        const size_t s = bufs.next();
        copy.begin();
        plan.run(xk::GluArgs{bufs.get<char>(s, 0), bufs.get<char>(s, 1)});
        copy.end();
        benchmark::ClobberMemory();
    }
    copy.finish();
    xb::set_gbps(state, static_cast<double>(3 * n * es));
    state.SetLabel(std::string(plan.impl_name()) + (c.dram ? ", " + std::to_string(bufs.sets()) + " sets" : ""));
}

// ---- softmax ------------------------------------------------------------------------------------
void BM_softmax_xk(benchmark::State& state, DType dt, int64_t rows, int64_t cols, bool causal, int nt) {
    xb::ScopedThreads threads(nt);
    const size_t es = esize(dt), n = static_cast<size_t>(rows * cols);
    const std::string key = std::string("softmax/") + dname(dt) + "/" + shape2(rows, cols);
    xb::RotatingBuffers& bufs = xb::cached_rotating_buffers(key, {n * es, n * es}, xb::rotate_bytes(), [dt](xb::RotatingBuffers& b) {
        if (dt == DType::bf16) b.fill_uniform<xk::bf16>(0, -8, 8, 1);
        else b.fill_uniform<float>(0, -8, 8, 1);
        b.fill_uniform<float>(1, 0, 0, 2);
    });
    xk::SoftmaxDesc d;
    d.rows = rows;
    d.cols = cols;
    d.x_dtype = d.y_dtype = dt;
    d.scale = 0.0883883f;  // 1/sqrt(128)
    d.causal = causal;
    d.causal_offset = cols - rows;
    const xk::SoftmaxPlan plan(d);
    // Causal: the masked part of x is not read (y is still written in full).
    double read = static_cast<double>(n);
    if (causal) {
        read = 0;
        for (int64_t r = 0; r < rows; ++r) read += static_cast<double>(std::min<int64_t>(cols, std::max<int64_t>(0, r + d.causal_offset + 1)));
    }
    xb::CopyYardstick copy(state, true, (read + static_cast<double>(n)) * static_cast<double>(es));
    for (auto _ : state) {
        const size_t s = bufs.next();
        copy.begin();
        plan.run(xk::SoftmaxArgs{bufs.get<char>(s, 0), bufs.get<char>(s, 1)});
        copy.end();
        benchmark::ClobberMemory();
    }
    copy.finish();
    xb::set_gbps(state, (read + static_cast<double>(n)) * static_cast<double>(es));
    state.SetLabel(std::string(plan.impl_name()) + ", " + std::to_string(bufs.sets()) + " sets");
}

const bool registered = [] {
    const std::vector<int> nts = xb::thread_counts();
    auto reg = [](const std::string& name, auto fn) { benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime(); };
    auto nt_s = [](int nt) { return "nt:" + std::to_string(nt); };

    // Norms on DRAM.
    for (DType dt : {DType::f32, DType::bf16})
        for (auto shape : {std::pair<int64_t, int64_t>{4096, 4096}, {16384, 8192}})
            for (int nt : nts) {
                const NormCase rms{xk::NormKind::rms_norm, dt, shape.first, shape.second, true, true};
                reg(xb::join_name({"rms_norm", dname(dt), "xk", shape2(shape.first, shape.second), nt_s(nt)}),
                    [rms, nt](benchmark::State& s) { BM_norm_xk(s, rms, nt); });
                for (bool affine : {true, false}) {
                    const NormCase ln{xk::NormKind::layer_norm, dt, shape.first, shape.second, affine, true};
                    const std::string tail = affine ? "scale_shift" : "plain";
                    reg(xb::join_name({"layer_norm", dname(dt), "xk", shape2(shape.first, shape.second), tail, nt_s(nt)}),
                        [ln, nt](benchmark::State& s) { BM_norm_xk(s, ln, nt); });
                    reg(xb::join_name({"layer_norm", dname(dt), "onednn", shape2(shape.first, shape.second), tail, nt_s(nt)}),
                        [ln, nt](benchmark::State& s) { BM_layer_norm_onednn(s, ln, nt); });
                }
            }
    // The pre-norm block on DRAM: the fused residual add, in place and apart.
    for (DType dt : {DType::f32, DType::bf16})
        for (auto res : {NormCase::Residual::in_place, NormCase::Residual::apart})
            for (int nt : nts) {
                const std::string where = res == NormCase::Residual::apart ? "apart" : "";
                NormCase rms{xk::NormKind::rms_norm, dt, 4096, 4096, true, true};
                rms.residual = res;
                reg(xb::join_name({"rms_norm", dname(dt), "xk", "4096x4096", "residual", where, nt_s(nt)}),
                    [rms, nt](benchmark::State& s) { BM_norm_xk(s, rms, nt); });
                NormCase ln{xk::NormKind::layer_norm, dt, 4096, 4096, true, true};
                ln.residual = res;
                reg(xb::join_name({"layer_norm", dname(dt), "xk", "4096x4096", "scale_shift", "residual", where, nt_s(nt)}),
                    [ln, nt](benchmark::State& s) { BM_norm_xk(s, ln, nt); });
            }
    // RoPE on DRAM.
    for (DType dt : {DType::f32, DType::bf16})
        for (xk::RopeStyle st : {xk::RopeStyle::neox, xk::RopeStyle::gptj})
            for (int nt : nts) {
                const RopeCase c{st, dt, 2048, 32, 128, true};
                reg(xb::join_name({"rope", dname(dt), "xk", xk::rope_style_name(st), "2048x32x128", nt_s(nt)}),
                    [c, nt](benchmark::State& s) { BM_rope_xk(s, c, nt); });
            }
    // GLU on DRAM.
    for (DType dt : {DType::f32, DType::bf16})
        for (int nt : nts) {
            const GluCase c{xk::Activation::silu, dt, 4096, 11008, true};
            reg(xb::join_name({"swiglu", dname(dt), "xk", "4096x11008", nt_s(nt)}), [c, nt](benchmark::State& s) { BM_glu_xk(s, c, nt); });
        }
    for (xk::Activation act : {xk::Activation::gelu_erf, xk::Activation::gelu_tanh})
        for (DType dt : {DType::f32, DType::bf16})
            for (int nt : nts) {
                const GluCase c{act, dt, 4096, 11008, true};
                reg(xb::join_name({act == xk::Activation::gelu_erf ? "geglu" : "geglu_tanh", dname(dt), "xk", "4096x11008",
                                   nt_s(nt)}),
                    [c, nt](benchmark::State& s) { BM_glu_xk(s, c, nt); });
            }
    // Softmax on DRAM.
    for (DType dt : {DType::f32, DType::bf16})
        for (bool causal : {false, true})
            for (int nt : nts)
                reg(xb::join_name({"softmax", dname(dt), "xk", "16384x4096", causal ? "causal" : "", nt_s(nt)}),
                    [dt, causal, nt](benchmark::State& s) { BM_softmax_xk(s, dt, 16384, 4096, causal, nt); });

    // Decode shapes: one call on cache-resident data, at every thread count of the sweep (one
    // token stays on one thread: the row grains keep ~16K elements a chunk; 16 tokens split).
    for (int64_t t : {1, 4, 16})
        for (int nt : nts) {
            const std::string shape = "decode/t:" + std::to_string(t) + "/h:4096";
            for (DType dt : {DType::bf16, DType::f32}) {
                const NormCase rms{xk::NormKind::rms_norm, dt, t, 4096, true, false};
                reg(xb::join_name({"rms_norm", dname(dt), "xk", shape, nt_s(nt)}),
                    [rms, nt](benchmark::State& s) { BM_norm_xk(s, rms, nt); });
                const NormCase ln{xk::NormKind::layer_norm, dt, t, 4096, true, false};
                reg(xb::join_name({"layer_norm", dname(dt), "xk", shape, nt_s(nt)}),
                    [ln, nt](benchmark::State& s) { BM_norm_xk(s, ln, nt); });
                reg(xb::join_name({"layer_norm", dname(dt), "onednn", shape, nt_s(nt)}),
                    [ln, nt](benchmark::State& s) { BM_layer_norm_onednn(s, ln, nt); });
            }
            const RopeCase rc{xk::RopeStyle::neox, DType::bf16, t, 32, 128, false};
            reg(xb::join_name({"rope", "bf16", "xk", "neox", "decode/t:" + std::to_string(t) + "/h:32x128", nt_s(nt)}),
                [rc, nt](benchmark::State& s) { BM_rope_xk(s, rc, nt); });
            for (DType dt : {DType::bf16, DType::f32}) {
                const GluCase gc{xk::Activation::silu, dt, t, 11008, false};
                reg(xb::join_name({"swiglu", dname(dt), "xk", "decode/t:" + std::to_string(t) + "/i:11008", nt_s(nt)}),
                    [gc, nt](benchmark::State& s) { BM_glu_xk(s, gc, nt); });
            }
        }
    return true;
}();

}  // namespace
