// AVX-512 Walsh–Hadamard kernel (16 floats per vector, a block of 16 vectors = 256 floats in
// registers). Compiled for avx512f through a target pragma that covers only this file's own code
// (headers are included before it); called only after the runtime check in hadamard.cc. The
// kernel is hadamard_simd_body.inc.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx512f")

namespace kvq::kernels::avx512 {
namespace {

struct Simd {
  using V = __m512;
  // 16 of the 32 registers hold a block: head_dim 256 runs all its stages in registers.
  static constexpr std::int64_t kBlockVectors = 16;
  // One stage inside the vector: p holds each lane's partner (lane i ^ h); lanes with bit h
  // clear (`upper` clear) get a + b = v + p, the others a - b = p - v.
  static V stage(V v, V p, __mmask16 upper) {
    return _mm512_mask_sub_ps(_mm512_add_ps(v, p), upper, p, v);
  }
  // Stages h = 1, 2, 4, 8: partners by swapping neighbours, pairs, 128-bit and 256-bit halves.
  // The all-lanes masked forms are the same instructions; the unmasked intrinsics pass GCC 12 an
  // _mm512_undefined_ps operand that -Wuninitialized reports (a false positive).
  static V butterflies(V v) {
    v = stage(v, _mm512_mask_permute_ps(v, kAll, v, 0xB1), 0xAAAA);
    v = stage(v, _mm512_mask_permute_ps(v, kAll, v, 0x4E), 0xCCCC);
    v = stage(v, _mm512_mask_shuffle_f32x4(v, kAll, v, v, 0xB1), 0xF0F0);
    return stage(v, _mm512_mask_shuffle_f32x4(v, kAll, v, v, 0x4E), 0xFF00);
  }
  static constexpr __mmask16 kAll = 0xFFFF;
};

}  // namespace

#include "kvq/kernels/cpu/hadamard_simd_body.inc"  // NOLINT(bugprone-suspicious-include)

}  // namespace kvq::kernels::avx512

#pragma GCC pop_options
