#include "kvq/lifecycle/heatmap_png.h"

#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/io/atomic_write.h"

namespace kvq::lifecycle {
namespace {

// Five viridis anchor colours, linearly interpolated.
std::array<std::uint8_t, 3> ramp(float t) {
  static constexpr float kStops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  if (!std::isfinite(t)) return {255, 0, 0};  // NaN / Inf cells stand out in red
  t = std::clamp(t, 0.0f, 1.0f) * 4.0f;
  const int i = std::min(3, static_cast<int>(t));
  const float f = t - static_cast<float>(i);
  std::array<std::uint8_t, 3> c{};
  for (int k = 0; k < 3; ++k)
    c[k] = static_cast<std::uint8_t>(
        std::lround(kStops[i][k] + f * (kStops[i + 1][k] - kStops[i][k])));
  return c;
}

void on_png_error(png_structp, png_const_charp msg) {
  throw IoError(std::string("libpng: ") + msg);
}
void on_png_warning(png_structp, png_const_charp) {}
void append_bytes(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  out->append(reinterpret_cast<const char*>(data), n);
}
void flush_noop(png_structp) {}

}  // namespace

void write_heatmap_png(const std::vector<HeatmapPanel>& panels, const std::filesystem::path& path,
                       int cell_px) {
  if (panels.empty()) fail<InvalidArgument>("heatmap {}: no panels", path.string());
  constexpr int kGap = 8;
  int width = kGap, height = 0;
  std::vector<int> cols(panels.size());
  for (std::size_t p = 0; p < panels.size(); ++p) {
    int c = 0;
    for (const auto& r : panels[p].rows) c = std::max(c, static_cast<int>(r.size()));
    cols[p] = std::max(c, 1);
    width += cols[p] * cell_px + kGap;
    height = std::max(height, static_cast<int>(panels[p].rows.size()) * cell_px);
  }
  height += 2 * kGap;
  std::vector<std::uint8_t> image(static_cast<std::size_t>(width) * height * 3, 255);
  int x0 = kGap;
  for (std::size_t p = 0; p < panels.size(); ++p) {
    float lo = INFINITY, hi = -INFINITY;
    for (const auto& r : panels[p].rows)
      for (float v : r)
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    const float span = hi > lo ? hi - lo : 1.0f;
    for (std::size_t y = 0; y < panels[p].rows.size(); ++y)
      for (std::size_t x = 0; x < panels[p].rows[y].size(); ++x) {
        const auto c = ramp((panels[p].rows[y][x] - lo) / span);
        for (int dy = 0; dy < cell_px; ++dy)
          for (int dx = 0; dx < cell_px; ++dx) {
            const std::size_t px =
                static_cast<std::size_t>(kGap + y * cell_px + dy) * width +
                static_cast<std::size_t>(x0 + static_cast<int>(x) * cell_px + dx);
            std::copy(c.begin(), c.end(), image.begin() + static_cast<std::ptrdiff_t>(px * 3));
          }
      }
    x0 += cols[p] * cell_px + kGap;
  }

  std::string bytes;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, on_png_error, on_png_warning);
  if (!png) fail<IoError>("{}: cannot create a PNG writer", path.string());
  png_infop info = png_create_info_struct(png);
  try {
    if (!info) fail<IoError>("{}: cannot create PNG info", path.string());
    png_set_write_fn(png, &bytes, append_bytes, flush_noop);
    png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
                 PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; ++y)
      png_write_row(png, image.data() + static_cast<std::size_t>(y) * width * 3);
    png_write_end(png, nullptr);
  } catch (...) {
    png_destroy_write_struct(&png, &info);
    throw;
  }
  png_destroy_write_struct(&png, &info);
  io::write_file_atomic(path, bytes);
}

}  // namespace kvq::lifecycle
