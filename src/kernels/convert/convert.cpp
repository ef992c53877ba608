// Conversions f32 <-> bf16 <-> f16: AVX-512 (zmm, opmask tails) and AVX2 + F16C (ymm, scalar
// tails) kernels by intrinsics in target-attributed functions; scalar oracle; the public entry
// points (validation, threading).
#include "kernels/convert/convert.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/check.hpp"
#include "common/overlap.hpp"
#include "common/parallel.hpp"
#include "common/streaming.hpp"
#include "xk/convert.hpp"
#include "xk/error.hpp"

namespace xk {
namespace detail {
namespace {

bool conv_type(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

inline float load_one(DType t, const void* p, int64_t i) {
    switch (t) {
        case DType::f32: return static_cast<const float*>(p)[i];
        case DType::bf16: return bf16::to_float(static_cast<const uint16_t*>(p)[i]);
        default: return f16::to_float(static_cast<const uint16_t*>(p)[i]);
    }
}
inline void store_one(DType t, void* p, int64_t i, float v) {
    switch (t) {
        case DType::f32: static_cast<float*>(p)[i] = v; break;
        case DType::bf16: static_cast<uint16_t*>(p)[i] = bf16::from_float(v); break;
        default: static_cast<uint16_t*>(p)[i] = f16::from_float(v); break;
    }
}

template <DType S, DType D>
void scalar_kernel(int64_t n, const void* s, void* d) {
    for (int64_t i = 0; i < n; ++i) store_one(D, d, i, load_one(S, s, i));
}

template <int Size>
void copy_kernel(int64_t n, const void* s, void* d) {
    if (n > 0) std::memcpy(d, s, static_cast<size_t>(n) * Size);
}

// ---- AVX-512 ----
#define XK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

template <DType S>
XK_AVX512 inline __m512 load16(const void* p, __mmask16 m) {
    if constexpr (S == DType::f32) return _mm512_maskz_loadu_ps(m, p);
    else if constexpr (S == DType::bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    else return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

template <DType D, bool NT = false>
XK_AVX512 inline void store16(void* p, __m512 v, __mmask16 m) {
    if constexpr (D == DType::f32) {
        if constexpr (NT) _mm512_stream_ps(static_cast<float*>(p), v);
        else _mm512_mask_storeu_ps(p, m, v);
    } else if constexpr (D == DType::bf16) {
        const __m512i u = _mm512_castps_si512(v);
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        if constexpr (NT) _mm256_stream_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
        else _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
    } else {
        const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if constexpr (NT) _mm256_stream_si256(static_cast<__m256i*>(p), h);
        else _mm256_mask_storeu_epi16(p, m, h);
    }
}

// Software prefetch distance (bytes) of the source in the streaming loops (large arrays only; a
// prefetch past the end of the array does not fault).
constexpr int kPrefetch = 4096;

// Elements before dst reaches a 64-byte boundary (converted by the scalar oracle), at most n.
template <DType D>
int64_t nt_head(int64_t n, const void* d) {
    constexpr int ds = dtype_size(D);
    const uintptr_t a = reinterpret_cast<uintptr_t>(d);
    if (a % ds != 0) return -1;  // not element-aligned: no streaming
    return std::min<int64_t>(n, static_cast<int64_t>(((64 - a % 64) % 64) / ds));
}

template <DType S, DType D, bool NT>
XK_AVX512 void avx512_kernel(int64_t n, const void* s, void* d) {
    constexpr int ss = dtype_size(S), ds = dtype_size(D);
    const char* sp = static_cast<const char*>(s);
    char* dp = static_cast<char*>(d);
    int64_t i = 0;
    if constexpr (NT) {
        const int64_t h = nt_head<D>(n, d);
        if (h < 0) return avx512_kernel<S, D, false>(n, s, d);
        scalar_kernel<S, D>(h, sp, dp);
        i = h;
        for (; i + 64 <= n; i += 64) {
            for (int o = 0; o < 64 * ss; o += 64) _mm_prefetch(sp + i * ss + kPrefetch + o, _MM_HINT_T0);
            const __m512 a = load16<S>(sp + i * ss, 0xffff), b = load16<S>(sp + (i + 16) * ss, 0xffff);
            const __m512 c = load16<S>(sp + (i + 32) * ss, 0xffff), e = load16<S>(sp + (i + 48) * ss, 0xffff);
            store16<D, true>(dp + i * ds, a, 0xffff);
            store16<D, true>(dp + (i + 16) * ds, b, 0xffff);
            store16<D, true>(dp + (i + 32) * ds, c, 0xffff);
            store16<D, true>(dp + (i + 48) * ds, e, 0xffff);
        }
        _mm_sfence();
    }
    for (; i + 64 <= n; i += 64) {
        const __m512 a = load16<S>(sp + i * ss, 0xffff), b = load16<S>(sp + (i + 16) * ss, 0xffff);
        const __m512 c = load16<S>(sp + (i + 32) * ss, 0xffff), e = load16<S>(sp + (i + 48) * ss, 0xffff);
        store16<D>(dp + i * ds, a, 0xffff);
        store16<D>(dp + (i + 16) * ds, b, 0xffff);
        store16<D>(dp + (i + 32) * ds, c, 0xffff);
        store16<D>(dp + (i + 48) * ds, e, 0xffff);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
        store16<D>(dp + i * ds, load16<S>(sp + i * ss, m), m);
    }
}

// ---- AVX2 + F16C ----
#define XK_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType S>
XK_AVX2 inline __m256 load8(const void* p) {
    if constexpr (S == DType::f32) return _mm256_loadu_ps(static_cast<const float*>(p));
    else if constexpr (S == DType::bf16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 16));
    else return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

// bf16 bits of v (to nearest even, NaN quiet) in the low half of each dword.
XK_AVX2 inline __m256i bf16_dwords(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    return _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

template <DType D, bool NT = false>
XK_AVX2 inline void store16x2(void* p, __m256 a, __m256 b) {  // 16 elements
    if constexpr (D == DType::f32) {
        if constexpr (NT) {
            _mm256_stream_ps(static_cast<float*>(p), a);
            _mm256_stream_ps(static_cast<float*>(p) + 8, b);
        } else {
            _mm256_storeu_ps(static_cast<float*>(p), a);
            _mm256_storeu_ps(static_cast<float*>(p) + 8, b);
        }
    } else {
        __m256i w;
        if constexpr (D == DType::bf16)
            w = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_dwords(a), bf16_dwords(b)), 0xd8);
        else
            w = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)),
                                        _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT), 1);
        if constexpr (NT) _mm256_stream_si256(static_cast<__m256i*>(p), w);
        else _mm256_storeu_si256(static_cast<__m256i*>(p), w);
    }
}

template <DType S, DType D, bool NT>
XK_AVX2 void avx2_kernel(int64_t n, const void* s, void* d) {
    constexpr int ss = dtype_size(S), ds = dtype_size(D);
    const char* sp = static_cast<const char*>(s);
    char* dp = static_cast<char*>(d);
    int64_t i = 0;
    if constexpr (NT) {
        const int64_t h = nt_head<D>(n, d);
        if (h < 0) return avx2_kernel<S, D, false>(n, s, d);
        scalar_kernel<S, D>(h, sp, dp);
        i = h;
        for (; i + 32 <= n; i += 32) {
            for (int o = 0; o < 32 * ss; o += 64) _mm_prefetch(sp + i * ss + kPrefetch + o, _MM_HINT_T0);
            const __m256 a = load8<S>(sp + i * ss), b = load8<S>(sp + (i + 8) * ss);
            const __m256 c = load8<S>(sp + (i + 16) * ss), e = load8<S>(sp + (i + 24) * ss);
            store16x2<D, true>(dp + i * ds, a, b);
            store16x2<D, true>(dp + (i + 16) * ds, c, e);
        }
        _mm_sfence();
    }
    for (; i + 32 <= n; i += 32) {
        const __m256 a = load8<S>(sp + i * ss), b = load8<S>(sp + (i + 8) * ss);
        const __m256 c = load8<S>(sp + (i + 16) * ss), e = load8<S>(sp + (i + 24) * ss);
        store16x2<D>(dp + i * ds, a, b);
        store16x2<D>(dp + (i + 16) * ds, c, e);
    }
    for (; i + 16 <= n; i += 16) store16x2<D>(dp + i * ds, load8<S>(sp + i * ss), load8<S>(sp + (i + 8) * ss));
    scalar_kernel<S, D>(n - i, sp + i * ss, dp + i * ds);  // tail: the oracle, bit-identical
}

template <DType S, DType D>
ConvertImpl pick(Isa cap) {
    if constexpr (S == D) {
        return {"copy", copy_kernel<dtype_size(S)>, copy_kernel<dtype_size(S)>};
    } else {
        if (cap >= Isa::avx512 && isa_supported(Isa::avx512))
            return {"avx512", avx512_kernel<S, D, false>, avx512_kernel<S, D, true>};
        if (cap >= Isa::avx2 && isa_supported(Isa::avx2)) return {"avx2", avx2_kernel<S, D, false>, avx2_kernel<S, D, true>};
        return {"scalar", scalar_kernel<S, D>, scalar_kernel<S, D>};
    }
}

template <DType S>
ConvertImpl pick_dst(DType d, Isa cap) {
    switch (d) {
        case DType::f32: return pick<S, DType::f32>(cap);
        case DType::bf16: return pick<S, DType::bf16>(cap);
        default: return pick<S, DType::f16>(cap);
    }
}

void check_type(const char* fn, const char* arg, DType t) {
    if (conv_type(t)) return;
    const int v = static_cast<int>(t);
    if (v < 0 || v > static_cast<int>(DType::f16)) fail_arg(fn, arg, std::to_string(v), "is not a valid DType");
    fail(Status::unsupported, std::string(fn) + ": " + arg + "=" + dtype_name(t) + " is not supported (f32, bf16 or f16)");
}

constexpr int64_t kConvertBlock = 32768;  // elements per parallel chunk

void run_2d(const char* fn, int64_t rows, int64_t cols, DType st, const void* src, int64_t ld_src, DType dt, void* dst,
            int64_t ld_dst) {
    check_nonnegative(fn, "rows", rows);
    check_nonnegative(fn, "cols", cols);
    check_type(fn, "src_type", st);
    check_type(fn, "dst_type", dt);
    if (ld_src == 0) ld_src = cols;
    else check_ld(fn, "ld_src", ld_src, cols, "cols");
    if (ld_dst == 0) ld_dst = cols;
    else check_ld(fn, "ld_dst", ld_dst, cols, "cols");
    if (rows == 0 || cols == 0) return;
    check_not_null(fn, "src", src);
    check_not_null(fn, "dst", dst);
    checked_add(fn, "(rows-1)*ld_src+cols", checked_mul(fn, "(rows-1)*ld_src", rows - 1, ld_src), cols);
    checked_add(fn, "(rows-1)*ld_dst+cols", checked_mul(fn, "(rows-1)*ld_dst", rows - 1, ld_dst), cols);
    const int ss = dtype_size(st), ds = dtype_size(dt);
    const MemRegion rs = matrix_region(src, rows, cols, ld_src, ss), rd = matrix_region(dst, rows, cols, ld_dst, ds);
    if (regions_overlap(rs, rd)) fail_arg(fn, "dst", ptr_str(dst), "overlaps src=" + ptr_str(src));
    const ConvertImpl impl = convert_impl(st, dt, max_isa());
    // streaming stores (no read for ownership) for outputs too large to stay in the LLC
    const ConvertFn f = use_nt_stores(rows * cols * ds) ? impl.fn_nt : impl.fn;
    const char* sp = static_cast<const char*>(src);
    char* dp = static_cast<char*>(dst);
    if (rows == 1 || (ld_src == cols && ld_dst == cols)) {  // one contiguous run
        const int64_t n = rows * cols, blocks = (n + kConvertBlock - 1) / kConvertBlock;
        if (blocks == 1) {
            f(n, sp, dp);
            return;
        }
        parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
            const int64_t i0 = b * kConvertBlock, i1 = std::min(n, e * kConvertBlock);
            f(i1 - i0, sp + i0 * ss, dp + i0 * ds);
        });
        return;
    }
    const int64_t grain = std::max<int64_t>(1, kConvertBlock / cols);
    parallel_for(rows, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) f(cols, sp + r * ld_src * ss, dp + r * ld_dst * ds);
    });
}

}  // namespace

ConvertImpl convert_impl(DType src, DType dst, Isa cap) {
    switch (src) {
        case DType::f32: return pick_dst<DType::f32>(dst, cap);
        case DType::bf16: return pick_dst<DType::bf16>(dst, cap);
        default: return pick_dst<DType::f16>(dst, cap);
    }
}

void convert_scalar(int64_t n, DType src, const void* s, DType dst, void* d) {
    if (src == dst) {
        if (n > 0) std::memcpy(d, s, static_cast<size_t>(n) * dtype_size(src));
        return;
    }
    for (int64_t i = 0; i < n; ++i) store_one(dst, d, i, load_one(src, s, i));
}

}  // namespace detail

void convert(int64_t n, DType src_type, const void* src, DType dst_type, void* dst) {
    constexpr const char* fn = "xk::convert";
    detail::check_nonnegative(fn, "n", n);
    detail::run_2d(fn, 1, n, src_type, src, 0, dst_type, dst, 0);
}

void convert_2d(int64_t rows, int64_t cols, DType src_type, const void* src, int64_t ld_src, DType dst_type, void* dst,
                int64_t ld_dst) {
    detail::run_2d("xk::convert_2d", rows, cols, src_type, src, ld_src, dst_type, dst, ld_dst);
}

void convert(int64_t n, const float* src, bf16* dst) { convert(n, DType::f32, src, DType::bf16, dst); }
void convert(int64_t n, const float* src, f16* dst) { convert(n, DType::f32, src, DType::f16, dst); }
void convert(int64_t n, const bf16* src, float* dst) { convert(n, DType::bf16, src, DType::f32, dst); }
void convert(int64_t n, const f16* src, float* dst) { convert(n, DType::f16, src, DType::f32, dst); }
void convert(int64_t n, const bf16* src, f16* dst) { convert(n, DType::bf16, src, DType::f16, dst); }
void convert(int64_t n, const f16* src, bf16* dst) { convert(n, DType::f16, src, DType::bf16, dst); }

}  // namespace xk
