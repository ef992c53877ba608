// xkernels — OpenCL GEMM: C = epilogue(alpha * op(A) op(B) + beta * C), row-major with leading
// dimensions, f32 / bf16 / f16 inputs (f32 accumulation), f32 / bf16 / f16 output (xk/gpu_gemm.hpp).
//
// Compile-time parameters (-D, chosen per device by the tuner in src/gpu/gemm/gpu_gemm.cpp):
//   A_T B_T C_T R_T   element types of A, B, C, the residual: 0 f32, 1 bf16, 2 f16
//   TRANS_A TRANS_B   0 = N, 1 = T (see include/xk/gemm.hpp for the layouts)
//   MWG NWG KWG       the work-group tile: MWG x NWG of C, KWG deep per step
//   MDIMC NDIMC       the work-group: NDIMC x MDIMC work items (dimension 0 runs along N)
//   VWM VWN           USE_LOCAL 1: vector width of the register tile's local-memory reads (1, 2, 4);
//                     USE_LOCAL 0: VWN is the width of the float vectors along N (8, 16), VWM 1
//   USE_LOCAL         1: A and B tiles staged in local memory (GPUs); 0: each work item reads
//                     global memory directly (CPU devices such as PoCL, whose caches do the staging)
//   SPLITK            > 1: split-K partial products (small M x N: more work-groups). Dimension 2
//                     runs over batch x SPLITK; work-group z sums the k range of split z % SPLITK
//                     (chunks of whole KWG tiles) of item z / SPLITK and stores it to C + z * c_bs
//                     (the host passes an f32 workspace, alpha 1, beta 0, no epilogue);
//                     xk_gemm_splitk_reduce (gemm_splitk.cl) adds the splits and applies the epilogue.
// Each work item computes MWI x NWI = (MWG / MDIMC) x (NWG / NDIMC) elements of C. USE_LOCAL 1:
//   rows m = m0 + (i / VWM) * MDIMC * VWM + tm * VWM + i % VWM   (columns likewise),
// so that neighbouring work items read neighbouring local words and write neighbouring columns;
// USE_LOCAL 0: rows m0 + tm * MWI + i, columns n0 + tn * NWI + j (contiguous, for the vectors).
// Edges: rows / columns past M / N are read clamped (their results are never stored); the last,
// partial K tile reads zeros. A fully interior K tile of A (or B) with `vec` set in flags (the
// host checked 16-byte alignment of every row) loads 4 elements at a time.

#define MWI (MWG / MDIMC)
#define NWI (NWG / NDIMC)

#if A_T == 0
typedef float a_t;
#else
typedef ushort a_t;
#endif
#if B_T == 0
typedef float b_t;
#else
typedef ushort b_t;
#endif
#include "gemm_common.h"

#if A_T == 0
#define LD_A(i) (A[i])
#define LD_A4(i) (*(const __global float4*)(A + (i)))
#elif A_T == 1
#define LD_A(i) xk_bf16_to_f32(A[i])
#define LD_A4(i) xk_bf16x4(*(const __global ushort4*)(A + (i)))
#else
#define LD_A(i) vload_half((i), (const __global half*)A)
#define LD_A4(i) vload_half4(0, (const __global half*)(A + (i)))
#endif
#if B_T == 0
#define LD_B(i) (B[i])
#define LD_B4(i) (*(const __global float4*)(B + (i)))
#elif B_T == 1
#define LD_B(i) xk_bf16_to_f32(B[i])
#define LD_B4(i) xk_bf16x4(*(const __global ushort4*)(B + (i)))
#else
#define LD_B(i) vload_half((i), (const __global half*)B)
#define LD_B4(i) vload_half4(0, (const __global half*)(B + (i)))
#endif

inline float4 xk_bf16x4(ushort4 v) {
    return (float4)(xk_bf16_to_f32(v.x), xk_bf16_to_f32(v.y), xk_bf16_to_f32(v.z), xk_bf16_to_f32(v.w));
}

#if TRANS_A == 0
#define A_AT(m, k) ((m) * lda + (k))
#else
#define A_AT(m, k) ((k) * lda + (m))
#endif
#if TRANS_B == 0
#define B_AT(k, n) ((k) * ldb + (n))
#else
#define B_AT(k, n) ((n) * ldb + (k))
#endif

// Staging maps of the local-memory path: work item t's element (A: mm, kk; B: nn, kk) of a tile,
// the contiguous direction of the stored matrix fastest across work items (coalesced reads).
//   *4_MAP / *4_LOAD / *4_STORE: 4 elements along the contiguous direction; *1_MAP: one element.
#if TRANS_A == 0
#define A4_MAP(t, mm, kk) (kk = ((t) % (KWG / 4)) * 4, mm = (t) / (KWG / 4))
#define A1_MAP(t, mm, kk) (kk = (t) % KWG, mm = (t) / KWG)
#define A4_LOAD(mm, kk, kb) LD_A4(A_AT(min(m0 + (mm), M - 1), (kb) + (kk)))
#define A4_STORE(mm, kk, v)                                                           \
    do {                                                                              \
        const float4 v_ = (v);                                                        \
        As[((kk) + 0) * MWG + (mm)] = v_.x, As[((kk) + 1) * MWG + (mm)] = v_.y;        \
        As[((kk) + 2) * MWG + (mm)] = v_.z, As[((kk) + 3) * MWG + (mm)] = v_.w;        \
    } while (0)
#else
#define A4_MAP(t, mm, kk) (mm = ((t) % (MWG / 4)) * 4, kk = (t) / (MWG / 4))
#define A1_MAP(t, mm, kk) (mm = (t) % MWG, kk = (t) / MWG)
#define A4_LOAD(mm, kk, kb)                                                                            \
    (m0 + (mm) + 3 < M ? LD_A4(A_AT(m0 + (mm), (kb) + (kk)))                                           \
                       : (float4)(LD_A(A_AT(min(m0 + (mm), M - 1), (kb) + (kk))),                      \
                                  LD_A(A_AT(min(m0 + (mm) + 1, M - 1), (kb) + (kk))),                  \
                                  LD_A(A_AT(min(m0 + (mm) + 2, M - 1), (kb) + (kk))),                  \
                                  LD_A(A_AT(min(m0 + (mm) + 3, M - 1), (kb) + (kk)))))
#define A4_STORE(mm, kk, v) (*(__local float4*)&As[(kk) * MWG + (mm)] = (v))
#endif
#if TRANS_B == 0
#define B4_MAP(t, nn, kk) (nn = ((t) % (NWG / 4)) * 4, kk = (t) / (NWG / 4))
#define B1_MAP(t, nn, kk) (nn = (t) % NWG, kk = (t) / NWG)
#define B4_LOAD(nn, kk, kb)                                                                            \
    (n0 + (nn) + 3 < N ? LD_B4(B_AT((kb) + (kk), n0 + (nn)))                                           \
                       : (float4)(LD_B(B_AT((kb) + (kk), min(n0 + (nn), N - 1))),                      \
                                  LD_B(B_AT((kb) + (kk), min(n0 + (nn) + 1, N - 1))),                  \
                                  LD_B(B_AT((kb) + (kk), min(n0 + (nn) + 2, N - 1))),                  \
                                  LD_B(B_AT((kb) + (kk), min(n0 + (nn) + 3, N - 1)))))
#define B4_STORE(nn, kk, v) (*(__local float4*)&Bs[(kk) * NWG + (nn)] = (v))
#else
#define B4_MAP(t, nn, kk) (kk = ((t) % (KWG / 4)) * 4, nn = (t) / (KWG / 4))
#define B1_MAP(t, nn, kk) (kk = (t) % KWG, nn = (t) / KWG)
#define B4_LOAD(nn, kk, kb) LD_B4(B_AT((kb) + (kk), min(n0 + (nn), N - 1)))
#define B4_STORE(nn, kk, v)                                                           \
    do {                                                                              \
        const float4 v_ = (v);                                                        \
        Bs[((kk) + 0) * NWG + (nn)] = v_.x, Bs[((kk) + 1) * NWG + (nn)] = v_.y;        \
        Bs[((kk) + 2) * NWG + (nn)] = v_.z, Bs[((kk) + 3) * NWG + (nn)] = v_.w;        \
    } while (0)
#endif

__kernel __attribute__((reqd_work_group_size(NDIMC, MDIMC, 1)))
void xk_gemm(const int M, const int N, const int K_,
             const __global a_t* restrict A, const ulong a_off, const int lda, const ulong a_bs,
             const __global b_t* restrict B, const ulong b_off, const int ldb, const ulong b_bs,
             __global c_t* C, const ulong c_off, const int ldc, const ulong c_bs,
             const float alpha, const float beta, const int flags, const int act,
             const __global float* restrict bias, const ulong bias_off,
             const __global r_t* restrict R, const ulong r_off, const int ldr, const ulong r_bs) {
#ifndef SPLITK
#define SPLITK 1
#endif
#if SPLITK > 1
    const size_t z = get_global_id(2), item = z / SPLITK;
    const int kchunk = ((K_ + SPLITK - 1) / SPLITK + KWG - 1) / KWG * KWG;
    const int ks = (int)(z % SPLITK) * kchunk;
    const int K = clamp(K_ - ks, 0, kchunk);
    A += a_off + item * a_bs + (TRANS_A ? (size_t)ks * lda : (size_t)ks);
    B += b_off + item * b_bs + (TRANS_B ? (size_t)ks : (size_t)ks * ldb);
    C += c_off + z * c_bs;
#else
    const int K = K_;
    const size_t item = get_global_id(2);
    A += a_off + item * a_bs;
    B += b_off + item * b_bs;
    C += c_off + item * c_bs;
#endif
    bias += bias_off;
    R += r_off + item * r_bs;
    const int tn = get_local_id(0), tm = get_local_id(1);
    const int m0 = get_group_id(1) * MWG, n0 = get_group_id(0) * NWG;

#if USE_LOCAL
    float acc[MWI][NWI];
#pragma unroll
    for (int i = 0; i < MWI; ++i)
#pragma unroll
        for (int j = 0; j < NWI; ++j) acc[i][j] = 0.0f;
    __local float As[KWG * MWG] __attribute__((aligned(16)));  // As[k * MWG + m]
    __local float Bs[KWG * NWG] __attribute__((aligned(16)));  // Bs[k * NWG + n]
    const int tid = tm * NDIMC + tn;
#define NT (MDIMC * NDIMC)
#define LA (MWG * KWG / NT)
#define LB (NWG * KWG / NT)
    // The next tiles wait in registers while the current ones are multiplied (one tile of A and
    // one of B per step: LA + LB floats per work item). va / vb: the registers hold the 4-wide
    // mapping (a fully interior K tile with aligned rows) rather than the element one.
    float ra[LA], rb[LB];
    bool va = false, vb = false;
#define XK_LOAD_TILES(kb)                                                               \
    do {                                                                                \
        const bool kf_ = (kb) + KWG <= K;                                               \
        va = kf_ && (flags & XK_VEC_A);                                                 \
        vb = kf_ && (flags & XK_VEC_B);                                                 \
        if (va) {                                                                       \
            _Pragma("unroll") for (int l = 0; l < LA / 4; ++l) {                        \
                int mm, kk;                                                             \
                A4_MAP(l * NT + tid, mm, kk);                                           \
                const float4 v = A4_LOAD(mm, kk, kb);                                   \
                ra[4 * l] = v.x, ra[4 * l + 1] = v.y, ra[4 * l + 2] = v.z, ra[4 * l + 3] = v.w; \
            }                                                                           \
        } else {                                                                        \
            _Pragma("unroll") for (int l = 0; l < LA; ++l) {                            \
                int mm, kk;                                                             \
                A1_MAP(l * NT + tid, mm, kk);                                           \
                ra[l] = (kb) + kk < K ? LD_A(A_AT(min(m0 + mm, M - 1), (kb) + kk)) : 0.0f; \
            }                                                                           \
        }                                                                               \
        if (vb) {                                                                       \
            _Pragma("unroll") for (int l = 0; l < LB / 4; ++l) {                        \
                int nn, kk;                                                             \
                B4_MAP(l * NT + tid, nn, kk);                                           \
                const float4 v = B4_LOAD(nn, kk, kb);                                   \
                rb[4 * l] = v.x, rb[4 * l + 1] = v.y, rb[4 * l + 2] = v.z, rb[4 * l + 3] = v.w; \
            }                                                                           \
        } else {                                                                        \
            _Pragma("unroll") for (int l = 0; l < LB; ++l) {                            \
                int nn, kk;                                                             \
                B1_MAP(l * NT + tid, nn, kk);                                           \
                rb[l] = (kb) + kk < K ? LD_B(B_AT((kb) + kk, min(n0 + nn, N - 1))) : 0.0f; \
            }                                                                           \
        }                                                                               \
    } while (0)

    XK_LOAD_TILES(0);
    for (int k0 = 0; k0 < K; k0 += KWG) {
        // Registers -> local memory, with the mapping they were loaded with.
        if (va) {
#pragma unroll
            for (int l = 0; l < LA / 4; ++l) {
                int mm, kk;
                A4_MAP(l * NT + tid, mm, kk);
                A4_STORE(mm, kk, ((float4)(ra[4 * l], ra[4 * l + 1], ra[4 * l + 2], ra[4 * l + 3])));
            }
        } else {
#pragma unroll
            for (int l = 0; l < LA; ++l) {
                int mm, kk;
                A1_MAP(l * NT + tid, mm, kk);
                As[kk * MWG + mm] = ra[l];
            }
        }
        if (vb) {
#pragma unroll
            for (int l = 0; l < LB / 4; ++l) {
                int nn, kk;
                B4_MAP(l * NT + tid, nn, kk);
                B4_STORE(nn, kk, ((float4)(rb[4 * l], rb[4 * l + 1], rb[4 * l + 2], rb[4 * l + 3])));
            }
        } else {
#pragma unroll
            for (int l = 0; l < LB; ++l) {
                int nn, kk;
                B1_MAP(l * NT + tid, nn, kk);
                Bs[kk * NWG + nn] = rb[l];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + KWG < K) XK_LOAD_TILES(k0 + KWG);  // in flight during the multiply below
#pragma unroll 8
        for (int kk = 0; kk < KWG; ++kk) {
            float a[MWI], b[NWI];
#pragma unroll
            for (int i = 0; i < MWI / VWM; ++i) {
                const int mm = i * MDIMC * VWM + tm * VWM;
#if VWM == 4
                const float4 v = *(const __local float4*)&As[kk * MWG + mm];
                a[i * 4] = v.x; a[i * 4 + 1] = v.y; a[i * 4 + 2] = v.z; a[i * 4 + 3] = v.w;
#elif VWM == 2
                const float2 v = *(const __local float2*)&As[kk * MWG + mm];
                a[i * 2] = v.x; a[i * 2 + 1] = v.y;
#else
                a[i] = As[kk * MWG + mm];
#endif
            }
#pragma unroll
            for (int j = 0; j < NWI / VWN; ++j) {
                const int nn = j * NDIMC * VWN + tn * VWN;
#if VWN == 4
                const float4 v = *(const __local float4*)&Bs[kk * NWG + nn];
                b[j * 4] = v.x; b[j * 4 + 1] = v.y; b[j * 4 + 2] = v.z; b[j * 4 + 3] = v.w;
#elif VWN == 2
                const float2 v = *(const __local float2*)&Bs[kk * NWG + nn];
                b[j * 2] = v.x; b[j * 2 + 1] = v.y;
#else
                b[j] = Bs[kk * NWG + nn];
#endif
            }
#pragma unroll
            for (int i = 0; i < MWI; ++i)
#pragma unroll
                for (int j = 0; j < NWI; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    // CPU devices (PoCL): no local memory, no barriers. Each work item computes MWI rows x NWI
    // contiguous columns as NWI / VWN vectors of VWN floats (VWN 8 or 16: one ymm / zmm), like a
    // BLAS microkernel: a B row segment is loaded as vectors, each A element broadcast. PoCL does
    // not vectorize across work items when the body holds a loop, so the vectors are explicit.
#define XK_CAT_(a, b) a##b
#define XK_CAT(a, b) XK_CAT_(a, b)
#define VECN XK_CAT(float, VWN)
#define VLOADN XK_CAT(vload, VWN)
    const int nb = n0 + tn * NWI;
    VECN accv[MWI][NWI / VWN];
#pragma unroll
    for (int i = 0; i < MWI; ++i)
#pragma unroll
        for (int j = 0; j < NWI / VWN; ++j) accv[i][j] = (VECN)(0.0f);
    int rmi[MWI];
#pragma unroll
    for (int i = 0; i < MWI; ++i) rmi[i] = min(m0 + tm * MWI + i, M - 1);
#if B_T == 0
#define LD_BN(p) VLOADN(0, (p))
#elif B_T == 1
#define LD_BN(p) XK_CAT(as_float, VWN)(XK_CAT(convert_uint, VWN)(VLOADN(0, (p))) << 16)
#else
#define LD_BN(p) XK_CAT(vload_half, VWN)(0, (const __global half*)(p))
#endif
    if (TRANS_B == 0 && nb + NWI <= N) {
        for (int k = 0; k < K; ++k) {
            VECN bv[NWI / VWN];
#pragma unroll
            for (int j = 0; j < NWI / VWN; ++j) bv[j] = LD_BN(B + (size_t)k * ldb + nb + j * VWN);
#pragma unroll
            for (int i = 0; i < MWI; ++i) {
                const VECN a = (VECN)(LD_A(A_AT(rmi[i], k)));
#pragma unroll
                for (int j = 0; j < NWI / VWN; ++j) accv[i][j] = fma(a, bv[j], accv[i][j]);
            }
        }
    } else {  // edges, B^T: element loads (columns clamped)
        for (int k = 0; k < K; ++k) {
            VECN bv[NWI / VWN];
#pragma unroll
            for (int j = 0; j < NWI / VWN; ++j) {
                float tmp[VWN];
#pragma unroll
                for (int v = 0; v < VWN; ++v) tmp[v] = LD_B(B_AT(k, min(nb + j * VWN + v, N - 1)));
                bv[j] = VLOADN(0, tmp);
            }
#pragma unroll
            for (int i = 0; i < MWI; ++i) {
                const VECN a = (VECN)(LD_A(A_AT(rmi[i], k)));
#pragma unroll
                for (int j = 0; j < NWI / VWN; ++j) accv[i][j] = fma(a, bv[j], accv[i][j]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
        const int m = m0 + tm * MWI + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < NWI / VWN; ++j) {
            float o[VWN];
            XK_CAT(vstore, VWN)(accv[i][j], 0, o);
#pragma unroll
            for (int v = 0; v < VWN; ++v) {
                const int n = nb + j * VWN + v;
                if (n < N) xk_epilogue(o[v], m, n, C, ldc, alpha, beta, flags, act, bias, R, ldr);
            }
        }
    }
    return;
#endif

#if USE_LOCAL
#pragma unroll
    for (int i = 0; i < MWI; ++i) {
        const int m = m0 + (i / VWM) * MDIMC * VWM + tm * VWM + i % VWM;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < NWI; ++j) {
            const int n = n0 + (j / VWN) * NDIMC * VWN + tn * VWN + j % VWN;
            if (n < N) xk_epilogue(acc[i][j], m, n, C, ldc, alpha, beta, flags, act, bias, R, ldr);
        }
    }
#endif
}
