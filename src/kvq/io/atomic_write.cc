#include "kvq/io/atomic_write.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <system_error>

#include "kvq/core/error.h"

namespace kvq::io {
namespace fs = std::filesystem;
namespace {

// A hidden sibling name unlikely to collide with a concurrent writer of the same target.
fs::path temp_sibling(const fs::path& target, std::string_view tag) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const fs::path name = target.filename();
  return target.parent_path() /
         fmt::format(".{}.{}-{}-{:x}", name.string(), tag, ::getpid(), rng() & 0xffffffffu);
}

fs::path parent_or_dot(const fs::path& p) {
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

// Makes a rename inside `dir` durable. Failure here is not fatal (some filesystems refuse).
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const fs::path& path) : path_(path) {
  if (path_.filename().empty()) fail<IoError>("{}: not a file path", path_.string());
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_path_ = temp_sibling(path_, "tmp");
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    fail<IoError>("{}: cannot create temporary file in {}: {}", path_.string(),
                  parent_or_dot(path_).string(), std::strerror(errno));
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  if (committed_ || fd_ < 0) fail<IoError>("{}: write after commit", path_.string());
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ::ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail<IoError>("{}: write failed: {}", path_.string(), std::strerror(errno));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (committed_ || fd_ < 0) fail<IoError>("{}: commit called twice", path_.string());
  if (::fsync(fd_) != 0) {
    fail<IoError>("{}: fsync failed: {}", path_.string(), std::strerror(errno));
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    fail<IoError>("{}: close failed: {}", path_.string(), std::strerror(errno));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    fail<IoError>("{}: cannot rename temporary file into place: {}", path_.string(),
                  std::strerror(errno));
  }
  committed_ = true;
  fsync_dir(parent_or_dot(path_));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

AtomicDirectory::AtomicDirectory(const fs::path& final_dir) : final_dir_(final_dir) {
  // "out/" has an empty filename; strip it so the sibling lands next to "out".
  if (final_dir_.filename().empty()) final_dir_ = final_dir_.parent_path();
  if (final_dir_.empty() || final_dir_.filename() == "." || final_dir_.filename() == "..") {
    fail<IoError>("{}: not a usable output directory name", final_dir.string());
  }
  std::error_code ec;
  if (fs::exists(final_dir_, ec) && !fs::is_directory(final_dir_, ec)) {
    fail<IoError>("{}: exists and is not a directory", final_dir_.string());
  }
  const fs::path parent = parent_or_dot(final_dir_);
  fs::create_directories(parent, ec);
  if (ec)
    fail<IoError>("{}: cannot create {}: {}", final_dir_.string(), parent.string(), ec.message());
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::path candidate = temp_sibling(final_dir_, "tmpdir");
    if (::mkdir(candidate.c_str(), 0755) == 0) {
      temp_dir_ = std::move(candidate);
      return;
    }
    if (errno != EEXIST) break;
  }
  fail<IoError>("{}: cannot create temporary directory in {}: {}", final_dir_.string(),
                parent.string(), std::strerror(errno));
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_ && !temp_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(temp_dir_, ec);
  }
}

void AtomicDirectory::commit() {
  if (committed_) fail<IoError>("{}: commit called twice", final_dir_.string());
  std::error_code ec;
  const bool replace = fs::exists(final_dir_, ec);
  if (!replace) {
    if (::rename(temp_dir_.c_str(), final_dir_.c_str()) != 0) {
      fail<IoError>("{}: cannot move output into place: {}", final_dir_.string(),
                    std::strerror(errno));
    }
  } else {
    if (!fs::is_directory(final_dir_, ec)) {
      fail<IoError>("{}: exists and is not a directory", final_dir_.string());
    }
    // Move the old directory aside, move the new one in, then delete the old one: at every
    // instant the target is either the complete old or the complete new directory.
    const fs::path old = temp_sibling(final_dir_, "kvq-old");
    if (::rename(final_dir_.c_str(), old.c_str()) != 0) {
      fail<IoError>("{}: cannot move the existing directory aside: {}", final_dir_.string(),
                    std::strerror(errno));
    }
    if (::rename(temp_dir_.c_str(), final_dir_.c_str()) != 0) {
      const int err = errno;
      ::rename(old.c_str(), final_dir_.c_str());  // put the old one back
      fail<IoError>("{}: cannot move output into place: {}", final_dir_.string(),
                    std::strerror(err));
    }
    fs::remove_all(old, ec);
  }
  committed_ = true;
  fsync_dir(parent_or_dot(final_dir_));
}

}  // namespace kvq::io
