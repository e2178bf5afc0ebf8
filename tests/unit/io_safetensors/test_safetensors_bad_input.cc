// Corrupt or hostile safetensors files: each is rejected with a FormatError naming the file.
// The rules follow the reference Rust crate (safetensors::tensor::Metadata::validate and
// read_metadata): header length ≤ 100 MB and inside the file, UTF-8 JSON object, known dtype,
// shape × dtype size == end − begin, tensors sorted by offset tile the data section exactly.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

#include "io_test_util.h"
#include "kvq/io/safetensors.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

using kvq::test::safetensors_bytes;
using kvq::test::TempDir;
using kvq::test::write_bytes;

class BadSafetensors : public ::testing::Test {
 protected:
  // Writes `bytes` and expects open() to fail with a FormatError naming the file and `part`.
  void expect_rejected(std::string_view bytes, std::string_view part) {
    const auto path = dir_ / "bad.safetensors";
    write_bytes(path, bytes);
    EXPECT_THROW_MSG(SafetensorsFile::open(path), FormatError, path.string(), part);
  }
  // A valid file with the given header, so each test changes one thing.
  std::string file(std::string_view header, std::string_view data) {
    return safetensors_bytes(header, data);
  }
  TempDir dir_;
};

TEST_F(BadSafetensors, ValidBaselineOpens) {
  const auto path = dir_ / "ok.safetensors";
  write_bytes(path, file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         std::string(8, '\0')));
  EXPECT_EQ(SafetensorsFile::open(path).tensors().size(), 1u);
}

TEST_F(BadSafetensors, ShorterThanEightBytes) {
  expect_rejected("", "shorter than the 8-byte header");
  expect_rejected(std::string(7, '\0'), "shorter than the 8-byte header");
}

TEST_F(BadSafetensors, HeaderLengthPastEndOfFile) {
  expect_rejected(safetensors_bytes("{}", "", 64), "runs past the end");
  expect_rejected(safetensors_bytes("{}", "", 3), "runs past the end");
}

TEST_F(BadSafetensors, AbsurdHeaderLength) {
  expect_rejected(safetensors_bytes("{}", "", 100'000'001), "exceeds");
  expect_rejected(safetensors_bytes("{}", "", ~std::uint64_t{0}), "exceeds");
}

TEST_F(BadSafetensors, InvalidUtf8) {
  expect_rejected(file("{\"\xff\":{}}", ""), "UTF-8");
  // Overlong encoding of '/' and a lone surrogate are invalid too.
  expect_rejected(file("{\"\xc0\xaf\":{}}", ""), "UTF-8");
  expect_rejected(file("{\"\xed\xa0\x80\":{}}", ""), "UTF-8");
}

TEST_F(BadSafetensors, InvalidJson) {
  expect_rejected(file(R"({"a":{"dtype":"F32",)", ""), "header: invalid JSON");
  expect_rejected(file("[1, 2]", ""), "must be a JSON object");
  expect_rejected(file(R"({"a": 3})", ""), "'a'");
}

TEST_F(BadSafetensors, MissingFields) {
  expect_rejected(file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                  "missing 'dtype'");
  expect_rejected(file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", std::string(4, '\0')),
                  "missing 'shape'");
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
                  "missing 'data_offsets'");
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, '\0')),
      "[begin, end]");
}

TEST_F(BadSafetensors, UnknownDType) {
  expect_rejected(
      file(R"({"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0')),
      "unknown dtype 'F4'");
  expect_rejected(
      file(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
      "unknown dtype 'f32'");
}

TEST_F(BadSafetensors, OffsetsPastEndOfData) {
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')),
      "truncated");
}

TEST_F(BadSafetensors, BeginAfterEnd) {
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0')),
      "begin 8 > end 4");
}

TEST_F(BadSafetensors, OverlappingTensors) {
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       std::string(12, '\0')),
                  "overlap");
  // Two tensors sharing the same bytes (an aliasing writer) are rejected too.
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                       std::string(4, '\0')),
                  "overlap");
}

TEST_F(BadSafetensors, GapBetweenTensors) {
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                       std::string(12, '\0')),
                  "4 unused bytes");
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
      "unused bytes");
}

TEST_F(BadSafetensors, TrailingBytesAfterLastTensor) {
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(12, '\0')),
      "8 trailing bytes");
}

TEST_F(BadSafetensors, ShapeTimesDTypeSizeMismatch) {
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
      "needs 12 bytes");
  expect_rejected(
      file(R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", std::string(4, '\0')),
      "needs 8 bytes");
}

TEST_F(BadSafetensors, ShapeOverflow) {
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                       R"("data_offsets":[0,0]}})",
                       ""),
                  "overflows");
}

TEST_F(BadSafetensors, NegativeOrFractionalDims) {
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
                  "negative dimension");
  expect_rejected(
      file(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, '\0')),
      "non-negative integer");
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", ""),
                  "negative data offset");
}

TEST_F(BadSafetensors, DuplicateTensorName) {
  expect_rejected(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       std::string(8, '\0')),
                  "'a' twice");
}

TEST_F(BadSafetensors, MetadataMustMapStringsToStrings) {
  expect_rejected(file(R"({"__metadata__":{"format":1}})", ""), "'format' must be a string");
  expect_rejected(file(R"({"__metadata__":[1]})", ""), "'__metadata__' must be an object");
}

TEST_F(BadSafetensors, MissingFileIsAnIoError) {
  EXPECT_THROW_MSG(SafetensorsFile::open(dir_ / "nope.safetensors"), IoError, "nope.safetensors");
}

// Opening must not read the data section: a 512 MiB (sparse) file opens without the resident
// set growing by the file size. (No time bound: speed belongs in benchmarks, not tests.)
TEST(SafetensorsZeroCopy, OpeningALargeFileReadsOnlyTheHeader) {
  TempDir dir;
  const auto path = dir / "big.safetensors";
  constexpr std::uint64_t kBytes = 512ull << 20;
  const std::string header = fmt::format(
      R"({{"big":{{"dtype":"U8","shape":[{}],"data_offsets":[0,{}]}}}})", kBytes, kBytes);
  write_bytes(path, safetensors_bytes(header, ""));
  std::filesystem::resize_file(path, 8 + header.size() + kBytes);  // sparse: no disk blocks

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto file = SafetensorsFile::open(path);
  const Tensor big = file.tensor("big");
  getrusage(RUSAGE_SELF, &after);
  EXPECT_EQ(big.nbytes(), kBytes);
  // Reading the data would add 512 MiB to the resident set.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB";  // ru_maxrss is in KiB
}

// The current resident set in KiB (/proc/self/statm's second field, in pages).
long resident_kib() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// release() drops a tensor's pages from the resident set (save_pretrained copies a whole
// checkpoint through a second mapping) and the view still reads the same bytes afterwards.
TEST(SafetensorsZeroCopy, ReleasedPagesLeaveTheResidentSet) {
  TempDir dir;
  const auto path = dir / "data.safetensors";
  constexpr std::uint64_t kBytes = 64ull << 20;
  std::string data(kBytes, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 4096);
  const std::string header =
      fmt::format(R"({{"t":{{"dtype":"U8","shape":[{}],"data_offsets":[0,{}]}}}})", kBytes, kBytes);
  write_bytes(path, safetensors_bytes(header, data));
  const auto file = SafetensorsFile::open(path);
  const Tensor t = file.tensor("t");
  const auto sum = [&] {
    std::uint64_t s = 0;
    const auto* p = static_cast<const std::uint8_t*>(t.data());
    for (std::uint64_t i = 0; i < kBytes; i += 64) s += p[i];
    return s;
  };
  const long before = resident_kib();
  const std::uint64_t first = sum();
  const long touched = resident_kib();
  file.release("t");
  const long released = resident_kib();
  EXPECT_GT(touched - before, 48 * 1024) << "touching 64 MiB should grow the resident set";
  EXPECT_LT(released, touched - 48 * 1024) << "release should drop those pages";
  EXPECT_EQ(sum(), first);  // read again from the file
  file.release("t");        // twice is harmless
  EXPECT_THROW((void)file.release("nope"), FormatError);
}

}  // namespace
}  // namespace kvq::io
