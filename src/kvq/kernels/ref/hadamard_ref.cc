#include "kvq/kernels/ref/hadamard_ref.h"

#include <bit>
#include <cmath>

#include "kvq/core/error.h"

namespace kvq::kernels::ref {

void check_hadamard_shape(std::int64_t rows, std::int64_t n) {
  if (n < 1 || !std::has_single_bit(static_cast<std::uint64_t>(n))) {
    fail<InvalidArgument>(
        "Hadamard size {} is not a power of two; kvq's rotations need head_dim 64, 128, 256, ...",
        n);
  }
  if (rows < 0) fail<InvalidArgument>("Hadamard transform of size {}: rows {} < 0", n, rows);
}

float hadamard_scale(std::int64_t n) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
}

void hadamard_rows(float* x, std::int64_t rows, std::int64_t n) {
  check_hadamard_shape(rows, n);
  const float scale = hadamard_scale(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n;  // [n]
    for (std::int64_t h = 1; h < n; h *= 2) {
      for (std::int64_t i = 0; i < n; i += 2 * h) {
        for (std::int64_t j = i; j < i + h; ++j) {
          const float a = row[j], b = row[j + h];
          row[j] = a + b;
          row[j + h] = a - b;
        }
      }
    }
    for (std::int64_t i = 0; i < n; ++i) row[i] *= scale;
  }
}

}  // namespace kvq::kernels::ref
