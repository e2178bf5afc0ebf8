#include "kvq/io/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvq/core/error.h"

namespace kvq::io {
namespace {

std::string label(std::string_view what) {
  std::string out;  // " <what>"; appended, since GCC 12 warns falsely on " " + std::string
  if (!what.empty()) out.append(" ").append(what);
  return out;
}

}  // namespace

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile open_input_file(const std::filesystem::path& path, std::string_view what) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) fail<IoError>("{}: cannot open{}: no such file", path.string(), label(what));
    fail<IoError>("{}: cannot open{}: {}", path.string(), label(what), std::strerror(err));
  }
  InputFile file(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    fail<IoError>("{}: cannot stat{}: {}", path.string(), label(what), std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail<IoError>("{}: cannot open{}: not a regular file{}", path.string(), label(what),
                  S_ISDIR(st.st_mode) ? " (a directory)" : "");
  // A regular file never blocks; plain blocking reads from here on.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return InputFile(file.release(), static_cast<std::uint64_t>(st.st_size));
}

std::string read_file(const std::filesystem::path& path, std::string_view what,
                      std::uint64_t max_bytes) {
  const InputFile file = open_input_file(path, what);
  if (file.size() > max_bytes)
    fail<IoError>("{}: cannot read{}: {} bytes, more than the {} byte limit", path.string(),
                  label(what), file.size(), max_bytes);
  std::string out(static_cast<std::size_t>(file.size()), '\0');
  std::size_t done = 0;
  while (done < out.size()) {
    const ::ssize_t n = ::read(file.fd(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail<IoError>("{}: read failed: {}", path.string(), std::strerror(errno));
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<std::size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace kvq::io
