/* xkernels C API — the OpenCL backend (see xk/xk.h for xk_status and xk_last_error; the C++ API
 * and its semantics: include/xk/gpu.hpp, docs/gpu.md).
 * Handles: a context (OpenCL context + one in-order queue + its caching allocator) and buffers
 * from it. A buffer keeps its context alive: destroy them in any order. Ops are enqueued and
 * return at once; xk_gpu_finish waits for them; reads and writes are blocking. Tensors are a
 * buffer plus an offset in elements of the tensor's dtype (f32, bf16 or f16 storage, f32 math);
 * a NULL buffer means "absent" where an argument is optional (weight, bias, k). */
#ifndef XK_C_GPU_H
#define XK_C_GPU_H
#include "xk/xk.h"
#include "xk/c/gemm.h"

/* (struct xk_gemm_desc: xk/c/gemm.h; named by its tag here, which works whichever of the two
 * headers is included first) */
struct xk_gemm_desc;
#ifdef __cplusplus
extern "C" {
#endif

typedef struct xk_gpu_context_s* xk_gpu_context;
typedef struct xk_gpu_buffer_s* xk_gpu_buffer;

typedef struct xk_gpu_tensor {
    xk_gpu_buffer buffer; /* NULL: absent */
    int64_t offset;       /* elements of the tensor's dtype */
} xk_gpu_tensor;

typedef struct xk_gpu_memory_stats {
    int64_t allocated_bytes, reserved_bytes, peak_allocated_bytes, peak_reserved_bytes;
    int64_t num_allocs, num_frees, num_segments, num_cache_hits, num_ooms;
} xk_gpu_memory_stats;

/* Devices: *count = 0 when there is none (or the build has no OpenCL). */
xk_status xk_gpu_device_count(int* count);
/* "<platform> / <device>" of device `index`, NUL-terminated, truncated to fit `size` bytes. */
xk_status xk_gpu_device_name(int index, char* buf, size_t size);
/* The device a context gets by default (XK_GPU_DEVICE, else the first GPU, else device 0). */
xk_status xk_gpu_selected_device(int* index);

/* device_index < 0: the selected device. */
xk_status xk_gpu_context_create(int device_index, xk_gpu_context* out);
void xk_gpu_context_destroy(xk_gpu_context ctx); /* NULL: no-op */
xk_status xk_gpu_finish(xk_gpu_context ctx);
xk_status xk_gpu_memory_stats_get(xk_gpu_context ctx, xk_gpu_memory_stats* out);
xk_status xk_gpu_empty_cache(xk_gpu_context ctx);
/* Cap on the memory the allocator reserves (0 = the device's global memory). */
xk_status xk_gpu_set_memory_limit(xk_gpu_context ctx, int64_t bytes);

/* bytes >= 0 (0: an empty buffer). Out of device memory: XK_OUT_OF_MEMORY. */
xk_status xk_gpu_buffer_create(xk_gpu_context ctx, int64_t bytes, xk_gpu_buffer* out);
void xk_gpu_buffer_destroy(xk_gpu_buffer buf); /* NULL: no-op */
xk_status xk_gpu_buffer_bytes(xk_gpu_buffer buf, int64_t* bytes);
/* Blocking copies of `bytes` bytes at byte `offset` of the buffer. */
xk_status xk_gpu_buffer_write(xk_gpu_buffer buf, int64_t offset, const void* src, int64_t bytes);
xk_status xk_gpu_buffer_read(xk_gpu_buffer buf, int64_t offset, void* dst, int64_t bytes);

/* RMSNorm / LayerNorm over rows of hidden (ld 0 = hidden); weight / bias: NULL buffer = none.
 * residual.buffer != NULL: the pre-norm block, residual = x + residual (in place), y = norm(residual). */
xk_status xk_gpu_rms_norm(xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t hidden, xk_gpu_tensor x, int64_t ld_x,
                          xk_gpu_tensor residual, int64_t ld_residual, xk_gpu_tensor weight, float eps, xk_gpu_tensor y,
                          int64_t ld_y);
xk_status xk_gpu_layer_norm(xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t hidden, xk_gpu_tensor x,
                            int64_t ld_x, xk_gpu_tensor residual, int64_t ld_residual, xk_gpu_tensor weight,
                            xk_gpu_tensor bias, float eps, xk_gpu_tensor y, int64_t ld_y);
/* y[r, i] = act(x[r, i]) * x[r, inner + i] (XK_ACT_SILU: SwiGLU / silu_and_mul). */
xk_status xk_gpu_glu(xk_gpu_context ctx, xk_activation act, xk_dtype dtype, int64_t rows, int64_t inner, xk_gpu_tensor x,
                     int64_t ld_x, xk_gpu_tensor y, int64_t ld_y);
/* y = softmax(scale * x) per row, causal as in xk/c/llm.h. */
xk_status xk_gpu_softmax(xk_gpu_context ctx, xk_dtype dtype, int64_t rows, int64_t cols, xk_gpu_tensor x, int64_t ld_x,
                         xk_gpu_tensor y, int64_t ld_y, float scale, int causal, int64_t causal_offset);
/* RoPE in place on packed q [tokens x q_heads x head_dim] and k (NULL buffer with k_heads = 0),
 * neox (is_neox != 0) or gptj; int64 positions; an f32 cos_sin_cache [max_position x rotary_dim]
 * (rotary_dim 0 = head_dim). A position outside [0, max_position) leaves its token untouched. */
xk_status xk_gpu_rope(xk_gpu_context ctx, xk_dtype dtype, int is_neox, int64_t tokens, int64_t q_heads, int64_t k_heads,
                      int64_t head_dim, int64_t rotary_dim, xk_gpu_tensor q, xk_gpu_tensor k, xk_gpu_tensor positions,
                      xk_gpu_tensor cos_sin_cache, int64_t max_position);

/* GEMM on the device with the CPU GEMM's descriptor (xk/c/gemm.h's xk_gemm_desc; C++:
 * xk/gpu_gemm.hpp): C = act(alpha * op(A) op(B) + beta * C + bias) + residual, strided batch.
 * Types: f32 x f32 -> f32; bf16 x bf16 or f16 x f16 -> f32, bf16 or f16 (f32 accumulation);
 * residual f32 / bf16 / f16; anything else is XK_UNSUPPORTED. Each operand is a buffer + offset in
 * elements of its type; the descriptor's extent must lie inside the buffer, every buffer must
 * come from ctx, C must not be an input's buffer. bias: f32[N] (desc->bias != 0), residual:
 * desc->residual != 0; absent operands may be NULL buffers. Enqueued (xk_gpu_finish waits); a
 * rejected call enqueues nothing. M, N or batch 0: nothing to do. */
typedef struct xk_gpu_gemm_tensors {
    xk_gpu_tensor A, B, C, bias, residual;
} xk_gpu_gemm_tensors;
xk_status xk_gpu_gemm(xk_gpu_context ctx, const struct xk_gemm_desc* desc, const xk_gpu_gemm_tensors* t);
/* The kernel xk_gpu_gemm runs for desc on ctx ("gpu:tiled:MWG64,..."; tunes on first use of a
 * shape class, like xk_gpu_gemm), NUL-terminated, truncated to fit `size` bytes (size >= 1). */
xk_status xk_gpu_gemm_kernel_name(xk_gpu_context ctx, const struct xk_gemm_desc* desc, char* buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
