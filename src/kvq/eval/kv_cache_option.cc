#include "kvq/eval/kv_cache_option.h"

#include <cctype>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/model/llama_model.h"

namespace kvq::eval {
namespace {

using model::KvScaleGranularity;
using quant::KvFormat;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string format_names() {
  std::string s;
  for (const quant::KvFormatTraits& t : quant::kv_format_table()) {
    if (!s.empty()) s += ", ";
    s += t.name;
  }
  return s;
}

std::string supported_values() {
  std::string s = "auto, fake, or FORMAT[:tensor|head][+q8] with FORMAT one of ";
  s.append(format_names());
  return s;
}

// "fp8:head", "int8:head+q8"; unscaled formats have no granularity.
std::string label_of(KvFormat format, std::optional<KvScaleGranularity> g,
                     bool int8_query = false) {
  std::string s(quant::kv_format_name(format));
  if (g) {
    // Appends only: GCC 12 reports a false -Wrestrict on `":" + std::string(...)`.
    s.push_back(':');
    s.append(model::kv_granularity_name(*g));
  }
  if (int8_query) s.append("+q8");
  return s;
}

// The checkpoint's k/v strategy as a cache granularity (nullopt for other strategies).
std::optional<KvScaleGranularity> checkpoint_granularity(
    const lifecycle::QuantizationLifecycle& lc) {
  for (const auto& s : lc.states()) {
    if (!s->k) continue;
    switch (s->args().strategy_or_tensor()) {
      case quant::QuantizationStrategy::kTensor:
        return KvScaleGranularity::kTensor;
      case quant::QuantizationStrategy::kAttnHead:
        return KvScaleGranularity::kHead;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

KvCacheChoice fake_choice(std::string_view ckpt_label, std::optional<KvScaleGranularity> g) {
  KvCacheChoice c;
  c.spec = model::KvCacheSpec{KvFormat::kF32, {}};
  c.kv_fake_quant = true;
  c.scales = KvScales::kCalibrated;
  c.granularity = g;
  c.label = ckpt_label.empty() ? "fake" : fmt::format("fake({})", ckpt_label);
  return c;
}

KvCacheChoice resolve_plain(const KvCacheOption& o, std::string_view model_name) {
  KvCacheChoice c;
  switch (o.mode) {
    case KvCacheOption::Mode::kAuto:
      return c;  // f32
    case KvCacheOption::Mode::kFake:
      fail<InvalidArgument>(
          "--kv-cache {}: {} is not a quantized checkpoint (its config.json has no "
          "quantization_config), so there are no calibrated scales to fake-quantize with; make "
          "one with `kvq oneshot --output`, or choose {}",
          o.text, model_name, supported_values());
    case KvCacheOption::Mode::kFormat:
      break;
  }
  const bool scaled = quant::kv_format_traits(o.format).needs_scale;
  if (scaled) {
    c.granularity = o.granularity.value_or(KvScaleGranularity::kHead);
    c.scales = KvScales::kDynamic;
  }
  c.spec = model::KvCacheSpec{o.format, {}, c.granularity, o.int8_query};
  c.label = label_of(o.format, c.granularity, o.int8_query);
  return c;
}

}  // namespace

KvCacheOption parse_kv_cache_option(std::string_view text) {
  KvCacheOption o;
  o.text = std::string(text);
  const std::string low = lower(text);
  if (low == "auto") return o;
  if (low == "fake") {
    o.mode = KvCacheOption::Mode::kFake;
    return o;
  }
  o.mode = KvCacheOption::Mode::kFormat;
  if (low.ends_with("+q8")) {
    text.remove_suffix(3);
    o.int8_query = true;
  }
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::optional<KvFormat> f = quant::parse_kv_format(name);
  if (!f) {
    fail<InvalidArgument>("--kv-cache '{}': unknown KV cache format '{}' (supported: {})", text,
                          name, supported_values());
  }
  o.format = *f;
  if (colon != std::string_view::npos) {
    const std::string g = lower(text.substr(colon + 1));
    if (g == "tensor") {
      o.granularity = KvScaleGranularity::kTensor;
    } else if (g == "head") {
      o.granularity = KvScaleGranularity::kHead;
    } else {
      fail<InvalidArgument>("--kv-cache '{}': scale granularity must be 'tensor' or 'head'", text);
    }
    if (!quant::kv_format_traits(o.format).needs_scale) {
      fail<NotSupported>(
          "--kv-cache '{}': {} is stored unscaled; ':{}' scales apply to fp8, int8, int4 and "
          "nvfp4 only",
          text, quant::kv_format_name(o.format), g);
    }
  }
  if (o.int8_query && o.format != KvFormat::kINT8 && o.format != KvFormat::kINT4 &&
      o.format != KvFormat::kNVFP4) {
    fail<NotSupported>(
        "--kv-cache '{}': +q8 (decode scores with an int8 query) applies to int8, int4 and nvfp4 "
        "caches only",
        o.text);
  }
  return o;
}

std::string_view kv_scales_name(KvScales scales) {
  switch (scales) {
    case KvScales::kCalibrated:
      return "calibrated";
    case KvScales::kDynamic:
      return "dynamic";
    default:
      return "none";
  }
}

std::string KvCacheChoice::describe() const {
  if (kv_fake_quant) {
    return fmt::format("{} (fake quantization with the checkpoint's scales, fp32 cache)", label);
  }
  switch (scales) {
    case KvScales::kCalibrated:
      return fmt::format("{} (calibrated scales from the checkpoint)", label);
    case KvScales::kDynamic:
      return fmt::format("{} (dynamic scales)", label);
    default:
      return label;
  }
}

nlohmann::json KvCacheChoice::to_json() const {
  nlohmann::json j;
  j["kv_cache"] = label;
  j["kv_format"] = std::string(quant::kv_format_name(spec.format));
  j["kv_granularity"] = granularity
                            ? nlohmann::json(std::string(model::kv_granularity_name(*granularity)))
                            : nlohmann::json(nullptr);
  j["kv_scales"] = std::string(kv_scales_name(scales));
  j["kv_fake_quant"] = kv_fake_quant;
  return j;
}

KvCacheChoice resolve_kv_cache(const KvCacheOption& o, const lifecycle::QuantizationLifecycle* lc,
                               std::string_view model_name) {
  if (lc == nullptr) return resolve_plain(o, model_name);

  const std::optional<KvScaleGranularity> g = checkpoint_granularity(*lc);
  std::optional<KvFormat> ckpt_format;
  std::string why_not_packed;
  try {
    ckpt_format = lc->kv_format();
  } catch (const NotSupported& e) {
    why_not_packed = e.what();
  }
  const std::string ckpt_label = ckpt_format ? label_of(*ckpt_format, g) : "";

  if (o.mode == KvCacheOption::Mode::kFake) return fake_choice(ckpt_label, g);
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
  KvCacheChoice c;
  try {
    c.spec = lc->kv_cache_spec();
  } catch (const NotSupported& e) {
    if (o.mode == KvCacheOption::Mode::kFormat) throw;
    log::warn(
        "{}: no packed KV cache for this checkpoint ({}); running its fake quantization "
        "with an fp32 cache",
        model_name, e.what());
    return fake_choice(ckpt_label, g);
  }
  c.spec.int8_query_scores = o.int8_query;  // only with an int8 FORMAT (parse_kv_cache_option)
  c.scales = KvScales::kCalibrated;
  c.granularity = g;
  c.label = label_of(c.spec.format, g, o.int8_query);
  return c;
}

void apply_kv_cache_choice(const KvCacheChoice& choice, lifecycle::QuantizationLifecycle* lc) {
  if (lc != nullptr) lc->set_kv_fake_quantization(choice.kv_fake_quant);
}

std::int64_t kv_bytes_per_token(const model::LlamaModel& model, const KvCacheChoice& choice) {
  return model.make_cache(1, 1, choice.spec).bytes_per_token();
}

std::string dynamic_scales_note(const KvCacheChoice& choice, std::string_view first_write) {
  if (choice.scales != KvScales::kDynamic) return "";
  const bool head = choice.granularity == KvScaleGranularity::kHead;
  return fmt::format(
      "note: {} KV scales are dynamic: fixed from the absmax of {} ({}); `kvq oneshot` "
      "calibrates them on a dataset",
      choice.label, first_write, head ? "per kv head" : "per layer's K and V");
}

std::string kv_cache_flag_help(bool list) {
  return fmt::format(
      "KV cache{}: auto (a quantized checkpoint's packed cache with its calibrated scales, "
      "else f32), fake (checkpoint only: its fake quantization, fp32 cache), or "
      "FORMAT[:tensor|head] with FORMAT one of {} (fp8/int8/int4/nvfp4 on a plain model: "
      "dynamic scales fixed by the first write, per kv head unless :tensor); "
      "int8/int4/nvfp4...+q8: "
      "approximate int8-query decode scores (VNNI), faster, not bit-exact",
      list ? "s, comma-separated" : "", format_names());
}

}  // namespace kvq::eval
