// libFuzzer target: the norm family of the C API (include/xk/c/norm.h, with the semantics and
// accuracy statements of include/xk/norm.hpp). See fuzz_common.hpp for the scheme. Calls: the
// eight functions — RMSNorm and LayerNorm, f32 and bf16, plain and fused_add (residual = x +
// residual in place, y = norm(residual)) — with weight / bias given or NULL, y == x in place or
// apart, packed or padded row strides (a single row with a stride of 2^40), element-misaligned
// rows, rows = 0 with NULL pointers; huge sizes (no-ops or rejected, at once); ISA cap and thread
// count changes. A valid call is checked against a double-precision loop of the header's math
// (bound: see row_oracle) and rerun with the cap at XK_ISA_SCALAR (the reference implementation),
// both results checked and compared with each other.
#include <algorithm>
#include <type_traits>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

constexpr int64_t kMaxRows = 8;
constexpr int64_t kMaxHidden = 300;
// x and residual stay below 1e17 in magnitude. The header's statistics are fp32 sums ("at least
// fp32 precision"): h = x + residual up to 2e17, h^2 up to 4e34, a sum of 300 of them (or of
// squares shifted by another row's mean, up to (4e17)^2) stays below FLT_MAX. Beyond ~1e19 an fp32
// implementation overflows where the double oracle does not, and the header promises nothing
// for such rows.
constexpr float kBigX = 1e17f;
// weight and bias may be as large as 1e30: |(h - mean) rstd| <= sqrt(hidden), so y stays finite.
constexpr float kBigW = 1e30f;
constexpr double kU = 0x1p-24;  // fp32 unit roundoff

using fz::enc;
using fz::kBf16;
using fz::val;
// Bitwise equal, or both NaN.
template <class T>
bool same_value(T a, T b) {
    return std::memcmp(&a, &b, sizeof(T)) == 0 || (std::isnan(val(a)) && std::isnan(val(b)));
}

int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 ? 0 : (rows - 1) * ld + cols; }
int64_t resolved(int64_t ld, int64_t hidden) { return ld == 0 ? hidden : ld; }

// The arguments of one call, as passed (strides 0 = hidden). b is only passed to LayerNorm, r
// and ld_r only to the fused forms.
template <class T>
struct Args {
    int64_t rows = 0, hidden = 1, ld_x = 0, ld_r = 0, ld_y = 0;
    const T* x = nullptr;
    T* r = nullptr;
    const T* w = nullptr;
    const T* b = nullptr;
    T* y = nullptr;
    float eps = 1e-5f;
};

const char* fn_name(bool layer, bool fused, bool bf16) {
    static const char* const names[8] = {"xk_rms_norm_f32",           "xk_layer_norm_f32",
                                         "xk_fused_add_rms_norm_f32", "xk_fused_add_layer_norm_f32",
                                         "xk_rms_norm_bf16",          "xk_layer_norm_bf16",
                                         "xk_fused_add_rms_norm_bf16", "xk_fused_add_layer_norm_bf16"};
    return names[(layer ? 1 : 0) + (fused ? 2 : 0) + (bf16 ? 4 : 0)];
}

template <class T>
xk_status invoke(bool layer, bool fused, const Args<T>& a) {
    if constexpr (kBf16<T>) {
        if (fused)
            return layer ? xk_fused_add_layer_norm_bf16(a.rows, a.hidden, a.x, a.ld_x, a.r, a.ld_r, a.w, a.b, a.eps, a.y, a.ld_y)
                         : xk_fused_add_rms_norm_bf16(a.rows, a.hidden, a.x, a.ld_x, a.r, a.ld_r, a.w, a.eps, a.y, a.ld_y);
        return layer ? xk_layer_norm_bf16(a.rows, a.hidden, a.x, a.ld_x, a.w, a.b, a.eps, a.y, a.ld_y)
                     : xk_rms_norm_bf16(a.rows, a.hidden, a.x, a.ld_x, a.w, a.eps, a.y, a.ld_y);
    } else {
        if (fused)
            return layer ? xk_fused_add_layer_norm_f32(a.rows, a.hidden, a.x, a.ld_x, a.r, a.ld_r, a.w, a.b, a.eps, a.y, a.ld_y)
                         : xk_fused_add_rms_norm_f32(a.rows, a.hidden, a.x, a.ld_x, a.r, a.ld_r, a.w, a.eps, a.y, a.ld_y);
        return layer ? xk_layer_norm_f32(a.rows, a.hidden, a.x, a.ld_x, a.w, a.b, a.eps, a.y, a.ld_y)
                     : xk_rms_norm_f32(a.rows, a.hidden, a.x, a.ld_x, a.w, a.eps, a.y, a.ld_y);
    }
}

// What an element of the output buffer (y, or x in place) must hold after a valid call.
enum Expect : signed char {
    kKeep,   // not part of y (row padding): the bytes as before
    kValue,  // want +- tol
    kNaN,    // a NaN input reaches it (NaN propagates through any fp32 evaluation)
    kAny,    // not checked (non-finite inputs, or statistics fp32 cannot bound: see row_oracle)
};

template <class T>
struct Problem {
    bool layer = false, fused = false, in_place = false;
    Args<T> a;
    int64_t ldx = 0, ldr = 0, ldy = 0;  // resolved strides
    Buf<T> X, Y, R, W, B;               // Y unused in place (y is X)
    std::vector<unsigned char> x0, y0, r0, w0, b0;
    std::vector<signed char> expect;  // per element of out()
    std::vector<double> want, tol, tol_jit;  // tol_jit: at the JIT caps (the documented range limit)
    std::vector<T> r_want;  // the whole residual buffer after the call (fused)
    // x + residual in fp32 nonzero and below 2^-126 (bf16): that element, any element of the row
    // (flushes_bf16: documented).
    std::vector<char> r_tiny, row_tiny;

    Buf<T>& out() { return in_place ? X : Y; }
    const char* name() const { return fn_name(layer, fused, kBf16<T>); }
    void snapshot() { x0 = X.snapshot(), y0 = Y.snapshot(), r0 = R.snapshot(), w0 = W.snapshot(), b0 = B.snapshot(); }
    void restore() {
        auto put = [](Buf<T>& b, const std::vector<unsigned char>& s) { if (!s.empty()) std::memcpy(b.bytes(), s.data(), s.size()); };
        put(X, x0), put(Y, y0), put(R, r0), put(W, w0), put(B, b0);
    }
};

// A row stride as passed: 0 (= hidden), hidden, or padded; a single row may have any stride
// >= hidden (it is never applied), here 2^40.
int64_t pick_ld(In& in, int64_t hidden, int64_t rows) {
    switch (in.pick(4)) {
        case 0: return 0;
        case 1: return hidden;
        case 2: return hidden + in.p.ConsumeIntegralInRange<int64_t>(1, 5);
        default: return rows == 1 ? int64_t(1) << 40 : hidden + in.p.ConsumeIntegralInRange<int64_t>(1, 40);
    }
}

float pick_eps(In& in) {
    switch (in.pick(9)) {
        case 0: return 1e-5f;
        case 1: return 1e-6f;
        case 2: return 0.0f;
        case 3: return -0.0f;  // >= 0: valid
        case 4: return std::numeric_limits<float>::denorm_min();
        case 5: return 1.0f;
        case 6: return std::numeric_limits<float>::max();
        case 7: return 1e-30f;
        default: return static_cast<float>(in.p.ConsumeFloatingPointInRange<double>(0.0, 0.01));
    }
}

// The mean of a row of h (0 for RMSNorm); not finite when the row is not.
double row_mean(bool layer, const double* h, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m += layer ? h[i] : 0.0 * h[i];
    return m / static_cast<double>(n);
}

// The expected y of one row (row_out: its first element in `expect` / `want` / `tol`) from h.
//
// Bound. The header: fp32 arithmetic, statistics accumulated in at least fp32, y rounded once to
// its dtype. For a row of n = hidden elements, A = max |h|, exact mean m (0 for RMSNorm),
// var = mean((h - m)^2), V = var + eps, rstd = 1 / sqrt(V), a fp32 evaluation has
//   - a mean off by at most em = (n + 2) u A (a sum of n terms, the division, the rounding);
//   - a variance (with eps) off by at most verr = 4 (n + 8) u (V + em^2) + em^2 + 2^-120: a
//     recursive or lane-wise fp32 sum of n squares of rounded differences is within (n + 4) u of
//     the exact one; the variance about a mean off by d is var + d^2; a one-pass shifted sum
//     S2 - S1^2 / n, which an implementation may use where it keeps >= half of S2, is within 3x
//     that (the factor 4); squares below 2^-126 may lose up to 2^-149 each (gradual underflow);
//   - hence rstd' in [lo, hi] = [(1 - 4u) / sqrt(V + verr), (1 + 4u) / sqrt(V - verr)] (a square
//     root and a division, or double, rounded to fp32);
//   - y_i = (h_i - m') rstd' w_i + b_i with h_i - m' off by ec = em + 2u (|h_i| + |m|) + 2^-148
//     (the difference rounded, or the mean's rounding to fp32 in h rstd - m rstd; a denormal
//     mean or difference rounds to a multiple of 2^-149);
//   so |y_i' - y_i| <= |w_i| (|c_i| max(hi - rstd, rstd - lo) + ec hi) + 4u (|c_i| + ec) hi |w_i| +
//   2u (|b_i| + |y_i|) + 2^-146 (1 + |w_i|) (products and sums rounded in the denormal range,
//   2^-150 each), plus half a bf16 ulp of the result for bf16 y: 2^-8 |y| relative, 2^-134
//   (half the spacing of bf16 denormals) absolute.
// Rows where V <= verr (eps = 0 and a constant row: 0/0; rows whose squares underflow fp32) or
// rstd > 1e30 have no fp32 bound: not checked. Elements whose bound reaches the float range
// (a product overflowing before cancellation) are not checked either.
//
// tol_jit (the bound at the JIT caps) differs from tol only where llm.hpp / norm.hpp document a
// JIT range limit (the LayerNorm bias product below). fuzz_norm found the JIT LayerNorm's rows
// depending on the previous row's mean (a shift far from the row's own mean lost its digits: row
// (i % 7) - 3 after a row of 1e9 off by 3e-3); fixed in jit_norm.cpp (test_norm
// LayerNormRowAfterAFarRow), so every row is checked with the same bound at every cap.
template <class T>
void row_oracle(Problem<T>& p, const double* h, int64_t row_out) {
    const Args<T>& a = p.a;
    const int64_t n = a.hidden;
    const double nd = static_cast<double>(n);
    auto w_of = [&](int64_t i) { return a.w ? val(a.w[i]) : 1.0; };
    auto b_of = [&](int64_t i) { return a.b ? val(a.b[i]) : 0.0; };
    bool row_nan = false, row_finite = true;
    for (int64_t i = 0; i < n; ++i) {
        row_nan |= std::isnan(h[i]);
        row_finite &= std::isfinite(h[i]);
    }
    const double m = row_finite ? row_mean(p.layer, h, n) : 0.0;
    double var = 0, A = 0;
    for (int64_t i = 0; i < n && row_finite; ++i) {
        var += (h[i] - m) * (h[i] - m);
        A = std::max(A, std::fabs(h[i]));
    }
    var /= nd;
    const double V = var + static_cast<double>(a.eps), rstd = 1 / std::sqrt(V);
    // The bound of element i for a mean error em (infinite where there is none).
    auto bound = [&](double em, int64_t i, double y) {
        const double verr = 4 * (nd + 8) * kU * (V + em * em) + em * em + 0x1p-120;
        const double hi = (1 + 4 * kU) / std::sqrt(V - verr), lo = (1 - 4 * kU) / std::sqrt(V + verr);
        if (!(V > verr && hi < 1e30)) return std::numeric_limits<double>::infinity();
        const double dr = std::max(hi - rstd, rstd - lo);
        const double c = h[i] - m, w = std::fabs(w_of(i));
        const double ec = em + 2 * kU * (std::fabs(h[i]) + std::fabs(m)) + 0x1p-148;
        double t = w * (std::fabs(c) * dr + ec * hi) + 4 * kU * (std::fabs(c) + ec) * hi * w +
                   2 * kU * (std::fabs(b_of(i)) + std::fabs(y)) + 0x1p-146 * (1 + w);
        if (kBf16<T>) t += 0x1p-8 * (std::fabs(y) + t) + 0x1p-134;
        return std::fabs(y) + t < 1e38 ? t : std::numeric_limits<double>::infinity();
    };
    const double em = p.layer ? (nd + 2) * kU * A : 0.0, em_jit = em;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t o = row_out + i;
        const double w = w_of(i), b = b_of(i);
        if (row_nan || std::isnan(w) || std::isnan(b)) {
            p.expect[o] = kNaN;
            continue;
        }
        p.want[o] = (h[i] - m) * rstd * w + b;
        p.tol[o] = row_finite && std::isfinite(w) && std::isfinite(b) ? bound(em, i, p.want[o]) : std::numeric_limits<double>::infinity();
        p.tol_jit[o] = p.layer && std::isfinite(p.tol[o]) ? bound(em_jit, i, p.want[o]) : p.tol[o];
        // norm.hpp (Range): the JIT LayerNorm with a bias forms (h - mean) * weight first (then
        // * rstd + bias in one FMA), which overflows fp32 where |h - mean| |weight| >= FLT_MAX
        // although y is finite (found by fuzz_norm: x={-1e17, 0} weight={1e30, 1e30} bias={0, 0}
        // gives y={-inf, inf} at AVX2 / AVX-512). Such elements are not checked at JIT caps.
        // The same product below FLT_MIN loses its digits (fuzz_norm: x = {-6.473, -6.469},
        // w[1] = 2.66e-44, eps = 0 gives 0 for 2.66e-44: 0.002 w underflows before * 500).
        const double hw = std::fabs(h[i] - m) * std::fabs(w);
        if (p.layer && a.b && ((std::fabs(h[i] - m) + em_jit) * std::fabs(w) >= 1e38 || (w != 0 && hw < 0x1p-126)))
            p.tol_jit[o] = std::numeric_limits<double>::infinity();
        p.expect[o] = std::isfinite(p.tol[o]) ? kValue : kAny;
    }
}

// Builds a valid call of one of the eight functions, its buffers and expected results.
// (Built in place: the pointers in p.a point into p's buffers.)
template <class T>
void make_problem(In& in, bool layer, bool fused, Problem<T>& p) {
    p.layer = layer, p.fused = fused;
    Args<T>& a = p.a;
    a.hidden = in.dim(1, kMaxHidden);
    a.rows = in.dim(0, kMaxRows);
    const int64_t n = a.hidden;
    a.ld_x = pick_ld(in, n, a.rows);
    p.ldx = resolved(a.ld_x, n);
    if (fused) {
        a.ld_r = pick_ld(in, n, a.rows);
        p.ldr = resolved(a.ld_r, n);
    }
    p.in_place = in.pick(3) == 2;
    if (p.in_place) {
        a.ld_y = in.coin() ? a.ld_x : p.ldx;  // the same stride, as passed or resolved
    } else {
        a.ld_y = pick_ld(in, n, a.rows);
    }
    p.ldy = resolved(a.ld_y, n);
    a.eps = pick_eps(in);
    const bool nonfinite = in.pick(8) == 7;  // (not 0: an exhausted input reads finite zeros)
    const size_t mis = in.pick(3);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto value = [&](float big) { return nonfinite ? in.any_value(big) : in.value(big); };
    // A matrix: its elements from the input, its row padding NaN (a kernel that read padding
    // into its statistics would show).
    auto matrix = [&](Buf<T>& m, int64_t ld) {
        m = Buf<T>(static_cast<size_t>(span(a.rows, n, ld)), mis);
        for (size_t i = 0; i < m.size(); ++i) m[i] = enc<T>(static_cast<int64_t>(i) % ld < n ? value(kBigX) : nan);
    };
    matrix(p.X, p.ldx);
    if (fused) matrix(p.R, p.ldr);
    if (!p.in_place) {
        p.Y = Buf<T>(static_cast<size_t>(span(a.rows, n, p.ldy)), mis);
        p.Y.fill(enc<T>(nan));  // every element of y is written
    }
    if (in.coin()) {
        p.W = Buf<T>(n, mis);
        for (int64_t i = 0; i < n; ++i) p.W[i] = enc<T>(value(kBigW));
        a.w = p.W.data();
    }
    if (layer && in.coin()) {
        p.B = Buf<T>(n, mis);
        for (int64_t i = 0; i < n; ++i) p.B[i] = enc<T>(value(kBigW));
        a.b = p.B.data();
    }
    a.x = p.X.data();
    a.y = p.out().data();
    if (fused) a.r = p.R.data();
    if (a.rows == 0 && in.coin()) a.x = a.y = a.r = nullptr;  // nothing is read or written

    // Expected results: the residual (exact: x + residual in fp32, rounded to the dtype), y.
    Buf<T>& out = p.out();
    p.expect.assign(out.size(), kKeep);
    p.want.assign(out.size(), 0.0);
    p.tol.assign(out.size(), 0.0);
    p.tol_jit.assign(out.size(), 0.0);
    if (fused) p.r_want.assign(p.R.data(), p.R.data() + p.R.size());
    p.r_tiny.assign(p.R.size(), 0);
    p.row_tiny.assign(static_cast<size_t>(a.rows), 0);
    std::vector<double> h(static_cast<size_t>(a.rows * n));
    for (int64_t row = 0; row < a.rows; ++row) {
        for (int64_t i = 0; i < n; ++i) {
            const T xv = p.X[row * p.ldx + i];
            if (fused) {
                T& r = p.r_want[row * p.ldr + i];
                const float sum = static_cast<float>(val(xv)) + static_cast<float>(val(r));
                r = enc<T>(sum);
                h[row * n + i] = val(r);
                if (kBf16<T> && sum != 0 && std::fabs(sum) < 0x1p-126) p.r_tiny[row * p.ldr + i] = p.row_tiny[row] = 1;
            } else {
                h[row * n + i] = val(xv);
            }
        }
    }
    for (int64_t row = 0; row < a.rows; ++row) row_oracle(p, &h[row * n], row * p.ldy);
    p.snapshot();
}

// Documented in norm.hpp (Rounding; found by this target): at AVX512-BF16 (cap >= XK_ISA_AVX512_BF16) the JIT's bf16 stores
// through VCVTNEPS2BF16 flush fp32 values below 2^-126 to zero, where the header rounds to nearest
// even (bf16 has denormals): xk_rms_norm_bf16(rows=1, hidden=7, x all 0x0040 (2^-127), ld_x=0,
// weight=NULL, eps=1, y, ld_y=0) gives y = 0, want 2^-127; xk_fused_add_layer_norm_bf16(rows=2,
// hidden=16, x all 0x0040, ld_x=0, residual all 0, ld_r=0, NULL, NULL, eps=1, y, 0) leaves
// residual = 0, want 0x0040 (and its norm sees 0). At that cap a bf16 y or residual element whose
// fp32 value is below 2^-126 may be 0, and y of a fused row with such a sum is not checked.
template <class T>
bool flushes_bf16(xk_isa cap) {
    return kBf16<T> && cap >= XK_ISA_AVX512_BF16;
}

// y[i] = got accepted as flushed (flushes_bf16)?
template <class T>
bool flushed(const Problem<T>& p, xk_isa cap, size_t i, double got, double tol) {
    return flushes_bf16<T>(cap) && ((got == 0 && std::fabs(p.want[i]) < 0x1p-126 + tol) || p.row_tiny[i / p.ldy]);
}

// Checks every buffer after a valid call run with that cap.
template <class T>
void check_valid(Problem<T>& p, xk_isa cap) {
    const Args<T>& a = p.a;
    const std::vector<double>& tol = cap == XK_ISA_SCALAR ? p.tol : p.tol_jit;
    std::string what = std::string(p.name()) + (cap == XK_ISA_SCALAR ? " (scalar)" : "");
    const char* w = what.c_str();
    fz::expect_guards(p.X, w, "x");
    fz::expect_guards(p.Y, w, "y");
    fz::expect_unchanged(p.W, p.w0, w, "weight");  // inputs are never written
    fz::expect_unchanged(p.B, p.b0, w, "bias");
    if (!p.in_place) fz::expect_unchanged(p.X, p.x0, w, "x");
    if (p.fused) {
        fz::expect_guards(p.R, w, "residual");
        for (size_t i = 0; i < p.R.size(); ++i)
            if (!same_value(p.R[i], p.r_want[i]) && !(flushes_bf16<T>(cap) && p.r_tiny[i] && val(p.R[i]) == 0))
                fz::finding("%s: residual[%zu] = %.9g (bits %#x), want %.9g (bits %#x) = x + residual rounded; rows=%lld "
                            "hidden=%lld ld_x=%lld ld_r=%lld",
                            w, i, val(p.R[i]), static_cast<unsigned>(p.R[i]), val(p.r_want[i]),
                            static_cast<unsigned>(p.r_want[i]), static_cast<long long>(a.rows),
                            static_cast<long long>(a.hidden), static_cast<long long>(a.ld_x), static_cast<long long>(a.ld_r));
    }
    Buf<T>& out = p.out();
    const std::vector<unsigned char>& before = p.in_place ? p.x0 : p.y0;
    for (size_t i = 0; i < out.size(); ++i) {
        const double got = val(out[i]);
        bool ok = true;
        switch (p.expect[i]) {
            case kKeep: ok = std::memcmp(out.bytes() + i * sizeof(T), before.data() + i * sizeof(T), sizeof(T)) == 0; break;
            case kNaN: ok = std::isnan(got); break;
            case kValue: ok = std::isinf(tol[i]) || fz::close(got, p.want[i], 0, tol[i]) || flushed(p, cap, i, got, tol[i]); break;
            default: break;
        }
        if (!ok) {
            // The row's first elements (x, weight, bias), for the report.
            const int64_t row = static_cast<int64_t>(i) / p.ldy;
            for (int64_t j = 0; j < std::min<int64_t>(a.hidden, 6); ++j)
                std::fprintf(stderr, "  x[%lld][%lld] = %.9g w %.9g b %.9g\n", static_cast<long long>(row), static_cast<long long>(j),
                             val(p.X[row * p.ldx + j]), a.w ? val(a.w[j]) : 1.0, a.b ? val(a.b[j]) : 0.0);
            fz::finding("%s: y[%zu] (row %lld, col %lld) = %.9g, want %s %.9g (+- %.3g); rows=%lld hidden=%lld ld_x=%lld "
                        "ld_y=%lld ld_r=%lld in_place=%d weight=%d bias=%d eps=%g",
                        w, i, static_cast<long long>(i / p.ldy), static_cast<long long>(i % p.ldy), got,
                        p.expect[i] == kKeep ? "unchanged" : p.expect[i] == kNaN ? "NaN" : "", p.want[i], tol[i],
                        static_cast<long long>(a.rows), static_cast<long long>(a.hidden), static_cast<long long>(a.ld_x),
                        static_cast<long long>(a.ld_y), static_cast<long long>(a.ld_r), p.in_place, a.w != nullptr,
                        a.b != nullptr, static_cast<double>(a.eps));
        }
    }
}

// True when the sizes alone make the call invalid: a stride below hidden, or a matrix extent
// (rows - 1) * ld + hidden beyond int64.
template <class T>
bool sizes_rejected(const Problem<T>& p, const Args<T>& a) {
    if (a.rows < 0 || a.hidden < 1) return true;
    auto bad = [&](int64_t ld) {
        const int64_t r = resolved(ld, a.hidden);
        if (r < a.hidden) return true;
        return a.rows > 0 && static_cast<__int128>(a.rows - 1) * r + a.hidden > std::numeric_limits<int64_t>::max();
    };
    return bad(a.ld_x) || bad(a.ld_y) || (p.fused && bad(a.ld_r));
}

// Makes exactly one argument of a valid call wrong (as the header defines it); returns what.
template <class T>
const char* spoil(In& in, Problem<T>& p) {
    Args<T>& a = p.a;
    const bool any = a.rows > 0 && a.x != nullptr;
    const int64_t n = a.hidden;
    T* out = p.out().data();
    switch (in.pick(12)) {
        case 0: a.rows = in.coin() ? -1 - in.pick(5) : std::numeric_limits<int64_t>::min(); return "rows < 0";
        case 1: a.hidden = in.coin() ? 0 : -1 - in.pick(300); return "hidden < 1";
        case 2: {  // a row stride below hidden (0 means hidden: never 0 here)
            const int64_t v = n >= 2 && in.coin() ? 1 + in.pick(static_cast<int>(n - 1)) : -1 - in.pick(3);
            const int k = in.pick(p.fused ? 3 : 2);
            (k == 0 ? a.ld_x : k == 1 ? a.ld_y : a.ld_r) = v;
            return k == 0 ? "ld_x < hidden" : k == 1 ? "ld_y < hidden" : "ld_residual < hidden";
        }
        case 3: {
            static const float bad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(), -1e-5f,
                                        -std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::max()};
            a.eps = bad[in.pick(6)];
            return "eps not finite or < 0";
        }
        case 4: if (any) { a.x = nullptr; return "x null"; } [[fallthrough]];
        case 5: if (any) { a.y = nullptr; return "y null"; } [[fallthrough]];
        case 6: if (any && p.fused) { a.r = nullptr; return "residual null"; } [[fallthrough]];
        case 7:  // y overlapping x other than exactly (in place needs the same pointer and stride)
            if (any && p.in_place && a.rows >= 2) { a.ld_y = p.ldx + 1 + in.pick(3); return "y == x with another stride"; }
            if (any && !p.in_place && n >= 2) { a.y = const_cast<T*>(a.x) + 1 + in.pick(static_cast<int>(n - 1)); a.ld_y = a.ld_x; return "y partially overlaps x"; }
            [[fallthrough]];
        case 8: if (any && a.w) { a.w = out + in.pick(static_cast<int>(n)); return "weight overlaps y"; } [[fallthrough]];
        case 9: if (any && a.b) { a.b = out + in.pick(static_cast<int>(n)); return "bias overlaps y"; } [[fallthrough]];
        case 10: if (any && p.fused) { a.r = out + in.pick(static_cast<int>(n)); return "residual overlaps y"; } [[fallthrough]];
        case 11: if (any && p.fused && !p.in_place) { a.r = const_cast<T*>(a.x) + in.pick(static_cast<int>(n)); return "residual overlaps x"; } [[fallthrough]];
        default: {
            // A negative or huge size. A huge one that is representable (the extents fit in int64)
            // comes with a null x (rows > 0): the call is invalid and must be rejected at once.
            const int64_t v = in.bad_size();
            const bool rows = a.rows == 0 || in.coin();
            (rows ? a.rows : a.hidden) = v;
            if (sizes_rejected(p, a)) return rows ? "rows < 0 or extent overflowing" : "hidden < 1, above a stride, or extent overflowing";
            a.x = nullptr;
            return rows ? "huge rows, x null" : "huge hidden, x null";
        }
    }
}

template <class T>
void op_norm(In& in, bool layer, bool fused) {
    Problem<T> p;
    make_problem(in, layer, fused, p);
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    const char* what = p.name();
    if (hostile) {
        const char* wrong = spoil(in, p);
        const xk_status s = fz::timed(what, [&] { return invoke<T>(layer, fused, p.a); });
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(p.X, p.x0, what, "x");
        fz::expect_unchanged(p.Y, p.y0, what, "y");
        fz::expect_unchanged(p.R, p.r0, what, "residual");
        fz::expect_unchanged(p.W, p.w0, what, "weight");
        fz::expect_unchanged(p.B, p.b0, what, "bias");
        return;
    }
    xk_isa cap = XK_ISA_SCALAR;
    xk_get_max_isa(&cap);
    fz::expect_ok(fz::timed(what, [&] { return invoke<T>(layer, fused, p.a); }), what);
    check_valid(p, cap);
    // The same call with the cap at scalar (the reference): checked alike, and the two results
    // within the sum of their bounds of each other.
    if (cap == XK_ISA_SCALAR) return;
    const Buf<T> jit_out = p.out();
    p.restore();
    fz::set_cap(XK_ISA_SCALAR);
    const xk_status s = fz::timed(what, [&] { return invoke<T>(layer, fused, p.a); });
    fz::set_cap(cap);
    fz::expect_ok(s, what);
    check_valid(p, XK_ISA_SCALAR);
    const Buf<T>& ref = p.out();
    for (size_t i = 0; i < ref.size(); ++i) {
        const double j = val(jit_out[i]), r = val(ref[i]);
        const double t = p.tol[i] + p.tol_jit[i];
        if (p.expect[i] == kValue && !std::isinf(t) && !fz::close(j, r, 0, t) && !flushed(p, cap, i, j, t))
            fz::finding("%s: y[%zu] = %.9g at isa %d, %.9g at scalar (+- %.3g); rows=%lld hidden=%lld eps=%g", what, i, j,
                        static_cast<int>(cap), r, t, static_cast<long long>(p.a.rows),
                        static_cast<long long>(p.a.hidden), static_cast<double>(p.a.eps));
    }
}

// Huge sizes: rows = 0 with any hidden is a no-op (valid, nothing touched, at once); a huge
// representable rows count with a null pointer is rejected at once; never out of memory.
template <class T>
void op_huge(In& in, bool layer, bool fused) {
    static const int64_t huge[] = {int64_t(1) << 32, int64_t(3) << 31, int64_t(1) << 40, int64_t(1) << 62,
                                   std::numeric_limits<int64_t>::max()};
    Buf<T> x(4), y(4), r(4), w(4);
    x.fill(enc<T>(1.0f)), y.fill(enc<T>(2.0f)), r.fill(enc<T>(3.0f)), w.fill(enc<T>(4.0f));
    const auto x0 = x.snapshot(), y0 = y.snapshot(), r0 = r.snapshot();
    Args<T> a;
    a.x = x.data(), a.y = y.data(), a.r = fused ? r.data() : nullptr, a.w = in.coin() ? w.data() : nullptr;
    const char* what = fn_name(layer, fused, kBf16<T>);
    const bool noop = in.coin();
    const char* wrong = "";
    if (noop) {
        a.rows = 0;
        a.hidden = huge[in.pick(5)];
        if (in.coin()) a.ld_x = a.ld_y = a.ld_r = std::numeric_limits<int64_t>::max();
    } else {
        a.rows = huge[in.pick(5)];
        a.hidden = in.coin() ? 1 + in.pick(300) : huge[in.pick(3)];
        switch (in.pick(3)) {
            case 0: a.x = nullptr; wrong = "huge rows, x null"; break;
            case 1: a.y = nullptr; wrong = "huge rows, y null"; break;
            default:
                if (fused) { a.r = nullptr; wrong = "huge rows, residual null"; }
                else { a.x = nullptr; wrong = "huge rows, x null"; }
        }
    }
    const xk_status s = fz::timed(what, [&] { return invoke<T>(layer, fused, a); });
    if (s == XK_OUT_OF_MEMORY) fz::finding("%s: rows=%lld hidden=%lld ran out of memory", what, static_cast<long long>(a.rows), static_cast<long long>(a.hidden));
    if (noop) fz::expect_ok(s, what);
    else fz::expect_rejected(s, what, wrong);
    fz::expect_unchanged(x, x0, what, "x");
    fz::expect_unchanged(y, y0, what, "y");
    fz::expect_unchanged(r, r0, what, "residual");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        const int op = in.pick(10);
        if (op == 0) { fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); continue; }
        if (op == 1) { xk_set_num_threads(1 + in.pick(2)); continue; }
        const int f = in.pick(8);  // which of the eight functions
        const bool layer = f & 1, fused = f & 2, bf16 = f & 4;
        if (op == 2) {
            if (bf16) op_huge<uint16_t>(in, layer, fused);
            else op_huge<float>(in, layer, fused);
        } else if (bf16) {
            op_norm<uint16_t>(in, layer, fused);
        } else {
            op_norm<float>(in, layer, fused);
        }
    }
    return 0;
}
