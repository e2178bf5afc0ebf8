// Shared pieces of the libFuzzer harnesses (docs/reliability.md, "Fuzzing").
//
// A harness feeds the fuzz bytes to a real parsing entry point. kvq's documented failures (a
// kvq::Error subclass: IoError, FormatError, ConfigError, InvalidArgument, NotSupported) are the
// expected outcome for bad input and are swallowed; anything else — another exception (it escapes
// and libFuzzer reports it), a crash, a sanitizer report, a leak, a timeout — is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "kvq/core/error.h"

namespace kvq::fuzz {

// Runs `f`, treating a kvq::Error as the documented answer to bad input.
template <class F>
void expect_kvq_errors_only(F&& f) {
  try {
    f();
  } catch (const kvq::Error&) {
  }
}

// The fuzz bytes as text.
inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A per-process scratch directory ($TMPDIR/kvq-fuzz-<pid>), removed at exit; the harnesses whose
// entry point takes a path write the fuzz bytes to a file in it, reused for every input.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d =
        std::filesystem::temp_directory_path() / ("kvq-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name (truncating) and returns the path.
inline std::filesystem::path write_scratch(const std::string& name, std::string_view bytes) {
  std::filesystem::path path = scratch_dir() / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();  // the harness's own failure, not kvq's
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace kvq::fuzz
