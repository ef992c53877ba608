// libFuzzer target: the gemm family of the C API (include/xk/c/gemm.h). See fuzz_common.hpp for
// the scheme. Calls: the BLAS-style functions (xk_sgemm, xk_gemm_bf16f32 / bf16bf16, the four
// int8 ones), xk_gemm (one-shot with a descriptor), plans (create, run, pack_b + run_packed, run
// again with new data, destroy), plans of huge but representable shapes (created, never run:
// must be quick), ISA cap and thread count changes. Valid calls are checked against a double-
// precision loop of gemm.hpp's math with an error bound from sum |a b|.
#include <algorithm>
#include <memory>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

// The products' inputs stay below 1e15 in magnitude (extreme, yet no fp32 product or sum of up to
// 40 of them overflows, so the double oracle and fp32 agree on what is finite).
constexpr float kBig = 1e15f;
constexpr int64_t kMaxDim = 40;

struct Combo {
    xk_dtype a, b, c;
};
const Combo kCombos[] = {{XK_DTYPE_F32, XK_DTYPE_F32, XK_DTYPE_F32},  {XK_DTYPE_BF16, XK_DTYPE_BF16, XK_DTYPE_F32},
                         {XK_DTYPE_BF16, XK_DTYPE_BF16, XK_DTYPE_BF16}, {XK_DTYPE_U8, XK_DTYPE_S8, XK_DTYPE_S32},
                         {XK_DTYPE_S8, XK_DTYPE_S8, XK_DTYPE_S32},     {XK_DTYPE_U8, XK_DTYPE_S8, XK_DTYPE_F32},
                         {XK_DTYPE_S8, XK_DTYPE_S8, XK_DTYPE_F32}};

int esize(xk_dtype t) { return t == XK_DTYPE_F32 || t == XK_DTYPE_S32 ? 4 : t == XK_DTYPE_BF16 ? 2 : 1; }

// A typed matrix in a guarded byte buffer (elements of esize(t)).
struct Mat {
    xk_dtype t = XK_DTYPE_F32;
    int64_t n = 0;  // elements
    Buf<unsigned char> buf;
    Mat() = default;
    Mat(xk_dtype t_, int64_t n_, size_t mis) : t(t_), n(n_), buf(static_cast<size_t>(n_) * esize(t_) + 0, mis * esize(t_)) {}
    void* data() { return buf.data(); }
    double get(int64_t i) const {
        const unsigned char* p = buf.data() + i * esize(t);
        switch (t) {
            case XK_DTYPE_F32: { float f; std::memcpy(&f, p, 4); return f; }
            case XK_DTYPE_BF16: { uint16_t b; std::memcpy(&b, p, 2); return fz::from_bf16(b); }
            case XK_DTYPE_S8: return static_cast<int8_t>(*p);
            case XK_DTYPE_U8: return *p;
            case XK_DTYPE_S32: { int32_t v; std::memcpy(&v, p, 4); return v; }
        }
        return 0;
    }
    void set(int64_t i, double v) {
        unsigned char* p = buf.data() + i * esize(t);
        switch (t) {
            case XK_DTYPE_F32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
            case XK_DTYPE_BF16: { const uint16_t b = fz::to_bf16(static_cast<float>(v)); std::memcpy(p, &b, 2); break; }
            case XK_DTYPE_S8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
            case XK_DTYPE_U8: *p = static_cast<unsigned char>(v); break;
            case XK_DTYPE_S32: { const int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
        }
    }
};

using fz::act_exact;

// One problem: a valid descriptor, its operands and expected output.
struct Problem {
    xk_gemm_desc d{};
    Mat A, B, C, R;
    Buf<float> bias, b_scales;
    float a_scale = 1;
    int32_t azp = 0, bzp = 0;
    bool finite = true;  // every input finite (else only status and guards are checked)
    std::vector<double> want, tol;
    std::vector<unsigned char> c_before;
};

int64_t min_ld_a(const xk_gemm_desc& d) { return d.trans_a == XK_TRANS_N ? d.K : d.M; }
int64_t min_ld_b(const xk_gemm_desc& d) { return d.trans_b == XK_TRANS_N ? d.N : d.K; }
int64_t rows_a(const xk_gemm_desc& d) { return d.trans_a == XK_TRANS_N ? d.M : d.K; }
int64_t rows_b(const xk_gemm_desc& d) { return d.trans_b == XK_TRANS_N ? d.K : d.N; }
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

bool is_int8(xk_dtype t) { return t == XK_DTYPE_U8 || t == XK_DTYPE_S8; }

float input_value(In& in, bool allow_nonfinite, bool* finite) {
    const float v = allow_nonfinite ? in.any_value(kBig) : in.value(kBig);
    if (!std::isfinite(v)) *finite = false;
    return v;
}

// Builds a valid problem (blas: the form of the BLAS-style functions — no epilogue, f32 alpha /
// beta only where they exist).
Problem make_problem(In& in, bool blas) {
    Problem p;
    xk_gemm_desc_init(&p.d);
    xk_gemm_desc& d = p.d;
    const Combo cb = kCombos[in.pick(7)];
    d.a_type = cb.a, d.b_type = cb.b, d.c_type = cb.c;
    d.M = in.dim(0, kMaxDim), d.N = in.dim(0, kMaxDim), d.K = in.dim(0, kMaxDim);
    d.trans_a = in.coin() ? XK_TRANS_T : XK_TRANS_N;
    d.trans_b = in.coin() ? XK_TRANS_T : XK_TRANS_N;
    auto ld = [&](int64_t min) { const int64_t pad = in.pad(); return pad == 0 ? (in.coin() ? 0 : min) : min + pad; };
    d.lda = ld(min_ld_a(d)), d.ldb = ld(min_ld_b(d)), d.ldc = ld(d.N);
    const bool s32 = d.c_type == XK_DTYPE_S32;
    const bool nonfinite = in.pick(8) == 7 && !is_int8(d.a_type);
    if (s32) {
        d.alpha = 1.0f;
        d.beta = in.coin() ? 1.0f : 0.0f;
    } else {
        const int ak = in.pick(4);
        d.alpha = ak == 0 ? 1.0f : ak == 1 ? -0.5f : static_cast<float>(in.value(1e3f));
        const int bk = in.pick(4);
        d.beta = bk == 0 ? 0.0f : bk == 1 ? 1.0f : static_cast<float>(in.value(1e3f));
        if (!blas) {
            d.bias = in.coin();
            d.act = static_cast<xk_activation>(in.pick(5));
            d.residual = in.pick(3) == 0;
            d.residual_type = in.coin() ? XK_DTYPE_BF16 : XK_DTYPE_F32;
            d.ld_residual = ld(d.N);
        }
        if (is_int8(d.a_type)) d.b_scale_per_channel = in.coin();
    }
    const int64_t lda = d.lda ? d.lda : min_ld_a(d), ldb = d.ldb ? d.ldb : min_ld_b(d), ldc = d.ldc ? d.ldc : d.N;
    const int64_t ldr = d.ld_residual ? d.ld_residual : d.N;
    const size_t mis = in.pick(3);
    p.A = Mat(d.a_type, span(rows_a(d), min_ld_a(d), lda), mis);
    p.B = Mat(d.b_type, span(rows_b(d), min_ld_b(d), ldb), mis);
    p.C = Mat(d.c_type, span(d.M, d.N, ldc), mis);
    for (int64_t i = 0; i < p.A.n; ++i) {
        if (is_int8(d.a_type)) p.A.set(i, d.a_type == XK_DTYPE_U8 ? in.pick(256) : in.pick(256) - 128);
        else p.A.set(i, input_value(in, nonfinite, &p.finite));
    }
    for (int64_t i = 0; i < p.B.n; ++i) {
        if (is_int8(d.b_type)) p.B.set(i, in.pick(256) - 128);
        else p.B.set(i, input_value(in, nonfinite, &p.finite));
    }
    // C: read only when beta != 0 (beta == 0: NaN there must not leak).
    for (int64_t i = 0; i < p.C.n; ++i) {
        if (s32) p.C.set(i, in.pick(2001) - 1000);
        else if (d.beta == 0.0f && in.coin()) p.C.set(i, std::numeric_limits<double>::quiet_NaN());
        else p.C.set(i, input_value(in, nonfinite, &p.finite));
    }
    if (d.bias) {
        p.bias = Buf<float>(d.N, mis);
        for (int64_t i = 0; i < d.N; ++i) p.bias[i] = input_value(in, nonfinite, &p.finite);
    }
    if (d.residual) {
        p.R = Mat(d.residual_type, span(d.M, d.N, ldr), mis);
        for (int64_t i = 0; i < p.R.n; ++i) p.R.set(i, input_value(in, nonfinite, &p.finite));
    }
    if (is_int8(d.a_type)) {
        p.azp = d.a_type == XK_DTYPE_U8 ? in.pick(256) : in.pick(256) - 128;
        p.bzp = in.pick(256) - 128;
        if (in.pick(3) == 0) p.azp = 0, p.bzp = 0;
        if (d.c_type == XK_DTYPE_F32) {
            p.a_scale = std::ldexp(1.0f + in.pick(100) / 100.0f, in.pick(40) - 30);
            const int64_t nb = d.b_scale_per_channel ? d.N : 1;
            p.b_scales = Buf<float>(std::max<int64_t>(nb, 1), mis);
            for (int64_t i = 0; i < nb; ++i) p.b_scales[i] = std::ldexp(1.0f + in.pick(100) / 100.0f, in.pick(40) - 30);
        }
    }

    // The expected C (double) and its error bound.
    const int64_t M = d.M, N = d.N, K = d.K;
    p.want.assign(p.C.n, 0.0);
    p.tol.assign(p.C.n, 0.0);
    for (int64_t i = 0; i < p.C.n; ++i) p.want[i] = p.C.get(i);  // untouched between rows (ldc padding)
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0, sabs = 0;
            int64_t iacc = 0;
            for (int64_t k = 0; k < K; ++k) {
                const double a = p.A.get(d.trans_a == XK_TRANS_N ? m * lda + k : k * lda + m);
                const double b = p.B.get(d.trans_b == XK_TRANS_N ? k * ldb + n : n * ldb + k);
                if (is_int8(d.a_type)) iacc += static_cast<int64_t>(a - p.azp) * static_cast<int64_t>(b - p.bzp);
                else acc += a * b, sabs += std::fabs(a * b);
            }
            const int64_t ci = m * ldc + n;
            const double c0 = p.C.get(ci);
            if (s32) {
                p.want[ci] = static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(
                    (d.beta == 1.0f ? static_cast<int64_t>(c0) : 0) + iacc)));
                continue;
            }
            constexpr double u = 0x1p-24;
            double x, e;
            if (is_int8(d.a_type)) {
                const double s = static_cast<double>(d.alpha) * p.a_scale * p.b_scales[d.b_scale_per_channel ? n : 0];
                x = s * static_cast<double>(iacc);
                e = 4 * u * std::fabs(x);
            } else {
                x = d.alpha * acc;
                e = std::fabs(d.alpha) * (K + 2) * 2 * u * sabs + 2 * u * std::fabs(x);
            }
            if (d.beta != 0.0f) {
                x += static_cast<double>(d.beta) * c0;
                e += 2 * u * (std::fabs(static_cast<double>(d.beta) * c0) + std::fabs(x));
            }
            if (d.bias) {
                x += p.bias[n];
                e += 2 * u * std::fabs(x);
            }
            if (d.act != XK_ACT_NONE) {
                // Lipschitz <= 1.13 (gelu), and the activations' own few ulps (relative to x: a
                // tiny result of a large negative x carries the absolute error of its argument).
                const double y = act_exact(d.act, x);
                e = 1.2 * e + 64 * u * (std::fabs(y) + (d.act == XK_ACT_RELU ? 0.0 : std::fabs(x) * 0.25));
                x = y;
            }
            if (d.residual) {
                x += p.R.get(m * ldr + n);
                e += 2 * u * std::fabs(x);
            }
            e += 1e-37;  // denormal results (flushed or not)
            if (d.c_type == XK_DTYPE_BF16) e += 0x1p-8 * std::fabs(x) + e * 0x1p-8;
            p.want[ci] = x;
            p.tol[ci] = e;
        }
    p.c_before = p.C.buf.snapshot();
    return p;
}

xk_gemm_args args_of(Problem& p) {
    xk_gemm_args a;
    xk_gemm_args_init(&a);
    a.A = p.A.data(), a.B = p.B.data(), a.C = p.C.data();
    a.bias = p.d.bias ? p.bias.data() : nullptr;
    a.residual = p.d.residual ? p.R.data() : nullptr;
    if (p.d.c_type == XK_DTYPE_F32 && is_int8(p.d.a_type)) a.a_scale = &p.a_scale, a.b_scales = p.b_scales.data();
    a.a_zero_point = p.azp, a.b_zero_point = p.bzp;
    return a;
}

void check_output(Problem& p, const char* what) {
    fz::expect_guards(p.C.buf, what, "C");
    if (!p.finite) return;
    for (int64_t i = 0; i < p.C.n; ++i) {
        const double got = p.C.get(i), want = p.want[i];
        if (std::isnan(want) && std::isnan(got)) continue;
        if (!fz::close(got, want, 0, p.tol[i]))
            fz::finding("%s: C[%lld] = %.9g, want %.9g (+- %.3g); M=%lld N=%lld K=%lld types %d,%d->%d ta=%d tb=%d lda=%lld "
                        "ldb=%lld ldc=%lld alpha=%g beta=%g bias=%d act=%d residual=%d(%d)",
                        what, static_cast<long long>(i), got, want, p.tol[i], static_cast<long long>(p.d.M),
                        static_cast<long long>(p.d.N), static_cast<long long>(p.d.K), p.d.a_type, p.d.b_type, p.d.c_type,
                        p.d.trans_a, p.d.trans_b, static_cast<long long>(p.d.lda), static_cast<long long>(p.d.ldb),
                        static_cast<long long>(p.d.ldc), p.d.alpha, p.d.beta, p.d.bias, p.d.act, p.d.residual,
                        p.d.residual_type);
    }
}

// The BLAS-style function for p's types (p built with blas = true).
xk_status blas_call(Problem& p, const xk_trans& ta, const xk_trans& tb, int64_t M, int64_t N, int64_t K,
                    const void* A, const void* B, void* C, const float* b_scales, const float* a_scale_p) {
    const xk_gemm_desc& d = p.d;
    const float a_scale = a_scale_p ? *a_scale_p : p.a_scale;
    if (d.a_type == XK_DTYPE_F32)
        return xk_sgemm(ta, tb, M, N, K, d.alpha, static_cast<const float*>(A), d.lda, static_cast<const float*>(B), d.ldb,
                        d.beta, static_cast<float*>(C), d.ldc);
    if (d.a_type == XK_DTYPE_BF16) {
        if (d.c_type == XK_DTYPE_F32)
            return xk_gemm_bf16f32(ta, tb, M, N, K, d.alpha, static_cast<const uint16_t*>(A), d.lda,
                                   static_cast<const uint16_t*>(B), d.ldb, d.beta, static_cast<float*>(C), d.ldc);
        return xk_gemm_bf16bf16(ta, tb, M, N, K, d.alpha, static_cast<const uint16_t*>(A), d.lda,
                                static_cast<const uint16_t*>(B), d.ldb, d.beta, static_cast<uint16_t*>(C), d.ldc);
    }
    const int8_t* Bs = static_cast<const int8_t*>(B);
    if (d.c_type == XK_DTYPE_S32) {
        if (d.a_type == XK_DTYPE_U8)
            return xk_gemm_u8s8s32(ta, tb, M, N, K, static_cast<const uint8_t*>(A), d.lda, p.azp, Bs, d.ldb, p.bzp, d.beta,
                                   static_cast<int32_t*>(C), d.ldc);
        return xk_gemm_s8s8s32(ta, tb, M, N, K, static_cast<const int8_t*>(A), d.lda, p.azp, Bs, d.ldb, p.bzp, d.beta,
                               static_cast<int32_t*>(C), d.ldc);
    }
    if (d.a_type == XK_DTYPE_U8)
        return xk_gemm_u8s8f32(ta, tb, M, N, K, d.alpha, static_cast<const uint8_t*>(A), d.lda, a_scale, p.azp, Bs, d.ldb,
                               b_scales, d.b_scale_per_channel, p.bzp, d.beta, static_cast<float*>(C), d.ldc);
    return xk_gemm_s8s8f32(ta, tb, M, N, K, d.alpha, static_cast<const int8_t*>(A), d.lda, a_scale, p.azp, Bs, d.ldb,
                           b_scales, d.b_scale_per_channel, p.bzp, d.beta, static_cast<float*>(C), d.ldc);
}

void op_blas(In& in) {
    Problem p = make_problem(in, true);
    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    xk_trans ta = p.d.trans_a, tb = p.d.trans_b;
    int64_t M = p.d.M, N = p.d.N, K = p.d.K;
    const void* A = p.A.data();
    const void* B = p.B.data();
    void* C = p.C.data();
    const float* bs = p.b_scales.size() ? p.b_scales.data() : nullptr;
    float bad_scale = 0;
    const float* as = nullptr;
    const char* wrong = "";
    if (hostile) {
        const bool any = M > 0 && N > 0, ab = any && K > 0;
        const bool dequant = is_int8(p.d.a_type) && p.d.c_type == XK_DTYPE_F32;
        switch (in.pick(9)) {
            case 0: { const int64_t v = -1 - in.pick(5); (in.pick(3) == 0 ? M : in.coin() ? N : K) = v; wrong = "negative size"; break; }
            case 1: { int v = in.bad_enum(2); std::memcpy(in.coin() ? &ta : &tb, &v, 4); wrong = "trans enum"; break; }
            case 2: if (ab) { A = nullptr; wrong = "A null"; break; } [[fallthrough]];
            case 3: if (ab) { B = nullptr; wrong = "B null"; break; } [[fallthrough]];
            case 4: if (any) { C = nullptr; wrong = "C null"; break; } [[fallthrough]];
            case 5:
                if (is_int8(p.d.a_type)) {
                    p.azp = in.coin() ? 300 + in.pick(100) : -200 - in.pick(100);
                    wrong = "a_zero_point out of range";
                    break;
                }
                [[fallthrough]];
            case 6:
                if (dequant && any) {
                    static const float bads[] = {0.0f, -0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                                                 std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
                    bad_scale = bads[in.pick(6)];
                    if (in.coin()) { as = &bad_scale; wrong = "a_scale invalid"; }
                    else { p.b_scales[in.pick(static_cast<int>(p.d.b_scale_per_channel ? N : 1))] = bad_scale; wrong = "b_scales invalid"; }
                    break;
                }
                [[fallthrough]];
            case 7:
                if (min_ld_a(p.d) >= 2) { p.d.lda = min_ld_a(p.d) - 1; wrong = "lda too small"; break; }
                [[fallthrough]];
            default:
                M = N = int64_t(1) << 33;  // M * ldc overflows int64
                p.d.ldc = 0;
                wrong = "M*N overflows";
                break;
        }
    }
    const xk_status s = fz::timed("gemm blas", [&] { return blas_call(p, ta, tb, M, N, K, A, B, C, bs, as); });
    if (hostile) {
        fz::expect_rejected(s, "gemm blas", wrong);
        fz::expect_unchanged(p.C.buf, p.c_before, "gemm blas", "C");
    } else {
        fz::expect_ok(s, "gemm blas");
        check_output(p, "gemm blas");
    }
}

// Hostile descriptor fields (the plan / one-shot must reject them).
const char* spoil_desc(In& in, xk_gemm_desc& d) {
    switch (in.pick(10)) {
        case 0: { int v = in.bad_enum(2); std::memcpy(in.coin() ? &d.trans_a : &d.trans_b, &v, 4); return "trans enum"; }
        case 1: { int v = in.bad_enum(6); std::memcpy(in.pick(3) == 0 ? &d.a_type : in.coin() ? &d.b_type : &d.c_type, &v, 4); return "dtype enum"; }
        case 2: { int v = in.bad_enum(5); std::memcpy(&d.act, &v, 4); return "act enum"; }
        case 3: if (d.c_type != XK_DTYPE_S32) { int v = in.bad_enum(6); d.residual = 1; std::memcpy(&d.residual_type, &v, 4); return "residual_type enum"; } [[fallthrough]];
        case 4: { (in.pick(3) == 0 ? d.M : in.coin() ? d.N : d.K) = -1 - in.pick(1000); return "negative size"; }
        case 5: d.a_type = XK_DTYPE_F32, d.b_type = XK_DTYPE_BF16; return "f32 x bf16";
        case 6: if (d.c_type == XK_DTYPE_S32) { d.alpha = 2.0f; return "alpha != 1 with s32"; } [[fallthrough]];
        case 7: if (d.c_type == XK_DTYPE_S32) { d.bias = 1; return "bias with s32"; } [[fallthrough]];
        case 8: if (min_ld_a(d) >= 2) { d.lda = min_ld_a(d) - 1; return "lda too small"; } [[fallthrough]];
        default: d.M = d.N = int64_t(1) << 33; d.ldc = 0; return "M*N overflows";
    }
}

void op_desc(In& in) {
    Problem p = make_problem(in, false);
    const int form = in.pick(3);  // 0 one-shot, 1 plan + run, 2 plan + pack_b + run_packed
    const int hostile = 2 - in.pick(4);  // 2, 1: valid, 0: the descriptor, -1: the arguments
    xk_gemm_args a = args_of(p);
    const char* wrong = "";
    if (hostile == 0) wrong = spoil_desc(in, p.d);
    const bool any = p.d.M > 0 && p.d.N > 0, ab = any && p.d.K > 0;
    std::vector<unsigned char> a_before;
    if (hostile == -1) {
        const bool dequant = is_int8(p.d.a_type) && p.d.c_type == XK_DTYPE_F32;
        switch (in.pick(7)) {
            case 0: if (ab) { a.A = nullptr; wrong = "A null"; break; } [[fallthrough]];
            case 1: if (any) { a.C = nullptr; wrong = "C null"; break; } [[fallthrough]];
            case 2: if (any && p.d.bias) { a.bias = nullptr; wrong = "bias null"; break; } [[fallthrough]];
            case 3: if (any && p.d.residual) { a.residual = nullptr; wrong = "residual null"; break; } [[fallthrough]];
            case 4: if (dequant && any) { p.b_scales[0] = -1.0f; wrong = "b_scales[0] = -1"; break; } [[fallthrough]];
            case 5:
                if (ab && p.A.n * esize(p.d.a_type) >= 4 && p.d.c_type != XK_DTYPE_BF16) {  // C over A
                    a.C = p.A.data();
                    a_before = p.A.buf.snapshot();
                    wrong = "C overlaps A";
                    break;
                }
                [[fallthrough]];
            default:
                if (is_int8(p.d.a_type)) { a.b_zero_point = 128 + in.pick(10); wrong = "b_zero_point out of range"; break; }
                if (ab && form != 2) { a.B = nullptr; wrong = "B null"; break; }
                if (any) { a.C = nullptr; wrong = "C null"; break; }
                wrong = "";
        }
    }
    const bool expect_fail = wrong[0] != '\0';
    const char* what = form == 0 ? "xk_gemm" : form == 1 ? "gemm plan run" : "gemm plan run_packed";
    xk_status s;
    if (form == 0) {
        s = fz::timed(what, [&] { return xk_gemm(&p.d, &a); });
    } else {
        xk_gemm_plan* plan = reinterpret_cast<xk_gemm_plan*>(1);
        s = fz::timed("xk_gemm_plan_create", [&] { return xk_gemm_plan_create(&p.d, &plan); });
        if (s != XK_SUCCESS) {
            if (plan != nullptr) fz::finding("xk_gemm_plan_create failed but left *plan non-null");
            if (hostile != 0) fz::expect_ok(s, "xk_gemm_plan_create");  // (only the descriptor is wrong)
        } else {
            if (hostile == 0) fz::expect_rejected(s, "xk_gemm_plan_create", wrong);
            if (form == 1) {
                s = fz::timed(what, [&] { return xk_gemm_plan_run(plan, &a); });
            } else {
                xk_gemm_packed_b* packed = nullptr;
                const xk_status sp = fz::timed("xk_gemm_plan_pack_b", [&] { return xk_gemm_plan_pack_b(plan, p.B.data(), &packed); });
                fz::expect_ok(sp, "xk_gemm_plan_pack_b");
                a.B = in.coin() ? nullptr : p.B.data();  // not read
                s = fz::timed(what, [&] { return xk_gemm_plan_run_packed(plan, &a, packed); });
                if (!expect_fail && s == XK_SUCCESS && in.coin()) {  // the packed B again, C reset
                    if (!p.c_before.empty()) std::memcpy(p.C.buf.bytes(), p.c_before.data(), p.c_before.size());
                    s = fz::timed(what, [&] { return xk_gemm_plan_run_packed(plan, &a, packed); });
                }
                xk_gemm_packed_b_destroy(packed);
            }
            if (std::strlen(xk_gemm_plan_impl_name(plan)) == 0) fz::finding("a plan without an implementation name");
            xk_gemm_plan_destroy(plan);
        }
    }
    if (expect_fail) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(p.C.buf, p.c_before, what, "C");
        if (!a_before.empty()) fz::expect_unchanged(p.A.buf, a_before, what, "A (as C)");
    } else {
        fz::expect_ok(s, what);
        check_output(p, what);
    }
}

// Plans of huge but representable shapes: created (or rejected) at once, never run.
void op_huge_plan(In& in) {
    xk_gemm_desc d;
    xk_gemm_desc_init(&d);
    const Combo cb = kCombos[in.pick(7)];
    d.a_type = cb.a, d.b_type = cb.b, d.c_type = cb.c;
    static const int64_t sizes[] = {0, 1, 2, 17, int64_t(1) << 20, int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 44};
    d.M = sizes[in.pick(8)], d.N = sizes[in.pick(8)], d.K = sizes[in.pick(8)];
    d.trans_a = in.coin() ? XK_TRANS_T : XK_TRANS_N;
    d.trans_b = in.coin() ? XK_TRANS_T : XK_TRANS_N;
    if (cb.c != XK_DTYPE_S32) {
        d.bias = in.coin();
        d.act = static_cast<xk_activation>(in.pick(5));
        d.residual = in.coin();
        d.residual_type = in.coin() ? XK_DTYPE_BF16 : XK_DTYPE_F32;
    }
    xk_gemm_plan* plan = nullptr;
    const xk_status s = fz::timed("xk_gemm_plan_create (huge)", [&] { return xk_gemm_plan_create(&d, &plan); });
    if (s == XK_OUT_OF_MEMORY)
        fz::finding("xk_gemm_plan_create M=%lld N=%lld K=%lld ran out of memory: a plan must not allocate in proportion to a size",
                    static_cast<long long>(d.M), static_cast<long long>(d.N), static_cast<long long>(d.K));
    if (s == XK_SUCCESS) {
        if (xk_last_error()[0] != '\0') fz::finding("huge plan: success with a message");
    } else if (xk_last_error()[0] == '\0') {
        fz::finding("huge plan rejected without a message");
    }
    xk_gemm_plan_destroy(plan);
}

void op_null_handles(In& in) {
    xk_gemm_desc d;
    xk_gemm_desc_init(&d);
    xk_gemm_args a;
    xk_gemm_args_init(&a);
    xk_gemm_plan* plan = nullptr;
    switch (in.pick(5)) {
        case 0: fz::expect_rejected(xk_gemm(nullptr, &a), "xk_gemm", "desc null"); break;
        case 1: fz::expect_rejected(xk_gemm(&d, nullptr), "xk_gemm", "args null"); break;
        case 2: fz::expect_rejected(xk_gemm_plan_create(nullptr, &plan), "xk_gemm_plan_create", "desc null"); break;
        case 3: fz::expect_rejected(xk_gemm_plan_run(nullptr, &a), "xk_gemm_plan_run", "plan null"); break;
        default: fz::expect_rejected(xk_gemm_plan_create(&d, nullptr), "xk_gemm_plan_create", "plan out null"); break;
    }
    xk_gemm_plan_destroy(nullptr);
    xk_gemm_packed_b_destroy(nullptr);
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
            case 1: xk_set_num_threads(1 + in.pick(2)); break;
            case 2: case 3: op_blas(in); break;
            case 4: op_huge_plan(in); break;
            case 5: op_null_handles(in); break;
            default: op_desc(in); break;
        }
    }
    return 0;
}
