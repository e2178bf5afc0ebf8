#include "kvq/quant/detail/array.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kvq/core/error.h"
#include "kvq/core/float8.h"

namespace kvq::quant::detail {

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF64:
      return value;
    case DType::kBF16:
      return round_to_bf16(value);
    case DType::kF16:
      return round_to_fp16(value);
    case DType::kF8E4M3:
      return e4m3_to_f32(f32_to_e4m3(value));
    case DType::kF8E5M2:
      return e5m2_to_f32(f32_to_e5m2(value));
    case DType::kI8:
    case DType::kU8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64: {
      if (std::isnan(value)) return 0.0f;
      const float t = std::trunc(value);
      // In-range values only reach here (callers clamp first); wrap like a C cast otherwise.
      switch (dtype) {
        case DType::kI8:
          return static_cast<float>(static_cast<std::int8_t>(static_cast<std::int64_t>(t)));
        case DType::kU8:
          return static_cast<float>(static_cast<std::uint8_t>(static_cast<std::int64_t>(t)));
        case DType::kI16:
          return static_cast<float>(static_cast<std::int16_t>(static_cast<std::int64_t>(t)));
        default:
          return t;
      }
    }
    case DType::kBool:
      return value != 0.0f ? 1.0f : 0.0f;
  }
  return value;
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  const bool fa = dtype_is_float(a), fb = dtype_is_float(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (!fa && !fb) return DType::kI64;
  return DType::kF32;  // bf16+fp16, anything+fp32 (fp8 mixes are never promoted implicitly here)
}

Array from_tensor(const Tensor& t) {
  Array a;
  a.dtype = t.dtype();
  a.shape = t.shape();
  a.v = t.to_f32_vector();
  return a;
}

Tensor to_tensor(const Array& a) {
  Tensor t(a.dtype, a.shape);
  void* data = t.mutable_data();
  const std::size_t n = a.v.size();
  switch (a.dtype) {
    case DType::kF32:
      std::memcpy(data, a.v.data(), n * sizeof(float));
      break;
    case DType::kBF16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(a.v[i]);
      break;
    }
    case DType::kF16: {
      auto* p = static_cast<std::uint16_t*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] = f32_to_fp16(a.v[i]);
      break;
    }
    case DType::kF8E4M3: {
      auto* p = static_cast<std::uint8_t*>(data);
      for (std::size_t i = 0; i < n; ++i) p[i] = f32_to_e4m3(a.v[i]);
      break;
    }
    case DType::kI8: {
      auto* p = static_cast<std::int8_t*>(data);
      for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<std::int8_t>(round_to(DType::kI8, a.v[i]));
      break;
    }
    case DType::kU8: {
      auto* p = static_cast<std::uint8_t*>(data);
      for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<std::uint8_t>(round_to(DType::kU8, a.v[i]));
      break;
    }
    case DType::kI16: {
      auto* p = static_cast<std::int16_t*>(data);
      for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<std::int16_t>(round_to(DType::kI16, a.v[i]));
      break;
    }
    case DType::kI32: {
      auto* p = static_cast<std::int32_t*>(data);
      for (std::size_t i = 0; i < n; ++i)
        p[i] = static_cast<std::int32_t>(round_to(DType::kI32, a.v[i]));
      break;
    }
    default:
      fail<NotSupported>("quantization arrays cannot be stored as {}", dtype_name(a.dtype));
  }
  return t;
}

Array full(DType dtype, Shape shape, float value) {
  Array a;
  a.dtype = dtype;
  a.v.assign(static_cast<std::size_t>(shape_numel(shape)), round_to(dtype, value));
  a.shape = std::move(shape);
  return a;
}

Array cast(const Array& a, DType dtype) {
  Array out = a;
  out.dtype = dtype;
  if (dtype != a.dtype)
    for (float& x : out.v) x = round_to(dtype, x);
  return out;
}

Array reshape(const Array& a, Shape shape) {
  KVQ_CHECK(shape_numel(shape) == a.numel(), "reshape {} -> {}", shape_str(a.shape),
            shape_str(shape));
  Array out = a;
  out.shape = std::move(shape);
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail<InvalidArgument>("shapes {} and {} cannot be broadcast", shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

float apply(Op op, float a, float b) {
  switch (op) {
    case Op::kAdd:
      return a + b;
    case Op::kSub:
      return a - b;
    case Op::kMul:
      return a * b;
    case Op::kDiv:
      return a / b;
    // torch.minimum / maximum propagate NaN.
    case Op::kMin:
      return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN()
                                              : std::min(a, b);
    case Op::kMax:
      return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN()
                                              : std::max(a, b);
  }
  return 0.0f;
}

namespace {

// For every element of `out` (row-major), the flat index into an operand of shape `in`.
std::vector<std::int64_t> broadcast_index(const Shape& out, const Shape& in) {
  const std::int64_t n = shape_numel(out);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  const std::size_t nd = out.size();
  std::vector<std::int64_t> stride(nd, 0);
  std::int64_t s = 1;
  for (std::size_t k = 0; k < in.size(); ++k) {
    const std::size_t d = in.size() - 1 - k;
    const std::size_t od = nd - 1 - k;
    stride[od] = in[d] == 1 ? 0 : s;
    s *= in[d];
  }
  std::vector<std::int64_t> counter(nd, 0);
  std::int64_t cur = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    idx[static_cast<std::size_t>(i)] = cur;
    for (std::size_t d = nd; d-- > 0;) {
      if (++counter[d] < out[d]) {
        cur += stride[d];
        break;
      }
      cur -= stride[d] * (out[d] - 1);
      counter[d] = 0;
    }
  }
  return idx;
}

void combine(const Array& a, const Array& b, Op op, DType dtype, const Shape& shape,
             std::vector<float>& out) {
  const std::int64_t n = shape_numel(shape);
  out.resize(static_cast<std::size_t>(n));
  if (a.shape == shape && b.shape == shape) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = round_to(dtype, apply(op, a.v[i], b.v[i]));
    return;
  }
  if (a.shape == shape && b.numel() == 1) {
    const float bv = b.v[0];
    for (std::int64_t i = 0; i < n; ++i) out[i] = round_to(dtype, apply(op, a.v[i], bv));
    return;
  }
  const auto ia = broadcast_index(shape, a.shape);
  const auto ib = broadcast_index(shape, b.shape);
  for (std::int64_t i = 0; i < n; ++i) out[i] = round_to(dtype, apply(op, a.v[ia[i]], b.v[ib[i]]));
}

}  // namespace

Array binary(const Array& a, const Array& b, Op op) {
  Array out;
  out.dtype = promote(a.dtype, b.dtype);
  out.shape = broadcast_shapes(a.shape, b.shape);
  combine(a, b, op, out.dtype, out.shape, out.v);
  return out;
}

void binary_inplace(Array& a, const Array& b, Op op) {
  const Shape shape = broadcast_shapes(a.shape, b.shape);
  if (shape != a.shape)
    fail<InvalidArgument>("output with shape {} doesn't match the broadcast shape {}",
                          shape_str(a.shape), shape_str(shape));
  std::vector<float> out;
  combine(a, b, op, a.dtype, shape, out);
  a.v = std::move(out);
}

Array binary_scalar(const Array& a, double s, Op op) {
  Array out = a;
  const float sv = static_cast<float>(s);
  for (float& x : out.v) x = round_to(a.dtype, apply(op, x, sv));
  return out;
}

Array scalar_binary(double s, const Array& a, Op op) {
  // A leading wrapped number is cast to the common dtype first (TensorIterator's promotion).
  Array out = a;
  const float sv = round_to(a.dtype, static_cast<float>(s));
  if (op == Op::kDiv) {
    // Python's `s / tensor` is Tensor.__rtruediv__ = tensor.reciprocal() * s: two rounded ops.
    for (float& x : out.v) x = round_to(a.dtype, round_to(a.dtype, 1.0f / x) * sv);
    return out;
  }
  for (float& x : out.v) x = round_to(a.dtype, apply(op, sv, x));
  return out;
}

Array clamp(const Array& a, float lo, float hi) {
  Array out = a;
  for (float& x : out.v)
    if (!std::isnan(x)) x = std::min(std::max(x, lo), hi);
  return out;
}

}  // namespace kvq::quant::detail
