#include "kvq/model/rope.h"

#include <cmath>
#include <numbers>

#include "kvq/core/error.h"

namespace kvq::model {

namespace {

// base ** (arange(0, dim, 2).float() / dim): fp32 exponent, fp32 pow with the scalar base.
std::vector<float> rope_powers(std::int64_t dim, double theta) {
  if (dim <= 0 || dim % 2 != 0) fail<ConfigError>("head_dim {} must be even and > 0", dim);
  const float base = static_cast<float>(theta);
  std::vector<float> p(static_cast<std::size_t>(dim / 2));
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    p[static_cast<std::size_t>(i)] =
        static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  return p;
}

// transformers _compute_longrope_parameters: 1.0 / (ext_factors * base ** ...), all fp32.
std::vector<float> longrope_inv_freq(const model::ModelConfig& config, double theta,
                                     const std::vector<double>& ext_factors) {
  std::vector<float> inv = rope_powers(config.head_dim, theta);
  KVQ_CHECK(ext_factors.size() == inv.size(), "longrope factors checked by the config parser");
  for (std::size_t i = 0; i < inv.size(); ++i)
    inv[i] = 1.0f / (static_cast<float>(ext_factors[i]) * inv[i]);
  return inv;
}

}  // namespace

std::vector<float> rope_inv_freq(const model::ModelConfig& config) {
  return rope_inv_freq(config, config.rope_theta, config.rope_scaling);
}

std::vector<float> rope_inv_freq_long(const model::ModelConfig& config) {
  if (config.rope_scaling.rope_type != "longrope") return {};
  return longrope_inv_freq(config, config.rope_theta, config.rope_scaling.long_factor);
}

float rope_attention_scaling(const model::ModelConfig& config) {
  const model::RopeScaling& rs = config.rope_scaling;
  if (rs.rope_type != "longrope") return 1.0f;
  if (rs.attention_factor) return static_cast<float>(*rs.attention_factor);
  if (rs.factor <= 1.0) return 1.0f;
  return static_cast<float>(
      std::sqrt(1.0 + std::log(rs.factor) /
                          std::log(static_cast<double>(rs.original_max_position_embeddings))));
}

std::vector<float> rope_inv_freq(const model::ModelConfig& config, double theta,
                                 const model::RopeScaling& rs) {
  if (rs.rope_type == "longrope") return longrope_inv_freq(config, theta, rs.short_factor);
  // inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), the reciprocal in fp32.
  std::vector<float> inv = rope_powers(config.head_dim, theta);
  for (float& f : inv) f = 1.0f / f;
  if (rs.rope_type == "default" || rs.rope_type.empty()) return inv;
  const float factor = static_cast<float>(rs.factor);
  if (rs.rope_type == "linear") {
    for (float& f : inv) f /= factor;
    return inv;
  }
  if (rs.rope_type == "llama3") {
    // transformers _compute_llama3_parameters, elementwise in fp32.
    const double old_context = static_cast<double>(rs.original_max_position_embeddings > 0
                                                       ? rs.original_max_position_embeddings
                                                       : config.max_position_embeddings);
    const float low = static_cast<float>(rs.low_freq_factor);
    const float high = static_cast<float>(rs.high_freq_factor);
    const float low_freq_wavelen = static_cast<float>(old_context / rs.low_freq_factor);
    const float high_freq_wavelen = static_cast<float>(old_context / rs.high_freq_factor);
    const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
    const float old_ctx = static_cast<float>(old_context);
    for (float& f : inv) {
      const float wavelen = (1.0f / f) * two_pi;  // torch: reciprocal(inv_freq) * (2π)
      float llama = wavelen > low_freq_wavelen ? f / factor : f;
      const float smooth = (old_ctx * (1.0f / wavelen) - low) / (high - low);
      const float smoothed = (1.0f - smooth) * llama / factor + smooth * llama;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) llama = smoothed;
      f = llama;
    }
    return inv;
  }
  fail<NotSupported>(
      "rope_scaling type '{}' is not supported (default, linear, llama3, longrope are)",
      rs.rope_type);
}

RopeTable rope_table(const std::vector<float>& inv_freq, std::int64_t start, std::int64_t n,
                     float scaling) {
  RopeTable t;
  t.half = static_cast<std::int64_t>(inv_freq.size());
  t.cos.resize(static_cast<std::size_t>(n * t.half));
  t.sin.resize(static_cast<std::size_t>(n * t.half));
  for (std::int64_t i = 0; i < n; ++i) {
    const float pos = static_cast<float>(start + i);
    for (std::int64_t j = 0; j < t.half; ++j) {
      const float angle = inv_freq[static_cast<std::size_t>(j)] * pos;
      t.cos[static_cast<std::size_t>(i * t.half + j)] =
          static_cast<float>(std::cos(static_cast<double>(angle))) * scaling;
      t.sin[static_cast<std::size_t>(i * t.half + j)] =
          static_cast<float>(std::sin(static_cast<double>(angle))) * scaling;
    }
  }
  return t;
}

}  // namespace kvq::model
