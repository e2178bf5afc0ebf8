#include "kvq/eval/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kvq/core/error.h"

namespace kvq::eval {
namespace {

// Deterministic pseudo-noise in [-0.5, 0.5) without <random> distributions.
std::vector<double> noise(std::size_t n, std::uint64_t seed) {
  BootstrapIndexSampler s(seed);
  std::vector<double> out(n);
  for (double& v : out) v = static_cast<double>(s.below(1'000'000)) / 1e6 - 0.5;
  return out;
}

TEST(MeanSe, SampleStandardDeviationOverSqrtN) {
  // var = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3; se = sqrt(5/3) / 2.
  const std::vector<double> v{1, 2, 3, 4};
  const MeanSe r = mean_se(v);
  EXPECT_DOUBLE_EQ(r.mean, 2.5);
  EXPECT_NEAR(r.se, std::sqrt(5.0 / 3.0) / 2.0, 1e-15);
  EXPECT_EQ(r.n, 4);
}

TEST(MeanSe, BernoulliMatchesLmEvalStderr) {
  // lm-eval: mean_stderr = sample_stddev / sqrt(n) = sqrt(p (1 - p) / (n - 1)).
  const std::vector<std::uint8_t> flags{1, 0, 0, 1, 0, 0, 0, 1, 0, 0};
  const MeanSe r = mean_se(flags);
  EXPECT_DOUBLE_EQ(r.mean, 0.3);
  EXPECT_NEAR(r.se, std::sqrt(0.3 * 0.7 / 9.0), 1e-15);
}

TEST(MeanSe, SingleValueHasNoSe) {
  const std::vector<double> v{7};
  EXPECT_TRUE(std::isnan(mean_se(v).se));
  EXPECT_THROW(mean_se(std::span<const double>{}), InvalidArgument);
}

TEST(Percentile, LinearInterpolationLikeNumpy) {
  const std::vector<double> v{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);  // position 0.99 * 3 = 2.97
  EXPECT_THROW(percentile(v, 101), InvalidArgument);
}

TEST(McNemar, ExactAndMidPOnHandComputedTable) {
  // 12 discordant pairs, 2 vs 10: P(X <= 2) = (1 + 12 + 66) / 4096.
  const McNemarResult r = mcnemar(2, 10);
  // Binomial terms come from lgamma/exp: ~1e-15 relative error each.
  EXPECT_NEAR(r.p_exact, 158.0 / 4096.0, 1e-14);  // scipy binomtest(2, 12): 0.03857421875
  EXPECT_NEAR(r.p_mid, (158.0 - 66.0) / 4096.0, 1e-15);
  EXPECT_NEAR(r.chi2, 64.0 / 12.0, 1e-12);
  EXPECT_NEAR(r.p_chi2, 0.020921335337794035, 1e-12);  // scipy chi2.sf(64/12, 1)
  EXPECT_NEAR(r.chi2_cc, 49.0 / 12.0, 1e-12);
  EXPECT_NEAR(r.p_chi2_cc, 0.04330814281079206, 1e-12);  // scipy chi2.sf(49/12, 1)
}

TEST(McNemar, SymmetricAndFromVectors) {
  // Order of a and b does not change the p-values; 5 vs 20 (scipy binomtest(5, 25)).
  const McNemarResult r = mcnemar(20, 5);
  EXPECT_NEAR(r.p_exact, 0.004077315330505371, 1e-14);
  EXPECT_NEAR(r.p_chi2, 0.0026997960632601883, 1e-12);
  std::vector<std::uint8_t> a, b;
  for (int i = 0; i < 20; ++i) a.push_back(0), b.push_back(1);
  for (int i = 0; i < 5; ++i) a.push_back(1), b.push_back(0);
  for (int i = 0; i < 30; ++i) a.push_back(i % 2), b.push_back(i % 2);  // concordant
  const McNemarResult v = mcnemar(a, b);
  EXPECT_EQ(v.n01, 20);
  EXPECT_EQ(v.n10, 5);
  EXPECT_DOUBLE_EQ(v.p_exact, r.p_exact);
}

TEST(McNemar, NoDifference) {
  EXPECT_DOUBLE_EQ(mcnemar(0, 0).p_exact, 1.0);
  const McNemarResult r = mcnemar(7, 7);
  EXPECT_DOUBLE_EQ(r.p_exact, 1.0);
  EXPECT_NEAR(r.p_mid, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.p_chi2, 1.0);
  const std::vector<std::uint8_t> a{1, 0}, b{1};
  EXPECT_THROW(mcnemar(a, b), InvalidArgument);
}

TEST(BootstrapIndexSampler, UniformAndReproducible) {
  BootstrapIndexSampler s1(42), s2(42), s3(43);
  std::vector<int> counts(10, 0);
  bool differs = false;
  for (int i = 0; i < 100000; ++i) {
    const auto x = s1.below(10);
    ASSERT_EQ(x, s2.below(10));
    differs |= x != s3.below(10);
    ++counts[static_cast<std::size_t>(x)];
  }
  EXPECT_TRUE(differs);
  // 10000 expected per bin, sd ~95: 6 sd.
  for (int c : counts) EXPECT_NEAR(c, 10000, 600);
}

TEST(BootstrapCi, ReproducibleWithSeedAndCoversMean) {
  const std::vector<double> v = noise(2000, 7);
  const BootstrapOptions opt{.resamples = 500, .confidence = 0.95, .seed = 99};
  const ConfidenceInterval a = bootstrap_ci(v, {}, opt);
  const ConfidenceInterval b = bootstrap_ci(v, {}, opt);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  const ConfidenceInterval c = bootstrap_ci(v, {}, {.resamples = 500, .seed = 100});
  EXPECT_NE(a.lo, c.lo);
  const MeanSe m = mean_se(v);
  EXPECT_DOUBLE_EQ(a.estimate, m.mean);
  EXPECT_LT(a.lo, m.mean);
  EXPECT_GT(a.hi, m.mean);
  // The percentile interval of a mean is close to mean +- 1.96 se for n = 2000 (bootstrap noise
  // with 500 resamples is a few percent of the width; allow 15%).
  EXPECT_NEAR(a.hi - a.lo, 2 * 1.959964 * m.se, 0.15 * 2 * 1.959964 * m.se);
}

TEST(BootstrapCi, ConstantValuesGiveDegenerateInterval) {
  const std::vector<double> v(50, 3.25);
  const ConfidenceInterval ci = bootstrap_ci(v);
  EXPECT_EQ(ci.estimate, 3.25);
  EXPECT_EQ(ci.lo, 3.25);
  EXPECT_EQ(ci.hi, 3.25);
}

TEST(BootstrapCi, RatioStatisticAndBadInput) {
  const std::vector<double> sums{10, 20, 30}, w{5, 10, 15};
  EXPECT_DOUBLE_EQ(bootstrap_ci(sums, w).estimate, 2.0);
  EXPECT_DOUBLE_EQ(bootstrap_ci(sums, w).lo, 2.0);  // every window has ratio 2
  EXPECT_THROW(bootstrap_ci(sums, std::vector<double>{1, 2}), InvalidArgument);
  EXPECT_THROW(bootstrap_ci(std::span<const double>{}), InvalidArgument);
  EXPECT_THROW(bootstrap_ci(sums, {}, {.resamples = 0}), InvalidArgument);
  EXPECT_THROW(bootstrap_ci(sums, {}, {.confidence = 1.0}), InvalidArgument);
}

TEST(PairedBootstrap, IdenticalRunsHaveZeroDeltaAndPOne) {
  const std::vector<double> a = noise(300, 1);
  const PairedBootstrapResult r = paired_bootstrap(a, a);
  EXPECT_EQ(r.delta, 0.0);
  EXPECT_EQ(r.ci.lo, 0.0);
  EXPECT_EQ(r.ci.hi, 0.0);
  EXPECT_EQ(r.p_value, 1.0);
}

TEST(PairedBootstrap, ConstantShiftIsMaximallySignificant) {
  // b = a + 0.5 exactly: every resampled delta is 0.5, none is as far from it as 0.5 is from 0.
  const std::vector<double> a = noise(300, 2);
  std::vector<double> b = a;
  for (double& x : b) x += 0.5;
  const BootstrapOptions opt{.resamples = 999};
  const PairedBootstrapResult r = paired_bootstrap(a, b, {}, opt);
  EXPECT_NEAR(r.delta, 0.5, 1e-12);
  EXPECT_NEAR(r.ci.lo, 0.5, 1e-12);
  EXPECT_NEAR(r.ci.hi, 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(r.p_value, 1.0 / 1000.0);
}

TEST(PairedBootstrap, PairingRemovesSharedNoise) {
  // Large unit-level variation shared by a and b, a small consistent improvement: the pairing
  // keeps it significant, while an unpaired view would drown it.
  const std::vector<double> shared = noise(400, 3), small = noise(400, 4);
  std::vector<double> a(400), b(400);
  for (std::size_t i = 0; i < 400; ++i) {
    a[i] = 100.0 * shared[i];
    b[i] = a[i] + 0.05 + 0.01 * small[i];
  }
  const PairedBootstrapResult r = paired_bootstrap(a, b);
  EXPECT_NEAR(r.delta, 0.05, 0.002);
  EXPECT_LT(r.p_value, 0.01);
  EXPECT_GT(r.ci.lo, 0.0);
  // Pure noise difference: not significant.
  std::vector<double> c(400);
  for (std::size_t i = 0; i < 400; ++i) c[i] = a[i] + small[i];
  const PairedBootstrapResult n = paired_bootstrap(a, c);
  EXPECT_GT(n.p_value, 0.05);
  EXPECT_LT(n.ci.lo, 0.0);
  EXPECT_GT(n.ci.hi, 0.0);
}

TEST(PerplexityCi, ResamplesWindowsAndMatchesPointEstimate) {
  // Windows with per-token NLL 1, 2, 3 (by sums 100/100, 400/200, 300/100).
  const std::vector<double> nll{100, 400, 300};
  const std::vector<std::int64_t> tokens{100, 200, 100};
  const PerplexityCi ci = perplexity_ci(nll, tokens, {.resamples = 2000});
  EXPECT_NEAR(ci.ppl, std::exp(800.0 / 400.0), 1e-12);
  EXPECT_LE(ci.lo, ci.ppl);
  EXPECT_GE(ci.hi, ci.ppl);
  EXPECT_GE(ci.lo, std::exp(1.0) - 1e-12);  // no resample can beat the best window
  EXPECT_LE(ci.hi, std::exp(3.0) + 1e-12);
  EXPECT_GT(ci.hi - ci.lo, 0.5);  // windows differ: the interval is not degenerate
  const std::vector<std::int64_t> bad{1};
  EXPECT_THROW(perplexity_ci(nll, bad), InvalidArgument);
}

}  // namespace
}  // namespace kvq::eval
