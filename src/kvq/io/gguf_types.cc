#include "kvq/io/gguf_types.h"

#include <array>

#include "kvq/core/error.h"

namespace kvq::io {
namespace {

// Sizes from gguf-py's GGML_QUANT_SIZES (block size, bytes per block).
constexpr std::array kTraits = {
    GgmlTypeTraits{GgmlType::kF32, "F32", 1, 4},
    GgmlTypeTraits{GgmlType::kF16, "F16", 1, 2},
    GgmlTypeTraits{GgmlType::kQ4_0, "Q4_0", 32, 18},
    GgmlTypeTraits{GgmlType::kQ4_1, "Q4_1", 32, 20},
    GgmlTypeTraits{GgmlType::kQ5_0, "Q5_0", 32, 22},
    GgmlTypeTraits{GgmlType::kQ5_1, "Q5_1", 32, 24},
    GgmlTypeTraits{GgmlType::kQ8_0, "Q8_0", 32, 34},
    GgmlTypeTraits{GgmlType::kQ8_1, "Q8_1", 32, 40},
    GgmlTypeTraits{GgmlType::kQ2_K, "Q2_K", 256, 84},
    GgmlTypeTraits{GgmlType::kQ3_K, "Q3_K", 256, 110},
    GgmlTypeTraits{GgmlType::kQ4_K, "Q4_K", 256, 144},
    GgmlTypeTraits{GgmlType::kQ5_K, "Q5_K", 256, 176},
    GgmlTypeTraits{GgmlType::kQ6_K, "Q6_K", 256, 210},
    GgmlTypeTraits{GgmlType::kQ8_K, "Q8_K", 256, 292},
    GgmlTypeTraits{GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66},
    GgmlTypeTraits{GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    GgmlTypeTraits{GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98},
    GgmlTypeTraits{GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    GgmlTypeTraits{GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},
    GgmlTypeTraits{GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    GgmlTypeTraits{GgmlType::kIQ2_S, "IQ2_S", 256, 82},
    GgmlTypeTraits{GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    GgmlTypeTraits{GgmlType::kI8, "I8", 1, 1},
    GgmlTypeTraits{GgmlType::kI16, "I16", 1, 2},
    GgmlTypeTraits{GgmlType::kI32, "I32", 1, 4},
    GgmlTypeTraits{GgmlType::kI64, "I64", 1, 8},
    GgmlTypeTraits{GgmlType::kF64, "F64", 1, 8},
    GgmlTypeTraits{GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    GgmlTypeTraits{GgmlType::kBF16, "BF16", 1, 2},
    GgmlTypeTraits{GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    GgmlTypeTraits{GgmlType::kTQ2_0, "TQ2_0", 256, 66},
    GgmlTypeTraits{GgmlType::kMXFP4, "MXFP4", 32, 17},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t number) {
  for (const auto& t : kTraits) {
    if (static_cast<std::uint32_t>(t.type) == number) return t;
  }
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  for (const auto& t : kTraits) {
    if (t.type == type) return t;
  }
  KVQ_CHECK(false, "GgmlType {} has no traits", static_cast<std::uint32_t>(type));
  return kTraits[0];
}

std::string_view ggml_type_name(GgmlType type) { return ggml_traits(type).name; }

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return "u8";
    case GgufValueType::kI8:
      return "i8";
    case GgufValueType::kU16:
      return "u16";
    case GgufValueType::kI16:
      return "i16";
    case GgufValueType::kU32:
      return "u32";
    case GgufValueType::kI32:
      return "i32";
    case GgufValueType::kF32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "u64";
    case GgufValueType::kI64:
      return "i64";
    case GgufValueType::kF64:
      return "f64";
  }
  return "unknown";
}

bool gguf_value_type_is_valid(std::uint32_t number) { return number <= 12; }

}  // namespace kvq::io
