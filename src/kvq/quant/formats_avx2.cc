// AVX2 + FMA + F16C row kernels (8 values per step): the fallback for CPUs without AVX-512,
// same structure and per-element ops as formats_avx512.cc (see there for the FP8 decode).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kvq/quant/formats_simd.h"

#pragma GCC push_options
// GCC 12 flags its own intrinsics headers (_mm512_undefined_* operands) under -O3: a known
// false positive, silenced for this file's code only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c")

namespace kvq::quant::detail::avx2 {
namespace {

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

struct Simd {
  using V = __m256;
  static constexpr std::int64_t kWidth = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static constexpr int kReduceBlock = 1;  // no block reduction: one reduce per vector
  static void reduce_block(const V* v, float* out) { *out = reduce(*v); }
  template <KvFormat F>
  static V load(const std::byte* row, std::int64_t i, V zp) {
    return load8<F>(row, i, zp);
  }
};

}  // namespace

#include "kvq/quant/formats_simd_body.inc"  // NOLINT(bugprone-suspicious-include)

}  // namespace kvq::quant::detail::avx2

#pragma GCC diagnostic pop
#pragma GCC pop_options
