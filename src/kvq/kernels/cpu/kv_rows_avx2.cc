// AVX2 + FMA + F16C row kernels (8 values per step): the fallback for CPUs without AVX-512,
// same structure and per-element ops as kv_rows_avx512.cc (the FP8 decode of each is in
// kv_format_simd.inc).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/quant/kv_row_layout.h"

#pragma GCC push_options
// GCC 12 flags its own intrinsics headers (_mm512_undefined_* operands) under -O3: a known
// false positive, silenced for this file's code only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c")

namespace kvq::kernels::avx2 {
namespace {

struct Simd {
  using V = __m256;
  static constexpr std::int64_t kWidth = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V broadcast(const float* p) { return _mm256_broadcast_ss(p); }  // one load, no shuffle
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
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
};

}  // namespace

#define KVQ_ROWS_AVX512 0
#include "kvq/kernels/cpu/kv_format_simd.inc"     // NOLINT(bugprone-suspicious-include)
#include "kvq/kernels/cpu/kv_rows_simd_body.inc"  // NOLINT(bugprone-suspicious-include)
#undef KVQ_ROWS_AVX512

}  // namespace kvq::kernels::avx2

#pragma GCC diagnostic pop
#pragma GCC pop_options
