#include "kvq/quant/transform_config.h"

#include <array>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/strings.h"

namespace kvq::quant {
namespace {

constexpr std::array<std::pair<TransformLocation, std::string_view>, 6> kLocations = {{
    {TransformLocation::kInput, "input"},
    {TransformLocation::kWeightInput, "weight_input"},
    {TransformLocation::kWeightOutput, "weight_output"},
    {TransformLocation::kOutput, "output"},
    {TransformLocation::kKCache, "k_cache"},
    {TransformLocation::kQAttn, "q_attn"},
}};

// pydantic `extra="forbid"`: every key must be a field.
void forbid_extra(const Json& json, std::initializer_list<std::string_view> fields,
                  std::string_view where) {
  if (!json.is_object()) fail<ConfigError>("{}: expected an object, got {}", where, json.dump());
  for (const auto& [key, value] : json.items()) {
    bool known = false;
    for (std::string_view f : fields) known = known || key == f;
    if (!known) fail<ConfigError>("{}: extra field '{}' is not permitted", where, key);
  }
}

std::string json_string(const Json& value, std::string_view where) {
  if (!value.is_string()) fail<ConfigError>("{}: expected a string, got {}", where, value.dump());
  return value.get<std::string>();
}

// `targets` / `ignore`: a string or a list of strings (wrap_singleton).
std::vector<std::string> string_list(const Json& value, std::string_view where) {
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) fail<ConfigError>("{}: expected a list of strings", where);
  std::vector<std::string> out;
  for (const Json& v : value) out.push_back(json_string(v, where));
  return out;
}

// TorchDtype: "torch.float32" or "float32"; kvq keeps the bare name of the float dtypes.
std::string torch_dtype(const Json& value, std::string_view where) {
  std::string name = json_string(value, where);
  if (name.starts_with("torch.")) name.erase(0, 6);
  static constexpr std::array<std::string_view, 6> kDtypes = {"float32",  "float64", "float16",
                                                              "bfloat16", "float",   "double"};
  for (std::string_view d : kDtypes) {
    if (name == d) {
      if (name == "float") return "float32";
      if (name == "double") return "float64";
      return name;
    }
  }
  fail<ConfigError>("{}: No such torch dtype `torch.{}`", where, name);
}

}  // namespace

std::string_view to_string(TransformLocation location) {
  for (const auto& [l, name] : kLocations)
    if (l == location) return name;
  return "?";
}

bool is_online(TransformLocation location) {
  return location != TransformLocation::kWeightInput &&
         location != TransformLocation::kWeightOutput;
}

TransformArgs TransformArgs::from_json(const Json& json, std::string_view where) {
  forbid_extra(json, {"targets", "location", "inverse", "ignore"}, where);
  TransformArgs a;
  if (!json.contains("targets")) fail<ConfigError>("{}: field 'targets' is required", where);
  if (!json.contains("location")) fail<ConfigError>("{}: field 'location' is required", where);
  a.targets = string_list(json.at("targets"), fmt::format("{}.targets", where));
  const std::string loc = json_string(json.at("location"), fmt::format("{}.location", where));
  bool found = false;
  for (const auto& [l, name] : kLocations) {
    if (name == loc) a.location = l, found = true;
  }
  if (!found) {
    fail<ConfigError>(
        "{}.location: '{}' is not a transform location (input, weight_input, weight_output, "
        "output, k_cache, q_attn)",
        where, loc);
  }
  if (json.contains("inverse")) a.inverse = json_bool(json.at("inverse"), where);
  if (json.contains("ignore")) a.ignore = string_list(json.at("ignore"), where);
  return a;
}

Json TransformArgs::to_json() const {
  Json j = Json::object();
  j["targets"] = targets;
  j["location"] = std::string(to_string(location));
  j["inverse"] = inverse;
  j["ignore"] = ignore;
  return j;
}

TransformScheme TransformScheme::from_json(const Json& json, std::string_view where) {
  forbid_extra(json, {"type", "apply", "randomize", "requires_grad", "head_dim", "precision"},
               where);
  TransformScheme s;
  if (!json.contains("type")) fail<ConfigError>("{}: field 'type' is required", where);
  s.type = json_string(json.at("type"), fmt::format("{}.type", where));
  if (json.contains("apply")) {
    const Json& apply = json.at("apply");
    if (!apply.is_array()) fail<ConfigError>("{}.apply: expected a list", where);
    for (std::size_t i = 0; i < apply.size(); ++i)
      s.apply.push_back(TransformArgs::from_json(apply[i], fmt::format("{}.apply[{}]", where, i)));
  }
  if (json.contains("randomize")) s.randomize = json_bool(json.at("randomize"), where);
  if (json.contains("requires_grad")) s.requires_grad = json_bool(json.at("requires_grad"), where);
  if (json.contains("head_dim") && !json.at("head_dim").is_null())
    s.head_dim = json_int(json.at("head_dim"), fmt::format("{}.head_dim", where));
  if (json.contains("precision"))
    s.precision = torch_dtype(json.at("precision"), fmt::format("{}.precision", where));
  return s;
}

Json TransformScheme::to_json() const {
  Json j = Json::object();
  j["type"] = type;
  j["apply"] = Json::array();
  for (const TransformArgs& a : apply) j["apply"].push_back(a.to_json());
  j["randomize"] = randomize;
  j["requires_grad"] = requires_grad;
  j["head_dim"] = head_dim ? Json(*head_dim) : Json(nullptr);
  j["precision"] = "torch." + precision;
  return j;
}

TransformConfig TransformConfig::from_json(const Json& json, std::string_view where) {
  TransformConfig c;
  if (json.is_null() || (json.is_object() && json.empty())) return c;
  forbid_extra(json, {"config_groups"}, where);
  if (!json.contains("config_groups"))
    fail<ConfigError>("{}: field 'config_groups' is required", where);
  const Json& groups = json.at("config_groups");
  if (!groups.is_object()) fail<ConfigError>("{}.config_groups: expected a mapping", where);
  for (const auto& [name, scheme] : groups.items()) {
    c.config_groups.emplace_back(
        name, TransformScheme::from_json(scheme, fmt::format("{}.config_groups.{}", where, name)));
  }
  return c;
}

Json TransformConfig::to_json() const {
  Json groups = Json::object();
  for (const auto& [name, scheme] : config_groups) groups[name] = scheme.to_json();
  Json j = Json::object();
  j["config_groups"] = std::move(groups);
  return j;
}

TransformConfig spinquant_transform_config(const Json& args, int head_dim, std::string_view where) {
  forbid_extra(args,
               {"rotations", "transform_type", "randomize", "learnable", "precision",
                "transform_block_size", "mappings", "norm_mappings", "transform_config", "targets",
                "ignore", "start", "end", "update", "index", "group"},
               where);
  if (args.contains("transform_config") && !args.at("transform_config").is_null()) {
    return TransformConfig::from_json(args.at("transform_config"),
                                      fmt::format("{}.transform_config", where));
  }
  for (const char* custom : {"mappings", "norm_mappings"}) {
    if (args.contains(custom) && !args.at(custom).is_null())
      fail<NotSupported>("{}: custom {} are not supported (kvq infers Llama's)", where, custom);
  }
  std::vector<std::string> rotations = {"R1", "R2"};
  if (args.contains("rotations")) {
    rotations = string_list(args.at("rotations"), fmt::format("{}.rotations", where));
    for (std::string& r : rotations) {
      r = ascii_lower(r);
      for (char& ch : r) ch = ch == 'r' ? 'R' : ch;
      if (r != "R1" && r != "R2" && r != "R3" && r != "R4")
        fail<ConfigError>("{}.rotations: '{}' is not one of R1, R2, R3, R4", where, r);
    }
  }
  std::string type = "hadamard";
  if (args.contains("transform_type")) {
    type = json_string(args.at("transform_type"), fmt::format("{}.transform_type", where));
    if (type != "hadamard" && type != "random-hadamard" && type != "random-matrix")
      fail<ConfigError>(
          "{}.transform_type: '{}' is not one of 'hadamard', 'random-hadamard', 'random-matrix'",
          where, type);
  }
  for (const char* flag : {"randomize", "learnable"}) {
    if (args.contains(flag) && json_bool(args.at(flag), where))
      fail<NotSupported>("{}: {} is not supported as of now", where, flag);
  }
  std::string precision = "float64";
  if (args.contains("precision"))
    precision = torch_dtype(args.at("precision"), fmt::format("{}.precision", where));
  std::optional<int> block;
  if (args.contains("transform_block_size") && !args.at("transform_block_size").is_null())
    block =
        json_int(args.at("transform_block_size"), fmt::format("{}.transform_block_size", where));

  const auto has = [&](std::string_view r) {
    for (const std::string& x : rotations)
      if (x == r) return true;
    return false;
  };
  const auto scheme = [&](std::optional<int> size, std::vector<TransformArgs> apply) {
    TransformScheme s;
    s.type = type;
    s.apply = std::move(apply);
    s.precision = precision;
    s.head_dim = size;
    return s;
  };
  // Llama's SpinQuantMapping (llm-compressor spinquant/mappings.py).
  const std::string attn = "re:.*self_attn$", q = "re:.*q_proj$", k = "re:.*k_proj$",
                    v = "re:.*v_proj$", o = "re:.*o_proj$", embed = "re:.*embed_tokens$",
                    up = "re:.*up_proj$", gate = "re:.*gate_proj$", down = "re:.*down_proj$",
                    head = "lm_head";
  using L = TransformLocation;
  TransformConfig c;
  if (has("R1")) {
    c.config_groups.emplace_back(
        "R1", scheme(block, {{{embed, o, down}, L::kWeightOutput, false, {}},
                             {{q, k, v, up, gate, head}, L::kWeightInput, true, {}}}));
  }
  if (has("R2")) {
    c.config_groups.emplace_back("R2", scheme(head_dim, {{{v}, L::kWeightOutput, false, {}},
                                                         {{o}, L::kWeightInput, true, {}}}));
  }
  if (has("R3")) {
    c.config_groups.emplace_back(
        "R3", scheme(head_dim, {{{attn}, L::kQAttn, false, {}}, {{attn}, L::kKCache, false, {}}}));
  }
  if (has("R4")) {
    c.config_groups.emplace_back(
        "R4", scheme(block, {{{down}, L::kInput, false, {}}, {{down}, L::kWeightInput, true, {}}}));
  }
  return c;
}

}  // namespace kvq::quant
