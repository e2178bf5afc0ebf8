#include "kvq/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvq/core/error.h"

namespace kvq::model {

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) {
  if (!std::isfinite(config.temperature) || config.temperature < 0.0) {
    fail<InvalidArgument>("temperature must be >= 0, got {}", config.temperature);
  }
  if (config.top_k < 0) fail<InvalidArgument>("top_k must be >= 0, got {}", config.top_k);
  if (!(config.top_p > 0.0 && config.top_p <= 1.0)) {
    fail<InvalidArgument>("top_p must be in (0, 1], got {}", config.top_p);
  }
}

std::int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) fail<InvalidArgument>("sample: empty logits");
  const auto n = static_cast<std::int64_t>(logits.size());
  if (config_.temperature == 0.0) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                     logits.begin());
  }
  // Candidates sorted by logit, descending (stable: lower id first on ties).
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  std::int64_t keep = n;
  if (config_.top_k > 0) keep = std::min(keep, config_.top_k);
  const double inv_t = 1.0 / config_.temperature;
  const double mx = static_cast<double>(logits[ids[0]]) * inv_t;
  std::vector<double> p(static_cast<std::size_t>(keep));
  double sum = 0.0;
  for (std::int64_t i = 0; i < keep; ++i) {
    p[static_cast<std::size_t>(i)] = std::exp(static_cast<double>(logits[ids[i]]) * inv_t - mx);
    sum += p[static_cast<std::size_t>(i)];
  }
  if (config_.top_p < 1.0) {
    double cum = 0.0;
    std::int64_t k = 0;
    while (k < keep && cum < config_.top_p * sum) cum += p[static_cast<std::size_t>(k++)];
    keep = std::max<std::int64_t>(1, k);
    sum = cum;
  }
  std::uniform_real_distribution<double> uniform(0.0, sum);
  const double u = uniform(rng_);
  double acc = 0.0;
  for (std::int64_t i = 0; i < keep; ++i) {
    acc += p[static_cast<std::size_t>(i)];
    if (u < acc) return ids[static_cast<std::size_t>(i)];
  }
  return ids[static_cast<std::size_t>(keep - 1)];
}

}  // namespace kvq::model
