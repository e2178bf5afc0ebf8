#include "kvq/lifecycle/qdq.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvq/core/error.h"
#include "kvq/core/float8.h"

namespace kvq::lifecycle {

using quant::QuantizationArgs;
using quant::QuantizationStrategy;
using quant::QuantizationType;

std::pair<float, float> calculate_range(const QuantizationArgs& args) {
  if (args.type == QuantizationType::kInt) {
    const double r = std::ldexp(1.0, args.num_bits);
    return {static_cast<float>(-r / 2), static_cast<float>(r / 2 - 1)};
  }
  if (args.num_bits == 8) return {-448.0f, 448.0f};
  if (args.num_bits == 4) return {-6.0f, 6.0f};
  fail<NotSupported>("Range calculation only supported for 4 and 8 bits");
}

float round_to_quantized_type(float value, const QuantizationArgs& args) {
  if (args.type == QuantizationType::kInt) return std::nearbyint(value);  // FE_TONEAREST: RNE
  if (args.num_bits == 8) return round_to_e4m3(value);
  if (args.num_bits == 4) return e2m1_to_f32(f32_to_e2m1(value));
  fail<NotSupported>("Only num_bits in (4, 8) are supported");
}

QParams calculate_qparams(std::span<const float> min_vals, std::span<const float> max_vals,
                          const QuantizationArgs& args) {
  KVQ_CHECK(min_vals.size() == max_vals.size(), "min/max size mismatch");
  if (args.scale_dtype)
    fail<NotSupported>("scale_dtype {} is not supported for attention quantization yet",
                       dtype_name(*args.scale_dtype));
  const auto [q_min, q_max] = calculate_range(args);
  const float bit_range = q_max - q_min;
  // 0.19.0 step 5: exact-zero scales become finfo(scale dtype).eps (fp32 here).
  const float eps = std::numeric_limits<float>::epsilon();
  QParams out;
  out.scale.resize(min_vals.size());
  out.zero_point.resize(min_vals.size());
  for (std::size_t i = 0; i < min_vals.size(); ++i) {
    const float mn = std::min(min_vals[i], 0.0f);
    const float mx = std::max(max_vals[i], 0.0f);
    float scale, zp;
    if (args.symmetric) {
      scale = std::max(std::fabs(mn), std::fabs(mx)) / (bit_range / 2.0f);
      zp = 0.0f;
    } else {
      if (args.is_fp4()) fail<NotSupported>("Asymmetric Quantization is not supported for FP4");
      scale = (mx - mn) / bit_range;
      zp = std::clamp(q_min - mn / scale, q_min, q_max);  // NaN for an all-zero input, as 0.19
    }
    if (scale == 0.0f) scale = eps;
    // Round the zero point onto its dtype (int8 → half-to-even; fp8 zp → E4M3).
    zp = round_to_quantized_type(zp, args);
    out.scale[i] = scale;
    out.zero_point[i] = zp;
  }
  return out;
}

void fake_quantize(model::StatesView states, std::span<const float> scale,
                   std::span<const float> zero_point, const QuantizationArgs& args) {
  const auto [q_min, q_max] = calculate_range(args);
  const bool per_head = scale.size() != 1;
  KVQ_CHECK(!per_head || static_cast<std::int64_t>(scale.size()) == states.heads,
            "scale size {} vs heads {}", scale.size(), states.heads);
  const bool has_zp = !zero_point.empty();
  for (std::int64_t b = 0; b < states.batch; ++b) {
    for (std::int64_t h = 0; h < states.heads; ++h) {
      const float s = scale[per_head ? h : 0];
      const float z = has_zp ? zero_point[per_head ? h : 0] : 0.0f;
      for (std::int64_t t = 0; t < states.tokens; ++t) {
        float* row = states.row(b, h, t);
        for (std::int64_t d = 0; d < states.head_dim; ++d) {
          float y = row[d] / s;
          if (has_zp) y += z;
          y = std::clamp(y, q_min, q_max);  // before the cast: the fp8 cast does not saturate
          y = round_to_quantized_type(y, args);
          if (has_zp) y -= z;
          row[d] = y * s;
        }
      }
    }
  }
}

void Observer::update(const model::StatesView& states) {
  if (states.numel() == 0) return;
  const QuantizationStrategy strategy = args_.strategy_or_tensor();
  std::vector<float> cur_min, cur_max;
  switch (strategy) {
    case QuantizationStrategy::kTensor:
      cur_min.assign(1, std::numeric_limits<float>::infinity());
      cur_max.assign(1, -std::numeric_limits<float>::infinity());
      break;
    case QuantizationStrategy::kAttnHead:
      cur_min.assign(states.heads, std::numeric_limits<float>::infinity());
      cur_max.assign(states.heads, -std::numeric_limits<float>::infinity());
      break;
    case QuantizationStrategy::kToken:
      fail<ConfigError>("Token quantization cannot be applied to attention");
    case QuantizationStrategy::kChannel:
      fail<ConfigError>("Channel quantization cannot be applied to attention");
    case QuantizationStrategy::kGroup:
    case QuantizationStrategy::kTensorGroup:
      fail<ConfigError>("Group quantization cannot be applied to attention");
    case QuantizationStrategy::kBlock:
      fail<ConfigError>("Block quantization cannot be applied to attention");
  }
  const bool per_head = strategy == QuantizationStrategy::kAttnHead;
  for (std::int64_t b = 0; b < states.batch; ++b)
    for (std::int64_t h = 0; h < states.heads; ++h) {
      float& mn = cur_min[per_head ? h : 0];
      float& mx = cur_max[per_head ? h : 0];
      for (std::int64_t t = 0; t < states.tokens; ++t) {
        const float* row = states.row(b, h, t);
        for (std::int64_t d = 0; d < states.head_dim; ++d) {
          // torch.amin/amax propagate NaN; keep it so a NaN state fails loudly later.
          const float v = row[d];
          if (std::isnan(v)) {
            mn = mx = v;
            continue;
          }
          if (!std::isnan(mn)) mn = std::min(mn, v);
          if (!std::isnan(mx)) mx = std::max(mx, v);
        }
      }
    }
  fold(std::move(cur_min), std::move(cur_max));
  ++updates_;
}

QParams Observer::get_qparams() const {
  if (!has_statistics()) fail<InvalidArgument>("observer {} has no statistics", name_);
  return calculate_qparams(min_vals_, max_vals_, args_);
}

namespace {

class MemorylessMinMax : public Observer {
 public:
  explicit MemorylessMinMax(QuantizationArgs args, std::string name = "memoryless_minmax")
      : Observer(std::move(name), std::move(args)) {}

 protected:
  void fold(std::vector<float> cur_min, std::vector<float> cur_max) override {
    min_vals_ = std::move(cur_min);
    max_vals_ = std::move(cur_max);
  }
};

class StaticMinMax : public Observer {
 public:
  explicit StaticMinMax(QuantizationArgs args) : Observer("static_minmax", std::move(args)) {}

 protected:
  void fold(std::vector<float> cur_min, std::vector<float> cur_max) override {
    if (min_vals_.empty()) {
      min_vals_ = std::move(cur_min);
      max_vals_ = std::move(cur_max);
      return;
    }
    for (std::size_t i = 0; i < min_vals_.size(); ++i) {
      min_vals_[i] = std::min(cur_min[i], min_vals_[i]);
      max_vals_[i] = std::max(cur_max[i], max_vals_[i]);
    }
  }
};

// Moving average: stat = past * (1 - c) + cur * c (llmcompressor observers/helpers.py lerp),
// first call unaveraged; c = observer_kwargs.averaging_constant (0.01).
class MinMax : public Observer {
 public:
  MinMax(QuantizationArgs args, double c) : Observer("minmax", std::move(args)), c_(c) {}

 protected:
  void fold(std::vector<float> cur_min, std::vector<float> cur_max) override {
    if (!min_vals_.empty() && c_ != 1.0) {
      const float keep = static_cast<float>(1.0 - c_), take = static_cast<float>(c_);
      for (std::size_t i = 0; i < min_vals_.size(); ++i) {
        cur_min[i] = min_vals_[i] * keep + cur_min[i] * take;
        cur_max[i] = max_vals_[i] * keep + cur_max[i] * take;
      }
    }
    min_vals_ = std::move(cur_min);
    max_vals_ = std::move(cur_max);
  }

 private:
  double c_;
};

}  // namespace

std::string resolved_observer_name(const QuantizationArgs& args) {
  return args.observer.value_or("minmax");
}

std::unique_ptr<Observer> make_observer(const QuantizationArgs& args) {
  const std::string name = resolved_observer_name(args);
  if (name == "memoryless_minmax") return std::make_unique<MemorylessMinMax>(args);
  if (name == "static_minmax") return std::make_unique<StaticMinMax>(args);
  if (name == "minmax") {
    double c = 0.01;
    if (args.observer_kwargs.is_object() && args.observer_kwargs.contains("averaging_constant"))
      c = args.observer_kwargs["averaging_constant"].get<double>();
    return std::make_unique<MinMax>(args, c);
  }
  fail<NotSupported>(
      "observer '{}' is not supported for attention calibration yet (supported: minmax, "
      "static_minmax, memoryless_minmax)",
      name);
}

}  // namespace kvq::lifecycle
