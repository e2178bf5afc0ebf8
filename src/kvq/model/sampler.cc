#include "kvq/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvq/core/error.h"
#include "kvq/model/causal_lm.h"

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

std::vector<std::int32_t> generate(CausalLM& model, std::span<const std::int32_t> prompt,
                                   std::int64_t max_new_tokens,
                                   std::span<const std::int64_t> eos_ids, Sampler& sampler,
                                   const TokenCallback& on_token) {
  if (prompt.empty()) fail<InvalidArgument>("generate: empty prompt");
  if (max_new_tokens < 0) fail<InvalidArgument>("generate: max_new_tokens must be >= 0");
  std::vector<std::int32_t> out;
  if (max_new_tokens == 0) return out;
  KvCache cache = model.make_cache(1, static_cast<std::int64_t>(prompt.size()) + max_new_tokens);
  Tensor logits = model.forward(prompt, cache, LogitsMode::kLast);
  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  for (std::int64_t step = 0; step < max_new_tokens; ++step) {
    const std::int32_t tok = sampler.sample(std::span<const float>(logits.f32(), vocab));
    out.push_back(tok);
    const bool is_eos = std::find(eos_ids.begin(), eos_ids.end(), tok) != eos_ids.end();
    if (on_token && !on_token(tok)) break;
    if (is_eos || step + 1 == max_new_tokens) break;
    const std::int32_t next[1] = {tok};
    logits = model.forward(next, cache, LogitsMode::kLast);
  }
  return out;
}

}  // namespace kvq::model
