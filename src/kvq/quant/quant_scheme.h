// QuantizationScheme (targets + weight / input / output args) and the preset schemes of
// compressed-tensors 0.19.0 (`quantization/quant_scheme.py`).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/quant/quant_args.h"

namespace kvq::quant {

struct QuantizationScheme {
  std::vector<std::string> targets;
  std::optional<QuantizationArgs> weights;
  std::optional<QuantizationArgs> input_activations;
  std::optional<QuantizationArgs> output_activations;
  std::optional<CompressionFormat> format;

  // The reference's model validator (activation strategies, actorder, mixed-precision).
  void validate() const;
  // `extra="forbid"`: unknown keys -> ConfigError; `targets` is required.
  static QuantizationScheme from_json(const Json& json,
                                      std::string_view where = "QuantizationScheme");
  Json to_json() const;  // targets, weights, input_activations, output_activations, format
  bool operator==(const QuantizationScheme& other) const = default;
};

// Names in the reference's PRESET_SCHEMES order.
const std::vector<std::string>& preset_scheme_names();
bool is_preset_scheme(std::string_view name);  // case-insensitive, like the reference
// ConfigError "Unknown preset scheme name X, available names: [...]" for unknown names.
QuantizationScheme preset_name_to_scheme(std::string_view name, std::vector<std::string> targets);

}  // namespace kvq::quant
