// Scalar twins of the packed-row kernels (kvq/kernels/cpu/kv_row_kernels.h and
// cpu/int8_query.h): plain loops over the scalar codec's values (quant::KvFormatTraits), in
// the obvious order. The tests compare every fast path with these; the row codec itself
// (quant::dequantize_row) is the twin of kernels::dequantize_row.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/kernels/cpu/int8_query.h"
#include "kvq/quant/formats.h"

namespace kvq::kernels::ref {

using quant::KvFormat;
using quant::RowCodec;

// Sequential sums over the codes (see kernels::dot_row / axpy_row).
float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point);
void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc);
// Sequential sums over quant::dequantize_row's values (see kernels::dot_rows / axpy_rows).
void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld);
void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc);
// The int8-query scores by their definition (cpu/int8_query.h): the fast path equals this bit
// for bit.
void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld);

}  // namespace kvq::kernels::ref
