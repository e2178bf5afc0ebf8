#include "kvq/model/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvq/core/error.h"
#include "kvq/kernels/cpu/attention.h"
#include "kvq/kernels/cpu/linear.h"
#include "kvq/kernels/cpu/pointwise.h"
#include "kvq/model/rope.h"

namespace kvq::model {

namespace {

// A Linear weight [out, in] as the model stores it: exactly one of the pointers is set.
struct LinearWeight {
  const float* f32 = nullptr;
  const std::uint16_t* bf16 = nullptr;  // bf16 bits
  // The checkpoint's input-activation quantization of this Linear (W8A8), or none.
  const InputQuantization* input = nullptr;
};

LinearWeight linear_weight(const Tensor& t) {
  if (t.dtype() == DType::kBF16) return {nullptr, static_cast<const std::uint16_t*>(t.data())};
  return {t.f32(), nullptr};
}

// y [m, n] += bias [n], row by row.
void add_bias(float* y, const float* bias, std::int64_t m, std::int64_t n) {
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] += bias[i];
  }
}

// y [m, n] = x [m, k] · Wᵀ.
void apply_linear(const float* x, const LinearWeight& w, float* y, std::int64_t m, std::int64_t n,
                  std::int64_t k) {
  if (w.bf16) {
    kernels::linear_bf16(x, w.bf16, y, m, n, k);
  } else {
    kernels::linear(x, w.f32, y, m, n, k);
  }
}

// m rows that are separate sequences' decode steps (one position each): the batched GEMV for
// any m, which reads each weight once for all of them and gives every row the bits it gets
// alone. sgemm, which apply_linear takes past kMaxBatchedGemvRows rows, sums in another order,
// and a sequence's tokens would then depend on how many others run beside it (kvq serve).
void apply_linear_rows(const float* x, const LinearWeight& w, float* y, std::int64_t m,
                       std::int64_t n, std::int64_t k) {
  if (w.bf16) {
    kernels::linear_rows_bf16(x, w.bf16, y, m, n, k);
  } else {
    kernels::linear_rows(x, w.f32, y, m, n, k);
  }
}

}  // namespace

struct CausalLM::Layer {
  AttentionModule* attn = nullptr;
  LinearWeight wq;                   // [heads * head_dim, hidden]
  LinearWeight wk;                   // [kv_heads * head_dim, hidden]
  LinearWeight wv;                   // [kv_heads * head_dim, hidden]
  LinearWeight wo;                   // [hidden, heads * head_dim]
  LinearWeight w_gate;               // [intermediate, hidden]
  LinearWeight w_up;                 // [intermediate, hidden]
  LinearWeight w_down;               // [hidden, intermediate]
  const float* bq = nullptr;         // [heads * head_dim] q_proj bias, or none (qkv_bias)
  const float* bk = nullptr;         // [kv_heads * head_dim]
  const float* bv = nullptr;         // [kv_heads * head_dim]
  const float* q_norm = nullptr;     // [head_dim] per-head RMSNorm of q before RoPE, or none
  const float* k_norm = nullptr;     // [head_dim] the same for k (qk_norm)
  const float* in_norm = nullptr;    // [hidden]
  const float* post_norm = nullptr;  // [hidden] post_attention_layernorm
  const float* pre_ff = nullptr;     // [hidden] sandwich norms: pre_feedforward_layernorm, or none
  const float* post_ff = nullptr;    // [hidden] post_feedforward_layernorm
  std::int64_t window = 0;           // > 0: attends to the last `window` tokens only
  bool local_rope = false;           // RoPE of inv_freq_local_ (Gemma 3's sliding layers)
};

DType parse_weight_dtype(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  fail<InvalidArgument>("unknown weight dtype '{}' (expected auto, f32 or bf16)", name);
}

std::string_view weight_dtype_label(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    default:
      return dtype_name(dtype);
  }
}

namespace {

// How build() stores one tensor.
enum class Storage {
  kF32View,  // fp32; an F32 tensor stays a zero-copy view (of the mmap)
  kF32Own,   // fp32 in memory the model owns (bf16 mode: lets the mmap go)
  kBF16,     // bf16, rounded to nearest even from fp32 (a BF16 tensor is kept as it is)
};

// `t` rounded to bf16 (round to nearest even), in a tensor of its own.
Tensor to_bf16(const Tensor& t) {
  if (t.dtype() == DType::kBF16) return t;
  const Tensor f = t.dtype() == DType::kF32 ? t : t.to_f32();
  Tensor out(DType::kBF16, f.shape());
  const float* src = f.f32();
  auto* dst = static_cast<std::uint16_t*>(out.mutable_data());
  const std::int64_t n = f.numel();
#pragma omp parallel for schedule(static) if (n >= (1 << 20))
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  return out;
}

// Index of the first NaN or ±Inf in a weight stored as f32 or bf16, or -1: an all-ones exponent.
// Blocks are OR-reduced first (vectorised), so a clean tensor costs one read of its bytes.
template <class Bits>
std::int64_t first_non_finite(const Bits* p, std::int64_t n, Bits exponent) {
  constexpr std::int64_t kBlock = 4096;
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t e = std::min(n, b + kBlock);
    bool bad = false;
    for (std::int64_t i = b; i < e; ++i) bad |= (p[i] & exponent) == exponent;
    if (!bad) continue;
    for (std::int64_t i = b; i < e; ++i)
      if ((p[i] & exponent) == exponent) return i;
  }
  return -1;
}

// A NaN or Inf weight poisons every logit downstream (perplexity "-nan", garbage text): refused at
// load, naming the tensor.
void check_finite(const Tensor& t, const std::string& name, const std::string& source) {
  std::int64_t bad = -1;
  if (t.dtype() == DType::kF32) {
    bad = first_non_finite(static_cast<const std::uint32_t*>(t.data()), t.numel(), 0x7f800000u);
  } else if (t.dtype() == DType::kBF16) {
    bad = first_non_finite(static_cast<const std::uint16_t*>(t.data()), t.numel(),
                           std::uint16_t{0x7f80});
  }
  if (bad < 0) return;
  const float value = t.dtype() == DType::kF32
                          ? t.f32()[bad]
                          : bf16_to_f32(static_cast<const std::uint16_t*>(t.data())[bad]);
  fail<FormatError>("{}: tensor '{}' holds {} at element {} (shape {}): the weights are corrupt",
                    source, name, value, bad, shape_str(t.shape()));
}

// The tensor `name` with the expected shape, stored as `storage` asks; NaN / Inf refused.
Tensor take_weight(const std::map<std::string, Tensor>& weights, const std::string& name,
                   const Shape& shape, const std::string& source, Storage storage) {
  auto it = weights.find(name);
  if (it == weights.end()) fail<ConfigError>("{}: missing tensor '{}'", source, name);
  const Tensor& t = it->second;
  if (t.shape() != shape) {
    fail<ConfigError>("{}: tensor '{}' has shape {}, the config implies {}", source, name,
                      shape_str(t.shape()), shape_str(shape));
  }
  if (!dtype_is_float(t.dtype())) {
    fail<FormatError>("{}: tensor '{}' has dtype {}, expected a float type", source, name,
                      dtype_name(t.dtype()));
  }
  Tensor out;
  switch (storage) {
    case Storage::kF32View:
      out = t.dtype() == DType::kF32 ? t : t.to_f32();
      break;
    case Storage::kF32Own:
      out = t.dtype() == DType::kF32 ? t.clone() : t.to_f32();
      break;
    case Storage::kBF16:
      out = to_bf16(t);
      break;
  }
  check_finite(out, name, source);
  return out;
}

void validate_config(const model::ModelConfig& c, const std::string& source) {
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
      c.vocab_size <= 0) {
    fail<ConfigError>(
        "{}: hidden_size, intermediate_size, num_hidden_layers, heads, head_dim "
        "and vocab_size must all be > 0",
        source);
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail<ConfigError>("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                      source, c.num_attention_heads, c.num_key_value_heads);
  }
  if (c.attention_bias || c.mlp_bias) {
    fail<NotSupported>("{}: attention_bias / mlp_bias are not supported", source);
  }
}

std::unique_ptr<Module> make_module(std::string name, std::vector<std::string> classes) {
  return std::make_unique<Module>(std::move(name), std::move(classes));
}

}  // namespace

CausalLM::~CausalLM() = default;

std::unique_ptr<CausalLM> CausalLM::from_weights(const model::ModelConfig& config,
                                                 const std::map<std::string, Tensor>& weights,
                                                 std::string source_name,
                                                 const LoadOptions& options) {
  std::unique_ptr<CausalLM> m(new CausalLM());
  m->build(config, weights, source_name, options);
  return m;
}

void CausalLM::build(const model::ModelConfig& config,
                     const std::map<std::string, Tensor>& checkpoint, const std::string& source,
                     const LoadOptions& options) {
  if (options.weights != DType::kF32 && options.weights != DType::kBF16) {
    fail<InvalidArgument>("{}: weights can be loaded as f32 or bf16, not {}", source,
                          dtype_name(options.weights));
  }
  validate_config(config, source);
  arch_ = &find_architecture(config, source);
  check_forward_support(*arch_, config, source);
  std::map<std::string, Shape> shapes;
  // Linears compressed-tensors stored quantized are dequantized here (in the storage dtype);
  // their input quantization runs in the forward.
  DecompressedCheckpoint decompressed =
      decompress_linear_weights(config, checkpoint, options.weights, source);
  for (const auto& [name, t] : decompressed.tensors) shapes.emplace(name, t.shape());
  check_checkpoint_tensors(*arch_, config, shapes, source);
  // Fused Linears (Phi-3's qkv_proj, gate_up_proj) become views of their parts' rows.
  const std::map<std::string, Tensor> weights =
      split_fused_linears(*arch_, config, decompressed.tensors, source);
  compressed_linears_ = std::move(decompressed.linears);
  std::map<std::string, const InputQuantization*> input_quant;
  for (const CompressedLinear& cl : compressed_linears_) {
    if (!cl.input) continue;
    if (cl.module == "lm_head" || cl.module.ends_with("embed_tokens"))
      fail<NotSupported>(
          "{}: '{}' quantizes its input activations; kvq runs input quantization "
          "on the decoder layers' Linears only",
          source, cl.module);
    input_quant.emplace(cl.module, cl.input.get());
  }
  for (const auto& [name, t] : weights) {
    if (is_attention_qparam(config, name)) attention_qparams_.emplace(name, t.clone());
  }
  config_ = config;
  weight_dtype_ = options.weights;
  const bool bf16 = options.weights == DType::kBF16;
  const Storage matrix = bf16 ? Storage::kBF16 : Storage::kF32View;
  const Storage vector = bf16 ? Storage::kF32Own : Storage::kF32View;
  const ForwardSpec& f = arch_->forward;
  inv_freq_ = rope_inv_freq(config);
  inv_freq_long_ = rope_inv_freq_long(config);
  rope_scaling_ = rope_attention_scaling(config);
  const bool local_rope = f.local_rope && config.rope_local_theta > 0;
  if (local_rope) {
    inv_freq_local_ = rope_inv_freq(config, config.rope_local_theta, config.rope_local_scaling);
  }
  // Gemma3TextScaledWordEmbedding: sqrt(hidden) as an fp32 tensor, cast to the table's dtype.
  embed_scale_ = 1.0f;
  if (f.scale_embeddings) {
    embed_scale_ = static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size)));
    if (bf16) embed_scale_ = bf16_to_f32(f32_to_bf16(embed_scale_));
  }
  // head_dim^-0.5, or Gemma's query_pre_attn_scalar^-0.5 (a Python float, used in fp32).
  attn_scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config.head_dim)));
  if (f.query_pre_attn_scalar) {
    attn_scale_ = static_cast<float>(std::pow(config.query_pre_attn_scalar.value_or(256.0), -0.5));
  }
  final_softcap_ =
      f.final_softcapping ? static_cast<float>(config.final_logit_softcapping.value_or(0)) : 0.0f;
  const std::int64_t hid = config.hidden_size, inter = config.intermediate_size;
  const std::int64_t d = config.head_dim;
  const std::int64_t qdim = config.num_attention_heads * d, kvdim = config.num_key_value_heads * d;

  // A Linear; with `bias` its fp32 bias [out] is stored in *bias.
  auto linear = [&](Module* parent, const std::string& name, const Shape& shape,
                    const float** bias = nullptr) {
    Module* m = parent->add_child(make_module(name, linear_classes()));
    m->set_weight(take_weight(weights, name + ".weight", shape, source, matrix));
    if (bias != nullptr) {
      m->set_bias(take_weight(weights, name + ".bias", {shape[0]}, source, vector));
      *bias = m->bias().f32();
    }
    LinearWeight w = linear_weight(m->weight());
    // A part of a fused checkpoint Linear (Phi-3's q_proj in qkv_proj) takes the stack's.
    const std::optional<FusedModule> stack = fused_module_of(*arch_, name);
    auto it = input_quant.find(stack ? stack->name : name);
    if (it != input_quant.end()) w.input = it->second;
    return w;
  };
  // An RMSNorm module holding the checkpoint's weight; returns the multiplier the forward
  // applies: that weight, or for (1 + w) norms 1 + w computed once in fp32 (Gemma3RMSNorm's
  // `1.0 + self.weight.float()`), so one rmsnorm kernel serves both.
  auto rms_norm = [&](Module* parent, const std::string& name, std::int64_t dim) -> const float* {
    Module* m = parent->add_child(make_module(name, arch_->norm_classes));
    m->set_weight(take_weight(weights, name + ".weight", {dim}, source, vector));
    if (f.norm == NormKind::kRms) return m->weight().f32();
    const float* w = m->weight().f32();
    std::vector<float>& one_plus = norm_one_plus_.emplace_back(static_cast<std::size_t>(dim));
    for (std::int64_t i = 0; i < dim; ++i) one_plus[static_cast<std::size_t>(i)] = 1.0f + w[i];
    return one_plus.data();
  };
  const std::vector<std::int64_t> windows = layer_windows(*arch_, config, source);

  root_ = make_module("", arch_->causal_lm_classes);
  Module* model = root_->add_child(make_module("model", arch_->model_classes));
  embed_ = model->add_child(make_module("model.embed_tokens", arch_->embedding_classes));
  embed_->set_weight(
      take_weight(weights, "model.embed_tokens.weight", {config.vocab_size, hid}, source, matrix));
  Module* list = model->add_child(make_module("model.layers", module_list_classes()));
  layers_.resize(static_cast<std::size_t>(config.num_hidden_layers));
  for (std::int64_t l = 0; l < config.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    Layer& L = layers_[static_cast<std::size_t>(l)];
    Module* layer = list->add_child(make_module(p, arch_->decoder_layer_classes));
    L.attn = layer->add_child(std::make_unique<AttentionModule>(
        p + ".self_attn", arch_->attention_classes, l, config.num_attention_heads,
        config.num_key_value_heads, d));
    if (arch_->o_proj_first) L.wo = linear(L.attn, p + ".self_attn.o_proj", {hid, qdim});
    L.wq = linear(L.attn, p + ".self_attn.q_proj", {qdim, hid}, f.qkv_bias ? &L.bq : nullptr);
    L.wk = linear(L.attn, p + ".self_attn.k_proj", {kvdim, hid}, f.qkv_bias ? &L.bk : nullptr);
    L.wv = linear(L.attn, p + ".self_attn.v_proj", {kvdim, hid}, f.qkv_bias ? &L.bv : nullptr);
    if (!arch_->o_proj_first) L.wo = linear(L.attn, p + ".self_attn.o_proj", {hid, qdim});
    if (f.qk_norm) {  // after o_proj: transformers registers them in that order
      L.q_norm = rms_norm(L.attn, p + ".self_attn.q_norm", d);
      L.k_norm = rms_norm(L.attn, p + ".self_attn.k_norm", d);
    }
    L.window = windows[static_cast<std::size_t>(l)];
    L.local_rope = local_rope && L.window > 0;
    Module* mlp = layer->add_child(make_module(p + ".mlp", arch_->mlp_classes));
    L.w_gate = linear(mlp, p + ".mlp.gate_proj", {inter, hid});
    L.w_up = linear(mlp, p + ".mlp.up_proj", {inter, hid});
    L.w_down = linear(mlp, p + ".mlp.down_proj", {hid, inter});
    mlp->add_child(make_module(p + ".mlp." + std::string(arch_->activation_module),
                               arch_->activation_classes));
    L.in_norm = rms_norm(layer, p + ".input_layernorm", hid);
    L.post_norm = rms_norm(layer, p + ".post_attention_layernorm", hid);
    if (f.norm_placement == NormPlacement::kSandwich) {
      L.pre_ff = rms_norm(layer, p + ".pre_feedforward_layernorm", hid);
      L.post_ff = rms_norm(layer, p + ".post_feedforward_layernorm", hid);
    }
    for (std::string_view dropout : arch_->layer_dropouts) {
      layer->add_child(make_module(p + "." + std::string(dropout), arch_->dropout_classes));
    }
  }
  final_norm_ = rms_norm(model, "model.norm", hid);
  model->add_child(make_module("model.rotary_emb", arch_->rotary_classes));
  lm_head_ = root_->add_child(make_module("lm_head", linear_classes()));
  if (config.tie_word_embeddings) {
    lm_head_->set_weight(embed_->weight());
  } else {
    lm_head_->set_weight(
        take_weight(weights, "lm_head.weight", {config.vocab_size, hid}, source, matrix));
  }
}

Module* CausalLM::find_module(std::string_view name) {
  for (Module* m : root_->named_modules()) {
    if (m->name() == name) return m;
  }
  return nullptr;
}

void CausalLM::set_linear_weight(std::string_view module, Tensor weight) {
  // The layer slot that reads this module's weight is the one pointing at its data.
  Module* m = find_module(module);
  LinearWeight* slot = nullptr;
  if (m != nullptr && m->has_weight()) {
    const LinearWeight current = linear_weight(m->weight());
    for (Layer& L : layers_) {
      for (LinearWeight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
        if (w->f32 == current.f32 && w->bf16 == current.bf16) slot = w;
      }
    }
  }
  if (slot == nullptr) {
    fail<InvalidArgument>("'{}' is not a Linear projection of the model's layers", module);
  }
  if (weight.shape() != m->weight().shape() || !dtype_is_float(weight.dtype())) {
    fail<InvalidArgument>("{}: new weight {} {} does not fit the module's {}", module,
                          dtype_name(weight.dtype()), shape_str(weight.shape()),
                          shape_str(m->weight().shape()));
  }
  if (weight_dtype_ == DType::kBF16) {
    m->set_weight(to_bf16(weight));
  } else {
    m->set_weight(weight.dtype() == DType::kF32 ? std::move(weight) : weight.to_f32());
  }
  const InputQuantization* input = slot->input;
  *slot = linear_weight(m->weight());
  slot->input = input;
}

AttentionModule& CausalLM::attention(std::int64_t layer) {
  if (layer < 0 || layer >= static_cast<std::int64_t>(layers_.size())) {
    fail<InvalidArgument>("layer {} out of range (model has {})", layer, layers_.size());
  }
  return *layers_[static_cast<std::size_t>(layer)].attn;
}

std::vector<AttentionModule*> CausalLM::attention_modules() {
  std::vector<AttentionModule*> out;
  for (Layer& L : layers_) out.push_back(L.attn);
  return out;
}

std::vector<std::int64_t> CausalLM::attention_windows() const {
  std::vector<std::int64_t> windows;
  for (const Layer& L : layers_) windows.push_back(L.window);
  return windows;
}

KvCache CausalLM::make_cache(std::int64_t batch, std::int64_t capacity, const KvCacheConfig& config,
                             KvBlockPool* pool) const {
  return KvCache(config_.num_hidden_layers, batch, config_.num_key_value_heads, config_.head_dim,
                 capacity, config, attention_windows(), pool);
}

std::int64_t CausalLM::kv_block_bytes(const KvCacheConfig& config,
                                      std::int64_t block_tokens) const {
  return KvCache::block_bytes(config_.num_hidden_layers, config_.num_key_value_heads,
                              config_.head_dim, config, block_tokens);
}

std::int64_t CausalLM::cache_blocks(std::int64_t tokens, const KvCacheConfig& config,
                                    std::int64_t block_tokens) const {
  return KvCache::blocks_for(tokens, config_.num_hidden_layers, config_.num_key_value_heads,
                             config_.head_dim, tokens, config, block_tokens, attention_windows());
}

std::int64_t CausalLM::cache_bytes(std::int64_t batch, std::int64_t capacity,
                                   const KvCacheConfig& config) const {
  return KvCache::allocated_bytes(config_.num_hidden_layers, batch, config_.num_key_value_heads,
                                  config_.head_dim, capacity, config, attention_windows());
}

KvCache CausalLM::make_cache(std::int64_t batch, std::int64_t capacity, KvFormat format) const {
  return make_cache(batch, capacity, KvCacheConfig::of(format));
}

// One forward of the decoder stack, a layer at a time: its inputs checked, its buffers and RoPE
// tables made once, then layer(l) for every l in order, then finish(). run() goes through all of
// it at once; ForwardPass lets kvq serve pause between layers.
struct CausalLM::Pass {
  // `caches` is either one cache holding all `batch` sequences (one length) or one batch-1 cache
  // per sequence (each at its own length).
  Pass(CausalLM& model, std::span<const std::int32_t> tokens, std::int64_t batch,
       std::span<KvCache* const> caches);
  void layer(std::int64_t l);
  // Advances the caches by S; returns final-norm hidden states [batch * S, hidden].
  std::vector<float> finish();

  // Sequence b lives in cache `cache_of(b)` at batch slot `slot_of(b)`, after its length tokens.
  KvCache& cache_of(std::int64_t b) const { return *caches[shared ? 0 : n(b)]; }
  std::int64_t slot_of(std::int64_t b) const { return shared ? b : 0; }
  // [batch * S, heads * d] → [batch, heads, S, d], RoPE of `tables` applied unless null.
  void to_heads(const std::vector<float>& src, std::vector<float>& dst, std::int64_t heads,
                const std::vector<RopeTable>* tables) const;
  static std::size_t n(std::int64_t v) { return static_cast<std::size_t>(v); }
  // y [rows, out] = x [rows, in] · Wᵀ, with the input quantized first when the Linear says so.
  void linear(const float* x, const LinearWeight& w, float* y, std::int64_t out, std::int64_t in);

  CausalLM& m;
  const ModelConfig& c;
  std::vector<KvCache*> caches;
  bool shared = false;
  std::int64_t batch = 0, S = 0, rows = 0;
  std::int64_t hid = 0, inter = 0, d = 0, H = 0, Hkv = 0;
  std::vector<RopeTable> ropes, local_ropes;  // one per cache (the sliding layers' own RoPE)
  std::vector<float> x;                       // [batch * S, hidden] residual stream
  std::vector<float> h;                       // [batch * S, hidden] normed
  std::vector<float> qp, kp, vp;              // [batch * S, heads * head_dim], kv_heads for k and v
  std::vector<float> q, k, v;                 // [batch, heads, S, head_dim], kv_heads for k and v
  std::vector<float> attn_out;                // [batch, S, heads, head_dim]
  std::vector<float> o;                       // [batch * S, hidden]
  std::vector<float> gate, up;                // [batch * S, intermediate]
  std::vector<float> quantized_input;         // [batch * S, in] a Linear's quantized input
  std::vector<float> q_chunk;                 // [heads, chunk, head_dim] (a ring's chunks)
  std::vector<kernels::KvRowsView> kviews, vviews;
};

CausalLM::Pass::Pass(CausalLM& model, std::span<const std::int32_t> tokens, std::int64_t batch_,
                     std::span<KvCache* const> caches_)
    : m(model), c(model.config_), caches(caches_.begin(), caches_.end()), batch(batch_) {
  if (batch <= 0 || tokens.empty() || static_cast<std::int64_t>(tokens.size()) % batch != 0) {
    fail<InvalidArgument>("forward: {} tokens do not form {} equal non-empty sequences",
                          tokens.size(), batch);
  }
  S = static_cast<std::int64_t>(tokens.size()) / batch;
  shared = caches.size() == 1;
  if (!shared && static_cast<std::int64_t>(caches.size()) != batch) {
    fail<InvalidArgument>("forward: {} KV caches for {} sequences", caches.size(), batch);
  }
  for (std::size_t i = 0; i < caches.size(); ++i) {
    const KvCache& cache = *caches[i];
    const std::int64_t want_batch = shared ? batch : 1;
    if (cache.batch() != want_batch || cache.layers() != c.num_hidden_layers ||
        cache.kv_heads() != c.num_key_value_heads || cache.head_dim() != c.head_dim) {
      fail<InvalidArgument>(
          "forward: KV cache (batch {}, layers {}, kv_heads {}, head_dim {}) does not fit the "
          "model and batch {}",
          cache.batch(), cache.layers(), cache.kv_heads(), cache.head_dim(), want_batch);
    }
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::int64_t w = cache.window(l), model_w = model.layers_[n(l)].window;
      if (w != 0 && w != model_w) {
        fail<InvalidArgument>(
            "forward: the KV cache was sized for a sliding window of {} tokens in layer {}, but "
            "the model's layer {} attends to {}",
            w, l, l, model_w == 0 ? std::string("every position") : std::to_string(model_w));
      }
    }
    if (cache.length() + S > cache.capacity()) {
      fail<InvalidArgument>("forward: {} cached + {} new tokens exceed the KV cache capacity {}",
                            cache.length(), S, cache.capacity());
    }
    if (const std::int64_t missing = cache.blocks_missing(cache.length() + S); missing > 0) {
      fail<InvalidArgument>(
          "forward: the paged KV cache lacks {} blocks for positions [{}, {}): reserve them first "
          "(KvCache::reserve)",
          missing, cache.length(), cache.length() + S);
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (caches[j] == caches[i])
        fail<InvalidArgument>("forward: sequences {} and {} share a KV cache", j, i);
    }
  }
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= c.vocab_size) {
      fail<InvalidArgument>("forward: token id {} out of range [0, {})", t, c.vocab_size);
    }
  }
  hid = c.hidden_size, inter = c.intermediate_size, d = c.head_dim;
  H = c.num_attention_heads, Hkv = c.num_key_value_heads;
  rows = batch * S;

  x.resize(n(rows * hid));
  const Tensor& emb = m.embed_->weight();  // [vocab, hidden], fp32 or bf16
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t row = static_cast<std::int64_t>(tokens[n(r)]) * hid;
    if (emb.dtype() == DType::kBF16) {
      kernels::widen_bf16(static_cast<const std::uint16_t*>(emb.data()) + row, x.data() + r * hid,
                          hid);
    } else {
      std::memcpy(x.data() + r * hid, emb.f32() + row, n(hid) * sizeof(float));
    }
  }
  if (m.embed_scale_ != 1.0f) {
    for (float& val : x) val *= m.embed_scale_;
  }
  // One table per cache (positions [past, past + S)) and per RoPE (the sliding layers' own).
  for (KvCache* cache : caches) {
    // longrope: per sequence, as transformers runs each one alone (seq_len = its last position).
    const bool long_rope =
        !m.inv_freq_long_.empty() &&
        cache->length() + S > m.config_.rope_scaling.original_max_position_embeddings;
    ropes.push_back(rope_table(long_rope ? m.inv_freq_long_ : m.inv_freq_, cache->length(), S,
                               m.rope_scaling_));
    if (!m.inv_freq_local_.empty()) {
      local_ropes.push_back(rope_table(m.inv_freq_local_, cache->length(), S));
    }
  }
  h.resize(n(rows * hid));
  qp.resize(n(rows * H * d));
  kp.resize(n(rows * Hkv * d));
  vp.resize(n(rows * Hkv * d));
  q.resize(n(rows * H * d));
  k.resize(n(rows * Hkv * d));
  v.resize(n(rows * Hkv * d));
  attn_out.resize(n(rows * H * d));
  o.resize(n(rows * hid));
  gate.resize(n(rows * inter));
  up.resize(n(rows * inter));
  kviews.resize(n(Hkv));
  vviews.resize(n(Hkv));
}

void CausalLM::Pass::to_heads(const std::vector<float>& src, std::vector<float>& dst,
                              std::int64_t heads, const std::vector<RopeTable>* tables) const {
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      for (std::int64_t s = 0; s < S; ++s) {
        float* out = dst.data() + ((b * heads + hh) * S + s) * d;
        std::memcpy(out, src.data() + ((b * S + s) * heads + hh) * d, n(d) * sizeof(float));
        if (tables != nullptr) {
          const RopeTable& rope = (*tables)[shared ? 0 : n(b)];
          kernels::rope_row(out, rope.cos_at(s), rope.sin_at(s), d);
        }
      }
    }
  }
}

void CausalLM::Pass::linear(const float* x, const LinearWeight& w, float* y, std::int64_t out,
                            std::int64_t in) {
  // One new token per sequence: rows are independent decode steps (see apply_linear_rows).
  const auto run = S == 1 ? apply_linear_rows : apply_linear;
  if (w.input == nullptr) {
    run(x, w, y, rows, out, in);
    return;
  }
  quantized_input.assign(x, x + rows * in);
  // A shared cache holds one torch batch [batch, S, in]; separate caches are separate sequences
  // (decode_step), each quantized as if it ran alone.
  const std::int64_t groups = shared ? 1 : batch, per = shared ? batch : 1;
  for (std::int64_t g = 0; g < groups; ++g)
    w.input->apply(quantized_input.data() + g * per * S * in, per, S, in);
  run(quantized_input.data(), w, y, rows, out, in);
}

void CausalLM::Pass::layer(std::int64_t l) {
  const Layer& L = m.layers_[n(l)];
  const float eps = static_cast<float>(c.rms_norm_eps);
  kernels::rmsnorm(x.data(), L.in_norm, h.data(), rows, hid, eps);
  linear(h.data(), L.wq, qp.data(), H * d, hid);
  linear(h.data(), L.wk, kp.data(), Hkv * d, hid);
  linear(h.data(), L.wv, vp.data(), Hkv * d, hid);
  if (L.bq != nullptr) {
    add_bias(qp.data(), L.bq, rows, H * d);
    add_bias(kp.data(), L.bk, rows, Hkv * d);
    add_bias(vp.data(), L.bv, rows, Hkv * d);
  }
  if (L.q_norm != nullptr) {  // each head's row [head_dim] normed on its own, before RoPE
    kernels::rmsnorm(qp.data(), L.q_norm, qp.data(), rows * H, d, eps);
    kernels::rmsnorm(kp.data(), L.k_norm, kp.data(), rows * Hkv, d, eps);
  }
  const std::vector<RopeTable>* rope = L.local_rope ? &local_ropes : &ropes;
  to_heads(qp, q, H, rope);
  to_heads(kp, k, Hkv, rope);
  to_heads(vp, v, Hkv, nullptr);

  // A sliding-window layer whose cache is a ring takes the new tokens a chunk at a time: each
  // chunk is written, then attended to, before the next one may overwrite rows (kv_cache.h).
  std::int64_t step = S;
  for (const KvCache* cache : caches) {
    if (cache->keys(l).ring()) step = std::min(step, cache->config().window_chunk);
  }
  // Writes tokens [first, first + count) of sequence group i into its cache.
  const auto write = [&](std::size_t i, std::int64_t first, std::int64_t count) {
    const std::int64_t b0 = static_cast<std::int64_t>(i), past = caches[i]->length();
    caches[i]->keys(l).write(past, S, k.data() + b0 * Hkv * S * d, first, count);
    caches[i]->values(l).write(past, S, v.data() + b0 * Hkv * S * d, first, count);
  };
  // Hooks and cache writes per cache: each sees its sequences at its own positions.
  for (std::size_t i = 0; i < caches.size(); ++i) {
    const std::int64_t nb = shared ? batch : 1, b0 = static_cast<std::int64_t>(i);
    const std::int64_t past = caches[i]->length();
    StatesView qs{q.data() + b0 * H * S * d, nb, H, S, d, past};
    const bool by_cache = caches[i]->config().stores_calibrated_quantization();
    StatesView ks{k.data() + b0 * Hkv * S * d, nb, Hkv, S, d, past, by_cache};
    StatesView vs{v.data() + b0 * Hkv * S * d, nb, Hkv, S, d, past, by_cache};
    L.attn->run_key_value_hooks(ks, vs);
    write(i, 0, step);
    L.attn->run_query_hooks(qs);
  }

  for (std::int64_t c0 = 0; c0 < S; c0 += step) {
    const std::int64_t nc = std::min(step, S - c0);
    if (c0 > 0) {
      for (std::size_t i = 0; i < caches.size(); ++i) write(i, c0, nc);
    }
    for (std::int64_t b = 0; b < batch; ++b) {
      KvCache& cache = cache_of(b);
      for (std::int64_t hh = 0; hh < Hkv; ++hh) {
        kviews[n(hh)] = cache.keys(l).rows(slot_of(b), hh);
        vviews[n(hh)] = cache.values(l).rows(slot_of(b), hh);
      }
      const float* qb = q.data() + b * H * S * d;  // [H, S, d]
      if (nc < S) {                                // the chunk's queries [H, nc, d]
        q_chunk.resize(n(H * nc * d));
        for (std::int64_t hh = 0; hh < H; ++hh) {
          std::memcpy(q_chunk.data() + hh * nc * d, qb + (hh * S + c0) * d,
                      n(nc * d) * sizeof(float));
        }
        qb = q_chunk.data();
      }
      const kernels::AttentionParams ap{H,       Hkv, d, nc, cache.length() + c0, m.attn_scale_,
                                        L.window};
      float* out = attn_out.data() + (b * S + c0) * H * d;
      // A chunk of a prefill stays on the prefill kernel (its tiles are the unsplit call's) even
      // when it holds one token.
      if (S > 1) {
        kernels::attention_prefill(ap, qb, kviews.data(), vviews.data(), out);
      } else {
        kernels::attention(ap, qb, kviews.data(), vviews.data(), out);
      }
    }
  }
  linear(attn_out.data(), L.wo, o.data(), hid, H * d);
  // Pre-norm: x += attn; h = post_attention_layernorm(x). Sandwich (Gemma 3): x +=
  // post_attention_layernorm(attn); h = pre_feedforward_layernorm(x); the MLP's output is
  // normed by post_feedforward_layernorm before it is added.
  const bool sandwich = L.pre_ff != nullptr;
  if (sandwich) kernels::rmsnorm(o.data(), L.post_norm, o.data(), rows, hid, eps);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  kernels::rmsnorm(x.data(), sandwich ? L.pre_ff : L.post_norm, h.data(), rows, hid, eps);
  linear(h.data(), L.w_gate, gate.data(), inter, hid);
  linear(h.data(), L.w_up, up.data(), inter, hid);
  const bool gelu = m.arch_->forward.activation == MlpActivation::kGeluTanh;
#pragma omp parallel for schedule(static) if (rows * inter >= (1 << 16))
  for (std::int64_t r = 0; r < rows; ++r) {
    float* g = gate.data() + r * inter;
    const float* u = up.data() + r * inter;
    if (gelu) {
      kernels::geglu(g, u, g, inter);
    } else {
      kernels::swiglu(g, u, g, inter);
    }
  }
  linear(gate.data(), L.w_down, o.data(), hid, inter);
  if (sandwich) kernels::rmsnorm(o.data(), L.post_ff, o.data(), rows, hid, eps);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];
}

std::vector<float> CausalLM::Pass::finish() {
  for (KvCache* cache : caches) cache->advance(S);
  kernels::rmsnorm(x.data(), m.final_norm_, h.data(), rows, hid,
                   static_cast<float>(c.rms_norm_eps));
  return std::move(h);
}

std::vector<float> CausalLM::run(std::span<const std::int32_t> tokens, std::int64_t batch,
                                 std::span<KvCache* const> caches) {
  Pass pass(*this, tokens, batch, caches);
  for (std::int64_t l = 0; l < config_.num_hidden_layers; ++l) pass.layer(l);
  return pass.finish();
}

ForwardPass::ForwardPass(CausalLM& model, std::span<const std::int32_t> tokens, KvCache& cache)
    : layers_(model.config().num_hidden_layers) {
  KvCache* const one[1] = {&cache};
  pass_ = std::make_unique<CausalLM::Pass>(model, tokens, 1, one);
}

ForwardPass::~ForwardPass() = default;
ForwardPass::ForwardPass(ForwardPass&&) noexcept = default;
ForwardPass& ForwardPass::operator=(ForwardPass&&) noexcept = default;

void ForwardPass::run_layers(std::int64_t count) {
  if (!pass_) fail<InvalidArgument>("forward pass: already finished");
  for (; count > 0 && next_layer_ < layers_; --count) pass_->layer(next_layer_++);
}

Tensor ForwardPass::finish(LogitsMode mode) {
  if (!pass_ || next_layer_ < layers_) {
    fail<InvalidArgument>("forward pass: finish() with {} of {} layers run", next_layer_, layers_);
  }
  const std::int64_t S = pass_->S;
  const std::vector<float> hidden = pass_->finish();
  Tensor t = pass_->m.logits_for(hidden, 1, S, mode);
  pass_.reset();
  return t.reshape({t.dim(1), t.dim(2)});
}

void CausalLM::compute_logits(const float* hidden, std::int64_t rows, float* logits,
                              bool per_sequence_rows) const {
  (per_sequence_rows ? apply_linear_rows : apply_linear)(hidden, linear_weight(lm_head_->weight()),
                                                         logits, rows, config_.vocab_size,
                                                         config_.hidden_size);
  if (final_softcap_ > 0.0f) {  // Gemma's final_logit_softcapping, in fp32 as transformers
    const std::int64_t n = rows * config_.vocab_size;
    for (std::int64_t i = 0; i < n; ++i) {
      logits[i] = std::tanh(logits[i] / final_softcap_) * final_softcap_;
    }
  }
}

Tensor CausalLM::logits_for(const std::vector<float>& hidden, std::int64_t batch, std::int64_t seq,
                            LogitsMode mode) const {
  const std::int64_t hid = config_.hidden_size, vocab = config_.vocab_size;
  if (mode == LogitsMode::kAll) {
    Tensor out(DType::kF32, {batch, seq, vocab});
    compute_logits(hidden.data(), batch * seq, out.f32());
    return out;
  }
  std::vector<float> last(static_cast<std::size_t>(batch * hid));  // [batch, hidden]
  for (std::int64_t b = 0; b < batch; ++b) {
    std::memcpy(last.data() + b * hid, hidden.data() + (b * seq + seq - 1) * hid,
                static_cast<std::size_t>(hid) * sizeof(float));
  }
  Tensor out(DType::kF32, {batch, 1, vocab});
  // One row per sequence: each gets its logits as alone.
  compute_logits(last.data(), batch, out.f32(), /*per_sequence_rows=*/true);
  return out;
}

Tensor CausalLM::forward_batch(std::span<const std::int32_t> tokens, std::int64_t batch,
                               KvCache& cache, LogitsMode mode) {
  KvCache* const one[1] = {&cache};
  const std::vector<float> hidden = run(tokens, batch, one);
  return logits_for(hidden, batch, static_cast<std::int64_t>(tokens.size()) / batch, mode);
}

Tensor CausalLM::forward_batch(std::span<const std::int32_t> tokens, std::int64_t batch,
                               LogitsMode mode) {
  if (batch <= 0 || tokens.empty() || static_cast<std::int64_t>(tokens.size()) % batch != 0) {
    fail<InvalidArgument>("forward: {} tokens do not form {} equal non-empty sequences",
                          tokens.size(), batch);
  }
  // use_cache=false takes the same numerical route through a scratch cache of exactly S rows.
  KvCache scratch = make_cache(batch, static_cast<std::int64_t>(tokens.size()) / batch);
  return forward_batch(tokens, batch, scratch, mode);
}

Tensor CausalLM::forward(std::span<const std::int32_t> tokens, KvCache& cache, LogitsMode mode) {
  Tensor t = forward_batch(tokens, 1, cache, mode);
  return t.reshape({t.dim(1), t.dim(2)});
}

Tensor CausalLM::forward(std::span<const std::int32_t> tokens, LogitsMode mode) {
  Tensor t = forward_batch(tokens, 1, mode);
  return t.reshape({t.dim(1), t.dim(2)});
}

Tensor CausalLM::decode_step(std::span<const std::int32_t> tokens,
                             std::span<KvCache* const> caches) {
  if (tokens.size() != caches.size() || tokens.empty()) {
    fail<InvalidArgument>(
        "decode_step: {} tokens for {} KV caches (one token per cache, at least one)",
        tokens.size(), caches.size());
  }
  const auto n = static_cast<std::int64_t>(tokens.size());
  // With one sequence, `caches` is the shared-cache form, which must then hold batch 1.
  const std::vector<float> hidden = run(tokens, n, caches);
  Tensor t = logits_for(hidden, n, 1, LogitsMode::kLast);
  return t.reshape({n, config_.vocab_size});
}

Tensor CausalLM::forward_hidden(std::span<const std::int32_t> tokens, std::int64_t batch,
                                KvCache& cache) {
  KvCache* const one[1] = {&cache};
  const std::vector<float> hidden = run(tokens, batch, one);
  const std::int64_t seq = static_cast<std::int64_t>(tokens.size()) / batch;
  return Tensor::from_f32({batch, seq, config_.hidden_size}, hidden);
}

}  // namespace kvq::model
