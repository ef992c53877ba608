// xkernels — what the OpenCL GEMM kernels share (inlined into gemm.cl and gemm_xmx.cl when they
// are embedded): the C / residual element types (C_T, R_T: 0 f32, 1 bf16, 2 f16), bf16
// conversions, the activations of xk::Activation and the fused epilogue of one element.
#if C_T == 0
typedef float c_t;
#else
typedef ushort c_t;
#endif
#if R_T == 0
typedef float r_t;
#else
typedef ushort r_t;
#endif

inline float xk_bf16_to_f32(ushort b) { return as_float(((uint)b) << 16); }
inline ushort xk_f32_to_bf16(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

// Element loads by type (index in elements).
#define XK_LD(T, p, i) ((T) == 0 ? (float)((const __global float*)(p))[i] \
                       : (T) == 1 ? xk_bf16_to_f32(((const __global ushort*)(p))[i]) \
                                  : vload_half((i), (const __global half*)(p)))
// Flags (runtime, so one binary serves every epilogue).
#define XK_BETA 1
#define XK_BIAS 2
#define XK_RESID 4
#define XK_VEC_A 8
#define XK_VEC_B 16

inline float xk_act(float x, int act) {
    switch (act) {
        case 1: return x > 0.0f ? x : 0.0f;                                   // relu
        case 2: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));     // gelu_erf
        case 3: return 0.5f * x * (1.0f + tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        case 4: return x / (1.0f + exp(-x));                                  // silu
        default: return x;
    }
}

// The fused epilogue of one element (m, n) (include/xk/gemm.hpp's math). Not inlined: the
// kernels call it from fully unrolled loops (one call per element of the register tile), and
// inlining erf / tanh / exp that many times multiplies the compile time (PoCL: 10 s a variant).
__attribute__((noinline)) void xk_epilogue(float acc, int m, int n, __global c_t* C, int ldc, float alpha, float beta, int flags,
                        int act, const __global float* bias, const __global r_t* R, int ldr) {
    float x = alpha * acc;
    const int ci = m * ldc + n;
    if (flags & XK_BETA) x += beta * XK_LD(C_T, C, ci);
    if (flags & XK_BIAS) x += bias[n];
    x = xk_act(x, act);
    if (flags & XK_RESID) x += XK_LD(R_T, R, m * ldr + n);
#if C_T == 0
    C[ci] = x;
#elif C_T == 1
    C[ci] = xk_f32_to_bf16(x);
#else
    vstore_half_rte(x, ci, (__global half*)C);
#endif
}

