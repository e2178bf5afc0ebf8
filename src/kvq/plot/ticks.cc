#include "kvq/plot/ticks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvq::plot {

std::pair<double, double> padded_range(double lo, double hi) {
  if (!(hi > lo)) {
    const double pad = lo == 0.0 ? 1.0 : std::abs(lo) * 0.5;
    return {lo - pad, hi + pad};
  }
  const double pad = 0.08 * (hi - lo);
  return {lo - pad, hi + pad};
}

std::vector<double> linear_ticks(double lo, double hi, int n, double min_step) {
  const double raw = (hi - lo) / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10.0 * p;
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw) {
      step = m * p;
      break;
    }
  step = std::max(step, min_step);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step)
    ticks.push_back(std::abs(t) < 1e-9 * step ? 0.0 : t);
  return ticks;
}

std::vector<double> log10_ticks(double lo, double hi) {
  std::vector<double> ticks;
  const std::vector<double> mantissas =
      hi - lo < 3 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
  for (double k = std::floor(lo); k <= std::ceil(hi); ++k)
    for (double m : mantissas)
      if (const double t = k + std::log10(m); t >= lo && t <= hi) ticks.push_back(t);
  return ticks;
}

std::string tick_label(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::abs(value) < 1e-12 ? 0.0 : value);
  return buf;
}

}  // namespace kvq::plot
