// Calibration of q/k/v scales, as llmcompressor 0.14.0.1's QuantizationModifier does it with
// the sequential pipeline (installed version; the spec's PR-era text differs):
//  - observers ("minmax" unless args.observer says otherwise) are attached through the
//    attention hooks AFTER any hooks already registered (transforms run first);
//  - the whole calibration runs under DisableQuantization: q/k/v are NOT fake-quantized while
//    calibrating, observers see full-precision states;
//  - hooks only accumulate statistics (min/max per observer rule) for every sample, one forward
//    per sample (batch size 1); qparams are computed once at the epoch end (update_qparams),
//    then observers are removed, status becomes frozen and quantization is enabled.
// The sequential pipeline's layer-by-layer propagation is, with quantization disabled, the same
// computation as one full forward per sample.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kvq/lifecycle/apply.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/plot/figure.h"

namespace kvq::lifecycle {

struct CalibrationOptions {
  bool show_progress = true;
};

// Per attention module and base, what the observers saw and the scale that came out.
struct CalibrationRecord {
  std::string module;  // "model.layers.0.self_attn"
  std::int64_t layer = 0;
  char base = 'k';                // 'q' | 'k' | 'v'
  std::vector<float> absmax;      // per qparam element: max(|min|, |max|) of the statistics
  std::vector<float> scale;       // resulting scale
  std::int64_t observations = 0;  // observer updates
};

struct CalibrationResult {
  std::vector<CalibrationRecord> records;  // named_modules order, q then k then v
  std::int64_t samples = 0, tokens = 0;
  double seconds = 0;
};

// Fits the lifecycle's key smoothing (lifecycle/key_smoothing.h) on the samples, with
// quantization disabled; nothing when it has none or it is already fitted. calibrate() starts
// with it.
void calibrate_key_smoothing(QuantizationLifecycle& lifecycle,
                             std::span<const CalibrationSample> samples,
                             const CalibrationOptions& options = {});

// Runs every sample through the model (one forward each, no cache reuse), then sets the
// scales, freezes and enables quantization. InvalidArgument for an empty sample list, a sample
// longer than the model's max_position_embeddings, or any resulting zero / NaN / Inf scale or a
// never-updated observer (naming the module).
CalibrationResult calibrate(QuantizationLifecycle& lifecycle,
                            std::span<const CalibrationSample> samples,
                            const CalibrationOptions& options = {});

// The calibration report: JSON with per layer/head absmax and scale, and a heatmap as PNG with
// an SVG beside it (`path` = foo.png writes foo.png and foo.svg): layers x heads of the k scale,
// q and v panels beside it when present, each with its colour bar.
void write_calibration_report_json(const CalibrationResult& result,
                                   const QuantizationLifecycle& lifecycle,
                                   const std::filesystem::path& path);
plot::FigurePaths write_calibration_heatmap_png(const CalibrationResult& result,
                                                const std::filesystem::path& path);

}  // namespace kvq::lifecycle
