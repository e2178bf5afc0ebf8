#include "kvq/kernels/cpu/pointwise.h"

#include <immintrin.h>

#include <cmath>
#include <numbers>

#include "kvq/kernels/cpu/exp_avx512.h"
#include "kvq/kernels/cpu/softmax.h"
#include "kvq/kernels/ref/ref_kernels.h"

namespace kvq::kernels {
namespace {

// silu(g) · u with e = exp(-|g|) <= 1: sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) else.
float swiglu_one(float g, float u) {
  const float e = fast_exp(-std::fabs(g));
  const float sig = (g >= 0.0f ? 1.0f : e) / (1.0f + e);
  return g * sig * u;
}

void swiglu_scalar(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = swiglu_one(gate[i], up[i]);
}

__attribute__((target("avx512f"))) void swiglu_avx512(const float* gate, const float* up,
                                                      float* out, std::int64_t n) {
  const std::int64_t n16 = n / 16 * 16;
  const __m512 one = _mm512_set1_ps(1.0f);
  for (std::int64_t i = 0; i < n16; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = detail::exp_le0_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 sig = _mm512_div_ps(_mm512_mask_blend_ps(neg, one, e), _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_loadu_ps(up + i)));
  }
  for (std::int64_t i = n16; i < n; ++i) out[i] = swiglu_one(gate[i], up[i]);
}

// GCC 12 flags its own _mm512_reduce_add_ps under -O3 (a known false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void rmsnorm_avx512(const float* x, const float* weight,
                                                       float* y, std::int64_t rows,
                                                       std::int64_t dim, float eps) {
  const std::int64_t d16 = dim / 16 * 16;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    __m512 acc = _mm512_setzero_ps();
    for (std::int64_t i = 0; i < d16; i += 16) {
      const __m512 v = _mm512_loadu_ps(xr + i);
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    for (std::int64_t i = d16; i < dim; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (std::int64_t i = 0; i < d16; i += 16) {
      const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xr + i), vinv);
      _mm512_storeu_ps(yr + i, _mm512_mul_ps(_mm512_loadu_ps(weight + i), v));
    }
    for (std::int64_t i = d16; i < dim; ++i) yr[i] = weight[i] * (xr[i] * inv);
  }
}
#pragma GCC diagnostic pop

}  // namespace

void rmsnorm_isa(Isa isa, const float* x, const float* weight, float* y, std::int64_t rows,
                 std::int64_t dim, float eps) {
  if (isa == Isa::kAvx512) return rmsnorm_avx512(x, weight, y, rows, dim, eps);
  ref::rmsnorm(x, weight, y, rows, dim, eps);
}

void rmsnorm(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t dim,
             float eps) {
  rmsnorm_isa(detected_isa(), x, weight, y, rows, dim, eps);
}

// The reference's arithmetic, vectorised by the compiler (restrict: the halves do not overlap).
__attribute__((target_clones("avx512f", "avx2", "default"))) void rope_row(float* x,
                                                                           const float* cos,
                                                                           const float* sin,
                                                                           std::int64_t head_dim) {
  const std::int64_t h = head_dim / 2;
  float* __restrict lo = x;
  float* __restrict hi = x + h;
  for (std::int64_t i = 0; i < h; ++i) {
    const float a = lo[i], b = hi[i];
    lo[i] = a * cos[i] - b * sin[i];
    hi[i] = b * cos[i] + a * sin[i];
  }
}

void swiglu_isa(Isa isa, const float* gate, const float* up, float* out, std::int64_t n) {
  if (isa == Isa::kAvx512) return swiglu_avx512(gate, up, out, n);
  swiglu_scalar(gate, up, out, n);
}

void swiglu(const float* gate, const float* up, float* out, std::int64_t n) {
  swiglu_isa(detected_isa(), gate, up, out, n);
}

float gelu_tanh(float x) {
  // aten/src/ATen/native/cpu/Activation.cpp, GeluKernelImpl (tanh): the constants are computed
  // in double and rounded to the scalar type, then every step is fp32.
  // M_SQRT2 * M_2_SQRTPI * 0.5 there (2 / √π doubled from 1 / √π exactly).
  constexpr float kBeta =
      static_cast<float>(std::numbers::sqrt2 * (2.0 * std::numbers::inv_sqrtpi) * 0.5);
  constexpr float kKappa = 0.044715f;
  const float x_cube = x * x * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  return 0.5f * x * (1.0f + std::tanh(inner));
}

void geglu(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

}  // namespace kvq::kernels
