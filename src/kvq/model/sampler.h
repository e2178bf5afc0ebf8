// Next-token sampling (greedy, temperature, top-k, top-p; seeded std::mt19937_64). The generation
// loop is runtime/generator.h.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvq::model {

struct SamplerConfig {
  double temperature = 0.0;  // 0: greedy (argmax, lowest id on ties); else > 0
  std::int64_t top_k = 0;    // 0: off; else keep the k most likely tokens
  double top_p = 1.0;        // (0, 1]: keep the smallest most-likely set with mass >= top_p
  std::uint64_t seed = 0;
};

class Sampler {
 public:
  // InvalidArgument on a negative / non-finite temperature, negative top_k, top_p outside (0, 1].
  explicit Sampler(SamplerConfig config = {});
  // Filters in transformers' order: temperature, then top-k, then top-p. logits [vocab].
  std::int32_t sample(std::span<const float> logits);
  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
};

}  // namespace kvq::model
