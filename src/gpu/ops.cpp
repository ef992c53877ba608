// Memory-bound LLM ops on the GPU (kernels: src/gpu/kernels/ops.cl), with the CPU descriptors.
// Validation at the door like the CPU ops (sizes, dtypes, strides, flags, aliasing) plus the
// buffers: each must belong to the context and hold the descriptor's extent from its offset.
#include <cmath>
#include <cstdlib>
#include <string>
#include <initializer_list>
#include <atomic>
#include <mutex>
#include <vector>
#include <unordered_map>
#include <unordered_set>

#include "common/check.hpp"
#include "common/overlap.hpp"
#include "dispatch/verbose.hpp"
#include "xk/gpu.hpp"
#include "xk/llm.hpp"
#include "xk/norm.hpp"
#include "xk/rope.hpp"

#if XK_WITH_OPENCL
#include "gpu/context_impl.hpp"
#include "gpu/runtime.hpp"
#endif

namespace xk::gpu {

namespace {

using xk::detail::check_ld;
using xk::detail::check_nonnegative;
using xk::detail::check_positive;
using xk::detail::checked_add;
using xk::detail::checked_mul;
using xk::detail::fail_arg;


// f32, bf16 or f16 storage.
void check_gpu_dtype(const char* fn, const char* arg, DType t) {
    switch (t) {
        case DType::f32: case DType::bf16: case DType::f16: return;
        case DType::s8: case DType::u8: case DType::s32:
            throw Error(Status::unsupported, std::string(fn) + ": " + arg + "=" + dtype_name(t) +
                                                 " is not supported (f32, bf16 or f16)");
    }
    fail_arg(fn, arg, std::to_string(static_cast<int>(t)), "is not a valid DType");
}

int64_t resolve_ld(const char* fn, const char* arg, int64_t ld, int64_t min_ld, const char* what) {
    if (ld == 0) return min_ld;
    check_ld(fn, arg, ld, min_ld, what);
    return ld;
}

#if XK_WITH_OPENCL
constexpr int kNv = 4;         // XK_NV of ops.cl: 8-element chunks per work-item of xk_norm / xk_softmax
constexpr int kMaxWg = 1024;   // XK_MAXWG of ops.cl
constexpr int kMaxRowWg = 512; // the row kernels' (ops_row.h) largest group
constexpr int kRopeHeads = 4;  // XK_RH of ops.cl: heads per work-item of xk_rope8h

// The row kernels' form (src/gpu/kernels/ops_row.h), chosen per (op, dtype) from the H200's /
// H100's measurements (docs/gpu.md). XK_GPU_ROW_VARIANT (read once; detail::set_row_variant
// replaces it) overrides any field for a measurement: comma-separated key=value of
//   rv=1..16     16-byte vectors of the row per work-item (1, 2, 4, 8, 16; the group size follows)
//   pre=0|1      norms: weight / bias loaded with the row (else after the reduction)
//   split=0|1    softmax: max, then sum (two reductions; else one)
//   persist=0|1  a group loops over rows, prefetching the next one; occ=n groups per compute unit
//   seg=0|1      rows that need <= 32 work-items: several rows per group (wg=n items, default 128)
//   ptx=0|1      NVIDIA: warp-shuffle reductions (inline PTX); cvt=0|1 NVIDIA: cvt.rn.bf16x2 stores
//   fixwg=0|1    the group size a compile-time constant (reqd_work_group_size; a program per size)
//   spec=0|1     norms: residual and bias compiled in (a program per combination; no registers
//                held for an absent residual / bias)
//   rexp=0|1     softmax: exponentials recomputed at the store instead of held in registers
//   fepi=0|1     norms: the two-fma epilogue fma(fma(x, rstd, -mean rstd), w, b)
//   wf=0|1       norms with pre: weight / bias held widened to f32 (registers for fewer operations)
struct RowCfg {
    int rv = 8;
    bool pre = false, split = false, persist = false, seg = false, ptx = false, cvt = false, fixwg = false;
    bool spec = false, rexp = false, fepi = false, wf = false;
    int occ = 0;  // persistent groups per compute unit (0: 1024 / group size)
    int wg = 0;   // seg: the group size (0: 128)
};
bool is_nvidia(const Context& ctx) {
    const auto& d = ctx.device();
    return d.type == "gpu" && (d.vendor.find("NVIDIA") != std::string::npos || d.platform_name.find("NVIDIA") != std::string::npos);
}
// XK_GPU_ROW_VARIANT parsed: up to 24 (key, value) pairs applied over the defaults.
enum RowKey : int { kRv, kSeg, kFixwg, kWg, kPre, kSplit, kPersist, kPtx, kCvt, kOcc, kSpec, kRexp, kFepi, kWf };
struct RowOverride {
    int n = 0;
    std::pair<int, int> kv[24];
};
RowOverride parse_row_variant(const std::string& s) {
    static const char* const names[] = {"rv", "seg", "fixwg", "wg", "pre", "split", "persist", "ptx", "cvt", "occ", "spec", "rexp", "fepi", "wf"};
    RowOverride o;
    size_t pos = 0;
    while (pos < s.size() && o.n < 24) {
        size_t end = s.find(',', pos);
        if (end == std::string::npos) end = s.size();
        const std::string kv = s.substr(pos, end - pos);
        const size_t eq = kv.find('=');
        if (eq != std::string::npos) {
            const std::string k = kv.substr(0, eq);
            const int v = std::atoi(kv.c_str() + eq + 1);
            for (int i = 0; i < static_cast<int>(sizeof names / sizeof names[0]); ++i)
                if (k == names[i]) o.kv[o.n++] = {i, v};
        }
        pos = end + 1;
    }
    return o;
}
// The current override: XK_GPU_ROW_VARIANT at the first call, then set_row_variant's. Replaced
// objects are kept (a concurrent call may still read one; they are a few hundred bytes).
std::atomic<const RowOverride*>& row_override_slot() {
    static std::atomic<const RowOverride*> slot{[] {
        const char* e = std::getenv("XK_GPU_ROW_VARIANT");
        return new RowOverride(parse_row_variant(e ? e : ""));
    }()};
    return slot;
}
// The defaults: a norm (flag: LayerNorm) or softmax (flag: causal), storage t, rows of n.
// From the H200's / H100's rows (docs/gpu.md): weights with the row for LayerNorm and 16-bit RMSNorm;
// two reductions for 16-bit softmax without causal. On NVIDIA the norms take the persistent form
// (4 vectors per item, the group size compiled in, warp-shuffle reductions, cvt stores), 16-bit
// ones with the residual / bias compiled in (spec) and LayerNorm over rows of >= 4096 with 8
// vectors per item (H100, 23:34 run, % of the copy: bf16 RMSNorm 81-85 -> 87-89, LayerNorm 4096
// 74-76 -> 82); 16-bit softmax the same persistent form, without causal with the exponentials
// recomputed at the store (65536 x 1024: 65 -> 87-89, 16384 x 4096: 86 -> 89-90); causal rows
// longer than 1024 keep one row per group (137% there against 132-134%).
RowCfg row_cfg(const Context& ctx, bool norm, DType t, bool flag, int64_t n) {
    RowCfg c;
    const bool b16 = t != DType::f32, nv = is_nvidia(ctx);
    if (norm) {
        c.pre = flag || b16;  // LayerNorm, 16-bit RMSNorm (H100, 20:29 run: bf16 LayerNorm 69-74% -> 75-80% of the copy)
        if (nv) c.persist = c.fixwg = c.ptx = c.cvt = true, c.rv = 4;
        if (nv && b16) c.spec = true, c.rv = flag && n >= 4096 ? 8 : 4;
    } else {
        c.split = b16 && !flag;  // 16-bit softmax without causal
        if (nv && b16 && !(flag && n > 1024)) c.persist = c.fixwg = c.ptx = c.cvt = true, c.rv = 4, c.rexp = !flag;
    }
    const RowOverride& o = *row_override_slot().load(std::memory_order_acquire);
    for (int i = 0; i < o.n; ++i) {
        const int v = o.kv[i].second;
        switch (o.kv[i].first) {
            case kRv: if (v == 1 || v == 2 || v == 4 || v == 8 || v == 16) c.rv = v; break;
            case kSeg: c.seg = v != 0; break;
            case kFixwg: c.fixwg = v != 0; break;
            case kWg: if (v == 32 || v == 64 || v == 128 || v == 256 || v == 512) c.wg = v; break;
            case kPre: c.pre = v != 0; break;
            case kSplit: c.split = v != 0; break;
            case kPersist: c.persist = v != 0; break;
            case kPtx: c.ptx = v != 0; break;
            case kCvt: c.cvt = v != 0; break;
            case kOcc: if (v >= 1 && v <= 64) c.occ = v; break;
            case kSpec: c.spec = v != 0; break;
            case kRexp: c.rexp = v != 0; break;
            case kFepi: c.fepi = v != 0; break;
            case kWf: c.wf = v != 0; break;
            default: break;
        }
    }
    return c;
}
// The kernel name and build options of a row-kernel form, made once per form (a call builds no
// string): key = the form's fields packed in an integer. op 1 norm (flag LayerNorm), 3 softmax;
// fused / hb: the norm's residual / bias (compiled in with spec).
struct RowNames {
    std::string kernel, options;
    uint64_t key = 0;
};
const RowNames& row_names(const Context& ctx, int op, bool flag, DType t, const RowCfg& c, int seg, size_t local, bool fused, bool hb) {
    const bool nv = is_nvidia(ctx), norm = op == 1, spec = norm && c.spec;
    const uint64_t key = uint64_t(op) | uint64_t(flag) << 3 | uint64_t(static_cast<int>(t)) << 4 | uint64_t(c.rv) << 8 |
                         uint64_t(seg) << 14 | uint64_t(c.fixwg ? local : 0) << 20 | uint64_t(norm ? c.pre : c.split) << 32 |
                         uint64_t(c.persist) << 33 | uint64_t(c.ptx && nv) << 34 | uint64_t(c.cvt && nv) << 35 |
                         uint64_t(spec) << 36 | uint64_t(spec && fused) << 37 | uint64_t(spec && hb) << 38 |
                         uint64_t(!norm && c.rexp) << 39 | uint64_t(norm && c.fepi) << 40 | uint64_t(norm && c.pre && c.wf) << 41;
    static std::mutex mu;
    static std::unordered_map<uint64_t, RowNames> cache;  // a few entries per process
    std::lock_guard<std::mutex> lk(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    RowNames r;
    r.key = key;
    const char* ts = t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16";
    r.kernel = norm ? std::string(flag ? "xk_rnorm_ln_" : "xk_rnorm_rms_") + (c.pre ? "pre_" : "") + ts
                    : std::string("xk_rsoftmax_") + (c.split ? "split_" : "") + ts;
    std::string& o = r.options;
    o = "-DXK_OP=" + std::to_string(op);
    if (c.fixwg) o += " -DXK_WG=" + std::to_string(local);
    if (seg > 0) o += " -DXK_SEG=" + std::to_string(seg);
    if (c.rv != 8) o += " -DXK_RV=" + std::to_string(c.rv);
    if (c.persist) o += " -DXK_PERSIST=1";
    if (c.ptx && nv) o += " -DXK_PTX=1";
    if (c.cvt && nv) o += " -DXK_PTX_CVT=1";
    if (spec) o += std::string(" -DXK_FUSED=") + (fused ? "1" : "0") + " -DXK_HB=" + (hb ? "1" : "0");
    if (!norm && c.rexp) o += " -DXK_REXP=1";
    if (norm && c.fepi) o += " -DXK_FEPI=1";
    if (norm && c.pre && c.wf) o += " -DXK_WF=1";
    return cache.emplace(key, std::move(r)).first->second;  // unordered_map: references stay valid
}
// The form's kernel for this thread: get_kernel's (which builds its cache key strings) once per
// (context, form, thread), then from a per-thread table checked against the context's uid and
// program generation (a cleared program cache released the kernels).
cl_kernel row_kernel(const Context& ctx, const RowNames& rn) {
    struct Entry {
        uint64_t uid = 0, gen = 0, key = 0;
        cl_kernel k = nullptr;
    };
    thread_local std::unordered_map<uint64_t, Entry> table;
    const detail::ContextImpl& c = *ctx.impl();
    const uint64_t gen = c.programs_gen.load(std::memory_order_acquire);
    Entry& e = table[rn.key * 0x9E3779B97F4A7C15ull ^ c.uid];
    if (e.k && e.uid == c.uid && e.gen == gen && e.key == rn.key) return e.k;
    e = Entry{c.uid, gen, rn.key, detail::get_kernel(ctx, "ops", rn.kernel, rn.options)};
    return e.k;
}
// 8-element chunks per work-item of the row kernels for dtype t (the NVC of ops.cl).
int row_nvc(DType t, int rv) { return t == DType::bf16 ? rv : std::max(rv / 2, 1); }
// Work-group size of the row kernels for rows of n elements: the power of two (>= 32) that keeps
// the row in registers (nv chunks of 8 per work-item), capped by the device (and cap); longer rows
// loop (xk_norm / xk_softmax) or take those.
size_t row_wg(const Context& ctx, int64_t n, int nv, int64_t cap_max = kMaxWg) {
    const int64_t chunks = (n + 7) / 8;
    const int64_t want = (chunks + nv - 1) / nv;
    int64_t cap = std::min<int64_t>(cap_max, ctx.device().max_work_group_size);
    int64_t p2 = 1;
    while (p2 * 2 <= cap) p2 *= 2;
    cap = p2;
    // CPU devices (PoCL): one size per chunk count (its compiler specializes each work-group size:
    // a build each; the registers of a work-item are memory there anyway): 4096-element rows fill it.
    if (ctx.device().type == "cpu") return static_cast<size_t>(std::min<int64_t>(512 / nv, cap));
    int64_t wg = 32;
    while (wg < want && wg < cap) wg *= 2;
    return static_cast<size_t>(std::min(wg, cap));
}
// Launch of a row kernel for rows of n elements: `local` items per group, seg items per row (0:
// the group), one group per row (per local / seg rows), or with persist at most compute units x
// occ groups. ok = false: the row does not fit in registers.
struct RowLaunch {
    bool ok = false;
    int seg = 0;
    size_t local = 0, global = 0;
};
RowLaunch row_launch(const Context& ctx, const RowCfg& c, DType t, int64_t n, int64_t rows) {
    RowLaunch l;
    const int nvc = row_nvc(t, c.rv);
    const int64_t chunks = n / 8, items = (chunks + nvc - 1) / nvc;
    int64_t rpg = 1;
    if (c.seg && items <= 32) {
        int64_t s = 1;
        while (s < items) s *= 2;
        int64_t wg = c.wg > 0 ? c.wg : 128, cap = std::max(ctx.device().max_work_group_size, 1);
        while (wg > cap) wg /= 2;
        wg = std::max(wg, s);
        if (wg > cap) return l;
        l.seg = static_cast<int>(s);
        l.local = static_cast<size_t>(wg);
        rpg = wg / s;
    } else {
        l.local = row_wg(ctx, n, nvc, kMaxRowWg);
        if (chunks > static_cast<int64_t>(l.local) * nvc) return l;
    }
    int64_t groups = (rows + rpg - 1) / rpg;
    if (c.persist) {
        const int64_t occ = c.occ > 0 ? c.occ : std::max<int64_t>(1, 1024 / static_cast<int64_t>(l.local));
        groups = std::min<int64_t>(groups, std::max(1, ctx.device().compute_units) * occ);
    }
    l.global = static_cast<size_t>(groups) * l.local;
    l.ok = true;
    return l;
}

// A used tensor: a buffer of this context holding `extent` elements of `dt` from its offset.
// (An unused one must be empty.) Returns the byte range for the aliasing checks.
struct Range {
    const void* mem = nullptr;  // BufferImpl identity
    xk::detail::MemRegion region;  // base = the byte offset in the buffer
};

// The tensor's 2D region: rows rows of cols elements, ld apart (extent = (rows-1)*ld + cols).
Range check_tensor(const char* fn, const char* arg, const Context& ctx, const Tensor& t, DType dt, int64_t extent,
                   int64_t rows = 1, int64_t cols = -1, int64_t ld = 0) {
#if XK_WITH_OPENCL
    detail::check_buffer_context(fn, arg, ctx, t.buffer);
#endif
    if (t.offset < 0) fail_arg(fn, (std::string(arg) + ".offset").c_str(), std::to_string(t.offset), "must be >= 0");
    const int64_t es = dtype_size(dt);
    const int64_t elems = checked_add(fn, (std::string(arg) + " offset+extent").c_str(), t.offset, extent);
    const int64_t need = checked_mul(fn, (std::string(arg) + " bytes").c_str(), elems, es);
    if (need > t.buffer.bytes())
        fail_arg(fn, arg, "(buffer of " + std::to_string(t.buffer.bytes()) + " bytes, offset " + std::to_string(t.offset) + ")",
                 "is too small for the descriptor: it needs " + std::to_string(extent) + " elements of " + dtype_name(dt) +
                     " from the offset (" + std::to_string(need) + " bytes)");
    if (cols < 0) cols = extent;
    return Range{t.buffer.impl().get(),
                 xk::detail::MemRegion{static_cast<uintptr_t>(t.offset * es), rows, ld * es, cols * es}};
}

void check_unused(const char* fn, const char* arg, const Tensor& t, const char* flag) {
    if (!t.buffer.empty()) fail_arg(fn, arg, "(a buffer)", std::string("is given but ") + flag + " is false");
}

bool overlap(const Range& a, const Range& b) {
    return a.mem && a.mem == b.mem && xk::detail::regions_overlap(a.region, b.region);
}
bool same(const Range& a, const Range& b) { return a.mem && a.mem == b.mem && xk::detail::same_region(a.region, b.region); }

void no_overlap(const char* fn, const char* out, const Range& o, const char* other, const Range& r) {
    if (overlap(o, r)) fail_arg(fn, out, "(buffer range)", std::string("overlaps ") + other);
}

// XK_VERBOSE's line for an op's launch; `what` (a callable returning the description) is only
// called when verbose output is on, so a call pays no string building otherwise.
template <class What>
void verbose_pick(const char* op, What&& what_fn) {
    const int lvl = xk::detail::verbose_level();
    if (lvl < 1) return;
    const std::string what = what_fn();
    static std::mutex mu;
    static std::unordered_set<std::string> seen;
    {
        std::lock_guard<std::mutex> lk(mu);
        if (lvl < 2 && (seen.size() > 4096 || !seen.insert(std::string(op) + what).second)) return;
    }
    xk::detail::verbose_log(lvl >= 2 ? "gpu_exec" : "gpu_select", op, what, 0.0);
}

// ",wg=<local>" and, for the row kernels, ",groups=<n>[,seg=<rows per group>]".
std::string row_launch(size_t local, size_t global, bool rowk, int64_t seg) {
    std::string r = ",wg=" + std::to_string(local);
    if (rowk) r += ",groups=" + std::to_string(global / local) + (seg ? ",seg=" + std::to_string(seg) : std::string());
    return r;
}

using detail::set_arg;
cl_mem mem_of(const Tensor& t) { return detail::cl_buffer(t.buffer); }
cl_ulong U(int64_t v) { return static_cast<cl_ulong>(v); }
// An empty tensor's slot gets some valid buffer (never read).
cl_mem mem_or(const Tensor& t, cl_mem fallback) { return t.buffer.empty() ? fallback : mem_of(t); }
int dcode(DType t) { return static_cast<int>(t); }
// Alignment code of ops.cl's 8-wide accesses: 2 every value a multiple of 8, 1 of 4, else 0.
int align_code(std::initializer_list<int64_t> v) {
    bool a8 = true, a4 = true;
    for (int64_t x : v) {
        if (x % 8 != 0) a8 = false;
        if (x % 4 != 0) a4 = false;
    }
    return a8 ? 2 : a4 ? 1 : 0;
}
// One program per op (-DXK_OP=n: see ops.cl).
cl_kernel ops_kernel(const Context& ctx, const char* name, int op) {
    static const std::string opts[] = {"", "-DXK_OP=1", "-DXK_OP=2", "-DXK_OP=3", "-DXK_OP=4"};
    return detail::get_kernel(ctx, "ops", name, opts[op]);
}
#endif

#if !XK_WITH_OPENCL
[[noreturn]] void no_cl(const char* fn) {
    throw Error(Status::unsupported, std::string(fn) + ": built without OpenCL (XK_WITH_OPENCL=OFF)");
}
#endif

}  // namespace

namespace detail {
void set_row_variant(const std::string& spec);  // gpu/runtime.hpp (defined without OpenCL too: a no-op)
void set_row_variant(const std::string& spec) {
#if XK_WITH_OPENCL
    // The old one kept (see row_override_slot), reachable from `kept` (not a leak to LSan).
    static std::mutex m;
    static auto* kept = new std::vector<const RowOverride*>();
    const RowOverride* o = new RowOverride(parse_row_variant(spec));
    std::lock_guard<std::mutex> lock(m);
    kept->push_back(row_override_slot().exchange(o, std::memory_order_acq_rel));
#else
    (void)spec;
#endif
}
}  // namespace detail

// ---- norm ----------------------------------------------------------------------------------------
Event norm(const Context& ctx, const NormDesc& in, const NormTensors& t) {
    const char* fn = "xk::gpu::norm";
    if (!ctx.impl()) fail_arg(fn, "ctx", "(empty)", "must be a gpu::Context");
    NormDesc d = in;
    if (d.kind != NormKind::rms_norm && d.kind != NormKind::layer_norm)
        fail_arg(fn, "kind", std::to_string(static_cast<int>(d.kind)), "is not a NormKind (rms_norm=0, layer_norm=1)");
    check_nonnegative(fn, "rows", d.rows);
    check_positive(fn, "hidden", d.hidden);
    check_gpu_dtype(fn, "x_dtype", d.x_dtype);
    check_gpu_dtype(fn, "y_dtype", d.y_dtype);
    if (d.has_weight || d.has_bias) check_gpu_dtype(fn, "weight_dtype", d.weight_dtype);
    if (!(std::isfinite(d.eps) && d.eps >= 0.0f)) fail_arg(fn, "eps", xk::detail::float_str(d.eps), "must be finite and >= 0");
    d.ld_x = resolve_ld(fn, "ld_x", d.ld_x, d.hidden, "hidden");
    d.ld_y = resolve_ld(fn, "ld_y", d.ld_y, d.hidden, "hidden");
    auto extent = [&](const char* what, int64_t ld) {
        return d.rows > 0 ? checked_add(fn, what, checked_mul(fn, what, d.rows - 1, ld), d.hidden) : 0;
    };
    const int64_t ex = extent("(rows-1)*ld_x", d.ld_x), ey = extent("(rows-1)*ld_y", d.ld_y);
    int64_t er = 0, ero = 0;
    if (d.fused_residual) {
        check_gpu_dtype(fn, "residual_dtype", d.residual_dtype);
        d.ld_residual = resolve_ld(fn, "ld_residual", d.ld_residual, d.hidden, "hidden");
        d.ld_residual_out = resolve_ld(fn, "ld_residual_out", d.ld_residual_out, d.hidden, "hidden");
        er = extent("(rows-1)*ld_residual", d.ld_residual);
        ero = extent("(rows-1)*ld_residual_out", d.ld_residual_out);
    }
    if (d.rows == 0) return {};
#if XK_WITH_OPENCL
    const Range x = check_tensor(fn, "x", ctx, t.x, d.x_dtype, ex, d.rows, d.hidden, d.ld_x);
    const Range y = check_tensor(fn, "y", ctx, t.y, d.y_dtype, ey, d.rows, d.hidden, d.ld_y);
    Range w, b, r, ro;
    if (d.has_weight) w = check_tensor(fn, "weight", ctx, t.weight, d.weight_dtype, d.hidden);
    else check_unused(fn, "weight", t.weight, "has_weight");
    if (d.has_bias) b = check_tensor(fn, "bias", ctx, t.bias, d.weight_dtype, d.hidden);
    else check_unused(fn, "bias", t.bias, "has_bias");
    if (d.fused_residual) {
        r = check_tensor(fn, "residual", ctx, t.residual, d.residual_dtype, er, d.rows, d.hidden, d.ld_residual);
        ro = check_tensor(fn, "residual_out", ctx, t.residual_out, d.residual_dtype, ero, d.rows, d.hidden, d.ld_residual_out);
    } else {
        check_unused(fn, "residual", t.residual, "fused_residual");
        check_unused(fn, "residual_out", t.residual_out, "fused_residual");
    }
    const bool y_in_place = same(y, x) && d.y_dtype == d.x_dtype;
    if (!y_in_place && overlap(y, x))
        fail_arg(fn, "y", "(buffer range)", "partially overlaps x (in place needs y == x with the same offset, stride and dtype)");
    no_overlap(fn, "y", y, "weight", w);
    no_overlap(fn, "y", y, "bias", b);
    if (d.fused_residual) {
        no_overlap(fn, "y", y, "residual", r);
        no_overlap(fn, "y", y, "residual_out", ro);
        const bool ro_in_place = same(ro, r);
        if (!ro_in_place && overlap(ro, r))
            fail_arg(fn, "residual_out", "(buffer range)",
                     "partially overlaps residual (in place needs residual_out == residual with the same offset and stride)");
        no_overlap(fn, "residual_out", ro, "x", x);
        no_overlap(fn, "residual_out", ro, "weight", w);
        no_overlap(fn, "residual_out", ro, "bias", b);
    }
    const int al = align_code({t.x.offset, d.ld_x, t.y.offset, d.ld_y, t.weight.offset, t.bias.offset, t.residual.offset,
                               d.ld_residual, t.residual_out.offset, d.ld_residual_out});
    // Every tensor of one type, 8-aligned rows that fit in registers (f16 without the residual):
    // the row kernels (ops_row.h); else xk_norm.
    const DType rt = d.x_dtype;
    const bool one_type = d.y_dtype == rt && (!(d.has_weight || d.has_bias) || d.weight_dtype == rt) &&
                          (!d.fused_residual || (d.residual_dtype == rt && rt != DType::f16));
    const bool ln = d.kind == NormKind::layer_norm;
    RowCfg rc = row_cfg(ctx, true, rt, ln, d.hidden);
    RowLaunch rl;
    if (one_type && al == 2 && d.hidden % 8 == 0) {
        rl = row_launch(ctx, rc, rt, d.hidden, d.rows);
        if (!rl.ok && rc.rv < 8) {  // a row longer than the form holds (NVIDIA's 4 vectors per item): 8
            rc.rv = 8;
            rl = row_launch(ctx, rc, rt, d.hidden, d.rows);
        }
    }
    const bool rowk = rl.ok;
    const RowNames* rn = rowk ? &row_names(ctx, 1, ln, rt, rc, rl.seg, rl.local, d.fused_residual, d.has_bias) : nullptr;
    const char* kname = rowk ? rn->kernel.c_str() : "xk_norm";
    cl_kernel k = rowk ? row_kernel(ctx, *rn) : ops_kernel(ctx, kname, 1);
    const cl_mem any = mem_of(t.x);
    cl_uint i = 0;
    set_arg(k, i++, mem_of(t.x)); set_arg(k, i++, U(t.x.offset)); set_arg(k, i++, U(d.ld_x));
    set_arg(k, i++, mem_of(t.y)); set_arg(k, i++, U(t.y.offset)); set_arg(k, i++, U(d.ld_y));
    set_arg(k, i++, mem_or(t.weight, any)); set_arg(k, i++, U(t.weight.offset));
    set_arg(k, i++, mem_or(t.bias, any)); set_arg(k, i++, U(t.bias.offset));
    set_arg(k, i++, mem_or(t.residual, any)); set_arg(k, i++, U(t.residual.offset)); set_arg(k, i++, U(d.ld_residual));
    set_arg(k, i++, mem_or(t.residual_out, any)); set_arg(k, i++, U(t.residual_out.offset)); set_arg(k, i++, U(d.ld_residual_out));
    set_arg(k, i++, U(d.hidden));
    set_arg(k, i++, d.eps);
    const cl_int dts = dcode(d.x_dtype) | dcode(d.y_dtype) << 8 | dcode(d.residual_dtype) << 16 | dcode(d.weight_dtype) << 24;
    const cl_int flags = (d.has_weight ? 1 : 0) | (d.has_bias ? 2 : 0) | (d.fused_residual ? 4 : 0) |
                         (d.kind == NormKind::layer_norm ? 8 : 0) | (al == 1 ? 16 : 0) | (al == 2 ? 32 : 0);
    set_arg(k, i++, dts);
    set_arg(k, i++, flags);
    if (rowk) {
        set_arg(k, i++, U(d.rows));
    } else {
        rl.local = row_wg(ctx, d.hidden, kNv);
        rl.global = static_cast<size_t>(d.rows) * rl.local;
    }
    const size_t local = rl.local, global = rl.global;
    verbose_pick("norm", [&] { return std::string("ocl:") + kname + row_launch(local, global, rowk, rl.seg) + "," + norm_kind_name(d.kind) + ",hidden=" + std::to_string(d.hidden) +
                             ",x=" + dtype_name(d.x_dtype) + ",y=" + dtype_name(d.y_dtype) + ",device=" + ctx.device().name; });
    return detail::enqueue(ctx, k, 1, &global, &local, fn);
#else
    (void)t; (void)ex; (void)ey; (void)er; (void)ero;
    no_cl(fn);
#endif
}

// ---- GLU -----------------------------------------------------------------------------------------
Event glu(const Context& ctx, const GluDesc& in, const GluTensors& t) {
    const char* fn = "xk::gpu::glu";
    if (!ctx.impl()) fail_arg(fn, "ctx", "(empty)", "must be a gpu::Context");
    GluDesc d = in;
    const int a = static_cast<int>(d.activation);
    if (a < 0 || a > static_cast<int>(Activation::silu))
        fail_arg(fn, "activation", std::to_string(a), "is not an Activation (none=0 .. silu=4)");
    check_nonnegative(fn, "rows", d.rows);
    check_positive(fn, "inner", d.inner);
    check_gpu_dtype(fn, "x_dtype", d.x_dtype);
    check_gpu_dtype(fn, "y_dtype", d.y_dtype);
    const int64_t two_i = checked_mul(fn, "2*inner", 2, d.inner);
    d.ld_x = resolve_ld(fn, "ld_x", d.ld_x, two_i, "2*inner");
    d.ld_y = resolve_ld(fn, "ld_y", d.ld_y, d.inner, "inner");
    const int64_t ex = d.rows > 0 ? checked_add(fn, "(rows-1)*ld_x", checked_mul(fn, "(rows-1)*ld_x", d.rows - 1, d.ld_x), two_i) : 0;
    const int64_t ey = d.rows > 0 ? checked_add(fn, "(rows-1)*ld_y", checked_mul(fn, "(rows-1)*ld_y", d.rows - 1, d.ld_y), d.inner) : 0;
    if (d.rows == 0) return {};
#if XK_WITH_OPENCL
    const Range x = check_tensor(fn, "x", ctx, t.x, d.x_dtype, ex, d.rows, two_i, d.ld_x);
    const Range y = check_tensor(fn, "y", ctx, t.y, d.y_dtype, ey, d.rows, d.inner, d.ld_y);
    Range gate = x;
    gate.region.width = d.inner * dtype_size(d.x_dtype);
    const bool in_place = same(y, gate) && d.y_dtype == d.x_dtype;
    if (!in_place && overlap(y, x))
        fail_arg(fn, "y", "(buffer range)", "overlaps x (in place needs y == x's gate half: same offset, stride and dtype)");
    const int al = align_code({t.x.offset, d.ld_x, d.inner, t.y.offset, d.ld_y});
    // bf16 with 8-aligned rows and inner a multiple of 16: 16 columns per work-item.
    const bool bf16k = d.x_dtype == DType::bf16 && d.y_dtype == DType::bf16 && al == 2 && d.inner % 16 == 0;
    const int per_item = bf16k ? 16 : 8;
    cl_kernel k = ops_kernel(ctx, bf16k ? "xk_glu_bf16" : "xk_glu", 2);
    cl_uint i = 0;
    set_arg(k, i++, mem_of(t.x)); set_arg(k, i++, U(t.x.offset)); set_arg(k, i++, U(d.ld_x));
    set_arg(k, i++, mem_of(t.y)); set_arg(k, i++, U(t.y.offset)); set_arg(k, i++, U(d.ld_y));
    set_arg(k, i++, U(d.inner));
    set_arg(k, i++, static_cast<cl_int>(dcode(d.x_dtype) | dcode(d.y_dtype) << 8));
    set_arg(k, i++, static_cast<cl_int>(a));
    set_arg(k, i++, static_cast<cl_int>(al));
    const size_t chunks = static_cast<size_t>((d.inner + per_item - 1) / per_item);
    const size_t lx = std::min<size_t>(chunks <= 64 ? 64 : chunks <= 128 ? 128 : 256,
                                       static_cast<size_t>(std::max(ctx.device().max_work_group_size, 1)));
    const size_t gx = (chunks + lx - 1) / lx * lx;
    const size_t global[2] = {gx, static_cast<size_t>(d.rows)}, local[2] = {lx, 1};
    verbose_pick("glu", [&] { return std::string(bf16k ? "ocl:xk_glu_bf16,wg=" : "ocl:xk_glu,wg=") + std::to_string(lx) + "x1,inner=" + std::to_string(d.inner) + ",act=" + std::to_string(a) + ",x=" +
                            dtype_name(d.x_dtype) + ",y=" + dtype_name(d.y_dtype) + ",device=" + ctx.device().name; });
    return detail::enqueue(ctx, k, 2, global, local, fn);
#else
    (void)t; (void)ex; (void)ey;
    no_cl(fn);
#endif
}

// ---- softmax -------------------------------------------------------------------------------------
Event softmax(const Context& ctx, const SoftmaxDesc& in, const SoftmaxTensors& t) {
    const char* fn = "xk::gpu::softmax";
    if (!ctx.impl()) fail_arg(fn, "ctx", "(empty)", "must be a gpu::Context");
    SoftmaxDesc d = in;
    check_nonnegative(fn, "rows", d.rows);
    check_positive(fn, "cols", d.cols);
    check_gpu_dtype(fn, "x_dtype", d.x_dtype);
    check_gpu_dtype(fn, "y_dtype", d.y_dtype);
    if (!(std::isfinite(d.scale) && d.scale > 0.0f))
        fail_arg(fn, "scale", xk::detail::float_str(d.scale), "must be finite and > 0");
    if (d.causal && (d.causal_offset > (int64_t(1) << 60) || d.causal_offset < -(int64_t(1) << 60)))
        fail_arg(fn, "causal_offset", std::to_string(d.causal_offset), "must be in [-2^60, 2^60]");
    if (d.has_mask) throw Error(Status::unsupported, std::string(fn) + ": has_mask=true is not offered on the GPU (the CPU softmax has it)");
    d.ld_x = resolve_ld(fn, "ld_x", d.ld_x, d.cols, "cols");
    d.ld_y = resolve_ld(fn, "ld_y", d.ld_y, d.cols, "cols");
    const int64_t ex = d.rows > 0 ? checked_add(fn, "(rows-1)*ld_x", checked_mul(fn, "(rows-1)*ld_x", d.rows - 1, d.ld_x), d.cols) : 0;
    const int64_t ey = d.rows > 0 ? checked_add(fn, "(rows-1)*ld_y", checked_mul(fn, "(rows-1)*ld_y", d.rows - 1, d.ld_y), d.cols) : 0;
    if (d.rows == 0) return {};
#if XK_WITH_OPENCL
    const Range x = check_tensor(fn, "x", ctx, t.x, d.x_dtype, ex, d.rows, d.cols, d.ld_x);
    const Range y = check_tensor(fn, "y", ctx, t.y, d.y_dtype, ey, d.rows, d.cols, d.ld_y);
    const bool in_place = same(y, x) && d.y_dtype == d.x_dtype;
    if (!in_place && overlap(y, x))
        fail_arg(fn, "y", "(buffer range)", "overlaps x (in place needs y == x: same offset, stride and dtype)");
    const int al = align_code({t.x.offset, d.ld_x, t.y.offset, d.ld_y});
    // x and y of one type, 8-aligned rows that fit in registers: the row kernels (ops_row.h).
    const DType rt = d.x_dtype;
    RowCfg rc = row_cfg(ctx, false, rt, d.causal, d.cols);
    RowLaunch rl;
    if (d.y_dtype == rt && al == 2 && d.cols % 8 == 0) {
        rl = row_launch(ctx, rc, rt, d.cols, d.rows);
        if (!rl.ok && rc.rv < 8) {  // a row longer than the form holds (NVIDIA's 4 vectors per item): 8
            rc.rv = 8;
            rl = row_launch(ctx, rc, rt, d.cols, d.rows);
        }
    }
    const bool rowk = rl.ok;
    const RowNames* rn = rowk ? &row_names(ctx, 3, d.causal, rt, rc, rl.seg, rl.local, false, false) : nullptr;
    const char* kname = rowk ? rn->kernel.c_str() : "xk_softmax";
    cl_kernel k = rowk ? row_kernel(ctx, *rn) : ops_kernel(ctx, kname, 3);
    cl_uint i = 0;
    set_arg(k, i++, mem_of(t.x)); set_arg(k, i++, U(t.x.offset)); set_arg(k, i++, U(d.ld_x));
    set_arg(k, i++, mem_of(t.y)); set_arg(k, i++, U(t.y.offset)); set_arg(k, i++, U(d.ld_y));
    set_arg(k, i++, U(d.cols));
    set_arg(k, i++, d.scale);
    set_arg(k, i++, static_cast<cl_int>(d.causal ? 1 : 0));
    set_arg(k, i++, static_cast<cl_long>(d.causal_offset));
    set_arg(k, i++, static_cast<cl_int>(dcode(d.x_dtype) | dcode(d.y_dtype) << 8));
    set_arg(k, i++, static_cast<cl_int>(al));
    if (rowk) {
        set_arg(k, i++, U(d.rows));
    } else {
        rl.local = row_wg(ctx, d.cols, kNv);
        rl.global = static_cast<size_t>(d.rows) * rl.local;
    }
    const size_t local = rl.local, global = rl.global;
    verbose_pick("softmax", [&] { return std::string("ocl:") + kname + row_launch(local, global, rowk, rl.seg) + ",cols=" + std::to_string(d.cols) + (d.causal ? ",causal" : "") + ",x=" +
                                dtype_name(d.x_dtype) + ",y=" + dtype_name(d.y_dtype) + ",device=" + ctx.device().name; });
    return detail::enqueue(ctx, k, 1, &global, &local, fn);
#else
    (void)t; (void)ex; (void)ey;
    no_cl(fn);
#endif
}

// ---- RoPE ----------------------------------------------------------------------------------------
namespace {
// CPU's resolve_layout: strides resolved, heads of different tokens must not overlap; returns the
// extent in elements (0 when absent).
int64_t rope_layout(const char* fn, const std::string& name, int64_t tokens, int64_t heads, int64_t head_dim,
                    int64_t& ts, int64_t& hs) {
    const std::string ts_name = name + "_token_stride", hs_name = name + "_head_stride";
    check_nonnegative(fn, hs_name.c_str(), hs);
    check_nonnegative(fn, ts_name.c_str(), ts);
    if (heads == 0) {
        ts = hs = 0;
        return 0;
    }
    if (hs == 0) hs = head_dim;
    if (ts == 0) ts = checked_mul(fn, (name + "_heads*" + hs_name).c_str(), heads, hs);
    if (heads > 1) check_ld(fn, hs_name.c_str(), hs, head_dim, "head_dim");
    if (tokens > 1) check_ld(fn, ts_name.c_str(), ts, head_dim, "head_dim");
    const int64_t head_span = checked_add(fn, "head extent", checked_mul(fn, "head extent", heads - 1, hs), head_dim);
    const int64_t token_span = checked_add(fn, "token extent", checked_mul(fn, "token extent", std::max<int64_t>(tokens - 1, 0), ts), head_dim);
    const int64_t ext = checked_add(fn, (name + " extent").c_str(), checked_mul(fn, (name + " extent").c_str(), std::max<int64_t>(tokens - 1, 0), ts), head_span);
    if (heads > 1 && tokens > 1 && !(ts >= head_span) && !(hs >= token_span))
        fail_arg(fn, ts_name.c_str(), std::to_string(ts),
                 "and " + hs_name + "=" + std::to_string(hs) + " make heads of different tokens overlap");
    return ext;
}
}  // namespace

Event rope(const Context& ctx, const RopeDesc& in, const RopeTensors& t) {
    const char* fn = "xk::gpu::rope";
    if (!ctx.impl()) fail_arg(fn, "ctx", "(empty)", "must be a gpu::Context");
    RopeDesc d = in;
    if (d.style != RopeStyle::neox && d.style != RopeStyle::gptj)
        fail_arg(fn, "style", std::to_string(static_cast<int>(d.style)), "is not a RopeStyle (neox=0, gptj=1)");
    if (d.cos_sin != RopeCosSin::cache && d.cos_sin != RopeCosSin::compute)
        fail_arg(fn, "cos_sin", std::to_string(static_cast<int>(d.cos_sin)), "is not a RopeCosSin (cache=0, compute=1)");
    if (d.position_type != RopePositionType::s64 && d.position_type != RopePositionType::s32)
        fail_arg(fn, "position_type", std::to_string(static_cast<int>(d.position_type)), "is not a RopePositionType (s64=0, s32=1)");
    check_nonnegative(fn, "tokens", d.tokens);
    check_nonnegative(fn, "q_heads", d.q_heads);
    check_nonnegative(fn, "k_heads", d.k_heads);
    check_positive(fn, "head_dim", d.head_dim);
    if (d.q_heads > 0 && d.k_heads > 0 && d.q_heads % d.k_heads != 0)
        fail_arg(fn, "k_heads", std::to_string(d.k_heads), "must divide q_heads=" + std::to_string(d.q_heads));
    if (d.rotary_dim < 0) fail_arg(fn, "rotary_dim", std::to_string(d.rotary_dim), "must be >= 0 (0 = head_dim)");
    if (d.rotary_dim == 0) d.rotary_dim = d.head_dim;
    if (d.rotary_dim > d.head_dim)
        fail_arg(fn, "rotary_dim", std::to_string(d.rotary_dim), "must be <= head_dim=" + std::to_string(d.head_dim));
    if (d.rotary_dim % 2 != 0) fail_arg(fn, "rotary_dim", std::to_string(d.rotary_dim), "must be even");
    check_gpu_dtype(fn, "dtype", d.dtype);
    const int64_t eq = rope_layout(fn, "q", d.tokens, d.q_heads, d.head_dim, d.q_token_stride, d.q_head_stride);
    const int64_t ek = rope_layout(fn, "k", d.tokens, d.k_heads, d.head_dim, d.k_token_stride, d.k_head_stride);
    int64_t ec = 0;
    if (d.cos_sin == RopeCosSin::cache) {
        check_gpu_dtype(fn, "cache_dtype", d.cache_dtype);
        check_positive(fn, "max_position", d.max_position);
        ec = checked_mul(fn, "max_position*rotary_dim", d.max_position, d.rotary_dim);
    } else {
        if (!(std::isfinite(d.base) && d.base > 0.0f)) fail_arg(fn, "base", xk::detail::float_str(d.base), "must be finite and > 0");
        if (!(std::isfinite(d.scaling_factor) && d.scaling_factor > 0.0f))
            fail_arg(fn, "scaling_factor", xk::detail::float_str(d.scaling_factor), "must be finite and > 0");
    }
    if (d.tokens == 0 || d.q_heads + d.k_heads == 0) return {};
#if XK_WITH_OPENCL
    Range q, k, p, c;
    auto rope_region = [&](Range& r, int64_t heads, int64_t ts, int64_t hs) {  // CPU rope's tensor_region
        const int64_t es = dtype_size(d.dtype), head_span = (heads - 1) * hs + d.head_dim;
        const uintptr_t base = r.region.base;
        if (heads == 1 || d.tokens == 1 || ts >= head_span)
            r.region = xk::detail::MemRegion{base, d.tokens, ts * es, head_span * es};
        else
            r.region = xk::detail::MemRegion{base, heads, hs * es, ((d.tokens - 1) * ts + d.head_dim) * es};
    };
    if (d.q_heads > 0) {
        q = check_tensor(fn, "q", ctx, t.q, d.dtype, eq);
        rope_region(q, d.q_heads, d.q_token_stride, d.q_head_stride);
    } else {
        check_unused(fn, "q", t.q, "q_heads > 0");
    }
    if (d.k_heads > 0) {
        k = check_tensor(fn, "k", ctx, t.k, d.dtype, ek);
        rope_region(k, d.k_heads, d.k_token_stride, d.k_head_stride);
    } else {
        check_unused(fn, "k", t.k, "k_heads > 0");
    }
    detail::check_buffer_context(fn, "positions", ctx, t.positions.buffer);
    if (t.positions.offset < 0) fail_arg(fn, "positions.offset", std::to_string(t.positions.offset), "must be >= 0");
    {
        const int64_t psz = d.position_type == RopePositionType::s64 ? 8 : 4;
        const int64_t need = checked_mul(fn, "positions bytes", checked_add(fn, "positions", t.positions.offset, d.tokens), psz);
        if (need > t.positions.buffer.bytes())
            fail_arg(fn, "positions", "(buffer of " + std::to_string(t.positions.buffer.bytes()) + " bytes, offset " + std::to_string(t.positions.offset) + ")",
                     "is too small for the descriptor: it needs " + std::to_string(d.tokens) + " positions of " + std::to_string(psz) +
                         " bytes from the offset (" + std::to_string(need) + " bytes)");
        p = Range{t.positions.buffer.impl().get(),
                  xk::detail::MemRegion{static_cast<uintptr_t>(t.positions.offset * psz), 1, 0, d.tokens * psz}};
    }
    if (d.cos_sin == RopeCosSin::cache) c = check_tensor(fn, "cos_sin_cache", ctx, t.cos_sin_cache, d.cache_dtype, ec);
    else check_unused(fn, "cos_sin_cache", t.cos_sin_cache, "cos_sin == cache");
    no_overlap(fn, "k", k, "q", q);
    no_overlap(fn, "q", q, "positions", p);
    no_overlap(fn, "k", k, "positions", p);
    no_overlap(fn, "q", q, "cos_sin_cache", c);
    no_overlap(fn, "k", k, "cos_sin_cache", c);
    const int al = align_code({t.q.offset, d.q_token_stride, d.q_head_stride, t.k.offset, d.k_token_stride,
                               d.k_head_stride, t.cos_sin_cache.offset, d.rotary_dim / 2});
    // 16-bit q / k, neox, everything 8-aligned: eight pairs per work-item (16-byte accesses).
    const bool vec8 = (d.dtype == DType::bf16 || d.dtype == DType::f16) && d.style == RopeStyle::neox && al == 2 &&
                      (d.rotary_dim / 2) % 8 == 0;
    const bool vec4 = !vec8 && (d.rotary_dim / 2) % 4 == 0;  // four pairs per work-item
    const bool heads8 = vec8 && d.dtype == DType::bf16;  // 8 pairs of kRopeHeads heads per work-item
    const char* kname = heads8 ? "xk_rope8h" : vec8 ? "xk_rope8" : vec4 ? "xk_rope4" : "xk_rope";
    cl_kernel kk = ops_kernel(ctx, kname, 4);
    const cl_mem any = mem_of(t.positions);
    cl_uint i = 0;
    set_arg(kk, i++, mem_or(t.q, any)); set_arg(kk, i++, U(t.q.offset)); set_arg(kk, i++, U(d.q_token_stride));
    set_arg(kk, i++, U(d.q_head_stride)); set_arg(kk, i++, U(d.q_heads));
    set_arg(kk, i++, mem_or(t.k, any)); set_arg(kk, i++, U(t.k.offset)); set_arg(kk, i++, U(d.k_token_stride));
    set_arg(kk, i++, U(d.k_head_stride));
    set_arg(kk, i++, any); set_arg(kk, i++, U(t.positions.offset));
    set_arg(kk, i++, mem_or(t.cos_sin_cache, any)); set_arg(kk, i++, U(t.cos_sin_cache.offset));
    set_arg(kk, i++, U(d.max_position)); set_arg(kk, i++, static_cast<cl_int>(dcode(d.cache_dtype)));
    set_arg(kk, i++, U(d.rotary_dim)); set_arg(kk, i++, d.base); set_arg(kk, i++, d.scaling_factor);
    set_arg(kk, i++, static_cast<cl_int>(dcode(d.dtype)));
    const cl_int flags = (d.style == RopeStyle::gptj ? 1 : 0) | (d.cos_sin == RopeCosSin::compute ? 2 : 0) |
                         (d.position_type == RopePositionType::s32 ? 4 : 0) | (al >= 1 ? 16 : 0) | (al == 2 ? 32 : 0);
    set_arg(kk, i++, flags);
    const int64_t heads = d.q_heads + d.k_heads;
    const int64_t item_heads = heads8 ? (heads + kRopeHeads - 1) / kRopeHeads : heads;
    const int64_t total = checked_mul(fn, "tokens*heads*rotary_dim/2", checked_mul(fn, "tokens*heads", d.tokens, item_heads),
                                      d.rotary_dim / (vec8 ? 16 : vec4 ? 8 : 2));
    set_arg(kk, i++, U(heads));
    set_arg(kk, i++, U(total));
    const size_t local = 128, global = (static_cast<size_t>(total) + local - 1) / local * local;
    verbose_pick("rope", [&] { return std::string("ocl:") + kname + ",wg=128," + rope_style_name(d.style) + ",head_dim=" + std::to_string(d.head_dim) +
                             ",rotary_dim=" + std::to_string(d.rotary_dim) + ",dtype=" + dtype_name(d.dtype) +
                             ",device=" + ctx.device().name; });
    return detail::enqueue(ctx, kk, 1, &global, &local, fn);
#else
    (void)t; (void)eq; (void)ek; (void)ec;
    no_cl(fn);
#endif
}

}  // namespace xk::gpu
