/* xkernels C API — embedding_bag family (see xk/xk.h for xk_status and xk_last_error). */
#ifndef XK_C_EMBEDDING_BAG_H
#define XK_C_EMBEDDING_BAG_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif
