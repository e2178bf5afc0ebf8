#include "kvq/eval/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvq/core/error.h"

namespace kvq::eval {
namespace {

void check_options(const BootstrapOptions& options) {
  if (options.resamples < 1) {
    fail<InvalidArgument>("bootstrap: resamples must be >= 1, got {}", options.resamples);
  }
  if (!(options.confidence > 0.0 && options.confidence < 1.0)) {
    fail<InvalidArgument>("bootstrap: confidence must be in (0, 1), got {}", options.confidence);
  }
}

// Sorted-copy quantile, p in [0, 1], numpy "linear": position p * (n - 1).
double quantile_sorted(const std::vector<double>& sorted, double p) {
  const double pos = p * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

void check_units(std::span<const double> values, std::span<const double> weights,
                 const char* what) {
  if (values.empty()) fail<InvalidArgument>("{}: no units to resample", what);
  if (!weights.empty() && weights.size() != values.size()) {
    fail<InvalidArgument>("{}: {} weights for {} units", what, weights.size(), values.size());
  }
}

double weight_of(std::span<const double> weights, std::size_t i) {
  return weights.empty() ? 1.0 : weights[i];
}

double ratio(std::span<const double> values, std::span<const double> weights, const char* what) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    num += values[i];
    den += weight_of(weights, i);
  }
  if (!(den > 0.0)) fail<InvalidArgument>("{}: weights sum to {}, need > 0", what, den);
  return num / den;
}

// log P(X = i) for X ~ Bin(n, 1/2).
double log_binom_half(std::int64_t n, std::int64_t i) {
  return std::lgamma(static_cast<double>(n) + 1.0) - std::lgamma(static_cast<double>(i) + 1.0) -
         std::lgamma(static_cast<double>(n - i) + 1.0) - static_cast<double>(n) * std::log(2.0);
}

}  // namespace

MeanSe mean_se(std::span<const double> values) {
  if (values.empty()) fail<InvalidArgument>("mean_se: no values");
  MeanSe r;
  r.n = static_cast<std::int64_t>(values.size());
  double sum = 0.0;
  for (double v : values) sum += v;
  r.mean = sum / static_cast<double>(r.n);
  if (r.n < 2) {
    r.se = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  double ss = 0.0;
  for (double v : values) ss += (v - r.mean) * (v - r.mean);
  r.se = std::sqrt(ss / static_cast<double>(r.n - 1)) / std::sqrt(static_cast<double>(r.n));
  return r;
}

MeanSe mean_se(std::span<const std::uint8_t> flags) {
  std::vector<double> values(flags.begin(), flags.end());
  for (double& v : values) v = v != 0.0 ? 1.0 : 0.0;
  return mean_se(values);
}

double percentile(std::span<const double> values, double q) {
  if (values.empty()) fail<InvalidArgument>("percentile: no values");
  if (!(q >= 0.0 && q <= 100.0)) fail<InvalidArgument>("percentile: q must be in [0, 100]");
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  return quantile_sorted(sorted, q / 100.0);
}

std::int64_t BootstrapIndexSampler::below(std::int64_t n) {
  KVQ_CHECK(n > 0, "below({})", n);
  const auto range = static_cast<std::uint64_t>(n);
  // Largest multiple of range that fits: draws at or above it would bias low indices.
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % range;
  std::uint64_t x;
  do {
    x = rng_();
  } while (x >= limit);
  return static_cast<std::int64_t>(x % range);
}

ConfidenceInterval bootstrap_ci(std::span<const double> values, std::span<const double> weights,
                                const BootstrapOptions& options) {
  check_options(options);
  check_units(values, weights, "bootstrap_ci");
  ConfidenceInterval ci;
  ci.estimate = ratio(values, weights, "bootstrap_ci");
  const auto n = static_cast<std::int64_t>(values.size());
  BootstrapIndexSampler sampler(options.seed);
  std::vector<double> stats(static_cast<std::size_t>(options.resamples));
  for (double& s : stats) {
    double num = 0.0, den = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto j = static_cast<std::size_t>(sampler.below(n));
      num += values[j];
      den += weight_of(weights, j);
    }
    // A resample of only zero-weight units has no defined ratio; count it as the estimate.
    s = den > 0.0 ? num / den : ci.estimate;
  }
  std::sort(stats.begin(), stats.end());
  const double alpha = 1.0 - options.confidence;
  ci.lo = quantile_sorted(stats, alpha / 2.0);
  ci.hi = quantile_sorted(stats, 1.0 - alpha / 2.0);
  return ci;
}

PairedBootstrapResult paired_bootstrap(std::span<const double> a, std::span<const double> b,
                                       std::span<const double> weights,
                                       const BootstrapOptions& options) {
  check_options(options);
  check_units(a, weights, "paired_bootstrap");
  if (a.size() != b.size()) {
    fail<InvalidArgument>("paired_bootstrap: {} units in a but {} in b", a.size(), b.size());
  }
  std::vector<double> diff(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) diff[i] = b[i] - a[i];

  PairedBootstrapResult r;
  r.units = static_cast<std::int64_t>(a.size());
  r.delta = ratio(diff, weights, "paired_bootstrap");
  r.ci.estimate = r.delta;

  BootstrapIndexSampler sampler(options.seed);
  std::vector<double> stats(static_cast<std::size_t>(options.resamples));
  for (double& s : stats) {
    double num = 0.0, den = 0.0;
    for (std::int64_t i = 0; i < r.units; ++i) {
      const auto j = static_cast<std::size_t>(sampler.below(r.units));
      num += diff[j];
      den += weight_of(weights, j);
    }
    s = den > 0.0 ? num / den : r.delta;
  }
  std::int64_t extreme = 0;
  for (double s : stats) {
    if (std::abs(s - r.delta) >= std::abs(r.delta)) ++extreme;
  }
  r.p_value = r.delta == 0.0
                  ? 1.0
                  : static_cast<double>(1 + extreme) / static_cast<double>(1 + options.resamples);
  std::sort(stats.begin(), stats.end());
  const double alpha = 1.0 - options.confidence;
  r.ci.lo = quantile_sorted(stats, alpha / 2.0);
  r.ci.hi = quantile_sorted(stats, 1.0 - alpha / 2.0);
  return r;
}

double chi2_1_sf(double x) {
  if (!(x > 0.0)) return 1.0;
  return std::erfc(std::sqrt(x / 2.0));
}

McNemarResult mcnemar(std::int64_t n01, std::int64_t n10) {
  if (n01 < 0 || n10 < 0) fail<InvalidArgument>("mcnemar: negative counts {} {}", n01, n10);
  McNemarResult r;
  r.n01 = n01;
  r.n10 = n10;
  const std::int64_t n = n01 + n10;
  if (n == 0) return r;  // no discordant pairs: no evidence of a difference
  const std::int64_t k = std::min(n01, n10);
  double lower_tail = 0.0;  // P(X <= k)
  for (std::int64_t i = 0; i <= k; ++i) lower_tail += std::exp(log_binom_half(n, i));
  const double point = std::exp(log_binom_half(n, k));
  r.p_exact = std::min(1.0, 2.0 * lower_tail);
  r.p_mid = std::min(1.0, 2.0 * lower_tail - point);
  const double d = static_cast<double>(n01 - n10);
  r.chi2 = d * d / static_cast<double>(n);
  r.p_chi2 = chi2_1_sf(r.chi2);
  const double dcc = std::max(0.0, std::abs(d) - 1.0);
  r.chi2_cc = dcc * dcc / static_cast<double>(n);
  r.p_chi2_cc = chi2_1_sf(r.chi2_cc);
  return r;
}

McNemarResult mcnemar(std::span<const std::uint8_t> a_correct,
                      std::span<const std::uint8_t> b_correct) {
  if (a_correct.size() != b_correct.size()) {
    fail<InvalidArgument>("mcnemar: {} outcomes for a but {} for b", a_correct.size(),
                          b_correct.size());
  }
  std::int64_t n01 = 0, n10 = 0;
  for (std::size_t i = 0; i < a_correct.size(); ++i) {
    const bool a = a_correct[i] != 0, b = b_correct[i] != 0;
    n01 += !a && b;
    n10 += a && !b;
  }
  return mcnemar(n01, n10);
}

PerplexityCi perplexity_ci(std::span<const double> window_nll_sum,
                           std::span<const std::int64_t> window_tokens,
                           const BootstrapOptions& options) {
  if (window_nll_sum.size() != window_tokens.size()) {
    fail<InvalidArgument>("perplexity_ci: {} NLL sums but {} token counts", window_nll_sum.size(),
                          window_tokens.size());
  }
  std::vector<double> weights(window_tokens.begin(), window_tokens.end());
  const ConfidenceInterval ci = bootstrap_ci(window_nll_sum, weights, options);
  // exp is monotone, so the percentile interval of the PPL is exp of that of the mean NLL.
  return {std::exp(ci.estimate), std::exp(ci.lo), std::exp(ci.hi)};
}

}  // namespace kvq::eval
