// How the bindings call into kvq: with the GIL released, Ctrl-C turned into KeyboardInterrupt,
// and kvq's errors turned into the kvq.Error hierarchy of Python exceptions.
#pragma once

#include <pybind11/pybind11.h>

#include <filesystem>
#include <utility>

#include "kvq/core/error.h"

namespace kvq::py {

// An IoError about a path that does not exist: Python's kvq.NotFoundError, which is also a
// FileNotFoundError. The message is kvq's own.
class NotFound : public IoError {
 public:
  using IoError::IoError;
};

// Held (with the GIL) around a long native call. The outermost one swaps Python's SIGINT handler
// for one that only requests an interrupt (core/interrupt.h), because Python's own handler runs
// only when the interpreter gets control back — never during a native loop with the GIL
// released. The loops stop at their next interruption point by throwing kvq::Interrupted (their
// atomic writers clean up as they unwind); the translator makes that a KeyboardInterrupt. When the
// call finished anyway, finish() raises KeyboardInterrupt.
class NativeCall {
 public:
  NativeCall();
  ~NativeCall();
  NativeCall(const NativeCall&) = delete;
  NativeCall& operator=(const NativeCall&) = delete;
  // Raises KeyboardInterrupt (error_already_set) when Ctrl-C came during the call.
  void finish();

 private:
  bool outermost_ = false;
};

// Runs f() with the GIL released under a NativeCall. Python hooks re-acquire the GIL inside.
template <class F>
void run_native(F&& f) {
  NativeCall call;
  {
    pybind11::gil_scoped_release release;
    std::forward<F>(f)();
  }
  call.finish();
}

// Runs f(); an IoError while `path` does not exist becomes NotFound (same message).
template <class F>
void with_path(const std::filesystem::path& path, F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const IoError& e) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec) && dynamic_cast<const NotFound*>(&e) == nullptr)
      throw NotFound(e.what());
    throw;
  }
}

// Creates kvq.Error and its subclasses in `m` and registers the C++ → Python translation.
void register_errors(pybind11::module_& m);

}  // namespace kvq::py
