// kvq._kvq: the Python module's native half (the package python/kvq re-exports it with
// docstrings and type stubs). See docs/design.md, "Python bindings".
#include <pybind11/pybind11.h>

#include <string>

#include "kvq/core/log.h"
#include "kvq/core/threading.h"
#include "kvq_py.h"

PYBIND11_MODULE(_kvq, m) {
  namespace py = kvq::py;
  m.doc() = "kvq's native engine (use the kvq package, which re-exports it).";
  py::register_errors(m);
  py::bind_quant(m);
  py::bind_model(m);
  py::bind_run(m);
  m.def("set_num_threads", &kvq::set_num_threads, pybind11::arg("threads"),
        "Threads for kernels and BLAS (0: all cores), as the CLI's --threads.");
  m.def("num_threads", &kvq::num_threads, "Threads the kernels use.");
  m.def(
      "set_log_level",
      [](const std::string& level) {
        using L = kvq::log::Level;
        if (level == "debug") return kvq::log::set_level(L::kDebug);
        if (level == "info") return kvq::log::set_level(L::kInfo);
        if (level == "warn") return kvq::log::set_level(L::kWarn);
        if (level == "error") return kvq::log::set_level(L::kError);
        if (level == "silent") return kvq::log::set_level(L::kSilent);
        kvq::fail<kvq::InvalidArgument>(
            "log level {} is not one of debug, info, warn, error, silent", level);
      },
      pybind11::arg("level"),
      "kvq's messages on stderr: debug, info (default), warn, error, silent.");
}
