#include "kvq/quant/qparams.h"

#include <cmath>
#include <limits>

#include "kvq/core/error.h"
#include "kvq/quant/detail/array.h"

namespace kvq::quant {

using detail::Array;
using detail::Op;

std::pair<float, float> calculate_range(const QuantizationArgs& args) {
  if (args.type == QuantizationType::kInt) {
    const double range = std::ldexp(1.0, args.num_bits);
    return {static_cast<float>(-range / 2), static_cast<float>(range / 2 - 1)};
  }
  if (args.num_bits == 8) return {-448.0f, 448.0f};
  if (args.num_bits == 4) return {-6.0f, 6.0f};
  throw NotSupported("Range calculation only supported for 4 and 8 bits");
}

namespace {

bool should_generate_mx_scales(const QuantizationArgs& args) {
  return (args.num_bits == 4 || args.num_bits == 8) && args.type == QuantizationType::kFloat &&
         args.group_size == 32 && args.scale_dtype == DType::kU8;
}

// torch.finfo(dtype).eps, or the reference's special cases.
float dtype_eps(DType dtype) {
  switch (dtype) {
    case DType::kF8E4M3:
      return 0.125f;
    case DType::kF32:
      return std::numeric_limits<float>::epsilon();
    case DType::kBF16:
      return 0.0078125f;
    case DType::kF16:
      return 0.0009765625f;
    case DType::kF8E5M2:
      return 0.25f;
    default:
      return 1.0f;  // integer dtypes
  }
}

// round_to_quantized_type_dtype(t, dtype, cast_to_original_dtype)
Array round_to_quantized_type_dtype(const Array& t, DType dtype, bool cast_back) {
  Array rounded;
  if (dtype_is_float(dtype)) {
    float lo, hi;
    switch (dtype) {
      case DType::kF8E4M3:
        lo = -448.0f;
        hi = 448.0f;
        break;
      case DType::kF8E5M2:
        lo = -57344.0f;
        hi = 57344.0f;
        break;
      case DType::kBF16:
        lo = -3.38953139e38f;
        hi = 3.38953139e38f;
        break;
      case DType::kF16:
        lo = -65504.0f;
        hi = 65504.0f;
        break;
      default:
        lo = -std::numeric_limits<float>::max();
        hi = std::numeric_limits<float>::max();
    }
    rounded = detail::cast(detail::clamp(t, lo, hi), dtype);
  } else {
    float lo, hi;
    switch (dtype) {
      case DType::kI8:
        lo = -128.0f;
        hi = 127.0f;
        break;
      case DType::kU8:
        lo = 0.0f;
        hi = 255.0f;
        break;
      case DType::kI16:
        lo = -32768.0f;
        hi = 32767.0f;
        break;
      default:
        lo = -2147483648.0f;
        hi = 2147483647.0f;
    }
    rounded = detail::clamp(t, lo, hi);
    for (float& x : rounded.v) x = detail::round_to(t.dtype, std::nearbyint(x));
    rounded = detail::cast(rounded, dtype);
  }
  return cast_back ? detail::cast(rounded, t.dtype) : rounded;
}

void check_float_dtype(const Tensor& t, const char* what) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16 && t.dtype() != DType::kF16)
    fail<InvalidArgument>("{} must be F32, BF16 or F16, got {}", what, dtype_name(t.dtype()));
}

}  // namespace

QParams calculate_qparams(const Tensor& min_tensor, const Tensor& max_tensor,
                          const QuantizationArgs& args, const Tensor* global_scale) {
  check_float_dtype(min_tensor, "calculate_qparams: min_vals");
  check_float_dtype(max_tensor, "calculate_qparams: max_vals");
  Array zero = detail::full(min_tensor.dtype(), min_tensor.shape(), 0.0f);
  Array min_vals = detail::binary(detail::from_tensor(min_tensor), zero, Op::kMin);
  Array max_vals =
      detail::binary(detail::from_tensor(max_tensor),
                     detail::full(max_tensor.dtype(), max_tensor.shape(), 0.0f), Op::kMax);
  const auto [bit_min, bit_max] = calculate_range(args);
  const float bit_range = bit_max - bit_min;  // exact in fp32
  const DType dt = max_vals.dtype;

  Array scales, zero_points;
  if (args.symmetric) {
    if (should_generate_mx_scales(args))
      throw NotSupported("MX (E8M0) scales are not supported by kvq yet");
    Array abs_min = min_vals, abs_max = max_vals;
    for (float& x : abs_min.v) x = std::fabs(x);
    for (float& x : abs_max.v) x = std::fabs(x);
    const Array max_val_pos = detail::binary(abs_min, abs_max, Op::kMax);
    // bit_range.to(dtype) / 2, a 0-dim op in dtype.
    const float half = detail::round_to(dt, detail::round_to(dt, bit_range) / 2.0f);
    scales = detail::binary_scalar(max_val_pos, half, Op::kDiv);
    zero_points = detail::full(min_vals.dtype, scales.shape, 0.0f);
  } else {
    if (args.is_fp4()) throw NotSupported("Asymmetric Quantization is not supported for FP4");
    const Array diff = detail::binary(max_vals, min_vals, Op::kSub);
    scales = detail::binary_scalar(diff, detail::round_to(dt, bit_range), Op::kDiv);
    const Array ratio = detail::binary(min_vals, scales, Op::kDiv);
    zero_points = detail::scalar_binary(bit_min, ratio, Op::kSub);
    zero_points = detail::clamp(zero_points, bit_min, bit_max);
  }
  if (global_scale) {
    check_float_dtype(*global_scale, "calculate_qparams: global_scale");
    scales = detail::binary(detail::from_tensor(*global_scale), scales, Op::kMul);
  }
  if (args.scale_dtype) scales = round_to_quantized_type_dtype(scales, *args.scale_dtype, true);
  const float eps =
      detail::round_to(scales.dtype, dtype_eps(args.scale_dtype.value_or(scales.dtype)));
  for (float& x : scales.v)
    if (x == 0.0f) x = eps;
  const DType zp_dtype =
      args.zp_dtype.value_or(args.is_fp4() ? DType::kF8E4M3 : args.pytorch_dtype());
  zero_points = round_to_quantized_type_dtype(zero_points, zp_dtype, false);
  if (scales.ndim() == 0) {
    scales.shape = {1};
    zero_points.shape = {1};
  }
  return {detail::to_tensor(scales), detail::to_tensor(zero_points)};
}

Tensor generate_gparam(const Tensor& min_tensor, const Tensor& max_tensor) {
  check_float_dtype(min_tensor, "generate_gparam: min_vals");
  const DType dt = min_tensor.dtype();
  Array min_vals = detail::binary(detail::from_tensor(min_tensor),
                                  detail::full(dt, min_tensor.shape(), 0.0f), Op::kMin);
  Array max_vals =
      detail::binary(detail::from_tensor(max_tensor),
                     detail::full(max_tensor.dtype(), max_tensor.shape(), 0.0f), Op::kMax);
  for (float& x : min_vals.v) x = std::fabs(x);
  for (float& x : max_vals.v) x = std::fabs(x);
  Array pos = detail::binary(min_vals, max_vals, Op::kMax);
  // finfo(dtype).tiny (clamp lets NaN through).
  const float tiny =
      pos.dtype == DType::kF16 ? 6.103515625e-05f : std::numeric_limits<float>::min();
  for (float& x : pos.v)
    if (!std::isnan(x) && x < tiny) x = tiny;
  // 448.0 * 6.0 / max_val_pos: a Python float over a tensor, computed in the tensor's dtype.
  Array g = detail::scalar_binary(448.0 * 6.0, pos, Op::kDiv);
  for (float& x : g.v)
    if (!std::isfinite(x)) x = 1.0f;
  g = detail::cast(g, DType::kF32);
  g.shape = {1};
  KVQ_CHECK(g.v.size() == 1, "generate_gparam expects one min/max value");
  return detail::to_tensor(g);
}

QParams compute_dynamic_scales_and_zp(const Tensor& value, const QuantizationArgs& args,
                                      const Tensor* global_scale) {
  check_float_dtype(value, "compute_dynamic_scales_and_zp: value");
  const Array x = detail::from_tensor(value);
  const QuantizationStrategy s = args.strategy_or_tensor();
  Shape out_shape;
  std::int64_t inner = 0;  // elements reduced per output value (contiguous trailing block)
  if (s == QuantizationStrategy::kToken && value.ndim() > 2) {
    out_shape = value.shape();
    inner = 1;
    for (int d = 2; d < value.ndim(); ++d) {
      inner *= out_shape[d];
      out_shape[d] = 1;
    }
  } else if (s == QuantizationStrategy::kToken || s == QuantizationStrategy::kTensor) {
    out_shape = {};
    inner = x.numel();
  } else if (s == QuantizationStrategy::kGroup || s == QuantizationStrategy::kTensorGroup) {
    const std::int64_t g = args.group_size.value_or(0);
    const std::int64_t cols = value.ndim() > 0 ? value.dim(-1) : 1;
    if (g <= 0 || cols % g != 0)
      fail<InvalidArgument>(
          "unflatten: provided sizes ({}, {}) don't multiply up to the size of "
          "dim -1 ({}) in the input tensor",
          (cols + g - 1) / std::max<std::int64_t>(g, 1), g, cols);
    out_shape = value.shape();
    out_shape.back() = cols / g;
    inner = g;
  } else {
    throw InvalidArgument(
        "Dynamic quantization is only supported for (<QuantizationStrategy.TOKEN: 'token'>, "
        "<QuantizationStrategy.TENSOR: 'tensor'>, <QuantizationStrategy.TENSOR_GROUP: "
        "'tensor_group'>, <QuantizationStrategy.GROUP: 'group'>)");
  }
  Array mn, mx;
  mn.dtype = mx.dtype = x.dtype;
  mn.shape = mx.shape = out_shape;
  const std::int64_t outer = inner == 0 ? 0 : x.numel() / inner;
  for (std::int64_t o = 0; o < outer; ++o) {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    bool nan = false;
    for (std::int64_t i = 0; i < inner; ++i) {
      const float v = x.v[o * inner + i];
      nan |= std::isnan(v);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (nan) lo = hi = std::numeric_limits<float>::quiet_NaN();
    mn.v.push_back(lo);
    mx.v.push_back(hi);
  }
  return calculate_qparams(detail::to_tensor(mn), detail::to_tensor(mx), args, global_scale);
}

}  // namespace kvq::quant
