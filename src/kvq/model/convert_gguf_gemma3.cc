// `kvq convert` for general.architecture = gemma3 (text-only Gemma 3 GGUFs).
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/model/convert_gguf_plan.h"

namespace kvq::model::detail {
namespace {

using json = nlohmann::json;

double f32_to_decimal(float value) { return std::stod(fmt::format("{}", value)); }

// Gemma3TextConfig's defaults for what a gemma3 GGUF does not store.
constexpr std::int64_t kSlidingWindowPattern = 6;
constexpr double kRopeLocalTheta = 10000.0;
constexpr std::int64_t kMaxLayers = 1024;  // bounds the layer_types list a bad file could ask for
constexpr std::int64_t kQueryPreAttnScalar = 256;  // an int: transformers 5 validates the type

}  // namespace

json gemma3_config_json(const io::GgufFile& g, DType dtype) {
  const std::string arch = "gemma3";
  const auto u32 = [&](const char* key) { return g.get_u32(arch + "." + key); };
  const std::int64_t layers = u32("block_count");
  if (layers < 1 || layers > kMaxLayers) {
    fail<FormatError>("{}: {}.block_count = {} is outside [1, {}]", g.source(), arch, layers,
                      kMaxLayers);
  }
  const std::int64_t heads = u32("attention.head_count");
  const std::int64_t kv_heads = g.find_u32(arch + ".attention.head_count_kv").value_or(heads);
  if (heads == 0 || kv_heads == 0 || heads % kv_heads != 0) {
    fail<FormatError>("{}: {} attention heads and {} kv heads are inconsistent", g.source(), heads,
                      kv_heads);
  }
  const std::int64_t hidden = u32("embedding_length");
  const std::int64_t head_dim = g.find_u32(arch + ".attention.key_length")
                                    .value_or(static_cast<std::uint32_t>(hidden / heads));
  if (const auto v = g.find_u32(arch + ".attention.value_length"); v && *v != head_dim) {
    fail<NotSupported>("{}: attention.value_length {} != key_length {} is not supported",
                       g.source(), *v, head_dim);
  }
  for (const char* key : {".rope.scaling.type", ".final_logit_softcapping",
                          ".attn_logit_softcapping", ".attention.sliding_window_pattern"}) {
    if (g.has(arch + key)) {
      fail<NotSupported>("{}: metadata {}{} is not supported by kvq's gemma3 conversion",
                         g.source(), arch, key);
    }
  }
  std::int64_t vocab = 0;
  if (g.has(arch + ".vocab_size")) {
    vocab = u32("vocab_size");
  } else {
    vocab = static_cast<std::int64_t>(g.get("tokenizer.ggml.tokens").array.size());
  }
  json layer_types = json::array();
  for (std::int64_t l = 0; l < layers; ++l) {
    layer_types.push_back((l + 1) % kSlidingWindowPattern == 0 ? "full_attention"
                                                               : "sliding_attention");
  }
  json j = {{"architectures", {"Gemma3ForCausalLM"}},
            {"model_type", "gemma3_text"},
            {"attention_bias", false},
            {"attention_dropout", 0.0},
            {"attn_logit_softcapping", nullptr},
            {"final_logit_softcapping", nullptr},
            {"head_dim", head_dim},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"hidden_size", hidden},
            {"initializer_range", 0.02},
            {"intermediate_size", u32("feed_forward_length")},
            {"layer_types", std::move(layer_types)},
            {"max_position_embeddings", g.find_u32(arch + ".context_length").value_or(131072)},
            {"num_attention_heads", heads},
            {"num_hidden_layers", layers},
            {"num_key_value_heads", kv_heads},
            {"query_pre_attn_scalar", kQueryPreAttnScalar},
            {"rms_norm_eps", f32_to_decimal(g.get_f32(arch + ".attention.layer_norm_rms_epsilon"))},
            {"rope_parameters",
             {{"full_attention",
               {{"rope_theta", f32_to_decimal(g.find_f32(arch + ".rope.freq_base").value_or(1e6f))},
                {"rope_type", "default"}}},
              {"sliding_attention", {{"rope_theta", kRopeLocalTheta}, {"rope_type", "default"}}}}},
            {"sliding_window", g.get_u32(arch + ".attention.sliding_window")},
            {"tie_word_embeddings", !g.has_tensor("output.weight")},
            {"torch_dtype", std::string(dtype_torch_name(dtype))},
            {"use_bidirectional_attention", false},
            {"use_cache", true},
            {"vocab_size", vocab}};
  if (const auto id = g.find_u32("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *id;
  if (const auto id = g.find_u32("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = *id;
  if (const auto id = g.find_u32("tokenizer.ggml.padding_token_id")) j["pad_token_id"] = *id;
  if (const auto id = g.find_u32("tokenizer.ggml.unknown_token_id")) j["unk_token_id"] = *id;
  return j;
}

std::optional<std::string> gemma3_hf_tensor_name(std::string_view gguf_name) {
  if (gguf_name == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf_name == "output_norm.weight") return "model.norm.weight";
  if (gguf_name == "output.weight") return "lm_head.weight";
  std::string_view layer, kind;
  std::string part;
  if (!split_block_name(gguf_name, layer, part, kind) || kind != "weight") return std::nullopt;
  static const std::pair<const char*, const char*> kParts[] = {
      {"attn_norm", "input_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"post_attention_norm", "post_attention_layernorm"},
      {"ffn_norm", "pre_feedforward_layernorm"},
      {"post_ffw_norm", "post_feedforward_layernorm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  for (const auto& [gguf_part, hf] : kParts) {
    if (part == gguf_part) return fmt::format("model.layers.{}.{}.{}", layer, hf, kind);
  }
  return std::nullopt;
}

std::vector<PlannedTensor> plan_gemma3_tensors(const io::GgufFile& g, const ModelConfig& c) {
  const std::int64_t h = c.hidden_size, hd = c.head_dim, ff = c.intermediate_size;
  const std::int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  std::vector<PlannedTensor> plan;
  const auto add = [&](const std::string& gguf_name, Shape shape) {
    const io::GgufTensorInfo& info = g.tensor_info(gguf_name);
    if (info.shape() != shape) {
      fail<FormatError>("{}: tensor '{}' has shape {}, expected {} from the metadata", g.source(),
                        gguf_name, shape_str(info.shape()), shape_str(shape));
    }
    const bool norm = gguf_name.ends_with("norm.weight");
    plan.push_back({&info, *gemma3_hf_tensor_name(gguf_name), std::move(shape), 0, norm});
  };
  add("token_embd.weight", {c.vocab_size, h});
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_q.weight", {q_rows, h});
    add(p + "attn_k.weight", {kv_rows, h});
    add(p + "attn_v.weight", {kv_rows, h});
    add(p + "attn_output.weight", {h, q_rows});
    add(p + "attn_q_norm.weight", {hd});
    add(p + "attn_k_norm.weight", {hd});
    add(p + "ffn_gate.weight", {ff, h});
    add(p + "ffn_up.weight", {ff, h});
    add(p + "ffn_down.weight", {h, ff});
    add(p + "attn_norm.weight", {h});
    add(p + "post_attention_norm.weight", {h});
    add(p + "ffn_norm.weight", {h});
    add(p + "post_ffw_norm.weight", {h});
  }
  add("output_norm.weight", {h});
  if (!c.tie_word_embeddings) add("output.weight", {c.vocab_size, h});
  refuse_unplanned(g, plan, "Gemma 3");
  return plan;
}

}  // namespace kvq::model::detail
