// Rows of KV values for the format and kernel tests: normal values with a +0, a -0 and an
// outlier, where codecs and kernels tend to differ.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kvq::test {

// n values from N(0, spread²); from n > 4 on, x[1] = +0, x[2] = -0 and x[3] is 9x larger.
inline std::vector<float> random_row(std::mt19937& rng, std::int64_t n, float spread) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = dist(rng);
  if (n > 4) {
    x[1] = 0.0f;
    x[2] = -0.0f;
    x[3] *= 9.0f;  // an outlier
  }
  return x;
}

}  // namespace kvq::test
