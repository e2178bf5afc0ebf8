// A terminal progress bar for long work (calibration, perplexity, conversion).
//
//   ProgressBar bar("calibrate", total_tokens, "tok");
//   bar.advance(n);   // redraws at most ~10 times a second, with the rate in units/s
//   bar.finish();
//
// Draws on stderr only when stderr is a terminal, so logs and CI output stay clean; a final
// one-line summary is always printed by finish() unless quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kvq {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::int64_t total, std::string unit, bool quiet = false);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Also an interruption point (core/interrupt.h): throws Interrupted once one is requested.
  void advance(std::int64_t amount = 1);
  void set_suffix(std::string suffix);  // e.g. "ppl 12.34"
  void finish();
  double rate() const;  // units per second so far
  double elapsed_seconds() const;

 private:
  void draw(bool final);

  std::string label_;
  std::string unit_;
  std::string suffix_;
  std::int64_t total_;
  std::int64_t done_ = 0;
  bool quiet_;
  bool interactive_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kvq
