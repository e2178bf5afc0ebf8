#include "kvq/quant/quant_config.h"

#include "kvq/core/error.h"
#include "kvq/quant/json_util.h"

namespace kvq::quant {

QuantizationConfig QuantizationConfig::from_json(const Json& json, std::string_view where) {
  if (!json.is_object())
    fail<ConfigError>("{}: Input should be a valid dictionary or instance of QuantizationConfig",
                      where);
  QuantizationConfig c;
  auto groups = json.find("config_groups");
  if (groups == json.end()) fail<ConfigError>("{}: config_groups: Field required", where);
  if (!groups->is_object())
    fail<ConfigError>("{}: config_groups: Input should be a valid dictionary", where);
  for (const auto& [name, value] : groups->items()) {
    const std::string ctx = fmt::format("{}: config_groups.{}", where, name);
    if (value.is_array()) {
      std::vector<std::string> targets;
      for (const Json& t : value) {
        if (!t.is_string()) fail<ConfigError>("{}: Input should be a valid string", ctx);
        targets.push_back(t.get<std::string>());
      }
      c.config_groups.emplace_back(name, with_context(ctx, [&, &name = name] {
                                     return preset_name_to_scheme(name, std::move(targets));
                                   }));
    } else {
      c.config_groups.emplace_back(name, QuantizationScheme::from_json(value, ctx));
    }
  }
  if (auto f = json.find("transform_config"); f != json.end())
    c.transforms = TransformConfig::from_json(*f, fmt::format("{}: transform_config", where));
  if (auto f = json.find("quant_method"); f != json.end()) {
    if (!f->is_string())
      fail<ConfigError>("{}: quant_method: Input should be a valid string", where);
    c.quant_method = f->get<std::string>();
  }
  if (auto f = json.find("kv_cache_scheme"); f != json.end() && !f->is_null())
    c.kv_cache_scheme = QuantizationArgs::from_json(*f, fmt::format("{}: kv_cache_scheme", where));
  if (auto f = json.find("format"); f != json.end()) {
    if (!f->is_string()) fail<ConfigError>("{}: format: Input should be a valid string", where);
    c.format = f->get<std::string>();
  }
  if (auto f = json.find("quantization_status"); f != json.end()) {
    if (!f->is_string())
      fail<ConfigError>("{}: quantization_status: Input should be a valid string", where);
    c.quantization_status = with_context(fmt::format("{}: quantization_status", where), [&] {
      return parse_quantization_status(f->get<std::string>());
    });
  }
  if (auto f = json.find("global_compression_ratio"); f != json.end() && !f->is_null()) {
    if (!f->is_number())
      fail<ConfigError>("{}: global_compression_ratio: Input should be a valid number", where);
    c.global_compression_ratio = f->get<double>();
  }
  if (auto f = json.find("ignore"); f != json.end()) {
    if (f->is_null()) {
      c.ignore.reset();
    } else {
      if (!f->is_array()) fail<ConfigError>("{}: ignore: Input should be a valid list", where);
      c.ignore.emplace();
      for (const Json& t : *f) {
        if (!t.is_string()) fail<ConfigError>("{}: ignore: Input should be a valid string", where);
        c.ignore->push_back(t.get<std::string>());
      }
    }
  }
  return c;
}

Json QuantizationConfig::to_json() const {
  Json j = Json::object();
  Json groups = Json::object();
  for (const auto& [name, scheme] : config_groups) groups[name] = scheme.to_json();
  j["config_groups"] = groups;
  j["quant_method"] = quant_method;
  j["kv_cache_scheme"] = kv_cache_scheme ? kv_cache_scheme->to_json() : Json(nullptr);
  j["format"] = format;
  j["quantization_status"] = to_string(quantization_status);
  j["global_compression_ratio"] =
      global_compression_ratio ? Json(*global_compression_ratio) : Json(nullptr);
  j["ignore"] = ignore ? Json(*ignore) : Json(nullptr);
  return j;
}

Json QuantizationConfig::to_checkpoint_json(std::string_view version) const {
  Json j = Json::object();
  j["version"] = version;
  j["quant_method"] = kDefaultQuantizationMethod;
  j["sparsity_config"] = Json::object();
  // compressed-tensors writes {} when the model has no transform config.
  j["transform_config"] = transforms.empty() ? Json::object() : transforms.to_json();
  const Json dump = to_json();
  for (auto it = dump.begin(); it != dump.end(); ++it)
    if (it.key() != "quant_method") j[it.key()] = it.value();
  return j;
}

bool QuantizationConfig::requires_calibration_data() const {
  if (kv_cache_scheme) return true;
  for (const auto& [name, scheme] : config_groups) {
    if (scheme.weights && scheme.weights->observer == "imatrix_mse") return true;
    if (scheme.input_activations && scheme.input_activations->dynamic != DynamicType::kTrue)
      return true;
    if (scheme.output_activations && scheme.output_activations->dynamic == DynamicType::kFalse)
      return true;
  }
  return false;
}

std::string dump_sorted(const Json& json, int indent) {
  // nlohmann::json (not ordered_json) keeps object keys in std::map order = sorted by bytes,
  // which equals Python's sort_keys for the ASCII keys configs use.
  const nlohmann::json sorted = nlohmann::json::parse(json.dump());
  return sorted.dump(indent, ' ', /*ensure_ascii=*/true);
}

}  // namespace kvq::quant
