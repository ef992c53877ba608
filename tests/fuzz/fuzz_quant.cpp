// libFuzzer target: the quant family of the C API (include/xk/c/quant.h). See fuzz_common.hpp for
// the scheme. Calls: all 14 functions — xk_compute_quant_params u8 / s8, per tensor quantize /
// dequantize, per channel (axis 0 / 1, with zero points or symmetric) quantize / dequantize,
// dynamic per token f32 / bf16 -> u8 / s8 (with or without smooth, symmetric or not, zero points
// given or not) — and the conversions xk_convert / xk_convert_2d (include/xk/c/convert.h: f32, bf16,
// f16 each way, checked bit for bit (NaN payloads aside) against the half conversion written here and
// the bf16 rounding of fuzz_common.hpp), ISA cap and thread count changes. Every valid output is an integer, a float made
// by one fp32 multiply, or a scale computed in double and rounded once, so the oracle (the formula
// of include/xk/quant.hpp in the fp32 steps it states; src/kernels/quant/reference.cpp, the
// specification, where the header leaves a step open) must match exactly, bit for bit.
#include <algorithm>
#include <optional>
#include <type_traits>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

constexpr int64_t kMaxRows = 8, kMaxCols = 300;
constexpr int64_t kHuge = int64_t(1) << 40;  // representable, far larger than any buffer here
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kFltMax = std::numeric_limits<float>::max();

using fz::Values;

template <class Q>
constexpr bool kU8 = std::is_same_v<Q, uint8_t>;
template <class Q>
constexpr int32_t kQmin = kU8<Q> ? 0 : -128;
template <class Q>
constexpr int32_t kQmax = kU8<Q> ? 255 : 127;
template <class Q>
constexpr int32_t kSymZp = kU8<Q> ? 128 : 0;  // the implied zero point of symmetric

// The header's formula: q = saturate(zp + round_half_even(v * (1.0f / scale))), the reciprocal an
// fp32 division and the product an fp32 multiply; ties to even (std::nearbyint in the default
// rounding mode); +-inf saturate, NaN gives the zero point.
template <class Q>
int32_t quantize_one(float v, float scale, int32_t zp) {
    const float inv = 1.0f / scale;
    const float t = v * inv;
    if (std::isnan(t)) return zp;
    const double q = static_cast<double>(std::nearbyint(t)) + zp;
    return static_cast<int32_t>(std::clamp<double>(q, kQmin<Q>, kQmax<Q>));
}
// x = float(q - zp) * scale, one fp32 multiply.
float dequantize_one(int32_t q, float scale, int32_t zp) { return static_cast<float>(q - zp) * scale; }

struct Params {
    float scale;
    int32_t zp;
};
// compute_quant_params (quant.hpp): symmetric scale = max(|min|, |max|) / 127, zero point 0 / 128;
// asymmetric lo = min(min, 0), hi = max(max, 0), scale = (hi - lo) / (qmax - qmin), zero point =
// clamp(round_half_even(qmin - lo / scale)) — the scale there being the fp32 one, in double (the
// reference); scale computed in double, rounded to fp32, 1.0 where that is 0 or its reciprocal
// overflows.
template <class Q>
Params params_of(float mn, float mx, bool symmetric) {
    double scale;
    const double lo = std::min(static_cast<double>(mn), 0.0), hi = std::max(static_cast<double>(mx), 0.0);
    if (symmetric) scale = std::max(std::fabs(static_cast<double>(mn)), std::fabs(static_cast<double>(mx))) / 127.0;
    else scale = (hi - lo) / static_cast<double>(kQmax<Q> - kQmin<Q>);
    Params p{static_cast<float>(scale), kSymZp<Q>};
    if (p.scale == 0.0f || !std::isfinite(1.0f / p.scale)) p.scale = 1.0f;
    if (!symmetric) {
        const double zp = std::nearbyint(static_cast<double>(kQmin<Q>) - lo / static_cast<double>(p.scale));
        p.zp = static_cast<int32_t>(std::clamp<double>(zp, kQmin<Q>, kQmax<Q>));
    }
    return p;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// A valid static scale: positive, finite, with a finite fp32 reciprocal — ordinary powers of two
// times 1 + k/256 (exact ties at powers of two), and the edges: FLT_MAX (reciprocal denormal),
// 3e-39 (denormal, reciprocal 3.3e38), FLT_MIN.
float scale_value(In& in) {
    switch (in.pick(10)) {
        case 1: return kFltMax;
        case 2: return 3.0e-39f;
        case 3: return std::numeric_limits<float>::min();
        case 4: return std::ldexp(1.0f, in.pick(61) - 30);
        default: return std::ldexp(1.0f + static_cast<float>(in.pick(256)) / 256.0f, in.pick(81) - 50);
    }
}
// A scale the header calls invalid: zero, negative, not finite, or with a reciprocal that overflows.
float bad_scale(In& in) {
    static const float v[] = {0.0f, -0.0f, -1.0f, -kFltMax, kNaN, kInf, -kInf, 1e-39f, 1e-45f};
    return v[in.pick(9)];
}
float nonfinite(In& in) { return in.pick(3) == 0 ? kNaN : in.coin() ? kInf : -kInf; }

// An input to quantize at `scale`: any value (NaN and +-inf included: they saturate or give the
// zero point), or a multiple of scale / 2 in the quantized range and a little beyond (every step
// and, at power-of-two scales, exact ties).
float qvalue(In& in, float scale) {
    if (in.coin()) return in.any_value(3e38f);
    return scale * (static_cast<float>(in.pick(701)) * 0.5f - 175.0f);
}
template <class Q>
int32_t zp_value(In& in) {
    return kQmin<Q> + in.pick(kQmax<Q> - kQmin<Q> + 1);
}
template <class Q>
int32_t bad_zp(In& in) {
    const int32_t v[] = {kQmin<Q> - 1, kQmax<Q> + 1, kQmin<Q> - 1000, std::numeric_limits<int32_t>::min(),
                         std::numeric_limits<int32_t>::max()};
    return v[in.pick(5)];
}

// A row stride: 0 (packed) or the minimum itself, or the minimum plus padding.
int64_t stride(In& in, int64_t min) {
    const int64_t pad = in.pad();
    return pad == 0 ? (in.coin() ? 0 : min) : min + pad;
}
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

// ---- compute_quant_params -------------------------------------------------------------------------
void op_params(In& in) {
    const bool u8 = in.coin();
    static const int kSym[] = {0, 1, 2, -1};  // any non-zero int means symmetric
    const int symmetric = kSym[in.pick(4)];
    const float a = in.value(3e38f), b = in.value(3e38f);
    float mn = std::min(a, b), mx = in.pick(4) == 0 ? mn : std::max(a, b);
    Buf<float> scale(1, 0);
    Buf<int32_t> zp(1, 0);
    float* sp = scale.data();
    int32_t* zpp = zp.data();
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    const char* wrong = "";
    if (hostile) {
        switch (in.pick(4)) {
            case 0: (in.coin() ? mn : mx) = nonfinite(in); wrong = "min or max not finite"; break;
            case 1:
                if (mn < mx) std::swap(mn, mx);
                else mx = std::nextafter(mn, -kInf);  // (equal, or -0 and +0)
                wrong = "min > max";
                break;
            case 2: sp = nullptr; wrong = "scale null"; break;
            default: zpp = nullptr; wrong = "zero_point null"; break;
        }
    }
    const auto s_before = scale.snapshot(), z_before = zp.snapshot();
    const char* what = u8 ? "xk_compute_quant_params_u8" : "xk_compute_quant_params_s8";
    const xk_status s = fz::timed(what, [&] {
        return u8 ? xk_compute_quant_params_u8(mn, mx, symmetric, sp, zpp) : xk_compute_quant_params_s8(mn, mx, symmetric, sp, zpp);
    });
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(scale, s_before, what, "scale");
        fz::expect_unchanged(zp, z_before, what, "zero_point");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(scale, what, "scale");
    fz::expect_guards(zp, what, "zero_point");
    const Params want = u8 ? params_of<uint8_t>(mn, mx, symmetric != 0) : params_of<int8_t>(mn, mx, symmetric != 0);
    if (!same_bits(scale[0], want.scale) || zp[0] != want.zp)
        fz::finding("%s(min=%.9g, max=%.9g, symmetric=%d) = scale %.9g zero_point %d, want %.9g %d", what, mn, mx, symmetric,
                    scale[0], zp[0], want.scale, want.zp);
    // The header's promise: |dequantize(quantize(x)) - x| <= scale/2 (up to fp32 rounding) on
    // [min, max] — at both ends and at 0 (exact when asymmetric: the zero point represents it).
    for (const float x : {mn, mx, 0.0f}) {
        const int32_t q = u8 ? quantize_one<uint8_t>(x, want.scale, want.zp) : quantize_one<int8_t>(x, want.scale, want.zp);
        const float back = dequantize_one(q, want.scale, want.zp);
        const double err = std::fabs(static_cast<double>(back) - x);
        const double tol = x == 0.0f && !symmetric ? 0.0 : want.scale * (0.5 + 0x1p-10) + 0x1p-22 * std::fabs(x);
        if (!(err <= tol))
            fz::finding("%s(min=%.9g, max=%.9g, symmetric=%d): scale %.9g zero_point %d represent %.9g as %.9g (error %.3g > %.3g)",
                        what, mn, mx, symmetric, want.scale, want.zp, x, back, err, tol);
    }
}

// ---- static: per tensor and per channel ---------------------------------------------------------
xk_status per_tensor(int64_t n, const float* x, float s, int32_t zp, uint8_t* q) { return xk_quantize_per_tensor_f32_u8(n, x, s, zp, q); }
xk_status per_tensor(int64_t n, const float* x, float s, int32_t zp, int8_t* q) { return xk_quantize_per_tensor_f32_s8(n, x, s, zp, q); }
xk_status per_tensor(int64_t n, const uint8_t* q, float s, int32_t zp, float* x) { return xk_dequantize_per_tensor_u8_f32(n, q, s, zp, x); }
xk_status per_tensor(int64_t n, const int8_t* q, float s, int32_t zp, float* x) { return xk_dequantize_per_tensor_s8_f32(n, q, s, zp, x); }
xk_status per_channel(int64_t r, int64_t c, const float* x, int64_t ldx, const float* s, const int32_t* zp, int axis, uint8_t* q, int64_t ldq) {
    return xk_quantize_per_channel_f32_u8(r, c, x, ldx, s, zp, axis, q, ldq);
}
xk_status per_channel(int64_t r, int64_t c, const float* x, int64_t ldx, const float* s, const int32_t* zp, int axis, int8_t* q, int64_t ldq) {
    return xk_quantize_per_channel_f32_s8(r, c, x, ldx, s, zp, axis, q, ldq);
}
xk_status per_channel(int64_t r, int64_t c, const uint8_t* q, int64_t ldq, const float* s, const int32_t* zp, int axis, float* x, int64_t ldx) {
    return xk_dequantize_per_channel_u8_f32(r, c, q, ldq, s, zp, axis, x, ldx);
}
xk_status per_channel(int64_t r, int64_t c, const int8_t* q, int64_t ldq, const float* s, const int32_t* zp, int axis, float* x, int64_t ldx) {
    return xk_dequantize_per_channel_s8_f32(r, c, q, ldq, s, zp, axis, x, ldx);
}

template <class S, class D>
const char* static_name(bool tensor) {
    constexpr bool quant = std::is_same_v<S, float>;
    constexpr bool u8 = kU8<S> || kU8<D>;
    if (tensor) {
        if (quant) return u8 ? "xk_quantize_per_tensor_f32_u8" : "xk_quantize_per_tensor_f32_s8";
        return u8 ? "xk_dequantize_per_tensor_u8_f32" : "xk_dequantize_per_tensor_s8_f32";
    }
    if (quant) return u8 ? "xk_quantize_per_channel_f32_u8" : "xk_quantize_per_channel_f32_s8";
    return u8 ? "xk_dequantize_per_channel_u8_f32" : "xk_dequantize_per_channel_s8_f32";
}

// A static quantize (S = float, D = u8 / s8) or dequantize (S = u8 / s8, D = float) of a
// [rows x cols] matrix: per tensor (rows = 1, one scale and zero point, passed by value) or per
// channel (axis 0: one per row, axis 1: one per column; zero_points null = symmetric).
// Expected: every element by the header's formula, exactly; the padding between rows of the
// output as it was.
template <class S, class D>
void op_static(In& in, bool tensor) {
    constexpr bool quant = std::is_same_v<S, float>;
    using Q = std::conditional_t<quant, D, S>;
    const char* what = static_name<S, D>(tensor);
    int64_t rows = tensor ? 1 : in.dim(0, kMaxRows), cols = in.dim(0, kMaxCols);
    int axis = tensor ? 1 : in.pick(2);
    const bool symmetric = !tensor && in.pick(3) == 0;
    int64_t ld_s = tensor ? 0 : stride(in, cols), ld_d = tensor ? 0 : stride(in, cols);
    const int64_t lds = ld_s ? ld_s : cols, ldd = ld_d ? ld_d : cols;
    const int64_t channels = tensor ? 1 : axis == 0 ? rows : cols;
    const size_t mis = in.pick(4);
    Values vals(in, rows * cols + channels * 2);
    Buf<float> scales(channels, mis);
    Buf<int32_t> zps(channels, mis);
    for (int64_t c = 0; c < channels; ++c) scales[c] = scale_value(vals()), zps[c] = symmetric ? kSymZp<Q> : zp_value<Q>(vals());
    Buf<S> src(span(rows, cols, lds), mis);
    for (int64_t i = 0; i < static_cast<int64_t>(src.size()); ++i) {
        const int64_t r = i / lds, c = i % lds, ch = tensor ? 0 : axis == 0 ? r : c;
        if constexpr (quant) src[i] = c >= cols ? kNaN : qvalue(vals(), scales[ch]);  // padding: never read (NaN would show)
        else src[i] = c >= cols ? S(0x5A) : static_cast<S>(vals().p.template ConsumeIntegral<S>());
    }
    Buf<D> dst(span(rows, cols, ldd), in.pick(4));

    // The expected output: the buffer as it was (padding), every element by the formula.
    std::vector<unsigned char> want = dst.snapshot();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t ch = tensor ? 0 : axis == 0 ? r : c;
            const S v = src[r * lds + c];
            D out;
            if constexpr (quant) out = static_cast<D>(quantize_one<Q>(v, scales[ch], zps[ch]));
            else out = dequantize_one(v, scales[ch], zps[ch]);
            std::memcpy(want.data() + (r * ldd + c) * sizeof(D), &out, sizeof(D));
        }

    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    const S* sp = src.data();
    D* dp = dst.data();
    const float* scp = scales.data();
    const int32_t* zpp = symmetric ? nullptr : zps.data();
    float scale0 = tensor ? scales[0] : 0.0f;  // per tensor: passed by value
    int32_t zp0 = tensor ? zps[0] : 0;
    Buf<unsigned char> arena;  // hostile overlap: an input and the output inside one buffer
    const char* wrong = "";
    if (hostile) {
        const bool any = rows > 0 && cols > 0;
        switch (in.pick(10)) {
            case 0:
                (tensor || in.coin() ? cols : rows) = in.coin() ? -1 - in.pick(8) : std::numeric_limits<int64_t>::min();
                wrong = "negative size";
                break;
            case 1:
                if (!tensor && cols >= 2) {
                    (in.coin() ? ld_s : ld_d) = 1 + in.pick(static_cast<int>(cols - 1));
                    wrong = "row stride < cols";
                    break;
                }
                [[fallthrough]];
            case 2:
                if (!tensor) {
                    static const int bad_axis[] = {2, -1, 77, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()};
                    axis = bad_axis[in.pick(5)];
                    wrong = "axis not 0 or 1";
                    break;
                }
                [[fallthrough]];
            case 3:
                if (any) {
                    if (in.coin()) sp = nullptr, wrong = "input null";
                    else dp = nullptr, wrong = "output null";
                    // a huge but representable size with it: rejected at once, no allocation
                    if (in.coin()) (tensor || in.coin() ? cols : rows) = kHuge;
                    break;
                }
                [[fallthrough]];
            case 4:
                if (any && !tensor) {
                    scp = nullptr;
                    wrong = "scales null";
                    if (in.coin()) (in.coin() ? cols : rows) = kHuge;
                    break;
                }
                [[fallthrough]];
            case 5:
                if (any) {
                    if (tensor) scale0 = bad_scale(in);
                    else scales[in.pick(static_cast<int>(channels))] = bad_scale(in);
                    wrong = "scale invalid";
                    break;
                }
                [[fallthrough]];
            case 6:
                if (any && !symmetric) {
                    if (tensor) zp0 = bad_zp<Q>(in);
                    else zps[in.pick(static_cast<int>(channels))] = bad_zp<Q>(in);
                    wrong = "zero point out of range";
                    break;
                }
                [[fallthrough]];
            case 7:
            case 8:
                if (any) {
                    // The output over the input (quantize: u8 / s8 starting inside x's first row;
                    // dequantize: q starting inside the f32 output's first row: rows may have
                    // padding, and a region inside it would not overlap), or over the scales /
                    // zero points.
                    const int which = tensor ? 0 : in.pick(symmetric ? 2 : 3);
                    if (which == 0 && quant) {
                        arena = Buf<unsigned char>(src.nbytes() + dst.nbytes());
                        std::memcpy(arena.data(), src.data(), src.nbytes());
                        sp = reinterpret_cast<const S*>(arena.data());
                        dp = reinterpret_cast<D*>(arena.data() + in.pick(static_cast<int>(cols * sizeof(S))));
                    } else if (which == 0) {
                        arena = Buf<unsigned char>(dst.nbytes() + src.nbytes());
                        dp = reinterpret_cast<D*>(arena.data());
                        sp = reinterpret_cast<const S*>(arena.data() + in.pick(static_cast<int>(cols * sizeof(D))));
                    } else {
                        const size_t nb = channels * 4;
                        arena = Buf<unsigned char>(nb + dst.nbytes());
                        std::memcpy(arena.data(), which == 1 ? static_cast<const void*>(scales.data()) : zps.data(), nb);
                        if (which == 1) scp = reinterpret_cast<const float*>(arena.data());
                        else zpp = reinterpret_cast<const int32_t*>(arena.data());
                        dp = reinterpret_cast<D*>(arena.data() + sizeof(D) * in.pick(static_cast<int>(nb / sizeof(D))));
                    }
                    wrong = which == 0 ? "output overlaps the input" : which == 1 ? "output overlaps scales" : "output overlaps zero_points";
                    break;
                }
                [[fallthrough]];
            default:
                // A size whose byte count overflows int64 (the f32 side: 4 bytes an element); an
                // empty matrix stays a no-op whatever its other size, so then a negative one.
                if (cols > 0 && !tensor) rows = std::numeric_limits<int64_t>::max(), wrong = "rows overflow";
                else if (rows > 0) cols = in.coin() ? std::numeric_limits<int64_t>::max() : int64_t(1) << 62, wrong = "cols overflow";
                else rows = -1, wrong = "negative size";
                break;
        }
    }
    const auto dst_before = dst.snapshot(), arena_before = arena.snapshot();
    const auto sc_before = scales.snapshot(), zp_before = zps.snapshot();
    const xk_status s = fz::timed(what, [&] {
        if (tensor) return per_tensor(cols, sp, scale0, zp0, dp);
        return per_channel(rows, cols, sp, ld_s, scp, zpp, axis, dp, ld_d);
    });
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(dst, dst_before, what, "the output");
        fz::expect_unchanged(arena, arena_before, what, "the output (over an input)");
        fz::expect_unchanged(scales, sc_before, what, "scales");
        fz::expect_unchanged(zps, zp_before, what, "zero_points");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(dst, what, "the output");
    if (dst.same_as(want)) return;
    for (int64_t i = 0; i < static_cast<int64_t>(dst.size()); ++i) {
        D w;
        std::memcpy(&w, want.data() + i * sizeof(D), sizeof(D));
        if (std::memcmp(&w, &dst[i], sizeof(D)) == 0) continue;
        const int64_t r = i / ldd, c = i % ldd;
        if (c >= cols) fz::finding("%s: wrote the row padding at [%lld] (rows=%lld cols=%lld ld=%lld)", what,
                                   static_cast<long long>(i), static_cast<long long>(rows), static_cast<long long>(cols),
                                   static_cast<long long>(ldd));
        const int64_t ch = tensor ? 0 : axis == 0 ? r : c;
        fz::finding("%s: [%lld][%lld] = %.9g, want %.9g (input %.9g, scale %.9g, zero point %d; rows=%lld cols=%lld axis=%d "
                    "symmetric=%d ld_src=%lld ld_dst=%lld)",
                    what, static_cast<long long>(r), static_cast<long long>(c), static_cast<double>(dst[i]),
                    static_cast<double>(w), static_cast<double>(src[r * lds + c]), scales[ch], zps[ch],
                    static_cast<long long>(rows), static_cast<long long>(cols), axis, symmetric,
                    static_cast<long long>(ld_s), static_cast<long long>(ld_d));
    }
}

// ---- dynamic per token ----------------------------------------------------------------------------
xk_status dynamic(int64_t r, int64_t c, const float* x, int64_t ldx, const float* sm, uint8_t* q, int64_t ldq, float* s, int32_t* zp, int sym) {
    return xk_quantize_dynamic_per_token_f32_u8(r, c, x, ldx, sm, q, ldq, s, zp, sym);
}
xk_status dynamic(int64_t r, int64_t c, const float* x, int64_t ldx, const float* sm, int8_t* q, int64_t ldq, float* s, int32_t* zp, int sym) {
    return xk_quantize_dynamic_per_token_f32_s8(r, c, x, ldx, sm, q, ldq, s, zp, sym);
}
xk_status dynamic(int64_t r, int64_t c, const uint16_t* x, int64_t ldx, const float* sm, uint8_t* q, int64_t ldq, float* s, int32_t* zp, int sym) {
    return xk_quantize_dynamic_per_token_bf16_u8(r, c, x, ldx, sm, q, ldq, s, zp, sym);
}
xk_status dynamic(int64_t r, int64_t c, const uint16_t* x, int64_t ldx, const float* sm, int8_t* q, int64_t ldq, float* s, int32_t* zp, int sym) {
    return xk_quantize_dynamic_per_token_bf16_s8(r, c, x, ldx, sm, q, ldq, s, zp, sym);
}

template <class X>
float widen(X v) {
    if constexpr (std::is_same_v<X, float>) return v;
    else return fz::from_bf16(v);
}
template <class X>
X narrow(float v) {
    if constexpr (std::is_same_v<X, float>) return v;
    else return fz::to_bf16(v);
}

// Dynamic per token (X = float / bf16 as uint16_t, Q = u8 / s8): each row r quantized with the
// parameters compute_quant_params gives for the min / max of the row's finite v = x (* smooth[c],
// fp32; none: [0, 0]), which land in scales[r] / zero_points[r]; a NaN v quantizes to the zero
// point, +-inf saturate (as the static modes). Expected exactly: scales (bits), zero points, q;
// the padding of q as it was.
template <class X, class Q>
void op_dynamic(In& in) {
    constexpr bool bf = std::is_same_v<X, uint16_t>;
    const char* what = bf ? (kU8<Q> ? "xk_quantize_dynamic_per_token_bf16_u8" : "xk_quantize_dynamic_per_token_bf16_s8")
                          : (kU8<Q> ? "xk_quantize_dynamic_per_token_f32_u8" : "xk_quantize_dynamic_per_token_f32_s8");
    int64_t rows = in.dim(0, kMaxRows), cols = in.dim(0, kMaxCols);
    int64_t ld_x = stride(in, cols), ld_q = stride(in, cols);
    const int64_t ldx = ld_x ? ld_x : cols, ldq = ld_q ? ld_q : cols;
    static const int kSym[] = {0, 1, 0, -3};  // any non-zero int means symmetric
    const int symmetric = kSym[in.pick(4)];
    const bool with_smooth = in.pick(3) == 0, with_zp = !symmetric || in.coin();
    const size_t mis = in.pick(4);
    Values vals(in, rows * cols + cols);
    // smooth within 1e8 and x within 1e30 with it (else 3e38): every v finite.
    Buf<float> smooth(with_smooth ? cols : 0, mis);
    for (int64_t c = 0; c < static_cast<int64_t>(smooth.size()); ++c) smooth[c] = vals().value(1e8f);
    Buf<X> x(span(rows, cols, ldx), mis);
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i)
        x[i] = narrow<X>(i % ldx >= cols ? kNaN : vals().value(with_smooth ? 1e30f : 3e38f));  // padding: never read
    Buf<Q> q(span(rows, cols, ldq), in.pick(4));
    Buf<float> scales(rows, mis);
    Buf<int32_t> zps(rows, mis);

    bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    const X* xp = x.data();
    Q* qp = q.data();
    float* sp = scales.data();
    int32_t* zpp = with_zp ? zps.data() : nullptr;
    const float* smp = with_smooth ? smooth.data() : nullptr;
    Buf<unsigned char> arena;  // hostile overlap: x and q, or q and scales, inside one buffer
    const char* wrong = "";
    if (hostile) {
        const bool any = rows > 0 && cols > 0;
        switch (in.pick(10)) {
            case 0: (in.coin() ? cols : rows) = in.coin() ? -1 - in.pick(8) : std::numeric_limits<int64_t>::min(); wrong = "negative size"; break;
            case 1:
                if (cols >= 2) {
                    (in.coin() ? ld_x : ld_q) = 1 + in.pick(static_cast<int>(cols - 1));
                    wrong = "row stride < cols";
                    break;
                }
                [[fallthrough]];
            case 2:
                if (any) {
                    switch (in.pick(4)) {
                        case 0: xp = nullptr; wrong = "x null"; break;
                        case 1: qp = nullptr; wrong = "q null"; break;
                        case 2: sp = nullptr; wrong = "scales null"; break;
                        default:
                            if (symmetric) { xp = nullptr; wrong = "x null"; }
                            else { zpp = nullptr; wrong = "zero_points null (asymmetric)"; }
                    }
                    if (in.coin()) (in.coin() ? rows : cols) = kHuge;  // huge but representable: rejected at once
                    break;
                }
                [[fallthrough]];
            case 3:
            case 4:
                if (any) {  // non-finite x: valid (quantized as the static modes do)
                    for (int i = 0, n = 1 + in.pick(3); i < n; ++i) {
                        const int64_t r = in.pick(static_cast<int>(rows)), c = in.pick(static_cast<int>(cols));
                        x[r * ldx + c] = narrow<X>(nonfinite(in));
                    }
                    hostile = false;
                    break;
                }
                [[fallthrough]];
            case 5:
                if (any && with_smooth) {  // x * smooth not finite: the product overflows, or smooth[c] is not finite
                    const int64_t r = in.pick(static_cast<int>(rows)), c = in.pick(static_cast<int>(cols));
                    if (in.coin()) {  // valid: the product is +-inf
                        x[r * ldx + c] = narrow<X>(in.coin() ? 3e38f : -3e38f);
                        smooth[c] = in.coin() ? 1e8f : -4.0f;
                        hostile = false;
                    } else {
                        smooth[c] = nonfinite(in);
                        wrong = "smooth not finite";
                    }
                    break;
                }
                [[fallthrough]];
            case 6:
            case 7:
                if (any) {
                    switch (in.pick(with_smooth ? 4 : 3)) {
                        case 0:  // q starting inside x's first row
                            arena = Buf<unsigned char>(x.nbytes() + q.nbytes());
                            std::memcpy(arena.data(), x.data(), x.nbytes());
                            xp = reinterpret_cast<const X*>(arena.data());
                            qp = reinterpret_cast<Q*>(arena.data() + in.pick(static_cast<int>(cols * sizeof(X))));
                            wrong = "q overlaps x";
                            break;
                        case 1:  // scales starting inside q's first row (two outputs)
                            arena = Buf<unsigned char>(q.nbytes() + scales.nbytes());
                            qp = reinterpret_cast<Q*>(arena.data());
                            sp = reinterpret_cast<float*>(arena.data() + 4 * in.pick(static_cast<int>((cols + 3) / 4)));
                            wrong = "scales overlaps q";
                            break;
                        case 2:
                            zpp = reinterpret_cast<int32_t*>(scales.data());
                            wrong = "zero_points overlaps scales";
                            break;
                        default:
                            sp = smooth.data();
                            wrong = "scales overlaps smooth";
                    }
                    break;
                }
                [[fallthrough]];
            default:  // as op_static
                if (cols > 0) rows = std::numeric_limits<int64_t>::max(), wrong = "rows overflow";
                else if (rows > 0) cols = int64_t(1) << 62, wrong = "cols overflow";
                else rows = -1, wrong = "negative size";
                break;
        }
    }
    const auto q_before = q.snapshot(), s_before = scales.snapshot(), z_before = zps.snapshot(), a_before = arena.snapshot();
    const auto sm_before = smooth.snapshot();
    const xk_status s = fz::timed(what, [&] { return dynamic(rows, cols, xp, ld_x, smp, qp, ld_q, sp, zpp, symmetric); });
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(q, q_before, what, "q");
        fz::expect_unchanged(scales, s_before, what, "scales");
        fz::expect_unchanged(zps, z_before, what, "zero_points");
        fz::expect_unchanged(arena, a_before, what, "the outputs over x / q");
        fz::expect_unchanged(smooth, sm_before, what, "smooth");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(q, what, "q");
    fz::expect_guards(scales, what, "scales");
    fz::expect_guards(zps, what, "zero_points");
    if (cols == 0) {  // an empty matrix is a no-op: no row has parameters
        if (!scales.same_as(s_before) || !zps.same_as(z_before)) fz::finding("%s: cols = 0 wrote scales or zero_points", what);
        return;
    }
    std::vector<float> v(cols);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) v[c] = with_smooth ? widen(x[r * ldx + c]) * smooth[c] : widen(x[r * ldx + c]);
        float mn = 0.0f, mx = 0.0f;  // the finite values' range (none: [0, 0])
        bool seen = false;
        for (float e : v)
            if (std::isfinite(e)) {
                mn = seen ? std::min(mn, e) : e;
                mx = seen ? std::max(mx, e) : e;
                seen = true;
            }
        const Params p = params_of<Q>(mn, mx, symmetric != 0);
        if (!same_bits(scales[r], p.scale) || (with_zp && zps[r] != p.zp))
            fz::finding("%s: row %lld of %lld x %lld (min %.9g, max %.9g, symmetric=%d smooth=%d): scale %.9g zero point %d, want "
                        "%.9g %d",
                        what, static_cast<long long>(r), static_cast<long long>(rows), static_cast<long long>(cols), mn, mx,
                        symmetric, with_smooth, scales[r], with_zp ? zps[r] : 0, p.scale, p.zp);
        for (int64_t c = 0; c < cols; ++c) {
            const int32_t want = quantize_one<Q>(v[c], p.scale, p.zp);
            if (q[r * ldq + c] != want)
                fz::finding("%s: q[%lld][%lld] = %d, want %d (v %.9g, scale %.9g, zero point %d; rows=%lld cols=%lld ld_x=%lld "
                            "ld_q=%lld symmetric=%d smooth=%d)",
                            what, static_cast<long long>(r), static_cast<long long>(c), static_cast<int>(q[r * ldq + c]), want,
                            v[c], p.scale, p.zp, static_cast<long long>(rows), static_cast<long long>(cols),
                            static_cast<long long>(ld_x), static_cast<long long>(ld_q), symmetric, with_smooth);
        }
        for (int64_t c = cols; r + 1 < rows && c < ldq; ++c)
            if (std::memcmp(&q[r * ldq + c], &q_before[(r * ldq + c) * sizeof(Q)], sizeof(Q)) != 0)
                fz::finding("%s: wrote the padding of q row %lld (cols=%lld ld_q=%lld)", what, static_cast<long long>(r),
                            static_cast<long long>(cols), static_cast<long long>(ld_q));
    }
}

// ---- conversions f32 <-> bf16 <-> f16 ----------------------------------------------------------------
// Elements as uint32_t bit patterns of their type (f32: 4 bytes, bf16 / f16: 2). The oracle goes
// through the exact f32 value: widening is exact; narrowing rounds to nearest even once (bf16:
// fz::to_bf16, f16: f32_to_f16 below), overflow to inf, denormals kept.
int conv_size(xk_dtype t) { return t == XK_DTYPE_F32 ? 4 : 2; }
// IEEE half, written out here: widening exactly (ldexp of the integer significand), narrowing by
// one round to nearest even of the exact double value (std::nearbyint in the default mode).
float f16_to_f32(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = std::ldexp(double(m), -24);
    else if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    else v = std::ldexp(double(1024 + m), e - 25);
    return static_cast<float>(h & 0x8000 ? -v : v);
}
uint16_t f32_to_f16(float f) {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isnan(f)) return sign | 0x7e00;
    const double a = std::fabs(double(f));
    if (a >= 65520.0) return sign | 0x7c00;  // overflows (or is inf)
    if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24)));  // 1024: the smallest normal
    int ex;
    std::frexp(a, &ex);  // a in [2^(ex-1), 2^ex)
    const int e = ex - 1;
    double q = std::nearbyint(std::ldexp(a, 10 - e));  // [1024, 2048]
    int eb = e + 15;
    if (q == 2048.0) q = 1024.0, ++eb;
    return sign | static_cast<uint16_t>((eb << 10) | (static_cast<int>(q) - 1024));
}
float conv_widen(xk_dtype t, const unsigned char* p) {
    if (t == XK_DTYPE_F32) { float f; std::memcpy(&f, p, 4); return f; }
    uint16_t h;
    std::memcpy(&h, p, 2);
    if (t == XK_DTYPE_BF16) return fz::from_bf16(h);
    return f16_to_f32(h);
}
void conv_narrow(xk_dtype t, float f, unsigned char* p) {
    if (t == XK_DTYPE_F32) { std::memcpy(p, &f, 4); return; }
    if (t == XK_DTYPE_BF16) { const uint16_t h = fz::to_bf16(f); std::memcpy(p, &h, 2); return; }
    const uint16_t h = f32_to_f16(f);
    std::memcpy(p, &h, 2);
}

void op_convert(In& in, bool two_d) {
    static const xk_dtype kTypes[] = {XK_DTYPE_F32, XK_DTYPE_BF16, XK_DTYPE_F16};
    xk_dtype st = kTypes[in.pick(3)], dt = kTypes[in.pick(3)];
    const int ss = conv_size(st), ds = conv_size(dt);
    const char* what = two_d ? "xk_convert_2d" : "xk_convert";
    int64_t rows = two_d ? in.dim(0, kMaxRows) : 1, cols = in.dim(0, kMaxCols);
    int64_t ld_s = two_d ? stride(in, cols) : 0, ld_d = two_d ? stride(in, cols) : 0;
    const int64_t lds = ld_s ? ld_s : cols, ldd = ld_d ? ld_d : cols;
    Values vals(in, rows * cols);
    Buf<unsigned char> src(span(rows, cols, lds) * ss, in.pick(2) * ss);  // (misaligned by whole elements)
    for (int64_t i = 0; i < span(rows, cols, lds); ++i) {
        const float f = i % lds >= cols ? kNaN : vals().any_value(st == XK_DTYPE_F16 ? 7e4f : 3e38f);
        conv_narrow(st, f, src.data() + i * ss);  // (f16: values past 65504 become inf: also valid)
    }
    Buf<unsigned char> dst(span(rows, cols, ldd) * ds, in.pick(2) * ds);
    std::vector<unsigned char> want = dst.snapshot();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            conv_narrow(dt, conv_widen(st, src.data() + (r * lds + c) * ss), want.data() + (r * ldd + c) * ds);

    const bool hostile = in.pick(3) == 2;
    const void* sp = src.data();
    void* dp = dst.data();
    int st_i = static_cast<int>(st), dt_i = static_cast<int>(dt);
    const char* wrong = "";
    if (hostile) {
        const bool any = rows > 0 && cols > 0;
        switch (in.pick(5)) {
            case 0:
                (two_d && in.coin() ? rows : cols) = in.coin() ? -1 - in.pick(8) : std::numeric_limits<int64_t>::min();
                wrong = "negative size";
                break;
            case 1:
                if (any) {
                    if (in.coin()) sp = nullptr, wrong = "src null";
                    else dp = nullptr, wrong = "dst null";
                    if (in.coin()) cols = kHuge;
                    break;
                }
                [[fallthrough]];
            case 2:
                if (two_d && cols >= 2) {
                    (in.coin() ? ld_s : ld_d) = 1 + in.pick(static_cast<int>(cols - 1));
                    wrong = "row stride < cols";
                    break;
                }
                [[fallthrough]];
            case 3: {
                static const int bad[] = {2, 3, 4, 6, -1, 1000};  // s8, u8, s32, unknown
                (in.coin() ? st_i : dt_i) = bad[in.pick(6)];
                wrong = "dtype not f32 / bf16 / f16";
                break;
            }
            default:
                if (any && ss == ds && st != dt) {  // in place is an overlap (same type would be a copy)
                    sp = dst.data();
                    wrong = "src overlaps dst";
                    break;
                }
                if (cols > 0 && rows > 0) cols = std::numeric_limits<int64_t>::max(), wrong = "size overflow";
                else cols = -1, wrong = "negative size";
                break;
        }
    }
    xk_dtype st_c, dt_c;
    std::memcpy(&st_c, &st_i, sizeof st_c);
    std::memcpy(&dt_c, &dt_i, sizeof dt_c);
    const auto before = dst.snapshot();
    const xk_status s = fz::timed(what, [&] {
        return two_d ? xk_convert_2d(rows, cols, st_c, sp, ld_s, dt_c, dp, ld_d) : xk_convert(cols, st_c, sp, dt_c, dp);
    });
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(dst, before, what, "dst");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(dst, what, "dst");
    if (dst.same_as(want)) return;
    for (int64_t i = 0; i < span(rows, cols, ldd); ++i) {
        const unsigned char* g = dst.data() + i * ds;
        const unsigned char* w = want.data() + i * ds;
        if (std::memcmp(g, w, ds) == 0) continue;
        if (i % ldd < cols && std::isnan(conv_widen(dt, g)) && std::isnan(conv_widen(dt, w))) continue;  // NaN payloads
        const int64_t r = i / ldd, c = i % ldd;
        fz::finding("%s %d -> %d: [%lld][%lld] = %.9g, want %.9g (input %.9g; rows=%lld cols=%lld ld_src=%lld ld_dst=%lld)", what,
                    st_i, dt_i, static_cast<long long>(r), static_cast<long long>(c), conv_widen(dt, g), conv_widen(dt, w),
                    c < cols ? conv_widen(st, src.data() + (r * lds + c) * ss) : 0.0f, static_cast<long long>(rows),
                    static_cast<long long>(cols), static_cast<long long>(ld_s), static_cast<long long>(ld_d));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        switch (in.pick(18)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(1 + in.pick(2)); }), "xk_set_num_threads"); break;
            case 2: op_params(in); break;
            case 3: op_static<float, uint8_t>(in, true); break;
            case 4: op_static<float, int8_t>(in, true); break;
            case 5: op_static<uint8_t, float>(in, true); break;
            case 6: op_static<int8_t, float>(in, true); break;
            case 7: op_static<float, uint8_t>(in, false); break;
            case 8: op_static<float, int8_t>(in, false); break;
            case 9: op_static<uint8_t, float>(in, false); break;
            case 10: op_static<int8_t, float>(in, false); break;
            case 11: op_dynamic<float, uint8_t>(in); break;
            case 12: op_dynamic<float, int8_t>(in); break;
            case 13: op_dynamic<uint16_t, uint8_t>(in); break;
            case 14: op_dynamic<uint16_t, int8_t>(in); break;
            case 15: op_params(in); break;
            case 16: op_convert(in, false); break;
            default: op_convert(in, true); break;
        }
    }
    return 0;
}
