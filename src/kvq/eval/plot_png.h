// Scatter plots for reports (`kvq compare`'s quality-vs-bits plot): panels side by side, each
// with a title, axis labels, a light grid, tick values, dots coloured by series (matplotlib's
// tab10 cycle) and each dot's label placed beside it where it overlaps nothing (moved labels get
// a leader line). Drawn with cairo (plot/) into foo.png and foo.svg, written atomically.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kvq/plot/figure.h"
#include "kvq/plot/geometry.h"

namespace kvq::eval {

struct ScatterPoint {
  double x = 0.0, y = 0.0;
  std::string label;
  // Points of one series share a colour. Empty: the label's family, the label without its last
  // '-' part when it has two or more ("KV-FP8-Head" and "KV-FP8-Tensor" are "KV-FP8"), else the
  // whole label.
  std::string series;
};

struct ScatterPanel {
  std::string title, x_label, y_label;  // UTF-8
  std::vector<ScatterPoint> points;     // non-finite coordinates are skipped
  bool log2_x = false;                  // x axis in powers of two (x must be > 0), ticks at 2^k
  bool log10_y = false;                 // y axis in powers of ten (y must be > 0), ticks at 10^k
};

// Where a panel landed in the image: its plot area in pixels and the data range that spans it,
// in axis units (log2 x / log10 y where the panel asks for them).
struct ScatterFrame {
  plot::Box area;
  double x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;
};
struct ScatterLayout {
  int width = 0, height = 0;
  std::vector<ScatterFrame> panels;
};

// The colour group of a point (see ScatterPoint::series).
std::string series_of(const ScatterPoint& point);

// InvalidArgument when there are no panels.
ScatterLayout scatter_layout(const std::vector<ScatterPanel>& panels);

// Writes foo.png and foo.svg for `path` = foo, foo.png or foo.svg (plot::figure_paths), the SVG
// titled with the panel titles. InvalidArgument for no panels, IoError naming a path that cannot
// be written.
plot::FigurePaths write_scatter(const std::vector<ScatterPanel>& panels,
                                const std::filesystem::path& path);

}  // namespace kvq::eval
