#include "kvq/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "kvq/core/float8.h"

namespace kvq {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) fail<InvalidArgument>("negative dimension in shape {}", shape_str(shape));
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) {
      fail<InvalidArgument>("shape {} has too many elements", shape_str(shape));
    }
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
}  // namespace

Tensor::Tensor(DType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)), numel_(shape_numel(shape_)) {
  const std::size_t bytes = nbytes();
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* memory = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (memory == nullptr) fail<Error>("out of memory allocating {} bytes", bytes);
  std::memset(memory, 0, rounded == 0 ? 64 : rounded);
  owner_ = std::shared_ptr<void>(memory, AlignedFree{});
  data_ = memory;
  writable_ = true;
}

Tensor Tensor::view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = shape_numel(t.shape_);
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.writable_ = false;
  return t;
}

Tensor Tensor::from_f32(Shape shape, std::span<const float> values) {
  Tensor t(DType::kF32, std::move(shape));
  if (static_cast<std::int64_t>(values.size()) != t.numel()) {
    fail<InvalidArgument>("from_f32: {} values for shape {}", values.size(), shape_str(t.shape()));
  }
  if (!values.empty()) std::memcpy(t.mutable_data(), values.data(), values.size_bytes());
  return t;
}

std::int64_t Tensor::dim(int axis) const {
  const int n = ndim();
  const int a = axis < 0 ? axis + n : axis;
  KVQ_CHECK(a >= 0 && a < n, "axis {} out of range for shape {}", axis, shape_str(shape_));
  return shape_[static_cast<std::size_t>(a)];
}

void* Tensor::mutable_data() {
  KVQ_CHECK(writable_, "tensor is a read-only view; clone() it first");
  return const_cast<void*>(data_);
}

const float* Tensor::f32() const {
  KVQ_CHECK(dtype_ == DType::kF32, "expected F32, tensor is {}", dtype_name(dtype_));
  return static_cast<const float*>(data_);
}

float* Tensor::f32() {
  KVQ_CHECK(dtype_ == DType::kF32, "expected F32, tensor is {}", dtype_name(dtype_));
  return static_cast<float*>(mutable_data());
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.mutable_data(), data_, nbytes());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  KVQ_CHECK(shape_numel(shape) == numel_, "reshape {} -> {}", shape_str(shape_), shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

std::vector<float> Tensor::to_f32_vector() const {
  std::vector<float> out(static_cast<std::size_t>(numel_));
  const auto* bytes = static_cast<const unsigned char*>(data_);
  for (std::int64_t i = 0; i < numel_; ++i) {
    const unsigned char* p = bytes + static_cast<std::size_t>(i) * dtype_size(dtype_);
    float v = 0.0f;
    switch (dtype_) {
      case DType::kF32:
        std::memcpy(&v, p, 4);
        break;
      case DType::kF64: {
        double d;
        std::memcpy(&d, p, 8);
        v = static_cast<float>(d);
        break;
      }
      case DType::kF16: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        v = fp16_to_f32(h);
        break;
      }
      case DType::kBF16: {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        v = bf16_to_f32(h);
        break;
      }
      case DType::kF8E4M3:
        v = e4m3_to_f32(*p);
        break;
      case DType::kF8E5M2:
        v = e5m2_to_f32(*p);
        break;
      case DType::kI8:
        v = static_cast<float>(static_cast<std::int8_t>(*p));
        break;
      case DType::kU8:
      case DType::kBool:
        v = static_cast<float>(*p);
        break;
      case DType::kI16: {
        std::int16_t x;
        std::memcpy(&x, p, 2);
        v = static_cast<float>(x);
        break;
      }
      case DType::kI32: {
        std::int32_t x;
        std::memcpy(&x, p, 4);
        v = static_cast<float>(x);
        break;
      }
      case DType::kI64: {
        std::int64_t x;
        std::memcpy(&x, p, 8);
        v = static_cast<float>(x);
        break;
      }
    }
    out[static_cast<std::size_t>(i)] = v;
  }
  return out;
}

Tensor Tensor::to_f32() const {
  if (dtype_ == DType::kF32) return *this;
  const std::vector<float> values = to_f32_vector();
  return from_f32(shape_, values);
}

}  // namespace kvq
