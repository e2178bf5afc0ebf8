// Errors a user can act on, and internal invariant checks.
//
// User-facing failures (bad files, bad configs, bad flags) throw a kvq::Error subclass whose
// message names the file, tensor or module and says what is wrong; the CLI prints
// "error: <message>" and exits non-zero. Broken internal invariants are bugs: KVQ_CHECK aborts.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace kvq {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file could not be opened, read, written or renamed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file's contents are corrupt or not in the expected format (safetensors, GGUF, JSON, ...).
class FormatError : public Error {
 public:
  using Error::Error;
};

// A model config, quantization config or recipe is invalid or contradicts the model.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A function or command-line argument is out of range or inconsistent.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// The request is valid but kvq does not implement it (yet); the message says what is.
class NotSupported : public Error {
 public:
  using Error::Error;
};

// Throws E with a fmt-formatted message.
template <class E = Error, class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& message);
}  // namespace detail

}  // namespace kvq

// Internal invariant: aborts with file:line when violated. Never use it for user input.
#define KVQ_CHECK(condition, ...)                                                                 \
  do {                                                                                            \
    if (!(condition)) [[unlikely]] {                                                              \
      ::kvq::detail::check_failed(__FILE__, __LINE__, #condition, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                             \
  } while (0)
