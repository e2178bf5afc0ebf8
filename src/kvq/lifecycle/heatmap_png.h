// A tiny heatmap plotter for calibration reports: panels of [rows][cols] values, each cell a
// block of pixels coloured on a viridis-like ramp normalised per panel, panels side by side,
// written as an 8-bit RGB PNG with libpng (atomically). No text rendering: the JSON report
// carries the numbers; the image shows the pattern (outlier layers / heads).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kvq::lifecycle {

struct HeatmapPanel {
  std::string title;                     // kept for callers / future labels
  std::vector<std::vector<float>> rows;  // [rows][cols]; rows may differ in length
};

void write_heatmap_png(const std::vector<HeatmapPanel>& panels, const std::filesystem::path& path,
                       int cell_px = 12);

}  // namespace kvq::lifecycle
