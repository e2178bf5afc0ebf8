// AVX-512 row kernels (16 values per step). Compiled for avx512f/bw/vl/dq + fma + f16c through
// a target pragma that covers only this file's own code (headers are included before it, so no
// inline function from a header is emitted with AVX-512 instructions); called only after the
// runtime check in formats.cc.
//
// FP8 E4M3 is decoded with bit manipulation, not a gather (5x slower) or an in-memory LUT:
// normal codes shift into the fp32 exponent/mantissa fields and rebias; subnormals (exponent 0)
// are m * 2^-9; S.1111.111 is NaN. Nibbles (int4, nvfp4) unpack with and/shift + byte unpack;
// E2M1 values come from a 16-entry register LUT (vpermps).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kvq/quant/formats_simd.h"

#pragma GCC push_options
// GCC 12 flags its own intrinsics headers (_mm512_undefined_* operands) under -O3: a known
// false positive, silenced for this file's code only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

namespace kvq::quant::detail::avx512 {
namespace {

constexpr std::int64_t kStep = 16;

inline __m512 e4m3_16(const std::byte* p) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i em = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
  const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(em, 20), _mm512_set1_epi32(120 << 23));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(em), _mm512_set1_ps(1.0f / 512.0f));
  __m512 v = _mm512_mask_blend_ps(_mm512_cmplt_epi32_mask(em, _mm512_set1_epi32(8)),
                                  _mm512_castsi512_ps(normal), sub);
  v = _mm512_mask_blend_ps(_mm512_cmpeq_epi32_mask(em, _mm512_set1_epi32(0x7f)), v,
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  return _mm512_or_ps(v, _mm512_castsi512_ps(sign));
}

// 8 bytes of nibble pairs -> 16 codes (element 2i low nibble) as int32.
inline __m512i nibbles_16(const std::byte* p) {
  const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(x, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
}

inline __m512 e2m1_16(const std::byte* p) {
  const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                    -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  return _mm512_permutexvar_ps(nibbles_16(p), lut);
}

// Elements [i, i + 16) before the stream scale (nvfp4: e2m1 only, block scale not applied).
template <KvFormat F>
inline __m512 load16(const std::byte* row, std::int64_t i, __m512 zp) {
  if constexpr (F == KvFormat::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (F == KvFormat::kBF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (F == KvFormat::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * i)));
  } else if constexpr (F == KvFormat::kFP8E4M3) {
    return _mm512_sub_ps(e4m3_16(row + i), zp);
  } else if constexpr (F == KvFormat::kINT8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), zp);
  } else if constexpr (F == KvFormat::kINT4) {
    const __m512i q = _mm512_sub_epi32(nibbles_16(row + i / 2), _mm512_set1_epi32(8));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(q), zp);
  } else {
    return e2m1_16(row + i / 2);
  }
}

inline float block_scale(const std::byte* row, std::int64_t n, std::int64_t i) {
  return nvfp4_block_scale(row, n, i);
}

template <KvFormat F>
std::int64_t dequantize_t(const std::byte* in, std::int64_t n, float scale, float zero_point,
                          float global_scale, float* out) {
  const __m512 zp = _mm512_set1_ps(zero_point);
  __m512 s = _mm512_set1_ps(scale);
  std::int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    if constexpr (F == KvFormat::kNVFP4) s = _mm512_set1_ps(block_scale(in, n, i) / global_scale);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(load16<F>(in, i, zp), s));
  }
  return i;
}

template <KvFormat F>
std::int64_t dot_t(const float* q, const std::byte* row, std::int64_t n, float zero_point,
                   float* sum) {
  const __m512 zp = _mm512_set1_ps(zero_point);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 2 * kStep <= n; i += 2 * kStep) {
    __m512 v0 = load16<F>(row, i, zp), v1 = load16<F>(row, i + kStep, zp);
    if constexpr (F == KvFormat::kNVFP4) {
      v0 = _mm512_mul_ps(v0, _mm512_set1_ps(block_scale(row, n, i)));
      v1 = _mm512_mul_ps(v1, _mm512_set1_ps(block_scale(row, n, i + kStep)));
    }
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), v0, acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + kStep), v1, acc1);
  }
  for (; i + kStep <= n; i += kStep) {
    __m512 v = load16<F>(row, i, zp);
    if constexpr (F == KvFormat::kNVFP4)
      v = _mm512_mul_ps(v, _mm512_set1_ps(block_scale(row, n, i)));
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), v, acc0);
  }
  *sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  return i;
}

template <KvFormat F>
std::int64_t axpy_t(float w, const std::byte* row, std::int64_t n, float zero_point, float* acc) {
  const __m512 zp = _mm512_set1_ps(zero_point);
  const __m512 wv = _mm512_set1_ps(w);
  std::int64_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    __m512 v = load16<F>(row, i, zp);
    if constexpr (F == KvFormat::kNVFP4)
      v = _mm512_mul_ps(v, _mm512_set1_ps(block_scale(row, n, i)));
    _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(wv, v, _mm512_loadu_ps(acc + i)));
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

}  // namespace kvq::quant::detail::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
