#include "kvq/lifecycle/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/progress.h"
#include "kvq/io/atomic_write.h"
#include "kvq/lifecycle/heatmap_png.h"
#include "kvq/lifecycle/states_tensor.h"
#include "kvq/quant/observers.h"

namespace kvq::lifecycle {
namespace {

float round_to_dtype(float v, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return round_to_bf16(v);
    case DType::kF16:
      return round_to_fp16(v);
    default:
      return v;
  }
}

struct ObserverSlot {
  QuantizedAttentionState* state;
  char base;
  std::unique_ptr<quant::Observer> observer;
  std::int64_t updates = 0;  // non-empty states observed (Observer.forward skips empty ones)
};

}  // namespace

void calibrate_key_smoothing(QuantizationLifecycle& lifecycle,
                             std::span<const CalibrationSample> samples,
                             const CalibrationOptions& options) {
  KeySmoothing* ks = lifecycle.key_smoothing();
  if (ks == nullptr || ks->calibrated()) return;
  lifecycle.set_quantization_enabled(false);  // DisableQuantization, as for the observers
  try {
    ks->calibrate(samples, options.show_progress);
  } catch (...) {
    lifecycle.set_quantization_enabled(true);
    throw;
  }
  lifecycle.set_quantization_enabled(true);
  log::info("{}", ks->summary());
}

CalibrationResult calibrate(QuantizationLifecycle& lifecycle,
                            std::span<const CalibrationSample> samples,
                            const CalibrationOptions& options) {
  if (samples.empty()) fail<InvalidArgument>("calibration: the dataset has no samples");
  const std::int64_t max_pos = lifecycle.model().config().max_position_embeddings;
  std::int64_t total_tokens = 0;
  for (const auto& s : samples) {
    if (s.tokens.empty()) fail<InvalidArgument>("calibration: sample {} is empty", s.index);
    if (static_cast<std::int64_t>(s.tokens.size()) > max_pos)
      fail<InvalidArgument>(
          "calibration: sample {} has {} tokens, beyond the model's max_position_embeddings {}",
          s.index, s.tokens.size(), max_pos);
    total_tokens += static_cast<std::int64_t>(s.tokens.size());
  }

  const auto t0 = std::chrono::steady_clock::now();
  // Key smoothing first: its statistics are of the raw states; the observers then see smoothed
  // ones.
  calibrate_key_smoothing(lifecycle, samples, options);

  // Observers in the reference's order: q (impl) then k, v (kv_cache), per module.
  std::vector<ObserverSlot> slots;
  std::vector<model::ScopedHook> hooks;
  for (const auto& sp : lifecycle.states()) {
    QuantizedAttentionState& st = *sp;
    if (st.args().is_dynamic()) continue;  // initialize_observer skips dynamic=True
    for (char base : {'q', 'k', 'v'}) {
      if (!st.param(base)) continue;
      slots.push_back({&st, base, quant::make_observer(st.args(), std::string(1, base))});
    }
  }
  // Hooks after every slot exists: the lambdas keep pointers into `slots`.
  for (ObserverSlot& slot : slots) {
    QuantizedAttentionState& st = *slot.state;
    ObserverSlot* sp = &slot;
    auto hook = [sp](model::AttentionModule&, model::StatesView v) {
      if (v.numel() == 0) return;
      sp->observer->update(states_tensor(v));
      ++sp->updates;
    };
    model::HookHandle h = slot.base == 'q'   ? lifecycle.register_query_hook(st, hook)
                          : slot.base == 'k' ? lifecycle.register_key_hook(st, hook)
                                             : lifecycle.register_value_hook(st, hook);
    hooks.emplace_back(std::move(h));
  }
  // apply_calibration_status; the pipeline's DisableQuantization context.
  lifecycle.set_status(quant::QuantizationStatus::kCalibration);
  lifecycle.set_quantization_enabled(false);

  CalibrationResult result;
  ProgressBar bar("calibrate", total_tokens, "tok", !options.show_progress || slots.empty());
  try {
    for (const auto& s : samples) {
      if (slots.empty()) break;  // nothing to observe (key smoothing / transforms only)
      lifecycle.model().forward(s.tokens, model::LogitsMode::kLast);
      bar.advance(static_cast<std::int64_t>(s.tokens.size()));
    }
  } catch (...) {
    lifecycle.set_quantization_enabled(true);
    throw;
  }
  bar.finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  result.samples = static_cast<std::int64_t>(samples.size());
  result.tokens = total_tokens;
  hooks.clear();  // end_calibration removes the calibration hooks

  // update_qparams at the epoch end.
  for (auto& slot : slots) {
    QuantizedAttentionState& st = *slot.state;
    auto& p = *st.param(slot.base);
    if (!slot.observer->has_statistics())
      fail<InvalidArgument>("calibration: observer {}.{}_observer never saw any states", st.name,
                            slot.base);
    // Statistics first: qparams() clears them (update_qparams at the epoch end).
    const std::vector<float> min_vals = slot.observer->min_vals().to_f32_vector();
    const std::vector<float> max_vals = slot.observer->max_vals().to_f32_vector();
    const quant::ObserverQParams qp = slot.observer->qparams();
    const std::vector<float> scale = qp.scale.to_f32_vector();
    const std::vector<float> zero_point = qp.zero_point.to_f32_vector();
    KVQ_CHECK(scale.size() == p.scale.size() && min_vals.size() == scale.size(),
              "{}.{}: observer qparams {} vs scale {}", st.name, slot.base, scale.size(),
              p.scale.size());
    CalibrationRecord rec;
    rec.module = st.name;
    rec.layer = st.module->layer_idx();
    rec.base = slot.base;
    rec.observations = slot.updates;
    for (std::size_t i = 0; i < scale.size(); ++i) {
      const float mn = std::min(min_vals[i], 0.0f);
      const float mx = std::max(max_vals[i], 0.0f);
      rec.absmax.push_back(std::max(std::fabs(mn), std::fabs(mx)));
      const float s = round_to_dtype(scale[i], p.scale_dtype);
      if (!(std::isfinite(s) && s > 0.0f) || std::isnan(rec.absmax.back()) ||
          std::isinf(rec.absmax.back()))
        fail<InvalidArgument>(
            "calibration: {}.{}_scale[{}] = {} from observed absmax {} (NaN/Inf states or a zero "
            "scale)",
            st.name, slot.base, i, s, rec.absmax.back());
      p.scale[i] = s;
      if (p.zero_point) (*p.zero_point)[i] = zero_point[i];
    }
    rec.scale = p.scale;
    result.records.push_back(std::move(rec));
  }
  lifecycle.check_scales("calibration");
  lifecycle.set_status(quant::QuantizationStatus::kFrozen);  // freeze_module_quantization
  lifecycle.set_quantization_enabled(true);                  // keep quantization enabled
  return result;
}

void write_calibration_report_json(const CalibrationResult& result,
                                   const QuantizationLifecycle& lifecycle,
                                   const std::filesystem::path& path) {
  nlohmann::ordered_json j;
  j["samples"] = result.samples;
  j["tokens"] = result.tokens;
  j["seconds"] = result.seconds;
  j["tokens_per_second"] = result.seconds > 0 ? result.tokens / result.seconds : 0.0;
  if (auto c = lifecycle.config_from_model()) j["quantization_config"] = c->to_checkpoint_json();
  auto& layers = j["records"] = nlohmann::ordered_json::array();
  for (const auto& r : result.records) {
    nlohmann::ordered_json e;
    e["module"] = r.module;
    e["layer"] = r.layer;
    e["base"] = std::string(1, r.base);
    e["observations"] = r.observations;
    e["absmax"] = r.absmax;  // per head (attn_head) or one value (tensor)
    e["scale"] = r.scale;
    layers.push_back(std::move(e));
  }
  io::write_file_atomic(path, j.dump(2) + "\n");
}

plot::FigurePaths write_calibration_heatmap_png(const CalibrationResult& result,
                                                const std::filesystem::path& path) {
  // One panel per base present; rows = layers, columns = heads (1 for tensor scales).
  std::vector<HeatmapPanel> panels;
  for (char base : {'q', 'k', 'v'}) {
    HeatmapPanel panel;
    panel.title = std::string(1, base) + "_scale";
    bool per_head = false;
    for (const auto& r : result.records)
      if (r.base == base) {
        panel.rows.push_back(r.scale);
        panel.row_labels.push_back(std::to_string(r.layer));
        per_head |= r.scale.size() > 1;
      }
    if (!per_head) panel.col_axis = "per tensor";
    if (!panel.rows.empty()) panels.push_back(std::move(panel));
  }
  if (panels.empty()) fail<InvalidArgument>("calibration heatmap: nothing was calibrated");
  return write_heatmap(panels, path);
}

}  // namespace kvq::lifecycle
