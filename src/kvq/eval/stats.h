// Statistics for comparing evaluation runs: standard errors, bootstrap confidence intervals,
// paired bootstrap tests of a difference, McNemar's test for paired correct/incorrect outcomes,
// and a perplexity CI that resamples windows.
//
// Conventions:
//   - Standard error of a mean uses the sample standard deviation (n - 1), as lm-eval's
//     `mean_stderr` does: se = sqrt(sum (x - mean)^2 / (n - 1)) / sqrt(n). For a Bernoulli mean
//     p this is sqrt(p (1 - p) / (n - 1)). NaN for n < 2.
//   - Bootstrap resampling draws unit indices uniformly with replacement from a std::mt19937_64
//     seeded with `seed` (rejection sampling, no std::uniform_int_distribution, whose output is
//     implementation-defined): the same seed gives the same interval on every platform.
//   - Percentile intervals take the (1 - confidence)/2 and (1 + confidence)/2 quantiles of the
//     bootstrap statistics with linear interpolation (numpy's default "linear" method).
//   - "Units" are what is resampled: windows for perplexity (tokens within a window share context
//     and are correlated), questions for accuracy, tokens or windows for KLD. A ratio statistic
//     sum(x) / sum(w) over units covers both a plain mean (w = 1) and per-token means over
//     windows (x = a window's NLL sum, w = its scored token count).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvq::eval {

struct MeanSe {
  double mean = 0.0;
  double se = 0.0;  // NaN when n < 2
  std::int64_t n = 0;
};

// InvalidArgument when `values` is empty.
MeanSe mean_se(std::span<const double> values);
// The same for 0/1 outcomes (correct flags).
MeanSe mean_se(std::span<const std::uint8_t> flags);

// q in [0, 100]; linear interpolation between order statistics (numpy.percentile default).
// InvalidArgument when `values` is empty or q is out of range.
double percentile(std::span<const double> values, double q);

struct BootstrapOptions {
  std::int64_t resamples = 1000;
  double confidence = 0.95;  // in (0, 1)
  std::uint64_t seed = 1234;
};

struct ConfidenceInterval {
  double estimate = 0.0;  // the statistic on the original sample
  double lo = 0.0, hi = 0.0;
};

// Percentile bootstrap CI of sum(values) / sum(weights) over units (weights empty: all 1, i.e.
// the mean). InvalidArgument when empty, sizes differ, options are out of range, or the
// weights do not sum to a positive number.
ConfidenceInterval bootstrap_ci(std::span<const double> values,
                                std::span<const double> weights = {},
                                const BootstrapOptions& options = {});

struct PairedBootstrapResult {
  double delta = 0.0;     // statistic(b) - statistic(a) on the original sample
  ConfidenceInterval ci;  // of the delta (ci.estimate == delta)
  // Two-sided: the bootstrap distribution of the delta is shifted to mean zero under H0
  // (Efron & Tibshirani §16.4; Koehn 2004), p = (1 + #{|d* - delta| >= |delta|}) / (1 + B).
  // 1 when delta == 0.
  double p_value = 1.0;
  std::int64_t units = 0;
};

// Paired bootstrap of the difference of ratio statistics sum(b)/sum(w) - sum(a)/sum(w): each
// resample draws the same unit indices for a and b (units resampled jointly, so the pairing and
// any per-unit correlation are kept). a, b, weights: [units] (weights empty: all 1).
PairedBootstrapResult paired_bootstrap(std::span<const double> a, std::span<const double> b,
                                       std::span<const double> weights = {},
                                       const BootstrapOptions& options = {});

struct McNemarResult {
  std::int64_t n01 = 0;  // a wrong, b right
  std::int64_t n10 = 0;  // a right, b wrong
  double p_exact = 1.0;  // two-sided exact binomial test on the discordant pairs, Bin(n, 1/2)
  double p_mid = 1.0;    // mid-p: p_exact - P(X = min(n01, n10)) (Fagerland et al. 2013)
  double chi2 = 0.0;     // (n01 - n10)^2 / (n01 + n10), 0 when no discordant pairs
  double p_chi2 = 1.0;   // its chi-square(1) upper tail
  double chi2_cc = 0.0;  // with Edwards' continuity correction: (|n01 - n10| - 1)^2 / (n01 + n10)
  double p_chi2_cc = 1.0;
};

// From discordant counts, or from paired 0/1 outcome vectors of the same questions
// (InvalidArgument when their sizes differ).
McNemarResult mcnemar(std::int64_t n01, std::int64_t n10);
McNemarResult mcnemar(std::span<const std::uint8_t> a_correct,
                      std::span<const std::uint8_t> b_correct);

// Upper tail of the chi-square distribution with 1 degree of freedom: erfc(sqrt(x / 2)).
double chi2_1_sf(double x);

struct PerplexityCi {
  double ppl = 0.0;
  double lo = 0.0, hi = 0.0;
};

// exp(sum NLL / sum tokens) with a percentile bootstrap CI that resamples whole windows.
// window_nll_sum, window_tokens: [windows].
PerplexityCi perplexity_ci(std::span<const double> window_nll_sum,
                           std::span<const std::int64_t> window_tokens,
                           const BootstrapOptions& options = {});

// The resampling core, exposed for tests: uniform indices from std::mt19937_64 (whose output
// sequence the standard fixes) by rejection, so results do not depend on the standard library.
class BootstrapIndexSampler {
 public:
  explicit BootstrapIndexSampler(std::uint64_t seed) : rng_(seed) {}
  // Uniform in [0, n); n > 0.
  std::int64_t below(std::int64_t n);

 private:
  std::mt19937_64 rng_;
};

}  // namespace kvq::eval
