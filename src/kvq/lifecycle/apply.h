// apply_quantization_config for a CausalLM (compressed-tensors 0.19.0
// `quantization/lifecycle/apply.py` + `initialize.py`, installed version), and the object that
// owns the result: one QuantizedAttentionState per quantized attention module plus the
// fake-quantization hooks. Nothing is global: two models quantized in one process are
// independent, and destroying the lifecycle removes its hooks (the model is plain again).
//
// Rules (0.19.0):
//  - kv_cache_scheme first: EVERY attention module gets k/v quantization (config.ignore is not
//    applied, as in the reference); k_scale / v_scale, zero points only when asymmetric.
//    An asymmetric kv scheme is allowed here (fake quant + int formats) with the reference's
//    warning "vLLM does not support asymmetric kv cache quantization"; `export_warnings()` lists
//    it.
//  - config groups: target → scheme (later groups overwrite a repeated target string); modules
//    matched (in named_modules order, minus ignore); the scheme is the one of the highest-priority
//    matching target (match_targets). An attention module that the scheme's targets match
//    NARROWLY (is_narrow_match) gets q + k + v quantization (zero points when the status is below
//    compressed). Non-narrow matches and other module classes are skipped silently, except
//    Linear / Embedding → NotSupported (kvq quantizes attention only).
//  - attention schemes are validated like _validate_attention_scheme (weights / missing input
//    activations / output activations → ConfigError with the reference message).
//  - a target of a config group that matches no module → ConfigError (the reference only warns;
//    a recipe that selects nothing is a mistake kvq refuses).
//  - key smoothing (a recipe's KeySmoothingModifier, lifecycle/key_smoothing.h) before
//    everything, so it sees the raw states and a rotation mixes the smoothed channels;
//  - transforms first (lifecycle/transforms.h): config.transforms, or the TransformConfig a
//    recipe's SpinQuantModifier makes for this model; their hooks precede every quantization
//    hook and observer. A config may hold transforms only (nothing quantized).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/lifecycle/key_smoothing.h"
#include "kvq/lifecycle/quantized_attention.h"
#include "kvq/lifecycle/transforms.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/quant_config.h"

namespace kvq::lifecycle {

class QuantizationLifecycle {
 public:
  ~QuantizationLifecycle();
  QuantizationLifecycle(const QuantizationLifecycle&) = delete;
  QuantizationLifecycle& operator=(const QuantizationLifecycle&) = delete;

  model::CausalLM& model() { return *model_; }
  const model::CausalLM& model() const { return *model_; }
  // The config applied; its `transforms` are the resolved ones (a recipe's SpinQuantModifier
  // turned into the TransformConfig for this model).
  const quant::QuantizationConfig& config() const { return config_; }
  // The transforms applied (empty when the config has none).
  const AppliedTransforms& transforms() const { return *transforms_; }
  // A recipe's KeySmoothingModifier (nullptr when none): its hooks precede the transforms';
  // calibrate() fits it first.
  KeySmoothing* key_smoothing() { return key_smoothing_.get(); }
  const KeySmoothing* key_smoothing() const { return key_smoothing_.get(); }

  // In named_modules order.
  const std::vector<std::unique_ptr<QuantizedAttentionState>>& states() const { return states_; }
  QuantizedAttentionState* state(std::string_view module_name);  // nullptr when not quantized

  // enable_quantization / disable_quantization on every quantized module.
  void set_quantization_enabled(bool enabled);
  void set_status(quant::QuantizationStatus status);

  // Hooks that must run BEFORE fake quantization (observers, transforms): they are inserted
  // ahead of this lifecycle's quantization hooks, as the reference's pre-hooks run before
  // QuantizedKVCache.forward / QuantizedAttentionImpl.forward quantize.
  model::HookHandle register_query_hook(QuantizedAttentionState& state, model::AttentionHook hook);
  model::HookHandle register_key_hook(QuantizedAttentionState& state, model::AttentionHook hook);
  model::HookHandle register_value_hook(QuantizedAttentionState& state, model::AttentionHook hook);

  // QuantizationConfig.from_pretrained(model): the config a checkpoint of the current state
  // declares (attention groups as "group_0"...; kv_cache_scheme from the last attention module;
  // ignore = non-group modules of a quantized type; format "dense"). nullopt when nothing is
  // quantized.
  std::optional<quant::QuantizationConfig> config_from_model() const;

  // Every scale set, finite and > 0; InvalidArgument naming the module and tensor otherwise.
  void check_scales(std::string_view what = "") const;

  // Why a checkpoint of this state would not load in vLLM (asymmetric kv, ...); empty when fine.
  std::vector<std::string> export_warnings() const;

  // --- Packed KV cache (kv_cache_config.cc) ---
  // The packed format of the kv scheme: fp8 → kFP8E4M3, int8 → kINT8, int4 → kINT4, float 4 →
  // kNVFP4 (kvq extension: see kv_cache_config.cc). NotSupported for anything else.
  quant::KvFormat kv_format() const;
  // The k/v strategy as a cache granularity (tensor / attn_head; nullopt for others or none).
  std::optional<model::KvScaleGranularity> kv_granularity() const;
  // The config of a packed cache that stores k/v as this lifecycle's k/v fake quantization does:
  // per layer the calibrated (or loaded) k/v scales, one value (tensor) or one per kv head
  // (attn_head), and zero points (asymmetric int); NVFP4: global scale 448 / scale per stream.
  // Layers quantized in another format than the first quantized one's, and layers without k/v
  // quantization (f32, as under fake quantization), are per-layer exceptions
  // (KvCacheConfig::layer_formats). InvalidArgument naming the module when a scale is not
  // calibrated; NotSupported (use fake quant then) for k/v in a format kvq does not pack, k
  // without v, or layers with different scale granularities.
  // A forward on such a cache leaves k/v to it: the k/v fake-quant hooks see
  // StatesView::quantized_by_cache and stand aside, so k/v are quantized once, by the cache; on
  // any other cache (or none) the hooks fake-quantize. Nothing to switch.
  model::KvCacheConfig kv_cache_config() const;
  // model().make_cache(batch, capacity, kv_cache_config()).
  model::KvCache make_kv_cache(std::int64_t batch, std::int64_t capacity) const;

 private:
  friend std::unique_ptr<QuantizationLifecycle> apply_quantization_config(
      model::CausalLM& model, const quant::QuantizationConfig& config, bool fuse_offline);
  QuantizationLifecycle() = default;
  void install_quantization_hooks(QuantizedAttentionState& state);

  model::CausalLM* model_ = nullptr;
  quant::QuantizationConfig config_;
  std::unique_ptr<KeySmoothing> key_smoothing_;
  std::unique_ptr<AppliedTransforms> transforms_;
  std::vector<std::unique_ptr<QuantizedAttentionState>> states_;
  // Per state: the fake-quant hook handles, re-registered last whenever a pre-hook is added.
  std::map<const QuantizedAttentionState*, std::vector<model::HookHandle>> quant_hooks_;
  std::vector<std::string> export_warnings_;
};

// fuse_offline = false: the model's weights already hold the config's offline transforms (a
// checkpoint being loaded); only the online ones are applied.
std::unique_ptr<QuantizationLifecycle> apply_quantization_config(
    model::CausalLM& model, const quant::QuantizationConfig& config, bool fuse_offline = true);

// Fake-quantizes states with a state's q/k/v qparams (InvalidArgument naming the module when the
// scale was never calibrated or loaded).
void forward_quantize(const QuantizedAttentionState& state, char base, model::StatesView states);

}  // namespace kvq::lifecycle
