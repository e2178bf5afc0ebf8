// Axis ranges and tick positions for the report figures. Positions are in axis units: the value
// itself on a linear axis, its log2 or log10 on a log axis.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvq::plot {

// [lo, hi] padded by 8 % of the span on each side; a degenerate range (lo == hi) is widened.
std::pair<double, double> padded_range(double lo, double hi);

// Multiples of a "nice" step (1, 2 or 5 times a power of ten, at least `min_step`) inside
// [lo, hi], about `n` of them.
std::vector<double> linear_ticks(double lo, double hi, int n, double min_step = 0.0);

// Ticks of a log10 axis over [lo, hi] (in decades): 1, 2 and 5 times each power of ten when the
// range is under three decades (a decade alone would leave too few), else every power of ten.
std::vector<double> log10_ticks(double lo, double hi);

// A tick value with three significant digits ("0.005", "16", "2.5e-05"); values within 1e-12 of 0
// print as 0.
std::string tick_label(double value);

}  // namespace kvq::plot
