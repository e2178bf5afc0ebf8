#include "kvq/kernels/cpu/linear.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/core/threading.h"

namespace kvq::kernels {
namespace {

constexpr std::int64_t kRowsPerBlock = 4;
constexpr std::int64_t kMinParallelWork = 1 << 16;

// Every row kernel below is a template over the weight element: float, or std::uint16_t holding
// bf16 bits. A bf16 weight is widened to fp32 exactly (a 16-bit shift) and multiplied with the
// fp32 x in fp32, so the bf16 kernels do the fp32 kernels' arithmetic on the rounded weights.
inline float widen(float v) { return v; }
inline float widen(std::uint16_t bits) { return bf16_to_f32(bits); }

// Rows [r0, r1) of y = W·x, scalar (the portable fallback; same order as kernels::ref::gemv).
template <class W>
void gemv_rows_scalar(const W* w, const float* x, float* y, std::int64_t r0, std::int64_t r1,
                      std::int64_t k) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const W* row = w + r * k;  // [k]
    float acc = 0.0f;
    for (std::int64_t c = 0; c < k; ++c) acc += widen(row[c]) * x[c];
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

// 8 weights as fp32.
__attribute__((target("avx2,fma"))) inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx2,fma"))) inline __m256 load8(const std::uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

template <class W>
__attribute__((target("avx2,fma"))) void gemv_rows_avx2(const W* w, const float* x, float* y,
                                                        std::int64_t r0, std::int64_t r1,
                                                        std::int64_t k) {
  const std::int64_t k8 = k / 8 * 8;
  std::int64_t r = r0;
  for (; r + kRowsPerBlock <= r1; r += kRowsPerBlock) {
    const W* w0 = w + r * k;
    const W* w1 = w0 + k;
    const W* w2 = w1 + k;
    const W* w3 = w2 + k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (std::int64_t c = 0; c < k8; c += 8) {
      const __m256 xv = _mm256_loadu_ps(x + c);
      a0 = _mm256_fmadd_ps(load8(w0 + c), xv, a0);
      a1 = _mm256_fmadd_ps(load8(w1 + c), xv, a1);
      a2 = _mm256_fmadd_ps(load8(w2 + c), xv, a2);
      a3 = _mm256_fmadd_ps(load8(w3 + c), xv, a3);
    }
    float s0 = hsum256(a0), s1 = hsum256(a1), s2 = hsum256(a2), s3 = hsum256(a3);
    // The k tail as explicit FMAs: left to -ffp-contract, GCC contracted it in one
    // instantiation and not the other, and bf16 weights must give the fp32 kernel's bits.
    for (std::int64_t c = k8; c < k; ++c) {
      s0 = std::fma(widen(w0[c]), x[c], s0);
      s1 = std::fma(widen(w1[c]), x[c], s1);
      s2 = std::fma(widen(w2[c]), x[c], s2);
      s3 = std::fma(widen(w3[c]), x[c], s3);
    }
    y[r] = s0;
    y[r + 1] = s1;
    y[r + 2] = s2;
    y[r + 3] = s3;
  }
  for (; r < r1; ++r) {
    const W* wr = w + r * k;
    __m256 a = _mm256_setzero_ps();
    for (std::int64_t c = 0; c < k8; c += 8) {
      a = _mm256_fmadd_ps(load8(wr + c), _mm256_loadu_ps(x + c), a);
    }
    float s = hsum256(a);
    for (std::int64_t c = k8; c < k; ++c) s = std::fma(widen(wr[c]), x[c], s);
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

// GCC 12 flags its own intrinsics headers (_mm512_undefined_* operands of the widening below)
// as -Wmaybe-uninitialized under -O3: a known false positive, silenced for these helpers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 16 weights as fp32; the masked form reads only the lanes in `m` (zeros elsewhere).
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 load16(
    const std::uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 load16(__mmask16 m,
                                                                              const float* p) {
  return _mm512_maskz_loadu_ps(m, p);
}
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline __m512 load16(
    __mmask16 m, const std::uint16_t* p) {
  const __m256i bits = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
#pragma GCC diagnostic pop

// Four rows at a time, two accumulators per row (8 independent FMA chains hide the latency);
// the k tail is a masked load, so any k works.
template <class W>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void gemv_rows_avx512(
    const W* w, const float* x, float* y, std::int64_t r0, std::int64_t r1, std::int64_t k) {
  const std::int64_t k32 = k / 32 * 32;
  const std::int64_t k16 = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  std::int64_t r = r0;
  for (; r + kRowsPerBlock <= r1; r += kRowsPerBlock) {
    const W* w0 = w + r * k;
    const W* w1 = w0 + k;
    const W* w2 = w1 + k;
    const W* w3 = w2 + k;
    __m512 a0 = _mm512_setzero_ps(), b0 = _mm512_setzero_ps();
    __m512 a1 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), b2 = _mm512_setzero_ps();
    __m512 a3 = _mm512_setzero_ps(), b3 = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c < k32; c += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + c);
      const __m512 x1 = _mm512_loadu_ps(x + c + 16);
      a0 = _mm512_fmadd_ps(load16(w0 + c), x0, a0);
      b0 = _mm512_fmadd_ps(load16(w0 + c + 16), x1, b0);
      a1 = _mm512_fmadd_ps(load16(w1 + c), x0, a1);
      b1 = _mm512_fmadd_ps(load16(w1 + c + 16), x1, b1);
      a2 = _mm512_fmadd_ps(load16(w2 + c), x0, a2);
      b2 = _mm512_fmadd_ps(load16(w2 + c + 16), x1, b2);
      a3 = _mm512_fmadd_ps(load16(w3 + c), x0, a3);
      b3 = _mm512_fmadd_ps(load16(w3 + c + 16), x1, b3);
    }
    for (; c < k16; c += 16) {
      const __m512 x0 = _mm512_loadu_ps(x + c);
      a0 = _mm512_fmadd_ps(load16(w0 + c), x0, a0);
      a1 = _mm512_fmadd_ps(load16(w1 + c), x0, a1);
      a2 = _mm512_fmadd_ps(load16(w2 + c), x0, a2);
      a3 = _mm512_fmadd_ps(load16(w3 + c), x0, a3);
    }
    if (tail) {
      const __m512 x0 = _mm512_maskz_loadu_ps(tail, x + c);
      a0 = _mm512_fmadd_ps(load16(tail, w0 + c), x0, a0);
      a1 = _mm512_fmadd_ps(load16(tail, w1 + c), x0, a1);
      a2 = _mm512_fmadd_ps(load16(tail, w2 + c), x0, a2);
      a3 = _mm512_fmadd_ps(load16(tail, w3 + c), x0, a3);
    }
    y[r] = hsum512(_mm512_add_ps(a0, b0));
    y[r + 1] = hsum512(_mm512_add_ps(a1, b1));
    y[r + 2] = hsum512(_mm512_add_ps(a2, b2));
    y[r + 3] = hsum512(_mm512_add_ps(a3, b3));
  }
  for (; r < r1; ++r) {
    const W* wr = w + r * k;
    __m512 a = _mm512_setzero_ps();
    std::int64_t c = 0;
    for (; c < k16; c += 16) a = _mm512_fmadd_ps(load16(wr + c), _mm512_loadu_ps(x + c), a);
    if (tail) {
      a = _mm512_fmadd_ps(load16(tail, wr + c), _mm512_maskz_loadu_ps(tail, x + c), a);
    }
    y[r] = hsum512(a);
  }
}

template <class W>
using GemvRows = void (*)(const W*, const float*, float*, std::int64_t, std::int64_t, std::int64_t);

template <class W>
GemvRows<W> rows_kernel(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return gemv_rows_avx512<W>;
    case Isa::kAvx2:
      return gemv_rows_avx2<W>;
    case Isa::kScalar:
      return gemv_rows_scalar<W>;
  }
  return gemv_rows_scalar<W>;
}

template <class W>
void gemv_parallel(Isa isa, const W* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  const GemvRows<W> kernel = rows_kernel<W>(isa);
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

void widen_bf16_scalar(const std::uint16_t* in, float* out, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) out[i] = bf16_to_f32(in[i]);
}

__attribute__((target("avx2,fma"))) void widen_bf16_avx2(const std::uint16_t* in, float* out,
                                                         std::int64_t count) {
  const std::int64_t n8 = count / 8 * 8;
  for (std::int64_t i = 0; i < n8; i += 8) _mm256_storeu_ps(out + i, load8(in + i));
  for (std::int64_t i = n8; i < count; ++i) out[i] = bf16_to_f32(in[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void widen_bf16_avx512(
    const std::uint16_t* in, float* out, std::int64_t count) {
  const std::int64_t n16 = count / 16 * 16;
  for (std::int64_t i = 0; i < n16; i += 16) _mm512_storeu_ps(out + i, load16(in + i));
  if (n16 < count) {
    const auto m = static_cast<__mmask16>((1u << (count - n16)) - 1u);
    _mm512_mask_storeu_ps(out + n16, m, load16(m, in + n16));
  }
}

// Rows of bf16 weights widened per sgemm call in the prefill path: 256 K floats (1 MiB, about
// the L2 of the development machine), at least 16 rows. The sgemm of each block is a full
// m × rows × k product, so blocking costs only the re-packing of x per block (1/rows of the
// arithmetic) and keeps the scratch small whatever n is (49152 rows of lm_head).
constexpr std::int64_t kWidenBlockFloats = std::int64_t{1} << 18;

}  // namespace

void gemv_isa(Isa isa, const float* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  gemv_parallel(isa, w, x, y, n, k);
}

void gemv(const float* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  gemv_isa(detected_isa(), w, x, y, n, k);
}

void gemv_bf16_isa(Isa isa, const std::uint16_t* w, const float* x, float* y, std::int64_t n,
                   std::int64_t k) {
  gemv_parallel(isa, w, x, y, n, k);
}

void gemv_bf16(const std::uint16_t* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  gemv_bf16_isa(detected_isa(), w, x, y, n, k);
}

void widen_bf16_isa(Isa isa, const std::uint16_t* in, float* out, std::int64_t count) {
  switch (isa) {
    case Isa::kAvx512:
      widen_bf16_avx512(in, out, count);
      return;
    case Isa::kAvx2:
      widen_bf16_avx2(in, out, count);
      return;
    case Isa::kScalar:
      widen_bf16_scalar(in, out, count);
      return;
  }
}

void widen_bf16(const std::uint16_t* in, float* out, std::int64_t count) {
  widen_bf16_isa(detected_isa(), in, out, count);
}

void sgemm_xwt(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
               std::int64_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k), w,
              static_cast<blasint>(k), 0.0f, y, static_cast<blasint>(n));
}

void sgemm_xwt_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m,
                    std::int64_t n, std::int64_t k) {
  if (m <= 0 || n <= 0) return;
  const std::int64_t rows =
      std::min(n, std::max<std::int64_t>(16, kWidenBlockFloats / std::max<std::int64_t>(k, 1)));
  // Kept between calls: a fresh multi-MiB buffer per Linear would page-fault on every prefill.
  thread_local std::vector<float> scratch;  // [rows, k]
  scratch.resize(static_cast<std::size_t>(rows * k));
  for (std::int64_t r0 = 0; r0 < n; r0 += rows) {
    const std::int64_t nb = std::min(rows, n - r0);
    widen_bf16(w + r0 * k, scratch.data(), nb * k);
    // y[:, r0 : r0 + nb] (row stride n) = x · block(W)ᵀ.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(nb), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k),
                scratch.data(), static_cast<blasint>(k), 0.0f, y + r0, static_cast<blasint>(n));
  }
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

void linear_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k) {
  if (m <= 0 || n <= 0) return;
  if (m == 1) {
    gemv_bf16(w, x, y, n, k);
  } else {
    sgemm_xwt_bf16(x, w, y, m, n, k);
  }
}

}  // namespace kvq::kernels
