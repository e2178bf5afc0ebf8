// Fast kernels on packed KV rows (any quant::KvFormat, layouts in kvq/quant/formats.h),
// runtime-dispatched to AVX-512 / AVX2+F16C / scalar. Their scalar twins are in
// kvq/kernels/ref/kv_rows_ref.h and the row codec (quant::dequantize_row) is the ground truth.
//
// Each format's SIMD row decoder is one row of kv_format_simd.inc (the CPU kernel table);
// kv_rows_avx512.cc / kv_rows_avx2.cc compile the kernels below for every row into a per-ISA
// table (kv_row_simd). A format without a row there runs the scalar codec.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/quant/formats.h"

namespace kvq::kernels {

using quant::KvFormat;
using quant::RowCodec;

// Decodes one row: in [kv_row_bytes] -> out [n], exactly quant::dequantize_row's values.
void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out);

// Single-row products on the codes. The stream scale is NOT applied (a caller folds it);
// nvfp4 applies its in-row block scales, so its stream factor is 1 / global_scale. (Attention
// uses dot_rows / axpy_rows below, which dequantize exactly; these stay for benchmarks.)
//   dot_row  = sum_i q[i] * (code_i - zero_point)          q [n], row [kv_row_bytes]
//   axpy_row: acc[i] += w * (code_i - zero_point)            acc [n]
// Their summation order differs from the scalar twins' (dot: within a few ulp of the sum's
// magnitude; axpy: bit-exact).
float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point);
void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc);

// Multi-query attention kernels (decode): nq query rows share every decoded row, so a GQA group
// reads each cached K / V row once. Each row is dequantized to exactly dequantize_row's values
// and the arithmetic after that is the same for every format, so a packed cache gives results
// BIT-IDENTICAL to an fp32 cache holding the dequantized values (a fake-quantized cache):
// kvq's packed KV cache reproduces the fake-quant (reference) run exactly. Summation order is
// fixed per CPU instruction set (not the scalar twins' order).
//   dot_rows:  scores[i * ld + j] = sum_c q[i * n + c] * x_j[c]     q [nq, n], j < nt
//   axpy_rows: acc[i * n + c] += sum_j p[i * ld + j] * x_j[c]       (j ascending, fma each)
// where x_j is row j (at rows + j * kv_row_bytes(format, n)) dequantized.
void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld);
void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc);

// One stream's byte block scales over its global scale (nvfp4 and the E4M3- / log-scaled
// formats): values[e] = table[e] / codec.global_scale, and codec.block_scales = values, so the
// kernels above look each block's scale up instead of dividing once per chunk (a scalar
// division per 16 values that bounded their speed). The same quotients: bit-identical results.
// A no-op for every other format, and without SIMD row kernels. `values` must outlive the
// codec's use.
using BlockScaleValues = std::array<float, 256>;
void prepare_block_scales(RowCodec& codec, BlockScaleValues& values);

// The level the row kernels run at on this CPU: AVX-512 needs F, BW, VL, DQ, FMA and F16C,
// AVX2 needs FMA and F16C too.
Isa kv_rows_isa();

// One format's SIMD row kernels on one ISA. Each processes whole chunks of `width` values from
// element 0 and returns how many elements it handled; the dispatcher above finishes the tail
// with the scalar codec. Each computes exactly the scalar codec's per-element ops (dequantize,
// axpy: bit-exact).
struct KvRowSimd {
  std::int64_t width = 0;
  std::int64_t (*dequantize_row)(const std::byte* in, std::int64_t n, float scale, float zero_point,
                                 float global_scale, float* out) = nullptr;
  std::int64_t (*dot_row)(const float* q, const std::byte* row, std::int64_t n, float zero_point,
                          float* sum) = nullptr;
  std::int64_t (*axpy_row)(float w, const std::byte* row, std::int64_t n, float zero_point,
                           float* acc) = nullptr;
  std::int64_t (*dot_rows)(const RowCodec& c, const float* q, std::int64_t nq,
                           const std::byte* rows, std::int64_t nt, float* scores,
                           std::int64_t ld) = nullptr;
  std::int64_t (*axpy_rows)(const RowCodec& c, const float* p, std::int64_t nq, std::int64_t ld,
                            const std::byte* rows, std::int64_t nt, float* acc) = nullptr;
  // The table the row's block scale bytes decode through (nvfp4, *_e4m3: E4M3; *_log: the log
  // scale), or nullptr (no byte block scales).
  const std::array<float, 256>* scale_table = nullptr;
};

// The kernels of `format` on `isa` (kAvx512 / kAvx2), or nullptr for kScalar and for formats
// without a SIMD row decoder. Call them only when the CPU has the ISA (tests call each level).
const KvRowSimd* kv_row_simd(KvFormat format, Isa isa);

// The multi-query kernels keep this many queries' accumulators in registers at once.
inline constexpr std::int64_t kMaxRowQueries = 8;

}  // namespace kvq::kernels
