// Shared by the kernel tests (Linear fp32 / bf16, pointwise).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels::test {

// n values from N(0, scale²), reproducible from the seed.
inline std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

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

// batch(x, y) computes y [m, n] from x [m, k]; single(x_i, y_i) one row. Every row of the batch
// must equal the single-input result bit for bit (memcmp: -0 vs +0 and NaN payloads count).
template <class Batch, class Single>
void expect_rows_bit_identical(Batch&& batch, Single&& single, const std::vector<float>& x,
                               std::int64_t m, std::int64_t n, std::int64_t k,
                               std::string_view what) {
  std::vector<float> got(static_cast<std::size_t>(m * n), -1.0f), want(static_cast<std::size_t>(n));
  batch(x.data(), got.data());
  for (std::int64_t i = 0; i < m; ++i) {
    single(x.data() + i * k, want.data());
    ASSERT_EQ(std::memcmp(got.data() + i * n, want.data(), want.size() * sizeof(float)), 0)
        << what << ": m=" << m << " n=" << n << " k=" << k << " row " << i;
  }
}

}  // namespace kvq::kernels::test
