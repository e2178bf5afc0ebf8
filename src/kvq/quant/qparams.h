// Quantization parameter math of compressed-tensors 0.19.0 (`quantization/utils/helpers.py`):
// calculate_range, calculate_qparams, generate_gparam, compute_dynamic_scales_and_zp.
//
// Bit-exact with torch on CPU: every op is evaluated in the dtype torch would use (the dtype of
// the min/max tensors, i.e. the observed tensor's dtype: fp32, bf16 or fp16), rounding after each
// op. Scales come back in that dtype (fp32 when a global scale is applied), zero points in
// args.zp_dtype (int8 / int16 / int32 / float8_e4m3fn), 0-dim results reshaped to [1].
#pragma once

#include <utility>

#include "kvq/core/tensor.h"
#include "kvq/quant/quant_args.h"

namespace kvq::quant {

struct QParams {
  Tensor scale;
  Tensor zero_point;
};

// (q_min, q_max): int [-2^(b-1), 2^(b-1)-1]; float 8 [-448, 448]; float 4 [-6, 6];
// NotSupported "Range calculation only supported for 4 and 8 bits" for other float widths.
std::pair<float, float> calculate_range(const QuantizationArgs& args);

// min/max: F32/BF16/F16 tensors of equal shape. global_scale: F32 [1] or null.
// Symmetric: scale = amax / (bit_range / 2); asymmetric: scale = (max - min) / bit_range,
// zp = clamp(q_min - min / scale). Then global scale, scale_dtype rounding, zeros -> eps
// (0.125 for an fp8 scale dtype, finfo(dtype).eps otherwise), zp rounded to zp_dtype.
QParams calculate_qparams(const Tensor& min_vals, const Tensor& max_vals,
                          const QuantizationArgs& args, const Tensor* global_scale = nullptr);

// NVFP4 global scale: 448 * 6 / max(|min|, |max|, tiny) in the input dtype, NaN/inf -> 1, as
// F32 [1].
Tensor generate_gparam(const Tensor& min_vals, const Tensor& max_vals);

// Dynamic qparams: token -> reduce all dims but 0 and 1 (keepdim; a 2-D value reduces
// everything, as the reference's empty-tuple test does); tensor -> whole tensor; group /
// tensor_group -> groups of group_size along the last dim.
QParams compute_dynamic_scales_and_zp(const Tensor& value, const QuantizationArgs& args,
                                      const Tensor* global_scale = nullptr);

}  // namespace kvq::quant
