// Interoperability with the reference `safetensors` package (tools/reference/
// make_safetensors_goldens.py): our reader returns exactly torch's bytes for every dtype, and
// our writer reproduces the reference file byte for byte when given the same tensors in the
// same order (same header JSON layout, same space padding).
#include <gtest/gtest.h>

#include <cstring>

#include "io_test_util.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

std::string to_hex(const Tensor& t) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const std::uint8_t*>(t.data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  return out;
}

const std::filesystem::path kReference =
    kvq::test::test_data_dir() / "io" / "reference.safetensors";

TEST(SafetensorsReference, ReaderMatchesTorchBytes) {
  const auto expected = read_json_file(kvq::test::test_data_dir() / "io" / "reference.json");
  const auto file = SafetensorsFile::open(kReference);
  EXPECT_EQ(file.metadata().at("generator"), expected["generator"].get<std::string>());
  ASSERT_EQ(file.tensors().size(), expected["tensors"].size());
  for (const auto& [name, e] : expected["tensors"].items()) {
    SCOPED_TRACE(name);
    const Tensor t = file.tensor(name);
    EXPECT_EQ(dtype_torch_name(t.dtype()), e["dtype"].get<std::string>());
    EXPECT_EQ(t.shape(), e["shape"].get<Shape>());
    EXPECT_EQ(to_hex(t), e["hex"].get<std::string>());
  }
  // Spot-check decoded values that the script set explicitly.
  EXPECT_EQ(file.tensor("scalar").to_f32_vector(), std::vector<float>{2.5f});
  EXPECT_EQ(file.tensor("model.layers.0.self_attn.k_scale").to_f32_vector(),
            std::vector<float>{0.0125f});
  EXPECT_EQ(file.tensor("i8").to_f32_vector(), (std::vector<float>{-128, -1, 0, 1, 127}));
}

TEST(SafetensorsReference, WriterReproducesReferenceBytes) {
  const auto ref = SafetensorsFile::open(kReference);
  SafetensorsWriter writer;
  for (const auto& [k, v] : ref.metadata()) writer.set_metadata(k, v);
  for (const auto& info : ref.tensors()) writer.add(info.name, ref.tensor(info.name).clone());
  kvq::test::TempDir dir;
  writer.write(dir / "ours.safetensors");
  EXPECT_EQ(kvq::test::read_bytes(dir / "ours.safetensors"), kvq::test::read_bytes(kReference));
}

}  // namespace
}  // namespace kvq::io
