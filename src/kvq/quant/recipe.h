// llm-compressor recipes (YAML or JSON) -> QuantizationConfig, as llmcompressor 0.14.0.1's
// Recipe.from_dict + QuantizationModifier.resolve_quantization_config do it.
//
// Recipe layout: `<name>_stage: {<group>_modifiers: {QuantizationModifier: {...}}}`. The modifier
// accepts config_groups (dict of schemes; lists of targets are NOT accepted here, unlike
// config.json), targets, ignore, scheme (preset name or {preset: targets}), kv_cache_scheme,
// weight_observer / input_observer / output_observer / observer, bypass_divisibility_checks and
// the generic Modifier fields (index, group, start, end, update, ...); other keys are rejected
// (`extra="forbid"`). Observer defaults are filled like `_apply_observer_overrides`: weights
// "memoryless_minmax", inputs/outputs "minmax" (None for dynamic=True), unless set explicitly;
// kv_cache_scheme is left as written (llm-compressor then defaults its q/k/v observers to
// "minmax"). Before it, at most one SpinQuantModifier (rotations, QuantizationConfig::spinquant)
// and at most one KeySmoothingModifier (kvq's own: {smoothing_strength, center},
// QuantizationConfig::key_smoothing, lifecycle/key_smoothing.h); a recipe may hold those alone.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "kvq/quant/quant_config.h"

namespace kvq::quant {

// Real recipes are a few KB (a long ignore list tens of KB); the bound keeps the ordered JSON
// objects, whose key insertion is linear, small.
inline constexpr std::size_t kMaxRecipeBytes = 256 * 1024;

// Parses recipe text (JSON tried first, then YAML, like the reference). Malformed text ->
// FormatError naming `source_name` and the line; invalid content -> ConfigError; other modifier
// types -> NotSupported.
QuantizationConfig parse_recipe(std::string_view text, std::string_view source_name);
// A recipe already parsed into JSON.
QuantizationConfig resolve_recipe(const Json& recipe, std::string_view source_name);
QuantizationConfig load_recipe(const std::filesystem::path& path);

// A config.json (or its "quantization_config" / "compression_config" object) -> config.
QuantizationConfig parse_quantization_config(const Json& config_json, std::string_view source_name);

// YAML text -> JSON value with PyYAML safe_load scalar typing (YAML 1.1 bools incl. yes/no/
// on/off, ints, floats, null/~). FormatError "<source>:<line>:<col>: ..." when malformed.
Json yaml_to_json(std::string_view text, std::string_view source_name);

}  // namespace kvq::quant
