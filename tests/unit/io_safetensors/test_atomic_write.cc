// Outputs appear whole or not at all, and no temporary files are left behind.
#include <gtest/gtest.h>

#include <stdexcept>

#include "io_test_util.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/safetensors.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

using kvq::test::list_dir;
using kvq::test::read_bytes;
using kvq::test::TempDir;
using kvq::test::write_bytes;
namespace fs = std::filesystem;

TEST(AtomicWrite, CreatesAndReplaces) {
  TempDir dir;
  write_file_atomic(dir / "out.txt", "first");
  EXPECT_EQ(read_bytes(dir / "out.txt"), "first");
  write_file_atomic(dir / "out.txt", std::string(100000, 'x'));
  EXPECT_EQ(read_bytes(dir / "out.txt"), std::string(100000, 'x'));
  write_file_atomic(dir / "empty.txt", "");
  EXPECT_EQ(read_bytes(dir / "empty.txt"), "");
  EXPECT_EQ(list_dir(dir.path()), (std::vector<std::string>{"empty.txt", "out.txt"}));
}

TEST(AtomicWrite, MissingDirectoryFailsWithoutCreatingAnything) {
  TempDir dir;
  EXPECT_THROW_MSG(write_file_atomic(dir / "no" / "out.txt", "x"), IoError, "out.txt");
  EXPECT_TRUE(list_dir(dir.path()).empty());
}

TEST(AtomicWrite, ParentIsAFile) {
  TempDir dir;
  write_bytes(dir / "file", "keep");
  EXPECT_THROW(write_file_atomic(dir / "file" / "out.txt", "x"), IoError);
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"file"});
  EXPECT_EQ(read_bytes(dir / "file"), "keep");
}

TEST(AtomicWrite, ExceptionBeforeCommitLeavesOldContentAndNoTemp) {
  TempDir dir;
  write_bytes(dir / "out.bin", "old");
  try {
    AtomicFileWriter writer(dir / "out.bin");
    writer.write("new half");
    EXPECT_TRUE(fs::exists(writer.temp_path()));
    EXPECT_EQ(writer.temp_path().parent_path(), dir.path());
    throw std::runtime_error("simulated failure mid-way");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_bytes(dir / "out.bin"), "old");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out.bin"});
}

TEST(AtomicWrite, RenameFailureRemovesTemp) {
  TempDir dir;
  fs::create_directory(dir / "target");
  write_bytes(dir / "target" / "inside", "keep");
  // rename(2) of a file over a non-empty directory fails: the commit must clean up.
  EXPECT_THROW_MSG(write_file_atomic(dir / "target", "x"), IoError, "target");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"target"});
  EXPECT_EQ(read_bytes(dir / "target" / "inside"), "keep");
}

TEST(AtomicWrite, SafetensorsWriterFailureLeavesNothing) {
  TempDir dir;
  SafetensorsWriter writer;
  writer.add("a", Tensor(DType::kF32, {4}));
  fs::create_directory(dir / "model.safetensors");
  write_bytes(dir / "model.safetensors" / "x", "");
  EXPECT_THROW(writer.write(dir / "model.safetensors"), IoError);
  EXPECT_THROW(writer.write(dir / "missing" / "model.safetensors"), IoError);
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"model.safetensors"});
}

TEST(AtomicDirectoryTest, CommitCreatesDirectory) {
  TempDir dir;
  const fs::path out = dir / "sub" / "out";  // parents are created
  {
    AtomicDirectory staging(out, ExistingDirectory::kRefuse);
    EXPECT_NE(staging.path(), out);
    EXPECT_EQ(staging.path().parent_path(), out.parent_path());
    write_file_atomic(staging.path() / "config.json", "{}\n");
    EXPECT_FALSE(fs::exists(out));
    staging.commit();
  }
  EXPECT_EQ(read_bytes(out / "config.json"), "{}\n");
  EXPECT_EQ(list_dir(dir / "sub"), std::vector<std::string>{"out"});
}

TEST(AtomicDirectoryTest, CommitReplacesExistingDirectory) {
  TempDir dir;
  const fs::path out = dir / "out";
  fs::create_directory(out);
  write_bytes(out / "stale.txt", "old");
  {
    // a trailing slash names the same directory
    AtomicDirectory staging(out / "", ExistingDirectory::kReplace);
    write_file_atomic(staging.path() / "new.txt", "new");
    staging.commit();
  }
  EXPECT_EQ(list_dir(out), std::vector<std::string>{"new.txt"});
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out"});
}

TEST(AtomicDirectoryTest, NoCommitKeepsOldAndRemovesTemp) {
  TempDir dir;
  const fs::path out = dir / "out";
  fs::create_directory(out);
  write_bytes(out / "keep.txt", "old");
  try {
    AtomicDirectory staging(out, ExistingDirectory::kReplace);
    write_file_atomic(staging.path() / "half.txt", "half");
    throw std::runtime_error("simulated failure");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(list_dir(out), std::vector<std::string>{"keep.txt"});
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out"});
}

TEST(AtomicDirectoryTest, RefusesToReplaceAFile) {
  TempDir dir;
  write_bytes(dir / "out", "a file");
  EXPECT_THROW_MSG(AtomicDirectory(dir / "out", ExistingDirectory::kReplace), IoError,
                   "not a directory");
  EXPECT_EQ(read_bytes(dir / "out"), "a file");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out"});
}

}  // namespace
}  // namespace kvq::io
