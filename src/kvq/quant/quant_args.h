// compressed-tensors' quantization data model: enums and QuantizationArgs.
//
// Pinned to compressed-tensors 0.19.0 (the version installed in the reference venv): field set,
// defaults, validator order and messages follow `quantization/quant_args.py` of that release.
// Notable 0.19.0 behaviours (they differ from the PR-era text in the spec):
//  - `observer` is NOT inferred by the validator (stays null); llm-compressor picks "minmax"
//    for activations / q / k / v and "memoryless_minmax" for weights when it is null.
//  - `actorder`: True and "group"/"dynamic" are rejected (removed upstream); False -> null.
//  - `zp_dtype` is inferred (FP4 -> float8_e4m3fn, else pytorch_dtype()) and serialized as null
//    when symmetric.
//  - `block_structure` must be two positive ints ("RxC" strings accepted).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kvq/core/dtype.h"

namespace kvq::quant {

using Json = nlohmann::ordered_json;

enum class QuantizationType { kInt, kFloat };
enum class QuantizationStrategy {
  kTensor,
  kChannel,
  kGroup,
  kBlock,
  kToken,
  kTensorGroup,
  kAttnHead,
};
// The `dynamic` field is `bool | "local"`.
enum class DynamicType { kFalse, kTrue, kLocal };
// "weight" and its alias "static" (kept apart so a dump writes back what was read, as
// pydantic's use_enum_values does). "group"/"dynamic" were removed in compressed-tensors 0.19.
enum class ActivationOrdering { kWeight, kStatic };
enum class QuantizationStatus { kInitialized, kCalibration, kFrozen, kCompressed, kDecompressed };
enum class CompressionFormat {
  kDense,
  kSparseBitmask,
  kSparse24Bitmask,
  kIntQuantized,
  kFloatQuantized,
  kNaiveQuantized,
  kPackQuantized,
  kMarlin24,
  kMixedPrecision,
  kNvfp4PackQuantized,
  kMxfp4PackQuantized,
  kMxfp8Quantized,
};

std::string_view to_string(QuantizationType value);
std::string_view to_string(QuantizationStrategy value);
std::string_view to_string(ActivationOrdering value);
std::string_view to_string(QuantizationStatus value);
std::string_view to_string(CompressionFormat value);
// Parse the JSON string value; throw ConfigError with Python's enum message
// ("'x' is not a valid QuantizationStrategy") when unknown. Strategy/type/dynamic are
// lower-cased first like the reference's `mode="before"` validators.
QuantizationType parse_quantization_type(std::string_view text);
QuantizationStrategy parse_quantization_strategy(std::string_view text);
QuantizationStatus parse_quantization_status(std::string_view text);
CompressionFormat parse_compression_format(std::string_view text);

struct QuantizationArgs {
  int num_bits = 8;
  QuantizationType type = QuantizationType::kInt;
  bool symmetric = true;
  std::optional<int> group_size;
  std::optional<QuantizationStrategy> strategy;  // always set after validate()
  std::optional<std::array<int, 2>> block_structure;
  DynamicType dynamic = DynamicType::kFalse;
  std::optional<ActivationOrdering> actorder;
  std::optional<DType> scale_dtype;
  std::optional<DType> zp_dtype;  // always set after validate()
  std::optional<std::string> observer;
  Json observer_kwargs = Json::object();

  // Runs the reference's `validate_model_after` (strategy inference, consistency checks,
  // zp_dtype inference) in its order; throws ConfigError / NotSupported with its messages.
  // `type_given`: whether `type` was set explicitly (only changes the model repr embedded in
  // the block-structure messages, as pydantic's repr shows the unvalidated enum default).
  void validate(bool type_given = true);

  bool is_dynamic() const { return dynamic != DynamicType::kFalse; }
  bool is_fp4() const { return num_bits == 4 && type == QuantizationType::kFloat; }
  // float8_e4m3fn for float 8 bits, int8/int16/int32 for int; NotSupported otherwise
  // ("Only num_bits in (8) are supported").
  DType pytorch_dtype() const;
  QuantizationStrategy strategy_or_tensor() const {
    return strategy.value_or(QuantizationStrategy::kTensor);
  }

  // Parse a JSON object (missing keys -> defaults, unknown keys -> ConfigError like
  // `extra="forbid"`), then validate(). `where` prefixes error messages.
  static QuantizationArgs from_json(const Json& json, std::string_view where = "QuantizationArgs");
  // pydantic `model_dump()` field set and order.
  Json to_json() const;

  bool operator==(const QuantizationArgs& other) const;
};

// "torch.float8_e4m3fn" / "float8_e4m3fn" -> DType; ConfigError "No such torch dtype ..." else.
DType parse_torch_dtype(std::string_view text);
std::string torch_dtype_str(DType dtype);  // "torch.int8"

}  // namespace kvq::quant
