// The tiny random model of every architecture row, written by transformers
// (tools/reference/make_tiny_llama.py: tests/data/tiny_llama/<variant>;
// tools/reference/make_tiny_archs.py: tests/data/tiny_arch/<variant>), for the tests that run
// over every architecture (parameterised, not copied).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "support/test_paths.h"

namespace kvq::test {

// Llama "gqa" first (the cheapest): gqa (default RoPE), llama3_tied (llama3 rope scaling, tied),
// llama_linear (linear rope scaling), qwen2 (q/k/v biases, window 5 on layers 1-2), qwen3 (q/k
// RMSNorm, head_dim 32), mistral (window 24 on every layer), gemma3 (Gemma 3 text: (1 + w)
// sandwich norms, q/k norms, scaled embeddings, MQA, GeGLU, window 6 on layers 0-1 with their own
// RoPE, softcapped logits), phi3 (fused qkv_proj / gate_up_proj split at load, window 12 on every
// layer), phi3_longrope (LongRoPE: short / long factors switched per forward at 16 positions,
// an attention factor on cos / sin).
inline const std::vector<std::string>& tiny_variants() {
  static const std::vector<std::string> v = {"gqa",    "llama3_tied", "llama_linear",
                                             "qwen2",  "qwen3",       "mistral",
                                             "gemma3", "phi3",        "phi3_longrope"};
  return v;
}

// The rows above with sliding-window layers (the ring-buffer tests run on these;
// SlidingWindowRing.ListNamesEveryWindowedRow keeps the list complete).
inline const std::vector<std::string>& tiny_windowed_variants() {
  static const std::vector<std::string> v = {"qwen2", "mistral", "gemma3", "phi3"};
  return v;
}

inline std::filesystem::path tiny_variant_dir(const std::string& variant) {
  const std::filesystem::path llama = test_data_dir() / "tiny_llama" / variant;
  return std::filesystem::exists(llama) ? llama : test_data_dir() / "tiny_arch" / variant;
}

}  // namespace kvq::test
