// xkernels — element type conversions between f32, bf16 and f16 (IEEE half), at memory speed.
//
//   f32  -> bf16 / f16: round to nearest, ties to even (one rounding); overflow to +-inf
//                       (f16: |x| >= 65520); denormal results kept (bf16: as xk::bf16, f16:
//                       half subnormals); NaN stays NaN and quiet (xk::bf16: the upper payload
//                       bits | 0x40; f16: the upper 10 payload bits with the quiet bit).
//   bf16 / f16 -> f32:  exact (f16 NaN made quiet, bf16 bits shifted as they are).
//   bf16 <-> f16:       through the exact f32 value: one rounding.
//   same type:          a copy.
// Results are bit for bit those of xk::bf16 / xk::f16 (types.hpp) on every ISA: AVX2 + F16C
// (VCVTPS2PH / VCVTPH2PS, integer rounding for bf16) and AVX-512 (the same on zmm, opmask tails;
// not VCVTNEPS2BF16, which flushes denormals). Large arrays run in parallel.
//
// Errors (nothing written): n < 0, a null pointer when n > 0, a dtype outside {f32, bf16, f16}
// (xk::Status::unsupported; invalid_argument for a value that is no DType), src and dst
// overlapping (any shared byte).
#pragma once
#include <cstdint>

#include "xk/types.hpp"

namespace xk {

void convert(int64_t n, DType src_type, const void* src, DType dst_type, void* dst);

// [rows x cols] with row strides in elements (0 = cols; otherwise >= cols).
void convert_2d(int64_t rows, int64_t cols, DType src_type, const void* src, int64_t ld_src, DType dst_type,
                void* dst, int64_t ld_dst);

// Typed forms.
void convert(int64_t n, const float* src, bf16* dst);
void convert(int64_t n, const float* src, f16* dst);
void convert(int64_t n, const bf16* src, float* dst);
void convert(int64_t n, const f16* src, float* dst);
void convert(int64_t n, const bf16* src, f16* dst);
void convert(int64_t n, const f16* src, bf16* dst);

}  // namespace xk
