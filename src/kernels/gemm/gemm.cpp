// GEMM family: validation, registry, plan, packed B and the one-shot entry points.
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemm_int8.hpp"
#include "kernels/gemm/jit_gemv.hpp"

#include <atomic>
#include <cmath>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "common/parallel.hpp"
#include "xk/gemm.hpp"

namespace xk {
namespace detail {
namespace {

std::string num(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

bool valid_dtype(DType t) {
    const int v = static_cast<int>(t);
    return v >= 0 && v <= static_cast<int>(DType::f16);
}

std::string dtype_str(DType t) {
    return valid_dtype(t) ? dtype_name(t) : std::to_string(static_cast<int>(t));
}

void check_enum_trans(const char* fn, const char* arg, Trans t) {
    const int v = static_cast<int>(t);
    if (v != 0 && v != 1) fail_arg(fn, arg, std::to_string(v), "is not a valid xk::Trans (N=0, T=1)");
}

void check_enum_dtype(const char* fn, const char* arg, DType t) {
    if (!valid_dtype(t)) fail_arg(fn, arg, std::to_string(static_cast<int>(t)), "is not a valid xk::DType");
}

// Elements spanned by a rows x cols matrix with leading dimension ld (0 when empty).
int64_t extent(const char* fn, const char* what, int64_t rows, int64_t cols, int64_t ld) {
    if (rows == 0 || cols == 0) return 0;
    return checked_add(fn, what, checked_mul(fn, what, rows - 1, ld), cols);
}

GemmSpec make_spec(const GemmDesc& d) {
    GemmSpec s;
    s.M = d.M, s.N = d.N, s.K = d.K;
    s.trans_a = d.trans_a, s.trans_b = d.trans_b;
    s.lda = d.lda, s.ldb = d.ldb, s.ldc = d.ldc, s.ld_residual = d.ld_residual;
    s.a_type = d.a_type, s.b_type = d.b_type, s.c_type = d.c_type;
    s.alpha_one = d.alpha == 1.0f;
    s.beta = d.beta == 0.0f ? BetaKind::zero : d.beta == 1.0f ? BetaKind::one : BetaKind::other;
    s.epilogue = d.epilogue;
    s.b_scale_per_channel = d.b_scale_per_channel;
    s.residual_type = d.residual_type;
    return s;
}

// Leading dimensions with 0 replaced by the minimum (validation happens in gemm_check_desc).
GemmDesc resolve_lds(GemmDesc d) {
    const int64_t min_lda = d.trans_a == Trans::N ? d.K : d.M;
    const int64_t min_ldb = d.trans_b == Trans::N ? d.N : d.K;
    if (d.lda == 0) d.lda = min_lda;
    if (d.ldb == 0) d.ldb = min_ldb;
    if (d.ldc == 0) d.ldc = d.N;
    if (d.ld_residual == 0) d.ld_residual = d.N;
    // Batch: C's stride of 0 is packed (left 0 where M*ldc overflows: batch <= 1 then, as
    // gemm_check_batch rejects it otherwise).
    if (d.batch_stride_c == 0) {
        int64_t sc = 0;
        if (!__builtin_mul_overflow(d.M, d.ldc, &sc)) d.batch_stride_c = sc;
    }
    return d;
}

}  // namespace

std::string GemmSpec::key() const {
    std::string k = std::string(dtype_name(a_type)) + dtype_name(b_type) + dtype_name(c_type) + "," +
                    trans_name(trans_a) + trans_name(trans_b) + ",M" + std::to_string(M) + "N" + std::to_string(N) +
                    "K" + std::to_string(K) + ",lda" + std::to_string(lda) + ",ldb" + std::to_string(ldb) + ",ldc" +
                    std::to_string(ldc) + (alpha_one ? ",a1" : ",aX") +
                    (beta == BetaKind::zero ? ",b0" : beta == BetaKind::one ? ",b1" : ",bX");
    if (b_scale_per_channel) k += ",bscale:n";
    if (a_scale_per_row) k += ",ascale:m";
    if (epilogue.bias || epilogue.act != Activation::none || epilogue.residual) {
        k += ",ep:";
        if (epilogue.bias) k += "bias+";
        k += activation_name(epilogue.act);
        if (epilogue.residual)
            k += std::string("+res:") + dtype_name(residual_type) + ":ld" + std::to_string(ld_residual);
    }
    return k;
}

GemmSpec gemm_check_desc(const char* fn, const GemmDesc& desc) {
    // Enumerations first: everything below switches on them.
    check_enum_trans(fn, "trans_a", desc.trans_a);
    check_enum_trans(fn, "trans_b", desc.trans_b);
    check_enum_dtype(fn, "a_type", desc.a_type);
    check_enum_dtype(fn, "b_type", desc.b_type);
    check_enum_dtype(fn, "c_type", desc.c_type);
    check_enum_dtype(fn, "residual_type", desc.residual_type);
    if (!valid_activation(desc.epilogue.act))
        fail_arg(fn, "epilogue.act", std::to_string(static_cast<int>(desc.epilogue.act)),
                 "is not a valid xk::Activation");

    check_nonnegative(fn, "M", desc.M);
    check_nonnegative(fn, "N", desc.N);
    check_nonnegative(fn, "K", desc.K);

    // Data types.
    const DType a = desc.a_type, b = desc.b_type, c = desc.c_type;
    const bool ok = (a == DType::f32 && b == DType::f32 && c == DType::f32) ||
                    (a == DType::bf16 && b == DType::bf16 && (c == DType::f32 || c == DType::bf16)) ||
                    ((a == DType::u8 || a == DType::s8) && b == DType::s8 &&
                     (c == DType::s32 || c == DType::f32 || c == DType::u8 || c == DType::s8));
    if (!ok)
        fail(Status::unsupported, std::string(fn) + ": a_type=" + dtype_str(a) + " b_type=" + dtype_str(b) +
                                      " c_type=" + dtype_str(c) +
                                      " is not a supported combination (f32*f32->f32, bf16*bf16->f32|bf16, "
                                      "u8|s8*s8->s32|f32|u8|s8)");
    const bool int8 = a == DType::u8 || a == DType::s8;

    // Options that only some types have.
    const bool requant = int8 && (c == DType::u8 || c == DType::s8);
    if (desc.b_scale_per_channel && !(int8 && c != DType::s32))
        fail_arg(fn, "b_scale_per_channel", "true", "applies only to int8 inputs with c_type=f32|u8|s8 (got a_type=" +
                                                        dtype_str(a) + " c_type=" + dtype_str(c) + ")");
    // A requantized C is not read: beta * C would mean dequantizing it, which nothing needs.
    if (requant && desc.beta != 0.0f)
        fail(Status::unsupported, std::string(fn) + ": beta=" + num(desc.beta) + " is not supported with c_type=" +
                                      dtype_str(c) + " (must be 0: a requantized C is never read)");
    if (c == DType::s32) {
        if (desc.alpha != 1.0f)
            fail(Status::unsupported, std::string(fn) + ": alpha=" + num(desc.alpha) + " is not supported with c_type=s32 (must be 1)");
        if (desc.beta != 0.0f && desc.beta != 1.0f)
            fail(Status::unsupported, std::string(fn) + ": beta=" + num(desc.beta) + " is not supported with c_type=s32 (must be 0 or 1)");
        if (desc.epilogue.bias || desc.epilogue.act != Activation::none || desc.epilogue.residual)
            fail(Status::unsupported, std::string(fn) + ": epilogue (bias=" + (desc.epilogue.bias ? "on" : "off") +
                                          " act=" + activation_name(desc.epilogue.act) + " residual=" +
                                          (desc.epilogue.residual ? "on" : "off") +
                                          ") is not supported with c_type=s32 (use c_type=f32)");
    }
    if (desc.epilogue.residual && desc.residual_type != DType::f32 && desc.residual_type != DType::bf16)
        fail(Status::unsupported, std::string(fn) + ": residual_type=" + dtype_name(desc.residual_type) +
                                      " is not supported (f32 or bf16)");

    // Leading dimensions.
    const GemmDesc d = resolve_lds(desc);
    const bool an = d.trans_a == Trans::N, bn = d.trans_b == Trans::N;
    check_ld(fn, "lda", d.lda, an ? d.K : d.M, an ? "K" : "M");
    check_ld(fn, "ldb", d.ldb, bn ? d.N : d.K, bn ? "N" : "K");
    check_ld(fn, "ldc", d.ldc, d.N, "N");
    if (d.epilogue.residual) check_ld(fn, "ld_residual", d.ld_residual, d.N, "N");

    // Every operand's extent (and its byte count) must be representable.
    extent(fn, an ? "M*lda" : "K*lda", an ? d.M : d.K, an ? d.K : d.M, d.lda);
    extent(fn, bn ? "K*ldb" : "N*ldb", bn ? d.K : d.N, bn ? d.N : d.K, d.ldb);
    extent(fn, "M*ldc", d.M, d.N, d.ldc);
    if (d.epilogue.residual) extent(fn, "M*ld_residual", d.M, d.N, d.ld_residual);
    checked_mul(fn, "K*N", d.K, d.N);  // the packed B
    return make_spec(d);
}

GemmExtents gemm_extents(const char* fn, const GemmSpec& s) {
    GemmExtents x;
    if (s.M == 0 || s.N == 0) return x;  // nothing is read or written
    const bool an = s.trans_a == Trans::N, bn = s.trans_b == Trans::N;
    x.c = extent(fn, "M*ldc", s.M, s.N, s.ldc) * dtype_size(s.c_type);
    if (s.K > 0) {
        x.a = extent(fn, "lda", an ? s.M : s.K, an ? s.K : s.M, s.lda) * dtype_size(s.a_type);
        x.b = extent(fn, "ldb", bn ? s.K : s.N, bn ? s.N : s.K, s.ldb) * dtype_size(s.b_type);
    }
    if (s.epilogue.bias) x.bias = s.N * 4;
    if (s.epilogue.residual) x.res = extent(fn, "ld_residual", s.M, s.N, s.ld_residual) * dtype_size(s.residual_type);
    if (s.int8() && s.c_type != DType::s32) x.b_scales = (s.b_scale_per_channel ? s.N : 1) * 4;
    return x;
}

GemmBatch gemm_check_batch(const char* fn, const GemmDesc& desc, const GemmSpec& s) {
    check_nonnegative(fn, "batch", desc.batch);
    check_nonnegative(fn, "batch_stride_a", desc.batch_stride_a);
    check_nonnegative(fn, "batch_stride_b", desc.batch_stride_b);
    check_nonnegative(fn, "batch_stride_c", desc.batch_stride_c);
    check_nonnegative(fn, "batch_stride_residual", desc.batch_stride_residual);
    GemmBatch b;
    b.count = desc.batch;
    if (desc.batch <= 1) return b;  // no item past the first: the strides are never used
    const int64_t n1 = desc.batch - 1;
    const bool an = s.trans_a == Trans::N, bn = s.trans_b == Trans::N;
    // Every operand's span over the items ((batch-1)*stride + the item's extent, in elements) must
    // fit; checked_mul / checked_add stop at int64 max / 16, so the byte counts fit too.
    auto span = [&](const char* what, int64_t stride, int64_t item) {
        return checked_add(fn, what, checked_mul(fn, what, n1, stride), item);
    };
    span("(batch-1)*batch_stride_a", desc.batch_stride_a, extent(fn, "A", an ? s.M : s.K, an ? s.K : s.M, s.lda));
    span("(batch-1)*batch_stride_b", desc.batch_stride_b, extent(fn, "B", bn ? s.K : s.N, bn ? s.N : s.K, s.ldb));
    b.a = desc.batch_stride_a * dtype_size(s.a_type);
    b.b = desc.batch_stride_b * dtype_size(s.b_type);
    if (s.epilogue.residual) {
        span("(batch-1)*batch_stride_residual", desc.batch_stride_residual, extent(fn, "residual", s.M, s.N, s.ld_residual));
        b.res = desc.batch_stride_residual * dtype_size(s.residual_type);
    }
    // C: 0 = packed (M*ldc); otherwise the items must not overlap: one after another (stride >= the
    // item's extent), or side by side within the rows (stride >= N and the last item ends within
    // the first row's ldc).
    const int64_t sc = desc.batch_stride_c ? desc.batch_stride_c : checked_mul(fn, "M*ldc (batch_stride_c=0)", s.M, s.ldc);
    const int64_t item_c = extent(fn, "C", s.M, s.N, s.ldc);
    span("(batch-1)*batch_stride_c", sc, item_c);
    if (item_c > 0 && sc < item_c && !(sc >= s.N && n1 * sc + s.N <= s.ldc))
        fail_arg(fn, "batch_stride_c", std::to_string(sc),
                 "makes the items of C overlap (batch=" + std::to_string(desc.batch) + "): it must be >= (M-1)*ldc+N=" +
                     std::to_string(item_c) + " (items one after another), or >= N=" + std::to_string(s.N) +
                     " with (batch-1)*batch_stride_c+N <= ldc=" + std::to_string(s.ldc) +
                     " (items side by side in each row)");
    b.c = sc * dtype_size(s.c_type);
    return b;
}

GemmExtents gemm_extents(const char* fn, const GemmSpec& s, const GemmBatch& b) {
    if (b.count == 0) return {};  // nothing is read or written
    GemmExtents x = gemm_extents(fn, s);
    if (b.count == 1) return x;
    // Bytes: each span was checked by gemm_check_batch (elements <= int64 max / 16).
    const int64_t n1 = b.count - 1;
    if (x.a > 0) x.a += n1 * b.a;
    if (x.b > 0) x.b += n1 * b.b;
    if (x.c > 0) x.c += n1 * b.c;
    if (x.res > 0) x.res += n1 * b.res;
    return x;
}

namespace {

// The output's bytes [C, C + c_bytes) must not meet an input's [p, p + bytes) (both non-empty).
inline bool overlaps(const void* c, int64_t c_bytes, const void* p, int64_t bytes) {
    const auto c0 = reinterpret_cast<uintptr_t>(c), i0 = reinterpret_cast<uintptr_t>(p);
    return p && bytes > 0 && c0 < i0 + static_cast<uintptr_t>(bytes) && i0 < c0 + static_cast<uintptr_t>(c_bytes);
}

[[noreturn]] __attribute__((noinline, cold)) void fail_overlap(const char* fn, const void* c, const char* name,
                                                               const void* p) {
    fail_arg(fn, "C", ptr_str(c),
             std::string("overlaps ") + name + "=" + ptr_str(p) + " (the output must not alias an input)");
}

// Quantization scales (int8 -> f32) are finite and > 0, as PyTorch's and oneDNN's are: NaN, inf,
// 0 or a negative scale is a caller's bug, not a value to multiply by.
__attribute__((noinline)) void check_scales(const char* fn, const float* a_scale, const float* b_scales, int64_t nb,
                                           const float* c_scale) {
    auto bad = [](float v) { return !(std::isfinite(v) && v > 0.0f); };
    if (bad(*a_scale)) fail_arg(fn, "a_scale", float_str(*a_scale), "must be finite and > 0");
    if (c_scale && bad(*c_scale)) fail_arg(fn, "c_scale", float_str(*c_scale), "must be finite and > 0");
    for (int64_t n = 0; n < nb; ++n)
        if (bad(b_scales[n]))
            fail_arg(fn, ("b_scales[" + std::to_string(n) + "]").c_str(), float_str(b_scales[n]), "must be finite and > 0");
}

[[noreturn]] __attribute__((noinline, cold)) void fail_null(const char* fn, const char* arg) {
    fail_arg(fn, arg, "null", "must not be a null pointer");
}

}  // namespace

// Cheap on the common path (a plan runs it per call): compares and branches only; the messages
// are built out of line when something is wrong.
__attribute__((always_inline)) inline void check_args_inline(const char* fn, const GemmSpec& s, const GemmExtents& x,
                                                             const GemmArgs& a, bool b_packed) {
    const bool any = x.c > 0;  // M > 0 and N > 0: otherwise nothing is read or written
    const bool ab = any && s.K > 0;
    if (ab && !a.A) fail_null(fn, "A");
    if (ab && !b_packed && !a.B) fail_null(fn, "B");
    if (any && !a.C) fail_null(fn, "C");
    if (any && s.epilogue.bias && !a.bias) fail_null(fn, "bias");
    if (any && s.epilogue.residual && !a.residual) fail_null(fn, "residual");
    const bool dequant = x.b_scales > 0;
    if (any && dequant) {
        if (!a.a_scale) fail_null(fn, "a_scale");
        if (!a.b_scales) fail_null(fn, "b_scales");
    }
    if (s.int8()) {
        if (s.a_type == DType::u8)
            check_range(fn, "a_zero_point", a.a_zero_point, 0, 255);
        else
            check_range(fn, "a_zero_point", a.a_zero_point, -128, 127);
        check_range(fn, "b_zero_point", a.b_zero_point, -128, 127);
        if (s.c_type == DType::u8)
            check_range(fn, "c_zero_point", a.c_zero_point, 0, 255);
        else if (s.c_type == DType::s8)
            check_range(fn, "c_zero_point", a.c_zero_point, -128, 127);
    }
    const bool requant = dequant && (s.c_type == DType::u8 || s.c_type == DType::s8);
    if (requant && !a.c_scale) fail_null(fn, "c_scale");
    if (!any) return;
    if (ab && overlaps(a.C, x.c, a.A, x.a)) fail_overlap(fn, a.C, "A", a.A);
    if (ab && !b_packed && overlaps(a.C, x.c, a.B, x.b)) fail_overlap(fn, a.C, "B", a.B);
    if (overlaps(a.C, x.c, a.bias, x.bias)) fail_overlap(fn, a.C, "bias", a.bias);
    if (overlaps(a.C, x.c, a.residual, x.res)) fail_overlap(fn, a.C, "residual", a.residual);
    if (dequant) {
        if (overlaps(a.C, x.c, a.a_scale, 4)) fail_overlap(fn, a.C, "a_scale", a.a_scale);
        if (overlaps(a.C, x.c, a.b_scales, x.b_scales)) fail_overlap(fn, a.C, "b_scales", a.b_scales);
        if (requant && overlaps(a.C, x.c, a.c_scale, 4)) fail_overlap(fn, a.C, "c_scale", a.c_scale);
        check_scales(fn, a.a_scale, a.b_scales, x.b_scales / 4, requant ? a.c_scale : nullptr);
    }
}

void gemm_check_args(const char* fn, const GemmSpec& s, const GemmExtents& x, const GemmArgs& a, bool b_packed) {
    check_args_inline(fn, s, x, a, b_packed);
}

void gemm_check_args(const char* fn, const GemmSpec& s, const GemmArgs& a, bool b_packed) {
    check_args_inline(fn, s, gemm_extents(fn, s), a, b_packed);
}

__attribute__((always_inline)) inline bool gemm_args_ok(const GemmPlanState& st, const GemmArgs& a, bool b_packed) {
    const GemmExtents& x = st.extents;
    if (st.spec.int8()) return false;  // zero points and scales: the full check
    if (x.c == 0) return true;         // nothing is read or written
    const uintptr_t c0 = reinterpret_cast<uintptr_t>(a.C), c1 = c0 + static_cast<uintptr_t>(x.c);
    // Bad: a needed pointer is null, or it overlaps C (bytes > 0 and the ranges meet).
    auto bad = [&](const void* p, int64_t bytes) {
        const uintptr_t p0 = reinterpret_cast<uintptr_t>(p);
        return (p0 == 0) | ((p0 < c1) & (c0 < p0 + static_cast<uintptr_t>(bytes)));
    };
    bool b = c0 == 0;
    if (x.a > 0) b |= bad(a.A, x.a);
    if (x.b > 0 && !b_packed) b |= bad(a.B, x.b);
    if (x.bias > 0) b |= bad(a.bias, x.bias);
    if (x.res > 0) b |= bad(a.residual, x.res);
    return !b;
}

const Registry<GemmSpec, GemmKernel>& gemm_registry() {
    // Best first, per ISA: the exact-shape small kernel (M, N, K <= 64), the direct kernel for
    // small N or short K (no A packing), the decode / GEMV kernel (M <= 16, weights streamed),
    // then the blocked kernel (f32; then bf16, widened as it is packed: "jit:<isa>:bf16"). oneDNN
    // runs only when measured faster (see gemm_tune.cpp). The panel kernel (the GEMV kernel for
    // any M) is reached only by a PackedB in its layout (GemmPlan::run with a PackedB of another
    // plan). The reference takes everything else (K == 0, empty shapes). int8 with M, N, K > 0 runs
    // the int8 kernels at the top (jit_gemm_int8.cpp: VPDPBUSD zmm / ymm, exact s16 on AVX2).
    static const Registry<GemmSpec, GemmKernel> r(
        "gemm",
        {
            // AMX tiles (jit_gemm_amx.cpp): bf16 and int8 from 32 rows up; ":any" reads their
            // PackedB for any M.
            {"amx:bf16", Isa::amx, gemm_amx_bf16_supports, create_gemm_amx_bf16},
            {"amx:bf16:decode", Isa::amx, gemm_amx_bf16_decode_supports, create_gemm_amx_bf16_decode},
            {"amx:bf16:any", Isa::amx, gemm_amx_bf16_any_supports, create_gemm_amx_bf16, /*selectable=*/false},
            {"amx:int8", Isa::amx, gemm_amx_int8_supports, create_gemm_amx_int8},
            {"amx:int8:decode", Isa::amx, gemm_amx_int8_decode_supports, create_gemm_amx_int8_decode},
            {"amx:int8:any", Isa::amx, gemm_amx_int8_any_supports, create_gemm_amx_int8, /*selectable=*/false},
            // int8 (jit_gemm_int8.cpp): every int8 shape with M, N, K > 0.
            {"jit:avx512_vnni:int8", Isa::avx512_vnni, gemm_int8_vnni_supports,
             [](const GemmSpec& s) { return create_gemm_int8_vnni(s, Isa::avx512_vnni); }},
            {"jit:avx2_vnni:int8", Isa::avx2_vnni, gemm_int8_vnni_supports,
             [](const GemmSpec& s) { return create_gemm_int8_vnni(s, Isa::avx2_vnni); }},
            {"jit:avx2:int8", Isa::avx2, gemm_int8_vnni_supports,
             [](const GemmSpec& s) { return create_gemm_int8_vnni(s, Isa::avx2); }},
            {"jit:avx512:small", Isa::avx512, gemm_small_supports,
             [](const GemmSpec& s) { return create_gemm_small(s, Isa::avx512); }},
            {"jit:avx512:direct", Isa::avx512, [](const GemmSpec& s) { return gemm_direct_supports(s, Isa::avx512); },
             [](const GemmSpec& s) { return create_gemm_direct(s, Isa::avx512); }},
            {"jit:avx512:gemv", Isa::avx512, gemv_supports, create_gemv_avx512},
            // The decode kernel on a prefill plan's PackedB (not selectable: found by its layout).
            {"jit:avx512:gemv:blocked", Isa::avx512, gemv_supports, create_gemv_avx512_blocked, /*selectable=*/false},
            {"jit:avx512", Isa::avx512, gemm_jit_supports, [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx512); }},
            {"avx512_bf16:bf16:gemv", Isa::avx512_bf16, gemv_bf16_dp_supports,
             [](const GemmSpec& s) { return create_gemv_bf16(s, Isa::avx512_bf16); }},
            {"avx512:bf16:gemv", Isa::avx512, gemv_bf16_supports,
             [](const GemmSpec& s) { return create_gemv_bf16(s, Isa::avx512); }},
            {"jit:avx512_bf16:bf16", Isa::avx512_bf16, gemm_jit_bf16_dp_supports,
             [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx512_bf16); }},
            {"jit:avx512:bf16", Isa::avx512, gemm_jit_bf16_supports,
             [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx512); }},
            {"jit:avx2:small", Isa::avx2, gemm_small_supports,
             [](const GemmSpec& s) { return create_gemm_small(s, Isa::avx2); }},
            {"jit:avx2:direct", Isa::avx2, [](const GemmSpec& s) { return gemm_direct_supports(s, Isa::avx2); },
             [](const GemmSpec& s) { return create_gemm_direct(s, Isa::avx2); }},
            {"jit:avx2:gemv", Isa::avx2, gemv_supports, create_gemv_avx2},
            {"jit:avx2", Isa::avx2, gemm_jit_supports, [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx2); }},
            {"avx2:bf16:gemv", Isa::avx2, gemv_bf16_avx2_supports, create_gemv_bf16_avx2},
            {"jit:avx2:bf16", Isa::avx2, gemm_jit_bf16_supports,
             [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx2); }},
            {"jit:avx512:panel", Isa::avx512, gemm_panel_supports, create_gemv_avx512},
            {"jit:avx2:panel", Isa::avx2, gemm_panel_supports, create_gemv_avx2},
            // bf16 PackedB of another plan (not selectable): the blocked kernel for the shapes
            // selection gives to the reference (a PackedB in the blocked kernel's layout), and
            // the blocked kernel reading the reference's plain layout (a PackedB of such a plan),
            // ahead of ref:scalar, which reads that layout far slower.
            {"jit:avx512_bf16:bf16:any", Isa::avx512_bf16, gemm_jit_bf16_any_supports,
             [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx512_bf16); }, /*selectable=*/false},
            {"jit:avx512:bf16:any", Isa::avx512, gemm_jit_bf16_any_supports,
             [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx512); }, /*selectable=*/false},
            {"jit:avx2:bf16:any", Isa::avx2, gemm_jit_bf16_any_supports,
             [](const GemmSpec& s) { return create_gemm_jit(s, Isa::avx2); }, /*selectable=*/false},
            {"jit:avx512_bf16:bf16:plain", Isa::avx512_bf16, gemm_jit_bf16_dp_any_supports,
             [](const GemmSpec& s) { return create_gemm_jit_plain(s, Isa::avx512_bf16); }, /*selectable=*/false},
            {"jit:avx512:bf16:plain", Isa::avx512, gemm_jit_bf16_any_supports,
             [](const GemmSpec& s) { return create_gemm_jit_plain(s, Isa::avx512); }, /*selectable=*/false},
            {"jit:avx2:bf16:plain", Isa::avx2, gemm_jit_bf16_any_supports,
             [](const GemmSpec& s) { return create_gemm_jit_plain(s, Isa::avx2); }, /*selectable=*/false},
            // oneDNN's matmul: not selectable; the autotuner (gemm_select) routes here when it
            // measured it faster, and gemm_kernel_for_layout finds it for the plain layout (ahead
            // of ref:scalar, which reads that layout far slower).
            {"onednn", Isa::avx2, onednn_gemm_supports, create_gemm_onednn, /*selectable=*/false},
            {"ref:scalar", Isa::scalar, nullptr, create_gemm_reference},
        });
    return r;
}

namespace {

GemmCall make_call(const GemmDesc& d, const GemmArgs& args, const GemmPacked* packed) {
    GemmCall call;
    call.args = args;
    call.alpha = d.alpha;
    call.beta = d.beta;
    call.packed_b = packed;
    return call;
}

// ---- strided batch -----------------------------------------------------------------------------

// A batched PackedB: one pack per item (all of one kernel's layout) — or, where an item's B is
// empty (K or N is 0), one empty pack standing for all `count` (no allocation per item).
struct GemmPackedItems final : GemmPacked {
    GemmPackedItems(std::string layout_, int64_t count_, std::vector<std::shared_ptr<const GemmPacked>> v, size_t total)
        : GemmPacked(std::move(layout_), 0), count(count_), items(std::move(v)) {
        bytes = total;  // what PackedB::size_bytes reports (the base's own buffer is unused)
    }
    int64_t count;
    std::vector<std::shared_ptr<const GemmPacked>> items;  // count entries, or 1 for all
    const std::shared_ptr<const GemmPacked>* per_item() const {
        return static_cast<int64_t>(items.size()) == count ? items.data() : nullptr;
    }
};

inline const void* offset_ptr(const void* p, int64_t bytes) {
    return p ? static_cast<const char*>(p) + bytes : p;  // (a null pointer is never read)
}

// Runs the items of a validated batch: item i is one call of the item's kernel (its direct entry
// when it has one) on the pointers offset by i strides, with the shared pack or item i's.
struct BatchRun {
    const GemmKernel* kernel = nullptr;
    GemmSmallFn fast = nullptr;           // the kernel's direct entry (unpacked B only)
    const GemmBatch* batch = nullptr;
    const GemmArgs* args = nullptr;
    const float* alpha_beta = nullptr;    // {alpha, beta}
    const GemmPacked* shared_pack = nullptr;
    const std::shared_ptr<const GemmPacked>* item_packs = nullptr;  // batch->count entries, or null

    void item(int64_t i) const {
        GemmArgs a = *args;
        a.A = offset_ptr(args->A, i * batch->a);
        a.B = offset_ptr(args->B, i * batch->b);
        a.C = const_cast<void*>(offset_ptr(args->C, i * batch->c));
        a.residual = offset_ptr(args->residual, i * batch->res);
        if (fast) {
            fast(a.A, a.B, a.C, &a, alpha_beta);
            return;
        }
        GemmCall call;
        call.args = a;
        call.alpha = alpha_beta[0];
        call.beta = alpha_beta[1];
        call.packed_b = item_packs ? item_packs[i].get() : shared_pack;
        kernel->run(call);
    }
};

// Work of one item (multiply-adds; a K = 0 item still writes M N outputs) at which a kernel threads
// itself over one more thread (the blocked kernel's kMinMacsPerThread), and the efficiency assumed
// for an item threaded by its kernel (against items run one per thread).
constexpr double kBatchMacsPerThread = double(int64_t(1) << 21);
constexpr double kBatchItemThreadEff = 0.8;

struct BatchLoop {
    const BatchRun* run;
    int64_t end;
    std::atomic<int64_t> next{0};
};

// One parallel loop over the items when they outnumber the threads or are too small to occupy
// them all, each item on one thread (nested parallel_for runs inline there), handed out one at a
// time as threads become free (a core slowed by another process takes fewer); items that do not
// divide evenly over the threads run afterwards one after another, each threaded by its kernel,
// where that is estimated faster (large items: an item of t_item threads' work beats a round of
// single-thread items when t_item * kBatchItemThreadEff > the remainder).
void run_batch(const BatchRun& r, const GemmSpec& s) {
    const int64_t count = r.batch->count;
    const int nt = get_num_threads();
    int64_t spread = 0;  // items [0, spread) over the threads, one thread each
    if (nt > 1 && count > 1) {
        const double macs = double(s.M) * double(s.N) * double(std::max<int64_t>(s.K, 1));
        const double t_item = std::clamp(std::floor(macs / kBatchMacsPerThread), 1.0, double(nt));
        const int64_t rem = count % nt;
        spread = (rem > 0 && t_item * kBatchItemThreadEff > double(rem)) ? count - rem : count;
    }
    if (spread > 1) {
        BatchLoop loop{&r, spread};
        const int64_t threads = std::min<int64_t>(spread, nt);
        BatchLoop* lp = &loop;
        parallel_for(threads, 1, [lp](int64_t, int64_t) {
            for (int64_t i = lp->next.fetch_add(1, std::memory_order_relaxed); i < lp->end;
                 i = lp->next.fetch_add(1, std::memory_order_relaxed))
                lp->run->item(i);
        });
    } else {
        spread = 0;
    }
    for (int64_t i = spread; i < count; ++i) r.item(i);
}

void gemm_one_shot(const char* fn, const GemmDesc& desc, const GemmArgs& args) {
    const GemmSpec s = gemm_check_desc(fn, desc);
    const GemmBatch b = gemm_check_batch(fn, desc, s);
    if (b.count == 1) {
        gemm_check_args(fn, s, args, false);
        if (s.M == 0 || s.N == 0) return;
        const auto sel = gemm_select(s, false);  // a cached tuning decision, never a new one
        sel.kernel->run(make_call(desc, args, nullptr));
        return;
    }
    const GemmExtents x = gemm_extents(fn, s, b);
    gemm_check_args(fn, s, x, args, false);
    if (x.c == 0) return;  // batch, M or N is 0
    const auto sel = gemm_select(s, false);
    const float ab[2] = {desc.alpha, desc.beta};
    BatchRun r;
    r.kernel = sel.kernel.get();
    r.fast = sel.kernel->fast_path().fn;
    r.batch = &b;
    r.args = &args;
    r.alpha_beta = ab;
    run_batch(r, s);
}

}  // namespace
}  // namespace detail

namespace detail {

std::shared_ptr<const GemmKernel> gemm_kernel_for_layout(const GemmSpec& s, const std::string& layout) {
    const auto& reg = gemm_registry();
    const Isa cap = max_isa();
    for (const auto& impl : reg.impls()) {
        if (impl.isa > cap || !isa_supported(impl.isa)) continue;
        if (impl.supports && !impl.supports(s)) continue;
        auto sel = reg.get(s, impl);  // created once, through the kernel cache
        if (sel.kernel->packed_layout() == layout) return sel.kernel;
    }
    return nullptr;
}

uint32_t gemm_layout_id(const std::string& layout) {
    static std::mutex mu;
    static auto* ids = new std::unordered_map<std::string, uint32_t>();  // never destroyed (packs outlive statics)
    std::lock_guard<std::mutex> lk(mu);
    const auto it = ids->find(layout);
    if (it != ids->end()) return it->second;
    const auto id = static_cast<uint32_t>(ids->size() + 1);
    ids->emplace(layout, id);
    return id;
}

const GemmLayoutMemo::Entry* gemm_layout_memo_find(GemmLayoutMemo& memo, const GemmSpec& s, const GemmPacked& pack,
                                                   int cap) {
    std::lock_guard<std::mutex> lk(memo.mu);
    const GemmLayoutMemo::Entry* found = nullptr;
    for (const auto& e : memo.entries)
        if (e->layout_id == pack.layout_id && e->cap == cap) found = e.get();
    if (!found) {
        auto kernel = gemm_kernel_for_layout(s, pack.layout);
        if (!kernel) return nullptr;
        memo.entries.push_back(
            std::make_unique<const GemmLayoutMemo::Entry>(GemmLayoutMemo::Entry{pack.layout_id, cap, std::move(kernel)}));
        found = memo.entries.back().get();
    }
    memo.last.store(found, std::memory_order_release);
    return found;
}

}  // namespace detail

// ---- PackedB -----------------------------------------------------------------------------------

size_t PackedB::size_bytes() const noexcept { return data_ ? data_->bytes : 0; }
std::string PackedB::layout() const { return data_ ? data_->layout : std::string(); }

// ---- GemmPlan ----------------------------------------------------------------------------------

GemmPlan::GemmPlan(const GemmDesc& desc) {
    const detail::GemmSpec s = detail::gemm_check_desc("xk::GemmPlan", desc);
    const detail::GemmBatch batch = detail::gemm_check_batch("xk::GemmPlan", desc, s);
    // The registry's pick, or a measured choice (items of a batch are not timed: they run one per
    // thread where a timing would have threaded one product).
    const auto sel = detail::gemm_select(s, batch.count == 1);
    desc_ = detail::resolve_lds(desc);
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
    pack_layout_ = kernel_->packed_layout();
    const detail::GemmFastPath fast = kernel_->fast_path();
    state_ = std::make_shared<const detail::GemmPlanState>(
        detail::GemmPlanState{s,
                              detail::gemm_extents("xk::GemmPlan", s, batch),
                              batch.count == 1 ? fast : detail::GemmFastPath{},  // run(): one item, one call
                              {desc_.alpha, desc_.beta},
                              batch,
                              fast,
                              std::make_shared<detail::GemmLayoutMemo>(),
                              detail::gemm_layout_id(pack_layout_)});
}

GemmPlan::~GemmPlan() = default;

namespace detail {
namespace {
// GemmPlan::run(args) beyond the fast path: a moved-from plan, arguments that fail the checks
// (the full check throws with its message), empty C, kernels without a direct entry.
__attribute__((noinline)) void plan_run_general(const GemmKernel* kernel, const GemmPlanState* st,
                                                const GemmDesc& desc, const GemmArgs& args) {
    constexpr const char* fn = "xk::GemmPlan::run";
    if (!kernel) fail(Status::invalid_argument, std::string(fn) + ": the plan was moved from");
    if (!gemm_args_ok(*st, args, false)) check_args_inline(fn, st->spec, st->extents, args, false);
    if (st->extents.c == 0) return;  // batch, M or N is 0
    if (st->batch.count != 1) {
        BatchRun r;
        r.kernel = kernel;
        r.fast = st->item_fast.fn;
        r.batch = &st->batch;
        r.args = &args;
        r.alpha_beta = st->alpha_beta;
        run_batch(r, st->spec);
    } else if (st->fast.fn) {
        st->fast.fn(args.A, args.B, args.C, &args, st->alpha_beta);
    } else {
        kernel->run(make_call(desc, args, nullptr));
    }
}
}  // namespace
}  // namespace detail

// The fast path (a kernel with a direct entry, arguments that pass): the checks and a tail call
// into the generated code; everything else in plan_run_general, out of line, so that this
// function needs almost no frame.
void GemmPlan::run(const GemmArgs& args) const {
    const detail::GemmPlanState* st = state_.get();  // null in a moved-from plan
    if (__builtin_expect(st && st->fast.fn && detail::gemm_args_ok(*st, args, false), 1)) {
        st->fast.fn(args.A, args.B, args.C, &args, st->alpha_beta);
        return;
    }
    detail::plan_run_general(kernel_.get(), st, desc_, args);
}

void GemmPlan::run(const GemmArgs& args, const PackedB& packed_b) const {
    constexpr const char* fn = "xk::GemmPlan::run";
    if (!kernel_) detail::fail(Status::invalid_argument, std::string(fn) + ": the plan was moved from");
    if (packed_b.empty())
        detail::fail_arg(fn, "packed_b", "empty", "holds no data (make it with GemmPlan::pack_b)");
    const detail::GemmPlanState& st = *state_;
    const detail::GemmKernel* kernel = kernel_.get();
    // A batched PackedB (one pack per item) serves exactly the plans whose B is batched, of the
    // same batch count; a single one the others. (A plan of batch 0 computes nothing.)
    // (Unbatched plans skip the cast: a batched PackedB's layout, "<items' layout>:batch<n>", is
    // read by no kernel, so the layout check below rejects it.)
    const detail::GemmBatch& bt = st.batch;
    const detail::GemmPacked* pack = packed_b.data_.get();
    const auto* items = bt.count != 1 ? dynamic_cast<const detail::GemmPackedItems*>(pack) : nullptr;
    if (bt.count != 0) {
        if (bt.b_items() && !items)
            detail::fail_arg(fn, "packed_b", "'" + pack->layout + "'",
                             "holds one packed B, but this plan reads one B per item (batch=" + std::to_string(bt.count) +
                                 ", batch_stride_b=" + std::to_string(desc_.batch_stride_b) +
                                 "): pack B with this plan's pack_b");
        if (!bt.b_items() && items)
            detail::fail_arg(fn, "packed_b", "'" + pack->layout + "'",
                             "holds " + std::to_string(items->count) +
                                 " packed items, but this plan reads the same B for every item (batch=" +
                                 std::to_string(bt.count) + ", batch_stride_b=0)");
        if (items && items->count != bt.count)
            detail::fail_arg(fn, "packed_b", "'" + pack->layout + "'",
                             "holds " + std::to_string(items->count) + " packed items, but this plan has batch=" +
                                 std::to_string(bt.count));
        if (items) pack = items->items[0].get();
    }
    if (bt.count != 0 && pack->layout_id != st.layout_id) {
        // Packed by a plan of another batch size (or shape class): run with the best kernel that
        // reads that layout, so one packed weight serves every M (as ipex.optimize's does).
        // The kernels found are kept per (layout, cap): decode plans run every call on a prefill
        // plan's packed weight, and the hit is one atomic load and two integer compares.
        detail::GemmLayoutMemo& memo = *st.other;
        const int cap = static_cast<int>(max_isa());
        const detail::GemmLayoutMemo::Entry* e = memo.last.load(std::memory_order_acquire);
        if (__builtin_expect(!e || e->layout_id != pack->layout_id || e->cap != cap, 0))
            e = detail::gemm_layout_memo_find(memo, st.spec, *pack, cap);
        if (!e)
            detail::fail_arg(fn, "packed_b", "'" + packed_b.data_->layout + "'",
                             "was packed for another plan: this plan (" + std::string(impl_name_) +
                                 ") reads layout '" + pack_layout_ +
                                 "' and no kernel allowed under the ISA cap reads that one (pack B with this plan's pack_b)");
        kernel = e->kernel.get();
    }
    if (!detail::gemm_args_ok(st, args, true)) detail::check_args_inline(fn, st.spec, st.extents, args, true);
    if (st.extents.c == 0) return;  // batch, M or N is 0
    if (bt.count == 1) {
        kernel->run(detail::make_call(desc_, args, pack));
        return;
    }
    detail::BatchRun r;
    r.kernel = kernel;
    r.batch = &bt;
    r.args = &args;
    r.alpha_beta = st.alpha_beta;
    r.shared_pack = pack;
    r.item_packs = items ? items->per_item() : nullptr;
    detail::run_batch(r, st.spec);
}

PackedB GemmPlan::pack_b(const void* B) const {
    constexpr const char* fn = "xk::GemmPlan::pack_b";
    if (!kernel_) detail::fail(Status::invalid_argument, std::string(fn) + ": the plan was moved from");
    const detail::GemmBatch& bt = state_->batch;
    PackedB p;
    if (bt.count == 1 || (bt.count > 1 && !bt.b_items())) {  // one B for every item
        if (desc_.K > 0 && desc_.N > 0) detail::check_not_null(fn, "B", B);
        p.data_ = kernel_->pack_b(B);
        return p;
    }
    // One pack per item (none for batch 0), packed over the threads; an empty B (K or N is 0):
    // one empty pack for all.
    const std::string layout = pack_layout_ + ":batch" + std::to_string(bt.count);
    if (desc_.K == 0 || desc_.N == 0) {
        std::vector<std::shared_ptr<const detail::GemmPacked>> one{kernel_->pack_b(B)};
        const size_t bytes = one[0]->bytes;
        p.data_ = std::make_shared<const detail::GemmPackedItems>(layout, bt.count, std::move(one), bytes);
        return p;
    }
    if (bt.count > 0) detail::check_not_null(fn, "B", B);
    std::vector<std::shared_ptr<const detail::GemmPacked>> items(static_cast<size_t>(bt.count));
    const detail::GemmKernel* k = kernel_.get();
    detail::parallel_for(bt.count, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) items[i] = k->pack_b(detail::offset_ptr(B, i * bt.b));
    });
    size_t total = 0;
    for (const auto& it : items) total += it->bytes;
    p.data_ = std::make_shared<const detail::GemmPackedItems>(layout, bt.count, std::move(items), total);
    return p;
}

// ---- one-shot ----------------------------------------------------------------------------------

void gemm(const GemmDesc& desc, const GemmArgs& args) { detail::gemm_one_shot("xk::gemm", desc, args); }

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    GemmDesc d;
    d.M = M, d.N = N, d.K = K;
    d.trans_a = trans_a, d.trans_b = trans_b;
    d.lda = lda, d.ldb = ldb, d.ldc = ldc;
    d.alpha = alpha, d.beta = beta;
    GemmArgs a;
    a.A = A, a.B = B, a.C = C;
    detail::gemm_one_shot("xk::sgemm", d, a);
}

}  // namespace xk
