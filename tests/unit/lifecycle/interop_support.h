// What the tiny-model interop tests share: their calibration samples (the reference checks,
// tools/reference/check_*interop*.py, load checkpoints calibrated on them) and the comparison of
// kvq's logits with the reference's recorded ones.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/core/tensor.h"
#include "kvq/lifecycle/dataset.h"

namespace kvq::lifecycle::interop {

inline std::vector<CalibrationSample> interop_samples() {
  std::vector<CalibrationSample> samples;
  for (int i = 0; i < 4; ++i) {
    CalibrationSample c;
    c.index = i;
    for (int t = 0; t < 24 + i; ++t) c.tokens.push_back((t * 29 + i * 13 + 2) % 256);
    samples.push_back(c);
  }
  return samples;
}

// max |got - want| over every logit; `want` is the reference's [tokens][vocab] list and must
// cover `got` exactly (a size mismatch fails the test and returns infinity).
inline double max_abs_logit_diff(const Tensor& got, const nlohmann::json& want_rows) {
  const auto want = want_rows.get<std::vector<std::vector<float>>>();
  const std::size_t vocab = want.empty() ? 0 : want[0].size();
  EXPECT_EQ(static_cast<std::int64_t>(want.size() * vocab), got.numel());
  if (static_cast<std::int64_t>(want.size() * vocab) != got.numel()) return INFINITY;
  double worst = 0;
  for (std::size_t t = 0; t < want.size(); ++t)
    for (std::size_t v = 0; v < vocab; ++v)
      worst = std::max(worst, double(std::fabs(got.f32()[t * vocab + v] - want[t][v])));
  return worst;
}

}  // namespace kvq::lifecycle::interop
