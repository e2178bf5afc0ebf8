#include "kvq/io/mmap.h"

#include <sys/mman.h>

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

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

}  // namespace kvq::io
