// The quantization state of one attention module: what compressed-tensors keeps as attributes
// and parameters on a hooked LlamaAttention (quantization_scheme, quantization_status,
// quantization_enabled, impl / kv_cache presence, q/k/v scales and zero points).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/tensor.h"
#include "kvq/model/attention.h"
#include "kvq/quant/quant_scheme.h"

namespace kvq::lifecycle {

// One of q / k / v: `{base}_scale` (+ `{base}_zero_point`) of the attention module.
struct AttentionQParam {
  std::string base;  // "q", "k" or "v"
  Shape shape;       // tensor → [1]; attn_head → [heads, 1, 1]
  // NaN until calibrated or loaded (the reference's torch.empty is garbage; NaN fails loudly).
  std::vector<float> scale;         // [numel(shape)], values representable in scale_dtype
  DType scale_dtype = DType::kF32;  // the model dtype (observed dtype)
  // Registered exactly where compressed-tensors 0.19.0 registers `{base}_zero_point`:
  // asymmetric args, or an attention config group applied with status < compressed.
  std::optional<std::vector<float>> zero_point;  // zeros unless asymmetric + calibrated
  DType zp_dtype = DType::kI8;                   // args.zp_dtype (fp8 → F8_E4M3)

  bool calibrated() const;  // every scale finite and > 0
  std::string tensor_name(const std::string& module_name) const {
    return module_name + "." + base + "_scale";
  }
  std::string zp_tensor_name(const std::string& module_name) const {
    return module_name + "." + base + "_zero_point";
  }
};

struct QuantizedAttentionState {
  std::string name;  // "model.layers.3.self_attn"
  model::AttentionModule* module = nullptr;
  quant::QuantizationScheme scheme;  // input_activations = the q/k/v args
  bool has_impl = false;             // hooked attention (q quantized): an attention group
  bool has_kv_cache = false;         // hooked kv cache (k/v quantized)
  quant::QuantizationStatus status = quant::QuantizationStatus::kInitialized;
  bool quantization_enabled = true;
  std::optional<AttentionQParam> q, k, v;

  const quant::QuantizationArgs& args() const { return *scheme.input_activations; }
  std::optional<AttentionQParam>& param(char base);  // 'q' | 'k' | 'v'
  const std::optional<AttentionQParam>& param(char base) const;
};

}  // namespace kvq::lifecycle
