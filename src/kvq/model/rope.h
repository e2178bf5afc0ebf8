// Rotary position embedding parameters, computed exactly as transformers 5 does (fp32 tensors,
// Python-float scalars): default, linear and llama3 rope_scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "kvq/model/model_config.h"

namespace kvq::model {

// inv_freq [head_dim / 2] of config.rope_theta and config.rope_scaling. ConfigError for an odd
// head_dim; NotSupported for other rope types.
std::vector<float> rope_inv_freq(const model::ModelConfig& config);
// The same with another base and scaling (Gemma 3's sliding layers: rope_local_theta and
// rope_local_scaling); head_dim and max_position_embeddings from `config`.
std::vector<float> rope_inv_freq(const model::ModelConfig& config, double theta,
                                 const model::RopeScaling& scaling);

// cos, sin tables for positions [start, start + n): each [n, head_dim / 2] (the second half of
// HF's cat(freqs, freqs) repeats the first, so half is enough). angle = fp32(inv_freq × pos).
struct RopeTable {
  std::vector<float> cos, sin;
  std::int64_t half = 0;
  const float* cos_at(std::int64_t i) const { return cos.data() + i * half; }
  const float* sin_at(std::int64_t i) const { return sin.data() + i * half; }
};
RopeTable rope_table(const std::vector<float>& inv_freq, std::int64_t start, std::int64_t n);

}  // namespace kvq::model
