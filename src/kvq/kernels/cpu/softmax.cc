#include "kvq/kernels/cpu/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/cpu/exp_avx512.h"

namespace kvq::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
using namespace detail;  // the exp constants and exp_le0_avx512

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
    const __m512 e = exp_le0_avx512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
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
