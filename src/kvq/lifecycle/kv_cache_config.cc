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

std::optional<model::KvScaleGranularity> granularity_of(const quant::QuantizationArgs& args) {
  switch (args.strategy_or_tensor()) {
    case QuantizationStrategy::kTensor:
      return model::KvScaleGranularity::kTensor;
    case QuantizationStrategy::kAttnHead:
      return model::KvScaleGranularity::kHead;
    default:
      return std::nullopt;
  }
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
  for (const auto& s : states_)
    if (s->k) return granularity_of(s->args());
  return std::nullopt;
}

model::KvCacheConfig QuantizationLifecycle::kv_cache_config() const {
  model::KvCacheConfig spec;
  spec.format = kv_format();  // the first quantized layer's; other layers' are exceptions
  spec.scales = model::KvScales::kCalibrated;
  spec.granularity = kv_granularity();
  const auto layers = model_->config().num_hidden_layers;
  std::vector<const QuantizedAttentionState*> by_layer(static_cast<std::size_t>(layers), nullptr);
  for (const auto& s : states_) {
    if (!s->k && !s->v) continue;
    if (!s->k || !s->v)
      fail<NotSupported>(
          "packed KV cache: {} quantizes only its {} (a packed cache stores k and v quantized "
          "alike); run it with fake quantization",
          s->name, s->k ? "k" : "v");
    by_layer.at(static_cast<std::size_t>(s->module->layer_idx())) = s.get();
  }
  // Layer l in `format` where that is not the cache's: a per-layer exception, consecutive layers
  // of one format in one range. Unquantized layers keep f32 k/v, as under fake quantization.
  const auto except = [&](std::int64_t l, KvFormat format) {
    if (format == spec.format) return;
    auto& ex = spec.layer_formats;
    if (!ex.empty() && ex.back().format == format && ex.back().last == l - 1) {
      ex.back().last = l;
    } else {
      ex.push_back({.first = l, .last = l, .keys = true, .values = true, .format = format});
    }
  };
  for (std::int64_t l = 0; l < layers; ++l) {
    const QuantizedAttentionState* s = by_layer[static_cast<std::size_t>(l)];
    model::KvLayerScales ls;
    if (s == nullptr) {
      except(l, KvFormat::kF32);
      spec.layers.push_back(std::move(ls));
      continue;
    }
    // A config group may give layers different schemes: each its own packed format, under one
    // scale granularity (the cache's).
    const std::optional<KvFormat> f = quant::kv_format_for_args(s->args());
    if (!f)
      fail<NotSupported>(
          "packed KV cache: {} uses {}-bit {} k/v, which kvq does not pack; run it with fake "
          "quantization",
          s->name, s->args().num_bits, quant::to_string(s->args().type));
    if (granularity_of(s->args()) != spec.granularity)
      fail<NotSupported>(
          "packed KV cache: {} has {} k/v scales, another layer does not: a cache takes one "
          "granularity; run it with fake quantization",
          s->name, quant::to_string(s->args().strategy_or_tensor()));
    except(l, *f);
    stream_params(*s, 'k', *f, ls.k_scale, ls.k_zero_point, ls.k_global_scale);
    stream_params(*s, 'v', *f, ls.v_scale, ls.v_zero_point, ls.v_global_scale);
    spec.layers.push_back(std::move(ls));
  }
  return spec;
}

model::KvCache QuantizationLifecycle::make_kv_cache(std::int64_t batch,
                                                    std::int64_t capacity) const {
  return model_->make_cache(batch, capacity, kv_cache_config());
}

}  // namespace kvq::lifecycle
