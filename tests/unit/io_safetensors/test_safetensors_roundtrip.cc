// Writer → reader round trips: every dtype, 0-dim and empty tensors, metadata, sharded models.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <random>

#include "io_test_util.h"
#include "kvq/io/safetensors.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

using kvq::test::TempDir;

// A tensor of `dtype` filled with pseudo-random bytes (every bit pattern is a valid test value:
// the format stores bytes, it never interprets them).
Tensor random_tensor(DType dtype, Shape shape, std::uint32_t seed) {
  Tensor t(dtype, std::move(shape));
  std::mt19937 rng(seed);
  auto* p = static_cast<std::uint8_t*>(t.mutable_data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(rng());
  if (dtype == DType::kBool) {
    for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] &= 1;
  }
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
}

constexpr DType kAllDTypes[] = {DType::kF32,    DType::kF16,    DType::kBF16, DType::kF64,
                                DType::kF8E4M3, DType::kF8E5M2, DType::kI8,   DType::kU8,
                                DType::kI16,    DType::kI32,    DType::kI64,  DType::kBool};

TEST(SafetensorsRoundTrip, EveryDTypeAndShape) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  writer.set_metadata("quote\"and\\slash", "ünïcödé \n newline");
  std::vector<std::pair<std::string, Tensor>> expected;
  std::uint32_t seed = 1;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{3, 5}, Shape{}, Shape{0, 4}, Shape{7}, Shape{2, 1, 3}}) {
      std::string name = fmt::format("t.{}.{}", dtype_name(dtype), shape_str(shape));
      Tensor t = random_tensor(dtype, shape, seed++);
      writer.add(name, t);
      expected.emplace_back(std::move(name), t);
    }
  }
  const auto path = dir / "model.safetensors";
  writer.write(path);

  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.metadata().size(), 2u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("quote\"and\\slash"), "ünïcödé \n newline");
  ASSERT_EQ(file.tensors().size(), expected.size());
  // Header order is insertion order; the data section starts 8-byte aligned.
  EXPECT_EQ(file.data_offset() % 8, 0u);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& [name, t] = expected[i];
    EXPECT_EQ(file.tensors()[i].name, name);
    const Tensor back = file.tensor(name);
    EXPECT_TRUE(same_bytes(back, t)) << name;
    EXPECT_EQ(back.numel(), shape_numel(t.shape())) << name;
  }
  // No temporary files left next to the output.
  EXPECT_EQ(kvq::test::list_dir(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(SafetensorsRoundTrip, EmptyFileHasNoTensors) {
  TempDir dir;
  SafetensorsWriter().write(dir / "empty.safetensors");
  const auto file = SafetensorsFile::open(dir / "empty.safetensors");
  EXPECT_TRUE(file.tensors().empty());
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_FALSE(file.contains("x"));
}

TEST(SafetensorsRoundTrip, ViewsOutliveTheFileObject) {
  TempDir dir;
  SafetensorsWriter writer;
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f};
  writer.add("pad", Tensor(DType::kU8, {4}));
  writer.add("w", Tensor::from_f32({2, 2}, values));
  writer.write(dir / "a.safetensors");
  Tensor view;
  {
    const auto file = SafetensorsFile::open(dir / "a.safetensors");
    view = file.tensor("w");
    // Zero-copy: the view sits at data_offset + begin from a page-aligned mapping base (a copy
    // would be a fresh 64-byte aligned allocation).
    const auto base =
        reinterpret_cast<std::uintptr_t>(view.data()) - file.data_offset() - file.info("w").begin;
    EXPECT_EQ(base % 4096, 0u);
  }
  // The SafetensorsFile is gone; the tensor keeps the mapping alive.
  EXPECT_EQ(view.to_f32_vector(), values);
}

TEST(SafetensorsRoundTrip, WriterRejectsDuplicatesAndBadNames) {
  SafetensorsWriter writer;
  writer.add("a", Tensor(DType::kF32, {1}));
  EXPECT_THROW_MSG(writer.add("a", Tensor(DType::kF32, {1})), InvalidArgument, "'a'", "twice");
  EXPECT_THROW(writer.add("", Tensor(DType::kF32, {1})), InvalidArgument);
  EXPECT_THROW(writer.add("__metadata__", Tensor(DType::kF32, {1})), InvalidArgument);
}

TEST(SafetensorsRoundTrip, MissingTensorNamesFileAndTensor) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("a", Tensor(DType::kF32, {1}));
  writer.write(dir / "m.safetensors");
  const auto file = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_THROW_MSG(file.info("nope"), FormatError, "m.safetensors", "'nope'");
  EXPECT_THROW_MSG(file.tensor("nope"), FormatError, "m.safetensors", "'nope'");
}

// Writes a sharded model: two shards and an index, as transformers' save_pretrained does.
void write_sharded(const std::filesystem::path& dir,
                   const std::vector<std::pair<std::string, Tensor>>& a,
                   const std::vector<std::pair<std::string, Tensor>>& b) {
  nlohmann::json weight_map = nlohmann::json::object();
  SafetensorsWriter wa, wb;
  for (const auto& [n, t] : a) {
    wa.add(n, t);
    weight_map[n] = "model-00001-of-00002.safetensors";
  }
  for (const auto& [n, t] : b) {
    wb.add(n, t);
    weight_map[n] = "model-00002-of-00002.safetensors";
  }
  wa.write(dir / "model-00001-of-00002.safetensors");
  wb.write(dir / "model-00002-of-00002.safetensors");
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  kvq::test::write_bytes(dir / "model.safetensors.index.json", index.dump(2));
}

TEST(SafetensorsModelTest, ShardedRoundTrip) {
  TempDir dir;
  const std::vector<std::pair<std::string, Tensor>> a = {
      {"model.embed_tokens.weight", random_tensor(DType::kBF16, {8, 4}, 1)},
      {"model.layers.0.self_attn.q_proj.weight", random_tensor(DType::kF32, {4, 4}, 2)}};
  const std::vector<std::pair<std::string, Tensor>> b = {
      {"model.norm.weight", random_tensor(DType::kF16, {4}, 3)},
      {"lm_head.weight", random_tensor(DType::kF8E4M3, {8, 4}, 4)}};
  write_sharded(dir.path(), a, b);

  const auto model = SafetensorsModel::open(dir.path());
  EXPECT_EQ(model.names(), (std::vector<std::string>{"lm_head.weight", "model.embed_tokens.weight",
                                                     "model.layers.0.self_attn.q_proj.weight",
                                                     "model.norm.weight"}));
  for (const auto& [n, t] : a) {
    EXPECT_TRUE(same_bytes(model.tensor(n), t)) << n;
    EXPECT_EQ(model.file_of(n), "model-00001-of-00002.safetensors");
  }
  for (const auto& [n, t] : b) {
    EXPECT_TRUE(same_bytes(model.tensor(n), t)) << n;
    EXPECT_EQ(model.file_of(n), "model-00002-of-00002.safetensors");
  }
  EXPECT_EQ(model.info("model.norm.weight").dtype, DType::kF16);
  EXPECT_FALSE(model.contains("missing"));
  EXPECT_THROW_MSG(model.tensor("missing"), FormatError, "'missing'");
}

TEST(SafetensorsModelTest, SingleFileDirectoryAndPath) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("b", random_tensor(DType::kI32, {3}, 9));
  writer.add("a", random_tensor(DType::kU8, {2}, 8));
  writer.write(dir / "model.safetensors");
  for (const auto& source : {dir.path(), dir / "model.safetensors"}) {
    const auto model = SafetensorsModel::open(source);
    EXPECT_EQ(model.names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(model.file_of("a"), "model.safetensors");
    EXPECT_EQ(model.tensor("b").nbytes(), 12u);
  }
}

TEST(SafetensorsModelTest, EmptyDirectoryIsAnIoError) {
  TempDir dir;
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), IoError, dir.path().string(),
                   "model.safetensors");
  EXPECT_THROW(SafetensorsModel::open(dir / "nope"), IoError);
}

TEST(SafetensorsModelTest, MissingShardNamesIndexAndShard) {
  TempDir dir;
  write_sharded(dir.path(), {{"x", Tensor(DType::kF32, {1})}}, {{"y", Tensor(DType::kF32, {1})}});
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), IoError, "model.safetensors.index.json",
                   "model-00002-of-00002.safetensors", "'y'");
}

TEST(SafetensorsModelTest, TensorMissingFromItsShard) {
  TempDir dir;
  write_sharded(dir.path(), {{"x", Tensor(DType::kF32, {1})}}, {{"y", Tensor(DType::kF32, {1})}});
  // Point "z" at shard 1, which does not hold it.
  auto index = nlohmann::json::parse(kvq::test::read_bytes(dir / "model.safetensors.index.json"));
  index["weight_map"]["z"] = "model-00001-of-00002.safetensors";
  kvq::test::write_bytes(dir / "model.safetensors.index.json", index.dump());
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), FormatError, "model.safetensors.index.json",
                   "'z'", "model-00001-of-00002.safetensors");
}

TEST(SafetensorsModelTest, IndexWithoutWeightMapOrWithEscapingPath) {
  TempDir dir;
  kvq::test::write_bytes(dir / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), FormatError, "weight_map");
  kvq::test::write_bytes(dir / "model.safetensors.index.json",
                         R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), FormatError, "../elsewhere.safetensors");
  kvq::test::write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), FormatError, "'a'");
  kvq::test::write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": )");
  EXPECT_THROW_MSG(SafetensorsModel::open(dir.path()), FormatError, "invalid JSON");
}

}  // namespace
}  // namespace kvq::io
