// Opening a Hugging Face model directory for evaluation and generation: the Llama model, its
// tokenizer, generation_config.json and the set of token ids that end a generation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/io/model_config.h"
#include "kvq/model/kv_cache.h"
#include "kvq/model/llama_model.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::eval {

struct ModelSource {
  std::filesystem::path dir;
  std::unique_ptr<model::LlamaModel> model;
  std::optional<tok::Tokenizer> tokenizer;  // always set by open_model_source()
  std::optional<io::GenerationConfig> generation;

  // Union of config.json eos_token_id, generation_config.json eos_token_id and the tokenizer's
  // eos token (what transformers' generate() stops on), sorted, without duplicates.
  std::vector<std::int64_t> eos_ids() const;
  // eos_ids() plus "<|im_end|>" when the vocabulary has it (a chat turn ends there even when
  // the model's eos is <|endoftext|>).
  std::vector<std::int64_t> chat_stop_ids() const;
};

// Loads model_dir (config.json, safetensors, tokenizer.json, optional generation_config.json).
// Errors name the directory (see LlamaModel::load and Tokenizer::from_dir).
ModelSource open_model_source(const std::filesystem::path& model_dir);

// The KV cache format flag `FORMAT[:tensor|head]` shared by generate / bench / perplexity.
// Today's formats (kernels::KvStorage) are unscaled: f32, bf16, f16. The `:tensor` / `:head`
// scale granularity is parsed here for the packed formats that come later and is rejected
// (NotSupported) for the unscaled ones.
struct KvCacheSpec {
  model::KvStorage storage = model::KvStorage::kF32;
  std::string granularity;  // "", "tensor" or "head"
  std::string name() const;
};
// InvalidArgument naming the flag value and the supported formats.
KvCacheSpec parse_kv_cache_spec(std::string_view text);

// The whole file as bytes (no newline conversion). IoError naming the path.
std::string read_file_bytes(const std::filesystem::path& path);

}  // namespace kvq::eval
