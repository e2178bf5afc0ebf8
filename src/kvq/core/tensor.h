// Tensor: a dense row-major array with a dtype and a shape.
//
// Storage is shared and reference counted, so copying a Tensor is cheap and aliases the same
// bytes (like torch). A tensor either owns 64-byte aligned memory or views bytes owned by
// someone else (an mmapped file), kept alive through `owner`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"

namespace kvq {

using Shape = std::vector<std::int64_t>;

// Product of the dimensions (1 for a 0-dim shape); throws InvalidArgument on a negative
// dimension or on overflow.
std::int64_t shape_numel(const Shape& shape);
// "[1, 9, 37, 64]"
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised owning tensor.
  Tensor(DType dtype, Shape shape);

  // A tensor over bytes owned by `owner` (not copied). `data` must hold numel × size bytes.
  static Tensor view(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> owner);
  // An owning fp32 tensor holding `values` (size must equal the shape's numel).
  static Tensor from_f32(Shape shape, std::span<const float> values);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int axis) const;  // negative axes count from the end
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel_ == 0; }

  const void* data() const { return data_; }
  // Mutable access; a view of read-only memory (an mmapped file) must be copied first.
  void* mutable_data();

  // Typed access; checks that the dtype matches T's size and kind.
  const float* f32() const;
  float* f32();

  // A deep copy that owns its memory.
  Tensor clone() const;
  // The same bytes with another shape of equal numel.
  Tensor reshape(Shape shape) const;
  // Every element converted to fp32 (float and integer dtypes; E4M3/E5M2 included).
  Tensor to_f32() const;
  std::vector<float> to_f32_vector() const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::int64_t numel_ = 0;
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  bool writable_ = false;
};

}  // namespace kvq
