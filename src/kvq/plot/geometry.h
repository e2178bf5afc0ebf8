// Boxes in figure pixels (y grows downward, as on the image), shared by the layouts and the
// label placement.
#pragma once

#include <algorithm>
#include <cmath>

namespace kvq::plot {

struct Size {
  double w = 0, h = 0;
};

struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // x0 <= x1, y0 <= y1

  double width() const { return x1 - x0; }
  double height() const { return y1 - y0; }
  double cx() const { return 0.5 * (x0 + x1); }
  double cy() const { return 0.5 * (y0 + y1); }
  // Overlap of interiors: boxes that only touch do not overlap.
  bool overlaps(const Box& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
  bool contains(const Box& o) const { return o.x0 >= x0 && o.x1 <= x1 && o.y0 >= y0 && o.y1 <= y1; }
  Box inflated(double d) const { return {x0 - d, y0 - d, x1 + d, y1 + d}; }
  // Distance from (x, y) to the nearest point of the box (0 inside).
  double distance_to(double x, double y) const {
    const double dx = std::max({x0 - x, 0.0, x - x1}), dy = std::max({y0 - y, 0.0, y - y1});
    return std::hypot(dx, dy);
  }
};

}  // namespace kvq::plot
