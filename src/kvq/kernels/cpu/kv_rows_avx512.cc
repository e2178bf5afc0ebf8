// AVX-512 row kernels (16 values per step). Compiled for avx512f/bw/vl/dq + fma + f16c through
// a target pragma that covers only this file's own code (headers are included before it, so no
// inline function from a header is emitted with AVX-512 instructions); called only after the
// runtime check in kv_row_kernels.cc. The format decoders are kv_format_simd.inc's rows.
// GCC 12 reports its own _mm512_reduce_add_ps (`__Y = __Y` in _mm512_extractf64x4_pd, inlined
// from the header, so the diagnostic is placed there) as uninitialized where dot_t is emitted on
// its own (its address is in the ISA table): a false positive, silenced for this file before the
// header is read.
#pragma GCC diagnostic ignored "-Wuninitialized"
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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")

namespace kvq::kernels::avx512 {
namespace {

struct Simd {
  using V = __m512;
  static constexpr std::int64_t kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  // A float from memory in every lane: one load (folded into the instruction), no shuffle.
  static V broadcast(const float* p) { return _mm512_broadcastss_ps(_mm_load_ss(p)); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
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
};

}  // namespace

#define KVQ_ROWS_AVX512 1
#include "kvq/kernels/cpu/kv_format_simd.inc"     // NOLINT(bugprone-suspicious-include)
#include "kvq/kernels/cpu/kv_rows_simd_body.inc"  // NOLINT(bugprone-suspicious-include)
#undef KVQ_ROWS_AVX512

}  // namespace kvq::kernels::avx512

#pragma GCC diagnostic pop
#pragma GCC pop_options
