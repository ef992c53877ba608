/* xkernels C API — element type conversions f32 <-> bf16 <-> f16 (see include/xk/convert.hpp):
 * round to nearest even, NaN kept quiet, denormals kept, bit for bit as xk::bf16 / xk::f16.
 * Types among XK_DTYPE_F32, XK_DTYPE_BF16, XK_DTYPE_F16 (bf16 / f16 as uint16_t bit patterns);
 * src and dst must not overlap. */
#ifndef XK_C_CONVERT_H
#define XK_C_CONVERT_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

xk_status xk_convert(int64_t n, xk_dtype src_type, const void* src, xk_dtype dst_type, void* dst);
/* [rows x cols], row strides in elements (0 = cols). */
xk_status xk_convert_2d(int64_t rows, int64_t cols, xk_dtype src_type, const void* src, int64_t ld_src,
                        xk_dtype dst_type, void* dst, int64_t ld_dst);

#ifdef __cplusplus
}
#endif
#endif
