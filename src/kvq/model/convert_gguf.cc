#include "kvq/model/convert_gguf.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/tensor.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/convert_gguf_tokenizer.h"
#include "kvq/io/gguf_dequant.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/convert_gguf_plan.h"
#include "kvq/model/model_config.h"

namespace kvq::model {
namespace {

using detail::PlannedTensor;

using json = nlohmann::json;
namespace fs = std::filesystem;

// An f32 metadata value as the shortest decimal that rounds to it (1e-05, not
// 9.999999747378752e-06): the same fp32 value once a framework casts it back.
double f32_to_decimal(float value) { return std::stod(fmt::format("{}", value)); }

void require_llama(const io::GgufFile& gguf) {
  const std::string& arch = gguf.get_string("general.architecture");
  if (arch != "llama") {
    fail<NotSupported>("{}: unsupported architecture {}; supported: llama, gemma3", gguf.source(),
                       arch);
  }
}

ModelConfig llama_config(const io::GgufFile& g, DType dtype) {
  require_llama(g);
  ModelConfig c;
  c.architectures = {"LlamaForCausalLM"};
  c.model_type = "llama";
  c.hidden_size = g.get_u32("llama.embedding_length");
  c.intermediate_size = g.get_u32("llama.feed_forward_length");
  c.num_hidden_layers = g.get_u32("llama.block_count");
  c.num_attention_heads = g.get_u32("llama.attention.head_count");
  c.num_key_value_heads =
      g.find_u32("llama.attention.head_count_kv").value_or(c.num_attention_heads);
  if (c.num_attention_heads == 0 || c.num_key_value_heads == 0 ||
      c.num_attention_heads % c.num_key_value_heads != 0) {
    fail<FormatError>("{}: {} attention heads and {} kv heads are inconsistent", g.source(),
                      c.num_attention_heads, c.num_key_value_heads);
  }
  c.head_dim = g.find_u32("llama.attention.key_length")
                   .value_or(static_cast<std::uint32_t>(c.hidden_size / c.num_attention_heads));
  if (const auto rot = g.find_u32("llama.rope.dimension_count"); rot && *rot != c.head_dim) {
    fail<NotSupported>(
        "{}: partial rotary embeddings (rope.dimension_count {} != head_dim {}) "
        "are not supported",
        g.source(), *rot, c.head_dim);
  }
  if (g.has("llama.vocab_size")) {
    c.vocab_size = g.get_u32("llama.vocab_size");
  } else {
    c.vocab_size = static_cast<std::int64_t>(g.get("tokenizer.ggml.tokens").array.size());
  }
  c.max_position_embeddings = g.find_u32("llama.context_length").value_or(2048);
  c.rms_norm_eps = f32_to_decimal(g.get_f32("llama.attention.layer_norm_rms_epsilon"));
  c.rope_theta = f32_to_decimal(g.find_f32("llama.rope.freq_base").value_or(10000.0f));
  if (const auto scaling = g.find_string("llama.rope.scaling.type");
      scaling && *scaling != "none") {
    if (*scaling != "linear") {
      fail<NotSupported>("{}: rope scaling '{}' is not supported (supported: none, linear)",
                         g.source(), *scaling);
    }
    c.rope_scaling.rope_type = "linear";
    c.rope_scaling.factor = f32_to_decimal(g.get_f32("llama.rope.scaling.factor"));
  }
  if (g.has_tensor("rope_freqs.weight")) {
    fail<NotSupported>(
        "{}: llama3-style rope frequency factors (rope_freqs.weight) are not "
        "supported",
        g.source());
  }
  c.tie_word_embeddings = !g.has_tensor("output.weight");
  c.attention_bias = g.has_tensor("blk.0.attn_q.bias");
  c.mlp_bias = false;
  if (const auto id = g.find_u32("tokenizer.ggml.bos_token_id")) c.bos_token_id = *id;
  if (const auto id = g.find_u32("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {*id};
  if (const auto id = g.find_u32("tokenizer.ggml.padding_token_id")) c.pad_token_id = *id;
  c.torch_dtype = std::string(dtype_torch_name(dtype));
  c.raw = {{"hidden_act", "silu"},
           {"initializer_range", 0.02},
           {"attention_dropout", 0.0},
           {"pretraining_tp", 1},
           {"use_cache", true}};
  return c;
}

// Every tensor the HF model needs, in HF module order, with its expected shape. Unknown GGUF
// tensors are refused rather than silently dropped.
std::vector<PlannedTensor> plan_tensors(const io::GgufFile& g, const ModelConfig& c) {
  const std::int64_t h = c.hidden_size, hd = c.head_dim, ff = c.intermediate_size;
  const std::int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  std::vector<PlannedTensor> plan;
  const auto add = [&](const std::string& gguf_name, Shape shape, std::int64_t rope_heads = 0) {
    const io::GgufTensorInfo& info = g.tensor_info(gguf_name);
    if (info.shape() != shape) {
      fail<FormatError>("{}: tensor '{}' has shape {}, expected {} from the metadata", g.source(),
                        gguf_name, shape_str(info.shape()), shape_str(shape));
    }
    plan.push_back({&info, *gguf_to_hf_tensor_name(gguf_name), std::move(shape), rope_heads});
  };
  add("token_embd.weight", {c.vocab_size, h});
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_norm.weight", {h});
    add(p + "attn_q.weight", {q_rows, h}, c.num_attention_heads);
    add(p + "attn_k.weight", {kv_rows, h}, c.num_key_value_heads);
    add(p + "attn_v.weight", {kv_rows, h});
    add(p + "attn_output.weight", {h, q_rows});
    if (c.attention_bias) {
      add(p + "attn_q.bias", {q_rows}, c.num_attention_heads);
      add(p + "attn_k.bias", {kv_rows}, c.num_key_value_heads);
      add(p + "attn_v.bias", {kv_rows});
      if (g.has_tensor(p + "attn_output.bias")) add(p + "attn_output.bias", {h});
    }
    add(p + "ffn_norm.weight", {h});
    add(p + "ffn_gate.weight", {ff, h});
    add(p + "ffn_up.weight", {ff, h});
    add(p + "ffn_down.weight", {h, ff});
  }
  add("output_norm.weight", {h});
  if (!c.tie_word_embeddings) add("output.weight", {c.vocab_size, h});

  detail::refuse_unplanned(g, plan, "Llama");
  return plan;
}

void check_out_dir(const fs::path& out_dir, bool force) {
  std::error_code ec;
  const auto st = fs::status(out_dir, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) {
    fail<InvalidArgument>("{} exists and is not a directory", out_dir.string());
  }
  if (!fs::is_empty(out_dir) && !force) {
    fail<InvalidArgument>("{} exists and is not empty; pass --force to replace it",
                          out_dir.string());
  }
}

}  // namespace

namespace detail {

void refuse_unplanned(const io::GgufFile& g, const std::vector<PlannedTensor>& plan,
                      std::string_view family) {
  if (plan.size() == g.tensors().size()) return;
  for (const auto& t : g.tensors()) {
    bool used = false;
    for (const auto& p : plan) used = used || p.info == &t;
    if (!used) {
      fail<NotSupported>("{}: tensor '{}' has no place in a Hugging Face {} model", g.source(),
                         t.name, family);
    }
  }
}

bool split_block_name(std::string_view name, std::string_view& layer, std::string& part,
                      std::string_view& kind) {
  // blk.<digits>.<word>.(weight|bias), split by hand: std::regex recurses per character, and
  // the name comes from the file.
  constexpr std::string_view kBlock = "blk.";
  if (!name.starts_with(kBlock)) return false;
  const std::string_view rest = name.substr(kBlock.size());
  const std::size_t dot1 = rest.find('.');
  const std::size_t dot2 = dot1 == std::string_view::npos ? dot1 : rest.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos) return false;
  layer = rest.substr(0, dot1);
  part = std::string(rest.substr(dot1 + 1, dot2 - dot1 - 1));
  kind = rest.substr(dot2 + 1);
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  return !layer.empty() && std::all_of(layer.begin(), layer.end(), is_digit) &&
         (kind == "weight" || kind == "bias");
}

}  // namespace detail

std::optional<std::string> gguf_to_hf_tensor_name(std::string_view gguf_name,
                                                  std::string_view architecture) {
  if (architecture == "gemma3") return detail::gemma3_hf_tensor_name(gguf_name);
  if (architecture != "llama") return std::nullopt;
  const std::string name(gguf_name);
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  std::string_view layer, kind;
  std::string part;
  if (!detail::split_block_name(gguf_name, layer, part, kind)) return std::nullopt;
  std::string hf;
  if (part == "attn_norm")
    hf = "input_layernorm";
  else if (part == "ffn_norm")
    hf = "post_attention_layernorm";
  else if (part == "attn_q")
    hf = "self_attn.q_proj";
  else if (part == "attn_k")
    hf = "self_attn.k_proj";
  else if (part == "attn_v")
    hf = "self_attn.v_proj";
  else if (part == "attn_output")
    hf = "self_attn.o_proj";
  else if (part == "ffn_gate")
    hf = "mlp.gate_proj";
  else if (part == "ffn_up")
    hf = "mlp.up_proj";
  else if (part == "ffn_down")
    hf = "mlp.down_proj";
  else
    return std::nullopt;
  return fmt::format("model.layers.{}.{}.{}", layer, hf, kind);
}

void unpermute_rope_rows(float* data, std::int64_t n_head, std::int64_t head_dim,
                         std::int64_t cols) {
  KVQ_CHECK(head_dim % 2 == 0, "head_dim {} must be even", head_dim);
  const std::int64_t half = head_dim / 2;
  std::vector<float> head(static_cast<std::size_t>(head_dim * cols));  // [head_dim, cols]
  for (std::int64_t h = 0; h < n_head; ++h) {
    float* rows = data + h * head_dim * cols;
    std::memcpy(head.data(), rows, head.size() * sizeof(float));
    for (std::int64_t j = 0; j < 2; ++j) {
      for (std::int64_t i = 0; i < half; ++i) {
        std::memcpy(rows + (j * half + i) * cols, head.data() + (2 * i + j) * cols,
                    static_cast<std::size_t>(cols) * sizeof(float));
      }
    }
  }
}

json gguf_llama_config_json(const io::GgufFile& gguf, DType dtype) {
  return model_config_to_json(llama_config(gguf, dtype));
}

json gguf_config_json(const io::GgufFile& gguf, DType dtype) {
  if (gguf.get_string("general.architecture") == "gemma3") {
    return detail::gemma3_config_json(gguf, dtype);
  }
  return gguf_llama_config_json(gguf, dtype);
}

json gguf_generation_config_json(const io::GgufFile& g) {
  json j = {{"_from_model_config", true}};
  const auto set = [&](const char* name, const char* key) {
    if (const auto id = g.find_u32(key)) j[name] = *id;
  };
  set("bos_token_id", "tokenizer.ggml.bos_token_id");
  set("eos_token_id", "tokenizer.ggml.eos_token_id");
  set("pad_token_id", "tokenizer.ggml.padding_token_id");
  return j;
}

ConvertResult convert_gguf_to_hf(const fs::path& gguf_path, const fs::path& out_dir,
                                 const ConvertOptions& options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16) {
    fail<InvalidArgument>("convert: --dtype must be float32 or bfloat16, got {}",
                          dtype_torch_name(options.dtype));
  }
  io::refuse_output_over_input(out_dir, "OUT_DIR", gguf_path, "the input MODEL");
  check_out_dir(out_dir, options.force);
  const io::GgufFile g = io::GgufFile::open(gguf_path);
  const json config_json = gguf_config_json(g, options.dtype);
  const ModelConfig config = parse_model_config(config_json, g.source());
  const std::vector<PlannedTensor> plan = config.model_type == "gemma3_text"
                                              ? detail::plan_gemma3_tensors(g, config)
                                              : plan_tensors(g, config);
  for (const auto& p : plan) {
    if (!io::ggml_can_dequantize(p.info->type)) {
      fail<NotSupported>("{}: tensor '{}' has GGML type {}, which kvq cannot dequantize",
                         g.source(), p.info->name, io::ggml_type_name(p.info->type));
    }
  }
  // Everything that can be refused has been checked before any output exists.
  const json tokenizer = io::gguf_tokenizer_json(g);
  const json tokenizer_config = io::gguf_tokenizer_config_json(g);

  ConvertResult result;
  result.out_dir = out_dir;
  io::SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  for (const auto& p : plan) {
    Tensor t = io::dequantize_tensor(g, *p.info);  // [rows, cols] fp32, owning
    if (p.rope_heads > 0) {
      const std::int64_t cols = t.ndim() == 2 ? t.dim(1) : 1;
      unpermute_rope_rows(t.f32(), p.rope_heads, config.head_dim, cols);
    }
    if (p.minus_one) {
      float* w = t.f32();
      for (std::int64_t i = 0; i < t.numel(); ++i) w[i] -= 1.0f;
    }
    if (options.dtype == DType::kBF16) {
      Tensor b(DType::kBF16, t.shape());
      auto* dst = static_cast<std::uint16_t*>(b.mutable_data());
      const float* src = t.f32();
      for (std::int64_t i = 0; i < t.numel(); ++i) dst[i] = f32_to_bf16(src[i]);
      t = std::move(b);
    }
    result.num_parameters += t.numel();
    result.safetensors_bytes += t.nbytes();
    writer.add(p.hf_name, std::move(t));
  }
  result.num_tensors = static_cast<std::int64_t>(plan.size());

  io::AtomicDirectory dir(
      out_dir, options.force ? io::ExistingDirectory::kReplace : io::ExistingDirectory::kRefuse);
  io::write_file_atomic(dir.path() / "config.json", io::dump_json(config_json));
  io::write_file_atomic(dir.path() / "generation_config.json",
                        io::dump_json(gguf_generation_config_json(g)));
  io::write_file_atomic(dir.path() / "tokenizer.json", io::dump_json(tokenizer));
  io::write_file_atomic(dir.path() / "tokenizer_config.json", io::dump_json(tokenizer_config));
  writer.write(dir.path() / "model.safetensors");
  dir.commit();
  log::info("converted {} -> {} ({} tensors, {} parameters, {})", gguf_path.string(),
            out_dir.string(), result.num_tensors, result.num_parameters,
            dtype_torch_name(options.dtype));
  return result;
}

}  // namespace kvq::model
