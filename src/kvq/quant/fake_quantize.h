// quantize / dequantize / fake_quantize of compressed-tensors 0.19.0
// (`quantization/lifecycle/forward.py` + `forward_helpers.py`, the CPU "eager" path).
//
// Per-op dtype semantics mirrored from torch:
//   scale = scale / global_scale            (if given; promotes to fp32)
//   y = x / scale                           (promote(x, scale))
//   y += zp.to(x.dtype)                     (in place: keeps y's dtype)
//   y = clamp(y, q_min, q_max); round       (int: half-to-even; fp8: E4M3 RNE; fp4: E2M1 table)
//   r = y.to(scale.dtype) [- zp.to(scale.dtype)] * scale
// so fake_quantize returns the SCALE's dtype for tensor / channel / token / attn_head (and the
// input's dtype for group / tensor_group, which casts back). Scale / zero point broadcast
// right-aligned against x: tensor [1], attn_head [H,1,1] against [B,H,S,D], token [B,S,1],
// channel [rows,1]; group scales [..., cols/g]; block scales [rows/bh, cols/bw] (2-D x).
#pragma once

#include <optional>

#include "kvq/core/tensor.h"
#include "kvq/quant/quant_args.h"

namespace kvq::quant {

// compressed-tensors' cast_to_fp4 (CPU path): |x| thresholds with ties to the even mantissa,
// result sign(x) * value (sign(0) = 0, NaN stays NaN).
float round_to_fp4(float x);

// zero_point may be null (no zero point); global_scale: F32 [1] or null.
Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor* zero_point,
                const QuantizationArgs& args, std::optional<DType> dtype = std::nullopt,
                const Tensor* global_scale = nullptr);
// dtype defaults to scale's dtype.
Tensor dequantize(const Tensor& x_q, const Tensor& scale, const Tensor* zero_point,
                  const QuantizationArgs& args, std::optional<DType> dtype = std::nullopt,
                  const Tensor* global_scale = nullptr);
Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor* zero_point,
                     const QuantizationArgs& args, const Tensor* global_scale = nullptr);

}  // namespace kvq::quant
