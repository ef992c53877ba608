// Memory-bound GPU ops (xk::gpu::norm / glu / softmax / rope) against the CPU ops over odd sizes
// (1, 7, 17, 1023, 4097), strides, element offsets (misaligned rows), in place, f32 / bf16 / f16
// storage, and bad input. Skips (GTEST_SKIP, saying so) without an OpenCL device.
//
// The reference: the CPU op with the same descriptor on the same bytes for f32 and bf16; for f16
// (CPU ops take f32 / bf16) the CPU f32 op on the f16 values widened, its output compared after
// the GPU's f16 rounding.
// Tolerances |gpu - ref| <= atol + rtol |ref|:
//   f32  rtol 2e-5, atol 1e-6   (summation order, the device's exp / rsqrt / erf within a few ulps)
//   bf16 rtol 2^-7, atol 1e-6   (one bf16 ulp: both round an f32 result that differs in the last bits)
//   f16  rtol 2^-9, atol 2e-5   (one f16 ulp plus the f16 rounding of intermediate h / inputs)
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/test_util.hpp"
#include "xk/gpu.hpp"
#include "xk/llm.hpp"
#include "xk/norm.hpp"
#include "xk/rope.hpp"

namespace xk::gpu::detail {
void set_row_variant(const std::string& spec);  // src/gpu/ops.cpp (gpu/runtime.hpp): replaces XK_GPU_ROW_VARIANT
}

namespace gpu = xk::gpu;
using xk::DType;

namespace {

gpu::Context* shared_ctx() {
    static gpu::Context* ctx = []() -> gpu::Context* {
        if (!gpu::built_with_opencl() || gpu::devices().empty()) return nullptr;
        return new gpu::Context();
    }();
    return ctx;
}

#define XK_NEED_GPU()                                                                                            \
    if (!shared_ctx()) GTEST_SKIP() << "no OpenCL device (or built without OpenCL): GPU tests skipped";          \
    const gpu::Context& ctx = *shared_ctx()

const DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
const int64_t kSizes[] = {1, 7, 17, 64, 1023, 4097};  // 64: rows aligned to 4 elements (the vector path)
// Plus, 8-aligned (every row base a multiple of 8 elements: the bf16 kernels): 64 in every dtype,
// 2048 in bf16 (more chunks than work-items: each work-item several).
const int64_t kSizes8[] = {1, 7, 17, 64, 1023, 4097, 2048};
bool run_size(int64_t n, DType t, bool a8) { return a8 ? (n == 64 || (n == 2048 && t != DType::f16)) : n != 2048; }

// XK_GPU_ROW_VARIANT values the norm / softmax sweeps run (the row kernels' forms, src/gpu/ops.cpp):
// the defaults (per op and dtype: weights with the row or after it, softmax's one or two
// reductions), and one more on the bf16 8-aligned rows (the body is the same for every type):
// 4 vectors per work-item, weights with the row, two reductions, groups looping over rows (occ=1
// leaves fewer groups than rows), short rows several per group (seg), the group size compiled in,
// local-memory reductions (ptx=0: the NVIDIA defaults use shuffles), weights held widened (wf). (One more only: PoCL
// compiles each kernel anew per form and group size.) An XK_GPU_ROW_VARIANT set when the test
// starts replaces the defaults (a device run checks a measured form that way).
// The third: 8 vectors per item, residual / bias compiled in (spec), softmax's exponentials
// recomputed at the store (rexp) with one reduction, the norms' two-fma epilogue (fepi),
// groups looping over rows.
const char* const kRowVariants[] = {"", "rv=4,persist=1,occ=1,pre=1,split=1,seg=1,fixwg=1,wf=1,ptx=0,cvt=0",
                                    "rv=8,persist=1,pre=0,split=0,spec=1,rexp=1,fepi=1,ptx=0,cvt=0"};
void set_row_variant(const char* v) {
    static const std::string initial = [] {
        const char* e = std::getenv("XK_GPU_ROW_VARIANT");
        return std::string(e ? e : "");
    }();
    gpu::detail::set_row_variant(*v ? v : initial);
}

float rtol(DType t) { return t == DType::f32 ? 2e-5f : t == DType::bf16 ? 1.0f / 128 : 1.0f / 512; }
float atol(DType t) { return t == DType::f32 ? 1e-6f : t == DType::bf16 ? 1e-6f : 2e-5f; }
float g_extra_atol = 0.0f;  // gelu: the absolute error of 1 + erf / tanh near -1 (5 ulp |g u|)

// Host bytes of n values in dtype t, rounded.
std::vector<uint8_t> encode(const std::vector<float>& v, DType t) {
    std::vector<uint8_t> b(v.size() * static_cast<size_t>(xk::dtype_size(t)));
    for (size_t i = 0; i < v.size(); ++i) {
        if (t == DType::f32) std::memcpy(&b[i * 4], &v[i], 4);
        else {
            const uint16_t h = t == DType::bf16 ? xk::bf16::from_float(v[i]) : xk::f16::from_float(v[i]);
            std::memcpy(&b[i * 2], &h, 2);
        }
    }
    return b;
}
std::vector<float> decode(const std::vector<uint8_t>& b, DType t) {
    const size_t n = b.size() / static_cast<size_t>(xk::dtype_size(t));
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        if (t == DType::f32) std::memcpy(&v[i], &b[i * 4], 4);
        else {
            uint16_t h;
            std::memcpy(&h, &b[i * 2], 2);
            v[i] = t == DType::bf16 ? xk::bf16::to_float(h) : xk::f16::to_float(h);
        }
    }
    return v;
}
// The CPU op's storage for dtype t (f16 -> f32 of the widened values).
DType cpu_dtype(DType t) { return t == DType::f16 ? DType::f32 : t; }
std::vector<uint8_t> cpu_bytes(const std::vector<uint8_t>& b, DType t) {
    return t == DType::f16 ? encode(decode(b, t), DType::f32) : b;
}

std::vector<float> randv(size_t n, std::mt19937& rng, float lo = -2.0f, float hi = 2.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// A buffer holding `bytes` at element offset `off` (elements of esize), sentinel elsewhere.
gpu::Buffer upload(const gpu::Context& ctx, const std::vector<uint8_t>& bytes, int64_t off, int esize, size_t extra = 64) {
    std::vector<uint8_t> all(static_cast<size_t>(off * esize) + bytes.size() + extra, 0x5a);
    std::memcpy(all.data() + off * esize, bytes.data(), bytes.size());
    gpu::Buffer b(ctx, static_cast<int64_t>(all.size()));
    b.write(all.data(), b.bytes());
    return b;
}
std::vector<uint8_t> download(const gpu::Buffer& b, int64_t off, int esize, size_t n_bytes) {
    auto all = b.to_host<uint8_t>();
    // bytes outside the tensor are untouched
    for (size_t i = 0; i < static_cast<size_t>(off * esize); ++i) EXPECT_EQ(all[i], 0x5a) << "before the tensor, byte " << i;
    for (size_t i = static_cast<size_t>(off * esize) + n_bytes; i < all.size(); ++i) EXPECT_EQ(all[i], 0x5a) << "after the tensor, byte " << i;
    return std::vector<uint8_t>(all.begin() + off * esize, all.begin() + off * esize + static_cast<std::ptrdiff_t>(n_bytes));
}

// Compares the rows x cols matrices of stride ld (elements between rows are ignored).
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, int64_t rows, int64_t cols, int64_t ld,
                  DType t, const std::string& what) {
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const float g = got[static_cast<size_t>(r * ld + c)], e = ref[static_cast<size_t>(r * ld + c)];
            if (!(std::fabs(g - e) <= atol(t) + g_extra_atol + rtol(t) * std::fabs(e)) && bad++ < 5)
                ADD_FAILURE() << what << " r=" << r << " c=" << c << " got " << g << " want " << e;
        }
}

}  // namespace

// ---- norm ----------------------------------------------------------------------------------------
TEST(GpuOps, Norm) {
    XK_NEED_GPU();
    std::mt19937 rng(1);
    const int64_t rows = 3;
    for (const char* rv : kRowVariants)
    for (DType t : kDtypes)
        for (int kind = 0; kind < 2; ++kind)
            for (int64_t n : kSizes8)
                for (int variant = 0; variant < 3; ++variant) {  // 0: packed, weight; 1: strided, offsets, residual, bias; 2: 1 8-aligned
                    if (!run_size(n, t, variant == 2) || (n == 2048 && variant != 2) || (*rv && (variant == 1 || t != DType::bf16))) continue;
                    set_row_variant(rv);
                    xk::NormDesc d;
                    d.kind = static_cast<xk::NormKind>(kind);
                    d.rows = rows;
                    d.hidden = n;
                    d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
                    d.eps = 1e-5f;
                    d.has_bias = variant >= 1 && kind == 1;
                    d.fused_residual = variant >= 1;
                    const bool a4 = n % 4 == 0;  // aligned layouts for n = 64
                    // n = 64: packed rows are 8-aligned, the strided ones 4-aligned (the two vector forms)
                    int64_t ld = variant == 1 ? (a4 ? n + 4 : n + 3) : n, off = variant == 1 ? (a4 ? 4 : 5) : 0;
                    if (variant == 2) ld = n + 8, off = 8;
                    d.ld_x = d.ld_y = d.ld_residual = d.ld_residual_out = ld;
                    const int es = xk::dtype_size(t);
                    const size_t m = static_cast<size_t>((rows - 1) * ld + n);
                    // variant 2: x around 8 (LayerNorm's moments away from 0: the v2 kernels' shifted sums)
                    const auto xb = encode(variant == 2 ? randv(m, rng, 6.0f, 10.0f) : randv(m, rng), t), rb = encode(randv(m, rng), t);
                    const auto wb = encode(randv(static_cast<size_t>(n), rng, 0.5f, 1.5f), t);
                    const auto bb = encode(randv(static_cast<size_t>(n), rng), t);
                    gpu::NormTensors g;
                    g.x = gpu::Tensor(upload(ctx, xb, off, es), off);
                    g.y = gpu::Tensor(upload(ctx, std::vector<uint8_t>(m * es, 0x5a), off, es), off);
                    g.weight = gpu::Tensor(upload(ctx, wb, 0, es), 0);
                    if (d.has_bias) g.bias = gpu::Tensor(upload(ctx, bb, 0, es), 0);
                    if (d.fused_residual) {
                        g.residual = gpu::Tensor(upload(ctx, rb, off, es), off);
                        g.residual_out = g.residual;  // in place, vLLM's fused_add_rms_norm
                    }
                    gpu::norm(ctx, d, g).wait();
                    // CPU
                    xk::NormDesc c = d;
                    c.x_dtype = c.y_dtype = c.residual_dtype = c.weight_dtype = cpu_dtype(t);
                    auto cx = cpu_bytes(xb, t), cr = cpu_bytes(rb, t), cw = cpu_bytes(wb, t), cb = cpu_bytes(bb, t);
                    std::vector<uint8_t> cy(m * static_cast<size_t>(xk::dtype_size(c.y_dtype)));
                    xk::NormArgs a;
                    a.x = cx.data();
                    a.y = cy.data();
                    a.weight = cw.data();
                    a.bias = d.has_bias ? cb.data() : nullptr;
                    a.residual = d.fused_residual ? cr.data() : nullptr;
                    a.residual_out = d.fused_residual ? cr.data() : nullptr;
                    std::vector<uint8_t> ch;  // f16 with the residual: h rounded to f16 first, then the f32 norm
                    if (t == DType::f16 && d.fused_residual) {
                        std::vector<float> h = decode(cx, DType::f32);
                        const std::vector<float> rr = decode(cr, DType::f32);
                        for (size_t i = 0; i < h.size(); ++i) h[i] = xk::f16::to_float(xk::f16::from_float(h[i] + rr[i]));
                        ch = encode(h, DType::f32);
                        cr = ch;
                        a.x = ch.data();
                        a.residual = a.residual_out = nullptr;
                        c.fused_residual = false;
                    }
                    xk::norm(c, a);
                    const std::string what = std::string(xk::dtype_name(t)) + " " + xk::norm_kind_name(d.kind) +
                                             " hidden=" + std::to_string(n) + " variant=" + std::to_string(variant) + " " + rv;
                    expect_close(decode(download(g.y.buffer, off, es, m * es), t), decode(cy, c.y_dtype), rows, n, ld, t,
                                 what + " y");
                    if (d.fused_residual)
                        expect_close(decode(download(g.residual.buffer, off, es, m * es), t), decode(cr, c.residual_dtype),
                                     rows, n, ld, t, what + " residual_out");
                }
    set_row_variant("");
}

TEST(GpuOps, NormInPlaceAndBadInput) {
    XK_NEED_GPU();
    std::mt19937 rng(2);
    xk::NormDesc d;
    d.rows = 2;
    d.hidden = 33;
    const auto x = randv(66, rng), w = randv(33, rng);
    gpu::Buffer bx = gpu::Buffer::from_host(ctx, x), bw = gpu::Buffer::from_host(ctx, w);
    gpu::norm(ctx, d, {bx, bx, bw, {}, {}, {}}).wait();  // y == x
    std::vector<float> y(66);
    xk::rms_norm(2, 33, x.data(), w.data(), d.eps, y.data());
    expect_close(bx.to_host<float>(), y, 2, 33, 33, DType::f32, "in place");

    gpu::Buffer small(ctx, 65 * 4), by(ctx, 66 * 4);
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {small, by, bw, {}, {}, {}}),
                      "xk::gpu::norm: x=(buffer of 260 bytes, offset 0) is too small for the descriptor: it needs 66 elements of f32");
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {gpu::Tensor(bx, 1), by, bw, {}, {}, {}}), "x=(buffer of 264 bytes, offset 1) is too small");
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {bx, by, {}, {}, {}, {}}), "weight=(empty buffer)");
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {bx, by, bw, bw, {}, {}}), "bias=(a buffer) is given but has_bias is false");
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {gpu::Tensor(bx, 0), gpu::Tensor(by, 0), gpu::Tensor(by, 0), {}, {}, {}}), "y=(buffer range) overlaps weight");
    gpu::Buffer big(ctx, 80 * 4);
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {gpu::Tensor(big, 0), gpu::Tensor(big, 1), bw, {}, {}, {}}), "y=(buffer range) partially overlaps x");
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {bx, gpu::Tensor(bx, -1), bw, {}, {}, {}}), "y.offset=-1");
    gpu::Context other(gpu::selected_device_index());
    gpu::Buffer foreign(other, 66 * 4);
    XK_EXPECT_INVALID(gpu::norm(ctx, d, {bx, foreign, bw, {}, {}, {}}), "y=(buffer of another context)");
    xk::NormDesc bad = d;
    bad.ld_x = 5;
    XK_EXPECT_INVALID(gpu::norm(ctx, bad, {bx, by, bw, {}, {}, {}}), "ld_x=5 must be >= hidden=33");
    bad = d;
    bad.eps = -1;
    XK_EXPECT_INVALID(gpu::norm(ctx, bad, {bx, by, bw, {}, {}, {}}), "eps=-1");
    bad = d;
    bad.x_dtype = DType::s8;
    XK_EXPECT_ERROR(gpu::norm(ctx, bad, {bx, by, bw, {}, {}, {}}), xk::Status::unsupported, "x_dtype=s8 is not supported");
    bad = d;
    bad.rows = 0;
    EXPECT_FALSE(gpu::norm(ctx, bad, {}).valid());  // nothing to do: no buffers needed
}

// ---- GLU -----------------------------------------------------------------------------------------
TEST(GpuOps, Glu) {
    XK_NEED_GPU();
    std::mt19937 rng(3);
    const xk::Activation acts[] = {xk::Activation::silu, xk::Activation::gelu_tanh, xk::Activation::gelu_erf,
                                   xk::Activation::relu, xk::Activation::none};
    for (DType t : kDtypes)
        for (int64_t n : kSizes8)
            for (int a8 = 0; a8 < 2; ++a8)
            for (xk::Activation act : acts) {
                if (!run_size(n, t, a8 == 1)) continue;
                if (act != xk::Activation::silu && (t != DType::f32 || n > 17)) continue;  // the others: f32, small
                const bool a4 = n % 4 == 0;
                int64_t rows = 3, ldx = a4 ? 2 * n + 4 : 2 * n + 1, ldy = a4 ? n + 4 : n + 2, off = a4 ? 4 : 3;
                if (a8) ldx = 2 * n + 8, ldy = n + 8, off = 8;
                xk::GluDesc d;
                d.activation = act;
                d.rows = rows;
                d.inner = n;
                d.x_dtype = d.y_dtype = t;
                d.ld_x = ldx;
                d.ld_y = ldy;
                const int es = xk::dtype_size(t);
                const size_t mx = static_cast<size_t>((rows - 1) * ldx + 2 * n), my = static_cast<size_t>((rows - 1) * ldy + n);
                const auto xb = encode(randv(mx, rng, -6.0f, 6.0f), t);
                gpu::GluTensors g{gpu::Tensor(upload(ctx, xb, off, es), off),
                                  gpu::Tensor(upload(ctx, std::vector<uint8_t>(my * es, 0x5a), off, es), off)};
                gpu::glu(ctx, d, g).wait();
                // |g u| <= 36 here: 5 ulp of it for gelu
                g_extra_atol = act == xk::Activation::gelu_erf || act == xk::Activation::gelu_tanh ? 5 * 36 * 0x1p-24f : 0.0f;
                xk::GluDesc c = d;
                c.x_dtype = c.y_dtype = cpu_dtype(t);
                auto cx = cpu_bytes(xb, t);
                std::vector<uint8_t> cy(my * static_cast<size_t>(xk::dtype_size(c.y_dtype)));
                xk::glu(c, {cx.data(), cy.data()});
                expect_close(decode(download(g.y.buffer, off, es, my * es), t), decode(cy, c.y_dtype), rows, n, ldy,
                             t == DType::bf16 ? DType::bf16 : t,
                             std::string("glu ") + xk::dtype_name(t) + " inner=" + std::to_string(n) + " act=" +
                                 std::to_string(static_cast<int>(act)));
                g_extra_atol = 0.0f;
            }
    // bad input
    xk::GluDesc d;
    d.rows = 2;
    d.inner = 8;
    gpu::Buffer x(ctx, 32 * 4), y(ctx, 15 * 4);
    XK_EXPECT_INVALID(gpu::glu(ctx, d, {x, y}), "y=(buffer of 60 bytes, offset 0) is too small for the descriptor: it needs 16 elements");
    XK_EXPECT_INVALID(gpu::glu(ctx, d, {x, gpu::Tensor(x, 4)}), "y=(buffer range) overlaps x");
    d.ld_x = 10;
    XK_EXPECT_INVALID(gpu::glu(ctx, d, {x, y}), "ld_x=10 must be >= 2*inner=16");
}

// ---- softmax -------------------------------------------------------------------------------------
TEST(GpuOps, Softmax) {
    XK_NEED_GPU();
    std::mt19937 rng(4);
    for (const char* rv : kRowVariants)
    for (DType t : kDtypes)
        for (int64_t n : kSizes8)
            for (int a8 = 0; a8 < 2; ++a8)
            for (int causal = 0; causal < 2; ++causal)
            for (int empty_rows = 0; empty_rows < 2; ++empty_rows) {  // 1: causal rows that see nothing, 1, 2 columns
                if (!run_size(n, t, a8 == 1) || (empty_rows && !(causal && a8)) || (*rv && (!a8 || t != DType::bf16))) continue;
                set_row_variant(rv);
                const bool a4 = n % 4 == 0;
                int64_t rows = 4, ld = a4 ? n + 4 : n + 1, off = a4 ? 12 : 1;
                if (a8) ld = n + 8, off = 8;
                xk::SoftmaxDesc d;
                d.rows = rows;
                d.cols = n;
                d.x_dtype = d.y_dtype = t;
                d.ld_x = d.ld_y = ld;
                d.scale = 0.7f;
                d.causal = causal == 1;
                d.causal_offset = empty_rows ? -2 : n - rows - 1;  // the first row sees n - 4 columns (none when n < 5)
                const int es = xk::dtype_size(t);
                const size_t m = static_cast<size_t>((rows - 1) * ld + n);
                const auto xb = encode(randv(m, rng, -8.0f, 8.0f), t);
                gpu::Buffer bx = upload(ctx, xb, off, es);
                gpu::SoftmaxTensors g{gpu::Tensor(bx, off), gpu::Tensor(bx, off)};  // in place
                gpu::softmax(ctx, d, g).wait();
                xk::SoftmaxDesc c = d;
                c.x_dtype = c.y_dtype = cpu_dtype(t);
                auto cx = cpu_bytes(xb, t);
                std::vector<uint8_t> cy(cx.size());
                xk::SoftmaxArgs a;
                a.x = cx.data();
                a.y = cy.data();
                xk::softmax(c, a);
                expect_close(decode(download(bx, off, es, m * es), t), decode(cy, c.y_dtype), rows, n, ld, t,
                             std::string("softmax ") + xk::dtype_name(t) + " cols=" + std::to_string(n) +
                                 (causal ? " causal" : "") + (empty_rows ? " offset=-2" : "") + " " + rv);
            }
    set_row_variant("");
    xk::SoftmaxDesc d;
    d.rows = 2;
    d.cols = 5;
    gpu::Buffer x(ctx, 40), y(ctx, 36);
    XK_EXPECT_INVALID(gpu::softmax(ctx, d, {x, y}), "y=(buffer of 36 bytes, offset 0) is too small");
    d.has_mask = true;
    XK_EXPECT_ERROR(gpu::softmax(ctx, d, {x, x}), xk::Status::unsupported, "has_mask");
    d.has_mask = false;
    d.scale = 0;
    XK_EXPECT_INVALID(gpu::softmax(ctx, d, {x, x}), "scale=0");
}

// ---- RoPE ----------------------------------------------------------------------------------------
TEST(GpuOps, Rope) {
    XK_NEED_GPU();
    std::mt19937 rng(5);
    struct Shape { int64_t head_dim, rotary_dim; };
    const Shape shapes[] = {{2, 0}, {18, 14}, {64, 0}, {128, 0}};
    for (DType t : kDtypes)
        for (Shape s : shapes)
            for (int style = 0; style < 2; ++style)
                for (int mode = 0; mode < 2; ++mode) {  // cache (s64 positions) / compute (s32 positions)
                    const int64_t tokens = 7, qh = 4, kh = 2, maxp = 64;
                    xk::RopeDesc d;
                    d.style = static_cast<xk::RopeStyle>(style);
                    d.tokens = tokens;
                    d.q_heads = qh;
                    d.k_heads = kh;
                    d.head_dim = s.head_dim;
                    d.rotary_dim = s.rotary_dim;
                    d.dtype = t;
                    d.cos_sin = mode == 0 ? xk::RopeCosSin::cache : xk::RopeCosSin::compute;
                    d.position_type = mode == 0 ? xk::RopePositionType::s64 : xk::RopePositionType::s32;
                    d.max_position = maxp;
                    d.cache_dtype = DType::f32;
                    // q and k as column slices of one packed qkv row (token stride (qh + 2 kh) * head_dim)
                    const int64_t ts = (qh + 2 * kh) * s.head_dim;
                    d.q_token_stride = d.k_token_stride = ts;
                    const int rd = static_cast<int>(s.rotary_dim ? s.rotary_dim : s.head_dim);
                    const int es = xk::dtype_size(t);
                    const size_t m = static_cast<size_t>(tokens * ts);
                    const auto qkv = encode(randv(m, rng), t);
                    std::vector<int64_t> pos64(tokens);
                    std::vector<int32_t> pos32(tokens);
                    for (int64_t i = 0; i < tokens; ++i) pos64[i] = pos32[i] = static_cast<int32_t>((i * 37 + 5) % maxp);
                    std::vector<float> cache(static_cast<size_t>(maxp * rd));
                    for (int64_t p = 0; p < maxp; ++p)
                        for (int i = 0; i < rd / 2; ++i) {
                            const double th = p * std::pow(10000.0, -2.0 * i / rd);
                            cache[p * rd + i] = static_cast<float>(std::cos(th));
                            cache[p * rd + rd / 2 + i] = static_cast<float>(std::sin(th));
                        }
                    gpu::Buffer b = upload(ctx, qkv, 0, es);
                    gpu::RopeTensors g;
                    g.q = gpu::Tensor(b, 0);
                    g.k = gpu::Tensor(b, qh * s.head_dim);
                    g.positions = mode == 0 ? gpu::Buffer::from_host(ctx, pos64) : gpu::Buffer::from_host(ctx, pos32);
                    if (mode == 0) g.cos_sin_cache = gpu::Buffer::from_host(ctx, cache);
                    gpu::rope(ctx, d, g).wait();
                    xk::RopeDesc c = d;
                    c.dtype = cpu_dtype(t);
                    auto cq = cpu_bytes(qkv, t);
                    const int ces = xk::dtype_size(c.dtype);
                    xk::RopeArgs a;
                    a.q = cq.data();
                    a.k = cq.data() + qh * s.head_dim * ces;
                    a.positions = mode == 0 ? static_cast<const void*>(pos64.data()) : pos32.data();
                    a.cos_sin_cache = mode == 0 ? cache.data() : nullptr;
                    xk::rope(c, a);
                    // every element of the qkv rows (v untouched on both)
                    const float tol_scale = 1.0f;
                    (void)tol_scale;
                    expect_close(decode(download(b, 0, es, m * es), t), decode(cq, c.dtype), tokens, ts, ts, t,
                                 std::string("rope ") + xk::dtype_name(t) + " head_dim=" + std::to_string(s.head_dim) +
                                     " style=" + std::to_string(style) + " mode=" + std::to_string(mode));
                }
    // bad input
    xk::RopeDesc d;
    d.tokens = 3;
    d.q_heads = 2;
    d.head_dim = 8;
    d.max_position = 4;
    gpu::Buffer q(ctx, 47 * 4), pos(ctx, 3 * 8), cache(ctx, 4 * 8 * 4);
    XK_EXPECT_INVALID(gpu::rope(ctx, d, {q, {}, pos, cache}), "q=(buffer of 188 bytes, offset 0) is too small for the descriptor: it needs 48 elements");
    gpu::Buffer q2(ctx, 48 * 4), pos2(ctx, 2 * 8);
    XK_EXPECT_INVALID(gpu::rope(ctx, d, {q2, {}, pos2, cache}), "positions=(buffer of 16 bytes, offset 0) is too small");
    XK_EXPECT_INVALID(gpu::rope(ctx, d, {q2, q2, pos, cache}), "k=(a buffer) is given but k_heads > 0 is false");
    d.rotary_dim = 3;
    XK_EXPECT_INVALID(gpu::rope(ctx, d, {q2, {}, pos, cache}), "rotary_dim=3 must be even");
}

// ---- the C API -----------------------------------------------------------------------------------
#include "xk/c/gpu.h"

TEST(GpuCapi, RuntimeAndOps) {
    int count = -1;
    ASSERT_EQ(xk_gpu_device_count(&count), XK_SUCCESS);
    xk_gpu_context c = nullptr;
    if (count == 0) {
        EXPECT_NE(xk_gpu_context_create(-1, &c), XK_SUCCESS);
        EXPECT_EQ(c, nullptr);
        GTEST_SKIP() << "no OpenCL device: the C API's device calls skipped";
    }
    char name[256];
    ASSERT_EQ(xk_gpu_device_name(0, name, sizeof name), XK_SUCCESS);
    EXPECT_NE(std::string(name).find(" / "), std::string::npos);
    char tiny[4];
    ASSERT_EQ(xk_gpu_device_name(0, tiny, sizeof tiny), XK_SUCCESS);
    EXPECT_EQ(std::strlen(tiny), 3u);
    EXPECT_EQ(xk_gpu_device_name(count, name, sizeof name), XK_INVALID_ARGUMENT);
    int sel = -1;
    ASSERT_EQ(xk_gpu_selected_device(&sel), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_context_create(-1, &c), XK_SUCCESS) << xk_last_error();
    // rms_norm through C against the C++ CPU op
    const int64_t rows = 3, n = 19;
    std::mt19937 rng(9);
    const auto x = randv(rows * n, rng), w = randv(n, rng);
    xk_gpu_buffer bx = nullptr, bw = nullptr, by = nullptr;
    ASSERT_EQ(xk_gpu_buffer_create(c, rows * n * 4, &bx), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_buffer_create(c, n * 4, &bw), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_buffer_create(c, rows * n * 4, &by), XK_SUCCESS);
    int64_t bytes = 0;
    ASSERT_EQ(xk_gpu_buffer_bytes(by, &bytes), XK_SUCCESS);
    EXPECT_EQ(bytes, rows * n * 4);
    ASSERT_EQ(xk_gpu_buffer_write(bx, 0, x.data(), rows * n * 4), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_buffer_write(bw, 0, w.data(), n * 4), XK_SUCCESS);
    const xk_gpu_tensor none{nullptr, 0};
    ASSERT_EQ(xk_gpu_rms_norm(c, XK_DTYPE_F32, rows, n, {bx, 0}, 0, none, 0, {bw, 0}, 1e-5f, {by, 0}, 0), XK_SUCCESS)
        << xk_last_error();
    ASSERT_EQ(xk_gpu_finish(c), XK_SUCCESS);
    std::vector<float> y(rows * n), ref(rows * n);
    ASSERT_EQ(xk_gpu_buffer_read(by, 0, y.data(), rows * n * 4), XK_SUCCESS);
    xk::rms_norm(rows, n, x.data(), w.data(), 1e-5f, ref.data());
    expect_close(y, ref, rows, n, n, DType::f32, "C rms_norm");
    // softmax, glu, rope, layer_norm: run and succeed (the C++ tests check the numbers)
    EXPECT_EQ(xk_gpu_softmax(c, XK_DTYPE_F32, rows, n, {bx, 0}, 0, {by, 0}, 0, 1.0f, 1, 0), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(xk_gpu_layer_norm(c, XK_DTYPE_F32, rows, n, {bx, 0}, 0, none, 0, {bw, 0}, {bw, 0}, 1e-5f, {by, 0}, 0), XK_SUCCESS);
    EXPECT_EQ(xk_gpu_glu(c, XK_ACT_SILU, XK_DTYPE_BF16, rows, 9, {bx, 0}, 0, {by, 0}, 0), XK_SUCCESS) << xk_last_error();
    std::vector<int64_t> pos = {0, 1, 2};
    xk_gpu_buffer bp = nullptr, bc = nullptr;
    ASSERT_EQ(xk_gpu_buffer_create(c, 3 * 8, &bp), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_buffer_write(bp, 0, pos.data(), 24), XK_SUCCESS);
    ASSERT_EQ(xk_gpu_buffer_create(c, 3 * 4 * 4, &bc), XK_SUCCESS);
    EXPECT_EQ(xk_gpu_rope(c, XK_DTYPE_F32, 1, 3, 1, 0, 4, 0, {bx, 0}, none, {bp, 0}, {bc, 0}, 3), XK_SUCCESS) << xk_last_error();
    ASSERT_EQ(xk_gpu_finish(c), XK_SUCCESS);
    // hostile
    EXPECT_EQ(xk_gpu_rms_norm(c, static_cast<xk_dtype>(77), rows, n, {bx, 0}, 0, none, 0, {bw, 0}, 1e-5f, {by, 0}, 0),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("dtype=77"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_gpu_rms_norm(c, XK_DTYPE_F32, rows, n, {bx, 1}, 0, none, 0, {bw, 0}, 1e-5f, {by, 0}, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("x=(buffer of 228 bytes, offset 1) is too small"), std::string::npos);
    EXPECT_EQ(xk_gpu_glu(c, static_cast<xk_activation>(9), XK_DTYPE_F32, rows, 9, {bx, 0}, 0, {by, 0}, 0), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_gpu_softmax(nullptr, XK_DTYPE_F32, rows, n, {bx, 0}, 0, {by, 0}, 0, 1.0f, 0, 0), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_gpu_buffer_read(by, 8, y.data(), rows * n * 4), XK_INVALID_ARGUMENT);
    xk_gpu_buffer huge = nullptr;
    EXPECT_EQ(xk_gpu_buffer_create(c, int64_t(1) << 60, &huge), XK_INVALID_ARGUMENT);
    EXPECT_EQ(huge, nullptr);
    xk_gpu_memory_stats st;
    ASSERT_EQ(xk_gpu_memory_stats_get(c, &st), XK_SUCCESS);
    EXPECT_GT(st.allocated_bytes, 0);
    EXPECT_EQ(xk_gpu_set_memory_limit(c, -1), XK_INVALID_ARGUMENT);
    for (xk_gpu_buffer b : {bx, bw, by, bp, bc}) xk_gpu_buffer_destroy(b);
    ASSERT_EQ(xk_gpu_memory_stats_get(c, &st), XK_SUCCESS);
    EXPECT_EQ(st.allocated_bytes, 0);
    EXPECT_EQ(xk_gpu_empty_cache(c), XK_SUCCESS);
    xk_gpu_context_destroy(c);
}

// Several threads on one context: each allocates, runs ops and frees (per-thread kernels, the
// allocator's lock, the shared in-order queue); results bit for bit equal to one thread's.
TEST(GpuOps, ConcurrentThreads) {
    XK_NEED_GPU();
    std::mt19937 rng(7);
    const int64_t rows = 5, n = 300;
    const auto x = randv(rows * n, rng), w = randv(n, rng);
    xk::NormDesc d;
    d.rows = rows;
    d.hidden = n;
    xk::SoftmaxDesc sd;
    sd.rows = rows;
    sd.cols = n;
    auto run = [&](std::vector<float>& ny, std::vector<float>& sy) {
        gpu::Buffer bx = gpu::Buffer::from_host(ctx, x), bw = gpu::Buffer::from_host(ctx, w);
        gpu::Buffer by(ctx, rows * n * 4), bs(ctx, rows * n * 4);
        gpu::norm(ctx, d, {bx, by, bw, {}, {}, {}});
        gpu::softmax(ctx, sd, {bx, bs});
        ny = by.to_host<float>();
        sy = bs.to_host<float>();
    };
    std::vector<float> ny0, sy0;
    run(ny0, sy0);
    const int T = 4;
    std::vector<int> ok(T, 0);
    std::vector<std::thread> th;
    for (int t = 0; t < T; ++t)
        th.emplace_back([&, t] {
            int good = 0;
            for (int it = 0; it < 3; ++it) {
                std::vector<float> ny, sy;
                run(ny, sy);
                good += ny == ny0 && sy == sy0;
            }
            ok[static_cast<size_t>(t)] = good;
        });
    for (auto& t : th) t.join();
    for (int t = 0; t < T; ++t) EXPECT_EQ(ok[static_cast<size_t>(t)], 3) << "thread " << t;
}
