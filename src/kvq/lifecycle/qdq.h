// fp32 quantization math for attention states: qparams, fake quantization and the min/max
// observers, as compressed-tensors 0.19.0 (`quantization/utils/helpers.py::calculate_qparams`,
// `lifecycle/forward.py`) and llmcompressor 0.14.0.1 (`observers/min_max.py`,
// `observers/helpers.py::flatten_for_calibration`) compute them for q/k/v.
//
// Adapter: kvq::quant does not export calculate_qparams / fake_quantize / observers yet; this file
// holds the attention-only fp32 subset the lifecycle needs (strategies tensor and attn_head; int
// and float types). Replace by the quant library's versions once they exist.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvq/model/attention.h"
#include "kvq/quant/quant_args.h"

namespace kvq::lifecycle {

// (q_min, q_max): int b bits → [-2^(b-1), 2^(b-1)-1]; float 8 → ±448; float 4 → ±6.
// NotSupported for other float widths.
std::pair<float, float> calculate_range(const quant::QuantizationArgs& args);

struct QParams {
  std::vector<float> scale;       // one per qparam element ([1] tensor, [heads] attn_head)
  std::vector<float> zero_point;  // same size; already rounded/cast to the zp dtype's grid
};

// 0.19.0 calculate_qparams on fp32 statistics: min ≤ 0 ≤ max forced; symmetric
// scale = amax / (bit_range / 2); asymmetric scale = (max - min) / bit_range and
// zp = clamp(q_min - min / scale, q_min, q_max); exact-zero scales replaced by
// finfo(float32).eps; zp rounded to the zp dtype (int: half-to-even; fp8: E4M3).
// scale_dtype (0.13+ field) is NotSupported for attention here.
QParams calculate_qparams(std::span<const float> min_vals, std::span<const float> max_vals,
                          const quant::QuantizationArgs& args);

// Rounds a clamped value onto the quantized grid (int: half-to-even; float 8: E4M3 RNE;
// float 4: E2M1).
float round_to_quantized_type(float value, const quant::QuantizationArgs& args);

// In-place QDQ of states [batch, heads, tokens, head_dim] with per-tensor (size 1) or per-head
// (size heads) scale / zero point: y = x / s (+ zp), clamp, round, (- zp), * s. zero_point may
// be empty (symmetric, none registered).
void fake_quantize(model::StatesView states, std::span<const float> scale,
                   std::span<const float> zero_point, const quant::QuantizationArgs& args);

// llm-compressor's activation observers for attention states. update() reduces the states with
// the attention flatten (tensor: all elements; attn_head: per head over batch, tokens, head_dim)
// and folds them into the running statistics by the observer's rule.
class Observer {
 public:
  virtual ~Observer() = default;
  // ConfigError for strategies that cannot be applied to attention (llm-compressor's messages).
  void update(const model::StatesView& states);
  bool has_statistics() const { return !min_vals_.empty(); }
  const std::vector<float>& min_vals() const { return min_vals_; }
  const std::vector<float>& max_vals() const { return max_vals_; }
  // calculate_qparams on the statistics (InvalidArgument when there are none).
  QParams get_qparams() const;
  std::int64_t num_updates() const { return updates_; }
  const std::string& name() const { return name_; }

 protected:
  Observer(std::string name, quant::QuantizationArgs args) : name_(std::move(name)), args_(std::move(args)) {}
  virtual void fold(std::vector<float> cur_min, std::vector<float> cur_max) = 0;
  std::string name_;
  quant::QuantizationArgs args_;
  std::vector<float> min_vals_, max_vals_;
  std::int64_t updates_ = 0;
};

// "memoryless_minmax" | "static_minmax" | "minmax" (averaging_constant from observer_kwargs,
// default 0.01) — llmcompressor 0.14.0.1 uses "minmax" when args.observer is null. Other names
// (mse, imatrix, ...) → NotSupported naming the observer. `heads` sizes attn_head statistics.
std::unique_ptr<Observer> make_observer(const quant::QuantizationArgs& args);

// The observer name llm-compressor 0.14.0.1 uses for q/k/v: args.observer or "minmax".
std::string resolved_observer_name(const quant::QuantizationArgs& args);

}  // namespace kvq::lifecycle
