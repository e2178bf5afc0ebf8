// The GGML tensor types and GGUF metadata value types, with their on-disk numbers and sizes.
//
// Numbers and block sizes follow ggml.h / gguf-py constants.py (GGML_QUANT_SIZES). A type being
// listed here means a GGUF file holding it can be parsed and inspected; which types can be
// dequantized is in gguf_dequant.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvq::io {

enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;     // "Q4_K", as gguf-py names it
  std::uint32_t block_size;  // elements per block (1 for plain types)
  std::uint32_t type_size;   // bytes per block
};

// The traits of the type numbered `number`, or nullopt when ggml has no such type.
std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t number);
// Traits of a known type (aborts on a value outside the enum: an internal bug).
const GgmlTypeTraits& ggml_traits(GgmlType type);
std::string_view ggml_type_name(GgmlType type);

enum class GgufValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// "u32", "string", "array", ...; "unknown" for a number outside the enum.
std::string_view gguf_value_type_name(GgufValueType type);
bool gguf_value_type_is_valid(std::uint32_t number);

}  // namespace kvq::io
