// C API: conversions f32 <-> bf16 <-> f16.
#include "capi/capi_common.hpp"
#include "xk/convert.hpp"

using xk::detail::capi_call;

static_assert(static_cast<int>(XK_DTYPE_F16) == static_cast<int>(xk::DType::f16), "xk_dtype and xk::DType differ");

extern "C" {

xk_status xk_convert(int64_t n, xk_dtype src_type, const void* src, xk_dtype dst_type, void* dst) {
    return capi_call([&] { xk::convert(n, static_cast<xk::DType>(xk::detail::c_enum(src_type)), src, static_cast<xk::DType>(xk::detail::c_enum(dst_type)), dst); });
}

xk_status xk_convert_2d(int64_t rows, int64_t cols, xk_dtype src_type, const void* src, int64_t ld_src,
                        xk_dtype dst_type, void* dst, int64_t ld_dst) {
    return capi_call([&] {
        xk::convert_2d(rows, cols, static_cast<xk::DType>(xk::detail::c_enum(src_type)), src, ld_src, static_cast<xk::DType>(xk::detail::c_enum(dst_type)), dst,
                       ld_dst);
    });
}

}  // extern "C"
