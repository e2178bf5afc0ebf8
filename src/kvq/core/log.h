// Minimal leveled logging to stderr. Library code reports through this, never through stdout
// (stdout belongs to the CLI's results and --json output).
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace kvq::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kSilent = 4 };

void set_level(Level level);
Level level();
void write(Level level, std::string_view message);

template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvq::log
