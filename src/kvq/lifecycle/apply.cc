#include "kvq/lifecycle/apply.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/lifecycle/match.h"
#include "kvq/lifecycle/states_tensor.h"
#include "kvq/quant/fake_quantize.h"
#include "kvq/quant/qparams.h"

namespace kvq::lifecycle {

using quant::QuantizationArgs;
using quant::QuantizationConfig;
using quant::QuantizationScheme;
using quant::QuantizationStatus;
using quant::QuantizationStrategy;

namespace {

// compressed-tensors 0.19.0 KV_CACHE_TARGETS (the kv scheme's targets; never read for matching).
const std::vector<std::string> kKvCacheTargets = {"re:.*(self_attn|attention)$"};

bool status_below_compressed(QuantizationStatus s) {
  return static_cast<int>(s) < static_cast<int>(QuantizationStatus::kCompressed);
}

// initialize_qparams' scale dtype: the observed (model) dtype when it is a float type, else fp16.
DType model_scale_dtype(const model::ModelConfig& config) {
  const std::string& d = config.torch_dtype;
  if (d == "float32" || d.empty()) return DType::kF32;
  if (d == "bfloat16") return DType::kBF16;
  if (d == "float16") return DType::kF16;
  if (d == "float64") return DType::kF64;
  return DType::kF16;
}

void validate_attention_scheme(const QuantizationScheme& scheme, const std::string& module) {
  if (scheme.weights)
    fail<ConfigError>(
        "{}: Cannot apply weight quantization to attention. Instead, target the (q|k|v)_proj "
        "submodule layers of attention",
        module);
  if (!scheme.input_activations)
    fail<ConfigError>(
        "{}: Cannot apply attention quantization without specifying input activations", module);
  if (scheme.output_activations)
    fail<ConfigError>("{}: Cannot apply output quantization to attention", module);
}

AttentionQParam init_qparam(const std::string& module_name, const std::string& base,
                            const QuantizationArgs& args, std::int64_t heads, DType scale_dtype,
                            bool force_zero_point) {
  if (args.dynamic == quant::DynamicType::kTrue || args.dynamic == quant::DynamicType::kLocal)
    fail<NotSupported>("{}: dynamic attention quantization ({}) is not supported yet", module_name,
                       base);
  AttentionQParam p;
  p.base = base;
  switch (args.strategy_or_tensor()) {
    case QuantizationStrategy::kTensor:
      p.shape = {1};
      break;
    case QuantizationStrategy::kAttnHead:
      p.shape = {heads, 1, 1};
      break;
    case QuantizationStrategy::kToken:
      fail<ConfigError>("{}: Cannot perform static token quantization", module_name);
    default:
      fail<ConfigError>(
          "{}: {} quantization cannot be applied to attention (use strategy tensor or attn_head)",
          module_name, quant::to_string(args.strategy_or_tensor()));
  }
  p.scale.assign(static_cast<std::size_t>(shape_numel(p.shape)),
                 std::numeric_limits<float>::quiet_NaN());
  p.scale_dtype = scale_dtype;
  // zp_dtype inference of 0.19.0: FP4 → float8_e4m3fn, else pytorch_dtype() (which has no 4-bit
  // float dtype).
  p.zp_dtype = args.zp_dtype   ? *args.zp_dtype
               : args.is_fp4() ? DType::kF8E4M3
                               : args.pytorch_dtype();
  if (force_zero_point || !args.symmetric) p.zero_point = std::vector<float>(p.scale.size(), 0.0f);
  (void)quant::calculate_range(args);  // unsupported bit widths fail here, not mid-forward
  return p;
}

// An llm-compressor recipe with only a kv_cache_scheme resolves to group_0 =
// QuantizationScheme(targets=["Linear"]) with no args: a no-op on Linear modules.
bool scheme_quantizes_anything(const QuantizationScheme& s) {
  return s.weights || s.input_activations || s.output_activations;
}

bool is_linear_or_embedding(const model::Module& m) {
  return match_class(m, "Linear") || match_class(m, "Embedding");
}

}  // namespace

bool AttentionQParam::calibrated() const {
  return !scale.empty() && std::all_of(scale.begin(), scale.end(),
                                       [](float s) { return std::isfinite(s) && s > 0.0f; });
}

std::optional<AttentionQParam>& QuantizedAttentionState::param(char base) {
  switch (base) {
    case 'q':
      return q;
    case 'k':
      return k;
    case 'v':
      return v;
  }
  KVQ_CHECK(false, "bad base {}", base);
  return q;
}

const std::optional<AttentionQParam>& QuantizedAttentionState::param(char base) const {
  return const_cast<QuantizedAttentionState*>(this)->param(base);
}

void forward_quantize(const QuantizedAttentionState& state, char base, model::StatesView states) {
  const auto& p = state.param(base);
  if (!p || states.numel() == 0) return;
  if (!p->calibrated())
    fail<InvalidArgument>(
        "{}.{}_scale is not calibrated (NaN, zero or infinite): run calibration (kvq oneshot) or "
        "load a quantized checkpoint before running with quantization enabled",
        state.name, base);
  // Scale / zero point as compressed-tensors holds them ([1] or [heads, 1, 1]), fp32: the
  // states are fp32 and the scale values are already representable in scale_dtype. The zero
  // point enters as `zp.to(x.dtype)`, so fp32 codes give the same result as zp_dtype codes.
  const Tensor scale = Tensor::from_f32(p->shape, p->scale);
  std::optional<Tensor> zp;
  if (p->zero_point) zp = Tensor::from_f32(p->shape, *p->zero_point);
  assign_states(states, quant::fake_quantize(states_tensor(states), scale, zp ? &*zp : nullptr,
                                             state.args()));
}

QuantizationLifecycle::~QuantizationLifecycle() {
  for (auto& [state, handles] : quant_hooks_)
    for (auto& h : handles) h.remove();
}

QuantizedAttentionState* QuantizationLifecycle::state(std::string_view module_name) {
  for (auto& s : states_)
    if (s->name == module_name) return s.get();
  return nullptr;
}

void QuantizationLifecycle::set_quantization_enabled(bool enabled) {
  for (auto& s : states_) s->quantization_enabled = enabled;
}

void QuantizationLifecycle::set_status(QuantizationStatus status) {
  for (auto& s : states_) s->status = status;
}

void QuantizationLifecycle::install_quantization_hooks(QuantizedAttentionState& state) {
  auto& handles = quant_hooks_[&state];
  for (auto& h : handles) h.remove();
  handles.clear();
  QuantizedAttentionState* s = &state;
  if (s->has_kv_cache) {
    handles.push_back(
        s->module->register_key_hook([s](model::AttentionModule&, model::StatesView v) {
          if (s->quantization_enabled && !v.quantized_by_cache) forward_quantize(*s, 'k', v);
        }));
    handles.push_back(
        s->module->register_value_hook([s](model::AttentionModule&, model::StatesView v) {
          if (s->quantization_enabled && !v.quantized_by_cache) forward_quantize(*s, 'v', v);
        }));
  }
  if (s->has_impl) {
    handles.push_back(
        s->module->register_query_hook([s](model::AttentionModule&, model::StatesView v) {
          if (s->quantization_enabled) forward_quantize(*s, 'q', v);
        }));
  }
}

model::HookHandle QuantizationLifecycle::register_query_hook(QuantizedAttentionState& state,
                                                             model::AttentionHook hook) {
  auto h = state.module->register_query_hook(std::move(hook));
  install_quantization_hooks(state);  // keep quantization last
  return h;
}

model::HookHandle QuantizationLifecycle::register_key_hook(QuantizedAttentionState& state,
                                                           model::AttentionHook hook) {
  auto h = state.module->register_key_hook(std::move(hook));
  install_quantization_hooks(state);
  return h;
}

model::HookHandle QuantizationLifecycle::register_value_hook(QuantizedAttentionState& state,
                                                             model::AttentionHook hook) {
  auto h = state.module->register_value_hook(std::move(hook));
  install_quantization_hooks(state);
  return h;
}

void QuantizationLifecycle::check_scales(std::string_view what) const {
  for (const auto& s : states_)
    for (char base : {'q', 'k', 'v'}) {
      const auto& p = s->param(base);
      if (!p) continue;
      for (std::size_t i = 0; i < p->scale.size(); ++i) {
        const float v = p->scale[i];
        if (!(std::isfinite(v) && v > 0.0f))
          fail<InvalidArgument>("{}{}{}.{}_scale[{}] = {} ({})", what, what.empty() ? "" : ": ",
                                s->name, base, i, v,
                                std::isnan(v) ? "never calibrated or NaN states"
                                : v == 0      ? "zero"
                                              : "not finite or negative");
      }
    }
}

std::vector<std::string> QuantizationLifecycle::export_warnings() const { return export_warnings_; }

std::optional<QuantizationConfig> QuantizationLifecycle::config_from_model() const {
  std::vector<QuantizationScheme> schemes;
  std::optional<QuantizationStatus> status;
  std::vector<std::string> type_names;                                   // quantized types
  std::vector<std::pair<std::string, std::vector<std::string>>> ignore;  // insertion-ordered
  std::optional<QuantizationArgs> kv;
  std::map<const model::Module*, const QuantizedAttentionState*> by_module;
  for (const auto& s : states_) by_module[s->module] = s.get();
  for (const model::Module* m : std::as_const(model_->root()).named_modules()) {
    auto it = by_module.find(m);
    const QuantizedAttentionState* s = it == by_module.end() ? nullptr : it->second;
    const bool has_group = s && s->has_impl;
    const bool has_kv = s != nullptr;  // every state is a cached attention module
    const std::string& type = m->class_name();
    if (has_group) {
      status = s->status;
      if (std::find(type_names.begin(), type_names.end(), type) == type_names.end())
        type_names.push_back(type);
      if (std::find(schemes.begin(), schemes.end(), s->scheme) == schemes.end())
        schemes.push_back(s->scheme);
    }
    if (has_kv) {
      status = s->status;
      kv = s->scheme.input_activations;
    }
    if (!has_group) {
      auto jt =
          std::find_if(ignore.begin(), ignore.end(), [&](auto& p) { return p.first == type; });
      if (jt == ignore.end()) {
        ignore.emplace_back(type, std::vector<std::string>{});
        jt = std::prev(ignore.end());
      }
      jt->second.push_back(m->name());
    }
  }
  if (schemes.empty() && !kv) return std::nullopt;
  QuantizationConfig c;
  for (std::size_t i = 0; i < schemes.size(); ++i)
    c.config_groups.emplace_back("group_" + std::to_string(i), schemes[i]);
  std::vector<std::string> ign;
  for (auto& [type, names] : ignore)
    if (std::find(type_names.begin(), type_names.end(), type) != type_names.end())
      ign.insert(ign.end(), names.begin(), names.end());
  c.ignore = ign;
  c.kv_cache_scheme = kv;
  c.quantization_status = status.value_or(QuantizationStatus::kInitialized);
  c.format = c.quantization_status == QuantizationStatus::kCompressed ? "int-quantized" : "dense";
  c.global_compression_ratio = std::nullopt;
  return c;
}

std::unique_ptr<QuantizationLifecycle> apply_quantization_config(model::CausalLM& model,
                                                                 const QuantizationConfig& config,
                                                                 bool fuse_offline) {
  std::unique_ptr<QuantizationLifecycle> lc(new QuantizationLifecycle());
  lc->model_ = &model;
  lc->config_ = config;
  const model::ModelConfig& mc = model.config();
  // Key smoothing, then transforms: their hooks precede every observer and quantization hook.
  if (config.key_smoothing) {
    lc->key_smoothing_ = std::make_unique<KeySmoothing>(model, *config.key_smoothing);
    log::info("{}", lc->key_smoothing_->summary());
  }
  if (config.spinquant) {
    lc->config_.transforms = quant::spinquant_transform_config(
        *config.spinquant, static_cast<int>(mc.head_dim), "recipe: SpinQuantModifier");
    lc->config_.spinquant.reset();
  }
  lc->transforms_ = apply_transforms(model, lc->config_.transforms, fuse_offline);
  for (const std::string& line : lc->transforms_->summary()) log::info("transform {}", line);
  const std::int64_t heads = mc.num_attention_heads, kv_heads = mc.num_key_value_heads;
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    fail<ConfigError>(
        "model config: num_attention_heads ({}) must be a positive multiple of "
        "num_key_value_heads ({}) for attention quantization",
        heads, kv_heads);
  const DType scale_dtype = model_scale_dtype(mc);
  const bool force_zp = status_below_compressed(config.quantization_status);

  std::map<const model::Module*, QuantizedAttentionState*> by_module;
  auto state_for = [&](const std::string& name, model::Module* m) -> QuantizedAttentionState& {
    auto it = by_module.find(m);
    if (it != by_module.end()) return *it->second;
    auto s = std::make_unique<QuantizedAttentionState>();
    s->name = name;
    s->module = dynamic_cast<model::AttentionModule*>(m);
    KVQ_CHECK(s->module != nullptr, "{} is not an attention module", name);
    by_module[m] = s.get();
    lc->states_.push_back(std::move(s));
    return *lc->states_.back();
  };

  // 1. kv_cache_scheme: every attention module, ignore list not applied (reference behaviour).
  if (config.kv_cache_scheme) {
    const QuantizationArgs& args = *config.kv_cache_scheme;
    if (!args.symmetric) {
      log::warn("vLLM does not support asymmetric kv cache quantization");
      lc->export_warnings_.push_back(
          "kv_cache_scheme is asymmetric: vLLM does not support asymmetric kv cache quantization");
    }
    QuantizationScheme scheme;
    scheme.targets = kKvCacheTargets;
    scheme.input_activations = args;
    for (model::Module* m : model.named_modules()) {
      if (!dynamic_cast<model::AttentionModule*>(m)) continue;
      QuantizedAttentionState& s = state_for(m->name(), m);
      s.scheme = scheme;
      s.has_kv_cache = true;
      s.k = init_qparam(s.name, "k", args, kv_heads, scale_dtype, /*force_zero_point=*/false);
      s.v = init_qparam(s.name, "v", args, kv_heads, scale_dtype, false);
      s.status = config.quantization_status;
    }
  }

  // 2. config groups.
  std::vector<std::pair<std::string, const QuantizationScheme*>> target_to_scheme;
  for (const auto& [group, scheme] : config.config_groups)
    for (const std::string& t : scheme.targets) {
      auto it = std::find_if(target_to_scheme.begin(), target_to_scheme.end(),
                             [&](auto& p) { return p.first == t; });
      if (it == target_to_scheme.end())
        target_to_scheme.emplace_back(t, &scheme);
      else
        it->second = &scheme;  // OrderedDict: keeps the first position, last value
    }
  std::vector<std::string> targets;
  for (auto& [t, s] : target_to_scheme) targets.push_back(t);
  const std::vector<std::string> ignore = config.ignore.value_or(std::vector<std::string>{});
  refuse_fused_module_targets(model, targets, "quantization config");
  std::vector<std::string> unmatched;
  auto matched =
      match_named_modules(model.root(), targets, ignore, /*warn_on_fail=*/true, &unmatched);
  if (!unmatched.empty())
    fail<ConfigError>("quantization config: target(s) {} match no module of the model",
                      fmt::join(unmatched, ", "));
  bool any_group_applied = false;
  for (auto& [name, m] : matched) {
    const auto mt = match_targets(name, *m, targets);
    const QuantizationScheme& scheme =
        *std::find_if(target_to_scheme.begin(), target_to_scheme.end(), [&](auto& p) {
           return p.first == mt.front();
         })->second;
    if (dynamic_cast<model::AttentionModule*>(m) &&
        is_narrow_match(model.root(), scheme.targets, name, m)) {
      validate_attention_scheme(scheme, name);
      QuantizedAttentionState& s = state_for(name, m);
      s.scheme = scheme;
      s.has_impl = true;      // initialize_hooked_attention ...
      s.has_kv_cache = true;  // ... always implies the hooked kv cache
      const QuantizationArgs& args = *scheme.input_activations;
      s.q = init_qparam(name, "q", args, heads, scale_dtype, force_zp);
      s.k = init_qparam(name, "k", args, kv_heads, scale_dtype, force_zp);
      s.v = init_qparam(name, "v", args, kv_heads, scale_dtype, force_zp);
      s.status = config.quantization_status;
      if (!args.symmetric)
        lc->export_warnings_.push_back(
            name + ": asymmetric attention quantization (vLLM requires symmetric)");
      any_group_applied = true;
    } else if (is_linear_or_embedding(*m) && scheme_quantizes_anything(scheme)) {
      fail<NotSupported>(
          "not supported yet: weight/activation quantization of Linear modules (targets {}); kvq "
          "quantizes attention (target LlamaAttention or re:.*self_attn$) and the KV cache "
          "(kv_cache_scheme)",
          fmt::join(scheme.targets, ", "));
    }
    // Other matched modules (decoder layers, norms, non-narrow attention matches) are skipped
    // silently, as compressed-tensors 0.19.0 does.
  }
  const bool groups_quantize =
      std::any_of(config.config_groups.begin(), config.config_groups.end(),
                  [](auto& g) { return scheme_quantizes_anything(g.second); });
  if (groups_quantize && !any_group_applied)
    fail<ConfigError>(
        "quantization config: config groups select no attention module (targets {} match only "
        "modules kvq does not quantize, or attention modules only broadly, e.g. through a parent)",
        fmt::join(targets, ", "));
  if (lc->states_.empty() && lc->config_.transforms.empty() && !lc->key_smoothing_)
    fail<ConfigError>(
        "quantization config selects nothing to quantize (no kv_cache_scheme, no config groups, "
        "no transforms and no key smoothing)");

  // Keep named_modules order (kv pass and group pass both walk it, but groups may add states).
  std::vector<model::Module*> order = model.named_modules();
  std::stable_sort(lc->states_.begin(), lc->states_.end(), [&](auto& a, auto& b) {
    return std::find(order.begin(), order.end(), a->module) <
           std::find(order.begin(), order.end(), b->module);
  });
  for (auto& s : lc->states_) lc->install_quantization_hooks(*s);
  return lc;
}

}  // namespace kvq::lifecycle
