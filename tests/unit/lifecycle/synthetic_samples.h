// The 4 calibration samples (24-27 token ids below 256) of the tiny-model interop tests; the
// reference checks (tools/reference/check_*interop*.py) load checkpoints calibrated on them.
#pragma once

#include <vector>

#include "kvq/lifecycle/dataset.h"

namespace kvq::lifecycle::test_samples {

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

}  // namespace kvq::lifecycle::test_samples
