#include "kvq/quant/recipe.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "kvq/core/error.h"
#include "kvq/core/strings.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"
#include "kvq/quant/json_util.h"

namespace kvq::quant {
namespace {

// PyYAML's (YAML 1.1) implicit resolvers for plain scalars, written out by hand: std::regex
// recurses per character, so a long scalar in a recipe would overflow the stack.
bool is_one_of(std::string_view s, std::initializer_list<std::string_view> words) {
  return std::find(words.begin(), words.end(), s) != words.end();
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
std::string_view skip_sign(std::string_view s) {
  return !s.empty() && (s[0] == '-' || s[0] == '+') ? s.substr(1) : s;
}
// [-+]?(0|[1-9][0-9_]*)
bool is_yaml_int(std::string_view s) {
  s = skip_sign(s);
  if (s == "0") return true;
  if (s.empty() || s[0] < '1' || s[0] > '9') return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_digit(c) || c == '_'; });
}
// [-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)? | [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN)
bool is_yaml_float(std::string_view text) {
  if (is_one_of(text, {".nan", ".NaN", ".NAN"})) return true;
  std::string_view s = skip_sign(text);
  if (is_one_of(s, {".inf", ".Inf", ".INF"})) return true;
  const std::size_t dot = s.find('.');
  if (dot == std::string_view::npos) return false;
  const auto digits_or_underscores = [](std::string_view part) {
    return std::all_of(part.begin(), part.end(), [](char c) { return is_digit(c) || c == '_'; });
  };
  const std::string_view whole = s.substr(0, dot);
  if (!whole.empty() && (!is_digit(whole[0]) || !digits_or_underscores(whole))) return false;
  std::string_view rest = s.substr(dot + 1);
  const std::size_t e = rest.find_first_of("eE");
  if (!digits_or_underscores(rest.substr(0, e))) return false;
  if (e == std::string_view::npos) return true;
  const std::string_view exponent = rest.substr(e + 1);
  return exponent.size() >= 2 && (exponent[0] == '-' || exponent[0] == '+') &&
         std::all_of(exponent.begin() + 1, exponent.end(), is_digit);
}

// YAML is Unicode text of printable characters: PyYAML's Reader refuses other bytes and
// check_printable's NON_PRINTABLE characters (C0 controls but tab, LF and CR; DEL; C1 controls
// but NEL; surrogates; U+FFFE/U+FFFF). Checked before yaml-cpp reads the text: it turns a NUL
// into a lone 0x85 byte, and a string that is not UTF-8 cannot be dumped into a message or a
// config later (nlohmann throws a type_error naming neither the file nor the key).
void check_yaml_text(std::string_view text, std::string_view source_name) {
  const auto where = [&](std::size_t at) {
    const std::string_view before = text.substr(0, at);
    const std::size_t line_start = before.rfind('\n');
    return fmt::format("{}:{}:{}", source_name, std::count(before.begin(), before.end(), '\n') + 1,
                       at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1);
  };
  if (const std::size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail<FormatError>("{}: invalid YAML: not UTF-8 (byte 0x{:02x})", where(bad),
                      static_cast<unsigned char>(text[bad]));
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const std::size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = len == 1 ? b : b & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k)
      c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    const bool printable = c == 0x9 || c == 0xA || c == 0xD || (c >= 0x20 && c <= 0x7E) ||
                           c == 0x85 || (c >= 0xA0 && c <= 0xD7FF) ||
                           (c >= 0xE000 && c <= 0xFFFD) || c >= 0x10000;
    if (!printable)
      fail<FormatError>(
          "{}: invalid YAML: unacceptable character U+{:04X}: special characters "
          "are not allowed",
          where(i), static_cast<std::uint32_t>(c));
    i += len;
  }
}

// A string yaml-cpp produced, checked again: whatever enters a Json value must be UTF-8.
const std::string& yaml_string(const YAML::Node& node, std::string_view source_name) {
  const std::string& s = node.Scalar();
  if (find_invalid_utf8(s) != std::string::npos)
    fail<FormatError>("{}:{}:{}: invalid YAML: the string \"{}\" is not UTF-8", source_name,
                      node.Mark().line + 1, node.Mark().column + 1, escape_bytes(s));
  return s;
}

Json yaml_scalar(const YAML::Node& node, std::string_view source_name) {
  const std::string& text = yaml_string(node, source_name);
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (is_one_of(text, {"~", "null", "Null", "NULL", ""})) return nullptr;
  if (is_one_of(text, {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})) return true;
  if (is_one_of(text, {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}))
    return false;
  if (is_yaml_int(text)) {
    std::string digits = text;
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    try {
      return std::stoll(digits);
    } catch (const std::exception&) {
      return text;
    }
  }
  if (is_yaml_float(text) && text != ".") {
    std::string digits = text;
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    try {
      return std::stod(digits);
    } catch (const std::exception&) {
      return text;
    }
  }
  return text;
}

// Aliases are expanded into copies, so a 1 KB "billion laughs" file of nested aliases would grow
// to billions of nodes: the expansion is bounded by a node budget (real recipes have ~100 nodes)
// and the depth by JSON's own limit.
constexpr std::int64_t kMaxYamlNodes = 10'000;

struct YamlBudget {
  std::string_view source_name;
  std::int64_t nodes = 0;
};

Json yaml_node_to_json(const YAML::Node& node, YamlBudget& budget, int depth) {
  if (++budget.nodes > kMaxYamlNodes)
    fail<FormatError>("{}: YAML expands to more than {} nodes (aliases of aliases?)",
                      budget.source_name, kMaxYamlNodes);
  if (depth > io::kMaxJsonDepth)
    fail<FormatError>("{}:{}: YAML nested deeper than {} levels (kvq's limit)", budget.source_name,
                      node.Mark().line + 1, io::kMaxJsonDepth);
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return yaml_scalar(node, budget.source_name);
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(yaml_node_to_json(item, budget, depth + 1));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node)
        out[kv.first.IsScalar() ? yaml_string(kv.first, budget.source_name)
                                : kv.first.as<std::string>()] =
            yaml_node_to_json(kv.second, budget, depth + 1);
      return out;
    }
  }
  return nullptr;
}

std::vector<std::string> targets_list(const Json& value, const std::string& where) {
  std::vector<std::string> out;
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) fail<ConfigError>("{}: Input should be a valid list", where);
  for (const Json& t : value) {
    if (!t.is_string()) fail<ConfigError>("{}: Input should be a valid string", where);
    out.push_back(t.get<std::string>());
  }
  return out;
}

constexpr const char* kSchemeMessage =
    "`scheme` must either be a preset scheme name or a dictionary of preset scheme names";

QuantizationConfig resolve_quantization_modifier(const Json& mod, const std::string& where) {
  static const char* kFields[] = {"config_groups",   "targets",
                                  "ignore",          "scheme",
                                  "kv_cache_scheme", "weight_observer",
                                  "input_observer",  "output_observer",
                                  "observer",        "bypass_divisibility_checks",
                                  "index",           "group",
                                  "start",           "end",
                                  "update",          "requires_calibration_data",
                                  "initialized_",    "finalized_",
                                  "started_",        "ended_"};
  if (!mod.is_object()) fail<ConfigError>("{}: Input should be a valid dictionary", where);
  for (const auto& [key, value] : mod.items()) {
    if (std::find_if(std::begin(kFields), std::end(kFields),
                     [&key = key](const char* f) { return key == f; }) == std::end(kFields))
      fail<ConfigError>("{}: {}: Extra inputs are not permitted", where, key);
  }
  auto get = [&](const char* key) -> const Json* {
    auto it = mod.find(key);
    return (it == mod.end() || it->is_null()) ? nullptr : &*it;
  };
  std::vector<std::string> targets = {"Linear"};
  if (const Json* t = get("targets")) targets = targets_list(*t, where + ": targets");
  std::vector<std::string> ignore;
  if (const Json* t = get("ignore")) ignore = targets_list(*t, where + ": ignore");

  // scheme: validated in field order, before config_groups is looked at.
  std::vector<std::pair<std::string, std::vector<std::string>>> scheme;  // preset -> targets
  const Json* scheme_json = get("scheme");
  if (scheme_json) {
    if (scheme_json->is_string()) {
      if (!is_preset_scheme(scheme_json->get<std::string>()))
        fail<ConfigError>("{}: scheme: {}", where, kSchemeMessage);
    } else if (scheme_json->is_object()) {
      for (const auto& [name, value] : scheme_json->items()) {
        if (!is_preset_scheme(name)) fail<ConfigError>("{}: scheme: {}", where, kSchemeMessage);
        scheme.emplace_back(name, targets_list(value, where + ": scheme." + name));
      }
    } else {
      fail<ConfigError>("{}: scheme: Input should be a valid string or dictionary", where);
    }
  }
  std::optional<std::vector<std::pair<std::string, QuantizationScheme>>> groups;
  if (const Json* g = get("config_groups")) {
    if (!g->is_object())
      fail<ConfigError>("{}: config_groups: Input should be a valid dictionary", where);
    groups.emplace();
    for (const auto& [name, value] : g->items())
      groups->emplace_back(name, QuantizationScheme::from_json(
                                     value, fmt::format("{}: config_groups.{}", where, name)));
  }
  std::optional<QuantizationArgs> kv;
  if (const Json* k = get("kv_cache_scheme"))
    kv = QuantizationArgs::from_json(*k, where + ": kv_cache_scheme");

  std::optional<std::string> weight_obs, input_obs, output_obs;
  for (auto [key, dst] :
       {std::pair{"weight_observer", &weight_obs}, std::pair{"input_observer", &input_obs},
        std::pair{"output_observer", &output_obs}}) {
    if (const Json* o = get(key)) {
      if (!o->is_string()) fail<ConfigError>("{}: {}: Input should be a valid string", where, key);
      *dst = o->get<std::string>();
    }
  }
  const Json* observer_dict = get("observer");
  if (observer_dict) {
    if (!observer_dict->is_object())
      fail<ConfigError>("{}: observer: `observer` must be a dictionary", where);
    for (const auto& [key, value] : observer_dict->items()) {
      if (key != "weights" && key != "input" && key != "output")
        fail<ConfigError>(
            "{}: observer: Invalid observer key '{}'. Valid keys are: {{'weights', 'input', "
            "'output'}}",
            where, key);
      if (!value.is_string())
        fail<ConfigError>("{}: observer: Observer value for '{}' must be a string", where, key);
    }
  }

  auto apply_overrides = [&](QuantizationScheme& s) {
    if ((weight_obs || input_obs || output_obs) && observer_dict)
      fail<ConfigError>(
          "{}: Cannot specify both individual observer parameters (weight_observer, "
          "input_observer, output_observer) and observer dict. Please use either individual "
          "parameters or the observer dict.",
          where);
    auto w = weight_obs, i = input_obs, o = output_obs;
    if (observer_dict) {
      if (auto f = observer_dict->find("weights"); f != observer_dict->end())
        w = f->get<std::string>();
      if (auto f = observer_dict->find("input"); f != observer_dict->end())
        i = f->get<std::string>();
      if (auto f = observer_dict->find("output"); f != observer_dict->end())
        o = f->get<std::string>();
    }
    auto update = [](std::optional<QuantizationArgs>& args, const std::optional<std::string>& obs,
                     const char* default_obs) {
      if (!args) return;
      if (!obs) {
        // 0.19 args never infer an observer, so a non-null one was set explicitly.
        if (args->observer) return;
        args->observer = args->dynamic == DynamicType::kTrue
                             ? std::nullopt
                             : std::optional<std::string>(default_obs);
      } else {
        args->observer = obs;
      }
    };
    update(s.weights, w, "memoryless_minmax");
    update(s.input_activations, i, "minmax");
    update(s.output_activations, o, "minmax");
  };

  if (scheme_json && groups)
    fail<ConfigError>("{}: Please specify either `scheme` or `config_groups`", where);
  QuantizationConfig config;
  if (scheme_json) {
    if (scheme_json->is_string()) scheme.emplace_back(scheme_json->get<std::string>(), targets);
    for (std::size_t idx = 0; idx < scheme.size(); ++idx) {
      QuantizationScheme s = preset_name_to_scheme(scheme[idx].first, scheme[idx].second);
      apply_overrides(s);
      config.config_groups.emplace_back(fmt::format("group_{}", idx), std::move(s));
    }
  } else if (groups && !groups->empty()) {
    for (auto& [name, s] : *groups) apply_overrides(s);
    config.config_groups = std::move(*groups);
  }
  if (config.config_groups.empty()) {
    QuantizationScheme s;
    s.targets = targets;
    apply_overrides(s);
    config.config_groups.emplace_back("group_0", std::move(s));
  }
  config.kv_cache_scheme = kv;
  config.ignore = ignore;
  return config;
}

// KeySmoothingModifier: {smoothing_strength: number in [0, 1], center: bool}, nothing else.
KeySmoothingArgs parse_key_smoothing(const Json& mod, const std::string& where) {
  KeySmoothingArgs args;
  if (mod.is_null()) return args;
  if (!mod.is_object()) fail<ConfigError>("{}: Input should be a valid dictionary", where);
  for (const auto& [key, value] : mod.items()) {
    if (key == "smoothing_strength") {
      if (!value.is_number())
        fail<ConfigError>("{}: smoothing_strength: Input should be a valid number", where);
      args.smoothing_strength = value.get<double>();
      if (!(args.smoothing_strength >= 0.0 && args.smoothing_strength <= 1.0))
        fail<ConfigError>("{}: smoothing_strength must be in [0, 1], got {}", where,
                          args.smoothing_strength);
    } else if (key == "center") {
      if (!value.is_boolean())
        fail<ConfigError>("{}: center: Input should be a valid boolean", where);
      args.center = value.get<bool>();
    } else {
      fail<ConfigError>(
          "{}: {}: Extra inputs are not permitted (KeySmoothingModifier takes "
          "smoothing_strength and center)",
          where, key);
    }
  }
  return args;
}

}  // namespace

Json yaml_to_json(std::string_view text, std::string_view source_name) {
  check_yaml_text(text, source_name);
  try {
    YamlBudget budget{source_name};
    return yaml_node_to_json(YAML::Load(std::string(text)), budget, 0);
  } catch (const YAML::Exception& e) {
    fail<FormatError>("{}:{}:{}: invalid YAML: {}", source_name, e.mark.line + 1, e.mark.column + 1,
                      e.msg);
  }
}

QuantizationConfig parse_recipe(std::string_view text, std::string_view source_name) {
  if (text.size() > kMaxRecipeBytes)
    fail<FormatError>("{}: {} bytes; a recipe is at most {} bytes", source_name, text.size(),
                      kMaxRecipeBytes);
  // The reference tries JSON first, then YAML: nlohmann's accept() is the cheap "is it JSON",
  // without building a value (and recursion-free).
  const Json root = Json::accept(text.begin(), text.end())
                        ? io::parse_ordered_json(text, source_name)
                        : yaml_to_json(text, source_name);
  return resolve_recipe(root, source_name);
}

QuantizationConfig resolve_recipe(const Json& root, std::string_view source_name) {
  if (!root.is_object())
    fail<FormatError>("{}: could not parse recipe: expected a mapping of stages", source_name);
  std::optional<QuantizationConfig> result;
  std::optional<Json> spinquant;
  std::optional<KeySmoothingArgs> key_smoothing;
  for (const auto& [stage_key, stage] : root.items()) {
    if (!stage_key.ends_with("_stage") || !stage.is_object()) continue;
    for (const auto& [group_key, group] : stage.items()) {
      if (!group_key.ends_with("_modifiers") || !group.is_object()) continue;
      for (const auto& [mod_type, mod_args] : group.items()) {
        const std::string where =
            fmt::format("{}: {}.{}.{}", source_name, stage_key, group_key, mod_type);
        if (mod_type == "SpinQuantModifier") {
          if (spinquant) fail<NotSupported>("{}: more than one SpinQuantModifier", where);
          if (result)  // llm-compressor applies modifiers in order: rotate, then quantize
            fail<NotSupported>("{}: SpinQuantModifier must come before QuantizationModifier",
                               where);
          // Checked now (any head_dim will do); the lifecycle builds it for the model.
          spinquant_transform_config(mod_args.is_null() ? Json::object() : mod_args, 64, where);
          spinquant = mod_args.is_null() ? Json::object() : mod_args;
          continue;
        }
        if (mod_type == "KeySmoothingModifier") {
          if (key_smoothing) fail<NotSupported>("{}: more than one KeySmoothingModifier", where);
          if (result)
            fail<NotSupported>("{}: KeySmoothingModifier must come before QuantizationModifier",
                               where);
          key_smoothing = parse_key_smoothing(mod_args, where);
          continue;
        }
        if (mod_type != "QuantizationModifier")
          fail<NotSupported>(
              "{}: modifier type {} is not supported (kvq implements QuantizationModifier, "
              "SpinQuantModifier and its own KeySmoothingModifier)",
              where, mod_type);
        if (result) fail<NotSupported>("{}: more than one QuantizationModifier in a recipe", where);
        result = resolve_quantization_modifier(mod_args, where);
      }
    }
  }
  if (!result && !spinquant && !key_smoothing)
    fail<ConfigError>(
        "{}: the recipe has no QuantizationModifier (expected "
        "<name>_stage: {{<name>_modifiers: {{QuantizationModifier: ...}}}})",
        source_name);
  if (!result) result.emplace();  // rotations only: nothing quantized by the recipe itself
  result->spinquant = std::move(spinquant);
  result->key_smoothing = key_smoothing;
  return *result;
}

QuantizationConfig load_recipe(const std::filesystem::path& path) {
  const std::string text = io::read_file(path, "recipe", kMaxRecipeBytes);
  const std::string ext = path.extension().string();
  if (ext == ".json")
    return resolve_recipe(io::parse_ordered_json(text, path.string()), path.string());
  return parse_recipe(text, path.string());
}

QuantizationConfig parse_quantization_config(const Json& config_json,
                                             std::string_view source_name) {
  if (!config_json.is_object()) fail<FormatError>("{}: expected a JSON object", source_name);
  for (const char* key : {"quantization_config", "compression_config"}) {
    if (auto it = config_json.find(key); it != config_json.end())
      return QuantizationConfig::from_json(*it, fmt::format("{}: {}", source_name, key));
  }
  if (config_json.contains("config_groups"))
    return QuantizationConfig::from_json(config_json, source_name);
  fail<ConfigError>("{}: no quantization_config in this config", source_name);
}

}  // namespace kvq::quant
