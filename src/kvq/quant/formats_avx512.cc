// AVX-512 row kernels (16 values per step). Compiled for avx512f/bw/vl/dq + fma + f16c through
// a target pragma that covers only this file's own code (headers are included before it, so no
// inline function from a header is emitted with AVX-512 instructions); called only after the
// runtime check in formats.cc.
//
// FP8 E4M3 is decoded with bit manipulation, not a gather (5x slower) or an in-memory LUT: the
// code shifted into an fp16 is the value times 2^-8 (subnormals too), widened by vcvtph2ps and
// scaled back exactly; S.1111.111 is NaN. Nibbles (int4, nvfp4) unpack with and/shift + byte
// unpack; E2M1 values come from a 16-entry register LUT (vpermps).
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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

namespace kvq::quant::detail::avx512 {
namespace {

inline __m512 e4m3_16(const std::byte* p) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i em = _mm256_and_si256(b, _mm256_set1_epi16(0x7f));
  // S.EEEE.MMM as the fp16 S.0EEEE.MMM0000000 is the same value times 2^-8 (exponent bias 15
  // against 7), subnormals included; S.1111.111 (NaN in E4M3) gets the fp16 NaN exponent.
  __m256i h = _mm256_or_si256(_mm256_slli_epi16(em, 7),
                              _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8));
  h = _mm256_or_si256(h, _mm256_and_si256(_mm256_cmpeq_epi16(em, _mm256_set1_epi16(0x7f)),
                                          _mm256_set1_epi16(0x7c00)));
  return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));  // exact: a power of two
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

struct Simd {
  using V = __m512;
  static constexpr std::int64_t kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float reduce(V v) { return _mm512_reduce_add_ps(v); }
  // out[r] = reduce(v[r]) for 16 vectors at once, bit for bit: the same pairings as
  // _mm512_reduce_add_ps (lane i + i+8, then i + i+4, i + i+2, i + i+1), but each step combines
  // two vectors in one register, so 16 sums cost 46 instructions instead of 16 x 8.
  static constexpr int kReduceBlock = 16;
  static void reduce_block(const V* v, float* out) {
    __m512 t[8], u[4], z[2];
    for (int p = 0; p < 8; ++p) {  // block b of t[p]: halves of v[2p] (b < 2), v[2p + 1]
      t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                           _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
    }
    for (int q = 0; q < 4; ++q) {  // 128-bit block L of u[q]: 4 partial sums of v[4q + L]
      u[q] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * q], t[2 * q + 1], 0xDD));
    }
    for (int r = 0; r < 2; ++r) {  // block L of z[r]: 2 sums of v[8r + L], 2 of v[8r + 4 + L]
      z[r] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * r], u[2 * r + 1], 0x44),
                           _mm512_shuffle_ps(u[2 * r], u[2 * r + 1], 0xEE));
    }
    // Lane 4L + m of w: the sum of v[L + 4m].
    const __m512 w =
        _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, w));
  }
  template <KvFormat F>
  static V load(const std::byte* row, std::int64_t i, V zp) {
    return load16<F>(row, i, zp);
  }
};

}  // namespace

#include "kvq/quant/formats_simd_body.inc"  // NOLINT(bugprone-suspicious-include)

}  // namespace kvq::quant::detail::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
