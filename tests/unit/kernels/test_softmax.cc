// softmax_step / fast_exp (the attention kernels' exp) against std::exp.
//
// Tolerances: Cephes' expf polynomial is within 2 ulp of the correctly rounded exp over
// [-87.3, 0] (we sweep 2^20 points and check ≤ 2 ulp against std::exp, itself ≤ 1 ulp in glibc,
// so ≤ 3 ulp between the two). softmax_step's sum adds in another order than a sequential loop:
// ≤ n · 2⁻²⁴ relative, we allow 1e-6. A wrong max, a missing mask or a lost tail element is off
// by O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvq/kernels/cpu/softmax.h"

namespace kvq::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::int64_t ulp_distance(float a, float b) {
  std::int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(static_cast<std::int64_t>(ia) - static_cast<std::int64_t>(ib));
}

TEST(FastExp, WithinThreeUlpOfStdExp) {
  std::int64_t worst = 0;
  const int n = 1 << 20;
  for (int i = 0; i <= n; ++i) {
    const float x = -87.0f * static_cast<float>(i) / static_cast<float>(n);
    worst = std::max(worst, ulp_distance(fast_exp(x), std::exp(x)));
  }
  std::printf("fast_exp vs std::exp over [-87, 0]: max %lld ulp\n", static_cast<long long>(worst));
  EXPECT_LE(worst, 3);
}

TEST(FastExp, EdgeValues) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-0.0f), 1.0f);
  EXPECT_EQ(fast_exp(kNegInf), 0.0f);
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);  // below the denormal range: flushed
  EXPECT_GT(fast_exp(-87.0f), 0.0f);
}

TEST(SoftmaxStep, MatchesStdExpWithMasksTailsAndRunningMax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (std::int64_t n : {1, 7, 15, 16, 17, 33, 64}) {
    for (float running : {kNegInf, -1.0f, 30.0f}) {
      std::vector<float> s(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) {
        s[static_cast<std::size_t>(j)] = (j % 5 == 3) ? kNegInf : nd(rng);
      }
      float mx = running;
      for (float v : s) mx = std::max(mx, v);
      std::vector<double> want(s.size());
      double want_sum = 0.0;
      for (std::size_t j = 0; j < s.size(); ++j) {
        want[j] = s[j] == kNegInf ? 0.0 : static_cast<double>(std::exp(s[j] - mx));  // fp32 x
        want_sum += want[j];
      }
      std::vector<float> got = s;
      const SoftmaxStep st = softmax_step(got.data(), n, running);
      ASSERT_EQ(st.max, mx) << "n " << n;
      for (std::size_t j = 0; j < s.size(); ++j) {
        if (want[j] == 0.0) {
          EXPECT_EQ(got[j], 0.0f) << "masked key " << j << " n " << n;
        } else if (want[j] > 1e-30) {
          EXPECT_NEAR(got[j], want[j], 5e-7 * want[j]) << "key " << j << " n " << n;
        }
      }
      EXPECT_NEAR(st.sum, want_sum, 1e-6 * std::max(want_sum, 1e-30)) << "n " << n;
    }
  }
}

TEST(SoftmaxStep, AllMaskedLeavesZeros) {
  std::vector<float> s(20, kNegInf);
  const SoftmaxStep st = softmax_step(s.data(), 20, kNegInf);
  EXPECT_EQ(st.max, kNegInf);
  EXPECT_EQ(st.sum, 0.0f);
  for (float v : s) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace kvq::kernels
