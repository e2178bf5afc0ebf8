// Heatmaps for calibration reports: panels of [rows][cols] values side by side, each with its
// title, row labels (layers) at the left, column labels (heads) below, cells coloured on
// viridis normalised per panel, and a colour bar with the panel's min and max beside it. Drawn
// with cairo (plot/) into foo.png and foo.svg, written atomically.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kvq/plot/figure.h"
#include "kvq/plot/geometry.h"

namespace kvq::lifecycle {

struct HeatmapPanel {
  std::string title;                     // UTF-8, e.g. "k_scale"
  std::vector<std::vector<float>> rows;  // [rows][cols]; rows may differ in length (gaps blank)
  std::vector<std::string> row_labels;   // one per row; empty: 0, 1, 2, ...
  std::string row_axis = "layer", col_axis = "head";
};

// Where a panel landed: its cell grid, one cell's size, its colour bar (viridis(1) at the top,
// viridis(0) at the bottom) and the values the ends of the bar stand for. NaN / Inf cells are
// drawn red, outside the map.
struct HeatmapFrame {
  plot::Box grid, colour_bar;
  double cell_w = 0, cell_h = 0;
  float lo = 0, hi = 0;  // finite min and max (0, 0 when there is none)
};
struct HeatmapLayout {
  int width = 0, height = 0;
  std::vector<HeatmapFrame> panels;
};

// Cells are `cell_px` tall and at least that wide (wider when a panel has few columns, so its
// labels fit). InvalidArgument when there are no panels.
HeatmapLayout heatmap_layout(const std::vector<HeatmapPanel>& panels, int cell_px = 12);

// Writes foo.png and foo.svg for `path` = foo, foo.png or foo.svg (plot::figure_paths).
// InvalidArgument for no panels, IoError naming a path that cannot be written.
plot::FigurePaths write_heatmap(const std::vector<HeatmapPanel>& panels,
                                const std::filesystem::path& path, int cell_px = 12);

}  // namespace kvq::lifecycle
