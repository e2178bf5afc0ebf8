// NaN / Inf in an observed tensor (issue: quantization core, bad input).
//
// Reference behaviour (torch.amin / amax propagate NaN; llm-compressor does not check): a NaN
// in the observed states makes the affected scale NaN, and an Inf makes it Inf. kvq's observer
// mirrors that bit for bit, and the lifecycle refuses to freeze or use such a scale with an
// error naming the module (tests/unit/lifecycle). This test pins the observer half.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kvq/quant/observers.h"
#include "kvq/quant/quant_args.h"

namespace kvq::quant {
namespace {

QuantizationArgs fp8_args(QuantizationStrategy strategy) {
  QuantizationArgs args;
  args.num_bits = 8;
  args.type = QuantizationType::kFloat;
  args.strategy = strategy;
  args.observer = "static_minmax";
  args.validate();
  return args;
}

// k states [1, 3 heads, 4 tokens, 8 dims]; `bad` is written into head 1.
Tensor keys_with(float bad) {
  std::vector<float> v(1 * 3 * 4 * 8);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
  v[1 * 4 * 8 + 5] = bad;
  return Tensor::from_f32({1, 3, 4, 8}, v);
}

TEST(ObserverNonFinite, NanPropagatesToThatHeadOnly) {
  auto observer = make_observer(fp8_args(QuantizationStrategy::kAttnHead), "k");
  observer->update(keys_with(std::numeric_limits<float>::quiet_NaN()));
  const std::vector<float> scale = observer->qparams().scale.to_f32_vector();  // [3, 1, 1]
  ASSERT_EQ(scale.size(), 3u);
  EXPECT_TRUE(std::isfinite(scale[0]));
  EXPECT_TRUE(std::isnan(scale[1]));
  EXPECT_TRUE(std::isfinite(scale[2]));
}

TEST(ObserverNonFinite, InfMakesTheTensorScaleInfinite) {
  auto observer = make_observer(fp8_args(QuantizationStrategy::kTensor), "k");
  observer->update(keys_with(std::numeric_limits<float>::infinity()));
  const std::vector<float> scale = observer->qparams().scale.to_f32_vector();  // [1]
  ASSERT_EQ(scale.size(), 1u);
  EXPECT_TRUE(std::isinf(scale[0]));
}

}  // namespace
}  // namespace kvq::quant
