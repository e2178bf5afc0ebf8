#include "kvq/model/model_config.h"

#include <cmath>

#include <fmt/format.h>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/core/tensor.h"
#include "kvq/io/json_file.h"

namespace kvq::model {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

// A present, non-null field.
const json* field(const json& j, std::string_view key) {
  const auto it = j.find(std::string(key));
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::int64_t as_int(const json& v, std::string_view source, std::string_view key) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  // Some configs write integral values as floats ("factor": 8.0 is fine, but a head count of 9.0
  // is suspicious); accept exact integers only.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) {
      return static_cast<std::int64_t>(d);
    }
  }
  fail<ConfigError>("{}: field '{}' must be an integer, got {}", source, key, v.dump());
}

double as_double(const json& v, std::string_view source, std::string_view key) {
  if (v.is_number()) return v.get<double>();
  fail<ConfigError>("{}: field '{}' must be a number, got {}", source, key, v.dump());
}

bool as_bool(const json& v, std::string_view source, std::string_view key) {
  if (v.is_boolean()) return v.get<bool>();
  fail<ConfigError>("{}: field '{}' must be true or false, got {}", source, key, v.dump());
}

std::int64_t required_int(const json& j, std::string_view source, std::string_view key) {
  const json* v = field(j, key);
  if (v == nullptr) fail<ConfigError>("{}: missing field '{}'", source, key);
  return as_int(*v, source, key);
}

std::optional<std::int64_t> optional_int(const json& j, std::string_view source,
                                         std::string_view key) {
  const json* v = field(j, key);
  if (v == nullptr) return std::nullopt;
  return as_int(*v, source, key);
}

std::optional<double> optional_double(const json& j, std::string_view source,
                                      std::string_view key) {
  const json* v = field(j, key);
  if (v == nullptr) return std::nullopt;
  return as_double(*v, source, key);
}

// "eos_token_id": 2 or [2, 7]
std::vector<std::int64_t> token_id_list(const json& j, std::string_view source,
                                        std::string_view key) {
  std::vector<std::int64_t> out;
  const json* v = field(j, key);
  if (v == nullptr) return out;
  if (v->is_array()) {
    for (const auto& e : *v) out.push_back(as_int(e, source, key));
  } else {
    out.push_back(as_int(*v, source, key));
  }
  return out;
}

void require_positive(std::int64_t value, std::string_view source, std::string_view key) {
  if (value <= 0) fail<ConfigError>("{}: field '{}' must be positive, got {}", source, key, value);
}

// Sane maxima, each far above any released model (the largest have 126 layers, hidden 16384,
// 128 heads, head_dim 256, vocab 256k, intermediate 53248, context 10M): a corrupt or hostile
// config.json fails here, naming the field, instead of building a billion layers or allocating
// until std::bad_alloc before the tensors' shapes are compared.
struct Bound {
  std::string_view key;
  std::int64_t max;
};
constexpr Bound kBounds[] = {
    {"hidden_size", 1 << 17},
    {"num_hidden_layers", 4096},
    {"num_attention_heads", 1 << 12},
    {"num_key_value_heads", 1 << 12},
    {"head_dim", 1 << 12},
    {"intermediate_size", 1 << 20},
    {"vocab_size", 1 << 24},
    {"max_position_embeddings", std::int64_t{1} << 28},
};
void require_sane(std::int64_t value, std::string_view source, std::string_view key) {
  for (const Bound& b : kBounds)
    if (b.key == key && value > b.max)
      fail<ConfigError>("{}: field '{}' is {}, beyond kvq's limit of {} (a corrupt config?)",
                        source, key, value, b.max);
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5; also holds rope_theta).
RopeScaling parse_rope_scaling(const json& r, std::string_view source, std::string_view key) {
  RopeScaling s;
  if (!r.is_object()) fail<ConfigError>("{}: field '{}' must be an object or null", source, key);
  const json* type = field(r, "rope_type");
  if (type == nullptr) type = field(r, "type");  // older configs spell it "type"
  if (type != nullptr) {
    if (!type->is_string())
      fail<ConfigError>("{}: field '{}.rope_type' must be a string", source, key);
    s.rope_type = type->get<std::string>();
  }
  const auto need = [&](std::string_view name) -> const json& {
    const json* v = field(r, name);
    if (v == nullptr) {
      fail<ConfigError>("{}: rope scaling type '{}' needs field '{}.{}'", source, s.rope_type, key,
                        name);
    }
    return *v;
  };
  if (s.rope_type == "default") return s;
  if (s.rope_type == "linear") {
    s.factor = as_double(need("factor"), source, "rope_scaling.factor");
  } else if (s.rope_type == "llama3") {
    s.factor = as_double(need("factor"), source, "rope_scaling.factor");
    s.low_freq_factor = as_double(need("low_freq_factor"), source, "rope_scaling.low_freq_factor");
    s.high_freq_factor =
        as_double(need("high_freq_factor"), source, "rope_scaling.high_freq_factor");
    s.original_max_position_embeddings = as_int(need("original_max_position_embeddings"), source,
                                                "rope_scaling.original_max_position_embeddings");
    require_positive(s.original_max_position_embeddings, source,
                     "rope_scaling.original_max_position_embeddings");
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      fail<ConfigError>("{}: rope_scaling high_freq_factor ({}) must exceed low_freq_factor ({})",
                        source, s.high_freq_factor, s.low_freq_factor);
    }
  } else if (s.rope_type == "longrope" || s.rope_type == "su") {
    // Phi-3 128k / Phi-3.5 (Phi3Config renames "su" to "longrope"). original_max_position_
    // embeddings may sit at the config's top level instead (parse_model_config fills it in).
    s.rope_type = "longrope";
    const auto factors = [&](std::string_view name) {
      const json& v = need(name);
      const std::string what = fmt::format("{}.{}", key, name);
      if (!v.is_array() || v.empty())
        fail<ConfigError>("{}: field '{}' must be a non-empty list of numbers", source, what);
      std::vector<double> out;
      for (const json& e : v) {
        out.push_back(as_double(e, source, what));
        if (!(out.back() > 0))
          fail<ConfigError>("{}: field '{}' holds {}, not a positive number", source, what,
                            out.back());
      }
      return out;
    };
    s.short_factor = factors("short_factor");
    s.long_factor = factors("long_factor");
    if (const json* f = field(r, "factor"); f != nullptr && !f->is_null()) {
      s.factor = as_double(*f, source, "rope_scaling.factor");
      s.factor_given = true;
    }
    if (const json* a = field(r, "attention_factor"); a != nullptr && !a->is_null())
      s.attention_factor = as_double(*a, source, "rope_scaling.attention_factor");
    if (const json* o = field(r, "original_max_position_embeddings"))
      s.original_max_position_embeddings =
          as_int(*o, source, "rope_scaling.original_max_position_embeddings");
  } else {
    fail<NotSupported>(
        "{}: field '{}.rope_type' is '{}', which kvq does not run (supported: default, linear, "
        "llama3, longrope)",
        source, key, s.rope_type);
  }
  if (!(s.factor > 0)) {
    fail<ConfigError>("{}: rope_scaling factor must be positive, got {}", source, s.factor);
  }
  return s;
}

}  // namespace

ModelConfig parse_model_config(const json& j, std::string_view source) {
  if (!j.is_object()) fail<ConfigError>("{}: must be a JSON object", source);
  ModelConfig c;
  c.raw = j;
  if (const json* a = field(j, "architectures")) {
    if (!a->is_array()) fail<ConfigError>("{}: field 'architectures' must be a list", source);
    for (const auto& e : *a) {
      if (!e.is_string()) fail<ConfigError>("{}: field 'architectures' must list strings", source);
      c.architectures.push_back(e.get<std::string>());
    }
  }
  if (const json* t = field(j, "model_type")) {
    if (!t->is_string()) fail<ConfigError>("{}: field 'model_type' must be a string", source);
    c.model_type = t->get<std::string>();
  }

  c.hidden_size = required_int(j, source, "hidden_size");
  c.num_hidden_layers = required_int(j, source, "num_hidden_layers");
  c.num_attention_heads = required_int(j, source, "num_attention_heads");
  c.intermediate_size = required_int(j, source, "intermediate_size");
  c.vocab_size = required_int(j, source, "vocab_size");
  for (const auto& [key, value] :
       {std::pair<std::string_view, std::int64_t>{"hidden_size", c.hidden_size},
        {"num_hidden_layers", c.num_hidden_layers},
        {"num_attention_heads", c.num_attention_heads},
        {"intermediate_size", c.intermediate_size},
        {"vocab_size", c.vocab_size}}) {
    require_positive(value, source, key);
    require_sane(value, source, key);
  }
  c.num_key_value_heads =
      optional_int(j, source, "num_key_value_heads").value_or(c.num_attention_heads);
  require_positive(c.num_key_value_heads, source, "num_key_value_heads");
  require_sane(c.num_key_value_heads, source, "num_key_value_heads");
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail<ConfigError>("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                      source, c.num_attention_heads, c.num_key_value_heads);
  }
  if (const auto hd = optional_int(j, source, "head_dim")) {
    c.head_dim = *hd;
    require_positive(c.head_dim, source, "head_dim");
    require_sane(c.head_dim, source, "head_dim");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      fail<ConfigError>(
          "{}: no 'head_dim' and hidden_size ({}) is not a multiple of "
          "num_attention_heads ({})",
          source, c.hidden_size, c.num_attention_heads);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings = optional_int(j, source, "max_position_embeddings").value_or(2048);
  require_positive(c.max_position_embeddings, source, "max_position_embeddings");
  require_sane(c.max_position_embeddings, source, "max_position_embeddings");
  c.rms_norm_eps = optional_double(j, source, "rms_norm_eps").value_or(1e-6);
  if (!(c.rms_norm_eps > 0)) {
    fail<ConfigError>("{}: field 'rms_norm_eps' must be positive, got {}", source, c.rms_norm_eps);
  }

  // transformers 5 moved rope_theta and the scaling into "rope_parameters"; accept both. Gemma 3
  // has one RoPE per layer type: rope_parameters {"full_attention": {...}, "sliding_attention":
  // {...}} in transformers 5; rope_theta + rope_scaling (global layers) and rope_local_base_freq
  // (sliding layers) before, with Gemma3TextConfig's defaults 1e6 and 1e4.
  const bool gemma3 = c.model_type == "gemma3_text";
  c.rope_theta = optional_double(j, source, "rope_theta").value_or(gemma3 ? 1e6 : 10000.0);
  if (gemma3) c.rope_local_theta = optional_double(j, source, "rope_local_base_freq").value_or(1e4);
  // One RoPE's parameters (rope_type, scaling, rope_theta) from the object `r` named `key`.
  const auto read_rope = [&](const json& r, std::string_view key, RopeScaling& scaling,
                             double& theta) {
    scaling = parse_rope_scaling(r, source, key);
    if (const json* t = field(r, "rope_theta")) {
      theta = as_double(*t, source, fmt::format("{}.rope_theta", key));
    }
  };
  // partial_rotary_factor: at the top (transformers 4), or in the RoPE object, which wins
  // (Phi3Config: rope_parameters.setdefault("partial_rotary_factor", the top-level value)).
  const auto read_partial = [&](const json& r, std::string_view key) {
    if (const json* p = r.is_object() ? field(r, "partial_rotary_factor") : nullptr) {
      c.partial_rotary_factor = as_double(*p, source, key);
    }
  };
  read_partial(j, "partial_rotary_factor");
  const json* rp = field(j, "rope_parameters");
  if (rp != nullptr && rp->is_object() &&
      (rp->contains("full_attention") || rp->contains("sliding_attention"))) {
    if (const json* full = field(*rp, "full_attention")) {
      read_rope(*full, "rope_parameters.full_attention", c.rope_scaling, c.rope_theta);
    }
    if (const json* sliding = field(*rp, "sliding_attention")) {
      if (c.rope_local_theta == 0) c.rope_local_theta = c.rope_theta;
      read_rope(*sliding, "rope_parameters.sliding_attention", c.rope_local_scaling,
                c.rope_local_theta);
    }
  } else if (rp != nullptr) {
    read_rope(*rp, "rope_parameters", c.rope_scaling, c.rope_theta);
    read_partial(*rp, "rope_parameters.partial_rotary_factor");
  } else if (const json* rs = field(j, "rope_scaling")) {
    c.rope_scaling = parse_rope_scaling(*rs, source, "rope_scaling");
    read_partial(*rs, "rope_scaling.partial_rotary_factor");
  }
  if (!(c.rope_theta > 0)) {
    fail<ConfigError>("{}: field 'rope_theta' must be positive, got {}", source, c.rope_theta);
  }
  if (c.rope_local_scaling.rope_type == "longrope")
    fail<NotSupported>("{}: longrope on the sliding layers' RoPE is not supported", source);
  if (c.rope_scaling.rope_type == "longrope") {
    RopeScaling& rs = c.rope_scaling;
    if (rs.original_max_position_embeddings == 0)
      rs.original_max_position_embeddings =
          optional_int(j, source, "original_max_position_embeddings").value_or(0);
    if (rs.original_max_position_embeddings <= 0)
      fail<ConfigError>(
          "{}: longrope needs original_max_position_embeddings (in the rope parameters or at "
          "the top level)",
          source);
    const auto half = static_cast<std::size_t>(c.head_dim / 2);
    if (rs.short_factor.size() != half || rs.long_factor.size() != half)
      fail<ConfigError>(
          "{}: longrope short_factor / long_factor have {} / {} entries, head_dim / 2 is {}",
          source, rs.short_factor.size(), rs.long_factor.size(), half);
    // transformers: factor defaults to max_position_embeddings / original (Phi-3's convention).
    if (!rs.factor_given)
      rs.factor = static_cast<double>(c.max_position_embeddings) /
                  static_cast<double>(rs.original_max_position_embeddings);
  }
  if (c.rope_local_theta < 0) {
    fail<ConfigError>("{}: the sliding layers' rope_theta must be positive, got {}", source,
                      c.rope_local_theta);
  }
  c.sliding_window_pattern = optional_int(j, source, "sliding_window_pattern");
  if (c.sliding_window_pattern) {
    require_positive(*c.sliding_window_pattern, source, "sliding_window_pattern");
  }
  c.query_pre_attn_scalar = optional_double(j, source, "query_pre_attn_scalar");
  if (c.query_pre_attn_scalar && !(*c.query_pre_attn_scalar > 0)) {
    fail<ConfigError>("{}: field 'query_pre_attn_scalar' must be positive, got {}", source,
                      *c.query_pre_attn_scalar);
  }
  c.final_logit_softcapping = optional_double(j, source, "final_logit_softcapping");
  c.attn_logit_softcapping = optional_double(j, source, "attn_logit_softcapping");
  for (const auto& [key, cap] : {std::pair<std::string_view, std::optional<double>>{
                                     "final_logit_softcapping", c.final_logit_softcapping},
                                 {"attn_logit_softcapping", c.attn_logit_softcapping}}) {
    if (cap && !(*cap > 0)) {
      fail<ConfigError>("{}: field '{}' must be positive or null, got {}", source, key, *cap);
    }
  }
  if (const json* t = field(j, "use_bidirectional_attention")) {
    c.use_bidirectional_attention = as_bool(*t, source, "use_bidirectional_attention");
  }

  if (const json* t = field(j, "tie_word_embeddings")) {
    c.tie_word_embeddings = as_bool(*t, source, "tie_word_embeddings");
  }
  if (const json* t = field(j, "attention_bias"))
    c.attention_bias = as_bool(*t, source, "attention_bias");
  if (const json* t = field(j, "mlp_bias")) c.mlp_bias = as_bool(*t, source, "mlp_bias");
  if (j.contains("sliding_window")) {
    const json* w = field(j, "sliding_window");
    c.sliding_window = w == nullptr ? 0 : as_int(*w, source, "sliding_window");
    if (*c.sliding_window < 0) {
      fail<ConfigError>("{}: field 'sliding_window' must be positive or null, got {}", source,
                        *c.sliding_window);
    }
  }
  if (const json* t = field(j, "use_sliding_window"))
    c.use_sliding_window = as_bool(*t, source, "use_sliding_window");
  c.max_window_layers = optional_int(j, source, "max_window_layers");
  if (const json* t = field(j, "layer_types")) {
    if (!t->is_array()) fail<ConfigError>("{}: field 'layer_types' must be a list", source);
    for (const auto& e : *t) {
      if (!e.is_string()) fail<ConfigError>("{}: field 'layer_types' must list strings", source);
      c.layer_types.push_back(e.get<std::string>());
    }
  }
  // Gemma's configs name the MLP activation "hidden_activation" (Gemma3TextConfig has no
  // hidden_act); the other families "hidden_act".
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (const json* t = field(j, key)) {
      if (!t->is_string()) fail<ConfigError>("{}: field '{}' must be a string", source, key);
      c.hidden_act = t->get<std::string>();
    }
  }
  c.bos_token_id = optional_int(j, source, "bos_token_id");
  c.pad_token_id = optional_int(j, source, "pad_token_id");
  c.eos_token_ids = token_id_list(j, source, "eos_token_id");

  const json* dtype = field(j, "torch_dtype");
  if (dtype == nullptr) dtype = field(j, "dtype");  // transformers 5 writes "dtype"
  if (dtype != nullptr) {
    if (!dtype->is_string()) fail<ConfigError>("{}: field 'torch_dtype' must be a string", source);
    std::string name = dtype->get<std::string>();
    const auto parsed = dtype_from_torch_name(name);
    if (!parsed || !dtype_is_float(*parsed)) {
      fail<ConfigError>("{}: field 'torch_dtype' has unknown floating type '{}'", source, name);
    }
    c.torch_dtype = std::string(dtype_torch_name(*parsed));
  } else {
    c.torch_dtype = "float32";
  }
  return c;
}

ModelConfig load_model_config(const fs::path& model_dir) {
  const fs::path path = model_dir / "config.json";
  return parse_model_config(io::read_json_file(path), path.string());
}

GenerationConfig parse_generation_config(const json& j, std::string_view source) {
  if (!j.is_object()) fail<ConfigError>("{}: must be a JSON object", source);
  GenerationConfig g;
  g.raw = j;
  g.eos_token_ids = token_id_list(j, source, "eos_token_id");
  g.bos_token_id = optional_int(j, source, "bos_token_id");
  g.pad_token_id = optional_int(j, source, "pad_token_id");
  g.temperature = optional_double(j, source, "temperature");
  g.top_p = optional_double(j, source, "top_p");
  g.top_k = optional_int(j, source, "top_k");
  g.max_new_tokens = optional_int(j, source, "max_new_tokens");
  if (const json* s = field(j, "do_sample")) g.do_sample = as_bool(*s, source, "do_sample");
  return g;
}

std::optional<GenerationConfig> load_generation_config(const fs::path& model_dir) {
  const fs::path path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return parse_generation_config(io::read_json_file(path), path.string());
}

json model_config_to_json(const ModelConfig& c) {
  json j = c.raw.is_object() ? c.raw : json::object();
  j["architectures"] =
      c.architectures.empty() ? std::vector<std::string>{"LlamaForCausalLM"} : c.architectures;
  j["model_type"] = c.model_type.empty() ? std::string("llama") : c.model_type;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  j[j.contains("hidden_activation") ? "hidden_activation" : "hidden_act"] =
      c.hidden_act.empty() ? std::string("silu") : c.hidden_act;
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  if (c.eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  if (c.sliding_window) {
    j["sliding_window"] = *c.sliding_window > 0 ? json(*c.sliding_window) : json(nullptr);
  }
  if (c.use_sliding_window) j["use_sliding_window"] = *c.use_sliding_window;
  if (c.max_window_layers) j["max_window_layers"] = *c.max_window_layers;
  if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
  j["torch_dtype"] = c.torch_dtype;
  j.erase("dtype");
  // Written in both spellings so transformers 4 (rope_theta + rope_scaling), transformers 5
  // (rope_parameters) and vLLM read the same values.
  j["rope_theta"] = c.rope_theta;
  // rope_scaling (null for "default") and rope_parameters (scaling + rope_theta) of one RoPE.
  const auto rope_json = [](const RopeScaling& rs, double theta) {
    json parameters = {{"rope_type", rs.rope_type}, {"rope_theta", theta}};
    if (rs.rope_type == "default") return std::pair{json(nullptr), parameters};
    json s = {{"rope_type", rs.rope_type}, {"factor", rs.factor}};
    if (rs.rope_type == "llama3") {
      s["low_freq_factor"] = rs.low_freq_factor;
      s["high_freq_factor"] = rs.high_freq_factor;
      s["original_max_position_embeddings"] = rs.original_max_position_embeddings;
    }
    parameters.update(s);
    return std::pair{s, parameters};
  };
  const auto [scaling, parameters] = rope_json(c.rope_scaling, c.rope_theta);
  j["rope_scaling"] = scaling;
  if (c.rope_local_theta > 0) {  // Gemma 3: one RoPE per layer type
    j["rope_local_base_freq"] = c.rope_local_theta;
    j["rope_parameters"] = {
        {"full_attention", parameters},
        {"sliding_attention", rope_json(c.rope_local_scaling, c.rope_local_theta).second}};
  } else {
    j["rope_parameters"] = parameters;
  }
  return j;
}

}  // namespace kvq::model
