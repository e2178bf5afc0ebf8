// AVX2 + FMA + F16C row kernels (8 values per step): the fallback for CPUs without AVX-512,
// same structure and per-element ops as formats_avx512.cc (see there for the FP8 decode).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kvq/quant/formats_simd.h"

#pragma GCC push_options
// GCC 12 flags its own intrinsics headers (_mm512_undefined_* operands) under -O3: a known
// false positive, silenced for this file's code only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c")

namespace kvq::quant::detail::avx2 {
namespace {

constexpr std::int64_t kStep = 8;

inline __m256 e4m3_8(const std::byte* p) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i em = _mm256_and_si256(b, _mm256_set1_epi32(0x7f));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
  const __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(em, 20), _mm256_set1_epi32(120 << 23));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(em), _mm256_set1_ps(1.0f / 512.0f));
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), em);
  __m256 v = _mm256_blendv_ps(_mm256_castsi256_ps(normal), sub, _mm256_castsi256_ps(is_sub));
  const __m256i is_nan = _mm256_cmpeq_epi32(em, _mm256_set1_epi32(0x7f));
  v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
                       _mm256_castsi256_ps(is_nan));
  return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

// 4 bytes of nibble pairs -> 8 codes (element 2i low nibble) as int32.
inline __m256i nibbles_8(const std::byte* p) {
  std::int32_t word;
  std::memcpy(&word, p, 4);
  const __m128i x = _mm_cvtsi32_si128(word);
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(x, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
  return _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
}

inline __m256 e2m1_8(const std::byte* p) {
  const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i c = nibbles_8(p);
  const __m256 mag = _mm256_permutevar8x32_ps(lut, _mm256_and_si256(c, _mm256_set1_epi32(7)));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
  return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
}

// Elements [i, i + 8) before the stream scale (nvfp4: e2m1 only, block scale not applied).
template <KvFormat F>
inline __m256 load8(const std::byte* row, std::int64_t i, __m256 zp) {
  if constexpr (F == KvFormat::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (F == KvFormat::kBF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (F == KvFormat::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
  } else if constexpr (F == KvFormat::kFP8E4M3) {
    return _mm256_sub_ps(e4m3_8(row + i), zp);
  } else if constexpr (F == KvFormat::kINT8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
    return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), zp);
  } else if constexpr (F == KvFormat::kINT4) {
    const __m256i q = _mm256_sub_epi32(nibbles_8(row + i / 2), _mm256_set1_epi32(8));
    return _mm256_sub_ps(_mm256_cvtepi32_ps(q), zp);
  } else {
    return e2m1_8(row + i / 2);
  }
}

inline float block_scale(const std::byte* row, std::int64_t n, std::int64_t i) {
  return nvfp4_block_scale(row, n, i);
}

template <KvFormat F>
std::int64_t dequantize_t(const std::byte* in, std::int64_t n, float scale, float zero_point,
                          float global_scale, float* out) {
  const __m256 zp = _mm256_set1_ps(zero_point);
  __m256 s = _mm256_set1_ps(scale);
  std::int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    if constexpr (F == KvFormat::kNVFP4) s = _mm256_set1_ps(block_scale(in, n, i) / global_scale);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(load8<F>(in, i, zp), s));
  }
  return i;
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <KvFormat F>
std::int64_t dot_t(const float* q, const std::byte* row, std::int64_t n, float zero_point,
                   float* sum) {
  const __m256 zp = _mm256_set1_ps(zero_point);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 2 * kStep <= n; i += 2 * kStep) {
    __m256 v0 = load8<F>(row, i, zp), v1 = load8<F>(row, i + kStep, zp);
    if constexpr (F == KvFormat::kNVFP4) {
      const __m256 s = _mm256_set1_ps(block_scale(row, n, i));  // i, i + 8: one 16-value block
      v0 = _mm256_mul_ps(v0, s);
      v1 = _mm256_mul_ps(v1, s);
    }
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), v0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + kStep), v1, acc1);
  }
  for (; i + kStep <= n; i += kStep) {
    __m256 v = load8<F>(row, i, zp);
    if constexpr (F == KvFormat::kNVFP4)
      v = _mm256_mul_ps(v, _mm256_set1_ps(block_scale(row, n, i)));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), v, acc0);
  }
  *sum = hsum(_mm256_add_ps(acc0, acc1));
  return i;
}

template <KvFormat F>
std::int64_t axpy_t(float w, const std::byte* row, std::int64_t n, float zero_point, float* acc) {
  const __m256 zp = _mm256_set1_ps(zero_point);
  const __m256 wv = _mm256_set1_ps(w);
  std::int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    __m256 v = load8<F>(row, i, zp);
    if constexpr (F == KvFormat::kNVFP4)
      v = _mm256_mul_ps(v, _mm256_set1_ps(block_scale(row, n, i)));
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(wv, v, _mm256_loadu_ps(acc + i)));
  }
  return i;
}

}  // namespace

#define KVQ_FORMAT_DISPATCH(fn, ...)              \
  switch (format) {                               \
    case KvFormat::kF32:                          \
      return fn<KvFormat::kF32>(__VA_ARGS__);     \
    case KvFormat::kBF16:                         \
      return fn<KvFormat::kBF16>(__VA_ARGS__);    \
    case KvFormat::kF16:                          \
      return fn<KvFormat::kF16>(__VA_ARGS__);     \
    case KvFormat::kFP8E4M3:                      \
      return fn<KvFormat::kFP8E4M3>(__VA_ARGS__); \
    case KvFormat::kINT8:                         \
      return fn<KvFormat::kINT8>(__VA_ARGS__);    \
    case KvFormat::kINT4:                         \
      return fn<KvFormat::kINT4>(__VA_ARGS__);    \
    case KvFormat::kNVFP4:                        \
      return fn<KvFormat::kNVFP4>(__VA_ARGS__);   \
  }                                               \
  return 0

std::int64_t dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                            float zero_point, float global_scale, float* out) {
  KVQ_FORMAT_DISPATCH(dequantize_t, in, n, scale, zero_point, global_scale, out);
}

std::int64_t dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
                     float zero_point, float* sum) {
  KVQ_FORMAT_DISPATCH(dot_t, q, row, n, zero_point, sum);
}

std::int64_t axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n,
                      float zero_point, float* acc) {
  KVQ_FORMAT_DISPATCH(axpy_t, w, row, n, zero_point, acc);
}

#undef KVQ_FORMAT_DISPATCH

}  // namespace kvq::quant::detail::avx2

#pragma GCC diagnostic pop
#pragma GCC pop_options
