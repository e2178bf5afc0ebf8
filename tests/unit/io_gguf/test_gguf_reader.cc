#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gguf_builder.h"
#include "kvq/core/error.h"
#include "kvq/io/gguf.h"
#include "kvq/io/gguf_dequant.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

using test::GgufBuilder;

enum : std::uint32_t {
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kStr,
  kArr,
  kU64,
  kI64,
  kF64
};
constexpr std::uint32_t kTypeF32 = 0, kTypeQ4_1 = 3;

GgufFile parse(const GgufBuilder& b) { return GgufFile::parse(b.bytes, "mem.gguf", nullptr); }

// Expects FormatError whose message contains the source name and every fragment.
void expect_format_error(const GgufBuilder& b, std::vector<std::string> fragments) {
  try {
    parse(b);
    ADD_FAILURE() << "parse succeeded; expected an error mentioning " << fragments[0];
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mem.gguf"), std::string::npos) << msg;
    for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
}

// A file with one metadata value of every type, and two tensors (F32 [2, 3], Q4_1 [1, 32]).
GgufBuilder every_type_file(std::uint32_t version, std::uint32_t alignment = 0) {
  GgufBuilder b;
  const std::uint64_t n_kv = 17 + (alignment ? 1 : 0);
  b.header(version, 2, n_kv);
  b.key("k.u8", kU8).put<std::uint8_t>(250);
  b.key("k.i8", kI8).put<std::int8_t>(-120);
  b.key("k.u16", kU16).put<std::uint16_t>(65000);
  b.key("k.i16", kI16).put<std::int16_t>(-32000);
  b.key("k.u32", kU32).put<std::uint32_t>(4000000000u);
  b.key("k.i32", kI32).put<std::int32_t>(-2000000000);
  b.key("k.f32", kF32).put<float>(1e-5f);
  b.key("k.bool", kBool).put<std::uint8_t>(1);
  b.key("k.str", kStr).str("héllo");
  b.key("k.u64", kU64).put<std::uint64_t>(18000000000000000000ull);
  b.key("k.i64", kI64).put<std::int64_t>(-9000000000000000000ll);
  b.key("k.f64", kF64).put<double>(3.5);
  b.key("k.arr_i32", kArr).put<std::uint32_t>(kI32).put<std::uint64_t>(3);
  b.put<std::int32_t>(1).put<std::int32_t>(-2).put<std::int32_t>(3);
  b.key("k.arr_str", kArr).put<std::uint32_t>(kStr).put<std::uint64_t>(3);
  b.str("a").str("").str("Ġthe");
  b.key("k.arr_f32", kArr).put<std::uint32_t>(kF32).put<std::uint64_t>(2);
  b.put<float>(0.5f).put<float>(-1.25f);
  b.key("k.arr_nested", kArr).put<std::uint32_t>(kArr).put<std::uint64_t>(2);
  b.put<std::uint32_t>(kU8).put<std::uint64_t>(2).put<std::uint8_t>(7).put<std::uint8_t>(8);
  b.put<std::uint32_t>(kU8).put<std::uint64_t>(0);
  b.key("k.arr_empty", kArr).put<std::uint32_t>(kBool).put<std::uint64_t>(0);
  if (alignment) b.key("general.alignment", kU32).put<std::uint32_t>(alignment);
  const std::uint64_t align = alignment ? alignment : 32;
  b.tensor("a.weight", {3, 2}, kTypeF32, 0);
  b.tensor("b.weight", {32, 1}, kTypeQ4_1, align);  // F32 [2, 3] takes 24 bytes: next slot
  b.pad_to(align);
  for (int i = 0; i < 6; ++i) b.put<float>(static_cast<float>(i) + 0.5f);
  b.zeros(align - 24);
  // Q4_1 block: d = 1.0 (fp16 0x3c00), m = -1.0 (0xbc00), nibbles j and j + 16 = j % 16.
  b.put<std::uint16_t>(0x3c00).put<std::uint16_t>(0xbc00);
  for (int j = 0; j < 16; ++j) b.put<std::uint8_t>(static_cast<std::uint8_t>(j | (j << 4)));
  return b;
}

void check_every_type_file(const GgufFile& f) {
  EXPECT_EQ(f.get_u32("k.u8"), 250u);
  EXPECT_EQ(f.get_i64("k.i8"), -120);
  EXPECT_EQ(f.get_u32("k.u16"), 65000u);
  EXPECT_EQ(f.get_i64("k.i16"), -32000);
  EXPECT_EQ(f.get_u32("k.u32"), 4000000000u);
  EXPECT_EQ(f.get_i64("k.i32"), -2000000000);
  EXPECT_EQ(f.get_f32("k.f32"), 1e-5f);
  EXPECT_TRUE(f.get_bool("k.bool"));
  EXPECT_EQ(f.get_string("k.str"), "héllo");
  EXPECT_EQ(f.get_u64("k.u64"), 18000000000000000000ull);
  EXPECT_EQ(f.get_i64("k.i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_f64("k.f64"), 3.5);
  EXPECT_EQ(f.get_int_array("k.arr_i32"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_string_array("k.arr_str"), (std::vector<std::string>{"a", "", "Ġthe"}));
  EXPECT_EQ(f.get_float_array("k.arr_f32"), (std::vector<double>{0.5, -1.25}));
  const GgufValue& nested = f.get("k.arr_nested");
  ASSERT_EQ(nested.array_type, GgufValueType::kArray);
  ASSERT_EQ(nested.array.size(), 2u);
  EXPECT_EQ(nested.array[0].array_type, GgufValueType::kU8);
  ASSERT_EQ(nested.array[0].array.size(), 2u);
  EXPECT_EQ(nested.array[0].array[1].u64, 8u);
  EXPECT_TRUE(nested.array[1].array.empty());
  EXPECT_TRUE(f.get("k.arr_empty").array.empty());
  EXPECT_EQ(f.metadata().front().key, "k.u8");  // file order kept

  ASSERT_EQ(f.tensors().size(), 2u);
  const auto& a = f.tensor_info("a.weight");
  EXPECT_EQ(a.shape(), (Shape{2, 3}));  // ne reversed
  EXPECT_EQ(a.nbytes, 24u);
  const Tensor ta = dequantize_tensor(f, a);
  EXPECT_EQ(ta.shape(), (Shape{2, 3}));
  EXPECT_EQ(ta.f32()[5], 5.5f);
  const auto& b = f.tensor_info("b.weight");
  EXPECT_EQ(b.type, GgmlType::kQ4_1);
  EXPECT_EQ(b.nbytes, 20u);
  EXPECT_EQ(b.offset % f.alignment(), 0u);
  const Tensor tb = dequantize_tensor(f, b);
  ASSERT_EQ(tb.shape(), (Shape{1, 32}));
  for (int j = 0; j < 32; ++j) EXPECT_EQ(tb.f32()[j], static_cast<float>(j % 16) - 1.0f) << j;
}

TEST(GgufReader, ReadsEveryValueTypeV3) {
  const auto b = every_type_file(3);
  const GgufFile f = parse(b);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  check_every_type_file(f);
}

TEST(GgufReader, ReadsEveryValueTypeV2) {
  const auto b = every_type_file(2);  // the parsed file views these bytes: keep them alive
  const GgufFile f = parse(b);
  EXPECT_EQ(f.version(), 2u);
  check_every_type_file(f);
}

TEST(GgufReader, HonoursGeneralAlignment) {
  const auto b = every_type_file(3, 256);
  const GgufFile f = parse(b);
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.data_offset() % 256, 0u);
  EXPECT_EQ(f.tensor_info("b.weight").offset, 256u);
  check_every_type_file(f);
}

TEST(GgufReader, OpensFilesAndNamesThemInErrors) {
  test::TempDir dir;
  const auto b = every_type_file(3);
  {
    std::ofstream out(dir / "m.gguf", std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.bytes.data()),
              static_cast<std::streamsize>(b.bytes.size()));
  }
  const GgufFile f = GgufFile::open(dir / "m.gguf");
  check_every_type_file(f);
  try {
    f.get_u32("k.str");
    FAIL();
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("m.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("k.str"), std::string::npos) << msg;
    EXPECT_NE(msg.find("string"), std::string::npos) << msg;
  }
  EXPECT_THROW(GgufFile::open(dir / "missing.gguf"), IoError);
}

TEST(GgufReader, TypedGettersRejectMismatches) {
  const GgufFile f = parse(every_type_file(3));
  EXPECT_THROW(f.get_u32("k.u64"), FormatError);  // does not fit
  EXPECT_THROW(f.get_u64("k.i8"), FormatError);   // negative
  EXPECT_THROW(f.get_i64("k.u64"), FormatError);  // above INT64_MAX
  EXPECT_THROW(f.get_bool("k.u8"), FormatError);
  EXPECT_THROW(f.get_string("k.arr_str"), FormatError);
  EXPECT_THROW(f.get_string_array("k.arr_i32"), FormatError);
  EXPECT_THROW(f.get_f32("k.i32"), FormatError);
  EXPECT_EQ(f.get_f32("k.f64"), 3.5f);  // exactly representable
  EXPECT_FALSE(f.find_u32("nope").has_value());
  EXPECT_EQ(f.find_u32("k.u16"), 65000u);
  try {
    f.get("llama.block_count");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("missing GGUF metadata key 'llama.block_count'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(f.tensor_info("nope"), FormatError);
}

TEST(GgufReader, EveryTruncationIsAFormatError) {
  const auto b = every_type_file(3);
  for (std::size_t n = 0; n < b.bytes.size(); ++n) {
    std::vector<std::uint8_t> prefix(b.bytes.begin(), b.bytes.begin() + static_cast<long>(n));
    EXPECT_THROW(GgufFile::parse(prefix, "mem.gguf", nullptr), FormatError) << n << " bytes";
  }
}

TEST(GgufReaderBadInput, BadMagic) {
  auto b = every_type_file(3);
  b.bytes[0] = 'X';
  expect_format_error(b, {"not a GGUF file"});
}

TEST(GgufReaderBadInput, UnsupportedVersions) {
  expect_format_error(GgufBuilder().header(1, 0, 0), {"unsupported GGUF version 1"});
  expect_format_error(GgufBuilder().header(4, 0, 0), {"unsupported GGUF version 4"});
  expect_format_error(GgufBuilder().header(0x03000000, 0, 0), {"big-endian"});
}

TEST(GgufReaderBadInput, AbsurdStringLength) {
  GgufBuilder b;
  b.header(3, 0, 1).put<std::uint64_t>(1ull << 60).zeros(16);  // key length beyond the file
  expect_format_error(b, {"length", "remain"});
  GgufBuilder v;
  v.header(3, 0, 1).key("k", kStr).put<std::uint64_t>(1000).zeros(10);
  expect_format_error(v, {"string value of 'k'", "length 1000"});
}

TEST(GgufReaderBadInput, AbsurdCounts) {
  expect_format_error(GgufBuilder().header(3, 0, 1ull << 40), {"metadata count"});
  expect_format_error(GgufBuilder().header(3, 1ull << 40, 0), {"tensor count"});
  GgufBuilder b;
  b.header(3, 0, 1).key("k", kArr).put<std::uint32_t>(kU64).put<std::uint64_t>(1ull << 50);
  expect_format_error(b, {"array 'k'"});
}

TEST(GgufReaderBadInput, UnknownValueTypes) {
  GgufBuilder b;
  b.header(3, 0, 1).key("k.bad", 13).put<std::uint32_t>(0);
  expect_format_error(b, {"k.bad", "unknown value type 13"});
  GgufBuilder a;
  a.header(3, 0, 1).key("k.arr", kArr).put<std::uint32_t>(99).put<std::uint64_t>(1);
  expect_format_error(a, {"k.arr", "unknown value type 99"});
}

TEST(GgufReaderBadInput, BadBoolAndDeepNesting) {
  GgufBuilder b;
  b.header(3, 0, 1).key("k.b", kBool).put<std::uint8_t>(2);
  expect_format_error(b, {"k.b", "bool"});
  GgufBuilder n;
  n.header(3, 0, 1).key("k.deep", kArr);
  for (int i = 0; i < 20; ++i) n.put<std::uint32_t>(kArr).put<std::uint64_t>(1);
  n.put<std::uint32_t>(kU8).put<std::uint64_t>(0).zeros(64);
  expect_format_error(n, {"k.deep", "deeper"});
}

TEST(GgufReaderBadInput, DuplicateKeysAndTensors) {
  GgufBuilder b;
  b.header(3, 0, 2).key("k", kU8).put<std::uint8_t>(1).key("k", kU8).put<std::uint8_t>(2);
  expect_format_error(b, {"duplicate metadata key 'k'"});
  GgufBuilder t;
  t.header(3, 2, 0).tensor("w", {8}, kTypeF32, 0).tensor("w", {8}, kTypeF32, 32).pad_to(32);
  t.zeros(64);
  expect_format_error(t, {"duplicate tensor name 'w'"});
}

TEST(GgufReaderBadInput, BadAlignment) {
  GgufBuilder b;
  b.header(3, 0, 1).key("general.alignment", kU32).put<std::uint32_t>(48);
  expect_format_error(b, {"power of two", "48"});
}

TEST(GgufReaderBadInput, UnknownTensorType) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("blk.0.w", {32}, 77, 0).pad_to(32).zeros(64);
  expect_format_error(b, {"blk.0.w", "unknown GGML tensor type 77"});
}

TEST(GgufReaderBadInput, TooManyDims) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("w", {1, 1, 1, 1, 1}, kTypeF32, 0).pad_to(32).zeros(32);
  expect_format_error(b, {"'w'", "5 dimensions"});
}

TEST(GgufReaderBadInput, DimsOverflowOrNegative) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("w", {1ull << 32, 1ull << 32}, kTypeF32, 0).pad_to(32).zeros(32);
  expect_format_error(b, {"'w'", "overflows"});
  GgufBuilder c;
  c.header(3, 1, 0).tensor("w", {1ull << 40, 1ull << 22}, kTypeF32, 0).pad_to(32).zeros(32);
  expect_format_error(c, {"'w'", "overflows"});  // numel fits, numel × 4 bytes does not
  GgufBuilder n;
  n.header(3, 1, 0).tensor("w", {~0ull}, kTypeF32, 0).pad_to(32).zeros(32);
  expect_format_error(n, {"'w'", "negative"});
}

TEST(GgufReaderBadInput, RowNotMultipleOfBlock) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("w", {16, 2}, kTypeQ4_1, 0).pad_to(32).zeros(64);
  expect_format_error(b, {"'w'", "block size 32"});
}

TEST(GgufReaderBadInput, TensorDataOutOfRange) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("w", {16}, kTypeF32, 0).pad_to(32).zeros(63);  // needs 64
  expect_format_error(b, {"'w'", "outside the data section"});
  GgufBuilder far;
  far.header(3, 1, 0).tensor("w", {8}, kTypeF32, 1ull << 62).pad_to(32).zeros(64);
  expect_format_error(far, {"'w'", "outside the data section"});
}

TEST(GgufReaderBadInput, OverlappingTensors) {
  GgufBuilder b;
  b.header(3, 2, 0).tensor("a", {16}, kTypeF32, 0).tensor("b", {16}, kTypeF32, 32);
  b.pad_to(32).zeros(96);
  expect_format_error(b, {"'a'", "'b'", "overlap"});
}

TEST(GgufReaderBadInput, MisalignedTensorOffset) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("w", {4}, kTypeF32, 4).pad_to(32).zeros(64);
  expect_format_error(b, {"'w'", "alignment"});
}

TEST(GgufDequant, RefusesUnsupportedTypesByName) {
  GgufBuilder b;
  b.header(3, 1, 0).tensor("w", {256}, 10 /* Q2_K */, 0).pad_to(32).zeros(96);
  const GgufFile f = parse(b);
  try {
    dequantize_tensor(f, f.tensor_info("w"));
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("Q2_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvq::io
