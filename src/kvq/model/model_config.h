// Hugging Face config.json / generation_config.json of decoder-only models (the fields kvq's
// architectures read; model/architecture.h says which architectures run).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvq::model {

struct RopeScaling {
  std::string rope_type = "default";  // "default", "linear", "llama3", "longrope"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 0;
  // longrope (Phi-3 128k, Phi-3.5; "su" is read as "longrope"): per-frequency divisors
  // [head_dim / 2] for forwards that reach at most original_max_position_embeddings positions
  // (short) and beyond (long), and cos / sin's multiplier (attention_factor; unset = transformers'
  // default from factor, which defaults to max_position_embeddings / original).
  std::vector<double> short_factor, long_factor;
  std::optional<double> attention_factor;
  bool factor_given = false;
};

struct ModelConfig {
  std::vector<std::string> architectures;  // ["LlamaForCausalLM"]
  std::string model_type;                  // "llama"
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // falls back to num_attention_heads
  std::int64_t head_dim = 0;             // falls back to hidden_size / num_attention_heads
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // The fraction of each head's dimensions RoPE rotates ("partial_rotary_factor", at the top or
  // in rope_parameters / rope_scaling); kvq rotates all of them and refuses other values
  // (model/architecture.h: check_forward_support).
  double partial_rotary_factor = 1.0;
  bool tie_word_embeddings = false;
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;  // config "eos_token_id": int or list
  std::optional<std::int64_t> pad_token_id;
  std::string torch_dtype = "float32";  // "float32", "bfloat16", ... ("torch_dtype" or "dtype")
  bool attention_bias = false;
  bool mlp_bias = false;
  // Sliding-window attention, as config.json spells it; which layers use it is the family's
  // convention (ForwardSpec::window_layers, model/architecture.h: layer_windows).
  std::optional<std::int64_t> sliding_window;     // "sliding_window": > 0, 0 when null, nullopt
                                                  // when absent (the family's default applies)
  std::optional<bool> use_sliding_window;         // "use_sliding_window" (Qwen's switch)
  std::optional<std::int64_t> max_window_layers;  // "max_window_layers" (Qwen)
  std::vector<std::string> layer_types;  // "layer_types": "full_attention" / "sliding_attention"
                                         // per layer; empty when absent
  std::string hidden_act;                // "silu"; empty when config.json does not say
                                         // (Gemma 3 spells it "hidden_activation")
  // Gemma 3 (gemma3_text); the other families' rows do not read them.
  double rope_local_theta = 0;     // RoPE base of the sliding layers: rope_parameters
                                   // .sliding_attention.rope_theta or rope_local_base_freq; 0 when
                                   // the config has no per-layer-type RoPE
  RopeScaling rope_local_scaling;  // rope_parameters.sliding_attention's scaling
  std::optional<std::int64_t> sliding_window_pattern;  // every n-th layer global, without
                                                       // layer_types ("sliding_window_pattern")
  std::optional<double> query_pre_attn_scalar;         // attention scale = its ^-0.5
  std::optional<double> final_logit_softcapping;       // logits = cap · tanh(logits / cap)
  std::optional<double> attn_logit_softcapping;        // the same on attention scores
  bool use_bidirectional_attention = false;
  nlohmann::json raw;  // the whole config.json (quantization_config etc. stay here)
};

struct GenerationConfig {
  std::vector<std::int64_t> eos_token_ids;
  std::optional<std::int64_t> bos_token_id, pad_token_id;
  std::optional<double> temperature, top_p;
  std::optional<std::int64_t> top_k, max_new_tokens;
  bool do_sample = false;
  nlohmann::json raw;
};

// ConfigError naming `source_name` and the field; NotSupported for unknown rope scaling types.
ModelConfig parse_model_config(const nlohmann::json& j, std::string_view source_name);
ModelConfig load_model_config(const std::filesystem::path& model_dir);  // model_dir/config.json
GenerationConfig parse_generation_config(const nlohmann::json& j, std::string_view source_name);
// model_dir/generation_config.json, or nullopt when the file does not exist.
std::optional<GenerationConfig> load_generation_config(const std::filesystem::path& model_dir);
// HF LlamaConfig-style config.json content: `raw` with the typed fields written over it.
// (Whether the weights fit the config is the architecture's to say: model/architecture.h.)
nlohmann::json model_config_to_json(const ModelConfig& c);

}  // namespace kvq::model
