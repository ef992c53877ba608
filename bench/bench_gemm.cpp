// GEMM: xk beside oneDNN 2.6 (matmul), OpenBLAS (cblas_sgemm) and libxsmm (small f32 kernels), on
// the same data, in one process, at every library thread count of XK_BENCH_THREADS (default
// "1,2"; e.g. XK_BENCH_THREADS=1,2,16 on the 16-core Xeon). Debian's OpenBLAS is built without
// BUILD_BFLOAT16 (no cblas_sbgemm): the bf16 and int8 peer is oneDNN alone; PyTorch's figures for
// the same names come from bench/torch_peer.py (another process).
//
// Names: gemm/<dtype>/<provider>/<MxNxK>[_suffix]/threads:<t>
//   dtype     f32      f32 x f32 -> f32
//             bf16     bf16 x bf16 -> f32
//             u8s8s32  u8 x s8 -> s32
//             u8s8f32  u8 x s8 -> f32 with per-channel scales: C[m,n] = a_scale * b_scale[n] * acc
//                      (xk: b_scale_per_channel; oneDNN: output scales a_scale * b_scale[n], mask 2)
//   provider  xk, onednn, openblas (f32), libxsmm (f32, M, N, K <= 64, threads:1 only: its
//             kernels are single-threaded), xk_tuned (f32, M >= 256, K < 4096: a plan made with
//             xk::set_gemm_autotune on, which times xk's kernel against oneDNN once and runs the
//             faster; the label says which and how long the timing plan took to build)
//   threads   each count of XK_BENCH_THREADS, for every row: xk::set_num_threads,
//             omp_set_num_threads (oneDNN's OpenMP runtime, set before its primitive is created)
//             and openblas_set_num_threads (xk::bench::set_threads)
//
// Rows, per thread count (XK_BENCH_QUICK=1, the README's main job, keeps only those marked *):
//   <MxNxK>           plain GEMM, xk beside oneDNN (f32: also OpenBLAS, xk_tuned, libxsmm):
//                     f32, bf16, u8s8s32, u8s8f32 at the issue-25 shapes 512^3, 1024^3*, 2048^3,
//                     4096^3, 384x768x768, 384x3072x768*, 384x768x3072, and 256^3*;
//                     f32, bf16, u8s8s32 also 8^3, 16^3, 32^3, 64^3*, 23^3*, 32x64x16, 128^3 and
//                     1x4096x4096 (M = 1 with a plain [K x N] B)
//   <MxNxK>_prepacked f32 1024^3, 384x768x768, 384x3072x768* (or XK_BENCH_GEMM_SHAPES): B packed once outside the loop,
//                     xk's PackedB beside oneDNN's reordered weights (tag any)
//   <MxNxK>_bias_gelu f32 384x3072x768*: the fused bias + gelu_erf epilogue (oneDNN: a bias and
//                     an eltwise_gelu_erf post-op)
//   <MxNxK>_paired    bf16 (xk only), the issue shapes but 4096^3 (quick: 384x3072x768): xk's bf16,
//                     xk's f32 and oneDNN's bf16 called in turn in one loop (below)
//   <MxNxK>_vs_onednn[_prepacked]  bf16 and u8s8s32, the `_paired` shapes (or XK_BENCH_GEMM_SHAPES="MxNxK,...",
//                     which also replaces the plain rows' issue shapes): xk and oneDNN called in
//                     turn in one loop (xk/onednn = the ratio of that loop); plain B (both pack per
//                     call) or prepacked (xk's PackedB, oneDNN's weights reordered once)
//   <MxNxK>_decode_<layout>  decode, M = 1 and 16, weights from DRAM (below)
//   peak/f32/xk/read/threads:<t>  the read bandwidth of the decode rows' BW% (below)
//
// Counters (every row uses real time):
//   GFLOPS      2 M N K / time (int8: 10^9 integer operations per second)
//   Peak%       rows of >= 10^8 flops: the row's GFLOP/s over its own time against an
//               instruction-peak loop (bench_peak's loops, peak_loops.hpp) run between its calls
//               with the timer paused, for half its flops, on the row's thread count; PeakGFLOPS:
//               that loop's GFLOP/s. The loop is the instruction the dtype's kernels can use at
//               xk's effective ISA (XK_MAX_ISA caps it); the label ends with "peak:<loop>":
//                 f32        fma_zmm (VFMADD231PS zmm, avx512 and above) or fma_ymm (avx2)
//                 bf16       tdpbf16ps (AMX TDPBF16PS, amx), vdpbf16ps (VDPBF16PS zmm,
//                            avx512_bf16), else the f32 FMA loop (bf16 is widened to f32 there;
//                            its target is our f32 rate)
//                 u8s8*      tdpbusd (AMX TDPBUSD, amx), vpdpbusd (VPDPBUSD zmm, avx512_vnni),
//                            vpdpbusd_ymm (VPDPBUSD ymm, avx2_vnni and avx512: VEX with AVX-VNNI,
//                            else EVEX), else the f32 FMA loop (avx2: then Peak% 180 = 1.8x the
//                            FMA peak, the AVX2 int8 target's yardstick)
//               The peers' rows carry it too (the same loop), so their Peak% compares directly.
//               XK_BENCH_NO_PEAK=1: no Peak% loop between the calls (a row timed without it).
//   GBPS        decode rows: weight bytes / time (the ours-vs-peer table shows GB/s for them)
//   BW%         decode rows: their GB/s over their own time against a streaming read of the same
//               number of bytes (from another buffer of XK_BENCH_ROTATE_MB, default 1 GiB, so from
//               DRAM) run between their calls on the same threads; ReadGBPS: that read's GB/s
//   F32_GFLOPS, ONEDNN_GFLOPS, bf16/f32, bf16/onednn   the `_paired` rows (below)
//
// A plan that runs a reference kernel (xk's impl_name "ref:...", oneDNN's "ref:any") is skipped
// above 256^3 with SkipWithError saying so: today xk's int8 still runs its scalar reference, so
// the int8 xk rows above 256^3 report only that until an int8 JIT kernel lands.
//
// Every provider reads the same row-major A (M x K) and B (K x N) and writes its own C; B is in
// its plain layout for everyone (xk runs GemmPlan::run without a PackedB, oneDNN gets plain
// `ab` weights), alpha = 1, beta = 0. Once per benchmark, outside the timed loop, a peer's C is
// compared with xk's (shapes up to 256^3): a mismatch is reported with SkipWithError. The u8 data
// is 7-bit (0..127): oneDNN's AVX2 int8 GEMM saturates pairs of u8*s8 products to s16 (vpmaddubsw)
// and so differs from the exact s32 sum on full-range u8 input. The label names the
// implementation each plan / primitive selected.
//
// bf16 beside fp32 and oneDNN (`_paired`): gemm/bf16/xk/<MxNxK>_paired/threads:<t> runs, call by
// call in turn, xk's bf16 -> f32 plan, xk's f32 plan of the same shape (f32 data) and oneDNN's
// bf16 -> f32 matmul (plain `ab` weights), each timed on its own (manual time = the bf16 calls);
// counters GFLOPS (xk bf16), F32_GFLOPS (xk f32), ONEDNN_GFLOPS (oneDNN bf16, when it can create
// one: it throws on AVX2-only CPUs or under ONEDNN_MAX_CPU_ISA=AVX2, and its reference `ref:any`
// is timed only up to 512^3), bf16/f32 and bf16/onednn (ratios). Alternating gives the three the
// same phases of a shared host. xk's bf16 C is compared with oneDNN's (SkipWithError if they
// differ by more than 1e-4 |C|max: both sum exact bf16 products in fp32).
//
// Decode (LLM token generation): y[M x N] = x[M x K] W^T with a Linear weight W[N x K] (PyTorch's
// layout) for (N, K) = (4096, 4096)*, (11008, 4096), (4096, 11008) and M = 1*, 16*, f32 and bf16
// weights (bf16: x bf16 too, y f32). Each (dtype, N, K) has ceil(XK_BENCH_ROTATE_MB / weight
// bytes) copies of W (>= 1 GiB by default, far above any L3), in the provider's own packed form
// where the row packs, and every call takes the next copy: the weights come from DRAM. Layouts:
//   _decode_packed  xk: GemmPlan::run(args, PackedB) (the production path); oneDNN: weights in
//                   its preferred format (tag any, reordered once)*
//   _decode_bt      unpacked W[N x K] (xk: trans_b = T; oneDNN: tag ba; OpenBLAS (f32):
//                   cblas_sgemm(NoTrans, Trans))*
//   _decode_bt_sgemv  OpenBLAS (f32, M = 1): cblas_sgemv on W
//   _decode_bn      a plain [K x N] B (xk: trans_b = N; oneDNN: tag ab)
// Counters GBPS, GFLOPS, BW% (and Peak% where 2 M N K >= 10^8: M = 16). peak/f32/xk/read: the
// streaming read alone over the whole buffer (the best of 1 or 4 streams per thread, with or
// without a software prefetch, chosen once per thread count and used by BW% too; the label says
// which): the ours-vs-peer table's "xk %peak" column of the decode rows uses it.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <libxsmm.h>

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_util.hpp"
#include "common/parallel.hpp"
#include "peak_loops.hpp"
#include "xk/gemm.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace {

namespace xb = xk::bench;
namespace pk = xk::bench::peak;

struct Shape {
    int64_t M, N, K;
    std::string name() const { return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K); }
    double flops() const { return 2.0 * double(M) * double(N) * double(K); }
    double mnk() const { return double(M) * double(N) * double(K); }
};

// ---- shapes (see the top) -----------------------------------------------------------------------
// Issue 25's shapes: the cubes and BERT-base's three Linear shapes (384 tokens).
const std::vector<Shape> kIssue = {{512, 512, 512},  {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
                                   {384, 768, 768}, {384, 3072, 768},   {384, 768, 3072}};
const std::vector<Shape> kIssueQuick = {{1024, 1024, 1024}, {384, 3072, 768}};
const std::vector<Shape> kSmall = {{8, 8, 8}, {16, 16, 16}, {32, 32, 32}, {64, 64, 64}, {23, 23, 23}, {32, 64, 16}};
const std::vector<Shape> kSmallQuick = {{64, 64, 64}, {23, 23, 23}};
const std::vector<Shape> kMid = {{128, 128, 128}, {256, 256, 256}, {1, 4096, 4096}};
const std::vector<Shape> kMidQuick = {{256, 256, 256}};
const std::vector<Shape> kPrepacked = {{1024, 1024, 1024}, {384, 768, 768}, {384, 3072, 768}};
const std::vector<Shape> kPrepackedQuick = {{384, 3072, 768}};
const Shape kFused = {384, 3072, 768};

enum class Kind { f32, bf16, u8s8s32, u8s8f32 };
const char* kind_name(Kind k) {
    switch (k) {
        case Kind::f32: return "f32";
        case Kind::bf16: return "bf16";
        case Kind::u8s8s32: return "u8s8s32";
        case Kind::u8s8f32: return "u8s8f32";
    }
    return "?";
}
bool is_int8(Kind k) { return k == Kind::u8s8s32 || k == Kind::u8s8f32; }
bool float_c(Kind k) { return k != Kind::u8s8s32; }  // C is f32 (else s32)

// A reference kernel on a shape above this is not timed (seconds to minutes a call).
constexpr double kRefMaxMnk = 256.0 * 256.0 * 256.0;

bool is_reference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

// SkipWithError and true when `impl` is a reference kernel and the shape is above 256^3.
bool skip_reference(benchmark::State& state, const char* who, const std::string& impl, const Shape& s) {
    if (!is_reference(impl) || s.mnk() <= kRefMaxMnk) return false;
    state.SkipWithError((std::string(who) + " runs " + impl +
                         " (a reference kernel) for this dtype here: not timed above 256^3, where one call takes "
                         "seconds to minutes")
                            .c_str());
    return true;
}

// ---- data -----------------------------------------------------------------------------------------
// Inputs of one (kind, shape), generated once and shared by every provider.
struct Data {
    Shape s;
    std::vector<float> A, B;               // f32
    std::vector<xk::bf16> Ah, Bh;          // bf16
    std::vector<uint8_t> Au;               // u8
    std::vector<int8_t> Bs;                // s8
    float a_scale = 0.02f;                 // u8s8f32
    std::vector<float> b_scales;           // u8s8f32: N per-channel scales
    std::vector<float> want_f;             // xk's C (f32 C), for the peers' check
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
        std::uniform_real_distribution<float> us(0.005f, 0.015f);
        d.b_scales.resize(size_t(s.N));
        for (float& v : d.b_scales) v = us(g);
    }
    return d;
}

xk::GemmDesc xk_desc(Kind k, const Shape& s) {
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    if (k == Kind::bf16) d.a_type = d.b_type = xk::DType::bf16;
    if (is_int8(k)) d.a_type = xk::DType::u8, d.b_type = xk::DType::s8;
    if (k == Kind::u8s8s32) d.c_type = xk::DType::s32;
    if (k == Kind::u8s8f32) d.b_scale_per_channel = true;
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
    if (k == Kind::u8s8f32) a.a_scale = &d.a_scale, a.b_scales = d.b_scales.data();
    return a;
}

// C of one provider: f32 or s32 by kind.
struct COut {
    std::vector<float> f;
    std::vector<int32_t> i;
    COut(Kind k, const Shape& s) {
        if (float_c(k)) f.resize(size_t(s.M * s.N));
        else i.resize(size_t(s.M * s.N));
    }
    void* ptr() { return f.empty() ? static_cast<void*>(i.data()) : static_cast<void*>(f.data()); }
};

bool checked(const Shape& s) { return s.mnk() <= kRefMaxMnk; }

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

// Compares a peer's C with xk's; on mismatch marks the benchmark as failed. int8 -> s32 must be
// exact; f32 C within 1e-4 |C|max (f32, bf16: summation order) or 1e-5 |C|max (u8s8f32: the
// scales applied in another order).
void check_result(benchmark::State& state, Kind k, Data& d, const COut& got) {
    if (!checked(d.s)) return;
    ensure_want(k, d);
    double max_err = 0, max_ref = 0;
    const size_t n = float_c(k) ? got.f.size() : got.i.size();
    for (size_t i = 0; i < n; ++i) {
        const double w = float_c(k) ? double(d.want_f[i]) : double(d.want_i[i]);
        const double v = float_c(k) ? double(got.f[i]) : double(got.i[i]);
        max_err = std::max(max_err, std::fabs(v - w));
        max_ref = std::max(max_ref, std::fabs(w));
    }
    const double tol = k == Kind::u8s8s32 ? 0.0 : (k == Kind::u8s8f32 ? 1e-5 : 1e-4) * std::max(1.0, max_ref);
    if (max_err > tol)
        state.SkipWithError(("result differs from xk's: max |diff| = " + std::to_string(max_err)).c_str());
}

// ---- the instruction peak of a dtype (Peak%, see the top) ----------------------------------------
// The loop a row of kind `k` is measured against at xk's effective ISA; ComputeOp::count: none
// (a scalar cap, or a machine without AVX2).
pk::ComputeOp peak_op(Kind k) {
    const xk::Isa isa = xk::max_isa();
    if (isa < xk::Isa::avx2) return pk::ComputeOp::count;
    if (k == Kind::bf16 && isa >= xk::Isa::amx) return pk::ComputeOp::tdpbf16ps;
    if (is_int8(k) && isa >= xk::Isa::amx) return pk::ComputeOp::tdpbusd;
    if (k == Kind::bf16 && isa >= xk::Isa::avx512_bf16) return pk::ComputeOp::vdpbf16ps;
    if (is_int8(k) && isa >= xk::Isa::avx512_vnni) return pk::ComputeOp::vpdpbusd;
    if (is_int8(k) && isa >= xk::Isa::avx2_vnni && xk::isa_supported(xk::Isa::avx2_vnni))
        return pk::ComputeOp::vpdpbusd_ymm;  // (avx512 does not imply avx2_vnni: Skylake-X)
    return isa >= xk::Isa::avx512 ? pk::ComputeOp::fma_zmm : pk::ComputeOp::fma_ymm;
}

// Adds the Peak% stick to `ph` when the row is large enough and a loop applies; returns the label
// suffix (" | peak:<loop>") or "".
std::string add_peak(xb::InPhase& ph, Kind k, const Shape& s) {
    const pk::ComputeOp op = peak_op(k);
    static const bool off = [] {
        const char* e = std::getenv("XK_BENCH_NO_PEAK");
        return e && *e && std::string(e) != "0";
    }();
    if (off || s.flops() < 1e8 || op == pk::ComputeOp::count || !pk::unsupported(op).empty()) return "";
    const double f = s.flops();
    ph.add("Peak%", "PeakGFLOPS", f, [op, f] { return pk::run_peak(op, 0.5 * f); });
    return std::string(" | peak:") + pk::short_name(op);
}

// The timed loop of a compute row: call() once an iteration, the Peak% loop between the calls.
// Returns the label suffix.
template <class F>
std::string timed_calls(benchmark::State& state, Kind k, const Shape& s, F&& call) {
    xb::InPhase ph(state);
    const std::string note = add_peak(ph, k, s);
    for (auto _ : state) {
        ph.begin();
        call();
        ph.end();
        benchmark::ClobberMemory();
    }
    ph.finish();
    return note;
}

void finish(benchmark::State& state, const Shape& s) { xb::set_gflops(state, s.flops()); }

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- providers -------------------------------------------------------------------------------

void bench_xk(benchmark::State& state, Kind k, Shape s, int threads) {
    xb::set_threads(threads);
    const xk::GemmPlan plan(xk_desc(k, s));
    if (skip_reference(state, "xk", plan.impl_name(), s)) return;
    Data& d = data(k, s);
    COut C(k, s);
    const xk::GemmArgs args = xk_args(k, d, C.ptr());
    const std::string note = timed_calls(state, k, s, [&] { plan.run(args); });
    state.SetLabel(plan.impl_name() + note);
    finish(state, s);
}

// xk with measured routing (xk::set_gemm_autotune): the plan times its kernel against oneDNN's
// matmul once per shape and thread count (the first construction in the process; later ones read
// the decision) and runs the faster. Label: the implementation it runs, and what tuning cost.
void bench_xk_tuned(benchmark::State& state, Kind k, Shape s, int threads) {
    xb::set_threads(threads);
    Data& d = data(k, s);
    xk::set_gemm_autotune(true);
    const double t0 = now_ms();
    const xk::GemmPlan plan(xk_desc(k, s));
    const double ms = now_ms() - t0;
    xk::set_gemm_autotune(false);
    static std::map<std::string, double> first_ms;  // the construction that timed (benchmarks run one at a time)
    const double tune_ms = first_ms.emplace(s.name() + "/" + std::to_string(threads), ms).first->second;
    COut C(k, s);
    const xk::GemmArgs args = xk_args(k, d, C.ptr());
    const std::string note = timed_calls(state, k, s, [&] { plan.run(args); });
    check_result(state, k, d, C);
    char label[96];
    std::snprintf(label, sizeof label, "%s (tuned; plan took %.1f ms)", plan.impl_name(), tune_ms);
    state.SetLabel(label + note);
    finish(state, s);
}

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

void bench_onednn(benchmark::State& state, Kind k, Shape s, int threads) {
    xb::set_threads(threads);  // before the primitive is created
    const dt at = k == Kind::f32 ? dt::f32 : k == Kind::bf16 ? dt::bf16 : dt::u8;
    const dt bt = k == Kind::f32 ? dt::f32 : k == Kind::bf16 ? dt::bf16 : dt::s8;
    const dt ct = k == Kind::u8s8s32 ? dt::s32 : dt::f32;
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, at, tag::ab), b_md({s.K, s.N}, bt, tag::ab),
            c_md({s.M, s.N}, ct, tag::ab);
        Data& d = data(k, s);
        dnnl::primitive_attr attr;
        if (k == Kind::u8s8f32) {  // C = (a_scale * b_scale[n]) * acc
            std::vector<float> sc(size_t(s.N));
            for (size_t n = 0; n < sc.size(); ++n) sc[n] = d.a_scale * d.b_scales[n];
            attr.set_output_scales(1 << 1, sc);
        }
        dnnl::matmul::primitive_desc pd;
        try {
            pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
        } catch (const dnnl::error&) {
            state.SkipWithError((std::string("oneDNN has no ") + kind_name(k) + " matmul on this CPU (or ISA cap)").c_str());
            return;
        }
        if (skip_reference(state, "oneDNN", pd.impl_info_str(), s)) return;
        const dnnl::matmul prim(pd);
        COut C(k, s);
        const xk::GemmArgs a = xk_args(k, d, nullptr);
        dnnl::memory am(a_md, eng, const_cast<void*>(a.A)), bm(b_md, eng, const_cast<void*>(a.B));
        dnnl::memory cm(c_md, eng, C.ptr());
        const std::unordered_map<int, dnnl::memory> margs = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        const std::string note = timed_calls(state, k, s, [&] {
            prim.execute(strm, margs);
            strm.wait();
        });
        state.SetLabel(pd.impl_info_str() + note);
        finish(state, s);
        check_result(state, k, d, C);
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
    }
}

void bench_openblas(benchmark::State& state, Kind k, Shape s, int threads) {
    xb::set_threads(threads);
    Data& d = data(k, s);
    COut C(k, s);
    const auto M = blasint(s.M), N = blasint(s.N), K = blasint(s.K);
    const std::string note = timed_calls(state, k, s, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, d.A.data(), K, d.B.data(), N, 0.0f,
                    C.f.data(), N);
    });
    state.SetLabel("cblas_sgemm" + note);
    finish(state, s);
    check_result(state, k, d, C);
}

// libxsmm is column-major: row-major C = A B is column-major C^T = B^T A^T, i.e. a column-major
// GEMM with m = N, n = M, k = K, "A" = our B (ld N), "B" = our A (ld K), ldc = N.
void bench_libxsmm(benchmark::State& state, Kind k, Shape s, int threads) {
    static const bool init = [] {
        libxsmm_init();
        return true;
    }();
    (void)init;
    xb::set_threads(threads);
    Data& d = data(Kind::f32, s);
    COut C(k, s);
    const libxsmm_blasint m = s.N, n = s.M, kk = s.K, lda = s.N, ldb = s.K, ldc = s.N;
    const float alpha = 1.0f, beta = 0.0f;
    const libxsmm_smmfunction kernel = libxsmm_smmdispatch(m, n, kk, &lda, &ldb, &ldc, &alpha, &beta, nullptr, nullptr);
    if (!kernel) {
        state.SkipWithError("libxsmm could not generate this kernel");
        return;
    }
    for (auto _ : state) {
        kernel(d.B.data(), d.A.data(), C.f.data());
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
    xb::set_threads(threads);
    Data& d = data(k, s);
    const xk::GemmPlan plan(xk_desc(k, s));
    const xk::PackedB w = plan.pack_b(d.B.data());
    COut C(k, s);
    xk::GemmArgs args = xk_args(k, d, C.ptr());
    args.B = nullptr;
    const std::string note = timed_calls(state, k, s, [&] { plan.run(args, w); });
    state.SetLabel(plan.impl_name() + note);
    finish(state, s);
    check_result(state, k, d, C);
}

void bench_onednn_prepacked(benchmark::State& state, Kind k, Shape s, int threads) {
    xb::set_threads(threads);
    Data& d = data(k, s);
    COut C(k, s);
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, dt::f32, tag::ab), b_plain({s.K, s.N}, dt::f32, tag::ab),
            b_any({s.K, s.N}, dt::f32, tag::any), c_md({s.M, s.N}, dt::f32, tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
        const dnnl::matmul prim(pd);
        dnnl::memory am(a_md, eng, d.A.data()), plain(b_plain, eng, d.B.data()), cm(c_md, eng, C.ptr());
        dnnl::memory bm = plain;
        if (pd.weights_desc() != b_plain) {
            bm = dnnl::memory(pd.weights_desc(), eng);
            dnnl::reorder(plain, bm).execute(strm, plain, bm);
            strm.wait();
        }
        const std::unordered_map<int, dnnl::memory> margs = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        const std::string note = timed_calls(state, k, s, [&] {
            prim.execute(strm, margs);
            strm.wait();
        });
        state.SetLabel(pd.impl_info_str() + note);
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
    xb::set_threads(threads);
    Data& d = data(k, s);
    xk::GemmDesc desc = xk_desc(k, s);
    desc.epilogue.bias = true;
    desc.epilogue.act = xk::Activation::gelu_erf;
    const xk::GemmPlan plan(desc);
    COut C(k, s);
    xk::GemmArgs args = xk_args(k, d, C.ptr());
    args.bias = fused_bias(s.N).data();
    const std::string note = timed_calls(state, k, s, [&] { plan.run(args); });
    state.SetLabel(plan.impl_name() + note);
    finish(state, s);
}

void bench_onednn_fused(benchmark::State& state, Kind k, Shape s, int threads) {
    xb::set_threads(threads);
    Data& d = data(k, s);
    COut C(k, s);
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
            cm(c_md, eng, C.ptr());
        const std::unordered_map<int, dnnl::memory> margs = {
            {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_BIAS, biasm}, {DNNL_ARG_DST, cm}};
        const std::string note = timed_calls(state, k, s, [&] {
            prim.execute(strm, margs);
            strm.wait();
        });
        state.SetLabel(pd.impl_info_str() + note);
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
        return;
    }
    finish(state, s);
}

// ---- bf16 beside fp32 and oneDNN, interleaved (`_paired`, see the top) -----------------------------

void bench_bf16_paired(benchmark::State& state, Kind, Shape s, int threads) {
    using clock = std::chrono::steady_clock;
    xb::set_threads(threads);
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
        if (!is_reference(onednn_impl) || s.flops() <= 2.0 * 512 * 512 * 512) {
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

// ---- registration of the compute rows ---------------------------------------------------------------

// ---- bf16 / u8s8s32 against oneDNN, interleaved (`_vs_onednn[_prepacked]`) -----------------------
// xk and oneDNN called in turn in one timing loop (this host's rates drift between rows; the ratio
// of one loop does not). Plain: B given plain to both (each packs / reorders it per call);
// prepacked: xk's PackedB beside oneDNN's weights reordered once to its preferred layout.
void bench_lp_paired(benchmark::State& state, Kind k, Shape s, int threads, bool prepacked) {
    using clock = std::chrono::steady_clock;
    xb::set_threads(threads);
    Data& d = data(k, s);
    const xk::GemmPlan plan(xk_desc(k, s));
    COut Cx(k, s), Co(k, s);
    xk::GemmArgs ax = xk_args(k, d, Cx.ptr());
    xk::PackedB w;
    if (prepacked) {
        w = plan.pack_b(ax.B);
        ax.B = nullptr;
    }
    const dt at = k == Kind::bf16 ? dt::bf16 : dt::u8, bt = k == Kind::bf16 ? dt::bf16 : dt::s8;
    const dt ct = k == Kind::u8s8s32 ? dt::s32 : dt::f32;
    std::string onednn_impl;
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, at, tag::ab), b_plain({s.K, s.N}, bt, tag::ab),
            b_any({s.K, s.N}, bt, prepacked ? tag::any : tag::ab), c_md({s.M, s.N}, ct, tag::ab);
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
        onednn_impl = pd.impl_info_str();
        const xk::GemmArgs a0 = xk_args(k, d, nullptr);
        dnnl::memory am(a_md, eng, const_cast<void*>(a0.A)), plain(b_plain, eng, const_cast<void*>(a0.B));
        dnnl::memory cm(c_md, eng, Co.ptr()), bm = plain;
        if (pd.weights_desc() != b_plain) {
            bm = dnnl::memory(pd.weights_desc(), eng);
            dnnl::reorder(plain, bm).execute(strm, plain, bm);
            strm.wait();
        }
        const dnnl::matmul prim(pd);
        const std::unordered_map<int, dnnl::memory> margs = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
        auto run_x = [&] { prepacked ? plan.run(ax, w) : plan.run(ax); };
        auto run_o = [&] {
            prim.execute(strm, margs);
            strm.wait();
        };
        run_x();
        run_o();
        // the check: int8 exact, bf16 within 1e-4 |C|max (summation order)
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < size_t(s.M * s.N); ++i) {
            const double x = k == Kind::bf16 ? double(Cx.f[i]) : double(Cx.i[i]);
            const double o = k == Kind::bf16 ? double(Co.f[i]) : double(Co.i[i]);
            max_err = std::max(max_err, std::fabs(x - o));
            max_ref = std::max(max_ref, std::fabs(o));
        }
        if (max_err > (k == Kind::bf16 ? 1e-4 * std::max(1.0, max_ref) : 0.0)) {
            state.SkipWithError(("result differs from oneDNN's: max |diff| = " + std::to_string(max_err)).c_str());
            return;
        }
        double tx = 0, to = 0;
        for (auto _ : state) {
            const auto t0 = clock::now();
            run_x();
            const auto t1 = clock::now();
            run_o();
            const auto t2 = clock::now();
            const double x = std::chrono::duration<double>(t1 - t0).count();
            tx += x;
            to += std::chrono::duration<double>(t2 - t1).count();
            state.SetIterationTime(x);
            benchmark::ClobberMemory();
        }
        const double n = double(state.iterations()), gf = s.flops() * 1e-9;
        if (n > 0) {
            state.counters["GFLOPS"] = gf * n / tx;
            state.counters["ONEDNN_GFLOPS"] = gf * n / to;
            state.counters["xk/onednn"] = to / tx;
        }
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
        return;
    }
    state.SetLabel(std::string(plan.impl_name()) + " | onednn " + onednn_impl);
}

using BenchFn = void (*)(benchmark::State&, Kind, Shape, int);

std::string row_name(Kind k, const std::string& provider, const Shape& s, const std::string& suffix, int threads) {
    return "gemm/" + std::string(kind_name(k)) + "/" + provider + "/" + s.name() + suffix + "/threads:" +
           std::to_string(threads);
}

void add(Kind k, const char* provider, BenchFn fn, const Shape& s, int threads, const char* suffix = "") {
    benchmark::RegisterBenchmark(row_name(k, provider, s, suffix, threads).c_str(),
                                 [=](benchmark::State& st) { fn(st, k, s, threads); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
}

bool register_all() {
    const bool quick = xb::quick();
    const std::vector<int> threads_list = xb::thread_counts();
    const bool has1 = std::find(threads_list.begin(), threads_list.end(), 1) != threads_list.end();
    auto pick = [quick](const std::vector<Shape>& full, const std::vector<Shape>& q) { return quick ? q : full; };
    // XK_BENCH_GEMM_SHAPES="512x4096x4096,512x14336x4096": the plain and `_vs_onednn` rows at these
    // shapes instead of the issue shapes (e.g. a model's Linear layers: M tokens x N outputs x K
    // inputs).
    std::vector<Shape> env_shapes;
    if (const char* e = std::getenv("XK_BENCH_GEMM_SHAPES"); e && *e) {
        const std::string list(e);
        for (size_t p0 = 0; p0 < list.size();) {
            size_t p1 = list.find(',', p0);
            if (p1 == std::string::npos) p1 = list.size();
            long m = 0, n = 0, k = 0;
            if (std::sscanf(list.substr(p0, p1 - p0).c_str(), "%ldx%ldx%ld", &m, &n, &k) == 3 && m > 0 && n > 0 && k > 0)
                env_shapes.push_back({m, n, k});
            p0 = p1 + 1;
        }
    }
    for (Kind k : {Kind::f32, Kind::bf16, Kind::u8s8s32, Kind::u8s8f32}) {
        std::vector<Shape> shapes;
        if (k != Kind::u8s8f32) {
            const auto small = pick(kSmall, kSmallQuick);
            shapes.insert(shapes.end(), small.begin(), small.end());
            const auto mid = pick(kMid, kMidQuick);
            shapes.insert(shapes.end(), mid.begin(), mid.end());
        } else {
            shapes.push_back({256, 256, 256});
        }
        const auto issue = env_shapes.empty() ? pick(kIssue, kIssueQuick) : env_shapes;
        shapes.insert(shapes.end(), issue.begin(), issue.end());
        for (const Shape& s : shapes) {
            for (int threads : threads_list) {
                add(k, "xk", bench_xk, s, threads);
                add(k, "onednn", bench_onednn, s, threads);
                if (k == Kind::f32) add(k, "openblas", bench_openblas, s, threads);
                if (k == Kind::f32 && s.M >= 256 && s.K < 4096 && !quick) add(k, "xk_tuned", bench_xk_tuned, s, threads);
            }
            if (k == Kind::f32 && has1 && s.M <= 64 && s.N <= 64 && s.K <= 64) add(k, "libxsmm", bench_libxsmm, s, 1);
        }
    }
    // (XK_BENCH_GEMM_SHAPES replaces the prepacked rows' shapes too: a Linear layer's weights are prepacked)
    for (const Shape& s : env_shapes.empty() ? pick(kPrepacked, kPrepackedQuick) : env_shapes)
        for (int threads : threads_list) {
            add(Kind::f32, "xk", bench_xk_prepacked, s, threads, "_prepacked");
            add(Kind::f32, "onednn", bench_onednn_prepacked, s, threads, "_prepacked");
        }
    for (int threads : threads_list) {
        add(Kind::f32, "xk", bench_xk_fused, kFused, threads, "_bias_gelu");
        add(Kind::f32, "onednn", bench_onednn_fused, kFused, threads, "_bias_gelu");
    }
    std::vector<Shape> paired;
    for (const Shape& s : pick(kIssue, {kFused}))
        if (s.M < 4096) paired.push_back(s);
    for (const Shape& s : paired)
        for (int threads : threads_list)
            benchmark::RegisterBenchmark(row_name(Kind::bf16, "xk", s, "_paired", threads).c_str(),
                                         [=](benchmark::State& st) { bench_bf16_paired(st, Kind::bf16, s, threads); })
                ->UseManualTime()
                ->Unit(benchmark::kMillisecond);
    std::vector<Shape> lp_shapes = env_shapes;
    if (lp_shapes.empty())
        for (const Shape& s : pick(kIssue, {kFused}))
            if (s.M < 4096) lp_shapes.push_back(s);
    for (Kind k : {Kind::bf16, Kind::u8s8s32})
        for (bool pp : {false, true})
            for (const Shape& s : lp_shapes)
                    for (int threads : threads_list)
                        benchmark::RegisterBenchmark(
                            row_name(k, "xk", s, pp ? "_vs_onednn_prepacked" : "_vs_onednn", threads).c_str(),
                            [=](benchmark::State& st) { bench_lp_paired(st, k, s, threads, pp); })
                            ->UseManualTime()
                            ->Unit(benchmark::kMillisecond);
    return true;
}

[[maybe_unused]] const bool g_registered = register_all();

// ---- decode (see the top) ----------------------------------------------------------------------------
namespace decode {

enum class WType { f32, bf16 };
const char* wname(WType t) { return t == WType::f32 ? "f32" : "bf16"; }
size_t esize(WType t) { return t == WType::f32 ? 4 : 2; }
Kind kind_of(WType t) { return t == WType::f32 ? Kind::f32 : Kind::bf16; }
double weight_bytes(WType t, const Shape& s) { return double(s.N) * double(s.K) * double(esize(t)); }

enum class Layout { packed, bt, bn };
const char* layout_name(Layout l) { return l == Layout::packed ? "packed" : l == Layout::bt ? "bt" : "bn"; }

// ---- the streaming read: BW%'s yardstick and peak/f32/xk/read ----
// Sum of n floats (4 independent vector accumulators) read as `streams` equal parts in lockstep,
// 1 KiB of each per step (the decode kernels read several panels at once: one stream alone
// under-reads some cores); with `pf`, one prefetch per KiB and stream 8 KiB ahead (on Zen 3 this
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

struct Variant {
    bool pf = false;
    int streams = 1;
    std::string name() const { return "x" + std::to_string(streams) + (pf ? "+prefetch" : ""); }
};

// A buffer of XK_BENCH_ROTATE_MB (default 1 GiB) of floats, read from a cursor that moves on
// after every read (so a read never finds its lines in the cache).
class ReadPool {
public:
    ReadPool() {
        n_ = std::max<size_t>(kStep, xb::rotate_bytes() / sizeof(float) / kStep * kStep);
        buf_ = xb::alloc_aligned<float>(n_);
        xb::fill_value(buf_.get(), n_, 1.0f);
    }
    size_t floats() const { return n_; }

    // Reads about `floats` floats (whole KiBs per thread; at most the buffer) from the cursor on,
    // starting over at 0 where they do not fit, over xk's current threads; returns the bytes read.
    double read(size_t floats, const Variant& v) {
        const size_t threads = size_t(std::max(1, xk::get_num_threads()));
        const size_t per = std::max<size_t>(256, std::min(floats, n_) / threads / 256 * 256);
        const size_t total = std::min(per * threads, n_ / per * per);
        if (cursor_ + total > n_) cursor_ = 0;
        const float* base = buf_.get() + cursor_;
        std::vector<double> part(threads * 8, 0.0);
        xk::detail::parallel_for(int64_t(total / per), 1, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) part[size_t(t) * 8] = sum_range(base + size_t(t) * per, per, v.pf, v.streams);
        });
        cursor_ += total;
        for (size_t t = 0; t < threads; ++t) sink_ += part[t * 8];
        benchmark::DoNotOptimize(sink_);
        return double(total) * sizeof(float);
    }

    // The fastest variant at the current thread count (1 or 4 streams, with or without prefetch;
    // two reads of 256 MiB each), chosen once per count.
    const Variant& best() {
        const int threads = xk::get_num_threads();
        auto it = best_.find(threads);
        if (it != best_.end()) return it->second;
        Variant pick;
        double best_gbps = 0;
        const size_t floats = std::min(n_, (size_t(256) << 20) / sizeof(float));
        for (int streams : {1, 4})
            for (bool pf : {false, true}) {
                const Variant v{pf, streams};
                for (int rep = 0; rep < 2; ++rep) {
                    const auto t0 = std::chrono::steady_clock::now();
                    const double bytes = read(floats, v);
                    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                    if (bytes / sec > best_gbps) best_gbps = bytes / sec, pick = v;
                }
            }
        return best_[threads] = pick;
    }

private:
    static constexpr size_t kStep = 1 << 16;  // floats (256 KiB)
    xb::AlignedArray<float> buf_;
    size_t n_ = 0, cursor_ = 0;
    double sink_ = 0;
    std::map<int, Variant> best_;
};

ReadPool& read_pool() {
    static ReadPool pool;  // only when a decode or read row runs
    return pool;
}

// peak/f32/xk/read/threads:<t>: the whole buffer per iteration with the chosen variant.
void bench_read(benchmark::State& state, int threads) {
    if (!xk::isa_supported(xk::Isa::avx2)) {
        state.SkipWithError("the read loop needs avx2");
        return;
    }
    xb::set_threads(threads);
    ReadPool& rp = read_pool();
    const Variant v = rp.best();
    double bytes = 0;
    for (auto _ : state) bytes += rp.read(rp.floats(), v);
    state.counters["GBPS"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsRate);
    state.SetLabel("read " + v.name() + " over " + std::to_string((rp.floats() * sizeof(float)) >> 20) + " MiB");
}

// ---- weights and activations ----
// W[N x K] of one (dtype, N, K) in copies of >= XK_BENCH_ROTATE_MB in all (one set alive at a
// time: asking for another frees it). The f32 `bn` rows read the same values as a [K x N] B.
xb::RotatingBuffers& weights(WType t, const Shape& s) {
    const std::string key = std::string("decode/") + wname(t) + "/" + std::to_string(s.N) + "x" + std::to_string(s.K);
    return xb::cached_rotating_buffers(key, {size_t(weight_bytes(t, s))}, xb::rotate_bytes(), [t](xb::RotatingBuffers& b) {
        if (t == WType::f32) b.fill_uniform<float>(0, -1.0, 1.0, 777);
        else b.fill_uniform<xk::bf16>(0, -1.0, 1.0, 777);
    });
}

// x[M x K] (f32 or bf16 by the weights' type), made once per (type, M, K).
const void* activations(WType t, const Shape& s) {
    static std::map<std::string, std::vector<uint8_t>> xs;
    auto& v = xs[std::string(wname(t)) + std::to_string(s.M) + "x" + std::to_string(s.K)];
    if (v.empty()) {
        v.resize(size_t(s.M * s.K) * esize(t));
        if (t == WType::f32) xb::fill_uniform(reinterpret_cast<float*>(v.data()), size_t(s.M * s.K), -1.0, 1.0, 99);
        else xb::fill_uniform(reinterpret_cast<xk::bf16*>(v.data()), size_t(s.M * s.K), -1.0, 1.0, 99);
    }
    return v.data();
}

// One process-wide slot for the packed copies of one row (xk's PackedB, oneDNN's reordered
// weights): a row asking with another key frees the old ones before building its own.
template <class T>
T& packed_slot(const std::string& key, const std::function<std::shared_ptr<T>()>& make) {
    static std::string cached_key;
    static std::shared_ptr<void> cached;
    if (!cached || cached_key != key) {
        cached.reset();
        cached_key.clear();
        cached = make();
        cached_key = key;
    }
    return *static_cast<T*>(cached.get());
}

// The timed loop of a decode row: call(i) with copy i = 0, 1, ..., copies-1, 0, ...; BW% (and
// Peak% on rows of >= 10^8 flops) between the calls; counters and label.
template <class F>
void decode_loop(benchmark::State& state, WType t, const Shape& s, size_t copies, const std::string& impl, F&& call) {
    xb::InPhase ph(state);
    const double wb = weight_bytes(t, s);
    std::string note;
    if (xk::isa_supported(xk::Isa::avx2)) {
        ReadPool& rp = read_pool();
        const Variant v = rp.best();
        ph.add("BW%", "ReadGBPS", wb, [&rp, v, wb] { return rp.read(size_t(wb / sizeof(float)), v); });
        note = " | read:" + v.name();
    }
    note += add_peak(ph, kind_of(t), s);
    size_t i = 0;
    for (auto _ : state) {
        ph.begin();
        call(i);
        ph.end();
        benchmark::ClobberMemory();
        i = i + 1 == copies ? 0 : i + 1;
    }
    ph.finish();
    state.SetLabel(impl + " x" + std::to_string(copies) + note);
    xb::set_gflops(state, s.flops());
    xb::set_gbps(state, wb);
}

void bench_xk_decode(benchmark::State& state, WType t, Shape s, int threads, Layout layout) {
    xb::set_threads(threads);
    xb::RotatingBuffers& W = weights(t, s);
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    d.trans_b = layout == Layout::bn ? xk::Trans::N : xk::Trans::T;
    if (t == WType::bf16) d.a_type = d.b_type = xk::DType::bf16;
    const xk::GemmPlan plan(d);
    const size_t n = W.sets();
    const std::vector<xk::PackedB>* packed = nullptr;
    if (layout == Layout::packed)
        packed = &packed_slot<std::vector<xk::PackedB>>(
            std::string("xk/") + wname(t) + "/" + s.name() + "/" + plan.impl_name(), [&] {
                auto v = std::make_shared<std::vector<xk::PackedB>>();
                for (size_t i = 0; i < n; ++i) v->push_back(plan.pack_b(W.get<unsigned char>(i, 0)));
                return v;
            });
    std::vector<float> C(size_t(s.M * s.N));
    xk::GemmArgs a;
    a.A = activations(t, s), a.C = C.data();
    decode_loop(state, t, s, n, plan.impl_name(), [&](size_t i) {
        if (packed) {
            plan.run(a, (*packed)[i]);
        } else {
            a.B = W.get<unsigned char>(i, 0);
            plan.run(a);
        }
    });
}

void bench_onednn_decode(benchmark::State& state, WType t, Shape s, int threads, Layout layout) {
    xb::set_threads(threads);  // before the primitive is created
    xb::RotatingBuffers& W = weights(t, s);
    const dt wt = t == WType::f32 ? dt::f32 : dt::bf16;
    try {
        dnnl::engine eng(dnnl::engine::kind::cpu, 0);
        dnnl::stream strm(eng);
        const dnnl::memory::desc a_md({s.M, s.K}, wt, tag::ab), c_md({s.M, s.N}, dt::f32, tag::ab);
        // W[N x K] viewed as K x N (tag ba), or a plain [K x N] B (tag ab: _decode_bn)
        const dnnl::memory::desc w_plain({s.K, s.N}, wt, layout == Layout::bn ? tag::ab : tag::ba);
        const dnnl::memory::desc w_md = layout == Layout::packed ? dnnl::memory::desc({s.K, s.N}, wt, tag::any) : w_plain;
        dnnl::matmul::primitive_desc pd;
        try {
            pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, w_md, c_md), eng);
        } catch (const dnnl::error&) {
            state.SkipWithError((std::string("oneDNN has no ") + wname(t) + " matmul on this CPU (or ISA cap)").c_str());
            return;
        }
        if (skip_reference(state, "oneDNN", pd.impl_info_str(), s)) return;
        const dnnl::matmul prim(pd);
        const size_t n = W.sets();
        std::vector<dnnl::memory> plain;
        for (size_t i = 0; i < n; ++i) plain.emplace_back(w_plain, eng, W.get<unsigned char>(i, 0));
        const std::vector<dnnl::memory>* ws = &plain;
        if (layout == Layout::packed && pd.weights_desc() != w_plain) {
            const dnnl::memory::desc wd = pd.weights_desc();
            const std::string fmt(reinterpret_cast<const char*>(&wd.data), sizeof wd.data);
            ws = &packed_slot<std::vector<dnnl::memory>>(std::string("onednn/") + wname(t) + "/" + s.name() + "/" + fmt, [&] {
                auto v = std::make_shared<std::vector<dnnl::memory>>();
                for (size_t i = 0; i < n; ++i) {
                    dnnl::memory m(wd, eng);
                    dnnl::reorder(plain[i], m).execute(strm, plain[i], m);
                    strm.wait();
                    v->push_back(m);
                }
                return v;
            });
        }
        std::vector<float> C(size_t(s.M * s.N));
        dnnl::memory am(a_md, eng, const_cast<void*>(activations(t, s))), cm(c_md, eng, C.data());
        std::vector<std::unordered_map<int, dnnl::memory>> args;
        for (size_t i = 0; i < n; ++i) args.push_back({{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, (*ws)[i]}, {DNNL_ARG_DST, cm}});
        decode_loop(state, t, s, n, pd.impl_info_str(), [&](size_t i) {
            prim.execute(strm, args[i]);
            strm.wait();
        });
    } catch (const dnnl::error& e) {
        state.SkipWithError((std::string("oneDNN: ") + e.what()).c_str());
    }
}

void bench_openblas_decode(benchmark::State& state, WType t, Shape s, int threads, bool gemv) {
    xb::set_threads(threads);
    xb::RotatingBuffers& W = weights(t, s);
    const float* x = static_cast<const float*>(activations(t, s));
    std::vector<float> C(size_t(s.M * s.N));
    const auto M = blasint(s.M), N = blasint(s.N), K = blasint(s.K);
    decode_loop(state, t, s, W.sets(), gemv ? "cblas_sgemv" : "cblas_sgemm", [&](size_t i) {
        const float* w = W.get<float>(i, 0);
        if (gemv)  // y[N] = W[N x K] x[K]
            cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, w, K, x, 1, 0.0f, C.data(), 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, C.data(), N);
    });
}

void add_decode(WType t, const std::string& provider, const Shape& s, const std::string& layout, int threads,
                std::function<void(benchmark::State&)> fn) {
    const std::string name = "gemm/" + std::string(wname(t)) + "/" + provider + "/" + s.name() + "_decode_" + layout +
                             "/threads:" + std::to_string(threads);
    benchmark::RegisterBenchmark(name.c_str(), std::move(fn))->UseRealTime()->Unit(benchmark::kMillisecond);
}

bool register_decode() {
    const bool quick = xb::quick();
    const std::vector<int> threads_list = xb::thread_counts();
    for (int threads : threads_list)
        benchmark::RegisterBenchmark(("peak/f32/xk/read/threads:" + std::to_string(threads)).c_str(),
                                     [threads](benchmark::State& st) { bench_read(st, threads); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    std::vector<std::pair<int64_t, int64_t>> nk = {{4096, 4096}, {11008, 4096}, {4096, 11008}};
    if (quick) nk.resize(1);
    // Grouped by (N, K), dtype, M and layout: the rotated weights are made once per (dtype, N, K),
    // the packed copies once per row group (every thread count).
    for (const auto& [N, K] : nk)
        for (WType t : {WType::f32, WType::bf16})
            for (int64_t M : {1, 16}) {
                const Shape s{M, N, K};
                std::vector<Layout> layouts = {Layout::packed, Layout::bt};
                if (!quick) layouts.push_back(Layout::bn);
                for (Layout l : layouts) {
                    for (int th : threads_list)
                        add_decode(t, "xk", s, layout_name(l), th, [=](benchmark::State& st) { bench_xk_decode(st, t, s, th, l); });
                    for (int th : threads_list)
                        add_decode(t, "onednn", s, layout_name(l), th,
                                   [=](benchmark::State& st) { bench_onednn_decode(st, t, s, th, l); });
                    if (t == WType::f32 && l == Layout::bt && !quick)
                        for (int th : threads_list) {
                            add_decode(t, "openblas", s, "bt", th,
                                       [=](benchmark::State& st) { bench_openblas_decode(st, t, s, th, false); });
                            if (M == 1)
                                add_decode(t, "openblas", s, "bt_sgemv", th,
                                           [=](benchmark::State& st) { bench_openblas_decode(st, t, s, th, true); });
                        }
                }
            }
    return true;
}

[[maybe_unused]] const bool g_decode_registered = register_decode();

}  // namespace decode

}  // namespace
