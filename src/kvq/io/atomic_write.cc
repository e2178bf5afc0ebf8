#include "kvq/io/atomic_write.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "kvq/core/error.h"
#include "kvq/core/log.h"

namespace kvq::io {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kTempFileTag = "tmp", kTempDirTag = "tmpdir", kOldDirTag = "kvq-old";

// A hidden sibling name unlikely to collide with a concurrent writer of the same target; the pid
// tells a later run whether its writer is still alive.
fs::path temp_sibling(const fs::path& target, std::string_view tag) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const fs::path name = target.filename();
  return target.parent_path() /
         fmt::format(".{}.{}-{}-{:x}", name.string(), tag, ::getpid(), rng() & 0xffffffffu);
}

fs::path parent_or_dot(const fs::path& p) {
  return p.parent_path().empty() ? fs::path(".") : p.parent_path();
}

// The temporaries this process is writing, for the interrupt handler. Process-wide by nature (a
// signal is); never destroyed, since the handler thread may use it while the process exits.
struct InFlight {
  std::mutex mutex;  // also held across a commit's renames, so a signal sees before or after
  std::set<fs::path> paths;
};
InFlight& in_flight() {
  static InFlight* registry = new InFlight;
  return *registry;
}
void track(const fs::path& p) {
  std::lock_guard lock(in_flight().mutex);
  in_flight().paths.insert(p);
}
void untrack(const fs::path& p) {
  std::lock_guard lock(in_flight().mutex);
  in_flight().paths.erase(p);
}

// Removes the temporaries of `target` that earlier runs left when they were killed (their pid is
// gone); reports, but keeps, a moved-aside old directory, which may be the only copy of it.
void clean_leftovers(const fs::path& target) {
  std::string prefix = ".";  // appended: GCC 12 warns falsely on "." + std::string + "."
  prefix.append(target.filename().string()).append(".");
  std::error_code ec;
  for (fs::directory_iterator it(parent_or_dot(target), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    std::string_view tag;
    for (std::string_view t : {kOldDirTag, kTempDirTag, kTempFileTag}) {
      if (rest.starts_with(t) && rest.size() > t.size() && rest[t.size()] == '-') {
        tag = t;
        break;
      }
    }
    if (tag.empty()) continue;
    const std::string_view digits =
        rest.substr(tag.size() + 1, rest.find('-', tag.size() + 1) - tag.size() - 1);
    long pid = 0;
    for (char c : digits) {
      if (c < '0' || c > '9' || pid > 1'000'000'000) {
        pid = -1;
        break;
      }
      pid = pid * 10 + (c - '0');
    }
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    if (tag == kOldDirTag) {
      log::warn(
          "{}: left by an interrupted kvq run (pid {}) while it replaced {}; it may hold the "
          "previous output: check it and remove it yourself",
          it->path().string(), pid, target.string());
      continue;
    }
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (rm) {
      log::warn("{}: left by an interrupted kvq run (pid {}); cannot remove it: {}",
                it->path().string(), pid, rm.message());
    } else {
      log::warn("removed {}, left by an interrupted kvq run (pid {})", it->path().string(), pid);
    }
  }
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
  clean_leftovers(path_);
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_path_ = temp_sibling(path_, kTempFileTag);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) {
    fail<IoError>("{}: cannot create temporary file in {}: {}", path_.string(),
                  parent_or_dot(path_).string(), std::strerror(errno));
  }
  track(temp_path_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) {
    ::unlink(temp_path_.c_str());
    untrack(temp_path_);
  }
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
  {
    std::lock_guard lock(in_flight().mutex);
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      fail<IoError>("{}: cannot rename temporary file into place: {}", path_.string(),
                    std::strerror(errno));
    }
    in_flight().paths.erase(temp_path_);
    committed_ = true;
  }
  fsync_dir(parent_or_dot(path_));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

AtomicDirectory::AtomicDirectory(const fs::path& final_dir, ExistingDirectory existing)
    : final_dir_(final_dir), existing_(existing) {
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
  clean_leftovers(final_dir_);
  for (int attempt = 0; attempt < 16; ++attempt) {
    fs::path candidate = temp_sibling(final_dir_, kTempDirTag);
    if (::mkdir(candidate.c_str(), 0755) == 0) {
      temp_dir_ = std::move(candidate);
      track(temp_dir_);
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
    untrack(temp_dir_);
  }
}

void AtomicDirectory::commit() {
  if (committed_) fail<IoError>("{}: commit called twice", final_dir_.string());
  std::lock_guard lock(in_flight().mutex);  // an interrupt sees the state before or after
  std::error_code ec;
  if (existing_ == ExistingDirectory::kRefuse || !fs::exists(final_dir_, ec)) {
    // rmdir removes only an empty directory; then rename-no-replace, so a directory that
    // appeared meanwhile (another run's output) is never replaced.
    ::rmdir(final_dir_.c_str());
    int rc =
        ::renameat2(AT_FDCWD, temp_dir_.c_str(), AT_FDCWD, final_dir_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL && !fs::exists(final_dir_, ec)) {
      rc = ::rename(temp_dir_.c_str(), final_dir_.c_str());  // a filesystem without the flag
    }
    if (rc != 0) {
      const int saved = errno;
      const int err = fs::exists(final_dir_, ec) ? EEXIST : saved;
      if (err == EEXIST || err == ENOTEMPTY)
        fail<IoError>(
            "{}: exists now (written by another run while this one worked?); left as it is, "
            "this run's output discarded",
            final_dir_.string());
      fail<IoError>("{}: cannot move output into place: {}", final_dir_.string(),
                    std::strerror(err));
    }
  } else {
    if (!fs::is_directory(final_dir_, ec)) {
      fail<IoError>("{}: exists and is not a directory", final_dir_.string());
    }
    // Move the old directory aside, move the new one in, then delete the old one: at every
    // instant the target is either the complete old or the complete new directory.
    const fs::path old = temp_sibling(final_dir_, kOldDirTag);
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
  in_flight().paths.erase(temp_dir_);
  committed_ = true;
  fsync_dir(parent_or_dot(final_dir_));
}

void refuse_output_over_input(const fs::path& output, std::string_view output_flag,
                              const fs::path& input, std::string_view input_flag) {
  std::error_code ec;
  fs::path out = fs::weakly_canonical(output, ec);
  if (out.filename().empty()) out = out.parent_path();  // "dir/"
  if (fs::equivalent(output, input, ec) && !ec) {
    fail<InvalidArgument>("{} {} would {} {} ({}): write it elsewhere", output_flag,
                          output.string(), fs::is_directory(output) ? "replace" : "overwrite",
                          input_flag, input.string());
  }
  // The input as reached (a link inside OUT goes with OUT) and as resolved (its target).
  const fs::path as_named =
      fs::weakly_canonical(input.parent_path().empty() ? fs::path(".") : input.parent_path(), ec) /
      input.filename();
  for (const fs::path& in : {as_named, fs::weakly_canonical(input, ec)}) {
    const auto [o, i] = std::mismatch(out.begin(), out.end(), in.begin(), in.end());
    if (o == out.end() && i != in.end())
      fail<InvalidArgument>("{} {} would replace {} ({}) inside it: write it elsewhere",
                            output_flag, output.string(), input_flag, input.string());
  }
}

namespace {

struct InterruptHandler {
  std::mutex mutex;
  std::function<void(int)> on_signal;
};
InterruptHandler& interrupt_handler() {
  static InterruptHandler* h = new InterruptHandler;  // never destroyed: see in_flight()
  return *h;
}
// The handler for the first signal, which it uses up.
std::function<void(int)> take_interrupt_handler() {
  InterruptHandler& h = interrupt_handler();
  std::lock_guard lock(h.mutex);
  return std::exchange(h.on_signal, nullptr);
}

// Removes an unfinished output while the process's other threads may still be writing into it
// (nothing stops them: the process _Exits right after). A file they create or rename between
// remove_all's listing and its final rmdir kept the directory (a test saw it in 2 of 6 runs), so
// it is first renamed aside (paths into it then fail) and removed until it is gone. The new name
// keeps the temporary's prefix, so a later run still recognises it as a leftover.
bool remove_unfinished(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return false;
  fs::path victim = path;
  fs::path aside = path;
  aside += "-interrupted";
  if (::rename(path.c_str(), aside.c_str()) == 0) victim = aside;
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::remove_all(victim, ec);
    if (!fs::exists(fs::symlink_status(victim, ec))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

void set_interrupt_handler(std::function<void(int)> on_signal) {
  InterruptHandler& h = interrupt_handler();
  std::lock_guard lock(h.mutex);
  h.on_signal = std::move(on_signal);
}

void install_interrupt_cleanup() {
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, sig);
  // Blocked here, inherited by every thread started later (OpenMP's, BLAS's): only the waiter
  // below receives them, in a normal thread where removing files is safe (a signal handler
  // could not take the registry's lock or walk a directory).
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals] {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) return;
    if (std::function<void(int)> handler = take_interrupt_handler()) {
      handler(sig);
      if (sigwait(&signals, &sig) != 0) return;
    }
    InFlight& f = in_flight();
    f.mutex.lock();  // waits for a commit's renames; held until _exit
    std::size_t removed = 0;
    for (const fs::path& p : f.paths) removed += remove_unfinished(p) ? 1 : 0;
    std::fprintf(
        stderr, "kvq: interrupted (%s)%s\n", strsignal(sig),
        removed > 0 ? fmt::format("; removed {} unfinished output(s)", removed).c_str() : "");
    std::_Exit(128 + sig);
  }).detach();
}

}  // namespace kvq::io
