/* xkernels — C API over the same entry points as the C++ API, for callers outside C++.
 * Every function returns an xk_status; on failure xk_last_error() holds the message (per thread).
 * Row-major layouts, sizes as int64_t, exactly as in the C++ headers. */
#ifndef XK_XK_H
#define XK_XK_H
#include <stddef.h>
#include <stdint.h>

/* C++ sees the enumerations of the C API with a fixed underlying type (int): whatever int a
 * caller stores in one is a value of the type (C allows that too), and every entry point rejects
 * the values it does not know with XK_INVALID_ARGUMENT naming the argument. Same size and
 * calling convention as the C declaration. */
#ifdef __cplusplus
#define XK_ENUM_INT : int
#else
#define XK_ENUM_INT
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_status XK_ENUM_INT {
    XK_SUCCESS = 0,
    XK_INVALID_ARGUMENT = 1,
    XK_UNSUPPORTED = 2,
    XK_ISA_UNAVAILABLE = 3,
    XK_OUT_OF_MEMORY = 4,
    XK_RUNTIME_ERROR = 5,
} xk_status;

typedef enum xk_isa XK_ENUM_INT {
    XK_ISA_SCALAR = 0, XK_ISA_AVX2 = 1, XK_ISA_AVX2_VNNI = 2, XK_ISA_AVX512 = 3,
    XK_ISA_AVX512_VNNI = 4, XK_ISA_AVX512_BF16 = 5, XK_ISA_AMX = 6,
} xk_isa;

typedef enum xk_activation XK_ENUM_INT {
    XK_ACT_NONE = 0, XK_ACT_RELU = 1, XK_ACT_GELU_ERF = 2, XK_ACT_GELU_TANH = 3, XK_ACT_SILU = 4,
} xk_activation;

#ifndef XK_DTYPE_DEFINED
#define XK_DTYPE_DEFINED
/* Element types (same values as xk::DType), used by the family headers. */
typedef enum xk_dtype XK_ENUM_INT {
    XK_DTYPE_F32 = 0, XK_DTYPE_BF16 = 1, XK_DTYPE_S8 = 2, XK_DTYPE_U8 = 3, XK_DTYPE_S32 = 4,
    XK_DTYPE_F16 = 5, /* IEEE half: conversions only (xk/c/convert.h) */
} xk_dtype;
#endif

/* Message of the last failed call on this thread ("" when none). */
const char* xk_last_error(void);
const char* xk_version(void);

xk_status xk_get_max_isa(xk_isa* out);
xk_status xk_set_max_isa(xk_isa cap);
const char* xk_isa_name(xk_isa isa);
xk_status xk_set_num_threads(int n);

/* y = alpha*x + beta*y */
xk_status xk_axpby(int64_t n, float alpha, const float* x, float beta, float* y);

#ifdef __cplusplus
}
#endif

/* Op families. */
#include "xk/c/gemm.h"
#include "xk/c/conv.h"
#include "xk/c/embedding_bag.h"
#include "xk/c/optim.h"
#include "xk/c/norm.h"
#include "xk/c/rope.h"
#include "xk/c/quant.h"
#include "xk/c/convert.h"
#include "xk/c/llm.h"
#include "xk/c/woq.h"
#include "xk/c/qlinear.h"
#include "xk/c/attention.h"
#include "xk/c/gpu.h"

#endif /* XK_XK_H */
