#include "kvq/eval/plot_png.h"

#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/io/atomic_write.h"

namespace kvq::eval {
namespace {

// 5x7 glyphs, one byte per row, bit 4 = leftmost column.
struct Glyph {
  char c;
  std::array<std::uint8_t, 7> rows;
};
constexpr Glyph kFont[] = {
    {' ', {0, 0, 0, 0, 0, 0, 0}},
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}},
    {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}},
    {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}},
    {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}},
    {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}},
    {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}},
    {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}},
    {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}},
    {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
    {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}},
    {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}},
    {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}},
    {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}},
    {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}},
    {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}},
    {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'-', {0, 0, 0, 0x1F, 0, 0, 0}},
    {'.', {0, 0, 0, 0, 0, 0x0C, 0x0C}},
    {',', {0, 0, 0, 0, 0x0C, 0x04, 0x08}},
    {'/', {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
    {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'[', {0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E}},
    {']', {0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E}},
    {':', {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0}},
    {'+', {0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 0x1F}},
    {'=', {0, 0, 0x1F, 0, 0x1F, 0, 0}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
    {'*', {0, 0x04, 0x15, 0x0E, 0x15, 0x04, 0}},
    {'|', {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'?', {0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04}},
};

const Glyph& glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const auto& g : kFont)
    if (g.c == c) return g;
  return kFont[std::size(kFont) - 1];  // '?'
}

using Rgb = std::array<std::uint8_t, 3>;
constexpr Rgb kBlack{0, 0, 0}, kGrey{200, 200, 200}, kDot{200, 40, 40}, kText{30, 30, 30};

class Canvas {
 public:
  explicit Canvas(RgbImage& img) : img_(img) {}
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= img_.width || y >= img_.height) return;
    const std::size_t i = (static_cast<std::size_t>(y) * img_.width + x) * 3;
    std::copy(c.begin(), c.end(), img_.pixels.begin() + static_cast<std::ptrdiff_t>(i));
  }
  void hline(int x0, int x1, int y, Rgb c) {
    for (int x = x0; x <= x1; ++x) set(x, y, c);
  }
  void vline(int x, int y0, int y1, Rgb c) {
    for (int y = y0; y <= y1; ++y) set(x, y, c);
  }
  void dot(int cx, int cy, int r, Rgb c) {
    for (int dy = -r; dy <= r; ++dy)
      for (int dx = -r; dx <= r; ++dx)
        if (dx * dx + dy * dy <= r * r) set(cx + dx, cy + dy, c);
  }
  void text(int x, int y, std::string_view s, Rgb c, int scale = 1) {
    for (char ch : s) {
      const auto& g = glyph(ch);
      for (int r = 0; r < 7; ++r)
        for (int col = 0; col < 5; ++col)
          if (g.rows[static_cast<std::size_t>(r)] & (0x10 >> col))
            for (int sy = 0; sy < scale; ++sy)
              for (int sx = 0; sx < scale; ++sx) set(x + col * scale + sx, y + r * scale + sy, c);
      x += 6 * scale;
    }
  }

 private:
  RgbImage& img_;
};

// Axis range with a little padding; a degenerate range is widened.
std::pair<double, double> axis_range(double lo, double hi) {
  if (!(hi > lo)) {
    const double pad = lo == 0.0 ? 1.0 : std::abs(lo) * 0.5;
    return {lo - pad, hi + pad};
  }
  const double pad = 0.08 * (hi - lo);
  return {lo - pad, hi + pad};
}

// "Nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over the range.
double tick_step(double lo, double hi, int n) {
  const double raw = (hi - lo) / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10.0 * p;
}

// Tick positions at multiples of a nice step (at least `min_step`) inside [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, int n, double min_step = 0.0) {
  const double step = std::max(min_step, tick_step(lo, hi, n));
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) ticks.push_back(t);
  return ticks;
}

// Ticks of a log10 axis over [lo, hi] (in decades): 1, 2 and 5 times each power of ten when
// the range is under three decades (else a decade alone would leave too few ticks), else every
// power of ten.
std::vector<double> log10_ticks(double lo, double hi) {
  std::vector<double> ticks;
  const std::vector<double> mantissas =
      hi - lo < 3 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
  for (double k = std::floor(lo); k <= std::ceil(hi); ++k)
    for (double m : mantissas)
      if (const double t = k + std::log10(m); t >= lo && t <= hi) ticks.push_back(t);
  return ticks;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

constexpr int kPanelW = 420, kPanelH = 300;
constexpr int kLeft = 58, kRight = 20, kTop = 34, kBottom = 44;

void draw_panel(Canvas& cv, int ox, const ScatterPanel& p) {
  const int x0 = ox + kLeft, x1 = ox + kPanelW - kRight, y0 = kTop, y1 = kPanelH - kBottom;
  cv.text(ox + (kPanelW - text_width(p.title, 2)) / 2, 6, p.title, kText, 2);
  cv.text(ox + 4, kTop - 12, p.y_label, kText);
  cv.text(x0 + (x1 - x0 - text_width(p.x_label)) / 2, kPanelH - 14, p.x_label, kText);

  // Points in axis coordinates (log2 of x on a log2 axis, log10 of y on a log10 axis).
  std::vector<ScatterPoint> pts;
  for (const auto& pt : p.points) {
    const double x = p.log2_x ? (pt.x > 0 ? std::log2(pt.x) : NAN) : pt.x;
    const double y = p.log10_y ? (pt.y > 0 ? std::log10(pt.y) : NAN) : pt.y;
    if (std::isfinite(x) && std::isfinite(y)) pts.push_back({x, y, pt.label});
  }
  double xl = INFINITY, xh = -INFINITY, yl = INFINITY, yh = -INFINITY;
  for (const auto& pt : pts) {
    xl = std::min(xl, pt.x), xh = std::max(xh, pt.x), yl = std::min(yl, pt.y),
    yh = std::max(yh, pt.y);
  }
  if (!std::isfinite(xl)) xl = xh = yl = yh = 0.0;
  std::tie(xl, xh) = axis_range(xl, xh);
  std::tie(yl, yh) = axis_range(yl, yh);
  auto px = [&](double x) {
    return x0 + static_cast<int>(std::lround((x - xl) / (xh - xl) * (x1 - x0)));
  };
  auto py = [&](double y) {
    return y1 - static_cast<int>(std::lround((y - yl) / (yh - yl) * (y1 - y0)));
  };

  // Grid and ticks.
  for (double t : linear_ticks(xl, xh, 6, p.log2_x ? 1.0 : 0.0)) {
    const int x = px(t);
    cv.vline(x, y0, y1, kGrey);
    cv.vline(x, y1, y1 + 3, kBlack);
    const std::string s = tick_label(p.log2_x ? std::exp2(t) : t);
    cv.text(x - text_width(s) / 2, y1 + 6, s, kText);
  }
  for (double t : p.log10_y ? log10_ticks(yl, yh) : linear_ticks(yl, yh, 5)) {
    const int y = py(t);
    cv.hline(x0, x1, y, kGrey);
    cv.hline(x0 - 3, x0, y, kBlack);
    const std::string s = tick_label(p.log10_y ? std::pow(10.0, t) : t);
    cv.text(x0 - 5 - text_width(s), y - 3, s, kText);
  }
  cv.hline(x0, x1, y1, kBlack);
  cv.vline(x0, y0, y1, kBlack);

  // Points, then labels placed right of the dot (left when they would leave the plot), moved
  // down past labels already placed so that schemes with equal bits stay readable.
  struct Box {
    int x, y, w;
  };
  std::vector<Box> placed;
  for (const auto& pt : pts) {
    const int x = px(pt.x), y = py(pt.y);
    cv.dot(x, y, 3, kDot);
    const int w = text_width(pt.label);
    int lx = x + 6 + w <= ox + kPanelW - 2 ? x + 6 : x - 6 - w;
    // Candidate rows: on the dot, then alternately above and below it, inside the plot area.
    int ly = y - 3;
    for (int k = 0; k < 24; ++k) {
      const int cand = y - 3 + (k % 2 == 1 ? -1 : 1) * ((k + 1) / 2) * 9;
      if (cand < y0 || cand + 7 > y1 - 2) continue;
      bool clash = false;
      for (const auto& b : placed)
        if (lx < b.x + b.w && b.x < lx + w && cand < b.y + 9 && b.y < cand + 9) clash = true;
      if (!clash) {
        ly = cand;
        break;
      }
    }
    placed.push_back({lx, ly, w});
    cv.text(lx, ly, pt.label, kText);
  }
}

void on_png_error(png_structp, png_const_charp msg) { fail<IoError>("PNG encoder: {}", msg); }
void on_png_warning(png_structp, png_const_charp) {}
void append_bytes(png_structp png, png_bytep data, png_size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void flush_noop(png_structp) {}

}  // namespace

int text_width(std::string_view text, int scale) {
  return text.empty() ? 0 : static_cast<int>(text.size()) * 6 * scale - scale;
}

RgbImage render_scatter(const std::vector<ScatterPanel>& panels) {
  if (panels.empty()) fail<InvalidArgument>("scatter plot: no panels");
  RgbImage img;
  img.width = kPanelW * static_cast<int>(panels.size());
  img.height = kPanelH;
  img.pixels.assign(static_cast<std::size_t>(img.width) * img.height * 3, 255);
  Canvas cv(img);
  for (std::size_t i = 0; i < panels.size(); ++i)
    draw_panel(cv, static_cast<int>(i) * kPanelW, panels[i]);
  return img;
}

std::string encode_png(const RgbImage& image) {
  std::string bytes;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, on_png_error, on_png_warning);
  if (!png) fail<IoError>("cannot create a PNG writer");
  png_infop info = png_create_info_struct(png);
  try {
    if (!info) fail<IoError>("cannot create PNG info");
    png_set_write_fn(png, &bytes, append_bytes, flush_noop);
    png_set_IHDR(png, info, static_cast<png_uint_32>(image.width),
                 static_cast<png_uint_32>(image.height), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < image.height; ++y)
      png_write_row(png, const_cast<png_bytep>(image.pixels.data()) +
                             static_cast<std::size_t>(y) * image.width * 3);
    png_write_end(png, nullptr);
  } catch (...) {
    png_destroy_write_struct(&png, &info);
    throw;
  }
  png_destroy_write_struct(&png, &info);
  return bytes;
}

void write_scatter_png(const std::vector<ScatterPanel>& panels, const std::filesystem::path& path) {
  io::write_file_atomic(path, encode_png(render_scatter(panels)));
}

}  // namespace kvq::eval
