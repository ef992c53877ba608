// The AVX-512 exp2 of the attention kernels' softmax (attn_prefill512.hpp's p and attn_amx.cpp's
// corrections). Included inside a target-pragma region (avx512f) of attn_avx512.cpp /
// attn_amx.cpp, in an anonymous namespace.
#pragma once

// 2^x for x <= a few units (x = -inf: the clamp), lanes outside `keep` exactly 0. x is clamped at
// -126 (2^-126, a normal number, stands in for anything smaller: such a p is < 2^-126 of the row's
// largest; an underflowing VSCALEFPS takes a microcode assist: masked lanes clamped at -200 cost
// the whole prefill ~8% on the dev VM's Xeon), 2^x = 2^round(x) * P(x - round(x)) with the Cephes
// exp2f polynomial (|rel. error| ~ 2e-7), VSCALEFPS multiplying by 2^round(x).
inline __m512 attn_exp2_512(__mmask16 keep, __m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-126.0f));
    const __m512 fx = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(x, fx);
    __m512 y = _mm512_set1_ps(1.535336188319500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.339887440266574e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(9.618437357674640e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.550332471162809e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(2.402264791363012e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(6.931472028550421e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, y, fx);
}
