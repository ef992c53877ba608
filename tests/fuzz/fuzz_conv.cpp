// libFuzzer target: the conv family of the C API (include/xk/c/conv.h, semantics of xk/conv.hpp).
// See fuzz_common.hpp for the scheme. Calls:
//   xk_conv2d_f32 / xk_conv2d_bf16 / xk_conv2d_bf16_f32 over both activation layouts x both weight
//     layouts, groups (1, grouped, depthwise with a channel multiplier), strides, paddings and
//     dilations (small ones, and huge ones whose output stays small: a dilation of up to 2^58 with
//     the padding to match, a stride of up to 2^63-1), with and without bias, the residual before
//     or after the activation (in its own buffer or in place: residual == dst), every activation;
//     valid ones are checked against a double-precision loop of conv.hpp's math with an error
//     bound from sum |src w|, hostile ones (one argument wrong) must leave dst as it was;
//   xk_conv2d_desc_init (any sizes: it only fills the struct; null desc: rejected);
//   xk_conv_output_size over small and extreme arguments, against the formula in 128-bit integers;
//   descriptors of huge but representable sizes with a needed pointer null (rejected at once,
//     never out of memory);
//   ISA cap and thread count changes.
#include <algorithm>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

// src and weights stay below 1e15 in magnitude, bias and residual below 1e30: a sum of at most
// 17*3*3 products of 1e30 plus the epilogue's terms stays far inside the fp32 range, so fp32 and
// the double oracle agree on what is finite.
constexpr float kBigProduct = 1e15f;
constexpr float kBigAdd = 1e30f;
// Multiply-adds per call at most (about 50 us unsanitized); bigger draws fall back to a 1x1 kernel.
constexpr int64_t kMaxWork = 50000;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

enum Kind { kF32, kBf16, kBf16F32 };
const char* const kFn[] = {"xk_conv2d_f32", "xk_conv2d_bf16", "xk_conv2d_bf16_f32"};

// A tensor of f32 or bf16 elements in a guarded buffer.
struct Ten {
    bool bf = false;
    int64_t n = 0;
    Buf<unsigned char> buf;
    Ten() = default;
    Ten(bool bf_, int64_t n_, size_t mis) : bf(bf_), n(n_), buf(static_cast<size_t>(n_) * (bf_ ? 2 : 4), mis * (bf_ ? 2 : 4)) {}
    int esize() const { return bf ? 2 : 4; }
    void* data() { return buf.data(); }
    double get(int64_t i) const {
        const unsigned char* q = buf.data() + i * esize();
        if (bf) { uint16_t b; std::memcpy(&b, q, 2); return fz::from_bf16(b); }
        float f;
        std::memcpy(&f, q, 4);
        return f;
    }
    void set(int64_t i, float v) {
        unsigned char* q = buf.data() + i * esize();
        if (bf) { const uint16_t b = fz::to_bf16(v); std::memcpy(q, &b, 2); }
        else std::memcpy(q, &v, 4);
    }
};

using fz::act_exact;

// One spatial axis: input extent, kernel, stride, paddings, dilation (always valid).
struct Axis {
    int64_t in = 1, k = 1, stride = 1, pb = 0, pe = 0, dil = 1;
    int64_t out() const { return (in + pb + pe - dil * (k - 1) - 1) / stride + 1; }
};

Axis make_axis(In& in) {
    Axis a;
    a.in = in.dim(1, 7);
    a.k = in.dim(1, 3);
    switch (in.pick(8)) {
        case 6: {
            // A huge dilation, padded to match: the two taps lie 2^e apart and only the one on
            // the input side reads data (the far one reads the implicit zeros).
            static const int64_t far[] = {int64_t(1) << 20, int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 58};
            a.dil = far[in.pick(4)];
            a.k = 2;
            a.stride = in.dim(1, 3);
            if (in.coin()) a.pb = a.dil, a.pe = in.dim(0, 2);
            else a.pb = in.dim(0, 2), a.pe = a.dil;
            return a;
        }
        case 7: {  // a huge stride: one output row
            static const int64_t big[] = {int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 62, kMax};
            a.stride = big[in.pick(4)];
            break;
        }
        default: a.stride = in.dim(1, 3); break;
    }
    a.dil = in.dim(1, 3);
    a.pb = in.dim(0, 3), a.pe = in.dim(0, 3);
    if (a.dil * (a.k - 1) + 1 > a.in + a.pb + a.pe) a.dil = 1, a.k = std::min(a.k, a.in + a.pb + a.pe);
    return a;
}

int64_t act_off(const xk_conv2d_desc& d, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t y, int64_t x) {
    return d.layout == XK_CONV_NCHW ? ((n * C + c) * H + y) * W + x : ((n * H + y) * W + x) * C + c;
}
int64_t wei_off(const xk_conv2d_desc& d, int64_t icg, int64_t o, int64_t i, int64_t ky, int64_t kx) {
    return d.weight_layout == XK_CONV_OIHW ? ((o * icg + i) * d.kh + ky) * d.kw + kx : ((o * d.kh + ky) * d.kw + kx) * icg + i;
}

// xk_conv2d_desc_init on a garbage-filled struct: every field must be the given size or the
// documented default.
xk_conv2d_desc init_desc(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw) {
    xk_conv2d_desc d;
    std::memset(&d, 0xA5, sizeof d);
    const xk_status s = fz::timed("xk_conv2d_desc_init", [&] { return xk_conv2d_desc_init(&d, n, c, h, w, oc, kh, kw); });
    fz::expect_ok(s, "xk_conv2d_desc_init");
    if (d.n != n || d.c != c || d.h != h || d.w != w || d.oc != oc || d.kh != kh || d.kw != kw || d.stride_h != 1 ||
        d.stride_w != 1 || d.pad_top != 0 || d.pad_bottom != 0 || d.pad_left != 0 || d.pad_right != 0 ||
        d.dilation_h != 1 || d.dilation_w != 1 || d.groups != 1 || d.layout != XK_CONV_NCHW ||
        d.weight_layout != XK_CONV_OIHW || d.residual != XK_CONV_RESIDUAL_NONE || d.activation != XK_ACT_NONE)
        fz::finding("xk_conv2d_desc_init(%lld, %lld, %lld, %lld, %lld, %lld, %lld) left a field other than the given "
                    "size or its documented default", static_cast<long long>(n), static_cast<long long>(c),
                    static_cast<long long>(h), static_cast<long long>(w), static_cast<long long>(oc),
                    static_cast<long long>(kh), static_cast<long long>(kw));
    return d;
}

// One valid problem: descriptor, operands, expected dst.
struct Problem {
    Kind kind = kF32;
    xk_conv2d_desc d{};
    int64_t icg = 1, oh = 1, ow = 1;
    Ten src, wei, dst, res;  // res stays empty without a residual or when it is dst (in place)
    Buf<float> bias;
    bool has_bias = false, in_place = false;
    bool finite = true;  // every input finite (else only status and guards are checked)
    std::vector<double> want, tol;
    std::vector<unsigned char> dst_before, src_before, wei_before, bias_before, res_before;
};

Problem make_problem(In& in) {
    Problem p;
    p.kind = static_cast<Kind>(in.pick(3));
    const bool bf_in = p.kind != kF32, bf_out = p.kind == kBf16;
    int64_t g, icg, ocg;
    switch (in.pick(3)) {
        case 0: g = 1, icg = in.dim(1, 17), ocg = in.dim(1, 17); break;
        case 1: g = in.dim(1, 9), icg = 1, ocg = in.dim(1, 2); break;  // depthwise, channel multiplier 1 or 2
        default: g = in.dim(2, 4), icg = in.dim(1, 3), ocg = in.dim(1, 3); break;
    }
    Axis ah = make_axis(in), aw = make_axis(in);
    int64_t n = in.dim(1, 2);
    if (n * g * ocg * ah.out() * aw.out() * icg * ah.k * aw.k > kMaxWork) {
        n = 1;
        for (Axis* a : {&ah, &aw}) *a = Axis{std::min<int64_t>(a->in, 3), 1, 1, 0, 0, 1};
    }
    p.d = init_desc(n, g * icg, ah.in, aw.in, g * ocg, ah.k, aw.k);
    xk_conv2d_desc& d = p.d;
    d.stride_h = ah.stride, d.stride_w = aw.stride;
    d.pad_top = ah.pb, d.pad_bottom = ah.pe, d.pad_left = aw.pb, d.pad_right = aw.pe;
    d.dilation_h = ah.dil, d.dilation_w = aw.dil;
    d.groups = g;
    d.layout = in.coin() ? XK_CONV_NHWC : XK_CONV_NCHW;
    d.weight_layout = in.coin() ? XK_CONV_OHWI : XK_CONV_OIHW;
    d.residual = static_cast<xk_conv_residual>(in.pick(3));
    d.activation = static_cast<xk_activation>(in.pick(5));
    p.icg = icg, p.oh = ah.out(), p.ow = aw.out();
    p.has_bias = in.coin();
    p.in_place = d.residual != XK_CONV_RESIDUAL_NONE && in.coin();

    const bool nonfinite = in.pick(8) == 7;  // (an exhausted input reads 0s: finite values)
    auto value = [&](float big) {
        const float v = nonfinite ? in.any_value(big) : in.value(big);
        if (!std::isfinite(v)) p.finite = false;
        return v;
    };
    const size_t mis = in.pick(3);
    const int64_t dst_n = d.n * d.oc * p.oh * p.ow;
    p.src = Ten(bf_in, d.n * d.c * d.h * d.w, mis);
    p.wei = Ten(bf_in, d.oc * icg * d.kh * d.kw, mis);
    p.dst = Ten(bf_out, dst_n, mis);
    for (int64_t i = 0; i < p.src.n; ++i) p.src.set(i, value(kBigProduct));
    for (int64_t i = 0; i < p.wei.n; ++i) p.wei.set(i, value(kBigProduct));
    if (p.has_bias) {
        p.bias = Buf<float>(d.oc, mis);
        for (int64_t i = 0; i < d.oc; ++i) p.bias[i] = value(kBigAdd);
    }
    if (d.residual != XK_CONV_RESIDUAL_NONE && !p.in_place) p.res = Ten(bf_out, dst_n, mis);
    // In place dst holds the residual on entry; otherwise dst's old contents (NaN or values)
    // must not be read.
    Ten& r = p.in_place ? p.dst : p.res;
    const bool dst_nan = in.coin();
    for (int64_t i = 0; i < r.n; ++i) r.set(i, value(kBigAdd));
    if (!p.in_place)
        for (int64_t i = 0; i < dst_n; ++i) p.dst.set(i, dst_nan ? std::numeric_limits<float>::quiet_NaN() : in.value());

    // Expected dst (double) and its bound. The header: fp32 accumulation (order unspecified) and
    // fp32 epilogue. Accumulating taps products, each rounded, in any order errs by at most
    // gamma_taps * sum |s w| <= (taps + 2) * 2u * sum |s w|; each later fp32 add (bias, residual)
    // adds 2u |its result|; the activation: Lipschitz <= 1.13 (gelu) plus its own few ulps
    // (relative to x: a tiny result of a large negative x carries the absolute error of the
    // argument), as for gemm's epilogue; 1e-37 for denormal results; a bf16 dst rounds once
    // more (2^-8 relative).
    constexpr double u = 0x1p-24;
    const int64_t taps = icg * d.kh * d.kw;
    p.want.assign(dst_n, 0.0);
    p.tol.assign(dst_n, 0.0);
    for (int64_t nn = 0; nn < d.n; ++nn)
        for (int64_t o = 0; o < d.oc; ++o)
            for (int64_t oy = 0; oy < p.oh; ++oy)
                for (int64_t ox = 0; ox < p.ow; ++ox) {
                    double acc = 0, sabs = 0;
                    const int64_t grp = o / ocg;
                    for (int64_t i = 0; i < icg; ++i)
                        for (int64_t ky = 0; ky < d.kh; ++ky) {
                            // oy > 0 only when the stride is small: no overflow.
                            const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                            if (y < 0 || y >= d.h) continue;
                            for (int64_t kx = 0; kx < d.kw; ++kx) {
                                const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                                if (x < 0 || x >= d.w) continue;
                                const double sw = p.src.get(act_off(d, d.c, d.h, d.w, nn, grp * icg + i, y, x)) *
                                                  p.wei.get(wei_off(d, icg, o, i, ky, kx));
                                acc += sw, sabs += std::fabs(sw);
                            }
                        }
                    const int64_t di = act_off(d, d.oc, p.oh, p.ow, nn, o, oy, ox);
                    const double rv = d.residual != XK_CONV_RESIDUAL_NONE ? r.get(di) : 0.0;
                    double x = acc, e = (taps + 2) * 2 * u * sabs;
                    if (p.has_bias) x += p.bias[o], e += 2 * u * std::fabs(x);
                    if (d.residual == XK_CONV_RESIDUAL_BEFORE_ACTIVATION) x += rv, e += 2 * u * std::fabs(x);
                    if (d.activation != XK_ACT_NONE) {
                        const double y = act_exact(d.activation, x);
                        e = 1.2 * e + 64 * u * (std::fabs(y) + (d.activation == XK_ACT_RELU ? 0.0 : std::fabs(x) * 0.25));
                        x = y;
                    }
                    if (d.residual == XK_CONV_RESIDUAL_AFTER_ACTIVATION) x += rv, e += 2 * u * std::fabs(x);
                    e += 1e-37;
                    if (bf_out) e += 0x1p-8 * std::fabs(x) + e * 0x1p-8;
                    p.want[di] = x;
                    p.tol[di] = e;
                }
    p.dst_before = p.dst.buf.snapshot();
    p.src_before = p.src.buf.snapshot();
    p.wei_before = p.wei.buf.snapshot();
    p.bias_before = p.bias.snapshot();
    p.res_before = p.res.buf.snapshot();
    return p;
}

// The pointer arguments of one call.
struct Args {
    const xk_conv2d_desc* desc;
    const void* src;
    const void* wei;
    const float* bias;
    void* dst;
    const void* res;
};

Args args_of(Problem& p) {
    return Args{&p.d, p.src.data(), p.wei.data(), p.has_bias ? p.bias.data() : nullptr, p.dst.data(),
                p.in_place ? p.dst.data() : p.res.n ? p.res.data() : nullptr};
}

xk_status call(Kind k, const Args& a) {
    using bf = const uint16_t*;
    switch (k) {
        case kF32:
            return xk_conv2d_f32(a.desc, static_cast<const float*>(a.src), static_cast<const float*>(a.wei), a.bias,
                                 static_cast<float*>(a.dst), static_cast<const float*>(a.res));
        case kBf16:
            return xk_conv2d_bf16(a.desc, static_cast<bf>(a.src), static_cast<bf>(a.wei), a.bias,
                                  static_cast<uint16_t*>(a.dst), static_cast<bf>(a.res));
        default:
            return xk_conv2d_bf16_f32(a.desc, static_cast<bf>(a.src), static_cast<bf>(a.wei), a.bias,
                                      static_cast<float*>(a.dst), static_cast<const float*>(a.res));
    }
}

// A value <= lo: lo, lo - 1 .. lo - 5 or INT64_MIN (lo = 0 for a field that must be >= 1, -1 for
// one that must be >= 0).
int64_t below(In& in, int64_t lo) {
    switch (in.pick(3)) {
        case 0: return lo;
        case 1: return lo - 1 - in.pick(5);
        default: return std::numeric_limits<int64_t>::min();
    }
}

// Makes exactly one argument of a valid call wrong, in a way conv.hpp / conv.h call an error.
const char* spoil(In& in, Problem& p, xk_conv2d_desc& d, Args& a) {
    switch (in.pick(11)) {
        case 0: {
            int64_t* f[] = {&d.n, &d.c, &d.h, &d.w, &d.oc, &d.kh, &d.kw, &d.groups};
            *f[in.pick(8)] = below(in, 0);
            return "a size < 1";
        }
        case 1: {
            int64_t* f[] = {&d.stride_h, &d.stride_w, &d.dilation_h, &d.dilation_w};
            *f[in.pick(4)] = below(in, 0);
            return "a stride or dilation < 1";
        }
        case 2: {
            int64_t* f[] = {&d.pad_top, &d.pad_bottom, &d.pad_left, &d.pad_right};
            *f[in.pick(4)] = below(in, -1);
            return "a padding < 0";
        }
        case 3:
            // dilation*(k-1)+1 > the padded input: the output would be < 1.
            if (in.coin()) d.kh = (d.h + d.pad_top + d.pad_bottom - 1) / d.dilation_h + 2;
            else d.kw = (d.w + d.pad_left + d.pad_right - 1) / d.dilation_w + 2;
            return "kernel larger than the padded input";
        case 4:
            d.groups = in.coin() ? d.c + 1 : d.oc + 1;
            return "groups does not divide C or OC";
        case 5: {
            const int k = in.pick(4);
            const int v = in.bad_enum(k == 2 ? 3 : k == 3 ? 5 : 2);
            std::memcpy(k == 0 ? static_cast<void*>(&d.layout) : k == 1 ? static_cast<void*>(&d.weight_layout)
                        : k == 2 ? static_cast<void*>(&d.residual) : static_cast<void*>(&d.activation), &v, 4);
            return "an enum value the API does not define";
        }
        case 6: {
            constexpr int64_t k32 = int64_t(1) << 32;
            switch (in.pick(4)) {
                case 0: d.n = d.h = k32; break;
                case 1: d.n = d.w = k32; break;
                case 2: d.h = d.w = k32; break;
                default:  // a 2^32 x 2^32 kernel, padded to fit: the weights' count overflows
                    d.kh = d.kw = k32, d.dilation_h = d.dilation_w = 1;
                    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = k32;
                    break;
            }
            return "an element count overflows int64";
        }
        case 7:
            switch (in.pick(5)) {
                case 0: a.src = nullptr; return "src null";
                case 1: a.wei = nullptr; return "weights null";
                case 2: a.dst = nullptr; return "dst null";
                case 3: if (d.residual != XK_CONV_RESIDUAL_NONE) { a.res = nullptr; return "residual null with a residual mode"; } [[fallthrough]];
                default: a.desc = nullptr; return "desc null";
            }
        case 8:
            if (d.residual == XK_CONV_RESIDUAL_NONE) {
                // conv.h: residual is required *iff* a residual mode is set (the library rejects
                // one given without).
                a.res = a.dst;
                return "residual given with residual NONE";
            }
            if (p.dst.n >= 2) {
                a.res = p.dst.buf.bytes() + p.dst.esize();
                return "residual overlapping dst partially";
            }
            [[fallthrough]];
        case 9:
            switch (in.pick(3)) {
                case 0: a.dst = p.src.data(); return "dst == src";
                case 1: a.dst = p.wei.data(); return "dst == weights";
                default:
                    if (p.has_bias) { a.dst = p.bias.data(); return "dst == bias"; }
                    a.dst = p.src.buf.bytes() + p.src.n / 2 * p.src.esize();
                    return "dst inside src";
            }
        default: {
            // One pointer not aligned to its element size (conv.hpp: an error).
            switch (in.pick(5)) {
                case 0: a.src = p.src.buf.bytes() + 1; return "src misaligned";
                case 1: a.wei = p.wei.buf.bytes() + 1; return "weights misaligned";
                case 2: a.dst = p.dst.buf.bytes() + 1; return "dst misaligned";
                case 3: if (p.has_bias) { a.bias = reinterpret_cast<const float*>(p.bias.bytes() + 2); return "bias misaligned"; } [[fallthrough]];
                default:
                    if (p.res.n) { a.res = p.res.buf.bytes() + 1; return "residual misaligned"; }
                    a.dst = p.dst.buf.bytes() + 1;
                    return "dst misaligned";
            }
        }
    }
}

void describe(const Problem& p, char* s, size_t n) {
    const xk_conv2d_desc& d = p.d;
    std::snprintf(s, n, "N=%lld C=%lld H=%lld W=%lld OC=%lld K=%lldx%lld stride=%lld,%lld pad=%lld,%lld,%lld,%lld "
                  "dil=%lld,%lld groups=%lld layout=%d wlayout=%d residual=%d (in place %d) act=%d bias=%d",
                  (long long)d.n, (long long)d.c, (long long)d.h, (long long)d.w, (long long)d.oc, (long long)d.kh,
                  (long long)d.kw, (long long)d.stride_h, (long long)d.stride_w, (long long)d.pad_top,
                  (long long)d.pad_bottom, (long long)d.pad_left, (long long)d.pad_right, (long long)d.dilation_h,
                  (long long)d.dilation_w, (long long)d.groups, d.layout, d.weight_layout, d.residual, p.in_place,
                  d.activation, p.has_bias);
}

// The inputs are const: whatever the outcome, they keep every byte (and the guards).
template <class T>
void expect_kept(const Buf<T>& b, const std::vector<unsigned char>& before, const char* what, const char* name) {
    if (!b.same_as(before)) fz::finding("%s: changed its input %s", what, name);
    fz::expect_guards(b, what, name);
}
void expect_inputs_kept(const Problem& p, const char* what) {
    expect_kept(p.src.buf, p.src_before, what, "src");
    expect_kept(p.wei.buf, p.wei_before, what, "weights");
    expect_kept(p.bias, p.bias_before, what, "bias");
    expect_kept(p.res.buf, p.res_before, what, "residual");
}

void op_conv(In& in) {
    Problem p = make_problem(in);
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    xk_conv2d_desc d = p.d;
    Args a = args_of(p);
    a.desc = &d;
    const char* wrong = hostile ? spoil(in, p, d, a) : "";
    const char* what = kFn[p.kind];
    const xk_status s = fz::timed(what, [&] { return call(p.kind, a); });
    expect_inputs_kept(p, what);
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(p.dst.buf, p.dst_before, what, "dst");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(p.dst.buf, what, "dst");
    if (!p.finite) return;
    for (int64_t i = 0; i < p.dst.n; ++i) {
        const double got = p.dst.get(i), want = p.want[i];
        if (!fz::close(got, want, 0, p.tol[i])) {
            char s2[512];
            describe(p, s2, sizeof s2);
            fz::finding("%s: dst[%lld] = %.9g, want %.9g (+- %.3g); %s", what, static_cast<long long>(i), got, want,
                        p.tol[i], s2);
        }
    }
}

// xk_conv_output_size over small, negative and huge arguments, against the header's formula
// evaluated in 128-bit integers.
void op_output_size(In& in) {
    auto arg = [&]() -> int64_t {
        static const int64_t huge[] = {int64_t(1) << 31, int64_t(1) << 40, (int64_t(1) << 59) - 1, int64_t(1) << 59,
                                       int64_t(1) << 62, kMax, kMax - 1, std::numeric_limits<int64_t>::min()};
        switch (in.pick(6)) {
            case 0: case 1: return in.dim(1, 5);
            case 2: return in.dim(0, 40);
            case 3: return huge[in.pick(8)];
            default: return -1 - in.pick(3);
        }
    };
    const int64_t input = arg(), kernel = arg(), stride = arg(), pb = in.pick(3) == 2 ? arg() : in.dim(0, 3),
                  pe = in.pick(3) == 2 ? arg() : in.dim(0, 3), dil = in.pick(3) == 2 ? arg() : in.dim(1, 3);
    const bool null_out = in.pick(8) == 7;
    using i128 = __int128;
    const i128 padded = i128(input) + pb + pe, span = i128(dil) * (i128(kernel) - 1) + 1;
    // conv.hpp: an error when input, kernel, stride or dilation < 1, a padding < 0, the sum
    // overflows, or the output would be < 1.
    const bool valid = input >= 1 && kernel >= 1 && stride >= 1 && pb >= 0 && pe >= 0 && dil >= 1 && padded <= kMax &&
                       span <= padded;
    const int64_t want = valid ? static_cast<int64_t>((padded - span) / stride + 1) : 0;
    // The library bounds every intermediate size at INT64_MAX / 16 (checked_add / checked_mul),
    // stricter than the header's "overflows": a valid call past that bound may be rejected.
    const bool gray = padded > kMax / 16 || span > kMax / 16;
    int64_t out = 0x5A5A5A5A5A5A5A5A;
    const xk_status s = fz::timed("xk_conv_output_size",
                                  [&] { return xk_conv_output_size(input, kernel, stride, pb, pe, dil, null_out ? nullptr : &out); });
    char args[256];
    std::snprintf(args, sizeof args, "input=%lld kernel=%lld stride=%lld pad=%lld,%lld dilation=%lld", (long long)input,
                  (long long)kernel, (long long)stride, (long long)pb, (long long)pe, (long long)dil);
    if (!valid || null_out || (gray && s != XK_SUCCESS)) {
        fz::expect_rejected(s, "xk_conv_output_size", null_out ? "out null" : args);
        if (out != 0x5A5A5A5A5A5A5A5A) fz::finding("xk_conv_output_size (%s): rejected but wrote *out", args);
        return;
    }
    fz::expect_ok(s, "xk_conv_output_size");
    if (out != want) fz::finding("xk_conv_output_size(%s) = %lld, want %lld", args, (long long)out, (long long)want);
}

// xk_conv2d_desc_init with any sizes (it only fills the struct), or a null desc.
void op_desc_init(In& in) {
    if (in.pick(4) == 3) {
        const xk_status s = fz::timed("xk_conv2d_desc_init", [&] { return xk_conv2d_desc_init(nullptr, 1, 1, 1, 1, 1, 1, 1); });
        fz::expect_rejected(s, "xk_conv2d_desc_init", "desc null");
        return;
    }
    int64_t v[7];
    for (int64_t& x : v) x = in.coin() ? in.dim(0, 9) : in.bad_size();
    init_desc(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
}

// Descriptors of huge but representable sizes (the rest small) with a needed pointer null:
// rejected at once (nothing may be allocated or looped over in proportion to a size).
void op_huge(In& in) {
    static const int64_t huge[] = {int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 44};
    const int64_t H = huge[in.pick(3)];
    xk_conv2d_desc d = init_desc(1, 1, 3, 3, 1, 1, 1);
    switch (in.pick(5)) {
        case 0: d.n = H; break;
        case 1: d.h = H; break;
        case 2: d.w = H; break;
        case 3: d.c = d.oc = d.groups = H; break;  // depthwise
        default: d.kh = H, d.pad_top = H; break;
    }
    d.layout = in.coin() ? XK_CONV_NHWC : XK_CONV_NCHW;
    d.weight_layout = in.coin() ? XK_CONV_OHWI : XK_CONV_OIHW;
    Buf<float> one(4), out(4);
    one.fill(1.0f);
    const std::vector<unsigned char> out_before = out.snapshot();
    const int k = in.pick(3);
    const Args a{&d, k == 0 ? nullptr : one.data(), k == 1 ? nullptr : one.data(), nullptr, k == 2 ? nullptr : out.data(),
                 nullptr};
    const Kind kind = static_cast<Kind>(in.pick(3));
    const xk_status s = fz::timed(kFn[kind], [&] { return call(kind, a); });
    fz::expect_rejected(s, kFn[kind], "huge sizes, a needed pointer null");
    fz::expect_unchanged(out, out_before, kFn[kind], "dst");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        switch (in.pick(10)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: {
                const int t = 1 + in.pick(2);
                fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(t); }), "xk_set_num_threads");
                break;
            }
            case 2: op_output_size(in); break;
            case 3: op_huge(in); break;
            case 4: op_desc_init(in); break;
            default: op_conv(in); break;
        }
    }
    return 0;
}
