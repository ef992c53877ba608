// Internal interface of the conversions (xk/convert.hpp), shared with the tests and xk-info.
#pragma once
#include <cstdint>

#include "xk/isa.hpp"
#include "xk/types.hpp"

namespace xk::detail {

// n >= 0 contiguous elements, single-threaded.
using ConvertFn = void (*)(int64_t n, const void* src, void* dst);

struct ConvertImpl {
    const char* name;  // "avx512", "avx2", "scalar", "copy"
    ConvertFn fn;
    ConvertFn fn_nt;  // the same results, written with streaming stores where dst allows (then SFENCE)
};

// The implementation for (src, dst) under the ISA cap (both dtypes among f32, bf16, f16).
ConvertImpl convert_impl(DType src, DType dst, Isa cap);

// Scalar oracle of one element (xk::bf16 / xk::f16), by bits: src / dst of the given types.
void convert_scalar(int64_t n, DType src, const void* s, DType dst, void* d);

}  // namespace xk::detail
