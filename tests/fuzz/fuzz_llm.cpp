// libFuzzer target: the llm family of the C API (include/xk/c/llm.h). See fuzz_common.hpp for the
// scheme. Calls: xk_glu_f32 / _bf16 (every activation, and values outside the enum as hostile;
// row strides with padding; in place over the gate half; y in x's row padding), xk_silu_and_mul
// and xk_gelu_and_mul (tanh flag) f32 / bf16, xk_softmax_f32 / _bf16 (scale, causal with positive /
// negative / zero / huge offsets, strides, in place, y in x's row padding), ISA cap and thread
// count changes. These ops have JIT kernels: a valid call runs at the current cap and, when that
// is not scalar, again at XK_ISA_SCALAR (the reference kernels); both results are checked against
// a double-precision loop with the bounds include/xk/llm.hpp states (glu_ok, softmax_tol), and
// everything the op must not write (row padding, x's up half in place) must be as it was.
#include <algorithm>
#include <optional>
#include <type_traits>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

constexpr int64_t kMaxRows = 8, kMaxInner = 160, kMaxCols = 300;
constexpr int64_t kHuge = int64_t(1) << 40;  // representable, far larger than any buffer here
constexpr double kU = 0x1p-24;                // fp32 unit roundoff
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max(), kI64Min = std::numeric_limits<int64_t>::min();

using fz::Values;

using fz::narrow;
using fz::widen;

// A row stride: 0 (packed) or the minimum itself, or the minimum plus padding.
int64_t stride(In& in, int64_t min) {
    const int64_t pad = in.pad();
    return pad == 0 ? (in.coin() ? 0 : min) : min + pad;
}
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

// Which elements of an output buffer a call writes: k + 1 for output element k (row-major over
// the [rows x cols] matrix at `off` with stride ld), 0 for those it must leave as they were.
std::vector<int64_t> written_map(size_t n, int64_t off, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<int64_t> w(n, 0);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) w[off + r * ld + c] = r * cols + c + 1;
    return w;
}

using fz::current_cap;

// ---- GLU ------------------------------------------------------------------------------------------
using fz::act_exact;

// y for gate g and up u (as fp32: what the op reads), against llm.hpp's accuracy paragraph:
//  relu, none (activation exact): f32 y is the fp32 product act(g) * u, bit for bit (NaN for NaN);
//     bf16 y that product rounded to nearest, ties either way (and, below FLT_MIN, 0: AVX512-BF16's
//     conversion flushes denormals, src/kernels/common/jit_io.hpp);
//  silu, gelu_erf, gelu_tanh, f32 y: the activation within silu 4u, gelu_tanh (4 + 3|2y|)u,
//     gelu_erf (8 + 2g^2)u relative, plus the absolute 5u|g| of jit_activation.hpp (the
//     injector's bounds the header refers to: "|err| <= 4u|x| everywhere" for silu / gelu_tanh,
//     "4u|gelu| + 5u|x|" for gelu_erf, which cover the cancellation for g << 0) and its 2^-120 for
//     tiny results; times |u|, plus half an ulp for the product;
//  silu, gelu, bf16 y: within (2^-8 + 2^-10)|w| of w = act(g) u (gelu: plus 8u|g u|), plus 2^-126
//     (denormals flushed).
// A NaN gate or up gives NaN (the injector's "NaN -> NaN"); +-inf are not checked further (the
// scalar formula and the JIT kernels differ there, as jit_glu.cpp documents for silu(-inf)).
bool glu_ok(int act, bool bf, float g, float u, float got, double* want, double* tol) {
    *want = 0, *tol = 0;
    if (act == XK_ACT_NONE || act == XK_ACT_RELU) {
        const float p = (act == XK_ACT_RELU ? (g > 0.0f ? g : 0.0f) : g) * u;
        *want = p;
        if (std::isnan(p)) return std::isnan(got);
        if (!bf) return got == p;
        if (std::fabs(p) < std::numeric_limits<float>::min() && got == 0.0f) return true;
        uint32_t bits;
        std::memcpy(&bits, &p, 4);
        if ((bits & 0xffffu) == 0x8000u)  // a tie: either neighbour
            return got == fz::from_bf16(static_cast<uint16_t>(bits >> 16)) || got == fz::from_bf16(static_cast<uint16_t>((bits >> 16) + 1));
        return got == fz::from_bf16(fz::to_bf16(p));
    }
    if (std::isnan(g) || std::isnan(u)) return std::isnan(got);
    if (std::isinf(g) || std::isinf(u)) return true;
    const double a = act_exact(act, g), w = a * u;
    *want = w;
    if (!bf) {
        const double y2 = 2.0 * std::sqrt(2.0 / M_PI) * (g + 0.044715 * static_cast<double>(g) * g * g);
        const double rel = act == XK_ACT_SILU ? 4.0 : act == XK_ACT_GELU_TANH ? 4.0 + 3.0 * std::fabs(y2) : 8.0 + 2.0 * static_cast<double>(g) * g;
        *tol = (rel * kU * std::fabs(a) + 5 * kU * std::fabs(g) + 0x1p-120) * std::fabs(u) + kU * std::fabs(w) + 0x1p-149;
    } else {
        *tol = (0x1p-8 + 0x1p-10) * std::fabs(w) + (act == XK_ACT_SILU ? 0.0 : 8 * kU * std::fabs(static_cast<double>(g) * u)) + 0x1p-126;
        // llm.hpp (Tails): the JIT kernels clamp silu's gate at -86, so below it y = silu(-86) u
        // ~ -3.85e-36 u instead of g e^g u (fuzz_llm found it beyond the bf16 bound: g = -97,
        // u = -2.609375 gave 1.006e-35 for 1.89e-40; now documented).
        if (act == XK_ACT_SILU && g < -86.0f) *tol += 4e-36 * std::fabs(u);
    }
    // llm.hpp (Tails): silu and gelu_tanh at every JIT level form g u before dividing by
    // 1 + e^-X, so where |g u| overflows fp32 and w does not, y is +-inf (silu: g = -3, u = 2e38
    // gives -inf for -2.8456e37; found by fuzz_llm, now documented).
    if ((act == XK_ACT_SILU || act == XK_ACT_GELU_TANH) && std::fabs(static_cast<double>(g) * u) > std::numeric_limits<float>::max() &&
        std::isinf(got) && (got < 0) == (static_cast<double>(g) * u < 0))
        return true;
    return fz::close(got, w, 0, *tol);
}

template <class T>
xk_status glu_call(int form, xk_activation act, int tanh_flag, int64_t rows, int64_t inner, const T* x, int64_t ld_x, T* y,
                   int64_t ld_y) {
    if constexpr (std::is_same_v<T, float>) {
        if (form == 0) return xk_glu_f32(act, rows, inner, x, ld_x, y, ld_y);
        if (form == 1) return xk_silu_and_mul_f32(rows, inner, x, y);
        return xk_gelu_and_mul_f32(rows, inner, x, y, tanh_flag);
    } else {
        if (form == 0) return xk_glu_bf16(act, rows, inner, x, ld_x, y, ld_y);
        if (form == 1) return xk_silu_and_mul_bf16(rows, inner, x, y);
        return xk_gelu_and_mul_bf16(rows, inner, x, y, tanh_flag);
    }
}

// A gate: ordinary values, the ranges where the activations change form (exp's edges near +-88,
// silu's clamp at -86, gelu_erf's cutoff at -4 sqrt2) and the extremes.
float gate_value(In& in, float big) {
    if (in.pick(4) == 0) return in.p.ConsumeFloatingPointInRange<float>(-100.0f, 100.0f);
    return in.value(big);
}

// One GLU call, form 0: xk_glu (act given), 1: silu_and_mul, 2: gelu_and_mul (tanh_flag).
template <class T>
void op_glu(In& in) {
    constexpr bool bf = std::is_same_v<T, uint16_t>;
    const int form = in.pick(3);
    static const int kTanh[] = {0, 1, 0, -2};  // any non-zero int means tanh
    const int tanh_flag = form == 2 ? kTanh[in.pick(4)] : 0;
    xk_activation act = form == 0 ? static_cast<xk_activation>(in.pick(5)) : form == 1 ? XK_ACT_SILU : tanh_flag ? XK_ACT_GELU_TANH : XK_ACT_GELU_ERF;
    const int act_value = static_cast<int>(act);
    const char* what = form == 0 ? (bf ? "xk_glu_bf16" : "xk_glu_f32")
                       : form == 1 ? (bf ? "xk_silu_and_mul_bf16" : "xk_silu_and_mul_f32")
                                   : (bf ? "xk_gelu_and_mul_bf16" : "xk_gelu_and_mul_f32");
    int64_t rows = in.dim(0, kMaxRows), inner = in.dim(1, kMaxInner);
    // Where y goes: 0, 1 a buffer of its own; 2 y == x (in place over the gate half: the same
    // stride, or one row); 3 y inside x's row padding (x's stride >= 3 inner; disjoint from x).
    // silu_and_mul / gelu_and_mul have packed rows: in place only for one row.
    int place = in.pick(4);
    if (form != 0 && place == 3) place = 0;
    if (form != 0 && place == 2 && rows > 1) place = 0;
    int64_t ld_x = 0, ld_y = 0;
    if (form == 0) {
        if (place == 2) {
            ld_x = stride(in, 2 * inner);
            ld_y = ld_x == 0 ? 2 * inner : ld_x;  // the same resolved stride (ld_y = 0 would mean inner)
        } else if (place == 3) {
            ld_x = ld_y = 3 * inner + in.pad();
        } else {
            ld_x = stride(in, 2 * inner), ld_y = stride(in, inner);
        }
    }
    const int64_t ldx = ld_x ? ld_x : 2 * inner, ldy = ld_y ? ld_y : inner;

    // The hostile spoil is decided before the buffers: where y lies inside x sizes x.
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    int64_t y_in_x = place == 2 ? 0 : place == 3 ? 2 * inner : -1;  // y's offset inside x's buffer, -1: a buffer of its own
    xk_activation act_arg = act;
    int64_t rows_arg = rows, inner_arg = inner;
    bool x_null = false, y_null = false;
    const char* wrong = "";
    if (hostile) {
        switch (in.pick(8)) {
            case 0:
                if (form == 0) {
                    const int v = in.bad_enum(5);
                    std::memcpy(&act_arg, &v, sizeof v);
                    wrong = "activation not an xk_activation";
                    break;
                }
                [[fallthrough]];
            case 1: rows_arg = in.coin() ? -1 - in.pick(8) : kI64Min; wrong = "rows < 0"; break;
            case 2: {
                static const int64_t bad[] = {0, -1, kI64Min, int64_t(1) << 62, kI64Max};  // < 1, or 2*inner overflows
                inner_arg = bad[in.pick(5)];
                wrong = inner_arg <= 0 ? "inner < 1" : "2*inner overflows";
                break;
            }
            case 3:
                if (form == 0) {  // a stride below the minimum (not 0: that means packed)
                    if (inner < 2 || in.coin()) ld_x = 1 + in.pick(static_cast<int>(2 * inner - 1)), wrong = "ld_x < 2*inner";
                    else ld_y = 1 + in.pick(static_cast<int>(inner - 1)), wrong = "ld_y < inner";
                    break;
                }
                [[fallthrough]];
            case 4:
                if (rows > 0) {
                    if (in.coin()) x_null = true, wrong = "x null";
                    else y_null = true, wrong = "y null";
                    if (in.coin()) rows_arg = kHuge;  // huge but representable: rejected at once
                    break;
                }
                [[fallthrough]];
            case 5:
                if (rows >= 2 && place < 2 && (form != 0 || ldx != ldy)) {
                    y_in_x = 0;
                    wrong = "y == x with another row stride";
                    break;
                }
                [[fallthrough]];
            case 6:
                if (rows > 0) {  // y starting inside x's first row
                    y_in_x = 1 + in.pick(static_cast<int>(2 * inner - 1));
                    wrong = "y partially overlaps x";
                    break;
                }
                [[fallthrough]];
            default:
                rows_arg = kI64Max;  // (rows-1) * ld_x overflows
                wrong = "rows overflow";
                break;
        }
    }
    const size_t mis = in.pick(4);
    const int64_t xn = std::max(span(rows, 2 * inner, ldx), y_in_x >= 0 ? y_in_x + span(rows, inner, ldy) : 0);
    Buf<T> x0(xn, mis), y0(y_in_x >= 0 ? 0 : span(rows, inner, ldy), in.pick(4));
    const bool nonfinite = in.pick(8) == 0;
    const float big = in.coin() ? 1e30f : 3e38f;  // |u| up to 3e38: products that overflow fp32
    Values vals(in, xn);
    for (int64_t i = 0; i < xn; ++i) {
        const int64_t c = i % ldx;
        float v;
        if (i >= span(rows, 2 * inner, ldx) || c >= 2 * inner) v = kNaN;  // padding: not read (NaN would show)
        else if (nonfinite && vals().pick(8) == 0) v = vals().any_value(big);
        else v = c < inner ? gate_value(vals(), big) : vals().value(big);
        x0[i] = narrow<T>(v);
    }

    // The call on copies of the pristine buffers: returns its status; xb / yb hold the result.
    auto run = [&](Buf<T>& xb, Buf<T>& yb) {
        xb = x0, yb = y0;
        T* yp = y_null ? nullptr : y_in_x >= 0 ? xb.data() + y_in_x : yb.data();
        const T* xp = x_null ? nullptr : xb.data();
        return fz::timed(what, [&] { return glu_call<T>(form, act_arg, tanh_flag, rows_arg, inner_arg, xp, ld_x, yp, ld_y); });
    };
    Buf<T> xb, yb;
    const xk_status s = run(xb, yb);
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(xb, x0.snapshot(), what, "x");
        fz::expect_unchanged(yb, y0.snapshot(), what, "y");
        return;
    }
    fz::expect_ok(s, what);
    // The output and what it must hold: y's elements by the oracle, everything else as it was.
    const bool in_x = y_in_x >= 0;
    const std::vector<int64_t> wmap = written_map(in_x ? xb.size() : yb.size(), in_x ? y_in_x : 0, rows, inner, ldy);
    auto check = [&](const Buf<T>& out, const Buf<T>& before, const char* at) {
        fz::expect_guards(out, what, in_x ? "x (y in it)" : "y");
        for (size_t i = 0; i < out.size(); ++i) {
            if (wmap[i] == 0) {
                if (std::memcmp(&out[i], &before[i], sizeof(T)) != 0)
                    fz::finding("%s (%s): changed element %zu of %s, which it must not write (rows=%lld inner=%lld ld_x=%lld ld_y=%lld place=%d)",
                                what, at, i, in_x ? "x" : "y", static_cast<long long>(rows), static_cast<long long>(inner),
                                static_cast<long long>(ld_x), static_cast<long long>(ld_y), place);
                continue;
            }
            const int64_t r = (wmap[i] - 1) / inner, k = (wmap[i] - 1) % inner;
            const float g = widen(x0[r * ldx + k]), u = widen(x0[r * ldx + inner + k]), got = widen(out[i]);
            double want, tol;
            if (!glu_ok(act_value, bf, g, u, got, &want, &tol))
                fz::finding("%s (%s): act=%d y[%lld][%lld] = %.9g, want %.9g (+- %.3g) for gate %.9g up %.9g (rows=%lld inner=%lld "
                            "ld_x=%lld ld_y=%lld place=%d)",
                            what, at, act_value, static_cast<long long>(r), static_cast<long long>(k), got, want, tol, g, u,
                            static_cast<long long>(rows), static_cast<long long>(inner), static_cast<long long>(ld_x),
                            static_cast<long long>(ld_y), place);
        }
    };
    const char* cap_name = "";
    const xk_isa cap = current_cap(&cap_name);
    check(in_x ? xb : yb, in_x ? x0 : y0, cap_name);
    // The same call with the cap at scalar: the reference kernel meets the same bounds.
    if (cap != XK_ISA_SCALAR) {
        fz::set_cap(XK_ISA_SCALAR);
        Buf<T> xr, yr;
        const xk_status sr = run(xr, yr);
        fz::set_cap(cap);
        fz::expect_ok(sr, what);
        check(in_x ? xr : yr, in_x ? x0 : y0, "scalar");
    }
}

// ---- softmax --------------------------------------------------------------------------------------
template <class T>
xk_status softmax_call(int64_t rows, int64_t cols, const T* x, int64_t ld_x, T* y, int64_t ld_y, float scale, int causal, int64_t off) {
    if constexpr (std::is_same_v<T, float>) return xk_softmax_f32(rows, cols, x, ld_x, y, ld_y, scale, causal, off);
    else return xk_softmax_bf16(rows, cols, x, ld_x, y, ld_y, scale, causal, off);
}

// A valid scale (finite, > 0): 1, 1/sqrt(head_dim)-like, ordinary, and the extremes (denormal,
// FLT_MAX: c = scale log2 e overflows, the kernels' fallback).
float softmax_scale(In& in) {
    switch (in.pick(10)) {
        case 0: return 1.0f;
        case 1: return 0.125f;
        case 2: return 0.08838835f;
        case 3: return std::numeric_limits<float>::max();
        case 4: return std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + in.pick(1000));
        case 5: return std::ldexp(1.0f, in.pick(200) - 100);
        default: return std::ldexp(1.0f + static_cast<float>(in.pick(128)) / 128.0f, in.pick(41) - 20);
    }
}

// Fills one row of logits: ordinary ones (some far below the max: exps that underflow), or one
// or two huge ones (+-1e10 .. 3e38: rows whose |scale max| >= 7.4e8 take the reference, where
// {1e10, 0, 1, 2} once gave NaN), or all huge, or a few ulps around a value with |scale max|
// near that bound (the JIT path's bias rounding is largest there); NaN / +-inf when `nonfinite`.
void fill_row(In& in, float* v, int64_t n, float scale, bool nonfinite) {
    const int style = in.pick(6);
    for (int64_t j = 0; j < n; ++j) v[j] = style == 3 ? in.value(3e38f) : in.value(100.0f);
    if (style == 1 || style == 2) {
        for (int k = 0; k < 1 + in.pick(2); ++k) {
            const double mag = std::min(3e38, std::pow(10.0, 10.0 + 28.5 * in.pick(1001) / 1000.0));
            v[in.pick(static_cast<int>(n))] = static_cast<float>(in.coin() ? mag : -mag);
        }
    } else if (style == 4) {
        const double target = (1e8 + 6.4e8 * in.pick(1001) / 1000.0) / scale;  // |scale base| in [1e8, 7.4e8]
        const float base = static_cast<float>(std::min(target, 3e38)) * (in.coin() ? 1.0f : -1.0f);
        for (int64_t j = 0; j < n; ++j) {
            float b = base;
            for (int k = in.pick(5); k > 0; --k) b = std::nextafter(b, in.coin() ? kInf : -kInf);
            v[j] = b;
        }
    }
    if (nonfinite)
        for (int k = 0; k < 1 + in.pick(2); ++k) v[in.pick(static_cast<int>(n))] = in.any_value();
}

// llm.hpp's softmax bound for one y: exp(t - m) / sum within ~(6 + |t - m| + v/8) fp32 ulps for
// v visible columns (ulp(y) <= 2^-23 y; the "~" taken as 8 + 1.25|t - m| + v/8; v/8: the fp32
// per-lane sums of the exps, found needed on the Xeon: 18 ulps at the max of a 275-column row);
// arguments below ln(FLT_MIN) give 0 or values below FLT_MIN (and bf16 stores flush denormals):
// 2^-126 absolute; bf16 y plus half a bf16 ulp (<= 2^-8 y: an 8-bit significand).
// `floor` is the row's absolute floor (2^-126, or more: see below).
double softmax_tol(double y, double dist, int64_t v, bool bf, double floor) {
    return 0x1p-23 * y * (8.0 + 1.25 * dist + static_cast<double>(v) / 8) + floor + (bf ? 0x1p-8 * y : 0.0);
}

// The JIT kernels round the row's bias -c m_x (c = scale log2 e) to fp32 once; its error d moves
// the 2^-127 cutoff of every exp in the row. Rows with |c m_x| >= 2^24 take the reference, so
// |d| <= 1/2 and y below 2^-125 may come out 0 (llm.hpp: "values below ~1.5 FLT_MIN"). With the
// bound at 2^30 fuzz_llm found {-200000080, -200000160} giving y[1] = 0 for 1.80485e-35 (|d| = 8).
double softmax_floor(float, float) { return 0x1p-125; }

template <class T>
void op_softmax(In& in) {
    constexpr bool bf = std::is_same_v<T, uint16_t>;
    const char* what = bf ? "xk_softmax_bf16" : "xk_softmax_f32";
    int64_t rows = in.dim(0, kMaxRows), cols = in.dim(1, kMaxCols);
    // Where y goes: 0, 1 a buffer of its own; 2 y == x (in place: the same resolved stride);
    // 3 y inside x's row padding (stride >= 2 cols, disjoint from x).
    const int place = in.pick(4);
    int64_t ld_x, ld_y, y_in_x = -1;  // y's offset inside x's buffer, -1: a buffer of its own
    if (place == 2) {
        const int64_t ld = cols + in.pad();
        ld_x = ld == cols && in.coin() ? 0 : ld;
        ld_y = ld == cols && in.coin() ? 0 : ld;
        y_in_x = 0;
    } else if (place == 3) {
        ld_x = ld_y = 2 * cols + in.pad();
        y_in_x = cols + in.pick(static_cast<int>(ld_x - 2 * cols + 1));
    } else {
        ld_x = stride(in, cols), ld_y = stride(in, cols);
    }
    const int64_t ldx = ld_x ? ld_x : cols, ldy = ld_y ? ld_y : cols;
    float scale = softmax_scale(in);
    static const int kCausal[] = {0, 0, 1, 2, -1, 0};  // any non-zero int means causal
    const int causal = kCausal[in.pick(6)];
    int64_t off;
    switch (in.pick(7)) {
        case 0: off = 0; break;
        case 1: off = cols - rows; break;  // q_len new tokens over a kv cache of cols
        case 2: off = in.p.ConsumeIntegralInRange<int64_t>(-rows - 2, cols + 2); break;
        case 3: off = in.coin() ? kHuge : -kHuge; break;
        case 4: off = in.coin() ? int64_t(1) << 60 : -(int64_t(1) << 60); break;
        case 5: off = causal ? 0 : in.coin() ? kI64Max : kI64Min; break;  // not causal: ignored
        default: off = 1 + in.pick(3); break;
    }
    auto visible = [&](int64_t r) { return causal ? std::clamp<int64_t>(r + off + 1, 0, cols) : cols; };

    // The hostile spoil is decided before the buffers: where y lies inside x sizes x.
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    int64_t rows_arg = rows, cols_arg = cols;
    float scale_arg = scale;
    bool x_null = false, y_null = false;
    const char* wrong = "";
    if (hostile) {
        switch (in.pick(8)) {
            case 0: rows_arg = in.coin() ? -1 - in.pick(8) : kI64Min; wrong = "rows < 0"; break;
            case 1: cols_arg = in.coin() ? -in.pick(8) : kI64Min; wrong = "cols < 1"; break;
            case 2: {
                static const float bad[] = {0.0f, -0.0f, -1.0f, -1e-45f, kNaN, kInf, -kInf};
                scale_arg = bad[in.pick(7)];
                wrong = "scale not finite and > 0";
                break;
            }
            case 3:
                if (cols >= 2) {  // a stride below the minimum (not 0: that means packed)
                    (in.coin() ? ld_x : ld_y) = 1 + in.pick(static_cast<int>(cols - 1));
                    wrong = "row stride < cols";
                    break;
                }
                [[fallthrough]];
            case 4:
                if (rows > 0) {
                    if (in.coin()) x_null = true, wrong = "x null";
                    else y_null = true, wrong = "y null";
                    if (in.coin()) rows_arg = kHuge;  // huge but representable: rejected at once
                    break;
                }
                [[fallthrough]];
            case 5:
                if (rows >= 2 && place < 2 && ldx != ldy) {
                    y_in_x = 0;
                    wrong = "y == x with another row stride";
                    break;
                }
                [[fallthrough]];
            case 6:
                if (rows > 0 && cols >= 2) {  // y starting inside x's first row
                    y_in_x = 1 + in.pick(static_cast<int>(cols - 1));
                    wrong = "y partially overlaps x";
                    break;
                }
                [[fallthrough]];
            default:
                rows_arg = kI64Max;  // (rows-1) * ld_x overflows
                wrong = "rows overflow";
                break;
        }
    }
    const bool in_x = y_in_x >= 0;
    const size_t mis = in.pick(4);
    const int64_t xn = std::max(span(rows, cols, ldx), in_x ? y_in_x + span(rows, cols, ldy) : 0);
    Buf<T> x0(xn, mis), y0(in_x ? 0 : span(rows, cols, ldy), in.pick(4));
    // Per row: whether its visible columns are all finite (else only status, guards, masked
    // zeros and padding are checked for it).
    std::vector<bool> row_finite(rows, true);
    {
        const bool nonfinite = in.pick(6) == 0;
        Values vals(in, xn);
        std::vector<float> row(cols);
        for (int64_t i = 0; i < xn; ++i) x0[i] = narrow<T>(kNaN);  // padding and masked columns: not read (NaN would show)
        for (int64_t r = 0; r < rows; ++r) {
            fill_row(vals(), row.data(), cols, scale, nonfinite);
            for (int64_t j = 0; j < visible(r); ++j) {
                x0[r * ldx + j] = narrow<T>(row[j]);
                if (!std::isfinite(widen(x0[r * ldx + j]))) row_finite[r] = false;
            }
        }
    }

    auto run = [&](Buf<T>& xb, Buf<T>& yb) {
        xb = x0, yb = y0;
        T* yp = y_null ? nullptr : in_x ? xb.data() + y_in_x : yb.data();
        const T* xp = x_null ? nullptr : xb.data();
        return fz::timed(what, [&] { return softmax_call<T>(rows_arg, cols_arg, xp, ld_x, yp, ld_y, scale_arg, causal, off); });
    };
    Buf<T> xb, yb;
    const xk_status s = run(xb, yb);
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(xb, x0.snapshot(), what, "x");
        fz::expect_unchanged(yb, y0.snapshot(), what, "y");
        return;
    }
    fz::expect_ok(s, what);

    // The expected rows (double): t = scale x exact, y = exp(t - m) / sum over the visible columns.
    std::vector<double> want(rows * cols, 0.0), dist(rows * cols, 0.0), floor(rows, 0x1p-126);
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t v = visible(r);
        if (!row_finite[r] || v == 0) continue;
        double m = -INFINITY, sum = 0;
        float m_x = -kInf;
        for (int64_t j = 0; j < v; ++j) m_x = std::max(m_x, widen(x0[r * ldx + j]));
        floor[r] = softmax_floor(m_x, scale);
        for (int64_t j = 0; j < v; ++j) m = std::max(m, static_cast<double>(scale) * widen(x0[r * ldx + j]));
        for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(scale) * widen(x0[r * ldx + j]) - m);
        for (int64_t j = 0; j < v; ++j) {
            const double t = static_cast<double>(scale) * widen(x0[r * ldx + j]);
            want[r * cols + j] = std::exp(t - m) / sum;
            dist[r * cols + j] = m - t;
        }
    }
    const std::vector<int64_t> wmap = written_map(in_x ? xb.size() : yb.size(), in_x ? y_in_x : 0, rows, cols, ldy);
    auto check = [&](const Buf<T>& out, const Buf<T>& before, const char* at) {
        fz::expect_guards(out, what, in_x ? "x (y in it)" : "y");
        for (size_t i = 0; i < out.size(); ++i) {
            if (wmap[i] == 0) {
                if (std::memcmp(&out[i], &before[i], sizeof(T)) != 0)
                    fz::finding("%s (%s): changed element %zu of %s, which it must not write (rows=%lld cols=%lld ld_x=%lld ld_y=%lld place=%d)",
                                what, at, i, in_x ? "x" : "y", static_cast<long long>(rows), static_cast<long long>(cols),
                                static_cast<long long>(ld_x), static_cast<long long>(ld_y), place);
                continue;
            }
            const int64_t k = wmap[i] - 1, r = k / cols, j = k % cols;
            const double got = widen(out[i]);
            const bool masked = j >= visible(r);
            if (!masked && !row_finite[r]) continue;
            const double tol = masked ? 0.0 : softmax_tol(want[k], dist[k], visible(r), bf, floor[r]);
            if (masked ? got != 0.0 : !fz::close(got, want[k], 0, tol)) {
                std::string row;
                for (int64_t c = 0; c < std::min<int64_t>(visible(r), 8); ++c) row += " " + std::to_string(widen(x0[r * ldx + c]));
                fz::finding("%s (%s): y[%lld][%lld] = %.9g, want %.9g (+- %.3g)%s; rows=%lld cols=%lld ld_x=%lld ld_y=%lld scale=%.9g "
                            "causal=%d offset=%lld place=%d; x row (first 8 visible):%s",
                            what, at, static_cast<long long>(r), static_cast<long long>(j), got, want[k], tol,
                            masked ? " (masked)" : "", static_cast<long long>(rows), static_cast<long long>(cols),
                            static_cast<long long>(ld_x), static_cast<long long>(ld_y), scale, causal, static_cast<long long>(off),
                            place, row.c_str());
            }
        }
    };
    const char* cap_name = "";
    const xk_isa cap = current_cap(&cap_name);
    check(in_x ? xb : yb, in_x ? x0 : y0, cap_name);
    // The same call with the cap at scalar: the reference kernel meets the same bounds.
    if (cap != XK_ISA_SCALAR) {
        fz::set_cap(XK_ISA_SCALAR);
        Buf<T> xr, yr;
        const xk_status sr = run(xr, yr);
        fz::set_cap(cap);
        fz::expect_ok(sr, what);
        check(in_x ? xr : yr, in_x ? x0 : y0, "scalar");
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
        switch (in.pick(8)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(1 + in.pick(2)); }), "xk_set_num_threads"); break;
            case 2: op_glu<float>(in); break;
            case 3: op_glu<uint16_t>(in); break;
            case 4: case 5: op_softmax<float>(in); break;
            default: op_softmax<uint16_t>(in); break;
        }
    }
    return 0;
}
