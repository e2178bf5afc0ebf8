#include "kvq/core/dtype.h"

#include <array>
#include <cstring>

namespace kvq {
namespace {

struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
  std::string_view torch_name;
  bool is_float;
};

constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {DType::kF32, 4, "F32", "float32", true},
    {DType::kF16, 2, "F16", "float16", true},
    {DType::kBF16, 2, "BF16", "bfloat16", true},
    {DType::kF64, 8, "F64", "float64", true},
    {DType::kF8E4M3, 1, "F8_E4M3", "float8_e4m3fn", true},
    {DType::kF8E5M2, 1, "F8_E5M2", "float8_e5m2", true},
    {DType::kI8, 1, "I8", "int8", false},
    {DType::kU8, 1, "U8", "uint8", false},
    {DType::kI16, 2, "I16", "int16", false},
    {DType::kI32, 4, "I32", "int32", false},
    {DType::kI64, 8, "I64", "int64", false},
    {DType::kBool, 1, "BOOL", "bool", false},
}};

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<std::size_t>(dtype)]; }

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_torch_name(DType dtype) { return info(dtype).torch_name; }
bool dtype_is_float(DType dtype) { return info(dtype).is_float; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const auto& entry : kDTypes) {
    if (entry.torch_name == name) return entry.dtype;
  }
  if (name == "float") return DType::kF32;
  if (name == "half") return DType::kF16;
  return std::nullopt;
}

float fp16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t f32_to_fp16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs_bits >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (abs_bits < 0x38800000u) {  // below the smallest normal (2^-14): subnormal or zero
    // Adding 0.5 (2^-1) shifts the value so that the fp32 adder rounds to the fp16 subnormal
    // grid (step 2^-24) with round-to-nearest-even.
    const float shifted = std::bit_cast<float>(abs_bits) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3f000000u));
  }
  std::uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);  // round to nearest even
  rounded -= (127u - 15u) << 23;
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

}  // namespace kvq
