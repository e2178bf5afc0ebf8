// QuantizationConfig (the `quantization_config` block of config.json), compressed-tensors 0.19.0.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvq/quant/quant_scheme.h"
#include "kvq/quant/transform_config.h"

namespace kvq::quant {

inline constexpr std::string_view kDefaultQuantizationMethod = "compressed-tensors";
inline constexpr std::string_view kDefaultQuantizationFormat = "fakequant";
// The compressed-tensors version kvq writes into checkpoints (the one it is pinned to).
inline constexpr std::string_view kCompressedTensorsVersion = "0.19.0";

// A recipe's KeySmoothingModifier (kvq's extension, lifecycle/key_smoothing.h): per-channel key
// scaling s = rk^strength / rq^(1 - strength) and, with `center`, the keys' mean removed.
struct KeySmoothingArgs {
  double smoothing_strength = 0.5;
  bool center = true;
  bool operator==(const KeySmoothingArgs&) const = default;
};

struct QuantizationConfig {
  // Insertion-ordered like the Python dict. Preset groups (a list of targets under a preset
  // name) are expanded on parse, as `model_post_init` does.
  std::vector<std::pair<std::string, QuantizationScheme>> config_groups;
  std::string quant_method{kDefaultQuantizationMethod};
  std::optional<QuantizationArgs> kv_cache_scheme;
  std::string format{kDefaultQuantizationFormat};
  QuantizationStatus quantization_status = QuantizationStatus::kInitialized;
  std::optional<double> global_compression_ratio;
  std::optional<std::vector<std::string>> ignore = std::vector<std::string>{};
  // Not model_dump() fields: the checkpoint's sibling key `transform_config` (read by
  // from_json, written by to_checkpoint_json), and a recipe's SpinQuantModifier arguments, which
  // the lifecycle turns into `transforms` once it knows the model's head_dim
  // (spinquant_transform_config).
  TransformConfig transforms;
  std::optional<Json> spinquant;
  // A recipe's KeySmoothingModifier (not a checkpoint field: checkpoints cannot carry it).
  std::optional<KeySmoothingArgs> key_smoothing;

  // `extra="ignore"`: unknown top-level keys are ignored; `config_groups` is required (it may be
  // empty: a checkpoint or recipe with transforms only).
  static QuantizationConfig from_json(const Json& json,
                                      std::string_view where = "QuantizationConfig");
  // `model_dump()` field order.
  Json to_json() const;
  // The object written under "quantization_config" in config.json by compressed-tensors'
  // ModelCompressor.update_config: version, quant_method, sparsity_config {}, transform_config
  // (`transforms`, {} when none), then model_dump() without quant_method. Write it with
  // dump_sorted().
  Json to_checkpoint_json(std::string_view version = kCompressedTensorsVersion) const;
  bool requires_calibration_data() const;
  bool operator==(const QuantizationConfig& other) const = default;
};

// json.dump(obj, indent=indent, sort_keys=True) (ASCII-escaped like Python's default).
std::string dump_sorted(const Json& json, int indent = 2);

}  // namespace kvq::quant
