// The architecture seam: what one decoder-only model family is, as data. A row of this table
// (like a ggml type-traits row) names the family's Hugging Face classes and tensors and the knobs
// the forward pass reads; CausalLM::build and CausalLM::run take everything family-specific from
// it, so a new architecture is a new row plus whatever new knob it needs (issue 18). Rows: Llama
// (also Llama 3.x: rope_scaling comes from config.json), Qwen2 / Qwen2.5 (q/k/v biases), Qwen3
// (q/k RMSNorm per head before RoPE), Mistral (sliding window on every layer), Gemma 3's text
// model ((1 + w) sandwich norms, q/k norms, scaled embeddings, query_pre_attn_scalar, GeGLU,
// interleaved sliding / global layers with their own RoPE bases, final logit softcapping), Phi-3
// (Llama's forward; its checkpoint fuses q/k/v into qkv_proj and gate/up into gate_up_proj, which
// loading splits into kvq's usual modules: FusedLinear).
//
// Loading refuses what kvq cannot run instead of guessing: an architecture that has no row, a
// checkpoint tensor the row does not know (a Qwen2 q_proj.bias would otherwise be dropped
// silently), and quantized Linear weights left compressed (compressed-tensors weight_packed /
// weight_scale ...: CausalLM's load dequantizes the formats it reads before this check,
// model/compressed_linear.h, so what reaches it is a format kvq does not read).
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/model/model_config.h"

namespace kvq::model {

// The forward pass's knobs: how one family's decoder layer differs from another's. Llama's values
// are the defaults. expected_tensors reads them (a qkv bias or a q/k norm is a tensor the
// checkpoint must hold); CausalLM::build refuses config values its forward does not implement
// (check_forward_support: attention logit softcapping, bidirectional attention).
enum class NormKind {
  kRms,         // y = w · x / sqrt(mean(x²) + eps)                  (Llama, Qwen, Mistral)
  kRmsOnePlus,  // y = (1 + w) · x / sqrt(mean(x²) + eps)            (Gemma)
};
enum class NormPlacement {
  kPre,       // x += f(norm(x)) for attention and MLP               (Llama)
  kSandwich,  // x += post_norm(f(pre_norm(x))), four norms a layer   (Gemma 3)
};
enum class RopeStyle {
  kRotateHalf,  // transformers' rotate_half: pairs (i, i + d/2)
};
// Which layers attend to a sliding window of config.json's sliding_window tokens (the others
// see every earlier token): the family's config convention, as transformers reads it.
enum class WindowLayers {
  kNone,     // no sliding window; a sliding_window in the config is ignored      (Llama)
  kAll,      // every layer; sliding_window null = none, absent = the row's
             // default_sliding_window                                  (Mistral: 4096, Phi-3: none)
  kOptIn,    // only with use_sliding_window (default false): the layers layer_types names
             // "sliding_attention", or without layer_types those from max_window_layers (default
             // 28) on; sliding_window absent = 4096                              (Qwen2, Qwen3)
  kPattern,  // the layers layer_types names "sliding_attention", or without layer_types all but
             // every sliding_window_pattern-th (default 6: layer i slides when (i + 1) % 6 != 0);
             // sliding_window null = none, absent = 4096                     (Gemma 3)
};
// The gated MLP's activation, from the row's hidden_act.
enum class MlpActivation {
  kSilu,      // "silu": SwiGLU                                          (Llama, Qwen, Mistral)
  kGeluTanh,  // "gelu_pytorch_tanh": GeGLU with the tanh form of GELU  (Gemma 3)
};
struct ForwardSpec {
  NormKind norm = NormKind::kRms;
  NormPlacement norm_placement = NormPlacement::kPre;
  bool qkv_bias = false;  // q/k/v_proj carry a bias                 (Qwen2)
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3, Gemma 3)
  RopeStyle rope = RopeStyle::kRotateHalf;
  WindowLayers window_layers = WindowLayers::kNone;
  bool scale_embeddings = false;  // embeddings × sqrt(hidden_size)  (Gemma)
  MlpActivation activation = MlpActivation::kSilu;
  // Attention scale query_pre_attn_scalar^-0.5 (config default 256) instead of head_dim^-0.5;
  // sliding layers use the config's rope_local_theta RoPE; logits softcapped by the config's
  // final_logit_softcapping when set                                      (Gemma 3)
  bool query_pre_attn_scalar = false;
  bool local_rope = false;
  bool final_softcapping = false;
};

// A checkpoint Linear that stacks several of kvq's Linear modules along its output rows, in the
// order of `parts` (Phi-3: self_attn.qkv_proj = q_proj, k_proj, v_proj rows; mlp.gate_up_proj =
// gate_proj, up_proj rows). Loading splits it (split_fused_linears: each part a view of its rows),
// so the module tree, hooks, transforms and calibration see the usual q/k/v and gate/up modules,
// in the tree where transformers registers the fused one; lifecycle::save_pretrained writes it
// back fused under its own name.
struct FusedLinear {
  std::string_view name;                // under "model.layers.N.": "self_attn.qkv_proj"
  std::vector<std::string_view> parts;  // under "model.layers.N.": "self_attn.q_proj", ...
};

struct Architecture {
  std::string_view hf_class;    // config.json "architectures"[0]: "LlamaForCausalLM"
  std::string_view model_type;  // config.json "model_type": "llama"
  std::string_view hidden_act;  // the gated MLP's activation it runs ("silu": SwiGLU)
  ForwardSpec forward;          // the decoder layer's knobs
  // The sliding window when config.json has no "sliding_window" (the config class's default;
  // 0 = none): MistralConfig / Qwen2Config / Qwen3Config / Gemma3TextConfig say 4096, Phi3Config
  // None.
  std::int64_t default_sliding_window = 4096;
  // The checkpoint's fused Linears (none: every projection is its own tensor).
  std::vector<FusedLinear> fused_linears;
  // transformers registers o_proj before the (fused) q/k/v projection (Phi3Attention), so the
  // module tree lists it first.
  bool o_proj_first = false;
  // The MLP's activation module ("model.layers.N.mlp.<name>"; Phi3MLP's is "activation_fn").
  std::string_view activation_module = "act_fn";
  // Modules of each decoder layer that do nothing at inference, after its norms, as transformers
  // registers them (Phi-3's resid_attn_dropout / resid_mlp_dropout, class Dropout).
  std::vector<std::string_view> layer_dropouts;
  // transformers' class hierarchies (the MRO restricted to nn.Module subclasses, most derived
  // first), so recipe targets match modules as they do in compressed-tensors.
  std::vector<std::string> causal_lm_classes;      // the root: {"LlamaForCausalLM", ...}
  std::vector<std::string> model_classes;          // "model": {"LlamaModel", ...}
  std::vector<std::string> decoder_layer_classes;  // "model.layers.N"
  std::vector<std::string> attention_classes;      // "model.layers.N.self_attn"
  std::vector<std::string> mlp_classes;            // "model.layers.N.mlp"
  std::vector<std::string> norm_classes;           // the RMSNorms
  std::vector<std::string> rotary_classes;         // "model.rotary_emb"
  std::vector<std::string> activation_classes;     // "model.layers.N.mlp.act_fn"
  std::vector<std::string> embedding_classes = {"Embedding", "Module"};  // "model.embed_tokens"
  std::vector<std::string> dropout_classes = {"Dropout", "_DropoutNd", "Module"};
};

// Every architecture kvq runs.
std::span<const Architecture> architectures();
// The row of config.architectures[0] (or of model_type when the list is empty), checked against
// the config's hidden_act. NotSupported naming the architecture and listing kvq's otherwise.
const Architecture& find_architecture(const model::ModelConfig& config, std::string_view source);

// NotSupported naming `source`, the architecture and each value of the config that CausalLM's
// forward does not implement for it (attn_logit_softcapping, use_bidirectional_attention, a
// partial_rotary_factor other than 1).
// Called by CausalLM::build.
void check_forward_support(const Architecture& arch, const model::ModelConfig& config,
                           std::string_view source);

// Per layer, how many keys its queries see: 0 = every earlier token, w > 0 = the last w tokens,
// the query's own included (transformers' sliding window: key t visible from query p when
// p - w < t <= p), as arch.forward.window_layers reads the config. ConfigError naming `source`
// when layer_types does not list one known type per layer.
std::vector<std::int64_t> layer_windows(const Architecture& arch, const model::ModelConfig& config,
                                        std::string_view source);

// A checkpoint tensor the architecture expects.
struct TensorSpec {
  std::string name;  // "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
};
// The checkpoint tensors of `config` under `arch`, in module order (lm_head.weight omitted when
// tied): the Llama layout plus what arch.forward adds (q/k/v biases, q/k norms, sandwich norms),
// each of arch.fused_linears' fused tensors in place of its parts.
std::vector<TensorSpec> expected_tensors(const Architecture& arch,
                                         const model::ModelConfig& config);

// `weights` with each fused Linear of arch.fused_linears ("model.layers.N.self_attn.qkv_proj.
// weight") replaced by its parts (".q_proj.weight", ...), each a view of its rows (no copy; the
// views keep the fused tensor alive). Other tensors are passed through. ConfigError naming
// `source` and the tensor when a fused tensor is not 2-D with the rows and columns the config
// implies (naming the parts' rows), or when a part is in the checkpoint beside its fused tensor.
// Nothing to do (a copy of the map) for a row without fused Linears.
std::map<std::string, Tensor> split_fused_linears(const Architecture& arch,
                                                  const model::ModelConfig& config,
                                                  const std::map<std::string, Tensor>& weights,
                                                  std::string_view source);

// A fused Linear of one layer by its full names: the module transformers has
// ("model.layers.3.self_attn.qkv_proj"; its checkpoint tensor is name + ".weight") and kvq's
// modules that hold its rows, in row order ("model.layers.3.self_attn.q_proj", ...).
struct FusedModule {
  std::string name;
  std::vector<std::string> parts;
};
// The fused module whose rows the Linear `module` holds ("model.layers.3.self_attn.v_proj" →
// qkv_proj); nullopt when the module is its own tensor (every module of a row without fused
// Linears).
std::optional<FusedModule> fused_module_of(const Architecture& arch, std::string_view module);
// Every fused module of `config` under `arch`, in layer order: the names a recipe written for
// transformers may target.
std::vector<FusedModule> fused_modules(const Architecture& arch, const model::ModelConfig& config);

// Whether `name` is a quantization parameter of a layer's attention module as compressed-tensors
// saves it: "model.layers.<l>.self_attn.{q,k,v}_{scale,zero_point,global_scale}" with l <
// num_hidden_layers (read by lifecycle::load_quantized). Linear in the name's length.
bool is_attention_qparam(const model::ModelConfig& config, std::string_view name);

// Checks the names and shapes of a checkpoint's tensors against expected_tensors:
//  - ConfigError naming `source` and the tensor when one is missing or has another shape than
//    the config implies, or when the weights have layers past num_hidden_layers;
//  - NotSupported naming the tensors when they are quantized Linear weights still compressed
//    (weight_packed, weight_scale, weight_zero_point, weight_global_scale, weight_shape,
//    input_scale...) or anything else the architecture does not know (a bias it has no place for,
//    another model's tensors).
// Allowed besides: attention quantization parameters (<attn>.{q,k,v}_{scale,zero_point}, read by
// lifecycle::load_quantized), a tied lm_head.weight, rotary inv_freq buffers, and the transform
// matrices compressed-tensors saves with a transform_config ("<module>.R3_q_attn.weight"; kvq
// builds its own from the config).
void check_checkpoint_tensors(const Architecture& arch, const model::ModelConfig& config,
                              const std::map<std::string, Shape>& tensors, std::string_view source);

}  // namespace kvq::model
