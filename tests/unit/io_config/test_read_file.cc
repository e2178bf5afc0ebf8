// io::read_file, the one reader of whole input files: bytes as they are, and clear errors — never
// a hang — for what is not a regular file.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <string>

#include "../io_safetensors/io_test_util.h"
#include "kvq/core/error.h"
#include "kvq/io/read_file.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

std::string error_of(const std::filesystem::path& p, std::string_view what = "") {
  try {
    read_file(p, what);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(ReadFile, BytesAsTheyAre) {
  kvq::test::TempDir dir;
  const std::string bytes("a\r\nb\0c", 6);
  kvq::test::write_bytes(dir / "f.txt", bytes);
  EXPECT_EQ(read_file(dir / "f.txt"), bytes);
  kvq::test::write_bytes(dir / "empty", "");
  EXPECT_EQ(read_file(dir / "empty"), "");
}

TEST(ReadFile, NonRegularFilesAreRefusedByName) {
  kvq::test::TempDir dir;
  const std::string missing = error_of(dir / "nope.yaml", "recipe");
  EXPECT_NE(missing.find("nope.yaml: cannot open recipe: no such file"), std::string::npos)
      << missing;
  EXPECT_NE(error_of(dir.path()).find("not a regular file"), std::string::npos);
  // A FIFO would block forever on open(); it is refused before.
  const auto fifo = dir / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo, "text").find("fifo: cannot open text: not a regular file"),
            std::string::npos);
  // So is a device that never ends.
  EXPECT_NE(error_of("/dev/zero").find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace kvq::io
