// Compares a calibrated lifecycle's k/v scales with a golden's per-layer lists
// ([{"k_scale": [...], "v_scale": [...]}, ...], as the tools/reference calibration scripts write
// them): every value within `bound` relative (a failure names the layer, tensor and index).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kvq/lifecycle/apply.h"

namespace kvq::test {

struct ScaleDifference {
  double max = 0, mean = 0;
};

inline ScaleDifference compare_kv_scales(const nlohmann::json& layers,
                                         const lifecycle::QuantizationLifecycle& lc, double bound,
                                         const std::string& label) {
  ScaleDifference d;
  std::int64_t count = 0;
  EXPECT_EQ(layers.size(), lc.states().size()) << label;
  for (std::size_t l = 0; l < layers.size() && l < lc.states().size(); ++l)
    for (char b : {'k', 'v'}) {
      const auto want = layers[l][std::string(1, b) + "_scale"].get<std::vector<float>>();
      const auto& got = lc.states()[l]->param(b)->scale;
      EXPECT_EQ(got.size(), want.size()) << label << " layer " << l << " " << b;
      for (std::size_t i = 0; i < want.size() && i < got.size(); ++i) {
        const double rel = std::fabs(got[i] - want[i]) / want[i];
        d.max = std::max(d.max, rel);
        d.mean += rel;
        ++count;
        EXPECT_LT(rel, bound) << label << " layer " << l << " " << b << "_scale[" << i << "]";
      }
    }
  if (count > 0) d.mean /= static_cast<double>(count);
  std::printf("%s: max relative scale difference %.3g, mean %.3g\n", label.c_str(), d.max, d.mean);
  return d;
}

}  // namespace kvq::test
