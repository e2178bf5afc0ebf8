// Next-token sampling (greedy, temperature, top-k, top-p; seeded std::mt19937_64) and a
// generation loop over token ids (no tokenizer here).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

namespace kvq::model {

class CausalLM;

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

// Called with each generated token; return false to stop early.
using TokenCallback = std::function<bool(std::int32_t token)>;

// Prefills `prompt`, then samples up to max_new_tokens tokens, stopping after an EOS id (which
// is included in the result). Returns the generated ids. Uses a fresh fp32 KV cache.
std::vector<std::int32_t> generate(CausalLM& model, std::span<const std::int32_t> prompt,
                                   std::int64_t max_new_tokens,
                                   std::span<const std::int64_t> eos_ids, Sampler& sampler,
                                   const TokenCallback& on_token = {});

}  // namespace kvq::model
