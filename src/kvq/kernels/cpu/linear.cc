#include "kvq/kernels/cpu/linear.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "kvq/core/error.h"
#include "kvq/core/threading.h"

namespace kvq::kernels {
namespace {

constexpr std::int64_t kRowsPerBlock = 4;
constexpr std::int64_t kMinParallelWork = 1 << 16;

// Rows [r0, r1) of y = W·x, scalar (the portable fallback; same order as kernels::ref::gemv).
void gemv_rows_scalar(const float* w, const float* x, float* y, std::int64_t r0, std::int64_t r1,
                      std::int64_t k) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* row = w + r * k;  // [k]
    float acc = 0.0f;
    for (std::int64_t c = 0; c < k; ++c) acc += row[c] * x[c];
    y[r] = acc;
  }
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) void gemv_rows_avx2(const float* w, const float* x, float* y,
                                                        std::int64_t r0, std::int64_t r1,
                                                        std::int64_t k) {
  const std::int64_t k8 = k / 8 * 8;
  std::int64_t r = r0;
  for (; r + kRowsPerBlock <= r1; r += kRowsPerBlock) {
    const float* w0 = w + r * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (std::int64_t c = 0; c < k8; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x + c);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + c), xv, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + c), xv, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + c), xv, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + c), xv, a3);
    }
    float s0 = hsum256(a0), s1 = hsum256(a1), s2 = hsum256(a2), s3 = hsum256(a3);
    for (std::int64_t c = k8; c < k; ++c) {
      s0 += w0[c] * x[c];
      s1 += w1[c] * x[c];
      s2 += w2[c] * x[c];
      s3 += w3[c] * x[c];
    }
    y[r] = s0;
    y[r + 1] = s1;
    y[r + 2] = s2;
    y[r + 3] = s3;
  }
  for (; r < r1; ++r) {
    const float* wr = w + r * k;
    __m256 a = _mm256_setzero_ps();
    for (std::int64_t c = 0; c < k8; c += 8) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(wr + c), _mm256_loadu_ps(x + c), a);
    }
    float s = hsum256(a);
    for (std::int64_t c = k8; c < k; ++c) s += wr[c] * x[c];
    y[r] = s;
  }
}

// Horizontal sum (GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized in its own header).
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline float hsum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s8[8];
  for (int i = 0; i < 8; ++i) s8[i] = lanes[i] + lanes[i + 8];
  for (int i = 0; i < 4; ++i) s8[i] += s8[i + 4];
  return (s8[0] + s8[2]) + (s8[1] + s8[3]);
}

// Four rows at a time, two accumulators per row (8 independent FMA chains hide the latency);
// the k tail is a masked load, so any k works.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void gemv_rows_avx512(
    const float* w, const float* x, float* y, std::int64_t r0, std::int64_t r1, std::int64_t k) {
  const std::int64_t k32 = k / 32 * 32;
  const std::int64_t k16 = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  std::int64_t r = r0;
  for (; r + kRowsPerBlock <= r1; r += kRowsPerBlock) {
    const float* w0 = w + r * k;
    const float* w1 = w0 + k;
    const float* w2 = w1 + k;
    const float* w3 = w2 + k;
    __m512 a0 = _mm512_setzero_ps(), b0 = _mm512_setzero_ps();
    __m512 a1 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), b2 = _mm512_setzero_ps();
    __m512 a3 = _mm512_setzero_ps(), b3 = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c < k32; c += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + c);
      const __m512 x1 = _mm512_loadu_ps(x + c + 16);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + c), x0, a0);
      b0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + c + 16), x1, b0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + c), x0, a1);
      b1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + c + 16), x1, b1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + c), x0, a2);
      b2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + c + 16), x1, b2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + c), x0, a3);
      b3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + c + 16), x1, b3);
    }
    for (; c < k16; c += 16) {
      const __m512 x0 = _mm512_loadu_ps(x + c);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + c), x0, a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + c), x0, a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + c), x0, a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + c), x0, a3);
    }
    if (tail) {
      const __m512 x0 = _mm512_maskz_loadu_ps(tail, x + c);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + c), x0, a0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w1 + c), x0, a1);
      a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w2 + c), x0, a2);
      a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w3 + c), x0, a3);
    }
    y[r] = hsum512(_mm512_add_ps(a0, b0));
    y[r + 1] = hsum512(_mm512_add_ps(a1, b1));
    y[r + 2] = hsum512(_mm512_add_ps(a2, b2));
    y[r + 3] = hsum512(_mm512_add_ps(a3, b3));
  }
  for (; r < r1; ++r) {
    const float* wr = w + r * k;
    __m512 a = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c < k16; c += 16)
      a = _mm512_fmadd_ps(_mm512_loadu_ps(wr + c), _mm512_loadu_ps(x + c), a);
    if (tail) {
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, wr + c), _mm512_maskz_loadu_ps(tail, x + c),
                          a);
    }
    y[r] = hsum512(a);
  }
}

using GemvRows = void (*)(const float*, const float*, float*, std::int64_t, std::int64_t,
                          std::int64_t);

GemvRows rows_kernel(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return gemv_rows_avx512;
    case Isa::kAvx2:
      return gemv_rows_avx2;
    case Isa::kScalar:
      return gemv_rows_scalar;
  }
  return gemv_rows_scalar;
}

}  // namespace

void gemv_isa(Isa isa, const float* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  const GemvRows kernel = rows_kernel(isa);
  // Blocks of 64 rows (multiple of kRowsPerBlock): enough work per OpenMP chunk to amortise the
  // scheduling, fine enough to balance 2..16 threads on the 576-row projections.
  constexpr std::int64_t kChunk = 64;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  // Below ~64K multiply-adds a parallel region costs more than it saves (and on a loaded machine
  // waking threads costs far more).
  const int threads = n * k < kMinParallelWork
                          ? 1
                          : static_cast<int>(std::min<std::int64_t>(num_threads(), chunks));
  if (threads <= 1) {
    kernel(w, x, y, 0, n, k);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    kernel(w, x, y, c * kChunk, std::min(n, (c + 1) * kChunk), k);
  }
}

void gemv(const float* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  gemv_isa(detected_isa(), w, x, y, n, k);
}

void sgemm_xwt(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
               std::int64_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w,
              static_cast<blasint>(k), 0.0f, y, static_cast<blasint>(n));
}

void linear(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
            std::int64_t k) {
  if (m <= 0 || n <= 0) return;
  if (m == 1) {
    gemv(w, x, y, n, k);
  } else {
    sgemm_xwt(x, w, y, m, n, k);
  }
}

}  // namespace kvq::kernels
