// Elementwise float arrays with torch's dtype semantics, for bit-exact emulation of
// compressed-tensors' op-by-op math (internal to kvq::quant).
//
// Values are held in fp32; every op rounds its result to the array's dtype exactly like torch's
// CPU kernels do for that dtype: fp32 ops are plain IEEE fp32; bf16 / fp16 ops compute in fp32
// ("opmath") and round to nearest even once. Binary ops promote like torch for dimensioned
// tensors (bf16 ⊕ fp16 -> fp32, anything ⊕ fp32 -> fp32) and broadcast right-aligned.
#pragma once

#include <cstdint>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/tensor.h"

namespace kvq::quant::detail {

struct Array {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<float> v;  // row-major, each value representable in dtype

  std::int64_t numel() const { return static_cast<std::int64_t>(v.size()); }
  int ndim() const { return static_cast<int>(shape.size()); }
};

// Rounds a fp32 value onto dtype's grid the way torch's `.to(dtype)` does from fp32
// (float8_e4m3fn: RNE, saturating at ±448 in torch 2.14 (NaN stays NaN); ints: truncation, NaN -> 0
// as x86 does).
float round_to(DType dtype, float value);
DType promote(DType a, DType b);

Array from_tensor(const Tensor& t);
Tensor to_tensor(const Array& a);
Array full(DType dtype, Shape shape, float value);
Array cast(const Array& a, DType dtype);  // `.to(dtype)`
Array reshape(const Array& a, Shape shape);

Shape broadcast_shapes(const Shape& a, const Shape& b);

enum class Op { kAdd, kSub, kMul, kDiv, kMin, kMax };
float apply(Op op, float a, float b);

// `a op b` with promotion and broadcasting.
Array binary(const Array& a, const Array& b, Op op);
// `a op= b` (in place: keeps a's dtype and shape; b must broadcast to a).
void binary_inplace(Array& a, const Array& b, Op op);
// `a op s` with a Python scalar s (cast to fp32 first, as torch does for a float tensor).
Array binary_scalar(const Array& a, double s, Op op);
// `s op a` with a Python scalar (e.g. 2688.0 / amax).
Array scalar_binary(double s, const Array& a, Op op);
// torch.clamp(a, lo, hi) with scalar bounds (NaN propagates).
Array clamp(const Array& a, float lo, float hi);

}  // namespace kvq::quant::detail
