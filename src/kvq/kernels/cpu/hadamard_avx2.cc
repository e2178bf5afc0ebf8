// AVX2 Walsh–Hadamard kernel (8 floats per vector, a block of 8 vectors = 64 floats in
// registers): the fallback for CPUs without AVX-512, the same body (hadamard_simd_body.inc) as
// hadamard_avx512.cc. Compiled for avx2 through a target pragma covering only this file's code.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx2")

namespace kvq::kernels::avx2 {
namespace {

struct Simd {
  using V = __m256;
  // 8 of the 16 registers hold a block, leaving room for the partners and sums.
  static constexpr std::int64_t kBlockVectors = 8;
  // One stage inside the vector: p holds each lane's partner (lane i ^ h); lanes with bit h
  // clear get a + b = v + p, the others (set in kUpper) a - b = p - v.
  template <int kUpper>
  static V stage(V v, V p) {
    return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), kUpper);
  }
  // Stages h = 1, 2, 4: partners by swapping neighbours, pairs and 128-bit halves.
  static V butterflies(V v) {
    v = stage<0xAA>(v, _mm256_permute_ps(v, 0xB1));
    v = stage<0xCC>(v, _mm256_permute_ps(v, 0x4E));
    return stage<0xF0>(v, _mm256_permute2f128_ps(v, v, 0x01));
  }
};

}  // namespace

#include "kvq/kernels/cpu/hadamard_simd_body.inc"  // NOLINT(bugprone-suspicious-include)

}  // namespace kvq::kernels::avx2

#pragma GCC pop_options
