#include "kvq/core/progress.h"

#include <unistd.h>

#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "kvq/core/interrupt.h"

namespace kvq {

ProgressBar::ProgressBar(std::string label, std::int64_t total, std::string unit, bool quiet)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      quiet_(quiet),
      interactive_(!quiet && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (interactive_ && !finished_) std::fputs("\n", stderr);
}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double ProgressBar::rate() const {
  const double s = elapsed_seconds();
  return s > 0 ? static_cast<double>(done_) / s : 0.0;
}

void ProgressBar::advance(std::int64_t amount) {
  // Every long loop advances a bar between units of work: the one place an embedder's interrupt
  // (core/interrupt.h) can stop it cleanly.
  interruption_point();
  done_ += amount;
  const auto now = std::chrono::steady_clock::now();
  if (interactive_ && now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::set_suffix(std::string suffix) { suffix_ = std::move(suffix); }

void ProgressBar::draw(bool final) {
  constexpr int kWidth = 30;
  const double fraction =
      total_ > 0 ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  const double r = rate();
  const double eta = r > 0 && total_ > done_ ? static_cast<double>(total_ - done_) / r : 0.0;
  const std::string line = fmt::format(
      "{} [{}] {}/{} {} {:.1f} {}/s {}{}", label_, bar, done_, total_, unit_, r, unit_,
      final ? fmt::format("in {:.1f}s", elapsed_seconds()) : fmt::format("eta {:.0f}s", eta),
      suffix_.empty() ? "" : "  " + suffix_);
  std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (quiet_) return;
  if (interactive_) {
    draw(true);
  } else {
    std::fprintf(stderr, "%s: %lld %s in %.1fs (%.1f %s/s)%s%s\n", label_.c_str(),
                 static_cast<long long>(done_), unit_.c_str(), elapsed_seconds(), rate(),
                 unit_.c_str(), suffix_.empty() ? "" : "  ", suffix_.c_str());
  }
}

}  // namespace kvq
