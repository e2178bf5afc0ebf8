// Helpers for the model unit tests: the tiny random Llama checkpoints of tests/data/tiny_llama
// (written by tools/reference/make_tiny_llama.py from transformers) and their goldens.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/causal_lm.h"
#include "support/test_paths.h"
#include "support/tiny_models.h"

namespace kvq::model::test {

inline std::filesystem::path tiny_dir(const std::string& variant) {
  return kvq::test::test_data_dir() / "tiny_llama" / variant;
}

using kvq::test::tiny_variant_dir;
using kvq::test::tiny_variants;
using kvq::test::tiny_windowed_variants;

// Every tensor of a checkpoint directory, by name (zero-copy over the mmap).
inline std::map<std::string, Tensor> load_weights(const std::filesystem::path& dir) {
  const io::SafetensorsModel st = io::SafetensorsModel::open(dir);
  std::map<std::string, Tensor> w;
  for (const std::string& n : st.names()) w.emplace(n, st.tensor(n));
  return w;
}

inline std::vector<std::int32_t> ids_of(const Tensor& t) {
  std::vector<std::int32_t> out;
  for (float v : t.to_f32_vector()) out.push_back(static_cast<std::int32_t>(v));
  return out;
}

inline float max_abs_diff(const float* a, const float* b, std::int64_t n) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  const std::vector<float> x = a.to_f32_vector(), y = b.to_f32_vector();
  return max_abs_diff(x.data(), y.data(), std::min(a.numel(), b.numel()));
}
inline bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_f32_vector() == b.to_f32_vector();
}

// The cache formats a storage test (rings, paging) runs: unquantized, 8- and 4-bit dynamic, per
// tensor, K / V apart, sinks, and a group format where head_dim allows (% 32).
inline std::vector<KvCacheConfig> storage_test_formats(std::int64_t head_dim) {
  std::vector<KvCacheConfig> out = {
      KvCacheConfig::of(KvFormat::kF32),
      KvCacheConfig::of(KvFormat::kBF16),
      KvCacheConfig::dynamic(KvFormat::kINT8),
      KvCacheConfig::dynamic(KvFormat::kFP8E4M3, KvScaleGranularity::kTensor),
      KvCacheConfig::dynamic(KvFormat::kNVFP4),
      KvCacheConfig::dynamic(KvFormat::kINT4, KvScaleGranularity::kHead, false, KvFormat::kBF16),
  };
  KvCacheConfig sinks = KvCacheConfig::dynamic(KvFormat::kINT8);
  sinks.sink_tokens = 3;
  out.push_back(sinks);
  if (head_dim % 32 == 0) out.push_back(KvCacheConfig::dynamic(KvFormat::kINT4G32));
  // Per-layer formats: rows of three sizes, one layer's K wider than the rest (a paged cache
  // then fits more of the other layers' rows in a block).
  KvCacheConfig mixed = KvCacheConfig::dynamic(KvFormat::kINT4, KvScaleGranularity::kHead);
  mixed.layer_formats = {
      {.first = 0, .last = 0, .keys = true, .values = false, .format = KvFormat::kF32},
      {.first = 1, .last = 1, .keys = false, .values = true, .format = KvFormat::kINT8}};
  out.push_back(mixed);
  return out;
}

}  // namespace kvq::model::test
