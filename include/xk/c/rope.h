/* xkernels C API — rope family (see xk/xk.h for xk_status and xk_last_error). */
#ifndef XK_C_ROPE_H
#define XK_C_ROPE_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
