#include "kvq/kernels/ref/kv_rows_ref.h"

#include <cmath>
#include <vector>

#include "kvq/core/float8.h"
#include "kvq/quant/kv_row_layout.h"

namespace kvq::kernels::ref {
namespace {

using quant::detail::nibble;
using quant::detail::nvfp4_block_scale;

// The nvfp4 semantics of int8_query.h, one query row against one row.
float nvfp4_score(const std::int8_t* qi, const std::byte* row, std::int64_t n, float factor) {
  float acc[16] = {};
  for (std::int64_t t = 0; t < n; t += 64) {
    for (int l = 0; l < 16; ++l) {
      const std::int64_t first = t + 8 * (l % 8) + (l / 8);  // E(l) = first + 2m, m < 4
      std::int32_t sum = 0;
      for (int m = 0; m < 4; ++m) {
        const std::int64_t c = first + 2 * m;
        const auto w = static_cast<std::int32_t>(2.0f * e2m1_to_f32(nibble(row, c)));
        sum += std::int32_t{qi[c]} * w;
      }
      acc[l] = std::fma(static_cast<float>(sum), nvfp4_block_scale(row, n, first), acc[l]);
    }
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0] * factor;
}

// Signed integer code c of an int8 / int4 row.
std::int32_t int_code(quant::KvIntCodes codes, const std::byte* row, std::int64_t c) {
  return codes == quant::KvIntCodes::kInt4 ? std::int32_t{nibble(row, c)} - 8
                                           : std::int32_t{static_cast<std::int8_t>(row[c])};
}

}  // namespace

float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point) {
  const auto unscaled = quant::kv_format_traits(format).unscaled;
  float sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) sum += q[i] * unscaled(row, n, i, zero_point);
  return sum;
}

void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc) {
  const auto unscaled = quant::kv_format_traits(format).unscaled;
  for (std::int64_t i = 0; i < n; ++i)
    acc[i] = std::fma(w, unscaled(row, n, i, zero_point), acc[i]);
}

void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld) {
  const auto row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(codec.format, codec.n));
  std::vector<float> x(static_cast<std::size_t>(codec.n));
  for (std::int64_t j = 0; j < nt; ++j) {
    quant::dequantize_row(codec.format, rows + j * row_bytes, codec.n, codec.scale,
                          codec.zero_point, codec.global_scale, x.data());
    for (std::int64_t i = 0; i < nq; ++i) {
      float sum = 0.0f;
      for (std::int64_t c = 0; c < codec.n; ++c) sum += q[i * codec.n + c] * x[c];
      scores[i * ld + j] = sum;
    }
  }
}

void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc) {
  const auto row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(codec.format, codec.n));
  std::vector<float> x(static_cast<std::size_t>(codec.n));
  for (std::int64_t j = 0; j < nt; ++j) {
    quant::dequantize_row(codec.format, rows + j * row_bytes, codec.n, codec.scale,
                          codec.zero_point, codec.global_scale, x.data());
    for (std::int64_t i = 0; i < nq; ++i)
      for (std::int64_t c = 0; c < codec.n; ++c)
        acc[i * codec.n + c] = std::fma(p[i * ld + j], x[c], acc[i * codec.n + c]);
  }
}

void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld) {
  check_int8_query_args(codec, q);
  const std::int64_t n = codec.n;
  const quant::KvIntCodes codes = quant::kv_format_traits(codec.format).int8_query_codes;
  const auto row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(codec.format, n));
  if (codes == quant::KvIntCodes::kE2m1Nibbles) {
    for (std::int64_t i = 0; i < q.nq; ++i) {
      const float factor = q.scale[static_cast<std::size_t>(i)] * (0.5f / codec.global_scale);
      for (std::int64_t j = 0; j < nt; ++j) {
        scores[i * ld + j] = nvfp4_score(q.codes.data() + i * n, rows + j * row_bytes, n, factor);
      }
    }
    return;
  }
  for (std::int64_t i = 0; i < q.nq; ++i) {
    const std::int8_t* qi = q.codes.data() + i * n;
    const float zq = codec.zero_point * static_cast<float>(q.sum[static_cast<std::size_t>(i)]);
    const float f = q.scale[static_cast<std::size_t>(i)] * codec.scale;
    for (std::int64_t j = 0; j < nt; ++j) {
      const std::byte* row = rows + j * row_bytes;
      std::int32_t dot = 0;
      for (std::int64_t c = 0; c < n; ++c) dot += std::int32_t{qi[c]} * int_code(codes, row, c);
      scores[i * ld + j] = (static_cast<float>(dot) - zq) * f;
    }
  }
}

}  // namespace kvq::kernels::ref
