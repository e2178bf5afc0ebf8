#include "kvq/runtime/model_source.h"

#include <algorithm>

#include "kvq/core/error.h"
#include "kvq/lifecycle/checkpoint.h"

namespace kvq::runtime {

std::vector<std::int64_t> ModelSource::eos_ids() const {
  std::vector<std::int64_t> ids = model->config().eos_token_ids;
  if (generation) {
    ids.insert(ids.end(), generation->eos_token_ids.begin(), generation->eos_token_ids.end());
  }
  if (tokenizer && tokenizer->eos_id()) ids.push_back(*tokenizer->eos_id());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<std::int64_t> ModelSource::chat_stop_ids() const {
  std::vector<std::int64_t> ids = eos_ids();
  if (tokenizer) {
    if (auto im_end = tokenizer->token_id("<|im_end|>")) ids.push_back(*im_end);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

ModelSource open_model_source(const std::filesystem::path& model_dir, bool with_quantization,
                              const model::LoadOptions& options, bool require_tokenizer) {
  if (!std::filesystem::is_directory(model_dir)) {
    fail<IoError>(
        "{}: not a model directory (expected config.json, *.safetensors, "
        "tokenizer.json; convert a GGUF with `kvq convert`)",
        model_dir.string());
  }
  ModelSource src;
  src.dir = model_dir;
  if (with_quantization) {
    lifecycle::QuantizedModel q = lifecycle::QuantizedModel::load(model_dir, options);
    src.model = std::move(q.model);
    src.lifecycle = std::move(q.lifecycle);
  } else {
    src.model = model::CausalLM::load(model_dir, options);
  }
  if (require_tokenizer || std::filesystem::exists(model_dir / "tokenizer.json")) {
    src.tokenizer.emplace(tok::Tokenizer::from_dir(model_dir));
  }
  src.generation = model::load_generation_config(model_dir);
  return src;
}

}  // namespace kvq::runtime
