// Opening a Hugging Face model directory for evaluation and generation: the Llama model (and a
// quantized checkpoint's quantization), its tokenizer, generation_config.json and the set of
// token ids that end a generation. The `--kv-cache` flag is in kv_cache_choice.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/lifecycle/apply.h"
#include "kvq/model/causal_lm.h"
#include "kvq/model/model_config.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::runtime {

struct ModelSource {
  std::filesystem::path dir;
  std::unique_ptr<model::CausalLM> model;
  // The checkpoint's quantization (hooks on `model`) when opened with_quantization and the
  // directory is a quantized checkpoint; null otherwise. Declared after `model`: destroyed first.
  std::unique_ptr<lifecycle::QuantizationLifecycle> lifecycle;
  // Set by open_model_source(), unless the directory has no tokenizer.json and the caller said
  // it may do without (require_tokenizer = false: the Python module's tiny test models).
  std::optional<tok::Tokenizer> tokenizer;
  std::optional<model::GenerationConfig> generation;

  // Union of config.json eos_token_id, generation_config.json eos_token_id and the tokenizer's
  // eos token (what transformers' generate() stops on), sorted, without duplicates.
  std::vector<std::int64_t> eos_ids() const;
  // eos_ids() plus "<|im_end|>" when the vocabulary has it (a chat turn ends there even when
  // the model's eos is <|endoftext|>).
  std::vector<std::int64_t> chat_stop_ids() const;
};

// Loads model_dir (config.json, safetensors, tokenizer.json, optional generation_config.json).
// with_quantization: also restores a quantized checkpoint's quantization_config and scales
// (lifecycle::QuantizedModel::load). Errors name the directory (see CausalLM::load,
// lifecycle::load_quantized and Tokenizer::from_dir). `options`: the weight dtype
// (model::LoadOptions). require_tokenizer = false: a directory without tokenizer.json opens with
// no tokenizer (forward passes on token ids only).
ModelSource open_model_source(const std::filesystem::path& model_dir,
                              bool with_quantization = false,
                              const model::LoadOptions& options = {},
                              bool require_tokenizer = true);

}  // namespace kvq::runtime
