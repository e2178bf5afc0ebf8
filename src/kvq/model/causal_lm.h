// A decoder-only causal LM (the architecture a row of model/architecture.h describes: Llama,
// Qwen2, Qwen3, Mistral, Gemma 3 text): forward pass in fp32, with hookable attention and an
// appendable KV cache.
//
// Math (transformers' modeling_llama): embed → per layer [x += o_proj(attn(rope(q), rope(k), v))
// of input_layernorm(x); x += down(silu(gate(h)) * up(h)) of post_attention_layernorm(x)] → norm
// → lm_head (tied to embed_tokens when tie_word_embeddings). RMSNorm y = w · (x · rsqrt(mean(x²)
// + eps)); RoPE rotate-half; GQA causal softmax attention with scale 1/sqrt(head_dim). The row's
// knobs add: q/k/v = proj(h) + bias (qkv_bias); q, k = RMSNorm over each head's head_dim before
// RoPE (qk_norm); each layer's sliding window (layer_windows: a query sees its last w tokens).
// Gemma 3 (its row's knobs): every RMSNorm multiplies by (1 + w); sandwich norms [x +=
// post_attention_layernorm(attn(input_layernorm(x))); x += post_feedforward_layernorm(mlp(
// pre_feedforward_layernorm(x)))]; embeddings × sqrt(hidden) (in the table's dtype, as
// transformers casts it); scale query_pre_attn_scalar^-0.5; GeGLU (gelu tanh); sliding layers
// with their own RoPE (rope_local_theta); logits = cap · tanh(logits / cap) with
// final_logit_softcapping.
// The KV cache keeps every token even on windowed layers (attention reads only the window; a
// ring buffer per windowed layer is issue 18's follow-up).
//
// Every forward appends its tokens to the cache at the cache's current length: prefill of a
// prompt and token-by-token decode are the same call. Weights are the modules' weight tensors:
// fp32 by default (F32 checkpoint tensors stay zero-copy over the mmap, others are converted
// once), or bf16 for the Linear weights and the embedding table when loaded with
// LoadOptions::weights = kBF16 (see there). Activations, norms and the KV cache are fp32 in
// both modes; hooks and quantization see the same interfaces.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/model/architecture.h"
#include "kvq/model/attention.h"
#include "kvq/model/compressed_linear.h"
#include "kvq/model/kv_cache.h"
#include "kvq/model/model_config.h"
#include "kvq/model/module.h"

namespace kvq::model {

enum class LogitsMode {
  kLast,  // logits of the last position of each sequence: [batch, 1, vocab]
  kAll,   // every position: [batch, S, vocab]
};

struct LoadOptions {
  // How the model stores its weights:
  //  kF32 (default): fp32.
  //  kBF16: every Linear weight (q/k/v/o/gate/up/down projections, lm_head) and the embedding
  //    table (one tensor when tied to lm_head) converted once at load, fp32 → bf16 with round to
  //    nearest even; no fp32 copy is kept (norm weights, small, are copied out of the
  //    checkpoint's mmap so it is unmapped). A decode step reads half the bytes; the only error
  //    against kF32 is that weight rounding (the kernels compute in fp32, kernels/cpu/linear.h).
  DType weights = DType::kF32;
};
// "f32" → kF32, "bf16" → kBF16 (the `--weights` flag); InvalidArgument otherwise.
DType parse_weight_dtype(std::string_view name);
// The `--weights` flag for the checkpoint in model_dir: "auto" (every command's default) → kBF16
// when each floating-point matrix of the checkpoint (`*.weight` with two dimensions: Linear
// weights, embeddings) is BF16, so a bf16 checkpoint runs at its own size as transformers'
// dtype="auto" loads it (an 8B model in 16 GB, not 32), else kF32; "f32" / "bf16" as
// parse_weight_dtype. A Linear compressed-tensors stored quantized counts as its weight_scale's
// dtype (what it dequantizes to), so a bf16 W8A8 / W4A16 checkpoint resolves to kBF16 and loads
// as compressed-tensors decompresses it, bit for bit. The arithmetic is fp32 either way and a bf16
// value widens exactly, so for a bf16 checkpoint the two differ only in the kernels' summation
// order. A directory that is not a readable checkpoint resolves to kF32: its load then reports the
// problem.
DType resolve_weight_dtype(std::string_view name, const std::filesystem::path& model_dir);
// kF32 → "f32", kBF16 → "bf16".
std::string_view weight_dtype_label(DType dtype);

class CausalLM {
 public:
  // Reads model_dir/config.json and the safetensors weights. ConfigError / FormatError naming
  // the directory and tensor when something is missing or has the wrong shape; InvalidArgument
  // for options.weights other than kF32 / kBF16.
  static std::unique_ptr<CausalLM> load(const std::filesystem::path& model_dir,
                                        const LoadOptions& options = {});
  // From HF-named tensors ("model.layers.0.self_attn.q_proj.weight", ...); any float dtype.
  // "lm_head.weight" may be absent when config.tie_word_embeddings. The architecture comes from
  // the config and the tensors must be its own (check_checkpoint_tensors: NotSupported naming an
  // unknown architecture, unknown or quantized tensors; ConfigError for missing ones).
  static std::unique_ptr<CausalLM> from_weights(const model::ModelConfig& config,
                                                const std::map<std::string, Tensor>& weights,
                                                std::string source_name = "weights",
                                                const LoadOptions& options = {});
  ~CausalLM();
  CausalLM(const CausalLM&) = delete;
  CausalLM& operator=(const CausalLM&) = delete;

  const model::ModelConfig& config() const { return config_; }
  // The architecture row the model was built from (config.json's architectures).
  const Architecture& architecture() const { return *arch_; }
  // The checkpoint's attention quantization parameters (is_attention_qparam), as stored, by
  // name; lifecycle::load_quantized restores a quantized checkpoint from them. Empty for a plain
  // model.
  const std::map<std::string, Tensor>& attention_qparams() const { return attention_qparams_; }
  // kF32 or kBF16: the dtype of the Linear weights and the embedding table (LoadOptions).
  DType weight_dtype() const { return weight_dtype_; }
  // The Linears the checkpoint stored quantized (dequantized at load; model/compressed_linear.h),
  // by module name; empty for a float checkpoint.
  const std::vector<CompressedLinear>& compressed_linears() const { return compressed_linears_; }
  // What the embeddings are multiplied by: 1, or with the row's scale_embeddings (Gemma)
  // sqrt(hidden_size) rounded to fp32 and then to the embedding table's dtype (bf16 under
  // LoadOptions::weights = kBF16), as transformers casts its normalizer to the weight dtype.
  float embedding_scale() const { return embed_scale_; }

  // The module tree ("" LlamaForCausalLM, "model", ..., "lm_head") and lookups.
  Module& root() { return *root_; }
  const Module& root() const { return *root_; }
  std::vector<Module*> named_modules() { return root_->named_modules(); }
  Module* find_module(std::string_view name);  // nullptr when absent
  AttentionModule& attention(std::int64_t layer);
  // Replaces the weight of the Linear projection `module` ("model.layers.3.self_attn.v_proj";
  // attention and MLP projections) by `weight` [out, in], any float dtype, stored as the model
  // stores its Linear weights (fp32, or bf16 rounded to nearest even). Offline transforms fuse
  // rotations this way (lifecycle/transforms.h) and put the original back afterwards (a tensor
  // already in the model's storage dtype is kept as it is, so a restore is exact).
  // InvalidArgument naming the module when it is not such a projection or the shape differs.
  void set_linear_weight(std::string_view module, Tensor weight);
  std::vector<AttentionModule*> attention_modules();

  // A cache for `batch` sequences of up to `capacity` tokens as `config` says (kv_cache.h;
  // InvalidArgument naming the layer when its scales are missing or not calibrated).
  // With a pool: a paged cache (batch 1) taking its rows from the pool's blocks (kv_cache.h).
  KvCache make_cache(std::int64_t batch, std::int64_t capacity, const KvCacheConfig& config = {},
                     KvBlockPool* pool = nullptr) const;
  // KvCacheConfig::of(format): f32 / bf16 / f16, or nvfp4 with dynamic global scales.
  KvCache make_cache(std::int64_t batch, std::int64_t capacity, KvFormat format) const;
  // The bytes of K / V rows make_cache(batch, capacity, config) would allocate (sliding-window
  // layers keep rings: kv_cache.h), without allocating them.
  std::int64_t cache_bytes(std::int64_t batch, std::int64_t capacity,
                           const KvCacheConfig& config) const;
  // Paged caches: the bytes of one layer's block of block_tokens positions (KvBlockPool's
  // block_bytes), and the blocks a paged cache of `tokens` positions holds (rings included).
  std::int64_t kv_block_bytes(const KvCacheConfig& config, std::int64_t block_tokens) const;
  std::int64_t cache_blocks(std::int64_t tokens, const KvCacheConfig& config,
                            std::int64_t block_tokens) const;
  // Per layer the sliding window its attention reads, 0 for a global layer.
  std::vector<std::int64_t> attention_windows() const;

  // One sequence (cache batch must be 1): appends tokens at cache.length(). Logits [S or 1,
  // vocab]. InvalidArgument on an empty input, a bad token id or a full cache.
  Tensor forward(std::span<const std::int32_t> tokens, KvCache& cache,
                 LogitsMode mode = LogitsMode::kLast);
  // use_cache=false: attention over these tokens only (hooks still fire). [S or 1, vocab].
  Tensor forward(std::span<const std::int32_t> tokens, LogitsMode mode = LogitsMode::kAll);
  // `batch` equal-length sequences: tokens [batch, S] row-major; cache batch must match.
  // Logits [batch, S or 1, vocab].
  Tensor forward_batch(std::span<const std::int32_t> tokens, std::int64_t batch, KvCache& cache,
                       LogitsMode mode = LogitsMode::kLast);
  Tensor forward_batch(std::span<const std::int32_t> tokens, std::int64_t batch,
                       LogitsMode mode = LogitsMode::kAll);

  // One decode step of several independent sequences, each in its own cache (batch 1, its own
  // length): tokens[i] is appended to *caches[i]. Logits [n, vocab]. Row i is bit-identical to
  // forward({tokens[i]}, *caches[i]), however many sequences run (the batched GEMV,
  // kernels::linear_rows, reads each weight once for all of them). InvalidArgument when
  // the counts differ, a cache is given twice, or one is full.
  Tensor decode_step(std::span<const std::int32_t> tokens, std::span<KvCache* const> caches);

  // The final-norm hidden states [batch, S, hidden] without the lm_head, for callers that turn
  // them into logits a chunk at a time (perplexity over long windows).
  Tensor forward_hidden(std::span<const std::int32_t> tokens, std::int64_t batch, KvCache& cache);
  // logits [rows, vocab] = hidden [rows, hidden] · lm_headᵀ. per_sequence_rows: the rows are
  // separate sequences' last positions, and each gets exactly its logits alone
  // (kernels::linear_rows; otherwise sgemm past kMaxBatchedGemvRows rows).
  void compute_logits(const float* hidden, std::int64_t rows, float* logits,
                      bool per_sequence_rows = false) const;

 private:
  struct Layer;
  CausalLM() = default;
  void build(const model::ModelConfig& config, const std::map<std::string, Tensor>& weights,
             const std::string& source_name, const LoadOptions& options);
  // Runs the decoder stack; returns final-norm hidden states [batch * S, hidden]. `caches` is
  // either one cache holding all `batch` sequences (one length) or one batch-1 cache per sequence
  // (each at its own length).
  std::vector<float> run(std::span<const std::int32_t> tokens, std::int64_t batch,
                         std::span<KvCache* const> caches);
  Tensor logits_for(const std::vector<float>& hidden, std::int64_t batch, std::int64_t seq,
                    LogitsMode mode) const;
  // One forward, a layer at a time (run() and ForwardPass go through it).
  struct Pass;
  friend class ForwardPass;

  model::ModelConfig config_;
  const Architecture* arch_ = nullptr;
  std::map<std::string, Tensor> attention_qparams_;   // small copies: the mmap may go
  std::vector<CompressedLinear> compressed_linears_;  // owns the forward's InputQuantizations
  DType weight_dtype_ = DType::kF32;
  std::vector<float> inv_freq_;
  std::vector<float> inv_freq_local_;  // the sliding layers' RoPE (Gemma 3), or empty
  // longrope: the inv_freq of forwards reaching beyond original_max_position_embeddings
  // (transformers picks short or long factors at every forward from its largest position), else
  // empty.
  std::vector<float> inv_freq_long_;
  float rope_scaling_ = 1.0f;   // cos / sin × this (longrope's attention factor)
  float embed_scale_ = 1.0f;    // embeddings × this (Gemma: sqrt(hidden) in the table's dtype)
  float attn_scale_ = 1.0f;     // attention scores × this
  float final_softcap_ = 0.0f;  // > 0: logits = cap · tanh(logits / cap)
  std::deque<std::vector<float>> norm_one_plus_;  // (1 + w) of each Gemma norm (stable addresses)
  std::unique_ptr<Module> root_;
  Module* embed_ = nullptr;
  const float* final_norm_ = nullptr;  // model.norm's multiplier (its weight, or 1 + w)
  Module* lm_head_ = nullptr;
  std::vector<Layer> layers_;
};

// A forward of one sequence over its cache, run a few layers at a time: kvq serve runs a prompt
// chunk's layers between the decode steps of other sequences, so that those do not wait for the
// whole chunk. Bit for bit forward(tokens, cache, mode), hooks included, however the layers are
// split. Until finish(), nothing else may use the cache; the model and the cache must outlive
// the pass.
class ForwardPass {
 public:
  // Checks the input as forward() does (InvalidArgument) and embeds the tokens.
  ForwardPass(CausalLM& model, std::span<const std::int32_t> tokens, KvCache& cache);
  ~ForwardPass();
  ForwardPass(ForwardPass&&) noexcept;
  ForwardPass& operator=(ForwardPass&&) noexcept;

  std::int64_t layers_left() const { return layers_ - next_layer_; }
  // Runs the next min(count, layers_left()) layers.
  void run_layers(std::int64_t count);
  // After the last layer: forward()'s logits [S or 1, vocab]; the cache then holds the tokens.
  Tensor finish(LogitsMode mode);

 private:
  std::unique_ptr<CausalLM::Pass> pass_;
  std::int64_t layers_ = 0, next_layer_ = 0;
};

}  // namespace kvq::model
