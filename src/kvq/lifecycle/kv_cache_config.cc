// The calibrated / loaded k/v quantization of a lifecycle as a packed KV cache
// (model::KvCacheConfig with calibrated scales).
//
// The cache encodes a row with quant::quantize_row(format, x, scale, zero_point, global_scale),
// which is compressed-tensors' fake_quantize with the same qparams (kvq/quant/formats.h), so a
// packed fp8 / int8 / int4 cache gives the logits of the k/v fake-quant hooks.
//
// FP4 (kvq extension): compressed-tensors' fp4 kv scheme (num_bits 4, type float, tensor or
// attn_head) fake-quantizes with one scale per stream. The packed cache stores NVFP4 instead — E2M1
// with an E4M3 scale per 16 values, computed when the token is written, under the stream's fp32
// global scale, which comes from the calibrated scale: scale = amax / 6, so 448 / scale =
// 448 · 6 / amax = compressed-tensors' generate_gparam(amax). NVFP4 is never coarser than the
// plain FP4 it replaces, but it is a different quantizer: packed and fake-quant logits differ.
#include <cmath>

#include "kvq/core/error.h"
#include "kvq/lifecycle/apply.h"

namespace kvq::lifecycle {

using quant::KvFormat;
using quant::QuantizationStrategy;

namespace {

// k or v of one module as the cache wants it: scales, zero points, nvfp4 global scales.
void stream_params(const QuantizedAttentionState& s, char base, KvFormat format,
                   std::vector<float>& scale, std::vector<float>& zero_point,
                   std::vector<float>& global_scale) {
  const auto& p = s.param(base);
  KVQ_CHECK(p.has_value(), "{} has no {} qparams", s.name, base);
  if (!p->calibrated())
    fail<InvalidArgument>(
        "{}.{}_scale is not calibrated (NaN, zero or infinite): calibrate (kvq oneshot) or load a "
        "quantized checkpoint before building a packed KV cache",
        s.name, base);
  if (quant::kv_format_traits(format).global_scale) {  // nvfp4: 448 / scale per stream
    for (float v : p->scale) global_scale.push_back(448.0f / v);
    return;
  }
  scale = p->scale;
  if (p->zero_point) zero_point = *p->zero_point;
}

}  // namespace

KvFormat QuantizationLifecycle::kv_format() const {
  const quant::QuantizationArgs* args = nullptr;
  for (const auto& s : states_)
    if (s->k) {
      args = &s->args();
      break;
    }
  if (args == nullptr) fail<NotSupported>("packed KV cache: no k/v quantization in this model");
  if (const std::optional<KvFormat> f = quant::kv_format_for_args(*args)) return *f;
  fail<NotSupported>(
      "packed KV cache: no packed format for {}-bit {} k/v (kvq packs fp8, int8, "
      "int4 and fp4 as nvfp4); run with fake quantization instead",
      args->num_bits, quant::to_string(args->type));
}

std::optional<model::KvScaleGranularity> QuantizationLifecycle::kv_granularity() const {
  for (const auto& s : states_) {
    if (!s->k) continue;
    switch (s->args().strategy_or_tensor()) {
      case QuantizationStrategy::kTensor:
        return model::KvScaleGranularity::kTensor;
      case QuantizationStrategy::kAttnHead:
        return model::KvScaleGranularity::kHead;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

model::KvCacheConfig QuantizationLifecycle::kv_cache_config() const {
  model::KvCacheConfig spec;
  spec.format = kv_format();
  spec.scales = model::KvScales::kCalibrated;
  spec.granularity = kv_granularity();
  const auto layers = model_->config().num_hidden_layers;
  std::vector<const QuantizedAttentionState*> by_layer(static_cast<std::size_t>(layers), nullptr);
  for (const auto& s : states_)
    if (s->k && s->v) by_layer.at(static_cast<std::size_t>(s->module->layer_idx())) = s.get();
  for (std::int64_t l = 0; l < layers; ++l) {
    const QuantizedAttentionState* s = by_layer[static_cast<std::size_t>(l)];
    if (s == nullptr)
      fail<NotSupported>(
          "packed KV cache: layer {} has no k/v quantization (the packed cache stores every layer "
          "in one format); run partially quantized models with fake quantization",
          l);
    // Every module must share the format: a config group may give layers different schemes.
    const KvFormat f = quant::kv_format_for_args(s->args()).value_or(KvFormat::kF32);
    if (f != spec.format)
      fail<NotSupported>("packed KV cache: {} uses {} k/v but layer 0 uses {}", s->name,
                         quant::kv_format_name(f), quant::kv_format_name(spec.format));
    model::KvLayerScales ls;
    stream_params(*s, 'k', spec.format, ls.k_scale, ls.k_zero_point, ls.k_global_scale);
    stream_params(*s, 'v', spec.format, ls.v_scale, ls.v_zero_point, ls.v_global_scale);
    spec.layers.push_back(std::move(ls));
  }
  return spec;
}

model::KvCache QuantizationLifecycle::make_kv_cache(std::int64_t batch,
                                                    std::int64_t capacity) const {
  return model_->make_cache(batch, capacity, kv_cache_config());
}

}  // namespace kvq::lifecycle
