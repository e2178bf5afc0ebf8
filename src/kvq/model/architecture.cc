#include "kvq/model/architecture.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/model/compressed_linear.h"

namespace kvq::model {
namespace {

const std::array<Architecture, 6>& table() {
  static const std::array<Architecture, 6> rows = {
      Architecture{
          .hf_class = "LlamaForCausalLM",
          .model_type = "llama",
          .hidden_act = "silu",
          .forward = {},
          .causal_lm_classes = {"LlamaForCausalLM", "LlamaPreTrainedModel", "PreTrainedModel",
                                "Module"},
          .model_classes = {"LlamaModel", "LlamaPreTrainedModel", "PreTrainedModel", "Module"},
          .decoder_layer_classes = {"LlamaDecoderLayer", "GradientCheckpointingLayer", "Module"},
          .attention_classes = {"LlamaAttention", "Module"},
          .mlp_classes = {"LlamaMLP", "Module"},
          .norm_classes = {"LlamaRMSNorm", "Module"},
          .rotary_classes = {"LlamaRotaryEmbedding", "Module"},
          .activation_classes = {"SiLUActivation", "Module"},
      },
      Architecture{
          .hf_class = "Qwen2ForCausalLM",
          .model_type = "qwen2",
          .hidden_act = "silu",
          .forward = {.qkv_bias = true, .window_layers = WindowLayers::kOptIn},
          .causal_lm_classes = {"Qwen2ForCausalLM", "Qwen2PreTrainedModel", "PreTrainedModel",
                                "Module"},
          .model_classes = {"Qwen2Model", "Qwen2PreTrainedModel", "PreTrainedModel", "Module"},
          .decoder_layer_classes = {"Qwen2DecoderLayer", "GradientCheckpointingLayer", "Module"},
          .attention_classes = {"Qwen2Attention", "Module"},
          .mlp_classes = {"Qwen2MLP", "Module"},
          .norm_classes = {"Qwen2RMSNorm", "Module"},
          .rotary_classes = {"Qwen2RotaryEmbedding", "Module"},
          .activation_classes = {"SiLUActivation", "Module"},
      },
      Architecture{
          .hf_class = "Qwen3ForCausalLM",
          .model_type = "qwen3",
          .hidden_act = "silu",
          .forward = {.qk_norm = true, .window_layers = WindowLayers::kOptIn},
          .causal_lm_classes = {"Qwen3ForCausalLM", "Qwen3PreTrainedModel", "PreTrainedModel",
                                "Module"},
          .model_classes = {"Qwen3Model", "Qwen3PreTrainedModel", "PreTrainedModel", "Module"},
          .decoder_layer_classes = {"Qwen3DecoderLayer", "GradientCheckpointingLayer", "Module"},
          .attention_classes = {"Qwen3Attention", "Module"},
          .mlp_classes = {"Qwen3MLP", "Module"},
          .norm_classes = {"Qwen3RMSNorm", "Module"},
          .rotary_classes = {"Qwen3RotaryEmbedding", "Module"},
          .activation_classes = {"SiLUActivation", "Module"},
      },
      Architecture{
          .hf_class = "MistralForCausalLM",
          .model_type = "mistral",
          .hidden_act = "silu",
          .forward = {.window_layers = WindowLayers::kAll},
          .causal_lm_classes = {"MistralForCausalLM", "MistralPreTrainedModel", "PreTrainedModel",
                                "Module"},
          .model_classes = {"MistralModel", "MistralPreTrainedModel", "PreTrainedModel", "Module"},
          .decoder_layer_classes = {"MistralDecoderLayer", "GradientCheckpointingLayer", "Module"},
          .attention_classes = {"MistralAttention", "Module"},
          .mlp_classes = {"MistralMLP", "Module"},
          .norm_classes = {"MistralRMSNorm", "Module"},
          .rotary_classes = {"MistralRotaryEmbedding", "Module"},
          .activation_classes = {"SiLUActivation", "Module"},
      },
      Architecture{
          .hf_class = "Gemma3ForCausalLM",
          .model_type = "gemma3_text",
          .hidden_act = "gelu_pytorch_tanh",
          .forward = {.norm = NormKind::kRmsOnePlus,
                      .norm_placement = NormPlacement::kSandwich,
                      .qk_norm = true,
                      .window_layers = WindowLayers::kPattern,
                      .scale_embeddings = true,
                      .activation = MlpActivation::kGeluTanh,
                      .query_pre_attn_scalar = true,
                      .local_rope = true,
                      .final_softcapping = true},
          .causal_lm_classes = {"Gemma3ForCausalLM", "Gemma3PreTrainedModel", "PreTrainedModel",
                                "Module"},
          .model_classes = {"Gemma3TextModel", "Gemma3PreTrainedModel", "PreTrainedModel",
                            "Module"},
          .decoder_layer_classes = {"Gemma3DecoderLayer", "GradientCheckpointingLayer", "Module"},
          .attention_classes = {"Gemma3Attention", "Module"},
          .mlp_classes = {"Gemma3MLP", "Module"},
          .norm_classes = {"Gemma3RMSNorm", "Module"},
          .rotary_classes = {"Gemma3RotaryEmbedding", "Module"},
          .activation_classes = {"GELUTanh", "Module"},
          .embedding_classes = {"Gemma3TextScaledWordEmbedding", "Embedding", "Module"},
      },
      // Phi-3 (mini / small-context variants): Llama's forward with an optional sliding window
      // on every layer; fused qkv_proj / gate_up_proj in the checkpoint, split at load.
      Architecture{
          .hf_class = "Phi3ForCausalLM",
          .model_type = "phi3",
          .hidden_act = "silu",
          .forward = {.window_layers = WindowLayers::kAll},
          .default_sliding_window = 0,
          .fused_linears = {{.name = "self_attn.qkv_proj",
                             .parts = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
                            {.name = "mlp.gate_up_proj",
                             .parts = {"mlp.gate_proj", "mlp.up_proj"}}},
          .o_proj_first = true,
          .activation_module = "activation_fn",
          .layer_dropouts = {"resid_attn_dropout", "resid_mlp_dropout"},
          .causal_lm_classes = {"Phi3ForCausalLM", "Phi3PreTrainedModel", "PreTrainedModel",
                                "Module"},
          .model_classes = {"Phi3Model", "Phi3PreTrainedModel", "PreTrainedModel", "Module"},
          .decoder_layer_classes = {"Phi3DecoderLayer", "GradientCheckpointingLayer", "Module"},
          .attention_classes = {"Phi3Attention", "Module"},
          .mlp_classes = {"Phi3MLP", "Module"},
          .norm_classes = {"Phi3RMSNorm", "Module"},
          .rotary_classes = {"Phi3RotaryEmbedding", "Module"},
          .activation_classes = {"SiLUActivation", "Module"},
      },
  };
  return rows;
}

std::string supported_list() {
  std::string s;
  for (const Architecture& a : architectures()) {
    s += fmt::format("{}{} (model_type {})", s.empty() ? "" : ", ", a.hf_class, a.model_type);
  }
  return s;
}

// The first `limit` names, then how many there are.
std::string name_list(const std::vector<std::string>& names, std::size_t limit = 5) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += fmt::format(", ... ({} in all)", names.size());
  return s;
}

// A transform's own weight as compressed-tensors saves it ("<module>.R3_q_attn.weight": the
// matrix, which kvq computes itself), when the config carries a transform_config.
bool is_transform_weight(const model::ModelConfig& c, std::string_view name) {
  const auto q = c.raw.find("quantization_config");
  if (q == c.raw.end() || !q->is_object()) return false;
  const auto t = q->find("transform_config");
  if (t == q->end() || !t->is_object() || t->empty()) return false;
  if (!name.ends_with(".weight")) return false;
  name.remove_suffix(7);
  static constexpr std::array<std::string_view, 6> kLocations = {
      "_q_attn", "_k_cache", "_weight_input", "_weight_output", "_input", "_output"};
  for (std::string_view l : kLocations) {
    if (name.ends_with(l)) return true;
  }
  return false;
}

// `window` on the layers config.layer_types names "sliding_attention", 0 on the others.
std::vector<std::int64_t> windows_of_layer_types(const model::ModelConfig& c, std::int64_t window,
                                                 std::string_view source) {
  const auto layers = static_cast<std::size_t>(c.num_hidden_layers);
  if (c.layer_types.size() != layers) {
    fail<ConfigError>("{}: layer_types lists {} layers but num_hidden_layers is {}", source,
                      c.layer_types.size(), layers);
  }
  std::vector<std::int64_t> out(layers, 0);
  for (std::size_t l = 0; l < layers; ++l) {
    const std::string& type = c.layer_types[l];
    if (type == "sliding_attention") {
      out[l] = window;
    } else if (type != "full_attention") {
      fail<ConfigError>(
          "{}: layer_types[{}] is '{}'; kvq runs 'full_attention' and 'sliding_attention'", source,
          l, type);
    }
  }
  return out;
}

}  // namespace

std::span<const Architecture> architectures() { return table(); }

bool is_attention_qparam(const model::ModelConfig& c, std::string_view name) {
  constexpr std::string_view kLayers = "model.layers.", kAttn = ".self_attn.";
  if (!name.starts_with(kLayers)) return false;
  name.remove_prefix(kLayers.size());
  std::int64_t layer = 0;
  std::size_t digits = 0;
  while (digits < name.size() && digits < 10 && name[digits] >= '0' && name[digits] <= '9') {
    layer = layer * 10 + (name[digits++] - '0');
  }
  if (digits == 0 || layer >= c.num_hidden_layers) return false;
  name.remove_prefix(digits);
  if (!name.starts_with(kAttn)) return false;
  name.remove_prefix(kAttn.size());
  if (name.size() < 3 || (name[0] != 'q' && name[0] != 'k' && name[0] != 'v') || name[1] != '_') {
    return false;
  }
  const std::string_view kind = name.substr(2);
  return kind == "scale" || kind == "zero_point" || kind == "global_scale";
}

const Architecture& find_architecture(const model::ModelConfig& c, std::string_view source) {
  const Architecture* found = nullptr;
  std::string asked;
  if (!c.architectures.empty()) {
    asked = c.architectures.front();
    for (const Architecture& a : architectures()) {
      if (a.hf_class == asked) found = &a;
    }
  } else {
    asked = c.model_type.empty() ? std::string("(none: config.json names no architectures)")
                                 : "model_type " + c.model_type;
    for (const Architecture& a : architectures()) {
      if (a.model_type == c.model_type) found = &a;
    }
  }
  if (found == nullptr) {
    // The multimodal Gemma 3 checkpoints (gemma-3-4b and up) nest the text model's config under
    // text_config and its tensors under model.language_model, next to a vision tower.
    const std::string_view hint =
        asked == "Gemma3ForConditionalGeneration" || c.model_type == "gemma3"
            ? " (the multimodal Gemma 3: kvq runs the text-only Gemma3ForCausalLM, "
              "model_type gemma3_text)"
            : "";
    fail<NotSupported>("{}: architecture {} is not supported{}; kvq runs {}", source, asked, hint,
                       supported_list());
  }
  if (!c.hidden_act.empty() && c.hidden_act != found->hidden_act) {
    fail<NotSupported>("{}: hidden_act '{}' is not supported for {} (kvq runs '{}')", source,
                       c.hidden_act, found->hf_class, found->hidden_act);
  }
  return *found;
}

void check_forward_support(const Architecture& arch, const model::ModelConfig& c,
                           std::string_view source) {
  std::vector<std::string> missing;
  // Gemma's classes read these fields next to final_logit_softcapping (the rows with
  // final_softcapping); the other families' classes ignore them, and so does kvq.
  if (arch.forward.final_softcapping && c.attn_logit_softcapping) {
    missing.push_back(fmt::format("attn_logit_softcapping {}", *c.attn_logit_softcapping));
  }
  if (arch.forward.final_softcapping && c.use_bidirectional_attention) {
    missing.push_back("use_bidirectional_attention");
  }
  // transformers rotates the first head_dim · factor dimensions only (Phi-4-mini: 0.75); kvq's
  // RoPE rotates every dimension.
  if (c.partial_rotary_factor != 1.0) {
    missing.push_back(fmt::format("partial_rotary_factor {}", c.partial_rotary_factor));
  }
  if (!missing.empty()) {
    fail<NotSupported>("{}: {} needs what kvq's forward pass does not implement yet: {}", source,
                       arch.hf_class, name_list(missing, missing.size()));
  }
}

std::vector<std::int64_t> layer_windows(const Architecture& arch, const model::ModelConfig& c,
                                        std::string_view source) {
  const auto layers = static_cast<std::size_t>(c.num_hidden_layers);
  std::vector<std::int64_t> out(layers, 0);
  // transformers' config default when config.json has no "sliding_window" (MistralConfig,
  // Qwen2Config, Qwen3Config, Gemma3TextConfig all say 4096, Phi3Config none); null is 0, no
  // window.
  const std::int64_t window = c.sliding_window.value_or(arch.default_sliding_window);
  switch (arch.forward.window_layers) {
    case WindowLayers::kNone:
      return out;
    case WindowLayers::kAll:
      std::fill(out.begin(), out.end(), window);
      return out;
    case WindowLayers::kPattern:
      if (window == 0) return out;
      if (c.layer_types.empty()) {  // Gemma3TextConfig.__post_init__
        const std::int64_t pattern = c.sliding_window_pattern.value_or(6);
        for (std::size_t l = 0; l < layers; ++l) {
          if ((static_cast<std::int64_t>(l) + 1) % pattern != 0) out[l] = window;
        }
        return out;
      }
      return windows_of_layer_types(c, window, source);
    case WindowLayers::kOptIn:
      if (!c.use_sliding_window.value_or(false) || window == 0) return out;
      if (c.layer_types.empty()) {
        const std::int64_t from = c.max_window_layers.value_or(28);
        for (std::size_t l = 0; l < layers; ++l) {
          if (static_cast<std::int64_t>(l) >= from) out[l] = window;
        }
        return out;
      }
      return windows_of_layer_types(c, window, source);
  }
  return out;
}

namespace {

// The tensors of kvq's modules (every Linear its own tensor), in module order.
std::vector<TensorSpec> module_tensors(const Architecture& arch, const model::ModelConfig& c) {
  const ForwardSpec& f = arch.forward;
  const std::int64_t h = c.hidden_size, inter = c.intermediate_size;
  const std::int64_t q_rows = c.num_attention_heads * c.head_dim;
  const std::int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  std::vector<TensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "self_attn.q_proj.weight", {q_rows, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_rows, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_rows, h}});
    if (f.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q_rows}});
      out.push_back({p + "self_attn.k_proj.bias", {kv_rows}});
      out.push_back({p + "self_attn.v_proj.bias", {kv_rows}});
    }
    if (f.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q_rows}});
    out.push_back({p + "mlp.gate_proj.weight", {inter, h}});
    out.push_back({p + "mlp.up_proj.weight", {inter, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, inter}});
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    if (f.norm_placement == NormPlacement::kSandwich) {
      out.push_back({p + "pre_feedforward_layernorm.weight", {h}});
      out.push_back({p + "post_feedforward_layernorm.weight", {h}});
    }
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

std::string layer_prefix(std::int64_t layer) { return fmt::format("model.layers.{}.", layer); }

}  // namespace

std::vector<TensorSpec> expected_tensors(const Architecture& arch, const model::ModelConfig& c) {
  std::vector<TensorSpec> unfused = module_tensors(arch, c);
  if (arch.fused_linears.empty()) return unfused;
  // Part tensor name → (fused tensor name, whether it is the first part).
  std::map<std::string, std::pair<std::string, bool>> part_of;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    for (const FusedLinear& f : arch.fused_linears) {
      for (std::size_t i = 0; i < f.parts.size(); ++i) {
        part_of[p + std::string(f.parts[i]) + ".weight"] = {p + std::string(f.name) + ".weight",
                                                            i == 0};
      }
    }
  }
  std::map<std::string, std::int64_t> rows;
  for (const TensorSpec& t : unfused) {
    auto it = part_of.find(t.name);
    if (it != part_of.end()) rows[it->second.first] += t.shape[0];
  }
  std::vector<TensorSpec> out;
  for (TensorSpec& t : unfused) {
    auto it = part_of.find(t.name);
    if (it == part_of.end()) {
      out.push_back(std::move(t));
    } else if (it->second.second) {  // the fused tensor where its first part was
      out.push_back({it->second.first, {rows[it->second.first], t.shape[1]}});
    }
  }
  return out;
}

std::map<std::string, Tensor> split_fused_linears(const Architecture& arch,
                                                  const model::ModelConfig& c,
                                                  const std::map<std::string, Tensor>& weights,
                                                  std::string_view source) {
  std::map<std::string, Tensor> out = weights;
  if (arch.fused_linears.empty()) return out;
  std::map<std::string, Shape> part_shapes;
  for (const TensorSpec& t : module_tensors(arch, c)) part_shapes.emplace(t.name, t.shape);
  for (const FusedModule& f : fused_modules(arch, c)) {
    const std::string name = f.name + ".weight";
    auto it = out.find(name);
    if (it == out.end()) continue;  // check_checkpoint_tensors names what is missing
    const Tensor fused = it->second;
    std::vector<Shape> shapes;
    std::int64_t rows = 0;
    std::string split;
    for (const std::string& part : f.parts) {
      const Shape& s = part_shapes.at(part + ".weight");
      shapes.push_back(s);
      rows += s[0];
      const std::string_view short_name = std::string_view(part).substr(part.rfind('.') + 1);
      split += fmt::format("{}{} {}", split.empty() ? "" : " + ", short_name, s[0]);
    }
    const Shape want = {rows, shapes.front()[1]};
    if (fused.shape() != want) {
      fail<ConfigError>(
          "{}: tensor '{}' has shape {} but the config implies {} (rows {}; hidden_size {}, heads "
          "{}, kv heads {}, head_dim {}, intermediate_size {})",
          source, name, shape_str(fused.shape()), shape_str(want), split, c.hidden_size,
          c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size);
    }
    auto owner = std::make_shared<const Tensor>(fused);
    const auto* bytes = static_cast<const std::uint8_t*>(fused.data());
    const std::size_t row_bytes = static_cast<std::size_t>(want[1]) * dtype_size(fused.dtype());
    std::int64_t row = 0;
    for (std::size_t i = 0; i < f.parts.size(); ++i) {
      const std::string part = f.parts[i] + ".weight";
      if (out.contains(part)) {
        fail<ConfigError>("{}: the checkpoint holds both '{}' and '{}', which holds its rows",
                          source, part, name);
      }
      out.emplace(part, Tensor::view(fused.dtype(), shapes[i],
                                     bytes + static_cast<std::size_t>(row) * row_bytes, owner));
      row += shapes[i][0];
    }
    out.erase(name);
  }
  return out;
}

std::optional<FusedModule> fused_module_of(const Architecture& arch, std::string_view module) {
  constexpr std::string_view kLayers = "model.layers.";
  if (arch.fused_linears.empty() || !module.starts_with(kLayers)) return std::nullopt;
  const std::size_t dot = module.find('.', kLayers.size());
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string prefix(module.substr(0, dot + 1));  // "model.layers.3."
  const std::string_view rest = module.substr(dot + 1);
  for (const FusedLinear& f : arch.fused_linears) {
    for (std::string_view part : f.parts) {
      if (part != rest) continue;
      FusedModule out{prefix + std::string(f.name), {}};
      for (std::string_view p : f.parts) out.parts.push_back(prefix + std::string(p));
      return out;
    }
  }
  return std::nullopt;
}

std::vector<FusedModule> fused_modules(const Architecture& arch, const model::ModelConfig& c) {
  std::vector<FusedModule> out;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    for (const FusedLinear& f : arch.fused_linears) {
      FusedModule m{p + std::string(f.name), {}};
      for (std::string_view part : f.parts) m.parts.push_back(p + std::string(part));
      out.push_back(std::move(m));
    }
  }
  return out;
}

void check_checkpoint_tensors(const Architecture& arch, const model::ModelConfig& c,
                              const std::map<std::string, Shape>& tensors,
                              std::string_view source) {
  std::vector<std::string> missing;
  std::set<std::string> known;
  for (const TensorSpec& t : expected_tensors(arch, c)) {
    known.insert(t.name);
    auto it = tensors.find(t.name);
    if (it == tensors.end()) {
      missing.push_back(t.name);
      continue;
    }
    if (it->second != t.shape) {
      fail<ConfigError>(
          "{}: tensor '{}' has shape {} but the config implies {} (hidden_size {}, heads {}, kv "
          "heads {}, head_dim {}, intermediate_size {}, vocab_size {})",
          source, t.name, shape_str(it->second), shape_str(t.shape), c.hidden_size,
          c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size,
          c.vocab_size);
    }
  }
  // Layers past num_hidden_layers mean the config and the weights describe different models.
  const std::string extra_layer = fmt::format("model.layers.{}.", c.num_hidden_layers);
  for (const auto& [name, shape] : tensors) {
    if (name.starts_with(extra_layer)) {
      fail<ConfigError>("{}: tensor '{}' exists but num_hidden_layers is {}", source, name,
                        c.num_hidden_layers);
    }
  }
  std::vector<std::string> quantized;
  for (const auto& [name, shape] : tensors) {
    if (is_compressed_linear_tensor(name)) quantized.push_back(name);
  }
  if (!quantized.empty()) {
    fail<NotSupported>(
        "{}: the checkpoint holds quantized Linear weights ({}) that were not dequantized "
        "(CausalLM's load dequantizes compressed-tensors' formats first: "
        "model/compressed_linear.h)",
        source, name_list(quantized));
  }
  if (!missing.empty()) {
    fail<ConfigError>("{}: the weights lack tensors the config requires: {}", source,
                      name_list(missing));
  }
  std::vector<std::string> unknown;
  for (const auto& [name, shape] : tensors) {
    if (known.contains(name) || is_attention_qparam(c, name) || is_transform_weight(c, name)) {
      continue;
    }
    if (name == "lm_head.weight" || name.ends_with("rotary_emb.inv_freq")) continue;
    unknown.push_back(name);
  }
  if (!unknown.empty()) {
    fail<NotSupported>(
        "{}: tensors that {} has no place for: {} (kvq refuses to drop weights it cannot run; a "
        "model with biases or extra norms needs its own architecture row)",
        source, arch.hf_class, name_list(unknown));
  }
}

}  // namespace kvq::model
