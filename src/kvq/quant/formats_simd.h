// Internal to kvq::quant formats: per-element decoding shared by the scalar reference and the
// tails of the SIMD paths, and the SIMD entry points (formats_avx512.cc, formats_avx2.cc).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvq/core/dtype.h"
#include "kvq/core/float8.h"
#include "kvq/quant/formats.h"

namespace kvq::quant::detail {

// E4M3 code -> fp32 at compile time (the bit manipulation of the SIMD decoders: normals rebias
// into the fp32 exponent, subnormals are m * 2^-9, S.1111.111 is NaN). e4m3_to_f32 uses ldexp,
// too slow for one block scale per 16 values; the tests check this table against it.
constexpr float e4m3_value(unsigned code) {
  const unsigned em = code & 0x7fu, sign = (code & 0x80u) << 24;
  if (em == 0x7fu) return std::bit_cast<float>(0x7fc00000u | sign);
  if (em < 8u) {
    const float v = static_cast<float>(em) / 512.0f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(((em << 20) + (120u << 23)) | sign);
}
inline constexpr std::array<float, 256> kE4M3Table = [] {
  std::array<float, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = e4m3_value(c);
  return t;
}();

inline std::int64_t nvfp4_scales_offset(std::int64_t n) { return (n + 1) / 2; }

inline std::uint8_t nibble(const std::byte* row, std::int64_t i) {
  const auto b = static_cast<std::uint8_t>(row[i / 2]);
  return (i & 1) ? static_cast<std::uint8_t>(b >> 4) : static_cast<std::uint8_t>(b & 0xf);
}

inline float nvfp4_block_scale(const std::byte* row, std::int64_t n, std::int64_t i) {
  return kE4M3Table[static_cast<std::uint8_t>(row[nvfp4_scales_offset(n) + i / 16])];
}

// Element i of a row before the stream scale: (code - zp) for int / fp8, the value for plain
// formats, e2m1 * block_scale for nvfp4 (zp unused).
inline float decode_value(KvFormat format, const std::byte* row, std::int64_t n, std::int64_t i,
                          float zero_point) {
  switch (format) {
    case KvFormat::kF32: {
      float v;
      std::memcpy(&v, row + 4 * i, 4);
      return v;
    }
    case KvFormat::kBF16: {
      std::uint16_t b;
      std::memcpy(&b, row + 2 * i, 2);
      return bf16_to_f32(b);
    }
    case KvFormat::kF16: {
      std::uint16_t b;
      std::memcpy(&b, row + 2 * i, 2);
      return fp16_to_f32(b);
    }
    case KvFormat::kFP8E4M3:
      return kE4M3Table[static_cast<std::uint8_t>(row[i])] - zero_point;
    case KvFormat::kINT8:
      return static_cast<float>(static_cast<std::int8_t>(row[i])) - zero_point;
    case KvFormat::kINT4:
      return static_cast<float>(static_cast<int>(nibble(row, i)) - 8) - zero_point;
    case KvFormat::kNVFP4:
      return e2m1_to_f32(nibble(row, i)) * nvfp4_block_scale(row, n, i);
  }
  return 0.0f;
}

// Element i of a row dequantized (the scalar reference's value).
inline float dequant_value(const RowCodec& c, const std::byte* row, std::int64_t i) {
  if (c.format == KvFormat::kNVFP4)
    return e2m1_to_f32(nibble(row, i)) * (nvfp4_block_scale(row, c.n, i) / c.global_scale);
  return decode_value(c.format, row, c.n, i, c.zero_point) * c.scale;
}

// The multi-query kernels keep this many queries' accumulators in registers at once.
inline constexpr std::int64_t kMaxRowQueries = 8;

// SIMD kernels process whole chunks (16 values for AVX-512, 8 for AVX2) from element 0 and
// return how many elements they handled; the caller finishes the tail with decode_value.
// Each computes exactly the scalar reference's per-element ops (dequantize, axpy: bit-exact).
namespace avx512 {
std::int64_t dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                            float zero_point, float global_scale, float* out);
std::int64_t dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
                     float zero_point, float* sum);
std::int64_t axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n,
                      float zero_point, float* acc);
std::int64_t dot_rows(const RowCodec& c, const float* q, std::int64_t nq, const std::byte* rows,
                      std::int64_t nt, float* scores, std::int64_t ld);
std::int64_t axpy_rows(const RowCodec& c, const float* p, std::int64_t nq, std::int64_t ld,
                       const std::byte* rows, std::int64_t nt, float* acc);
}  // namespace avx512
namespace avx2 {
std::int64_t dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                            float zero_point, float global_scale, float* out);
std::int64_t dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
                     float zero_point, float* sum);
std::int64_t axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n,
                      float zero_point, float* acc);
std::int64_t dot_rows(const RowCodec& c, const float* q, std::int64_t nq, const std::byte* rows,
                      std::int64_t nt, float* scores, std::int64_t ld);
std::int64_t axpy_rows(const RowCodec& c, const float* p, std::int64_t nq, std::int64_t ld,
                       const std::byte* rows, std::int64_t nt, float* acc);
}  // namespace avx2

}  // namespace kvq::quant::detail
