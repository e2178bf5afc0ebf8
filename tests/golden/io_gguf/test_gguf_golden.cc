// GGUF reader and dequantization against gguf-py (tools/reference/make_gguf_goldens.py): the
// metadata gguf.GGUFReader sees, and the fp32 values gguf.quants.dequantize gives, for a file
// written by gguf.GGUFWriter. Dequantization must be bit-exact: both sides do the same fp32
// operations in the same order.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "kvq/io/gguf.h"
#include "kvq/io/gguf_dequant.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

const std::filesystem::path kDir = test::test_data_dir() / "io_gguf";

std::string type_name_upper(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
      return "UINT8";
    case GgufValueType::kI8:
      return "INT8";
    case GgufValueType::kU16:
      return "UINT16";
    case GgufValueType::kI16:
      return "INT16";
    case GgufValueType::kU32:
      return "UINT32";
    case GgufValueType::kI32:
      return "INT32";
    case GgufValueType::kF32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kU64:
      return "UINT64";
    case GgufValueType::kI64:
      return "INT64";
    case GgufValueType::kF64:
      return "FLOAT64";
  }
  return "?";
}

// gguf-py's field.types: the value type, then element types down nested arrays.
nlohmann::json types_of(const GgufValue& v) {
  nlohmann::json out = nlohmann::json::array({type_name_upper(v.type)});
  const GgufValue* cur = &v;
  while (cur->type == GgufValueType::kArray) {
    out.push_back(type_name_upper(cur->array_type));
    if (cur->array.empty()) break;
    cur = &cur->array[0];
  }
  return out;
}

void expect_value(const GgufValue& v, const nlohmann::json& expected, const std::string& key) {
  switch (v.type) {
    case GgufValueType::kU8:
    case GgufValueType::kU16:
    case GgufValueType::kU32:
    case GgufValueType::kU64:
      EXPECT_EQ(v.u64, expected.get<std::uint64_t>()) << key;
      break;
    case GgufValueType::kI8:
    case GgufValueType::kI16:
    case GgufValueType::kI32:
    case GgufValueType::kI64:
      EXPECT_EQ(v.i64, expected.get<std::int64_t>()) << key;
      break;
    case GgufValueType::kF32:
    case GgufValueType::kF64:
      EXPECT_EQ(v.f64, expected.get<double>()) << key;
      break;
    case GgufValueType::kBool:
      EXPECT_EQ(v.boolean, expected.get<bool>()) << key;
      break;
    case GgufValueType::kString:
      EXPECT_EQ(v.str, expected.get<std::string>()) << key;
      break;
    case GgufValueType::kArray:
      ASSERT_TRUE(expected.is_array()) << key;
      ASSERT_EQ(v.array.size(), expected.size()) << key;
      for (std::size_t i = 0; i < v.array.size(); ++i) expect_value(v.array[i], expected[i], key);
      break;
  }
}

TEST(GgufGolden, MetadataAndTensorInfosMatchGgufPy) {
  const GgufFile f = GgufFile::open(kDir / "tiny.gguf");
  const auto expected = read_json_file(kDir / "metadata_expected.json");
  EXPECT_EQ(f.version(), expected["gguf_version"].get<std::uint32_t>());
  const auto& meta = expected["metadata"];
  EXPECT_EQ(f.metadata().size(), meta.size());
  for (const auto& [key, want] : meta.items()) {
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(types_of(*v), want["type"]) << key;
    expect_value(*v, want["value"], key);
  }
  const auto& tensors = expected["tensors"];
  EXPECT_EQ(f.tensors().size(), tensors.size());
  for (const auto& [name, want] : tensors.items()) {
    const auto& info = f.tensor_info(name);
    EXPECT_EQ(ggml_type_name(info.type), want["type"].get<std::string>()) << name;
    EXPECT_EQ(nlohmann::json(info.ne), want["ne"]) << name;
    EXPECT_EQ(info.offset, want["offset"].get<std::uint64_t>()) << name;
    EXPECT_EQ(info.nbytes, want["nbytes"].get<std::uint64_t>()) << name;
  }
}

TEST(GgufGolden, DequantizationIsBitExactWithGgufPy) {
  const GgufFile f = GgufFile::open(kDir / "tiny.gguf");
  const auto expected = SafetensorsFile::open(kDir / "expected.safetensors");
  ASSERT_EQ(expected.tensors().size(), f.tensors().size());
  for (const auto& info : f.tensors()) {
    const Tensor want = expected.tensor(info.name);
    const Tensor got = dequantize_tensor(f, info);
    ASSERT_EQ(got.shape(), want.shape()) << info.name;
    const float* g = got.f32();
    const float* w = want.f32();
    std::int64_t mismatches = 0;
    double max_diff = 0;
    for (std::int64_t i = 0; i < got.numel(); ++i) {
      if (std::bit_cast<std::uint32_t>(g[i]) != std::bit_cast<std::uint32_t>(w[i])) {
        ++mismatches;
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(g[i]) - w[i]));
      }
    }
    std::printf("%-14s %-5s %6lld values, %lld bit mismatches, max |diff| %g\n", info.name.c_str(),
                std::string(ggml_type_name(info.type)).c_str(), static_cast<long long>(got.numel()),
                static_cast<long long>(mismatches), max_diff);
    EXPECT_EQ(mismatches, 0) << info.name;
  }
}

TEST(GgufGolden, DequantizeRowMatchesTensorPath) {
  const GgufFile f = GgufFile::open(kDir / "tiny.gguf");
  const auto& info = f.tensor_info("bits.Q6_K");
  const Tensor whole = dequantize_tensor(f, info);
  std::vector<float> row(512);
  const auto bytes = f.tensor_bytes(info);
  dequantize_row(info.type, bytes.data() + 210 * 2, row.data(), 512);  // row 1 = blocks 2, 3
  EXPECT_EQ(std::memcmp(row.data(), whole.f32() + 512, 512 * sizeof(float)), 0);
  EXPECT_THROW(dequantize_row(info.type, bytes.data(), row.data(), 100), InvalidArgument);
}

}  // namespace
}  // namespace kvq::io
