// Which KV cache a run uses: the ONE place that turns what a user gave — a checkpoint's
// quantization_config (through its lifecycle) or a `--kv-cache` string — into a
// model::KvCacheConfig. Every command (generate, perplexity, bench, eval, compare) and every eval
// task builds its caches from the config this returns.
//
//   auto (default)        quantized checkpoint (config.json has a quantization_config with a
//                         kv_cache_scheme or an attention group): its PACKED cache with the
//                         calibrated k/v scales (QuantizationLifecycle::kv_cache_config). Its
//                         k/v fake-quant hooks then stand aside by themselves (the cache
//                         quantizes; StatesView::quantized_by_cache); q fake quantization stays.
//                         Plain model: f32.
//   FORMAT[:tensor|head]  f32, bf16, f16 (unscaled: no granularity), fp8, int8, int4, nvfp4,
//                         fp8_e5m2 (quant::kv_format_table; aliases: quant::parse_kv_format). Plain
//                         model: a packed cache with DYNAMIC scales fixed by the first write (the
//                         prompt), one per kv head
//                         (`:head`, the default) or per layer's K / V (`:tensor`), see
//                         model/kv_cache.h. Quantized checkpoint: must name the checkpoint's
//                         format (and strategy), and means `auto`; anything else is an error.
//   FORMAT...+q8          int8 / int4 / nvfp4: the same cache, with approximate decode scores —
//                         the query quantized to int8 per head, integer dot products (AVX-512
//                         VNNI; see kernels/cpu/int8_query.h). Opt-in: not bit-identical to fake
//                         quantization.
//   KFORMAT/VFORMAT...    plain model: K and V in two formats (llama.cpp's -ctk / -ctv), e.g.
//                         int8_g32/int4_g32_mse or bf16/int4:head; one granularity for both.
//   FORMAT...+sinkN       plain model, a quantized FORMAT: the first N tokens of every sequence
//                         in bf16 (KvCacheConfig::sink_tokens). Combines with +q8.
//   FORMAT...+vL=F        plain model: per-layer exceptions (KvCacheConfig::layer_formats), any
//                         number: `v1=int8_g32` V of layer 1 in int8_g32, `k0-3=bf16` K of layers
//                         0 to 3 in bf16, `kv5=f32` both; a later one wins where two overlap.
//   fake                  quantized checkpoint only: the reference semantics — an f32 cache, so
//                         the lifecycle's k/v fake-quant hooks quantize (for comparison with
//                         auto).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/model/kv_cache.h"
#include "kvq/quant/formats.h"

namespace kvq::model {
class CausalLM;
}
namespace kvq::lifecycle {
class QuantizationLifecycle;
}

namespace kvq::runtime {

// The flag value as typed, parsed (no model needed: a typo fails before loading).
struct KvCacheOption {
  enum class Mode : std::uint8_t { kAuto, kFake, kFormat };
  Mode mode = Mode::kAuto;
  quant::KvFormat format = quant::KvFormat::kF32;        // kFormat (K's, and V's if not below)
  std::optional<quant::KvFormat> value_format;           // `K/V` with two different formats
  std::optional<model::KvScaleGranularity> granularity;  // kFormat with `:tensor` / `:head`
  bool int8_query = false;                               // `+q8`
  std::int64_t sink_tokens = 0;                          // `+sinkN`
  std::vector<model::KvCacheConfig::LayerFormat> layer_formats;  // `+v1=int8_g32`, in order
  std::string text;                                              // as typed
};
// InvalidArgument naming the value and listing the supported ones; NotSupported for a
// granularity on an unscaled format (f32:head).
KvCacheOption parse_kv_cache_option(std::string_view text);

// THE resolution: the cache `option` asks for on a model whose checkpoint quantization is
// `lifecycle` (null for a plain model; one that quantizes nothing — a recipe of rotations only —
// counts as plain: FORMAT then means dynamic scales of the rotated k/v). InvalidArgument naming the
// flag value and the checkpoint's own format when they disagree, or for `fake` on a plain model.
// A checkpoint that quantizes some layers only, or layer groups in different formats, gets a
// packed cache with per-layer formats (f32 where nothing is quantized); `auto` on one whose k/v
// cannot be packed (layers with different scale granularities, k without v, a format kvq does
// not pack) falls back to fake with a warning.
model::KvCacheConfig resolve_kv_cache(const KvCacheOption& option,
                                      const lifecycle::QuantizationLifecycle* lifecycle,
                                      std::string_view model_name);
// parse_kv_cache_option + resolve_kv_cache.
model::KvCacheConfig resolve_kv_cache(std::string_view option,
                                      const lifecycle::QuantizationLifecycle* lifecycle,
                                      std::string_view model_name);

// A dynamic cache of these formats (model::KvCacheConfig::dynamic) with per-layer exceptions; an
// exception in a format with stream scales makes the cache's scales dynamic at `granularity` even
// when its base formats have none (`f32+k5=int4`: per-head scales for K of layer 5).
model::KvCacheConfig dynamic_cache(quant::KvFormat format, model::KvScaleGranularity granularity,
                                   bool int8_query, std::optional<quant::KvFormat> value_format,
                                   std::vector<model::KvCacheConfig::LayerFormat> layer_formats);

// {"kv_cache": label, "kv_format", "kv_granularity" (null without scales), "kv_scales",
//  "kv_fake_quant"}.
nlohmann::json kv_cache_json(const model::KvCacheConfig& config);

// K and V bytes per token of one sequence (all layers) of a cache of this config.
std::int64_t kv_bytes_per_token(const model::CausalLM& model, const model::KvCacheConfig& config);

// The one-line note a command prints for dynamic scales ("" otherwise): where the scales come
// from (`first_write`: "the prompt", "each window's tokens", ...) and that `kvq oneshot`
// calibrates them.
std::string dynamic_scales_note(const model::KvCacheConfig& config, std::string_view first_write);

// The help text of the flag (shared by the commands).
std::string kv_cache_flag_help(bool list);

}  // namespace kvq::runtime
