// Element types and the scalar codecs between them and fp32.
//
// Names follow safetensors ("F32", "BF16", "F8_E4M3", ...). The 8- and 4-bit float codecs used
// by quantization (E4M3, E5M2, E2M1) live in kvq/core/float8.h.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvq {

enum class DType : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
std::size_t dtype_size(DType dtype);
// The safetensors name: "F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2", "I8", "U8", "I16",
// "I32", "I64", "BOOL".
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
// The torch name used in config.json ("float32", "bfloat16", "float16", ...), if any.
std::string_view dtype_torch_name(DType dtype);
std::optional<DType> dtype_from_torch_name(std::string_view name);
bool dtype_is_float(DType dtype);

// bfloat16: the top 16 bits of an fp32. Conversion from fp32 rounds to nearest even (as torch
// does); NaN stays a quiet NaN.
inline float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}
inline std::uint16_t f32_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}
// Rounds an fp32 to the nearest bf16 value, kept in fp32 (emulates one bf16 arithmetic step).
inline float round_to_bf16(float value) { return bf16_to_f32(f32_to_bf16(value)); }

// IEEE binary16. Conversion from fp32 rounds to nearest even, overflows to inf.
float fp16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_fp16(float value);
inline float round_to_fp16(float value) { return fp16_to_f32(f32_to_fp16(value)); }

}  // namespace kvq
