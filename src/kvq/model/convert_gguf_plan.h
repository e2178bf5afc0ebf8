// Internal to `kvq convert` (convert_gguf*.cc): the tensors a GGUF becomes, per architecture.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/io/gguf.h"
#include "kvq/model/model_config.h"

namespace kvq::model::detail {

struct PlannedTensor {
  const io::GgufTensorInfo* info;
  std::string hf_name;
  Shape hf_shape;
  std::int64_t rope_heads = 0;  // > 0: undo the rotary row permutation with this many heads
  bool minus_one = false;       // llama.cpp stores Gemma's (1 + w) norm weights; HF keeps w
};

// config.json of a gemma3 GGUF: the fields transformers 5.17's GGUF loader sets
// (GGUF_CONFIG_MAPPING["gemma3"] plus Gemma3TextConfig's defaults for what the GGUF lacks:
// sliding_window_pattern 6, rope_local_base_freq 10000, query_pre_attn_scalar 256).
nlohmann::json gemma3_config_json(const io::GgufFile& g, DType dtype);

// Every tensor of a gemma3 GGUF in HF names; FormatError naming the file and tensor for a
// missing or mis-shaped one, NotSupported for one the model has no place for.
std::vector<PlannedTensor> plan_gemma3_tensors(const io::GgufFile& g, const ModelConfig& c);

// HF name of a gemma3 GGUF tensor, or nullopt.
std::optional<std::string> gemma3_hf_tensor_name(std::string_view gguf_name);

// Shared: fails naming every GGUF tensor that `plan` does not use ("no place in a Hugging Face
// <family> model").
void refuse_unplanned(const io::GgufFile& g, const std::vector<PlannedTensor>& plan,
                      std::string_view family);

// Splits "blk.<layer>.<part>.<kind>" (kind weight or bias); false for any other name.
bool split_block_name(std::string_view name, std::string_view& layer, std::string& part,
                      std::string_view& kind);

}  // namespace kvq::model::detail
