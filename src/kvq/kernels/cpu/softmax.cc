#include "kvq/kernels/cpu/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Below this expf(x) is denormal: flushed to 0 (a weight 2⁻¹²⁶ of the row max is nothing).
constexpr float kExpMin = -87.3f;
constexpr float kLog2e = 1.44269504088896341f;
// ln 2 split in two so n·ln2 is exact in the first part (Cephes).
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

SoftmaxStep softmax_step_scalar(float* s, std::int64_t n, float running_max) {
  float mx = running_max;
  for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = mx == kNegInf ? 0.0f : fast_exp(s[j] - mx);
    sum += s[j];
  }
  return {mx, sum};
}

// GCC 12's own AVX-512 headers (_mm512_undefined_ps inside roundscale / reduce) trip
// -W(maybe-)uninitialized under -O3: a known false positive, silenced for this function only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) SoftmaxStep softmax_step_avx512(float* s, std::int64_t n,
                                                                   float running_max) {
  const std::int64_t n16 = n / 16 * 16;
  __m512 vmax = _mm512_set1_ps(running_max);
  for (std::int64_t j = 0; j < n16; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  float mx = _mm512_reduce_max_ps(vmax);
  for (std::int64_t j = n16; j < n; ++j) mx = std::max(mx, s[j]);
  if (mx == kNegInf) {
    std::fill(s, s + n, 0.0f);
    return {mx, 0.0f};
  }
  const __m512 vm = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < n16; j += 16) {
    const __m512 x = _mm512_sub_ps(_mm512_loadu_ps(s + j), vm);
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
    const __m512 e = _mm512_maskz_scalef_ps(live, y, k);
    _mm512_storeu_ps(s + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  float sum = _mm512_reduce_add_ps(vsum);
  for (std::int64_t j = n16; j < n; ++j) {
    s[j] = fast_exp(s[j] - mx);
    sum += s[j];
  }
  return {mx, sum};
}
#pragma GCC diagnostic pop

}  // namespace

float fast_exp(float x) {
  if (!(x >= kExpMin)) return 0.0f;  // also -inf and NaN-free masked keys
  const float k = std::nearbyint(x * kLog2e);
  float r = std::fma(-k, kLn2Hi, x);
  r = std::fma(-k, kLn2Lo, r);
  float y = kP0;
  y = std::fma(y, r, kP1);
  y = std::fma(y, r, kP2);
  y = std::fma(y, r, kP3);
  y = std::fma(y, r, kP4);
  y = std::fma(y, r, kP5);
  y = std::fma(y, r * r, r);
  y = y + 1.0f;
  return std::ldexp(y, static_cast<int>(k));
}

SoftmaxStep softmax_step(float* s, std::int64_t n, float running_max) {
  static const bool avx512 = detected_isa() == Isa::kAvx512;
  return avx512 ? softmax_step_avx512(s, n, running_max) : softmax_step_scalar(s, n, running_max);
}

}  // namespace kvq::kernels
