// Shared by the fp32 and bf16 Linear kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels::test {

// Σ_c |w[r, c] · x[c]| for each row r of w [n, k]: the scale of the summation-order error.
inline std::vector<float> abs_sums(const std::vector<float>& w, const float* x, std::int64_t n,
                                   std::int64_t k) {
  std::vector<float> s(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    double acc = 0.0;
    for (std::int64_t c = 0; c < k; ++c) acc += std::fabs(w[r * k + c] * x[c]);
    s[static_cast<std::size_t>(r)] = static_cast<float>(acc);
  }
  return s;
}

// Every ISA level this CPU can run, scalar first.
inline std::vector<Isa> supported_isas() {
  std::vector<Isa> isas{Isa::kScalar};
  if (detected_isa() == Isa::kAvx2 || detected_isa() == Isa::kAvx512) isas.push_back(Isa::kAvx2);
  if (detected_isa() == Isa::kAvx512) isas.push_back(Isa::kAvx512);
  return isas;
}

}  // namespace kvq::kernels::test
