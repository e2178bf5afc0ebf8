#include "kvq/core/log.h"

#include <atomic>
#include <cstdio>

namespace kvq::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};  // process-wide verbosity, set once by the CLI
}

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

void write(Level l, std::string_view message) {
  static constexpr const char* kPrefix[] = {"debug: ", "", "warning: ", "error: ", ""};
  std::fprintf(stderr, "%s%.*s\n", kPrefix[static_cast<int>(l)], static_cast<int>(message.size()),
               message.data());
}

}  // namespace kvq::log
