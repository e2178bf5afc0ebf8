#include "kvq/runtime/kv_cache_choice.h"

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/strings.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/model/causal_lm.h"

namespace kvq::runtime {
namespace {

using model::KvCacheConfig;
using model::KvScaleGranularity;
using model::KvScales;
using quant::KvFormat;

// The names of the formats `keep` accepts (all by default), comma-separated, in table order.
std::string format_names(bool (*keep)(const quant::KvFormatTraits&) = nullptr) {
  std::string s;
  for (const quant::KvFormatTraits& t : quant::kv_format_table()) {
    if (keep != nullptr && !keep(t)) continue;
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}
std::string scaled_format_names() {
  return format_names([](const quant::KvFormatTraits& t) { return t.needs_scale; });
}

std::string supported_values() {
  std::string s = "auto, fake, or FORMAT[:tensor|head][+q8] with FORMAT one of ";
  s.append(format_names());
  return s;
}

// An f32 cache standing for the checkpoint's fake quantization (its hooks quantize k/v).
KvCacheConfig fake_config(std::string ckpt_label, std::optional<KvScaleGranularity> g) {
  KvCacheConfig c;
  c.fake_quant = true;
  c.fake_quant_of = std::move(ckpt_label);
  c.granularity = g;
  return c;
}

KvCacheConfig resolve_plain(const KvCacheOption& o, std::string_view model_name) {
  switch (o.mode) {
    case KvCacheOption::Mode::kAuto:
      return {};  // f32
    case KvCacheOption::Mode::kFake:
      fail<InvalidArgument>(
          "--kv-cache {}: {} is not a quantized checkpoint (its config.json has no "
          "quantization_config), so there are no calibrated scales to fake-quantize with; make "
          "one with `kvq oneshot --output`, or choose {}",
          o.text, model_name, supported_values());
    case KvCacheOption::Mode::kFormat:
      break;
  }
  KvCacheConfig c = dynamic_cache(o.format, o.granularity.value_or(KvScaleGranularity::kHead),
                                  o.int8_query, o.value_format, o.layer_formats);
  c.sink_tokens = o.sink_tokens;
  return c;
}

// The checkpoint's own cache label without options ("fp8:head"), "" when it has no packed format.
std::string checkpoint_label(const lifecycle::QuantizationLifecycle& lc,
                             std::optional<KvFormat> format) {
  if (!format) return "";
  KvCacheConfig c;
  c.format = *format;
  c.granularity = lc.kv_granularity();
  return c.label();
}

// One FORMAT[:tensor|head] of a --kv-cache value (errors name that part).
struct FormatPart {
  KvFormat format;
  std::optional<KvScaleGranularity> granularity;
};
FormatPart parse_format_part(std::string_view text, std::string_view option = {}) {
  if (option.empty()) option = text;
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::optional<KvFormat> f = quant::parse_kv_format(name);
  if (!f) {
    fail<InvalidArgument>("--kv-cache '{}': unknown KV cache format '{}' (supported: {})", option,
                          name, supported_values());
  }
  FormatPart out{*f, std::nullopt};
  if (colon != std::string_view::npos) {
    const std::string g = ascii_lower(text.substr(colon + 1));
    if (g == "tensor") {
      out.granularity = KvScaleGranularity::kTensor;
    } else if (g == "head") {
      out.granularity = KvScaleGranularity::kHead;
    } else {
      fail<InvalidArgument>("--kv-cache '{}': scale granularity must be 'tensor' or 'head'",
                            option);
    }
    const quant::KvFormatTraits& t = quant::kv_format_traits(out.format);
    if (!t.needs_scale && t.has_row_scales()) {
      fail<NotSupported>(
          "--kv-cache '{}': {} has no stream scales to choose a granularity for: one scale per "
          "{} values is computed from each row when it is written; ':{}' applies to {} only",
          option, t.name, t.block_values, g, scaled_format_names());
    }
    if (!t.needs_scale) {
      fail<NotSupported>("--kv-cache '{}': {} is stored unscaled; ':{}' scales apply to {} only",
                         option, quant::kv_format_name(out.format), g, scaled_format_names());
    }
  }
  return out;
}

// One per-layer exception `[k|v|kv]FIRST[-LAST]=FORMAT[:tensor|head]` of a --kv-cache value
// (`option` is the whole value, for errors).
KvCacheConfig::LayerFormat parse_layer_format(std::string_view part, std::string_view option,
                                              std::optional<KvScaleGranularity>& granularity) {
  const auto bad = [&]() {
    fail<InvalidArgument>(
        "--kv-cache '{}': '+{}' must be +[k|v|kv]LAYER[-LAST]=FORMAT, e.g. +v1=int8_g32 (V of "
        "layer 1 in int8_g32) or +k0-3=bf16",
        option, part);
  };
  const std::size_t eq = part.find('=');
  std::string_view who = part.substr(0, eq);
  KvCacheConfig::LayerFormat lf;
  if (who.starts_with("kv") || who.starts_with("KV")) {
    who.remove_prefix(2);
  } else if (!who.empty() && (who[0] == 'k' || who[0] == 'K')) {
    lf.values = false;
    who.remove_prefix(1);
  } else if (!who.empty() && (who[0] == 'v' || who[0] == 'V')) {
    lf.keys = false;
    who.remove_prefix(1);
  } else {
    bad();
  }
  const std::size_t dash = who.find('-');
  const auto number = [&](std::string_view digits) {
    if (digits.empty() || digits.size() > 6 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      bad();
    return static_cast<std::int64_t>(std::stoll(std::string(digits)));
  };
  lf.first = number(who.substr(0, dash));
  lf.last = dash == std::string_view::npos ? lf.first : number(who.substr(dash + 1));
  if (lf.last < lf.first) {
    fail<InvalidArgument>("--kv-cache '{}': '+{}' names layers {} to {}: the range is empty",
                          option, part, lf.first, lf.last);
  }
  const FormatPart f = parse_format_part(part.substr(eq + 1), option);
  lf.format = f.format;
  if (f.granularity) {
    if (granularity && granularity != f.granularity) {
      fail<InvalidArgument>(
          "--kv-cache '{}': a cache's scales take one granularity, tensor or head ('+{}')", option,
          part);
    }
    granularity = f.granularity;
  }
  return lf;
}

}  // namespace

KvCacheOption parse_kv_cache_option(std::string_view text) {
  KvCacheOption o;
  o.text = std::string(text);
  const std::string low = ascii_lower(text);
  if (low == "auto") return o;
  if (low == "fake") {
    o.mode = KvCacheOption::Mode::kFake;
    return o;
  }
  o.mode = KvCacheOption::Mode::kFormat;
  // Options after the format, in any order: +q8 and +sinkN once each, per-layer exceptions
  // (+v1=int8_g32) any number of times.
  std::optional<KvScaleGranularity> layer_granularity;
  while (true) {
    const std::size_t plus = text.rfind('+');
    if (plus == std::string_view::npos) break;
    const std::string opt = ascii_lower(text.substr(plus + 1));
    if (opt.find('=') != std::string::npos) {
      o.layer_formats.insert(o.layer_formats.begin(),
                             parse_layer_format(text.substr(plus + 1), o.text, layer_granularity));
    } else if (opt == "q8" && !o.int8_query) {
      o.int8_query = true;
    } else if (opt.starts_with("sink") && o.sink_tokens == 0) {
      const std::string_view digits = std::string_view(opt).substr(4);
      std::int64_t n = 0;
      const bool ok = !digits.empty() && digits.size() <= 3 &&
                      digits.find_first_not_of("0123456789") == std::string_view::npos;
      if (ok) n = std::stoll(std::string(digits));
      if (!ok || n < 1 || n > model::KvCacheConfig::kMaxSinkTokens) {
        fail<InvalidArgument>(
            "--kv-cache '{}': '+{}' must be +sinkN with N from 1 to {} (the first N tokens of "
            "every sequence kept in bf16)",
            o.text, opt, model::KvCacheConfig::kMaxSinkTokens);
      }
      o.sink_tokens = n;
    } else {
      fail<InvalidArgument>(
          "--kv-cache '{}': unknown or repeated option '+{}' (options: +q8, "
          "+sinkN, +[k|v|kv]LAYER[-LAST]=FORMAT)",
          o.text, opt);
    }
    text = text.substr(0, plus);
  }
  // K / V in two formats (llama.cpp's -ctk / -ctv): "int8_g32/int4_g32".
  const std::size_t slash = text.find('/');
  const FormatPart k = parse_format_part(text.substr(0, slash));
  o.format = k.format;
  o.granularity = k.granularity;
  if (slash != std::string_view::npos) {
    const FormatPart v = parse_format_part(text.substr(slash + 1));
    if (k.granularity && v.granularity && k.granularity != v.granularity) {
      fail<InvalidArgument>("--kv-cache '{}': K and V scales take one granularity, tensor or head",
                            o.text);
    }
    if (v.format != k.format) o.value_format = v.format;
    if (!o.granularity) o.granularity = v.granularity;
  }
  if (layer_granularity) {
    if (o.granularity && o.granularity != layer_granularity) {
      fail<InvalidArgument>(
          "--kv-cache '{}': a cache's scales take one granularity, tensor or head", o.text);
    }
    o.granularity = layer_granularity;
  }
  bool q8_keys = quant::kv_format_traits(o.format).supports_int8_query();
  for (const model::KvCacheConfig::LayerFormat& lf : o.layer_formats)
    if (lf.keys) q8_keys = q8_keys && quant::kv_format_traits(lf.format).supports_int8_query();
  if (o.int8_query && !q8_keys) {
    fail<NotSupported>(
        "--kv-cache '{}': +q8 (decode scores with an int8 query) applies to {} caches only (every "
        "layer's K)",
        o.text,
        format_names([](const quant::KvFormatTraits& t) { return t.supports_int8_query(); }));
  }
  return o;
}

KvCacheConfig dynamic_cache(KvFormat format, KvScaleGranularity granularity, bool int8_query,
                            std::optional<KvFormat> value_format,
                            std::vector<KvCacheConfig::LayerFormat> layer_formats) {
  KvCacheConfig c = KvCacheConfig::dynamic(format, granularity, int8_query, value_format);
  c.layer_formats = std::move(layer_formats);
  for (const KvCacheConfig::LayerFormat& lf : c.layer_formats) {
    if (quant::kv_format_traits(lf.format).needs_scale && c.scales == KvScales::kNone) {
      c.scales = KvScales::kDynamic;  // an exception with stream scales: dynamic, as the others
      c.granularity = granularity;
    }
  }
  return c;
}

KvCacheConfig resolve_kv_cache(const KvCacheOption& o, const lifecycle::QuantizationLifecycle* lc,
                               std::string_view model_name) {
  // A lifecycle that quantizes nothing (transforms only) leaves the cache to the option.
  if (lc == nullptr || lc->states().empty()) return resolve_plain(o, model_name);

  const std::optional<KvScaleGranularity> g = lc->kv_granularity();
  std::optional<KvFormat> ckpt_format;
  std::string why_not_packed;
  try {
    ckpt_format = lc->kv_format();
  } catch (const NotSupported& e) {
    why_not_packed = e.what();
  }
  const std::string ckpt_label = checkpoint_label(*lc, ckpt_format);

  if (o.mode == KvCacheOption::Mode::kFake) return fake_config(ckpt_label, g);
  if (o.value_format) {
    fail<InvalidArgument>(
        "--kv-cache {}: {} is a quantized checkpoint: its kv_cache_scheme quantizes k and v "
        "alike; K and V in different formats apply to a model without k/v quantization",
        o.text, model_name);
  }
  if (!o.layer_formats.empty()) {
    fail<InvalidArgument>(
        "--kv-cache {}: {} is a quantized checkpoint: its kv_cache_scheme decides each layer's "
        "format; per-layer exceptions apply to a model without k/v quantization",
        o.text, model_name);
  }
  if (o.sink_tokens > 0) {
    fail<InvalidArgument>(
        "--kv-cache {}: {} is a quantized checkpoint: its cache must equal its fake quantization, "
        "which quantizes every token; +sinkN applies to dynamic caches of a model without k/v "
        "quantization",
        o.text, model_name);
  }
  if (o.mode == KvCacheOption::Mode::kFormat) {
    const bool same_format = ckpt_format && *ckpt_format == o.format;
    const bool same_granularity = !o.granularity || o.granularity == g;
    if (!same_format || !same_granularity) {
      if (!ckpt_format) {
        fail<InvalidArgument>(
            "--kv-cache {}: {} is a quantized checkpoint whose k/v have no packed format ({}); "
            "use --kv-cache fake (its fake quantization with an fp32 cache)",
            o.text, model_name, why_not_packed);
      }
      fail<InvalidArgument>(
          "--kv-cache {}: {} is a quantized checkpoint whose KV cache is {} (calibrated scales); "
          "use --kv-cache auto or {} (its packed cache), or fake (its fake quantization with an "
          "fp32 cache). Other formats need the unquantized model (or a checkpoint of that scheme: "
          "kvq oneshot)",
          o.text, model_name, ckpt_label, ckpt_label);
    }
  }
  KvCacheConfig c;
  try {
    c = lc->kv_cache_config();
  } catch (const NotSupported& e) {
    if (o.mode == KvCacheOption::Mode::kFormat) throw;
    log::warn(
        "{}: no packed KV cache for this checkpoint ({}); running its fake quantization "
        "with an fp32 cache",
        model_name, e.what());
    return fake_config(ckpt_label, g);
  }
  c.int8_query_scores = o.int8_query;  // only with an int8 FORMAT (parse_kv_cache_option)
  return c;
}

KvCacheConfig resolve_kv_cache(std::string_view option,
                               const lifecycle::QuantizationLifecycle* lifecycle,
                               std::string_view model_name) {
  return resolve_kv_cache(parse_kv_cache_option(option), lifecycle, model_name);
}

nlohmann::json kv_cache_json(const KvCacheConfig& c) {
  nlohmann::json j;
  j["kv_cache"] = c.label();
  j["kv_format"] = std::string(quant::kv_format_name(c.format));
  j["kv_value_format"] = std::string(quant::kv_format_name(c.v_format()));
  j["kv_granularity"] =
      c.granularity ? nlohmann::json(std::string(model::kv_granularity_name(*c.granularity)))
                    : nlohmann::json(nullptr);
  j["kv_scales"] =
      std::string(model::kv_scales_name(c.fake_quant ? KvScales::kCalibrated : c.scales));
  j["kv_fake_quant"] = c.fake_quant;
  j["kv_sink_tokens"] = c.sink_tokens;
  nlohmann::json layers = nlohmann::json::array();
  for (const model::KvCacheConfig::LayerFormat& lf : c.layer_formats) {
    layers.push_back({{"first_layer", lf.first},
                      {"last_layer", lf.last},
                      {"keys", lf.keys},
                      {"values", lf.values},
                      {"format", std::string(quant::kv_format_name(lf.format))}});
  }
  j["kv_layer_formats"] = std::move(layers);
  return j;
}

std::int64_t kv_bytes_per_token(const model::CausalLM& model, const KvCacheConfig& config) {
  return model.make_cache(1, 1, config).bytes_per_token();
}

std::string dynamic_scales_note(const KvCacheConfig& c, std::string_view first_write) {
  if (c.scales != KvScales::kDynamic) return "";
  const bool head = c.granularity.value_or(KvScaleGranularity::kHead) == KvScaleGranularity::kHead;
  return fmt::format(
      "note: {} KV scales are dynamic: fixed from the absmax of {} ({}); `kvq oneshot` "
      "calibrates them on a dataset",
      c.label(), first_write, head ? "per kv head" : "per layer's K and V");
}

std::string kv_cache_flag_help(bool list) {
  return fmt::format(
      "KV cache{}: auto (a quantized checkpoint's packed cache with its calibrated scales, "
      "else f32), fake (checkpoint only: its fake quantization, fp32 cache), or "
      "FORMAT[:tensor|head] with FORMAT one of {} ({} on a plain model: dynamic scales fixed by "
      "the first write, per kv head unless :tensor; {}: a scale per 32 (…_g64: 64) values of every "
      "row, "
      "no granularity); {}...+q8: approximate int8-query decode scores (VNNI), faster, not "
      "bit-exact; ...+sinkN: the first N tokens of every sequence kept in bf16 (attention "
      "sinks; dynamic caches), e.g. int4_g32_mse+sink1; K/V in two formats as llama.cpp's "
      "-ctk/-ctv: KFORMAT/VFORMAT, e.g. int8_g32/int4_g32_mse; per-layer exceptions "
      "...+[k|v|kv]LAYER[-LAST]=FORMAT, any number, e.g. int4_g32_mse+sink1+v1=int8_g32 (V of "
      "layer 1 in int8_g32) or int8:head+kv0-1=bf16",
      list ? "s, comma-separated" : "", format_names(), scaled_format_names(),
      format_names(
          [](const quant::KvFormatTraits& t) { return !t.needs_scale && t.has_row_scales(); }),
      format_names([](const quant::KvFormatTraits& t) { return t.supports_int8_query(); }));
}

}  // namespace kvq::runtime
