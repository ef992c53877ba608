// libFuzzer target: the weight-only quantized GEMM of the C API (include/xk/c/woq.h). See
// fuzz_common.hpp for the scheme. Calls: xk_woq_pack (s8 / u4, per channel or groups of 32..256,
// symmetric or with zero points, padded ld_w), the imports (PyTorch int8pack / int4pack_cpu with
// block_n 32 / 64, GGUF Q8_0 / Q4_0), xk_woq_dequantize, and xk_woq_gemm on M from 0 to 20 (the
// decode kernels up to 16, the prefill path above) with f32 / bf16 X and Y, strides, alpha / beta,
// bias, every activation, residual; ISA cap and thread count changes.
// Valid calls are checked against this file's own decoding of the input formats: the dequantized
// weights bit for bit (w = fma(q, scale, offset) in f32, the header's formula), the product against
// a double loop of dequantize-then-multiply within the header's accuracy (fp32 sums; bf16 X in the
// prefill path rounds each weight to bf16). Hostile calls must fail with a message, leave every
// output untouched and (for the packing calls) return no weight.
#include <algorithm>
#include <vector>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;
using fz::Values;

constexpr int64_t kMaxM = 20, kMaxN = 40;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

float h2f(uint16_t h) {  // IEEE half -> float (exact)
    const uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = std::ldexp(static_cast<float>(m), -24);
    else if (e == 31) v = m ? kNaN : std::numeric_limits<float>::infinity();
    else v = std::ldexp(static_cast<float>(m | 1024), static_cast<int>(e) - 25);
    return s ? -v : v;
}
uint16_t f2h_exact(float f) {  // for values that are halves (scales built as such)
    for (uint32_t h = 0; h < 0x7c00; ++h)
        if (h2f(static_cast<uint16_t>(h)) == std::fabs(f)) return static_cast<uint16_t>(h | (f < 0 ? 0x8000 : 0));
    return 0x3c00;
}

// A weight as this file knows it: N x K dequantized values (the header's formula), the type.
struct Ref {
    int64_t N = 0, K = 0;
    int type = XK_WOQ_S8;
    std::vector<float> w;  // [N x K]
    std::vector<float> b;  // [N x K]: |q * scale| + |offset| (the decode kernels' rounding scales with it)
};

// A positive finite scale: 2^e * (1 + j/64), e in [-12, 3].
// A hostile size: negative (a huge positive one whose products fit is a valid claim about the
// caller's buffers, which the library cannot check).
int64_t neg_size(In& in) {
    static const int64_t v[] = {-1, -7, -32, std::numeric_limits<int64_t>::min()};
    return v[in.pick(4)];
}

float scale_value(In& in) { return std::ldexp(1.0f + in.pick(64) / 64.0f, in.pick(16) - 12); }

// ---- packing -------------------------------------------------------------------------------------
// Builds a valid weight (pack or one of the imports) of N x K and its reference, or with
// `hostile`, makes one argument wrong and checks the rejection. Returns the weight (valid only).
xk_woq_weight* make_weight(In& in, int64_t N, int64_t K, int type, Ref& ref, bool hostile) {
    const int src = in.pick(4);  // 0 pack, 1 torch int8pack (s8), 2 torch int4pack (u4), 3 gguf
    Values vals(in, N * K + N * 8);
    ref.N = N, ref.K = K, ref.type = type;
    ref.w.assign(static_cast<size_t>(N * K), 0.0f);
    ref.b.assign(static_cast<size_t>(N * K), 0.0f);
    xk_woq_weight* out = reinterpret_cast<xk_woq_weight*>(uintptr_t(1));  // must become NULL on failure
    xk_status s = XK_SUCCESS;
    const char* wrong = "";
    const char* what = "";
    if (src == 1 && type == XK_WOQ_S8) {
        what = "xk_woq_import_torch_int8pack";
        static const xk_dtype kS[] = {XK_DTYPE_F32, XK_DTYPE_BF16, XK_DTYPE_F16};
        const xk_dtype st = kS[in.pick(3)];
        Buf<int8_t> w(N * K, in.pick(3));
        Buf<uint16_t> s16(N);
        Buf<float> s32(N);
        for (int64_t n = 0; n < N; ++n) {
            const float sc = scale_value(vals());
            if (st == XK_DTYPE_F32) s32[n] = sc;
            else if (st == XK_DTYPE_BF16) s16[n] = fz::to_bf16(sc);
            else s16[n] = f2h_exact(sc);  // (1 + j/64) * 2^e with e >= -12 is a half
            for (int64_t k = 0; k < K; ++k) {
                const int8_t q = vals().p.ConsumeIntegral<int8_t>();
                w[n * K + k] = q;
                ref.w[n * K + k] = static_cast<float>(q) * sc;  // fma(q, s, 0)
                ref.b[n * K + k] = std::fabs(ref.w[n * K + k]);
            }
        }
        const void* sp = st == XK_DTYPE_F32 ? static_cast<const void*>(s32.data()) : s16.data();
        int64_t n_arg = N, k_arg = K;
        int st_arg = st;
        const int8_t* wp = w.data();
        if (hostile) {
            switch (in.pick(4)) {
                case 0: n_arg = neg_size(in); wrong = "negative N"; break;
                case 1: st_arg = in.coin() ? XK_DTYPE_S8 : in.bad_enum(6); wrong = "bad scale_type"; break;
                case 2:
                    if (N > 0) {
                        const float bad[] = {0.0f, -1.0f, kNaN, std::numeric_limits<float>::infinity()};
                        const float b = bad[in.pick(4)];
                        const int64_t i = in.pick(static_cast<int>(N));
                        if (st == XK_DTYPE_F32) s32[i] = b;
                        else s16[i] = st == XK_DTYPE_BF16 ? fz::to_bf16(b) : (b == 0 ? 0 : b < 0 ? 0xbc00 : b == b ? 0x7c00 : 0x7e00);
                        wrong = "bad scale";
                        break;
                    }
                    [[fallthrough]];
                default:
                    if (N > 0 && K > 0) { wp = nullptr; wrong = "w null"; break; }
                    k_arg = neg_size(in); wrong = "negative K";
                    break;
            }
        }
        xk_dtype st_c;
        std::memcpy(&st_c, &st_arg, sizeof st_arg);
        s = fz::timed(what, [&] { return xk_woq_import_torch_int8pack(n_arg, k_arg, wp, st_c, sp, &out); });
    } else if (src == 2 && type == XK_WOQ_U4 && N % 2 == 0 && K % 32 == 0 && K > 0) {
        what = "xk_woq_import_torch_int4pack_cpu";
        static const int64_t kG[] = {32, 64, 128, 256};
        int64_t gs = kG[in.pick(4)];
        while (K % gs) gs /= 2;
        const int block_n = in.coin() ? 64 : 32;
        const bool bf = in.coin();
        const int64_t G = K / gs;
        std::vector<int> q(N * K);
        for (auto& v : q) v = vals().pick(16);
        // torch's packed order: blocks of block_n rows, byte j of a k-row = rows j, j + block_n/2
        // (full block) or 2j, 2j + 1 (partial block).
        Buf<uint8_t> w(N * K / 2, in.pick(3));
        for (int64_t i = 0; i * block_n < N; ++i) {
            const int64_t nb = std::min<int64_t>(block_n, N - i * block_n);
            for (int64_t k = 0; k < K; ++k)
                for (int64_t j = 0; j < nb / 2; ++j) {
                    const int64_t lo = nb == block_n ? j : 2 * j, hi = nb == block_n ? j + block_n / 2 : 2 * j + 1;
                    w[i * K * block_n / 2 + k * nb / 2 + j] =
                        static_cast<uint8_t>(q[(i * block_n + lo) * K + k] | q[(i * block_n + hi) * K + k] << 4);
                }
        }
        Buf<float> sz32(bf ? 0 : G * N * 2);
        Buf<uint16_t> sz16(bf ? G * N * 2 : 0);
        std::vector<float> sc(G * N), ze(G * N);
        for (int64_t i = 0; i < G * N; ++i) {
            sc[i] = scale_value(vals());
            ze[i] = vals().value(8.0f);
            if (bf) {
                sz16[2 * i] = fz::to_bf16(sc[i]), sz16[2 * i + 1] = fz::to_bf16(ze[i]);
                sc[i] = fz::from_bf16(sz16[2 * i]), ze[i] = fz::from_bf16(sz16[2 * i + 1]);
            } else {
                sz32[2 * i] = sc[i], sz32[2 * i + 1] = ze[i];
            }
        }
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) {
                const int64_t g = k / gs;
                const float off = ze[g * N + n] - 8.0f * sc[g * N + n];
                ref.w[n * K + k] = std::fma(static_cast<float>(q[n * K + k]), sc[g * N + n], off);
                ref.b[n * K + k] = q[n * K + k] * sc[g * N + n] + std::fabs(off);
            }
        int64_t gs_arg = gs, n_arg = N;
        int bn_arg = block_n;
        const uint8_t* wp = w.data();
        if (hostile) {
            switch (in.pick(5)) {
                case 0: gs_arg = in.coin() ? 48 : (K % 256 ? 256 : 16); wrong = "bad group_size"; break;
                case 1: bn_arg = in.coin() ? 16 : 0; wrong = "bad block_n"; break;
                case 2: n_arg = N + 1; wrong = "odd N"; break;
                case 3:
                    if (G * N > 0) {
                        const int64_t i = in.pick(static_cast<int>(G * N));
                        const float b = in.coin() ? 0.0f : kNaN;
                        if (bf) sz16[2 * i] = fz::to_bf16(b);
                        else sz32[2 * i] = b;
                        wrong = "bad scale";
                        break;
                    }
                    [[fallthrough]];
                default: wp = nullptr; wrong = "w null"; break;
            }
            if (n_arg == 0 && wp == nullptr) n_arg = -1;
        }
        const void* szp = bf ? static_cast<const void*>(sz16.data()) : sz32.data();
        s = fz::timed(what, [&] {
            return xk_woq_import_torch_int4pack_cpu(n_arg, K, gs_arg, wp, bf ? XK_DTYPE_BF16 : XK_DTYPE_F32, szp, bn_arg, &out);
        });
    } else if (src == 3 && K % 32 == 0) {
        what = "xk_woq_import_gguf";
        const bool q4 = type == XK_WOQ_U4;
        const int64_t bb = q4 ? 18 : 34, nbk = K / 32;
        Buf<uint8_t> data(N * nbk * bb, in.pick(3));
        for (int64_t n = 0; n < N; ++n)
            for (int64_t b = 0; b < nbk; ++b) {
                uint8_t* blk = data.data() + (n * nbk + b) * bb;
                // d: any finite half (negative and zero included: GGUF allows them)
                uint16_t h = vals().p.ConsumeIntegral<uint16_t>();
                if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;
                std::memcpy(blk, &h, 2);
                const float d = h2f(h);
                for (int j = 0; j < (q4 ? 16 : 32); ++j) blk[2 + j] = vals().p.ConsumeIntegral<uint8_t>();
                for (int j = 0; j < 32; ++j) {
                    float v;
                    if (q4) {
                        const int qv = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
                        v = static_cast<float>(qv - 8) * d;  // llama.cpp's dequantize_row_q4_0
                    } else {
                        v = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * d;
                    }
                    ref.w[n * K + b * 32 + j] = v;
                    ref.b[n * K + b * 32 + j] = q4 ? 16 * std::fabs(d) : std::fabs(v);
                }
            }
        int64_t k_arg = K;
        int t_arg = q4 ? XK_GGUF_Q4_0 : XK_GGUF_Q8_0;
        const void* dp = data.data();
        if (hostile) {
            switch (in.pick(4)) {
                case 0: t_arg = in.coin() ? 3 : in.bad_enum(9); wrong = "bad type"; break;
                case 1: k_arg = K + 16; wrong = "K not a multiple of 32"; break;
                case 2:
                    if (N > 0 && K > 0) {
                        const uint16_t inf = in.coin() ? 0x7c00 : 0x7e00;
                        std::memcpy(data.data() + in.pick(static_cast<int>(N * nbk)) * bb, &inf, 2);
                        wrong = "d not finite";
                        break;
                    }
                    [[fallthrough]];
                default: k_arg = -32; wrong = "negative K"; break;
            }
        }
        xk_gguf_type tc;
        std::memcpy(&tc, &t_arg, sizeof t_arg);
        s = fz::timed(what, [&] { return xk_woq_import_gguf(tc, N, k_arg, dp, &out); });
    } else {
        what = "xk_woq_pack";
        const bool u4 = type == XK_WOQ_U4;
        static const int64_t kG[] = {0, 32, 64, 128, 256};
        int64_t gs = kG[in.pick(5)];
        if (gs && K % gs) gs = 0;
        const int64_t G = gs ? K / gs : 1;
        const bool zp = in.coin();
        const int64_t row = u4 ? K / 2 : K, ld = row + in.pad();
        Buf<uint8_t> w(span(N, row, ld), in.pick(3));
        std::vector<int> q(N * K);
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) q[n * K + k] = u4 ? vals().pick(16) : static_cast<int8_t>(vals().p.ConsumeIntegral<uint8_t>());
        for (int64_t n = 0; n < N; ++n)
            for (int64_t j = 0; j < row; ++j)
                w[n * ld + j] = u4 ? static_cast<uint8_t>(q[n * K + 2 * j] | q[n * K + 2 * j + 1] << 4) : static_cast<uint8_t>(q[n * K + j]);
        Buf<float> sc(N * G);
        Buf<uint8_t> z(zp ? N * G : 0);
        for (int64_t i = 0; i < N * G; ++i) {
            sc[i] = scale_value(vals());
            if (zp) z[i] = u4 ? static_cast<uint8_t>(vals().pick(16)) : vals().p.ConsumeIntegral<uint8_t>();
        }
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) {
                const int64_t g = gs ? k / gs : 0;
                const float s = sc[n * G + g];
                const int zv = zp ? (u4 ? z[n * G + g] : static_cast<int8_t>(z[n * G + g])) : (u4 ? 8 : 0);
                ref.w[n * K + k] = std::fma(static_cast<float>(q[n * K + k]), s, -(s * static_cast<float>(zv)));
                ref.b[n * K + k] = std::fabs(q[n * K + k] * s) + std::fabs(s * static_cast<float>(zv));
            }
        int t_arg = type;
        int64_t n_arg = N, k_arg = K, gs_arg = gs, ld_arg = ld == row ? (in.coin() ? 0 : ld) : ld;
        const void* wp = w.data();
        const float* sp = sc.data();
        if (hostile) {
            switch (in.pick(9)) {
                case 0: t_arg = in.bad_enum(2); wrong = "bad type"; break;
                case 1: n_arg = neg_size(in); wrong = "negative N"; break;
                case 2: gs_arg = in.coin() ? 33 : (K % 64 ? 64 : 512); if (gs_arg == 64 && K == 0) gs_arg = 33; wrong = "bad group_size"; break;
                case 3:
                    if (N * G > 0) {
                        const float bad[] = {0.0f, -2.0f, kNaN, -std::numeric_limits<float>::infinity()};
                        sc[in.pick(static_cast<int>(N * G))] = bad[in.pick(4)];
                        wrong = "bad scale";
                        break;
                    }
                    [[fallthrough]];
                case 4:
                    if (zp && u4 && N * G > 0) { z[in.pick(static_cast<int>(N * G))] = static_cast<uint8_t>(16 + in.pick(200)); wrong = "u4 zero point > 15"; break; }
                    [[fallthrough]];
                case 5:
                    if (row > 1) { ld_arg = row - 1; wrong = "ld_w < row"; break; }
                    [[fallthrough]];
                case 6:
                    if (N > 0 && K > 0) { wp = nullptr; wrong = "weights null"; break; }
                    [[fallthrough]];
                case 7:
                    if (N * G > 0) { sp = nullptr; wrong = "scales null"; break; }
                    [[fallthrough]];
                default:
                    if (u4) { k_arg = K + 1; gs_arg = 0; wrong = "odd K for u4"; break; }
                    k_arg = neg_size(in); wrong = "negative K";
                    break;
            }
        }
        xk_woq_type tc;
        std::memcpy(&tc, &t_arg, sizeof t_arg);
        s = fz::timed(what, [&] {
            return xk_woq_pack(tc, n_arg, k_arg, gs_arg, wp, ld_arg, sp, zp ? static_cast<const void*>(z.data()) : nullptr, &out);
        });
    }
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        if (out) fz::finding("%s: rejected (%s) but *out is not NULL", what, wrong);
        return nullptr;
    }
    fz::expect_ok(s, what);
    if (!out) fz::finding("%s: succeeded with *out NULL", what);
    // The dequantized weights, bit for bit.
    Buf<float> dq(N * K);
    fz::expect_ok(fz::timed("xk_woq_dequantize", [&] { return xk_woq_dequantize(out, dq.data()); }), "xk_woq_dequantize");
    fz::expect_guards(dq, "xk_woq_dequantize", "out");
    for (int64_t i = 0; i < N * K; ++i)
        if (std::memcmp(&dq[i], &ref.w[i], 4) != 0 && !(dq[i] == 0.0f && ref.w[i] == 0.0f))
            fz::finding("%s: w[%lld][%lld] dequantizes to %.9g, want %.9g (N %lld K %lld type %d)", what, (long long)(i / K),
                        (long long)(i % K), dq[i], ref.w[i], (long long)N, (long long)K, type);
    return out;
}

// ---- the product ---------------------------------------------------------------------------------
void op_gemm(In& in) {
    const char* what = "xk_woq_gemm";
    const int type = in.pick(2);
    const int64_t M = in.pick(4) == 0 ? in.dim(17, kMaxM) : in.dim(0, 16);
    const int64_t N = in.dim(0, kMaxN);
    int64_t K;
    switch (in.pick(3)) {
        case 0: K = 32 * in.dim(1, 4); break;              // GGUF / grouped shapes
        case 1: K = 64 * in.dim(1, 4); break;
        default: K = in.dim(0, 70); break;                 // any (per channel)
    }
    if (type == XK_WOQ_U4) K &= ~int64_t(1);
    Ref ref;
    xk_woq_weight* w = make_weight(in, N, K, type, ref, false);
    if (!w) return;
    static const xk_dtype kF[] = {XK_DTYPE_F32, XK_DTYPE_BF16};
    const xk_dtype at = kF[in.pick(2)], ct = kF[in.pick(2)], rt = kF[in.pick(2)];
    const bool abf = at == XK_DTYPE_BF16, cbf = ct == XK_DTYPE_BF16, rbf = rt == XK_DTYPE_BF16;
    const int64_t lda = K + in.pad(), ldc = N + in.pad(), ldr = N + in.pad();
    const bool bias = in.coin(), residual = in.coin();
    const int act = in.pick(5);
    const float alpha = in.pick(3) == 0 ? static_cast<float>(in.pick(5) - 2) * 0.75f : 1.0f;
    const float beta = in.pick(3) == 0 ? (in.coin() ? 1.0f : 0.5f) : 0.0f;
    Values vals(in, M * K + M * N * 2 + N);
    Buf<unsigned char> A(span(M, K, lda) * (abf ? 2 : 4), in.pick(2) * (abf ? 2 : 4));
    std::vector<double> xa(M * K);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) {
            float v = vals().value(64.0f);
            if (abf) {
                const uint16_t b = fz::to_bf16(v);
                std::memcpy(A.data() + (m * lda + k) * 2, &b, 2), v = fz::from_bf16(b);
            } else {
                std::memcpy(A.data() + (m * lda + k) * 4, &v, 4);
            }
            xa[m * K + k] = v;
        }
    Buf<float> bs(bias ? N : 0);
    for (int64_t n = 0; n < N && bias; ++n) bs[n] = vals().value(100.0f);
    Buf<unsigned char> R(residual ? span(M, N, ldr) * (rbf ? 2 : 4) : 0, in.pick(2) * (rbf ? 2 : 4));
    std::vector<double> rv(M * N, 0.0);
    for (int64_t m = 0; m < M && residual; ++m)
        for (int64_t n = 0; n < N; ++n) {
            float v = vals().value(100.0f);
            if (rbf) {
                const uint16_t b = fz::to_bf16(v);
                std::memcpy(R.data() + (m * ldr + n) * 2, &b, 2), v = fz::from_bf16(b);
            } else {
                std::memcpy(R.data() + (m * ldr + n) * 4, &v, 4);
            }
            rv[m * N + n] = v;
        }
    Buf<unsigned char> C(span(M, N, ldc) * (cbf ? 2 : 4), in.pick(2) * (cbf ? 2 : 4));
    std::vector<double> c0(M * N, 0.0);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            float v = vals().value(100.0f);
            if (cbf) {
                const uint16_t b = fz::to_bf16(v);
                std::memcpy(C.data() + (m * ldc + n) * 2, &b, 2), v = fz::from_bf16(b);
            } else {
                std::memcpy(C.data() + (m * ldc + n) * 4, &v, 4);
            }
            c0[m * N + n] = v;
        }

    xk_woq_desc d;
    xk_woq_desc_init(&d);
    d.M = M, d.N = N, d.K = K, d.lda = lda, d.ldc = ldc, d.alpha = alpha, d.beta = beta;
    d.a_type = at, d.c_type = ct, d.bias = bias, d.residual = residual, d.residual_type = rt, d.ld_residual = ldr;
    int wt_arg = type, act_arg = act;
    xk_woq_args a{A.data(), C.data(), bias ? bs.data() : nullptr, residual ? R.data() : nullptr};
    xk_woq_weight* run_w = w;
    xk_woq_weight* other = nullptr;
    const bool hostile = in.pick(3) == 2;
    const char* wrong = "";
    if (hostile) {
        const bool any = M > 0 && N > 0;
        switch (in.pick(8)) {
            case 0: d.M = neg_size(in); wrong = "negative M"; break;
            case 1: act_arg = in.bad_enum(5); wrong = "bad act"; break;
            case 2: wt_arg = 1 - type; wrong = "weight of another type"; break;
            case 3: {  // a weight of another shape
                Ref r2;
                other = make_weight(in, N + 2, K, type, r2, false);
                run_w = other;
                wrong = "weight of another shape";
                break;
            }
            case 4:
                if (any && K > 0) { a.A = nullptr; wrong = "A null"; break; }
                [[fallthrough]];
            case 5:
                if (any) { a.C = nullptr; wrong = "C null"; break; }
                [[fallthrough]];
            case 6:
                if (N > 1) { d.ldc = N - 1; wrong = "ldc < N"; break; }
                [[fallthrough]];
            default:
                if (any && K > 0 && !abf == !cbf && lda == K && ldc == N && M * K >= N) {
                    a.C = A.data();  // the output over the input
                    wrong = "C overlaps A";
                    break;
                }
                d.a_type = in.coin() ? XK_DTYPE_S8 : XK_DTYPE_U8; wrong = "bad a_type";
                break;
        }
    }
    std::memcpy(&d.weight_type, &wt_arg, sizeof wt_arg);
    std::memcpy(&d.act, &act_arg, sizeof act_arg);
    const auto before = C.snapshot();
    const auto a_before = A.snapshot();
    const xk_status s = fz::timed(what, [&] { return xk_woq_gemm(&d, &a, run_w); });
    xk_woq_weight_destroy(w);
    xk_woq_weight_destroy(other);
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(C, before, what, "C");
        fz::expect_unchanged(A, a_before, what, "A");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(C, what, "C");
    // Padding between rows of C untouched.
    for (int64_t m = 0; m + 1 < M && N > 0; ++m)
        for (int64_t n = N; n < ldc; ++n)
            for (int b = 0; b < (cbf ? 2 : 4); ++b)
                if (C.data()[(m * ldc + n) * (cbf ? 2 : 4) + b] != before[(m * ldc + n) * (cbf ? 2 : 4) + b])
                    fz::finding("%s: wrote C[%lld][%lld] past N", what, (long long)m, (long long)n);
    // Accuracy: fp32 sums (K terms, relative 2^-24 each, plus the per-group scaling), weights
    // rounded to bf16 (2^-9) in the prefill path with bf16 X; then the epilogue in fp32.
    const double eps_bf = abf && M > 16 ? 1.0 / 256 : 0.0, eps_acc = (K + 8) * 1.2e-7;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0, mag = 0, bnd = 0;
            for (int64_t k = 0; k < K; ++k) {
                acc += xa[m * K + k] * ref.w[n * K + k];
                mag += std::fabs(xa[m * K + k] * ref.w[n * K + k]);
                bnd += std::fabs(xa[m * K + k]) * ref.b[n * K + k];
            }
            double g = alpha * acc;
            if (beta != 0.0f) g += beta * c0[m * N + n];
            if (bias) g += bs[n];
            const double lin = std::fabs(g) + 1e-30;
            double y = fz::act_exact(act, g);
            if (residual) y += rv[m * N + n];
            const double tol = 1.3 * std::fabs(alpha) * (mag * eps_bf + (bnd + mag) * eps_acc) +
                               4e-7 * (lin + std::fabs(beta * c0[m * N + n]) + (bias ? std::fabs(bs[n]) : 0) + std::fabs(y) +
                                       (residual ? std::fabs(rv[m * N + n]) : 0)) +
                               (act ? 1e-6 * lin : 0.0) + (cbf ? std::fabs(y) / 256 : 0.0) + 1e-30;
            double got;
            if (cbf) {
                uint16_t b;
                std::memcpy(&b, C.data() + (m * ldc + n) * 2, 2);
                got = fz::from_bf16(b);
            } else {
                float f;
                std::memcpy(&f, C.data() + (m * ldc + n) * 4, 4);
                got = f;
            }
            if (!fz::close(got, y, 0.0, tol))
                fz::finding("%s: C[%lld][%lld] = %.9g, want %.9g (tol %.3g; M %lld N %lld K %lld type %d a %d c %d alpha %g "
                            "beta %g bias %d act %d residual %d)",
                            what, (long long)m, (long long)n, got, y, tol, (long long)M, (long long)N, (long long)K, type,
                            (int)at, (int)ct, alpha, beta, bias, act, residual);
        }
}

void op_pack_hostile(In& in) {
    const int type = in.pick(2);
    const int64_t N = in.dim(0, 24);
    int64_t K = in.pick(2) ? 32 * in.dim(1, 3) : in.dim(0, 40);
    if (type == XK_WOQ_U4) K &= ~int64_t(1);
    Ref ref;
    xk_woq_weight* w = make_weight(in, N, K, type, ref, in.coin());
    xk_woq_weight_destroy(w);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 6 && in.more(); ++calls) {
        switch (in.pick(8)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(1 + in.pick(2)); }), "xk_set_num_threads"); break;
            case 2:
            case 3: op_pack_hostile(in); break;
            default: op_gemm(in); break;
        }
    }
    return 0;
}
