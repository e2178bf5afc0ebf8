#include "kvq/quant/fake_quantize.h"

#include <cmath>

#include "kvq/core/error.h"
#include "kvq/core/float8.h"
#include "kvq/quant/detail/array.h"
#include "kvq/quant/qparams.h"

namespace kvq::quant {

using detail::Array;
using detail::Op;

float round_to_fp4(float x) {
  const float sign = x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : (std::isnan(x) ? x : 0.0f));
  float a = std::fabs(x);
  if (a >= 0.0f && a <= 0.25f)
    a = 0.0f;
  else if (a > 0.25f && a < 0.75f)
    a = 0.5f;
  else if (a >= 0.75f && a <= 1.25f)
    a = 1.0f;
  else if (a > 1.25f && a < 1.75f)
    a = 1.5f;
  else if (a >= 1.75f && a <= 2.5f)
    a = 2.0f;
  else if (a > 2.5f && a < 3.5f)
    a = 3.0f;
  else if (a >= 3.5f && a <= 5.0f)
    a = 4.0f;
  else if (a > 5.0f)
    a = 6.0f;
  return a * sign;
}

namespace {

enum class Mode { kQuantize, kDequantize, kBoth };

// round_to_quantized_type_args: clamp, round onto the quantized grid, back to y's dtype.
void round_to_quantized_type_args(Array& y, const QuantizationArgs& args, float q_min,
                                  float q_max) {
  y = detail::clamp(y, q_min, q_max);
  if (args.type == QuantizationType::kFloat) {
    if (args.num_bits == 8) {
      for (float& v : y.v) v = detail::round_to(y.dtype, round_to_e4m3(v));
    } else if (args.num_bits == 4) {
      for (float& v : y.v) v = detail::round_to(y.dtype, round_to_fp4(v));
    } else {
      throw NotSupported("Only num_bits in (4, 8) are supported");
    }
  } else {
    for (float& v : y.v) v = std::nearbyint(v);  // round half to even; exact in y's dtype
  }
}

// The elementwise op (_quantize / _dequantize / _quantize_dequantize).
Array apply_op(const Array& x, Array scale, const Array* zp, const QuantizationArgs& args,
               std::optional<DType> dtype, Mode mode, const Array* global_scale) {
  const auto [q_min, q_max] = calculate_range(args);
  if (global_scale) scale = detail::binary(scale, *global_scale, Op::kDiv);
  if (mode == Mode::kDequantize) {
    Array r = detail::cast(x, scale.dtype);
    if (zp) r = detail::binary(r, detail::cast(*zp, scale.dtype), Op::kSub);
    r = detail::binary(r, scale, Op::kMul);
    return dtype ? detail::cast(r, *dtype) : r;
  }
  Array y = detail::binary(x, scale, Op::kDiv);
  if (zp) detail::binary_inplace(y, detail::cast(*zp, x.dtype), Op::kAdd);
  round_to_quantized_type_args(y, args, q_min, q_max);
  if (mode == Mode::kQuantize) return dtype ? detail::cast(y, *dtype) : y;
  Array r = detail::cast(y, scale.dtype);
  if (zp) r = detail::binary(r, detail::cast(*zp, scale.dtype), Op::kSub);
  return detail::binary(r, scale, Op::kMul);
}

Array unsqueeze_last(Array a) {
  a.shape.push_back(1);
  return a;
}

Tensor process(const Tensor& x_t, const Tensor& scale_t, const Tensor* zp_t,
               const QuantizationArgs& args, std::optional<DType> dtype, Mode mode,
               const Tensor* gs_t) {
  const Array x = detail::from_tensor(x_t);
  Array scale = detail::from_tensor(scale_t);
  std::optional<Array> zp;
  if (zp_t) zp = detail::from_tensor(*zp_t);
  std::optional<Array> gs;
  if (gs_t) gs = detail::from_tensor(*gs_t);
  const Array* zpp = zp ? &*zp : nullptr;
  const Array* gsp = gs ? &*gs : nullptr;
  const QuantizationStrategy s = args.strategy_or_tensor();

  if (s == QuantizationStrategy::kGroup || s == QuantizationStrategy::kTensorGroup) {
    const std::int64_t g = args.group_size.value_or(0);
    const DType out_dtype = dtype.value_or(x.dtype);
    while (scale.ndim() < 2) {
      scale.shape.insert(scale.shape.begin() + std::min<std::ptrdiff_t>(1, scale.ndim()), 1);
      if (zp) zp->shape.insert(zp->shape.begin() + std::min<std::ptrdiff_t>(1, zp->ndim()), 1);
    }
    const std::int64_t cols = x_t.ndim() > 0 ? x_t.dim(-1) : 1;
    if (cols >= g && cols % g != 0)
      fail<InvalidArgument>(
          "tensor column shape must be divisble by the given group_size {} but got {}", g, cols);
    if (cols % g != 0)
      fail<InvalidArgument>("unflatten: group_size {} does not divide {} columns", g, cols);
    Shape grouped = x.shape;
    grouped.back() = cols / g;
    grouped.push_back(g);
    const Array xg = detail::reshape(x, grouped);
    std::optional<Array> zpg;
    if (zp) zpg = unsqueeze_last(*zp);
    Array out = apply_op(xg, unsqueeze_last(scale), zpg ? &*zpg : nullptr, args, dtype, mode, gsp);
    Shape flat = out.shape;
    flat.pop_back();
    flat.back() *= g;
    out = detail::cast(detail::reshape(out, flat), out_dtype);
    return detail::to_tensor(out);
  }
  if (s == QuantizationStrategy::kBlock) {
    if (x_t.ndim() != 2 || !args.block_structure)
      fail<InvalidArgument>("block quantization expects a 2-D tensor, got {}",
                            shape_str(x_t.shape()));
    const auto [bh, bw] = *args.block_structure;
    const std::int64_t rows = x_t.dim(0), cols = x_t.dim(1);
    // Elementwise with the (row block, col block) scale: the same values as the reference's
    // pad / reshape / transpose, without materialising the padded copy.
    Array sx = x, zx;
    Array se;
    se.dtype = scale.dtype;
    se.shape = x.shape;
    se.v.resize(x.v.size());
    if (zp) {
      zx.dtype = zp->dtype;
      zx.shape = x.shape;
      zx.v.resize(x.v.size());
    }
    const std::int64_t scols = scale.shape.back();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::int64_t si = (r / bh) * scols + c / bw;
        se.v[r * cols + c] = scale.v[si];
        if (zp) zx.v[r * cols + c] = zp->v[si];
      }
    return detail::to_tensor(apply_op(sx, se, zp ? &zx : nullptr, args, dtype, mode, gsp));
  }
  return detail::to_tensor(apply_op(x, scale, zpp, args, dtype, mode, gsp));
}

}  // namespace

Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor* zero_point,
                const QuantizationArgs& args, std::optional<DType> dtype,
                const Tensor* global_scale) {
  return process(x, scale, zero_point, args, dtype, Mode::kQuantize, global_scale);
}

Tensor dequantize(const Tensor& x_q, const Tensor& scale, const Tensor* zero_point,
                  const QuantizationArgs& args, std::optional<DType> dtype,
                  const Tensor* global_scale) {
  return process(x_q, scale, zero_point, args, dtype.value_or(scale.dtype()), Mode::kDequantize,
                 global_scale);
}

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor* zero_point,
                     const QuantizationArgs& args, const Tensor* global_scale) {
  return process(x, scale, zero_point, args, std::nullopt, Mode::kBoth, global_scale);
}

}  // namespace kvq::quant
