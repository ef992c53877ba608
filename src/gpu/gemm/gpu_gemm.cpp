// GEMM on an OpenCL device: validation, kernel selection (XMX / emulated XMX / tiled), the tuner
// and its on-disk results, the launch. Kernels: src/gpu/kernels/gemm.cl, gemm_xmx.cl.
#include "gpu/gemm/gpu_gemm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "dispatch/verbose.hpp"
#include "xk/error.hpp"

#if XK_WITH_OPENCL
#include "gpu/runtime.hpp"
#endif

namespace xk::gpu {
namespace detail {

std::string GemmConfig::str() const {
    std::ostringstream os;
    os << "MWG" << mwg << ",NWG" << nwg << ",KWG" << kwg << ",MDIMC" << mdimc << ",NDIMC" << ndimc << ",VWM" << vwm
       << ",VWN" << vwn << ",L" << use_local;
    if (splitk > 1) os << ",S" << splitk;
    return os.str();
}

bool GemmConfig::parse(const std::string& s, GemmConfig& c) {
    int used = 0;
    if (std::sscanf(s.c_str(), "MWG%d,NWG%d,KWG%d,MDIMC%d,NDIMC%d,VWM%d,VWN%d,L%d%n", &c.mwg, &c.nwg, &c.kwg, &c.mdimc,
                    &c.ndimc, &c.vwm, &c.vwn, &c.use_local, &used) != 8)
        return false;
    c.splitk = 1;
    const std::string rest = s.substr(static_cast<size_t>(used));
    if (rest.empty()) return true;
    int sk = 0, used2 = 0;
    if (std::sscanf(rest.c_str(), ",S%d%n", &sk, &used2) != 1 || static_cast<size_t>(used2) != rest.size()) return false;
    c.splitk = sk;
    return true;
}

bool GemmConfig::valid(int64_t max_wg_size, int64_t local_mem_bytes) const {
    auto vw_ok = [](int v) { return v == 1 || v == 2 || v == 4; };
    if (mwg < 1 || nwg < 1 || kwg < 1 || mdimc < 1 || ndimc < 1) return false;
    if (splitk < 1 || splitk > 16) return false;
    if (use_local ? !vw_ok(vwm) || !vw_ok(vwn) : vwm != 1 || (vwn != 2 && vwn != 4 && vwn != 8 && vwn != 16))
        return false;
    if (mwg % (mdimc * vwm) || nwg % (ndimc * vwn)) return false;
    if (int64_t(mdimc) * ndimc > max_wg_size) return false;
    if (use_local) {
        const int nt = mdimc * ndimc;
        // Every staging loop divides evenly, also in its 4-wide form.
        if (mwg % 4 || nwg % 4 || kwg % 4) return false;
        if ((mwg * kwg) % (4 * nt) || (nwg * kwg) % (4 * nt)) return false;
        if (int64_t(mwg + nwg) * kwg * 4 > local_mem_bytes) return false;
    }
    return true;
}

std::string XmxConfig::str() const {
    std::ostringstream os;
    os << "SGM" << sg_m << ",SGN" << sg_n << ",MR" << mr << ",NR" << nr;
    return os.str();
}

}  // namespace detail

#if !XK_WITH_OPENCL

Event gemm(const Context&, const GemmDesc&, const GemmTensors&) {
    throw Error(Status::unsupported, "xk::gpu::gemm: built without OpenCL");
}
std::string gemm_kernel_name(const Context&, const GemmDesc&) {
    throw Error(Status::unsupported, "xk::gpu::gemm: built without OpenCL");
}
namespace detail {
Event gemm_ex(const Context&, const GemmDesc&, const GemmTensors&, const GemmOptions&, std::string*) {
    throw Error(Status::unsupported, "xk::gpu::gemm: built without OpenCL");
}
std::vector<GemmConfig> gemm_candidates(const Context&) { return {}; }
std::vector<GemmConfig> gemm_candidates(const Context&, const GemmDesc&) { return {}; }
std::vector<GemmConfig> gemm_candidates_for(bool) { return {}; }
GemmConfig gemm_default_config(const Context&) { return {}; }
void gemm_tuner_clear_memory() {}
std::string gemm_tune_file() { return {}; }
}  // namespace detail

#else

namespace detail {
namespace {

using xk::detail::check_ld;
using xk::detail::check_nonnegative;
using xk::detail::checked_add;
using xk::detail::checked_mul;
using xk::detail::fail;
using xk::detail::fail_arg;
using xk::detail::now_us;
using xk::detail::valid_activation;
using xk::detail::verbose_level;
using xk::detail::verbose_log;

constexpr const char* kFn = "xk::gpu::gemm";

constexpr int XK_FLAG_VEC_A = 8, XK_FLAG_VEC_B = 16;  // gemm_common.h's XK_VEC_A / XK_VEC_B

int type_code(DType t) { return t == DType::f32 ? 0 : t == DType::bf16 ? 1 : 2; }

bool is_cpu(const Context& ctx) { return ctx.device().type == "cpu"; }

// ---- validation -------------------------------------------------------------------------

struct Resolved {
    GemmDesc d;                        // leading dimensions and batch_stride_c resolved
    int64_t a_rows, a_cols, b_rows, b_cols;  // stored shapes of A and B
    bool empty = false;                // nothing to do (M, N or batch 0)
};

void check_operand(const char* arg, const Context& ctx, const Tensor& t, DType type, int64_t batch, int64_t stride,
                   int64_t rows, int64_t cols, int64_t ld) {
    // Extent in elements of the item matrix and of all items.
    const int64_t item = rows == 0 || cols == 0 ? 0 : checked_add(kFn, arg, checked_mul(kFn, arg, rows - 1, ld), cols);
    if (item > std::numeric_limits<int32_t>::max())
        fail(Status::unsupported, std::string(kFn) + ": " + arg + " spans " + std::to_string(item) +
                                      " elements per matrix: more than 2^31 - 1 is not supported on the GPU");
    if (item == 0 || batch == 0) return;
    const int64_t extent = checked_add(kFn, arg, checked_mul(kFn, arg, batch - 1, stride), item);
    check_buffer_context(kFn, arg, ctx, t.buffer);
    if (t.offset < 0) fail_arg(kFn, (std::string(arg) + ".offset").c_str(), std::to_string(t.offset), "must be >= 0");
    const int64_t need = checked_mul(kFn, arg, checked_add(kFn, arg, t.offset, extent), dtype_size(type));
    if (need > t.buffer.bytes())
        fail_arg(kFn, arg, std::to_string(t.buffer.bytes()) + " bytes",
                 "is too small: the descriptor reads " + std::to_string(need) + " bytes (offset " +
                     std::to_string(t.offset) + " + " + std::to_string(extent) + " elements of " + dtype_name(type) + ")");
}

Resolved validate(const Context& ctx, const GemmDesc& in, const GemmTensors& t) {
    Resolved r;
    GemmDesc& d = r.d;
    d = in;
    check_nonnegative(kFn, "M", d.M);
    check_nonnegative(kFn, "N", d.N);
    check_nonnegative(kFn, "K", d.K);
    check_nonnegative(kFn, "batch", d.batch);
    for (auto [name, v] : {std::pair<const char*, int64_t>{"M", d.M}, {"N", d.N}, {"K", d.K}})
        if (v > std::numeric_limits<int32_t>::max())
            fail(Status::unsupported, std::string(kFn) + ": " + name + "=" + std::to_string(v) +
                                          " exceeds 2^31 - 1 (not supported on the GPU)");
    const int ti = static_cast<int>(d.trans_a), tb = static_cast<int>(d.trans_b);
    if (ti != 0 && ti != 1) fail_arg(kFn, "trans_a", std::to_string(ti), "is not a valid xk::Trans");
    if (tb != 0 && tb != 1) fail_arg(kFn, "trans_b", std::to_string(tb), "is not a valid xk::Trans");
    if (!valid_activation(d.epilogue.act))
        fail_arg(kFn, "epilogue.act", std::to_string(static_cast<int>(d.epilogue.act)), "is not a valid xk::Activation");
    auto fp = [](DType x) { return x == DType::f32 || x == DType::bf16 || x == DType::f16; };
    const bool types_ok = fp(d.a_type) && d.a_type == d.b_type && fp(d.c_type) &&
                          (d.a_type != DType::f32 || d.c_type == DType::f32);
    if (!types_ok)
        fail(Status::unsupported, std::string(kFn) + ": a_type=" + dtype_name(d.a_type) + " b_type=" +
                                      dtype_name(d.b_type) + " c_type=" + dtype_name(d.c_type) +
                                      " is not supported on the GPU (f32 x f32 -> f32; bf16 or f16 pairs -> f32, bf16, f16)");
    if (d.epilogue.residual && !fp(d.residual_type))
        fail(Status::unsupported, std::string(kFn) + ": residual_type=" + dtype_name(d.residual_type) + " is not supported");
    const bool ta = d.trans_a == Trans::T, tbt = d.trans_b == Trans::T;
    r.a_rows = ta ? d.K : d.M;
    r.a_cols = ta ? d.M : d.K;
    r.b_rows = tbt ? d.N : d.K;
    r.b_cols = tbt ? d.K : d.N;
    check_nonnegative(kFn, "lda", d.lda);
    check_nonnegative(kFn, "ldb", d.ldb);
    check_nonnegative(kFn, "ldc", d.ldc);
    check_nonnegative(kFn, "ld_residual", d.ld_residual);
    if (d.lda == 0) d.lda = std::max<int64_t>(r.a_cols, 1);
    if (d.ldb == 0) d.ldb = std::max<int64_t>(r.b_cols, 1);
    if (d.ldc == 0) d.ldc = std::max<int64_t>(d.N, 1);
    if (d.ld_residual == 0) d.ld_residual = std::max<int64_t>(d.N, 1);
    check_ld(kFn, "lda", d.lda, r.a_cols, ta ? "M" : "K");
    check_ld(kFn, "ldb", d.ldb, r.b_cols, tbt ? "K" : "N");
    check_ld(kFn, "ldc", d.ldc, d.N, "N");
    if (d.epilogue.residual) check_ld(kFn, "ld_residual", d.ld_residual, d.N, "N");
    for (auto [name, v] : {std::pair<const char*, int64_t>{"lda", d.lda}, {"ldb", d.ldb}, {"ldc", d.ldc},
                           {"ld_residual", d.ld_residual}})
        if (v > std::numeric_limits<int32_t>::max())
            fail(Status::unsupported, std::string(kFn) + ": " + name + "=" + std::to_string(v) +
                                          " exceeds 2^31 - 1 (not supported on the GPU)");
    check_nonnegative(kFn, "batch_stride_a", d.batch_stride_a);
    check_nonnegative(kFn, "batch_stride_b", d.batch_stride_b);
    check_nonnegative(kFn, "batch_stride_c", d.batch_stride_c);
    check_nonnegative(kFn, "batch_stride_residual", d.batch_stride_residual);
    const int64_t c_item = d.M == 0 || d.N == 0 ? 0 : checked_add(kFn, "C", checked_mul(kFn, "C", d.M - 1, d.ldc), d.N);
    if (d.batch_stride_c == 0) d.batch_stride_c = checked_mul(kFn, "M*ldc", d.M, d.ldc);
    else if (d.batch > 1 && d.batch_stride_c < c_item &&
             !(d.batch_stride_c >= d.N && (d.batch - 1) * d.batch_stride_c + d.N <= d.ldc))
        fail_arg(kFn, "batch_stride_c", std::to_string(d.batch_stride_c),
                 "makes the items of C overlap (needs >= " + std::to_string(c_item) +
                     ", or items side by side within ldc)");
    r.empty = d.M == 0 || d.N == 0 || d.batch == 0;
    if (r.empty) return r;
    const int64_t kk = d.K == 0 ? 0 : 1;  // K == 0 reads neither A nor B
    check_operand("A", ctx, t.A, d.a_type, d.batch * kk, d.batch_stride_a, kk ? r.a_rows : 0, r.a_cols, d.lda);
    check_operand("B", ctx, t.B, d.b_type, d.batch * kk, d.batch_stride_b, kk ? r.b_rows : 0, r.b_cols, d.ldb);
    check_operand("C", ctx, t.C, d.c_type, d.batch, d.batch_stride_c, d.M, d.N, d.ldc);
    if (d.epilogue.bias) check_operand("bias", ctx, t.bias, DType::f32, 1, 0, 1, d.N, d.N);
    if (d.epilogue.residual)
        check_operand("residual", ctx, t.residual, d.residual_type, d.batch, d.batch_stride_residual, d.M, d.N,
                      d.ld_residual);
    // C must not share memory with an input.
    auto clash = [&](const char* arg, const Tensor& x, bool used) {
        if (used && x.buffer.same_memory(t.C.buffer))
            fail_arg(kFn, "C", "the buffer of " + std::string(arg), "must not be an input's buffer");
    };
    clash("A", t.A, kk != 0);
    clash("B", t.B, kk != 0);
    clash("bias", t.bias, d.epilogue.bias);
    clash("residual", t.residual, d.epilogue.residual);
    return r;
}

// ---- configurations ---------------------------------------------------------------------

GemmConfig cfg(int mwg, int nwg, int kwg, int mdimc, int ndimc, int vwm, int vwn, int local) {
    GemmConfig c;
    c.mwg = mwg, c.nwg = nwg, c.kwg = kwg, c.mdimc = mdimc, c.ndimc = ndimc, c.vwm = vwm, c.vwn = vwn, c.use_local = local;
    return c;
}

std::vector<GemmConfig> all_candidates(bool cpu) {
    if (cpu)  // PoCL and other CPU devices: dimension 0 becomes SIMD lanes; caches stage the tiles
        return {cfg(8, 64, 16, 1, 2, 1, 16, 0),   // 8 x 32 per work item: 16 zmm accumulators
                cfg(4, 128, 16, 1, 2, 1, 16, 0),  // 4 x 64: 16
                cfg(6, 32, 16, 1, 2, 1, 8, 0)};   // 6 x 16 as 8-wide vectors: 12 ymm (AVX2 devices)
    return {
        cfg(128, 128, 16, 16, 16, 4, 4, 1),  // 8 x 8 per work item, float4 local reads (large shapes)
        cfg(128, 128, 32, 16, 16, 4, 4, 1),
        cfg(64, 128, 16, 8, 16, 4, 4, 1),    // 8 x 8, 128 work items
        cfg(64, 64, 16, 16, 16, 2, 2, 1),    // 4 x 4 (medium shapes)
        cfg(32, 64, 16, 8, 16, 2, 2, 1),     // small M
        cfg(16, 128, 16, 4, 32, 2, 2, 1),    // M <= 16: one row block, wide N
        cfg(16, 64, 16, 4, 16, 1, 1, 1),     // M <= 16, twice the work-groups along N
    };
}

// ---- the tuner's results --------------------------------------------------------------

std::mutex g_tune_mu;
std::map<std::string, GemmConfig>* g_tuned = nullptr;  // key -> winner (loaded from disk on first use)
bool g_loaded = false;

// Shape classes of M, N, K: s <= 16, m <= 256, h <= 512, l <= 1024, k <= 2048, x <= 4096, y larger
// (384 x 768 x 768 and 1024^3 differ: their work-group counts, hence their best tiles, do).
std::string shape_class(int64_t v) {
    return v <= 16 ? "s" : v <= 256 ? "m" : v <= 512 ? "h" : v <= 1024 ? "l" : v <= 2048 ? "k" : v <= 4096 ? "x" : "y";
}

std::string tune_key(const Context& ctx, const GemmDesc& d) {
    const DeviceInfo& di = ctx.device();
    std::ostringstream os;
    // "t2": timed as calls run (host time); entries timed by device time alone (no marker) are retuned.
    os << "t2 | " << di.platform_name << " / " << di.name << " / " << di.driver_version << " | " << dtype_name(d.a_type) << ">"
       << dtype_name(d.c_type) << ":" << trans_name(d.trans_a) << trans_name(d.trans_b) << ":M" << shape_class(d.M)
       << "N" << shape_class(d.N) << "K" << shape_class(d.K);
    std::string k = os.str();
    for (char& ch : k)
        if (ch == '\t' || ch == '\n') ch = ' ';
    return k;
}

void load_tuned_locked() {
    if (!g_tuned) g_tuned = new std::map<std::string, GemmConfig>();
    if (g_loaded) return;
    g_loaded = true;
    const std::string f = gemm_tune_file();
    if (f.empty()) return;
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
        const size_t tab = line.find('\t');
        GemmConfig c;
        if (tab == std::string::npos || !GemmConfig::parse(line.substr(tab + 1), c)) continue;
        (*g_tuned)[line.substr(0, tab)] = c;  // later lines win
    }
}

void save_tuned_locked(const std::string& key, const GemmConfig& c) {
    const std::string f = gemm_tune_file();
    if (f.empty()) return;
    std::ofstream out(f, std::ios::app);  // one short line per append: concurrent processes interleave whole lines
    if (out) out << key << '\t' << c.str() << '\n';
}

bool tune_enabled(const GemmOptions& opt) {
    if (opt.tune >= 0) return opt.tune != 0;
    const char* e = std::getenv("XK_GPU_TUNE");
    return !(e && std::string(e) == "0");
}

// ---- launch -----------------------------------------------------------------------------

struct Launch {
    std::string source, kernel, options, name;
    size_t global[3], local[3];
    int splitk = 1;  // tiled with SPLITK > 1: launch_splitk
};

// Split-K's f32 workspace (batch x splitk partial M x N products): its bytes, 0 when too large.
int64_t splitk_workspace_bytes(const GemmDesc& d, int splitk) {
    const double b = double(d.batch) * splitk * double(d.M) * double(d.N) * 4.0;
    return b > double(int64_t(256) << 20) ? 0 : int64_t(b);
}

std::string type_defines(const GemmDesc& d) {
    std::ostringstream os;
    os << " -DC_T=" << type_code(d.c_type) << " -DR_T=" << (d.epilogue.residual ? type_code(d.residual_type) : 0);
    return os.str();
}

Launch tiled_launch(const GemmDesc& d, const GemmConfig& c) {
    Launch l;
    l.source = "gemm";
    l.kernel = "xk_gemm";
    std::ostringstream os;
    // split-K: the kernel writes f32 partial products (C_T 0, no residual); the reduce has d's types
    os << "-DA_T=" << type_code(d.a_type) << " -DB_T=" << type_code(d.b_type)
       << (c.splitk > 1 ? std::string(" -DC_T=0 -DR_T=0") : type_defines(d))
       << " -DTRANS_A=" << int(d.trans_a == Trans::T) << " -DTRANS_B=" << int(d.trans_b == Trans::T) << " -DMWG=" << c.mwg
       << " -DNWG=" << c.nwg << " -DKWG=" << c.kwg << " -DMDIMC=" << c.mdimc << " -DNDIMC=" << c.ndimc << " -DVWM=" << c.vwm
       << " -DVWN=" << c.vwn << " -DUSE_LOCAL=" << c.use_local;
    if (c.splitk > 1) os << " -DSPLITK=" << c.splitk;
    l.options = os.str();
    l.name = "gpu:tiled:" + c.str();
    l.local[0] = size_t(c.ndimc), l.local[1] = size_t(c.mdimc), l.local[2] = 1;
    l.global[0] = size_t((d.N + c.nwg - 1) / c.nwg) * c.ndimc;
    l.global[1] = size_t((d.M + c.mwg - 1) / c.mwg) * c.mdimc;
    l.global[2] = size_t(d.batch) * size_t(std::max(c.splitk, 1));
    l.splitk = std::max(c.splitk, 1);
    return l;
}

Launch xmx_launch(const GemmDesc& d, const XmxConfig& x, bool native) {
    Launch l;
    l.source = "gemm_xmx";
    l.kernel = "xk_gemm_xmx";
    std::ostringstream os;
    os << "-DAB_T=" << type_code(d.a_type) << type_defines(d) << " -DTRANS_B=" << int(d.trans_b == Trans::T)
       << " -DSG_M=" << x.sg_m << " -DSG_N=" << x.sg_n << " -DMR=" << x.mr << " -DNR=" << x.nr
       << (native ? " -DXK_XMX_NATIVE=1" : "");
    l.options = os.str();
    l.name = std::string(native ? "gpu:xmx:" : "gpu:xmx_emu:") + x.str();
    const int mt = x.sg_m * x.mr * 8, nt = x.sg_n * x.nr * 8;
    l.local[0] = size_t(8 * x.sg_n), l.local[1] = size_t(x.sg_m), l.local[2] = 1;
    l.global[0] = size_t((d.N + nt - 1) / nt) * l.local[0];
    l.global[1] = size_t((d.M + mt - 1) / mt) * l.local[1];
    l.global[2] = size_t(d.batch);
    return l;
}

// Whether rows starting at `off` with leading dimension `ld` are all aligned to `elems` elements.
bool aligned(int64_t off, int64_t ld, int64_t bs, int64_t batch, int elems) {
    return off % elems == 0 && ld % elems == 0 && (batch <= 1 || bs % elems == 0);
}

// c_mem: C's memory when not t.C's buffer (split-K's scratch).
Event launch(const Context& ctx, const Launch& l, const GemmDesc& d, const GemmTensors& t, int flags,
             cl_mem c_mem = nullptr) {
    cl_kernel k = get_kernel(ctx, l.source, l.kernel, l.options);
    auto mem = [](const Tensor& x) { return x.buffer.empty() ? cl_mem(nullptr) : cl_buffer(x.buffer); };
    // Unused operands get any valid buffer (C's) so that no null cl_mem reaches the kernel.
    cl_mem cm = c_mem ? c_mem : mem(t.C);
    cl_mem am = d.K ? mem(t.A) : cm, bm = d.K ? mem(t.B) : cm;
    cl_mem biasm = d.epilogue.bias ? mem(t.bias) : cm, rm = d.epilogue.residual ? mem(t.residual) : cm;
    cl_uint i = 0;
    set_arg(k, i++, cl_int(d.M));
    set_arg(k, i++, cl_int(d.N));
    set_arg(k, i++, cl_int(d.K));
    set_arg(k, i++, am);
    set_arg(k, i++, cl_ulong(d.K ? t.A.offset : 0));
    set_arg(k, i++, cl_int(d.lda));
    set_arg(k, i++, cl_ulong(d.batch_stride_a));
    set_arg(k, i++, bm);
    set_arg(k, i++, cl_ulong(d.K ? t.B.offset : 0));
    set_arg(k, i++, cl_int(d.ldb));
    set_arg(k, i++, cl_ulong(d.batch_stride_b));
    set_arg(k, i++, cm);
    set_arg(k, i++, cl_ulong(t.C.offset));
    set_arg(k, i++, cl_int(d.ldc));
    set_arg(k, i++, cl_ulong(d.batch_stride_c));
    set_arg(k, i++, cl_float(d.alpha));
    set_arg(k, i++, cl_float(d.beta));
    set_arg(k, i++, cl_int(flags));
    set_arg(k, i++, cl_int(static_cast<int>(d.epilogue.act)));
    set_arg(k, i++, biasm);
    set_arg(k, i++, cl_ulong(d.epilogue.bias ? t.bias.offset : 0));
    set_arg(k, i++, rm);
    set_arg(k, i++, cl_ulong(d.epilogue.residual ? t.residual.offset : 0));
    set_arg(k, i++, cl_int(d.ld_residual));
    set_arg(k, i++, cl_ulong(d.batch_stride_residual));
    cl_event ev = nullptr;
    check_cl(clEnqueueNDRangeKernel(cl_queue(ctx), k, 3, nullptr, l.global, l.local, 0, nullptr, &ev), kFn,
             "clEnqueueNDRangeKernel");
    return make_event(ev);
}

int flags_of(const GemmDesc& d, const GemmTensors& t, bool xmx) {
    int f = 0;
    if (d.beta != 0.0f) f |= 1;  // a NaN beta is not zero: C is read
    if (d.epilogue.bias) f |= 2;
    if (d.epilogue.residual) f |= 4;
    // Vector loads: 16-byte rows for the tiled kernel (4 elements; buffers start 16-byte aligned
    // for f32, and 8-byte loads of 4 bf16), 4-byte rows for the XMX kernel's block reads.
    const int ea = xmx ? 2 : 4;
    if (d.K && aligned(t.A.offset, d.lda, d.batch_stride_a, d.batch, ea)) f |= 8;
    if (d.K && aligned(t.B.offset, d.ldb, d.batch_stride_b, d.batch, ea)) f |= 16;
    return f;
}

// Split-K (l.splitk > 1): the tiled kernel writes each split's partial product (alpha 1, no
// epilogue) to an f32 workspace, then xk_gemm_splitk_reduce adds the splits and applies alpha,
// beta, bias, activation and residual. Returns the reduce's Event; *first the partial one's.
// The workspace is the context's scratch (ScratchLease), kept between calls, so a steady-state
// call creates no OpenCL object. Before, each call took a new workspace Buffer (a sub-buffer
// created, used and released per call), and the H200 ran those calls at 2.7-12 ms of host time
// against 0.14 ms of device time. fresh_ws: that old way (GemmOptions::splitk_fresh_workspace,
// bench_gpu_gemm's diagnostic rows only).
Event launch_splitk(const Context& ctx, const Launch& l, const GemmDesc& d, const GemmTensors& t, Event* first,
                    bool fresh_ws) {
    const int S = l.splitk;
    const int64_t ws_bytes = std::max<int64_t>(splitk_workspace_bytes(d, S), 16);
    std::optional<ScratchLease> lease;
    Buffer fresh;
    if (fresh_ws) fresh = Buffer(ctx, ws_bytes);
    else lease.emplace(ctx, ws_bytes);
    const cl_mem ws = fresh_ws ? cl_buffer(fresh) : lease->mem();
    GemmDesc p = d;
    p.c_type = DType::f32;
    p.alpha = 1.0f, p.beta = 0.0f;
    p.epilogue = GemmEpilogue{};
    p.ldc = std::max<int64_t>(d.N, 1);
    p.batch_stride_c = d.M * d.N;
    GemmTensors pt = t;
    pt.C = Tensor();  // offset 0 in the scratch
    pt.bias = Tensor(), pt.residual = Tensor();
    Event e1 = launch(ctx, l, p, pt, flags_of(p, pt, false) & (XK_FLAG_VEC_A | XK_FLAG_VEC_B), ws);
    if (first) *first = e1;
    std::ostringstream os;
    os << type_defines(d);
    cl_kernel k = get_kernel(ctx, "gemm_splitk", "xk_gemm_splitk_reduce", os.str());
    auto mem = [](const Tensor& x) { return x.buffer.empty() ? cl_mem(nullptr) : cl_buffer(x.buffer); };
    cl_mem cm = mem(t.C);
    cl_mem biasm = d.epilogue.bias ? mem(t.bias) : cm, rm = d.epilogue.residual ? mem(t.residual) : cm;
    cl_uint i = 0;
    set_arg(k, i++, cl_int(d.M));
    set_arg(k, i++, cl_int(d.N));
    set_arg(k, i++, cl_int(S));
    set_arg(k, i++, ws);
    set_arg(k, i++, cm);
    set_arg(k, i++, cl_ulong(t.C.offset));
    set_arg(k, i++, cl_int(d.ldc));
    set_arg(k, i++, cl_ulong(d.batch_stride_c));
    set_arg(k, i++, cl_float(d.alpha));
    set_arg(k, i++, cl_float(d.beta));
    set_arg(k, i++, cl_int(flags_of(d, t, false) & ~(XK_FLAG_VEC_A | XK_FLAG_VEC_B)));
    set_arg(k, i++, cl_int(static_cast<int>(d.epilogue.act)));
    set_arg(k, i++, biasm);
    set_arg(k, i++, cl_ulong(d.epilogue.bias ? t.bias.offset : 0));
    set_arg(k, i++, rm);
    set_arg(k, i++, cl_ulong(d.epilogue.residual ? t.residual.offset : 0));
    set_arg(k, i++, cl_int(d.ld_residual));
    set_arg(k, i++, cl_ulong(d.batch_stride_residual));
    const size_t local[3] = {16, 4, 1};
    const size_t global[3] = {size_t((d.N + 15) / 16) * 16, size_t((d.M + 3) / 4) * 4, size_t(d.batch)};
    cl_event ev = nullptr;
    check_cl(clEnqueueNDRangeKernel(cl_queue(ctx), k, 3, nullptr, global, local, 0, nullptr, &ev), kFn,
             "clEnqueueNDRangeKernel");
    return make_event(ev);
}

// One call of `l` (split-K: both kernels): returns the last kernel's Event, *first (optional) the
// first kernel's (the same one without split-K).
Event run_launch(const Context& ctx, const Launch& l, const GemmDesc& d, const GemmTensors& t, int flags, Event* first,
                 bool fresh_ws = false) {
    if (l.splitk > 1) return launch_splitk(ctx, l, d, t, first, fresh_ws);
    Event e = launch(ctx, l, d, t, flags);
    if (first) *first = e;
    return e;
}

// Times `l` on scratch operands of d's shape (no epilogue) the way a call runs: host time from
// the call to the queue's end (ctx.finish()), so everything a call costs on the host (each
// kernel's launch, anything it creates) counts, not only its kernels' device time. The best of a
// few calls after a warm-up, ms; *device_ms: the same call's device time (start of the first
// kernel to the end of the last).
double time_config(const Context& ctx, const GemmDesc& d, const Launch& l, const GemmTensors& scratch,
                   double* device_ms) {
    const int flags = flags_of(d, scratch, false);
    run_launch(ctx, l, d, scratch, flags, nullptr).wait();  // warm up (and build)
    ctx.finish();
    double best = 1e30, best_dev = 0, total = 0;
    for (int r = 0; r < 5 && (r < 2 || total < 50.0); ++r) {
        Event first;
        const double t0 = now_us();
        Event e = run_launch(ctx, l, d, scratch, flags, &first);
        ctx.finish();
        const double ms = (now_us() - t0) * 1e-3;
        if (ms < best) best = ms, best_dev = double(e.end_ns() - first.start_ns()) * 1e-6;
        total += ms;
    }
    if (device_ms) *device_ms = best_dev;
    return best;
}

GemmConfig tune(const Context& ctx, const GemmDesc& d0) {
    // A plain problem of the same shape and types on scratch buffers (the caller's C is untouched).
    GemmDesc d = d0;
    d.epilogue = GemmEpilogue{};
    d.beta = 0.0f;
    d.batch = 1;
    d.lda = d.trans_a == Trans::T ? d.M : d.K;
    d.ldb = d.trans_b == Trans::T ? d.K : d.N;
    d.ldc = d.N;
    d.lda = std::max<int64_t>(d.lda, 1), d.ldb = std::max<int64_t>(d.ldb, 1), d.ldc = std::max<int64_t>(d.ldc, 1);
    GemmTensors s;
    const int64_t esz = dtype_size(d.a_type);
    s.A = Tensor(Buffer(ctx, std::max<int64_t>(d.M * d.K * esz, 16)));
    s.B = Tensor(Buffer(ctx, std::max<int64_t>(d.K * d.N * esz, 16)));
    s.C = Tensor(Buffer(ctx, std::max<int64_t>(d.M * d.N * dtype_size(d.c_type), 16)));
    s.A.buffer.fill_zero();
    s.B.buffer.fill_zero();
    const DeviceInfo& di = ctx.device();
    GemmConfig best = gemm_default_config(ctx);
    double best_ms = 1e30;
    std::ostringstream log;
    for (const GemmConfig& c : gemm_candidates(ctx, d)) {
        double dev = 0;
        const double ms = time_config(ctx, d, tiled_launch(d, c), s, &dev);
        log << " " << c.str() << "=" << ms << "ms(device " << dev << ")";
        if (ms < best_ms) best_ms = ms, best = c;
    }
    if (verbose_level() >= 1)
        verbose_log("tune", "gpu_gemm", di.name + "," + std::to_string(d.M) + "x" + std::to_string(d.N) + "x" +
                                            std::to_string(d.K) + ":" + log.str() + " -> " + best.str(),
                    0.0);
    return best;
}

GemmConfig tiled_config(const Context& ctx, const GemmDesc& d, const GemmOptions& opt) {
    if (opt.force_config) return opt.config;
    if (!tune_enabled(opt)) return gemm_default_config(ctx);
    const std::string key = tune_key(ctx, d);
    {
        std::lock_guard<std::mutex> lock(g_tune_mu);
        load_tuned_locked();
        auto it = g_tuned->find(key);
        if (it != g_tuned->end() && it->second.valid(ctx.device().max_work_group_size, ctx.device().local_mem_bytes) &&
            (it->second.splitk == 1 || splitk_workspace_bytes(d, it->second.splitk) > 0))
            return it->second;
    }
    const GemmConfig c = tune(ctx, d);
    std::lock_guard<std::mutex> lock(g_tune_mu);
    (*g_tuned)[key] = c;  // replaces a stale entry (a configuration this build no longer accepts)
    save_tuned_locked(key, c);
    return c;
}

bool xmx_native_ok(const DeviceInfo& di) {
    if (!di.intel_subgroup_matrix || !di.intel_subgroups) return false;
    if (di.subgroup_sizes.empty()) return true;
    return std::find(di.subgroup_sizes.begin(), di.subgroup_sizes.end(), 8) != di.subgroup_sizes.end();
}

Launch select(const Context& ctx, const GemmDesc& d, const GemmOptions& opt) {
    const bool xmx_types = (d.a_type == DType::bf16 || d.a_type == DType::f16) && d.trans_a == Trans::N;
    GemmKernelKind kind = opt.kind;
    if (kind == GemmKernelKind::automatic) {
        const char* e = std::getenv("XK_GPU_XMX");
        const std::string env = e ? e : "";
        if (env == "emulate") kind = GemmKernelKind::xmx_emulated;
        else if (env != "0" && env != "off" && xmx_native_ok(ctx.device())) kind = GemmKernelKind::xmx;
        else kind = GemmKernelKind::tiled;
    }
    if (kind == GemmKernelKind::xmx && !xmx_native_ok(ctx.device()))
        fail(Status::unsupported, std::string(kFn) + ": the XMX kernel needs cl_intel_subgroup_matrix_multiply_accumulate");
    if ((kind == GemmKernelKind::xmx || kind == GemmKernelKind::xmx_emulated) && xmx_types) {
        XmxConfig x;  // 32 x 32 per work-group of 4 subgroups; each subgroup 2 x 2 DPAS blocks
        if (kind == GemmKernelKind::xmx) x.mr = 4, x.nr = 2;  // 64 x 32 per work-group on the hardware
        return xmx_launch(d, x, kind == GemmKernelKind::xmx);
    }
    return tiled_launch(d, tiled_config(ctx, d, opt));
}

}  // namespace

std::vector<GemmConfig> gemm_candidates_for(bool cpu_device) { return all_candidates(cpu_device); }

std::vector<GemmConfig> gemm_candidates(const Context& ctx) {
    const DeviceInfo& di = ctx.device();
    std::vector<GemmConfig> out;
    for (const GemmConfig& c : all_candidates(is_cpu(ctx)))
        if (c.valid(di.max_work_group_size, di.local_mem_bytes)) out.push_back(c);
    return out;
}

// The device's candidates for d: on GPUs, where the largest tiles leave most compute units idle
// (few work-groups) and K is long enough, split-K forms of the smaller tiles too (XK_GPU_SPLITK=0:
// not). The tuner times every candidate the way a call runs (host time to the queue's end):
// before, it timed device time only and picked split-K for 128x4096x4096 on the H200 at 0.14 ms
// while the calls took 2.7-12 ms (each created and released its workspace sub-buffer).
bool splitk_tuning() {
    const char* e = std::getenv("XK_GPU_SPLITK");
    return !(e && std::string(e) == "0");
}

std::vector<GemmConfig> gemm_candidates(const Context& ctx, const GemmDesc& d) {
    std::vector<GemmConfig> out = gemm_candidates(ctx);
    if (is_cpu(ctx) || !splitk_tuning()) return out;
    const int64_t cu = std::max(ctx.device().compute_units, 1);
    const size_t base = out.size();
    for (size_t i = 0; i < base; ++i) {
        const GemmConfig c = out[i];
        if (c.mwg < 32 || c.mwg * c.nwg > 64 * 128) continue;  // the 64 x 128, 64 x 64 and 32 x 64 tiles
        const int64_t groups = ((d.M + c.mwg - 1) / c.mwg) * ((d.N + c.nwg - 1) / c.nwg) * std::max<int64_t>(d.batch, 1);
        if (groups >= 2 * cu) continue;
        for (int sk : {2, 4, 8}) {
            if (d.K / sk < 4 * c.kwg || groups * sk > 8 * cu) continue;
            GemmConfig x = c;
            x.splitk = sk;
            if (splitk_workspace_bytes(d, sk) > 0) out.push_back(x);
        }
    }
    return out;
}

GemmConfig gemm_default_config(const Context& ctx) {
    const auto c = gemm_candidates(ctx);
    if (!c.empty()) return c.front();
    return cfg(16, 16, 16, 4, 4, 1, 1, 0);  // tiny devices: 16 work items, no local memory
}

void gemm_tuner_clear_memory() {
    std::lock_guard<std::mutex> lock(g_tune_mu);
    if (g_tuned) g_tuned->clear();
    g_loaded = false;
}

std::string gemm_tune_file() {
    const std::string dir = cache_dir();
    return dir.empty() ? std::string() : dir + "/gemm_tune.txt";
}

Event gemm_ex(const Context& ctx, const GemmDesc& desc, const GemmTensors& t, const GemmOptions& opt,
              std::string* kernel_name) {
    const Resolved r = validate(ctx, desc, t);
    if (r.empty) {
        if (kernel_name) *kernel_name = "none";
        return Event();
    }
    const double t0 = now_us();
    const Launch l = select(ctx, r.d, opt);
    if (kernel_name) *kernel_name = l.name;
    const bool xmx = l.source == "gemm_xmx";
    Event e = run_launch(ctx, l, r.d, t, flags_of(r.d, t, xmx), nullptr, opt.splitk_fresh_workspace);
    if (verbose_level() >= 1) {
        const GemmDesc& d = r.d;
        std::ostringstream os;
        os << l.name << "," << dtype_name(d.a_type) << ">" << dtype_name(d.c_type) << ":" << trans_name(d.trans_a)
           << trans_name(d.trans_b) << ":" << d.M << "x" << d.N << "x" << d.K << ":batch" << d.batch;
        xk::detail::verbose_log("exec", "gpu_gemm", os.str(), now_us() - t0);
    }
    return e;
}

}  // namespace detail

Event gemm(const Context& ctx, const GemmDesc& desc, const GemmTensors& t) {
    return detail::gemm_ex(ctx, desc, t, detail::GemmOptions{});
}

std::string gemm_kernel_name(const Context& ctx, const GemmDesc& desc) {
    GemmTensors none;
    GemmDesc d = desc;
    d.batch = 0;  // validate the descriptor only
    detail::validate(ctx, d, none);
    d.batch = 1;
    d.lda = desc.lda, d.ldb = desc.ldb, d.ldc = desc.ldc;
    if (desc.M == 0 || desc.N == 0) return "none";
    return detail::select(ctx, d, detail::GemmOptions{}).name;
}

#endif  // XK_WITH_OPENCL

}  // namespace xk::gpu
