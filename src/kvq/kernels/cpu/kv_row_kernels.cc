// Dispatch of the packed-row kernels: the SIMD table of this CPU's level handles whole chunks,
// the scalar codec (quant::KvFormatTraits) the tail, or everything without a SIMD row.
#include "kvq/kernels/cpu/kv_row_kernels.h"

#include <cmath>

namespace kvq::kernels {

// Each ISA's table (kv_rows_avx512.cc, kv_rows_avx2.cc: kv_rows_simd_body.inc).
namespace avx512 {
const KvRowSimd* row_simd(KvFormat format);
}
namespace avx2 {
const KvRowSimd* row_simd(KvFormat format);
}

namespace {

// The row kernels of this CPU's level for `format`, or nullptr (scalar).
const KvRowSimd* fast(KvFormat format) { return kv_row_simd(format, kv_rows_isa()); }

}  // namespace

Isa kv_rows_isa() {
  static const Isa isa = [] {
    const CpuFeatures& f = cpu_features();
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c) return Isa::kAvx512;
    if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return isa;
}

const KvRowSimd* kv_row_simd(KvFormat format, Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return avx512::row_simd(format);
    case Isa::kAvx2:
      return avx2::row_simd(format);
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out) {
  std::int64_t done = 0;
  if (const KvRowSimd* k = fast(format))
    done = k->dequantize_row(in, n, scale, zero_point, global_scale, out);
  if (done == n) return;
  const RowCodec codec{format, n, scale, zero_point, global_scale};
  const auto value = quant::kv_format_traits(format).value;
  for (std::int64_t i = done; i < n; ++i) out[i] = value(codec, in, i);
}

float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point) {
  std::int64_t done = 0;
  float sum = 0.0f;
  if (const KvRowSimd* k = fast(format)) done = k->dot_row(q, row, n, zero_point, &sum);
  const auto unscaled = quant::kv_format_traits(format).unscaled;
  for (std::int64_t i = done; i < n; ++i) sum += q[i] * unscaled(row, n, i, zero_point);
  return sum;
}

void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc) {
  std::int64_t done = 0;
  if (const KvRowSimd* k = fast(format)) done = k->axpy_row(w, row, n, zero_point, acc);
  const auto unscaled = quant::kv_format_traits(format).unscaled;
  for (std::int64_t i = done; i < n; ++i)
    acc[i] = std::fma(w, unscaled(row, n, i, zero_point), acc[i]);
}

void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld) {
  std::int64_t done = 0;
  if (const KvRowSimd* k = fast(codec.format))
    done = k->dot_rows(codec, q, nq, rows, nt, scores, ld);
  if (done == codec.n) return;
  // The tail (or everything, without SIMD): the same order for every format.
  const auto row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(codec.format, codec.n));
  const auto value = quant::kv_format_traits(codec.format).value;
  for (std::int64_t j = 0; j < nt; ++j) {
    const std::byte* row = rows + j * row_bytes;
    for (std::int64_t i = 0; i < nq; ++i) {
      float sum = done == 0 ? 0.0f : scores[i * ld + j];
      for (std::int64_t c = done; c < codec.n; ++c)
        sum += q[i * codec.n + c] * value(codec, row, c);
      scores[i * ld + j] = sum;
    }
  }
}

void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc) {
  std::int64_t done = 0;
  if (const KvRowSimd* k = fast(codec.format)) done = k->axpy_rows(codec, p, nq, ld, rows, nt, acc);
  if (done == codec.n) return;
  const auto row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(codec.format, codec.n));
  const auto value = quant::kv_format_traits(codec.format).value;
  for (std::int64_t j = 0; j < nt; ++j) {
    const std::byte* row = rows + j * row_bytes;
    for (std::int64_t c = done; c < codec.n; ++c) {
      const float x = value(codec, row, c);
      for (std::int64_t i = 0; i < nq; ++i)
        acc[i * codec.n + c] = std::fma(p[i * ld + j], x, acc[i * codec.n + c]);
    }
  }
}

void prepare_block_scales(RowCodec& codec, BlockScaleValues& values) {
  const KvRowSimd* k = fast(codec.format);
  if (k == nullptr || k->scale_table == nullptr) return;
  for (std::size_t e = 0; e < values.size(); ++e)
    values[e] = (*k->scale_table)[e] / codec.global_scale;
  codec.block_scales = values.data();
}

}  // namespace kvq::kernels
