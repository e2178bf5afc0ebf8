// A small scatter-plot writer for reports (`kvq compare`'s quality-vs-bits plot): panels of
// labelled points drawn by a tiny rasteriser (axes, ticks, dots) with a built-in 5x7 bitmap font
// for titles, axis labels, tick values and point labels, written as an 8-bit RGB PNG with libpng
// (atomically). Lowercase letters are drawn as capitals; characters without a glyph as '?'.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kvq::eval {

struct ScatterPoint {
  double x = 0.0, y = 0.0;
  std::string label;
};

struct ScatterPanel {
  std::string title, x_label, y_label;
  std::vector<ScatterPoint> points;  // non-finite coordinates are skipped
  bool log2_x = false;               // x axis in powers of two (x must be > 0), ticks at 2^k
  bool log10_y = false;              // y axis in powers of ten (y must be > 0), ticks at 10^k
};

// An RGB image, row-major [height, width, 3].
struct RgbImage {
  int width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};

// Panels side by side. InvalidArgument when there are no panels.
RgbImage render_scatter(const std::vector<ScatterPanel>& panels);
// PNG bytes of an image (IoError from libpng failures).
std::string encode_png(const RgbImage& image);
// render_scatter + encode_png, written atomically to `path`.
void write_scatter_png(const std::vector<ScatterPanel>& panels, const std::filesystem::path& path);

// Width in pixels of `text` in the 5x7 font at `scale` (6 px advance per character).
int text_width(std::string_view text, int scale = 1);

}  // namespace kvq::eval
