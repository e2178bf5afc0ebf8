// Read-only memory maps of model files.
//
// Tensors read from safetensors/GGUF files are zero-copy views into a MappedFile; each view holds
// the shared_ptr, so the mapping lives as long as any tensor that points into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

namespace kvq::io {

class MappedFile {
 public:
  // Maps the whole file read-only (an empty file maps to data() == nullptr, size() == 0).
  // Throws IoError naming `path` when it cannot be opened or mapped. Nothing is read: pages are
  // faulted in on first access.
  static std::shared_ptr<MappedFile> open(const std::filesystem::path& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Drops the whole pages inside [offset, offset + length) from this process (madvise
  // MADV_DONTNEED; the data stays in the file and is read again if touched). For one-pass copies
  // out of a large file: an 8B checkpoint copied through a second mapping would otherwise count
  // its 16 GB twice in the resident set. Out-of-range parts are ignored.
  void release(std::size_t offset, std::size_t length) const;

 private:
  MappedFile(std::filesystem::path path, const std::uint8_t* data, std::size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::filesystem::path path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvq::io
