#include "kvq/io/mmap.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kvq/core/error.h"
#include "kvq/io/read_file.h"

namespace kvq::io {

std::shared_ptr<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const InputFile file = open_input_file(path);  // a regular file, or IoError
  const auto size = static_cast<std::size_t>(file.size());
  const std::uint8_t* data = nullptr;
  if (size > 0) {
    // MAP_PRIVATE + PROT_READ: nothing is read until a page is touched.
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED)
      fail<IoError>("{}: cannot mmap {} bytes: {}", path.string(), size, std::strerror(errno));
    data = static_cast<const std::uint8_t*>(p);
  }
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));  // mapping outlives fd
}

void MappedFile::release(std::size_t offset, std::size_t length) const {
  if (data_ == nullptr || offset >= size_) return;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t end = std::min(size_, offset + std::min(length, size_ - offset));
  const std::size_t first = (offset + page - 1) / page * page;  // the mapping is page-aligned
  const std::size_t last = end == size_ ? end : end / page * page;
  if (first >= last) return;
  // Read-only private file pages, never written: dropping them loses nothing.
  (void)::madvise(const_cast<std::uint8_t*>(data_) + first, last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace kvq::io
