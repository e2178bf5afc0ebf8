// compressed-tensors' fake quantization written out for the KV formats whose float grid
// QuantizationArgs cannot name (fp8 E5M2: 0.19.0 has float 8 bits = float8_e4m3fn only), so the
// tests can hold their codecs to the reference math too. It is forward.py's _quantize /
// _dequantize in fp32, as kvq::quant::fake_quantize runs them:
//   y = x / scale; y += zp; y = clamp(y, -max, max) (NaN passes); y = float8(y) (torch's cast);
//   r = (y - zp) * scale
// with max = finfo(dtype).max. tests/unit/quant_formats checks this function against
// fake_quantize on the E4M3 grid, where both exist.
#pragma once

#include <algorithm>
#include <cmath>

#include "kvq/core/float8.h"
#include "kvq/quant/formats.h"

namespace kvq::test {

struct FloatGrid {
  quant::KvFormat format;
  float max;              // finfo(dtype).max
  float (*round)(float);  // torch's cast to the dtype and back
};

inline float round_e4m3(float v) { return e4m3_to_f32(f32_to_e4m3(v)); }
inline float round_e5m2(float v) { return e5m2_to_f32(f32_to_e5m2(v)); }

// The grids of the formats without QuantizationArgs (add a new one's here).
inline constexpr FloatGrid kFloatGrids[] = {{quant::KvFormat::kFP8E5M2, 57344.0f, round_e5m2}};
// E4M3 (which has QuantizationArgs), to check fake_quantize_on_grid against fake_quantize.
inline constexpr FloatGrid kE4M3Grid{quant::KvFormat::kFP8E4M3, 448.0f, round_e4m3};

// The grid of `format`, or nullptr.
inline const FloatGrid* float_grid(quant::KvFormat format) {
  for (const FloatGrid& g : kFloatGrids)
    if (g.format == format) return &g;
  return nullptr;
}

inline float fake_quantize_on_grid(const FloatGrid& g, float x, float scale, float zero_point) {
  float y = x / scale;
  y += zero_point;
  if (!std::isnan(y)) y = std::min(std::max(y, -g.max), g.max);
  y = g.round(y);
  return (y - zero_point) * scale;
}

// compressed-tensors' symmetric scale on the grid: amax / ((max - -max) / 2), zero -> eps.
inline float symmetric_scale_on_grid(const FloatGrid& g, float amax) {
  const float half = (g.max - -g.max) / 2.0f;
  const float s = amax / half;
  return s == 0.0f ? 1.1920929e-07f : s;
}

}  // namespace kvq::test
