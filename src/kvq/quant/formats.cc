#include "kvq/quant/formats.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/core/float8.h"
#include "kvq/quant/formats_simd.h"

namespace kvq::quant {
namespace {

using detail::decode_value;
using detail::nvfp4_scales_offset;

// Indexed by KvFormat.
constexpr std::array<KvFormatTraits, 7> kTraits{{
    {KvFormat::kF32, "f32", 32, 1, 4, false, false},
    {KvFormat::kBF16, "bf16", 16, 1, 2, false, false},
    {KvFormat::kF16, "f16", 16, 1, 2, false, false},
    {KvFormat::kFP8E4M3, "fp8", 8, 1, 1, true, false},
    {KvFormat::kINT8, "int8", 8, 1, 1, true, true},
    {KvFormat::kINT4, "int4", 4, 2, 1, true, true},
    {KvFormat::kNVFP4, "nvfp4", 4, 16, 9, true, false},
}};

struct Alias {
  std::string_view name;
  KvFormat format;
};
constexpr Alias kAliases[] = {
    {"fp32", KvFormat::kF32},        {"float32", KvFormat::kF32},
    {"float", KvFormat::kF32},       {"bfloat16", KvFormat::kBF16},
    {"fp16", KvFormat::kF16},        {"float16", KvFormat::kF16},
    {"half", KvFormat::kF16},        {"fp8_e4m3", KvFormat::kFP8E4M3},
    {"e4m3", KvFormat::kFP8E4M3},    {"float8_e4m3fn", KvFormat::kFP8E4M3},
    {"f8_e4m3", KvFormat::kFP8E4M3}, {"fp8e4m3", KvFormat::kFP8E4M3},
    {"i8", KvFormat::kINT8},         {"i4", KvFormat::kINT4},
    {"fp4", KvFormat::kNVFP4},       {"nvfp4_e2m1", KvFormat::kNVFP4},
};

// The int grids of compressed-tensors' calculate_range.
constexpr float kInt8Min = -128.0f, kInt8Max = 127.0f;
constexpr float kInt4Min = -8.0f, kInt4Max = 7.0f;
constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;
constexpr int kNvfp4Group = 16;

// torch.clamp: NaN passes through.
float clamp(float v, float lo, float hi) {
  return std::isnan(v) ? v : std::min(std::max(v, lo), hi);
}

// round(clamp(y)) then `.to(int8)`: NaN -> 0 as torch's cast does on x86.
int round_int(float y, float lo, float hi) {
  if (std::isnan(y)) return 0;
  return static_cast<int>(std::nearbyint(clamp(y, lo, hi)));
}

void quantize_nvfp4(const float* x, std::int64_t n, float global_scale, std::byte* out) {
  std::memset(out, 0, kv_row_bytes(KvFormat::kNVFP4, n));
  std::byte* scales = out + nvfp4_scales_offset(n);
  for (std::int64_t b0 = 0; b0 < n; b0 += kNvfp4Group) {
    const std::int64_t b1 = std::min<std::int64_t>(n, b0 + kNvfp4Group);
    // calculate_qparams: amax over min(min, 0) / max(max, 0); NaN propagates (torch min/max).
    float amax = 0.0f;
    for (std::int64_t i = b0; i < b1; ++i) {
      if (std::isnan(x[i])) {
        amax = x[i];
        break;
      }
      amax = std::max(amax, std::fabs(x[i]));
    }
    // scales = amax / 6 (bit_range / 2); global_scale * scales; clamp +-448 to E4M3; 0 -> eps
    // (0.125 for an fp8 scale dtype).
    const float s = global_scale * (amax / kFp4Max);
    std::uint8_t code = f32_to_e4m3(clamp(s, -kFp8Max, kFp8Max));
    if (e4m3_to_f32(code) == 0.0f) code = f32_to_e4m3(0.125f);
    scales[b0 / kNvfp4Group] = static_cast<std::byte>(code);
    const float scale_eff = e4m3_to_f32(code) / global_scale;
    for (std::int64_t i = b0; i < b1; ++i) {
      float y = x[i] / scale_eff;
      y += 0.0f;  // the fp8 zero point compressed-tensors adds (it turns -0 into +0)
      const std::uint8_t c = f32_to_e2m1(clamp(y, -kFp4Max, kFp4Max));
      out[i / 2] |= static_cast<std::byte>((i & 1) ? c << 4 : c);
    }
  }
}

}  // namespace

std::span<const KvFormatTraits> kv_format_table() { return kTraits; }

const KvFormatTraits& kv_format_traits(KvFormat format) {
  const auto i = static_cast<std::size_t>(format);
  KVQ_CHECK(i < kTraits.size(), "bad KvFormat {}", i);
  return kTraits[i];
}

std::optional<KvFormat> parse_kv_format(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.starts_with("torch.")) lower.erase(0, 6);
  for (const auto& t : kTraits)
    if (t.name == lower) return t.format;
  for (const auto& a : kAliases)
    if (a.name == lower) return a.format;
  return std::nullopt;
}

std::size_t kv_row_bytes(KvFormat format, std::int64_t head_dim) {
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(head_dim, 0));
  switch (format) {
    case KvFormat::kINT4:
      return (n + 1) / 2;
    case KvFormat::kNVFP4:
      return (n + 1) / 2 + (n + kNvfp4Group - 1) / kNvfp4Group;
    default:
      return n * static_cast<std::size_t>(kv_format_traits(format).block_bytes);
  }
}

double kv_bytes_per_value(KvFormat format) {
  const auto& t = kv_format_traits(format);
  return static_cast<double>(t.block_bytes) / t.block_values;
}

void quantize_row(KvFormat format, const float* x, std::int64_t n, float scale, float zero_point,
                  float global_scale, std::byte* out) {
  switch (format) {
    case KvFormat::kF32:
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i] / scale;
        std::memcpy(out + 4 * i, &v, 4);
      }
      return;
    case KvFormat::kBF16:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t b = f32_to_bf16(x[i] / scale);
        std::memcpy(out + 2 * i, &b, 2);
      }
      return;
    case KvFormat::kF16:
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint16_t b = f32_to_fp16(x[i] / scale);
        std::memcpy(out + 2 * i, &b, 2);
      }
      return;
    case KvFormat::kFP8E4M3:
      for (std::int64_t i = 0; i < n; ++i) {
        float y = x[i] / scale;
        y += zero_point;
        out[i] = static_cast<std::byte>(f32_to_e4m3(clamp(y, -kFp8Max, kFp8Max)));
      }
      return;
    case KvFormat::kINT8:
      for (std::int64_t i = 0; i < n; ++i) {
        float y = x[i] / scale;
        y += zero_point;
        out[i] = static_cast<std::byte>(static_cast<std::int8_t>(round_int(y, kInt8Min, kInt8Max)));
      }
      return;
    case KvFormat::kINT4:
      std::memset(out, 0x88, kv_row_bytes(format, n));  // an odd tail pads q = 0
      for (std::int64_t i = 0; i < n; ++i) {
        float y = x[i] / scale;
        y += zero_point;
        const auto c = static_cast<unsigned>(round_int(y, kInt4Min, kInt4Max) + 8);
        std::byte& b = out[i / 2];
        b = (i & 1) ? ((b & std::byte{0x0f}) | static_cast<std::byte>(c << 4))
                    : ((b & std::byte{0xf0}) | static_cast<std::byte>(c));
      }
      return;
    case KvFormat::kNVFP4:
      quantize_nvfp4(x, n, global_scale, out);
      return;
  }
}

namespace ref {

void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out) {
  if (format == KvFormat::kNVFP4) {
    for (std::int64_t i = 0; i < n; ++i)
      out[i] =
          e2m1_to_f32(detail::nibble(in, i)) * (detail::nvfp4_block_scale(in, n, i) / global_scale);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) out[i] = decode_value(format, in, n, i, zero_point) * scale;
}

float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) sum += q[i] * decode_value(format, row, n, i, zero_point);
  return sum;
}

void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc) {
  for (std::int64_t i = 0; i < n; ++i)
    acc[i] = std::fma(w, decode_value(format, row, n, i, zero_point), acc[i]);
}

void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld) {
  const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(codec.format, codec.n));
  std::vector<float> x(static_cast<std::size_t>(codec.n));
  for (std::int64_t j = 0; j < nt; ++j) {
    ref::dequantize_row(codec.format, rows + j * row_bytes, codec.n, codec.scale, codec.zero_point,
                        codec.global_scale, x.data());
    for (std::int64_t i = 0; i < nq; ++i) {
      float sum = 0.0f;
      for (std::int64_t c = 0; c < codec.n; ++c) sum += q[i * codec.n + c] * x[c];
      scores[i * ld + j] = sum;
    }
  }
}

void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc) {
  const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(codec.format, codec.n));
  std::vector<float> x(static_cast<std::size_t>(codec.n));
  for (std::int64_t j = 0; j < nt; ++j) {
    ref::dequantize_row(codec.format, rows + j * row_bytes, codec.n, codec.scale, codec.zero_point,
                        codec.global_scale, x.data());
    for (std::int64_t i = 0; i < nq; ++i)
      for (std::int64_t c = 0; c < codec.n; ++c)
        acc[i * codec.n + c] = std::fma(p[i * ld + j], x[c], acc[i * codec.n + c]);
  }
}

}  // namespace ref

namespace {

enum class Isa { kScalar, kAvx2, kAvx512 };

Isa detect_isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::kAvx2;
#endif
  return Isa::kScalar;
}

Isa isa() {
  static const Isa value = detect_isa();
  return value;
}

}  // namespace

std::string_view kv_format_isa() {
  switch (isa()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out) {
  std::int64_t done = 0;
#if defined(__x86_64__)
  if (isa() == Isa::kAvx512)
    done = detail::avx512::dequantize_row(format, in, n, scale, zero_point, global_scale, out);
  else if (isa() == Isa::kAvx2)
    done = detail::avx2::dequantize_row(format, in, n, scale, zero_point, global_scale, out);
#endif
  if (done == n) return;
  if (format == KvFormat::kNVFP4) {
    for (std::int64_t i = done; i < n; ++i)
      out[i] =
          e2m1_to_f32(detail::nibble(in, i)) * (detail::nvfp4_block_scale(in, n, i) / global_scale);
    return;
  }
  for (std::int64_t i = done; i < n; ++i)
    out[i] = decode_value(format, in, n, i, zero_point) * scale;
}

float dot_row(KvFormat format, const float* q, const std::byte* row, std::int64_t n,
              float zero_point) {
  std::int64_t done = 0;
  float sum = 0.0f;
#if defined(__x86_64__)
  if (isa() == Isa::kAvx512)
    done = detail::avx512::dot_row(format, q, row, n, zero_point, &sum);
  else if (isa() == Isa::kAvx2)
    done = detail::avx2::dot_row(format, q, row, n, zero_point, &sum);
#endif
  for (std::int64_t i = done; i < n; ++i) sum += q[i] * decode_value(format, row, n, i, zero_point);
  return sum;
}

void axpy_row(KvFormat format, float w, const std::byte* row, std::int64_t n, float zero_point,
              float* acc) {
  std::int64_t done = 0;
#if defined(__x86_64__)
  if (isa() == Isa::kAvx512)
    done = detail::avx512::axpy_row(format, w, row, n, zero_point, acc);
  else if (isa() == Isa::kAvx2)
    done = detail::avx2::axpy_row(format, w, row, n, zero_point, acc);
#endif
  for (std::int64_t i = done; i < n; ++i)
    acc[i] = std::fma(w, decode_value(format, row, n, i, zero_point), acc[i]);
}

void dot_rows(const RowCodec& codec, const float* q, std::int64_t nq, const std::byte* rows,
              std::int64_t nt, float* scores, std::int64_t ld) {
  std::int64_t done = 0;
#if defined(__x86_64__)
  if (isa() == Isa::kAvx512)
    done = detail::avx512::dot_rows(codec, q, nq, rows, nt, scores, ld);
  else if (isa() == Isa::kAvx2)
    done = detail::avx2::dot_rows(codec, q, nq, rows, nt, scores, ld);
#endif
  if (done == codec.n) return;
  // The tail (or everything, without SIMD): the same order for every format.
  const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(codec.format, codec.n));
  for (std::int64_t j = 0; j < nt; ++j) {
    const std::byte* row = rows + j * row_bytes;
    for (std::int64_t i = 0; i < nq; ++i) {
      float sum = done == 0 ? 0.0f : scores[i * ld + j];
      for (std::int64_t c = done; c < codec.n; ++c)
        sum += q[i * codec.n + c] * detail::dequant_value(codec, row, c);
      scores[i * ld + j] = sum;
    }
  }
}

void axpy_rows(const RowCodec& codec, const float* p, std::int64_t nq, std::int64_t ld,
               const std::byte* rows, std::int64_t nt, float* acc) {
  std::int64_t done = 0;
#if defined(__x86_64__)
  if (isa() == Isa::kAvx512)
    done = detail::avx512::axpy_rows(codec, p, nq, ld, rows, nt, acc);
  else if (isa() == Isa::kAvx2)
    done = detail::avx2::axpy_rows(codec, p, nq, ld, rows, nt, acc);
#endif
  if (done == codec.n) return;
  const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(codec.format, codec.n));
  for (std::int64_t j = 0; j < nt; ++j) {
    const std::byte* row = rows + j * row_bytes;
    for (std::int64_t c = done; c < codec.n; ++c) {
      const float x = detail::dequant_value(codec, row, c);
      for (std::int64_t i = 0; i < nq; ++i)
        acc[i * codec.n + c] = std::fma(p[i * ld + j], x, acc[i * codec.n + c]);
    }
  }
}

}  // namespace kvq::quant
