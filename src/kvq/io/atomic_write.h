// Outputs appear whole or not at all.
//
// Every file kvq writes goes to a temporary sibling (same directory, so rename(2) is atomic), is
// fsynced, then renamed over the target. A failure or an exception before commit() removes the
// temporary and leaves the target untouched.
//
// Interrupts: the temporaries in flight are registered here; after install_interrupt_cleanup(),
// SIGINT / SIGTERM / SIGHUP remove them and end the process with 128 + the signal number. A run
// killed outright (SIGKILL, power loss) leaves its temporaries, named
// ".<target>.tmp-<pid>-<hex>" / ".<target>.tmpdir-<pid>-<hex>": the next run writing the same
// target removes those whose process is gone, with a warning.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string_view>

namespace kvq::io {

// Writes `bytes` to `path` atomically. Throws IoError naming `path`.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Streams a file into a temporary sibling of `path`; commit() fsyncs and renames it into place.
// The destructor removes the temporary when commit() was not reached.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::filesystem::path& path);  // IoError if the temp can't open
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);  // IoError on a short write (disk full, ...)
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  void commit();

  const std::filesystem::path& path() const { return path_; }            // the final path
  const std::filesystem::path& temp_path() const { return temp_path_; }  // where bytes go now

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

// What AtomicDirectory::commit does when the final directory exists by then.
enum class ExistingDirectory {
  kRefuse,   // IoError, the existing directory untouched (an empty one is replaced)
  kReplace,  // replaced whole (--overwrite, --force)
};

// Builds a directory OUT in a temporary sibling directory; commit() moves it into place. With
// kRefuse the move is rename-no-replace, so of two runs writing the same OUT the second fails
// instead of destroying the first's output. With kReplace an existing OUT is moved aside first and
// removed after the rename, so a crash leaves either the old or the new directory, plus at most a
// stray ".kvq-old" sibling (reported, never removed, by the next run: it may be the only copy).
// The destructor removes the temporary directory when commit() was not reached.
class AtomicDirectory {
 public:
  AtomicDirectory(const std::filesystem::path& final_dir, ExistingDirectory existing);
  ~AtomicDirectory();
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  const std::filesystem::path& path() const { return temp_dir_; }  // the temp dir to write into
  const std::filesystem::path& final_path() const { return final_dir_; }
  void commit();

 private:
  std::filesystem::path final_dir_;
  std::filesystem::path temp_dir_;
  ExistingDirectory existing_;
  bool committed_ = false;
};

// InvalidArgument, before any work, when writing `output` — a file, or a directory kvq replaces
// whole (--overwrite, --force) — would overwrite `input` (the same file) or remove it (a directory
// holding it): "<output_flag> OUT would replace <input_flag> (IN)". Links and ".." are resolved.
void refuse_output_over_input(const std::filesystem::path& output, std::string_view output_flag,
                              const std::filesystem::path& input, std::string_view input_flag);

// Call once at the start of main(), before any thread starts: blocks SIGINT, SIGTERM and SIGHUP
// in every thread and starts one that waits for them, removes the temporaries in flight, prints
// what it removed and exits with 128 + the signal number.
void install_interrupt_cleanup();
// For a command that ends gracefully on a signal (kvq serve drains its requests): the first
// SIGINT / SIGTERM / SIGHUP after this calls `on_signal(sig)` in the waiter thread instead of
// cleaning up and exiting; a second one exits as above. Empty: back to the default.
void set_interrupt_handler(std::function<void(int)> on_signal);

}  // namespace kvq::io
