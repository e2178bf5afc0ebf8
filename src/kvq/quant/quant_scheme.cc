#include "kvq/quant/quant_scheme.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/quant/json_util.h"

namespace kvq::quant {
namespace {

using S = QuantizationStrategy;
using T = QuantizationType;

struct ArgsSpec {
  int bits;
  T type;
  S strategy;
  bool symmetric = true;
  DynamicType dynamic = DynamicType::kFalse;
  std::optional<int> group_size = std::nullopt;
  std::optional<std::string> observer = std::nullopt;
  std::optional<DType> scale_dtype = std::nullopt;
  std::optional<DType> zp_dtype = std::nullopt;
  std::optional<std::array<int, 2>> block = std::nullopt;
};

QuantizationArgs make(const ArgsSpec& s) {
  QuantizationArgs a;
  a.num_bits = s.bits;
  a.type = s.type;
  a.strategy = s.strategy;
  a.symmetric = s.symmetric;
  a.dynamic = s.dynamic;
  a.group_size = s.group_size;
  a.observer = s.observer;
  a.scale_dtype = s.scale_dtype;
  a.zp_dtype = s.zp_dtype;
  a.block_structure = s.block;
  a.validate();
  return a;
}

struct Preset {
  std::optional<QuantizationArgs> weights;
  std::optional<QuantizationArgs> inputs;
};

Preset int_wnam(int weight_bits, int act_bits = 16) {
  Preset p;
  p.weights =
      make({.bits = weight_bits, .type = T::kInt, .strategy = S::kGroup, .group_size = 128});
  if (act_bits < 16)
    p.inputs = make(
        {.bits = act_bits, .type = T::kInt, .strategy = S::kToken, .dynamic = DynamicType::kTrue});
  return p;
}

const std::vector<std::pair<std::string, Preset>>& presets() {
  static const auto* table = [] {
    auto* t = new std::vector<std::pair<std::string, Preset>>();
    const auto fp8 = DType::kF8E4M3;
    const auto u8 = DType::kU8;
    Preset int8_w8a8{
        make({.bits = 8, .type = T::kInt, .strategy = S::kChannel}),
        make({.bits = 8, .type = T::kInt, .strategy = S::kToken, .dynamic = DynamicType::kTrue})};
    Preset nvfp4_w{make({.bits = 4,
                         .type = T::kFloat,
                         .strategy = S::kTensorGroup,
                         .group_size = 16,
                         .scale_dtype = fp8,
                         .zp_dtype = fp8}),
                   std::nullopt};
    Preset nvfp4 = nvfp4_w;
    nvfp4.inputs = make({.bits = 4,
                         .type = T::kFloat,
                         .strategy = S::kTensorGroup,
                         .dynamic = DynamicType::kLocal,
                         .group_size = 16,
                         .observer = "static_minmax",
                         .scale_dtype = fp8,
                         .zp_dtype = fp8});
    auto mx_w = [&](int bits) {
      return make({.bits = bits,
                   .type = T::kFloat,
                   .strategy = S::kGroup,
                   .group_size = 32,
                   .scale_dtype = u8,
                   .zp_dtype = u8});
    };
    auto mx_a = [&](int bits) {
      return make({.bits = bits,
                   .type = T::kFloat,
                   .strategy = S::kGroup,
                   .dynamic = DynamicType::kTrue,
                   .group_size = 32,
                   .scale_dtype = u8,
                   .zp_dtype = u8});
    };
    t->emplace_back("UNQUANTIZED", Preset{});
    t->emplace_back("W4A16_ASYM", Preset{make({.bits = 4,
                                               .type = T::kInt,
                                               .strategy = S::kGroup,
                                               .symmetric = false,
                                               .group_size = 128}),
                                         std::nullopt});
    t->emplace_back("W8A8", int8_w8a8);
    t->emplace_back("INT8", int8_w8a8);
    t->emplace_back(
        "W4AFP8",
        Preset{make({.bits = 4, .type = T::kInt, .strategy = S::kGroup, .group_size = 128}),
               make({.bits = 8,
                     .type = T::kFloat,
                     .strategy = S::kToken,
                     .dynamic = DynamicType::kTrue})});
    t->emplace_back("FP8", Preset{make({.bits = 8, .type = T::kFloat, .strategy = S::kTensor}),
                                  make({.bits = 8,
                                        .type = T::kFloat,
                                        .strategy = S::kTensor,
                                        .observer = "static_minmax"})});
    t->emplace_back("FP8_DYNAMIC",
                    Preset{make({.bits = 8, .type = T::kFloat, .strategy = S::kChannel}),
                           make({.bits = 8,
                                 .type = T::kFloat,
                                 .strategy = S::kToken,
                                 .dynamic = DynamicType::kTrue})});
    t->emplace_back("FP8_BLOCK", Preset{make({.bits = 8,
                                              .type = T::kFloat,
                                              .strategy = S::kBlock,
                                              .block = std::array<int, 2>{128, 128}}),
                                        make({.bits = 8,
                                              .type = T::kFloat,
                                              .strategy = S::kGroup,
                                              .dynamic = DynamicType::kTrue,
                                              .group_size = 128})});
    t->emplace_back("NVFP4A16", nvfp4_w);
    t->emplace_back("NVFP4", nvfp4);
    t->emplace_back("MXFP4A16", Preset{mx_w(4), std::nullopt});
    t->emplace_back("MXFP4", Preset{mx_w(4), mx_a(4)});
    t->emplace_back("MXFP8A16", Preset{mx_w(8), std::nullopt});
    t->emplace_back("MXFP8", Preset{mx_w(8), mx_a(8)});
    const std::pair<int, int> wa[] = {{2, 4},  {2, 8}, {2, 16}, {3, 4}, {3, 8},  {3, 16},
                                      {4, 4},  {4, 8}, {4, 16}, {5, 8}, {5, 16}, {6, 8},
                                      {6, 16}, {7, 8}, {7, 16}, {8, 16}};
    for (const auto& [w, a] : wa) t->emplace_back(fmt::format("W{}A{}", w, a), int_wnam(w, a));
    return t;
  }();
  return *table;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const std::vector<std::string>& preset_scheme_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, preset] : presets()) out.push_back(name);
    return out;
  }();
  return names;
}

bool is_preset_scheme(std::string_view name) {
  const std::string key = upper(name);
  const auto& names = preset_scheme_names();
  return std::find(names.begin(), names.end(), key) != names.end();
}

QuantizationScheme preset_name_to_scheme(std::string_view name, std::vector<std::string> targets) {
  const std::string key = upper(name);
  for (const auto& [preset_name, preset] : presets()) {
    if (preset_name != key) continue;
    QuantizationScheme scheme;
    scheme.targets = std::move(targets);
    scheme.weights = preset.weights;
    scheme.input_activations = preset.inputs;
    scheme.validate();
    return scheme;
  }
  std::string names;
  for (const auto& n : preset_scheme_names()) names += (names.empty() ? "'" : ", '") + n + "'";
  fail<ConfigError>("Unknown preset scheme name {}, available names: [{}]", key, names);
}

void QuantizationScheme::validate() const {
  if (input_activations) {
    const S s = input_activations->strategy_or_tensor();
    if (s != S::kToken && s != S::kTensor && s != S::kGroup && s != S::kTensorGroup &&
        s != S::kAttnHead)
      fail<ConfigError>("Using {} strategy is not supported for activation quantization",
                        to_string(s));
    if (input_activations->actorder)
      throw ConfigError("Cannot apply actorder to input activations");
  }
  if (output_activations && output_activations->actorder)
    throw ConfigError("Cannot apply actorder to output activations");
  if (format == CompressionFormat::kMixedPrecision)
    throw ConfigError("mixed-precision cannot be set as a format for a QuantizationScheme");
  if (input_activations && weights && weights->strategy == S::kGroup &&
      input_activations->strategy == S::kGroup &&
      weights->group_size != input_activations->group_size)
    log::warn(
        "Using GROUP strategy for both weights and input_activations with different group sizes "
        "may complicate fused kernel implementations.");
}

QuantizationScheme QuantizationScheme::from_json(const Json& json, std::string_view where) {
  if (!json.is_object())
    fail<ConfigError>("{}: Input should be a valid dictionary or instance of QuantizationScheme",
                      where);
  static const char* kFields[] = {"targets", "weights", "input_activations", "output_activations",
                                  "format"};
  for (const auto& [key, value] : json.items()) {
    if (std::find_if(std::begin(kFields), std::end(kFields),
                     [&key = key](const char* f) { return key == f; }) == std::end(kFields))
      fail<ConfigError>("{}: {}: Extra inputs are not permitted", where, key);
  }
  QuantizationScheme s;
  auto it = json.find("targets");
  if (it == json.end()) fail<ConfigError>("{}: targets: Field required", where);
  if (!it->is_array()) fail<ConfigError>("{}: targets: Input should be a valid list", where);
  for (const Json& t : *it) {
    if (!t.is_string()) fail<ConfigError>("{}: targets: Input should be a valid string", where);
    s.targets.push_back(t.get<std::string>());
  }
  auto args = [&](const char* key) -> std::optional<QuantizationArgs> {
    auto f = json.find(key);
    if (f == json.end() || f->is_null()) return std::nullopt;
    return QuantizationArgs::from_json(*f, fmt::format("{}: {}", where, key));
  };
  s.weights = args("weights");
  s.input_activations = args("input_activations");
  s.output_activations = args("output_activations");
  if (auto f = json.find("format"); f != json.end() && !f->is_null()) {
    if (!f->is_string()) fail<ConfigError>("{}: format: Input should be a valid string", where);
    s.format = with_context(fmt::format("{}: format", where),
                            [&] { return parse_compression_format(f->get<std::string>()); });
  }
  with_context(std::string(where), [&] {
    s.validate();
    return 0;
  });
  return s;
}

Json QuantizationScheme::to_json() const {
  Json j = Json::object();
  j["targets"] = targets;
  auto args = [](const std::optional<QuantizationArgs>& a) {
    return a ? a->to_json() : Json(nullptr);
  };
  j["weights"] = args(weights);
  j["input_activations"] = args(input_activations);
  j["output_activations"] = args(output_activations);
  j["format"] = format ? Json(to_string(*format)) : Json(nullptr);
  return j;
}

}  // namespace kvq::quant
