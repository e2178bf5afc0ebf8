// The exp of softmax_step and swiglu: Cephes' expf polynomial for x <= 0, scalar and AVX-512
// (16 lanes, the same fused operations, so both give the same values). Internal to
// kernels/cpu; include only from .cc files.
#pragma once

#include <immintrin.h>

#include <cmath>

namespace kvq::kernels::detail {

// Below this expf(x) is denormal: flushed to 0 (a weight 2^-126 of the row max is nothing).
inline constexpr float kExpMin = -87.3f;
inline constexpr float kLog2e = 1.44269504088896341f;
// ln 2 split in two so n·ln2 is exact in the first part (Cephes).
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// GCC 12's own AVX-512 headers (_mm512_undefined_ps inside roundscale) trip
// -W(maybe-)uninitialized under -O3: a known false positive, silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// exp(x) per lane for x <= 0; 0 below kExpMin (and for -inf).
__attribute__((target("avx512f"))) inline __m512 exp_le0_avx512(__m512 x) {
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_GE_OQ);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 y = _mm512_set1_ps(kP0);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP1));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP2));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP3));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP4));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(kP5));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
  y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, y, k);
}
#pragma GCC diagnostic pop

}  // namespace kvq::kernels::detail
