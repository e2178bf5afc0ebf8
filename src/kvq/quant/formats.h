// The packed KV-cache storage formats: ONE table (like ggml's type traits) plus row codecs.
//
// A row is the head_dim values of one token of one kv head. Scales are per row stream (per
// tensor or per head, as compressed-tensors' kv_cache_scheme defines them) and passed in; only
// NVFP4 keeps per-block scales inside the row. Row layouts (little-endian, n = head_dim):
//   f32 / bf16 / f16  n plain values of x / scale (scale is 1 for an unquantized cache)
//   fp8   n E4M3 bytes (float8_e4m3fn)
//   int8  n int8 values q (symmetric: zero point 0; asymmetric: integer zp in [-128, 127])
//   int4  ceil(n/2) bytes: element 2i in the LOW nibble, 2i+1 in the high nibble, each stored
//         as q + 8 (unsigned 0..15, q in [-8, 7]) — the pack order of compressed-tensors'
//         pack_fp4_to_uint8 / pack_to_int32 with their unsigned offset. An odd n pads a 8 (q=0).
//   nvfp4 ceil(n/2) bytes of E2M1 sign-magnitude nibble pairs (same order as int4), then
//         ceil(n/16) E4M3 block scales, one per 16 values. Scales live in their own region at
//         the end of the row rather than after each 8-byte block: the nibble region is then
//         exactly the int4 layout (one unpack kernel, 32-byte aligned loads for head_dim 64),
//         the scales are one contiguous load, and it mirrors compressed-tensors' checkpoint
//         layout (`*_packed` [.., n/2] + `*_scale` [.., n/16]). Same bytes per row either way.
//
// Quantization math is compressed-tensors 0.19.0's `_quantize` in fp32 (see fake_quantize.h):
//   int:  q = round_half_even(clamp(x / scale + zp, q_min, q_max))
//   fp8:  q = e4m3(clamp(x / scale + zp, -448, 448))
//   nvfp4 (tensor_group, group 16, `global_scale` = the stream's fp32 global scale):
//         block_scale = e4m3(clamp(global_scale * (amax_block / 6), ±448)), 0 -> 0.125
//         q = e2m1(clamp(x / (block_scale / global_scale), -6, 6))
// and dequantization is `(q - zp) * scale` (nvfp4: q * (block_scale / global_scale)), so
// dequantize_row(quantize_row(x)) equals kvq::quant::fake_quantize bit for bit, except that a
// zero may come back with the other sign (int codes have no -0).
//
// NaN policy: fp8 keeps NaN (E4M3 NaN code); int8/int4 store q = 0 for NaN (what torch's
// `.to(int8)` gives on x86, i.e. compressed-tensors' compressed checkpoint), so NaN decodes as
// -zp * scale; an nvfp4 block containing a NaN gets a NaN block scale, so the whole block decodes
// to NaN (as fake_quantize's NaN amax does). ±inf saturate to the format's largest value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvq::quant {

enum class KvFormat : std::uint8_t { kF32, kBF16, kF16, kFP8E4M3, kINT8, kINT4, kNVFP4 };

struct KvFormatTraits {
  KvFormat format;
  std::string_view name;     // "f32", "bf16", "f16", "fp8", "int8", "int4", "nvfp4"
  int bits;                  // bits per value, block scales excluded
  int block_values;          // values per block (1 for element formats, 2 for int4, 16 for nvfp4)
  int block_bytes;           // bytes per block incl. its in-row scale (nvfp4: 8 + 1 = 9)
  bool needs_scale;          // quantized: a per-stream scale must be calibrated
  bool supports_zero_point;  // asymmetric (zero point) quantization is meaningful
};

const KvFormatTraits& kv_format_traits(KvFormat format);
std::span<const KvFormatTraits> kv_format_table();
// Canonical names plus aliases ("fp8_e4m3", "e4m3", "float8_e4m3fn", "float32", "bfloat16",
// "float16", "fp32", "fp16", "nvfp4", "fp4"...), case-insensitive; nullopt when unknown.
std::optional<KvFormat> parse_kv_format(std::string_view text);
inline std::string_view kv_format_name(KvFormat format) { return kv_format_traits(format).name; }

// Bytes of one row of head_dim values, in-row block scales included (partial blocks padded).
std::size_t kv_row_bytes(KvFormat format, std::int64_t head_dim);
// Average bytes per value with in-row scales (nvfp4: 9/16), for reporting.
double kv_bytes_per_value(KvFormat format);

// Encodes one row: x [n] -> out [kv_row_bytes(format, n)]. `scale` / `zero_point` are the
// stream's (ignored by nvfp4; zero_point ignored by f32/bf16/f16); `global_scale` is used by
// nvfp4 only.
void quantize_row(KvFormat format, const float* x, std::int64_t n, float scale, float zero_point,
                  float global_scale, std::byte* out);
// Decodes one row: in [kv_row_bytes] -> out [n] = (q - zp) * scale (nvfp4: see above).
void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out);

// Single-row products on the codes. The stream scale is NOT applied (a caller folds it);
// nvfp4 applies its in-row block scales, so its stream factor is 1 / global_scale. (Attention
// uses dot_rows / axpy_rows below, which dequantize exactly; these stay for benchmarks.)
//   dot_row  = sum_i q[i] * (code_i - zero_point)          q [n], row [kv_row_bytes]
//   axpy_row: acc[i] += w * (code_i - zero_point)            acc [n]
// Fast paths use AVX-512 / AVX2+F16C / scalar by runtime dispatch; their summation order
// differs from the scalar reference (dot: within a few ulp of the sum's magnitude).
float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point);
void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc);

// How to dequantize the rows of one stream: row j's element c is (code - zero_point) * scale
// (nvfp4: e2m1 * (block_scale / global_scale)), exactly dequantize_row's value.
struct RowCodec {
  KvFormat format = KvFormat::kF32;
  std::int64_t n = 0;  // values per row (head_dim); rows are kv_row_bytes(format, n) apart
  float scale = 1.0f;
  float zero_point = 0.0f;
  float global_scale = 1.0f;  // nvfp4 only
};

// Multi-query attention kernels (decode): nq query rows share every decoded row, so a GQA group
// reads each cached K / V row once. Each row is dequantized to exactly dequantize_row's values
// and the arithmetic after that is the same for every format, so a packed cache gives results
// BIT-IDENTICAL to an fp32 cache holding the dequantized values (a fake-quantized cache):
// kvq's packed KV cache reproduces the fake-quant (reference) run exactly. Summation order is
// fixed per CPU instruction set (not the scalar reference's order).
//   dot_rows:  scores[i * ld + j] = sum_c q[i * n + c] * x_j[c]     q [nq, n], j < nt
//   axpy_rows: acc[i * n + c] += sum_j p[i * ld + j] * x_j[c]       (j ascending, fma each)
// where x_j is row j (at rows + j * kv_row_bytes(format, n)) dequantized.
void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld);
void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc);

// Scalar ground truth for the fast paths (and the dispatch fallback).
namespace ref {
void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out);
float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point);
void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc);
// Sequential sums over ref::dequantize_row's values.
void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld);
void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc);
}  // namespace ref

// Which implementation the dispatcher picked on this CPU: "avx512", "avx2" or "scalar".
std::string_view kv_format_isa();

}  // namespace kvq::quant
