// Colours of the report figures: matplotlib's defaults (the tab10 cycle for series, viridis for
// values), so the figures read like the plots people already know.
#pragma once

#include <cstdint>

namespace kvq::plot {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kText{34, 34, 34};        // titles, labels, tick values
inline constexpr Rgb kAxis{51, 51, 51};        // the axes frame and tick marks
inline constexpr Rgb kGrid{229, 229, 229};     // light grid behind the data
inline constexpr Rgb kLeader{150, 150, 150};   // lines from a moved label back to its dot
inline constexpr Rgb kNonFinite{214, 39, 40};  // NaN / Inf heatmap cells: red, outside viridis

// The i-th colour of matplotlib's tab10 cycle (wraps after 10).
Rgb series_colour(int i);

// Viridis at t in [0, 1] (clamped): matplotlib's map sampled at nine evenly spaced stops and
// interpolated linearly between them; viridis(0) is dark purple, viridis(1) yellow.
Rgb viridis(double t);

}  // namespace kvq::plot
