// Opening and reading input files: the one place kvq does it, so every input gets the same checks
// (a regular file, opened without blocking, within a size limit).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace kvq::io {

// Whole-file reads (JSON, YAML, text, datasets) above this size are refused: the largest real
// input, WikiText-2's train split, is 11 MB; a tokenizer.json a few MB. Model weights are mapped
// (MappedFile), not read.
inline constexpr std::uint64_t kMaxReadFileBytes = std::uint64_t{1} << 30;

// An open file descriptor of a regular file; closes it when destroyed.
class InputFile {
 public:
  InputFile(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  InputFile(InputFile&& other) noexcept : fd_(other.release()), size_(other.size_) {}
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile& operator=(InputFile&&) = delete;
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }  // at open
  int release() {                               // the caller closes it
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
  std::uint64_t size_;
};

// Opens `path` for reading. IoError naming the path — and `what` it was meant to be ("the
// calibration dataset"), when given — when it does not exist, cannot be opened, or is not a
// regular file: a directory, or a FIFO or device that could block forever or never end (the open
// itself does not block: O_NONBLOCK until the type is known).
InputFile open_input_file(const std::filesystem::path& path, std::string_view what = "");

// The file's bytes, as they are (no newline conversion), through open_input_file; IoError also
// when it is larger than `max_bytes`.
std::string read_file(const std::filesystem::path& path, std::string_view what = "",
                      std::uint64_t max_bytes = kMaxReadFileBytes);

}  // namespace kvq::io
