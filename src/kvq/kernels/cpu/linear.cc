#include "kvq/kernels/cpu/linear.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/core/threading.h"

namespace kvq::kernels {
namespace {

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

// ---- GEMV, one input or several: one weight row at a time. ----
//
// Rows [r0, r1) of y [m, ldy] = x [m, k] · Wᵀ (m = 1: the plain GEMV). The kernels walk W one
// row after the other, so a range of rows is ONE sequential stream through memory: on the AMD
// EPYC host of docs/benchmarks.md, DRAM-resident bf16 weights stream at 20 GB/s that way against
// 8 GB/s when four rows were read side by side (four short interleaved streams defeat the
// hardware prefetcher; measured 2026-12-05, issue 22). Every input gets the same arithmetic
// whatever m is (same accumulators, same order, same horizontal sums), so row i of a batched
// result is bit-identical to gemv(W, x_i): decoding several sequences at once gives each the
// logits it would get alone. Inputs go in groups of up to kBatchGroup (one weight load feeds
// every input of a group); the groups are the OUTER loop over a range of rows (a 64-row chunk,
// for_row_chunks), so a group's inputs stay in L1 while the range's rows stream past, from DRAM
// for the first group and from L2 for the next. The group size changes no bit: each input's
// arithmetic is its own.
constexpr int kBatchGroup = 8;
// A group's inputs fill at most one L1d (48 KiB on the Intel Xeon of docs/benchmarks.md): a
// larger k takes smaller groups (an 8B model's down_proj, k = 14336: one input per pass).
constexpr std::int64_t kGroupInputBytes = 48 * 1024;
inline std::int64_t batch_group(std::int64_t k) {
  return std::clamp<std::int64_t>(
      kGroupInputBytes / std::max<std::int64_t>(1, k * std::int64_t{sizeof(float)}), 1,
      kBatchGroup);
}

template <class W>
void gemv_batch_rows_scalar(const W* w, const float* x, float* y, std::int64_t m, std::int64_t ldy,
                            std::int64_t r0, std::int64_t r1, std::int64_t k) {
  std::vector<float> out(static_cast<std::size_t>(r1 - r0));
  for (std::int64_t i = 0; i < m; ++i) {
    gemv_rows_scalar(w + r0 * k, x + i * k, out.data(), 0, r1 - r0, k);
    std::copy(out.begin(), out.end(), y + i * ldy + r0);
  }
}

// One weight row against M inputs: one 8-wide accumulator each, hsum256, then the k tail as
// explicit scalar FMAs (left to -ffp-contract, GCC contracted it in one instantiation and not the
// other, and bf16 weights must give the fp32 kernel's bits).
template <int M, class W>
__attribute__((target("avx2,fma"))) inline void batch_row_avx2(const W* wr, const float* x,
                                                               std::int64_t k, float* y,
                                                               std::int64_t ldy) {
  const std::int64_t k8 = k / 8 * 8;
  __m256 a[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) a[i] = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < k8; c += 8) {
    const __m256 wv = load8(wr + c);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) a[i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * k + c), a[i]);
  }
  for (int i = 0; i < M; ++i) {
    float s = hsum256(a[i]);
    for (std::int64_t c = k8; c < k; ++c) s = std::fma(widen(wr[c]), x[i * k + c], s);
    y[i * ldy] = s;
  }
}

// The kernel asks for the weight line kPrefetchAhead bytes on (the next rows, W is contiguous):
// the demand misses alone leave DRAM idle between them. Measured with BM_GemvBatch, 1 thread,
// 2026-12-06, Intel Xeon VM: 16 inputs × [1536, 576] fp32 1.46 → 0.71 ms, 8 inputs 0.77 →
// 0.38 ms, the lm_head [49152, 576] × 16 53 → 27 ms; 1024 bytes ahead was slower, 4096 no
// better. The single-input GEMV too (BM_GemvBf16, 2026-12-07, same VM: bf16 [49152, 576]
// 6.7–6.9 → 4.6–4.8 ms, 7.7 → 11.8 GB/s, against 12.3–13.5 GB/s for a plain streaming read;
// fp32 9.3–9.6 → 8.3–9.0 ms): on the AMD EPYC of the earlier tables it streamed at DRAM speed
// without, on this Intel VM only with it.
constexpr std::int64_t kPrefetchAhead = 2048;

// One weight row against M inputs: two accumulators each (even / odd 16-lane halves of every
// 32-wide step: two independent FMA chains keep up with DRAM), the k tail a masked load.
template <int M, class W>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) inline void batch_row_avx512(
    const W* wr, const float* x, std::int64_t k, float* y, std::int64_t ldy) {
  const std::int64_t k32 = k / 32 * 32;
  const std::int64_t k16 = k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  __m512 a[M], b[M];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) a[i] = b[i] = _mm512_setzero_ps();
  std::int64_t c = 0;
  for (; c < k32; c += 32) {
    const char* ahead = reinterpret_cast<const char*>(wr + c) + kPrefetchAhead;
    __builtin_prefetch(ahead, 0, 3);
    if constexpr (sizeof(W) == 4) __builtin_prefetch(ahead + 64, 0, 3);
    const __m512 w0 = load16(wr + c);
    const __m512 w1 = load16(wr + c + 16);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      a[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i * k + c), a[i]);
      b[i] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + i * k + c + 16), b[i]);
    }
  }
  for (; c < k16; c += 16) {
    const __m512 w0 = load16(wr + c);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) a[i] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + i * k + c), a[i]);
  }
  if (tail) {
    const __m512 w0 = load16(tail, wr + c);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      a[i] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(tail, x + i * k + c), a[i]);
    }
  }
  for (int i = 0; i < M; ++i) y[i * ldy] = hsum512(_mm512_add_ps(a[i], b[i]));
}

// The group size as a template argument (a lambda would lose the target attribute).
#define KVQ_BATCH_GROUP_SWITCH(g, call) \
  switch (g) {                          \
    case 1:                             \
      call(1);                          \
      break;                            \
    case 2:                             \
      call(2);                          \
      break;                            \
    case 3:                             \
      call(3);                          \
      break;                            \
    case 4:                             \
      call(4);                          \
      break;                            \
    case 5:                             \
      call(5);                          \
      break;                            \
    case 6:                             \
      call(6);                          \
      break;                            \
    case 7:                             \
      call(7);                          \
      break;                            \
    default:                            \
      call(8);                          \
      break;                            \
  }

template <class W>
__attribute__((target("avx2,fma"))) void gemv_batch_rows_avx2(const W* w, const float* x, float* y,
                                                              std::int64_t m, std::int64_t ldy,
                                                              std::int64_t r0, std::int64_t r1,
                                                              std::int64_t k) {
  const std::int64_t group = batch_group(k);
  for (std::int64_t i0 = 0; i0 < m; i0 += group) {
    const float* xg = x + i0 * k;
    const std::int64_t g = std::min(group, m - i0);
    for (std::int64_t r = r0; r < r1; ++r) {
      const W* wr = w + r * k;
      float* yr = y + i0 * ldy + r;
#define KVQ_CALL(M) batch_row_avx2<M>(wr, xg, k, yr, ldy)
      KVQ_BATCH_GROUP_SWITCH(g, KVQ_CALL)
#undef KVQ_CALL
    }
  }
}

template <class W>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void gemv_batch_rows_avx512(
    const W* w, const float* x, float* y, std::int64_t m, std::int64_t ldy, std::int64_t r0,
    std::int64_t r1, std::int64_t k) {
  const std::int64_t group = batch_group(k);
  for (std::int64_t i0 = 0; i0 < m; i0 += group) {
    const float* xg = x + i0 * k;
    const std::int64_t g = std::min(group, m - i0);
    for (std::int64_t r = r0; r < r1; ++r) {
      const W* wr = w + r * k;
      float* yr = y + i0 * ldy + r;
#define KVQ_CALL(M) batch_row_avx512<M>(wr, xg, k, yr, ldy)
      KVQ_BATCH_GROUP_SWITCH(g, KVQ_CALL)
#undef KVQ_CALL
    }
  }
}

// The single-input GEMV: rows [r0, r1) of y [n] = W·x.
template <class W>
__attribute__((target("avx2,fma"))) void gemv_rows_avx2(const W* w, const float* x, float* y,
                                                        std::int64_t r0, std::int64_t r1,
                                                        std::int64_t k) {
  for (std::int64_t r = r0; r < r1; ++r) batch_row_avx2<1>(w + r * k, x, k, y + r, 0);
}
template <class W>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void gemv_rows_avx512(
    const W* w, const float* x, float* y, std::int64_t r0, std::int64_t r1, std::int64_t k) {
  for (std::int64_t r = r0; r < r1; ++r) batch_row_avx512<1>(w + r * k, x, k, y + r, 0);
}
#undef KVQ_BATCH_GROUP_SWITCH

template <class W>
using GemvBatchRows = void (*)(const W*, const float*, float*, std::int64_t, std::int64_t,
                               std::int64_t, std::int64_t, std::int64_t);

template <class W>
GemvBatchRows<W> batch_rows_kernel(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return gemv_batch_rows_avx512<W>;
    case Isa::kAvx2:
      return gemv_batch_rows_avx2<W>;
    case Isa::kScalar:
      return gemv_batch_rows_scalar<W>;
  }
  return gemv_batch_rows_scalar<W>;
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

// Calls rows(r0, r1) over [0, n) in chunks of 64 rows, on up to num_threads() threads when the
// work (multiply-adds) pays for a parallel region. Each thread gets one contiguous range of
// chunks (schedule(static)), i.e. one sequential stream of weight rows.
template <class Rows>
void for_row_chunks(std::int64_t n, std::int64_t work, Rows&& rows) {
  // Enough work per OpenMP chunk to amortise the scheduling, fine enough to balance 2..16
  // threads on the 576-row projections.
  constexpr std::int64_t kChunk = 64;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  // Below ~64K multiply-adds a parallel region costs more than it saves (and on a loaded machine
  // waking threads costs far more).
  const int threads =
      work < kMinParallelWork ? 1 : static_cast<int>(std::min<std::int64_t>(num_threads(), chunks));
  if (threads <= 1) {
    rows(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) rows(c * kChunk, std::min(n, (c + 1) * kChunk));
}

template <class W>
void gemv_parallel(Isa isa, const W* w, const float* x, float* y, std::int64_t n, std::int64_t k) {
  const GemvRows<W> kernel = rows_kernel<W>(isa);
  for_row_chunks(n, n * k, [&](std::int64_t r0, std::int64_t r1) { kernel(w, x, y, r0, r1, k); });
}

// The batched kernels load one vector of x per FMA: from a 64-byte boundary that is one cache
// line, from anywhere else two. The engine's activations live in std::vectors (16-byte aligned),
// so x [m, k] is copied once per call to 64-byte-aligned scratch when its rows would not be
// aligned there (k a multiple of 16): 16 inputs × [64, 576] with L2-resident weights ran at 44 →
// 70 GFLOP/s on the Intel Xeon VM (2026-12-06), for a copy of m·k floats per matrix. The values,
// and so every bit of y, stay the same.
const float* aligned_inputs(const float* x, std::int64_t m, std::int64_t k) {
  constexpr std::size_t kAlign = 64;
  if (reinterpret_cast<std::uintptr_t>(x) % kAlign == 0 || k % 16 != 0) return x;
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<float, Free> scratch;
  thread_local std::size_t capacity = 0;  // floats
  const auto need = static_cast<std::size_t>(m * k);
  if (need > capacity) {
    const std::size_t floats = (need + 15) / 16 * 16;  // aligned_alloc: a multiple of kAlign
    scratch.reset(static_cast<float*>(std::aligned_alloc(kAlign, floats * sizeof(float))));
    if (!scratch) throw std::bad_alloc();
    capacity = floats;
  }
  std::copy(x, x + need, scratch.get());
  return scratch.get();
}

template <class W>
void gemv_batch_parallel(Isa isa, const W* w, const float* x, float* y, std::int64_t m,
                         std::int64_t n, std::int64_t k) {
  const GemvBatchRows<W> kernel = batch_rows_kernel<W>(isa);
  const float* xa = aligned_inputs(x, m, k);
  for_row_chunks(n, m * n * k,
                 [&](std::int64_t r0, std::int64_t r1) { kernel(w, xa, y, m, n, r0, r1, k); });
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

// Rows of bf16 weights widened per sgemm call in the prefill path: 4 M floats (16 MiB of
// scratch), at least 16 rows. Each block's sgemm re-packs x, which costs about as much as the
// block's arithmetic when the block is thin: at 1 MiB (64 rows of an 8B model's k = 4096)
// calibrating a Llama-3.2-3B-shaped model ran at 21 tok/s, at 16 MiB (1,024 rows) at 30 (a
// 1B shape: 69 -> 86 tok/s; 2 threads, bench/make_llama_shape.py, 2026-12-06). The scratch
// stays bounded whatever n is (128,256 rows of a Llama 3 lm_head).
constexpr std::int64_t kWidenBlockFloats = std::int64_t{1} << 22;

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

void gemv_batch_isa(Isa isa, const float* w, const float* x, float* y, std::int64_t m,
                    std::int64_t n, std::int64_t k) {
  gemv_batch_parallel(isa, w, x, y, m, n, k);
}

void gemv_batch_bf16_isa(Isa isa, const std::uint16_t* w, const float* x, float* y, std::int64_t m,
                         std::int64_t n, std::int64_t k) {
  gemv_batch_parallel(isa, w, x, y, m, n, k);
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
  if (m <= kMaxBatchedGemvRows) {
    linear_rows(x, w, y, m, n, k);
  } else if (n > 0) {
    sgemm_xwt(x, w, y, m, n, k);
  }
}

void linear_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k) {
  if (m <= kMaxBatchedGemvRows) {
    linear_rows_bf16(x, w, y, m, n, k);
  } else if (n > 0) {
    sgemm_xwt_bf16(x, w, y, m, n, k);
  }
}

void linear_rows(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k) {
  if (m <= 0 || n <= 0) return;
  if (m == 1) {
    gemv(w, x, y, n, k);
  } else {
    gemv_batch_isa(detected_isa(), w, x, y, m, n, k);
  }
}

void linear_rows_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m,
                      std::int64_t n, std::int64_t k) {
  if (m <= 0 || n <= 0) return;
  if (m == 1) {
    gemv_bf16(w, x, y, n, k);
  } else {
    gemv_batch_bf16_isa(detected_isa(), w, x, y, m, n, k);
  }
}

}  // namespace kvq::kernels
