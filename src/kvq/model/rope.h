// Rotary position embedding parameters, computed exactly as transformers 5 does (fp32 tensors,
// Python-float scalars): default, linear, llama3 and longrope rope_scaling.
#pragma once

#include <cstdint>
#include <vector>

#include "kvq/model/model_config.h"

namespace kvq::model {

// inv_freq [head_dim / 2] of config.rope_theta and config.rope_scaling (longrope: its short
// factors). ConfigError for an odd head_dim; NotSupported for other rope types.
std::vector<float> rope_inv_freq(const model::ModelConfig& config);
// longrope's inv_freq for forwards that reach beyond original_max_position_embeddings (its long
// factors); empty for every other rope type.
std::vector<float> rope_inv_freq_long(const model::ModelConfig& config);
// What cos and sin are multiplied by (transformers' attention_scaling): longrope's
// attention_factor (given, or sqrt(1 + ln(factor) / ln(original)) when factor > 1), else 1.
float rope_attention_scaling(const model::ModelConfig& config);
// The same with another base and scaling (Gemma 3's sliding layers: rope_local_theta and
// rope_local_scaling); head_dim and max_position_embeddings from `config`.
std::vector<float> rope_inv_freq(const model::ModelConfig& config, double theta,
                                 const model::RopeScaling& scaling);

// cos, sin tables for positions [start, start + n): each [n, head_dim / 2] (the second half of
// HF's cat(freqs, freqs) repeats the first, so half is enough). angle = fp32(inv_freq × pos);
// cos and sin are then multiplied by `scaling` in fp32 (rope_attention_scaling).
struct RopeTable {
  std::vector<float> cos, sin;
  std::int64_t half = 0;
  const float* cos_at(std::int64_t i) const { return cos.data() + i * half; }
  const float* sin_at(std::int64_t i) const { return sin.data() + i * half; }
};
RopeTable rope_table(const std::vector<float>& inv_freq, std::int64_t start, std::int64_t n,
                     float scaling = 1.0f);

}  // namespace kvq::model
