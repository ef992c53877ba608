// Portable float4 copy, used by the bandwidth check and as the smoke test of the program cache.
__kernel void xk_copy_f32x4(__global const float4* restrict src, __global float4* restrict dst, ulong n4) {
    const size_t i = get_global_id(0);
    if (i < n4) dst[i] = src[i];
}
