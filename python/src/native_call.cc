#include "native_call.h"

#include <signal.h>

#include <string>

#include "kvq/core/interrupt.h"

namespace kvq::py {
namespace pyb = pybind11;
namespace {

// Both guarded by the GIL (NativeCall is made and destroyed with it held).
int g_depth = 0;
struct sigaction g_python_sigint;

extern "C" void on_sigint(int) { request_interrupt(); }

// The exception classes, created once at import (owned by the module; never freed).
PyObject* g_error = nullptr;
PyObject* g_io_error = nullptr;
PyObject* g_not_found = nullptr;
PyObject* g_format_error = nullptr;
PyObject* g_config_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_not_supported = nullptr;

PyObject* new_error(pyb::module_& m, const char* name, const char* doc,
                    std::initializer_list<PyObject*> bases) {
  pyb::tuple b(bases.size());
  std::size_t i = 0;
  for (PyObject* base : bases) b[i++] = pyb::reinterpret_borrow<pyb::object>(base);
  const std::string qualified = std::string("kvq.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, b.ptr(), nullptr);
  if (cls == nullptr) throw pyb::error_already_set();
  m.add_object(name, pyb::reinterpret_borrow<pyb::object>(cls));
  return cls;
}

}  // namespace

NativeCall::NativeCall() {
  if (g_depth++ > 0) return;
  outermost_ = true;
  clear_interrupt();
  struct sigaction ours {};
  ours.sa_handler = on_sigint;
  sigemptyset(&ours.sa_mask);
  ours.sa_flags = SA_RESTART;
  sigaction(SIGINT, &ours, &g_python_sigint);
}

NativeCall::~NativeCall() {
  --g_depth;
  if (outermost_) sigaction(SIGINT, &g_python_sigint, nullptr);
}

void NativeCall::finish() {
  if (!outermost_ || !interrupt_requested()) return;
  clear_interrupt();
  PyErr_SetNone(PyExc_KeyboardInterrupt);
  throw pyb::error_already_set();
}

void register_errors(pyb::module_& m) {
  g_error = new_error(m, "Error", "Base class of kvq's errors (kvq::Error).", {PyExc_Exception});
  g_io_error = new_error(m, "IoError", "A file could not be opened, read, written or renamed.",
                         {g_error, PyExc_OSError});
  g_not_found = new_error(m, "NotFoundError", "A path kvq was given does not exist.",
                          {g_io_error, PyExc_FileNotFoundError});
  g_format_error =
      new_error(m, "FormatError", "A file's contents are corrupt or of another format.",
                {g_error, PyExc_ValueError});
  g_config_error =
      new_error(m, "ConfigError", "A model config, quantization config or recipe is invalid.",
                {g_error, PyExc_ValueError});
  g_invalid_argument =
      new_error(m, "InvalidArgument", "An argument is out of range or inconsistent.",
                {g_error, PyExc_ValueError});
  g_not_supported = new_error(m, "NotSupported", "Valid, but kvq does not implement it (yet).",
                              {g_error, PyExc_NotImplementedError});
  pyb::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const Interrupted&) {
      clear_interrupt();
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const NotFound& e) {
      PyErr_SetString(g_not_found, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(g_io_error, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(g_format_error, e.what());
    } catch (const ConfigError& e) {
      PyErr_SetString(g_config_error, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(g_invalid_argument, e.what());
    } catch (const NotSupported& e) {
      PyErr_SetString(g_not_supported, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

}  // namespace kvq::py
