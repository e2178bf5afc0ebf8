// One online-softmax step over a tile of attention scores, with a vectorised exp.
//
// Decode attention does one exp per cached key and query head; with std::exp (a library call,
// ~20 cycles) that alone cost more than reading an 8-bit K/V row from DRAM. fast_exp is
// Cephes' expf polynomial (≤ 2 ulp from std::exp over the range attention uses, tested), the
// AVX-512 path computes it 16 lanes at a time with the same fused operations as the scalar
// path, so both give the same exp values; only the order of the final sum differs.
#pragma once

#include <cstdint>

namespace kvq::kernels {

struct SoftmaxStep {
  float max;  // max(running_max, max_j s[j])
  float sum;  // Σ_j exp(s[j] - max)
};

// s [n] (scaled scores; -inf for masked keys) becomes exp(s[j] - max) in place (exactly 0 for
// -inf). If every s[j] and running_max are -inf, s is left as zeros and max = -inf.
SoftmaxStep softmax_step(float* s, std::int64_t n, float running_max);

// exp(x) for x ≤ 0 as softmax_step computes it (0 below -87.3, where expf is denormal or 0).
float fast_exp(float x);

}  // namespace kvq::kernels
