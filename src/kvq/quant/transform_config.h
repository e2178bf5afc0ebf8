// compressed-tensors' transform data model (compressed_tensors/transform, 0.19.0): TransformArgs,
// TransformScheme, TransformConfig — the `transform_config` block a checkpoint's
// quantization_config carries — and llm-compressor's SpinQuantModifier turned into one.
//
// Field sets, defaults and dump order follow the pydantic models: every model is
// `extra="forbid"` (an unknown key is an error naming it), `targets` / `ignore` accept a single
// string, `precision` is a torch dtype written "torch.float32" and read with or without the
// "torch." prefix. What kvq can run of a config is the lifecycle's to say
// (lifecycle/transforms.h): it refuses, by name, any transform it cannot apply.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvq/quant/json_util.h"

namespace kvq::quant {

// Where a transform applies on its module (TransformLocation). Online locations run at
// inference: input / output of a Linear, the attention's query (q_attn) and the keys written
// to the cache (k_cache). weight_input / weight_output are fused into a Linear's weight offline.
enum class TransformLocation { kInput, kWeightInput, kWeightOutput, kOutput, kKCache, kQAttn };
std::string_view to_string(TransformLocation location);
bool is_online(TransformLocation location);

struct TransformArgs {
  std::vector<std::string> targets;
  TransformLocation location = TransformLocation::kInput;
  bool inverse = false;
  std::vector<std::string> ignore;

  static TransformArgs from_json(const Json& json, std::string_view where = "TransformArgs");
  Json to_json() const;
  bool operator==(const TransformArgs&) const = default;
};

struct TransformScheme {
  std::string type;  // "hadamard", "random-hadamard", "random-matrix"
  std::vector<TransformArgs> apply;
  bool randomize = false;
  bool requires_grad = false;
  std::optional<int> head_dim;        // block size of a block-diagonal transform
  std::string precision = "float32";  // torch dtype name without "torch."
  static TransformScheme from_json(const Json& json, std::string_view where = "TransformScheme");
  Json to_json() const;
  bool operator==(const TransformScheme&) const = default;
};

struct TransformConfig {
  // Insertion-ordered like the Python dict ("R2", "R3", ...).
  std::vector<std::pair<std::string, TransformScheme>> config_groups;

  bool empty() const { return config_groups.empty(); }
  // `{}` (what compressed-tensors writes for no transforms) parses as an empty config.
  static TransformConfig from_json(const Json& json, std::string_view where = "TransformConfig");
  // model_dump() order.
  Json to_json() const;
  bool operator==(const TransformConfig&) const = default;
};

// llm-compressor's SpinQuantModifier (modifiers/transform/spinquant/base.py) → the
// TransformConfig its on_initialize builds for a Llama-style model: rotations R1–R4 (case
// insensitive), transform_type, randomize, learnable, precision (default float64),
// transform_block_size. `head_dim` is the model's (R2 and R3 use it; R1 and R4 use
// transform_block_size). randomize / learnable true are refused as the reference refuses them.
// kvq does not run the on_start side effects a rotation set with R1 needs (untied and centred
// embeddings, norms fused into the next Linear), so R1 and R4 are parsed but refused later by
// the lifecycle.
TransformConfig spinquant_transform_config(const Json& modifier_args, int head_dim,
                                           std::string_view where = "SpinQuantModifier");

}  // namespace kvq::quant
