#include "kvq/lifecycle/heatmap_png.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/plot/canvas.h"
#include "kvq/plot/ticks.h"

namespace kvq::lifecycle {
namespace {

using plot::Box;
using plot::Canvas;

constexpr double kTitlePx = 14, kAxisPx = 11, kLabelPx = 10;
constexpr double kTop = 34, kPad = 14, kBarW = 12, kMinGridW = 96, kMinBarH = 96;

// Every k-th label, k in 1, 2, 5, 10, 20, ... so that labels `extent` apart never touch.
int label_stride(double cell, double extent) {
  for (int k = 1;; k *= 10)
    for (int m : {1, 2, 5})
      if (k * m * cell >= extent) return k * m;
}

std::string row_label(const HeatmapPanel& p, std::size_t r) {
  return r < p.row_labels.size() ? p.row_labels[r] : std::to_string(r);
}

double row_label_width(Canvas& cv, const HeatmapPanel& p) {
  cv.set_font(kLabelPx);
  double w = 0;
  for (std::size_t r = 0; r < p.rows.size(); ++r) w = std::max(w, cv.text_size(row_label(p, r)).w);
  return w;
}

std::size_t column_count(const HeatmapPanel& p) {
  std::size_t c = 1;
  for (const auto& r : p.rows) c = std::max(c, r.size());
  return c;
}

// A panel's frame at x offset `ox`, plus the panel's width. Text sizes come from `cv`.
HeatmapFrame frame_of(Canvas& cv, const HeatmapPanel& p, double ox, int cell_px, double& width) {
  HeatmapFrame f;
  f.lo = INFINITY, f.hi = -INFINITY;
  for (const auto& r : p.rows)
    for (float v : r)
      if (std::isfinite(v)) f.lo = std::min(f.lo, v), f.hi = std::max(f.hi, v);
  if (!(f.lo <= f.hi)) f.lo = f.hi = 0;
  const auto cols = static_cast<double>(column_count(p));
  f.cell_h = cell_px;
  f.cell_w = std::max<double>(cell_px, std::ceil(kMinGridW / cols));
  const double x0 = ox + kPad + 16 + row_label_width(cv, p) + 6;
  f.grid = {x0, kTop, x0 + cols * f.cell_w, kTop + static_cast<double>(p.rows.size()) * f.cell_h};
  f.colour_bar = {f.grid.x1 + 14, kTop, f.grid.x1 + 14 + kBarW,
                  kTop + std::max(f.grid.height(), kMinBarH)};
  cv.set_font(kLabelPx);
  const double value_w =
      std::max(cv.text_size(plot::tick_label(f.lo)).w, cv.text_size(plot::tick_label(f.hi)).w);
  cv.set_font(kTitlePx, true);
  width =
      std::max(f.colour_bar.x1 + 8 + value_w + kPad, f.grid.x0 + cv.text_size(p.title).w + kPad) -
      ox;
  return f;
}

HeatmapLayout layout_with(Canvas& cv, const std::vector<HeatmapPanel>& panels, int cell_px) {
  if (panels.empty()) fail<InvalidArgument>("heatmap: no panels");
  HeatmapLayout layout;
  double x = 0, bottom = 0;
  for (const auto& p : panels) {
    double w = 0;
    layout.panels.push_back(frame_of(cv, p, x, cell_px, w));
    x += w;
    bottom = std::max({bottom, layout.panels.back().grid.y1, layout.panels.back().colour_bar.y1});
  }
  layout.width = static_cast<int>(std::ceil(x));
  layout.height = static_cast<int>(std::ceil(bottom + 44));
  return layout;
}

void draw_cells(Canvas& cv, const HeatmapPanel& p, const HeatmapFrame& f) {
  const float span = f.hi > f.lo ? f.hi - f.lo : 1.0f;
  for (std::size_t r = 0; r < p.rows.size(); ++r)
    for (std::size_t c = 0; c < p.rows[r].size(); ++c) {
      const float v = p.rows[r][c];
      const double x = f.grid.x0 + static_cast<double>(c) * f.cell_w;
      const double y = f.grid.y0 + static_cast<double>(r) * f.cell_h;
      cv.fill({x, y, x + f.cell_w, y + f.cell_h},
              std::isfinite(v) ? plot::viridis((v - f.lo) / span) : plot::kNonFinite);
    }
  cv.outline(f.grid.inflated(1), plot::kAxis);
}

// Row labels left of the rows, column labels under the columns, both thinned to what fits, and
// the axis names.
void draw_grid_labels(Canvas& cv, const HeatmapPanel& p, const HeatmapFrame& f) {
  cv.set_font(kLabelPx);
  const double text_h = cv.text_size("0").h;
  const int row_step = label_stride(f.cell_h, text_h);
  for (std::size_t r = 0; r < p.rows.size(); r += static_cast<std::size_t>(row_step))
    cv.text(row_label(p, r), f.grid.x0 - 5, f.grid.y0 + (static_cast<double>(r) + 0.5) * f.cell_h,
            {1, 0.5}, plot::kText);
  const std::size_t cols = column_count(p);
  const int col_step = label_stride(f.cell_w, cv.text_size(std::to_string(cols - 1)).w + 4);
  for (std::size_t c = 0; cols > 1 && c < cols; c += static_cast<std::size_t>(col_step))
    cv.text(std::to_string(c), f.grid.x0 + (static_cast<double>(c) + 0.5) * f.cell_w, f.grid.y1 + 4,
            {0.5, 0}, plot::kText);
  cv.set_font(kAxisPx);
  cv.text(p.col_axis, f.grid.cx(), f.grid.y1 + (cols > 1 ? 20 : 6), {0.5, 0}, plot::kText);
  const double x = f.grid.x0 - 6 - row_label_width(cv, p) - 8;
  cv.set_font(kAxisPx);
  cv.text(p.row_axis, x, f.grid.cy(), {0.5, 0.5}, plot::kText, -90);
}

// The bar is a linear gradient through the map's stops (the same in the PNG and the SVG), its
// ends pinned to the centres of its first and last pixel rows so those show the map's ends.
void draw_colour_bar(Canvas& cv, const HeatmapFrame& f) {
  const Box& b = f.colour_bar;
  std::unique_ptr<cairo_pattern_t, decltype(&cairo_pattern_destroy)> g(
      cairo_pattern_create_linear(0, b.y1 - 0.5, 0, b.y0 + 0.5), cairo_pattern_destroy);
  constexpr int kStops = 8;
  for (int i = 0; i <= kStops; ++i) {
    const plot::Rgb c = plot::viridis(static_cast<double>(i) / kStops);
    cairo_pattern_add_color_stop_rgb(g.get(), static_cast<double>(i) / kStops, c.r / 255.0,
                                     c.g / 255.0, c.b / 255.0);
  }
  cairo_pattern_set_extend(g.get(), CAIRO_EXTEND_PAD);
  cairo_rectangle(cv.cr(), b.x0, b.y0, b.width(), b.height());
  cairo_set_source(cv.cr(), g.get());
  cairo_fill(cv.cr());
  cv.outline(b.inflated(1), plot::kAxis);
  cv.set_font(kLabelPx);
  cv.line(b.x1 + 1, b.y0 + 0.5, b.x1 + 4, b.y0 + 0.5, plot::kAxis);
  cv.line(b.x1 + 1, b.y1 - 0.5, b.x1 + 4, b.y1 - 0.5, plot::kAxis);
  cv.text(plot::tick_label(f.hi), b.x1 + 6, b.y0, {0, 0.3}, plot::kText);
  cv.text(plot::tick_label(f.lo), b.x1 + 6, b.y1, {0, 0.7}, plot::kText);
}

// A canvas on a 1x1 surface, for measuring text before the figure's size is known.
template <class F>
auto with_scratch_canvas(F&& f) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> s(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1), cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(s.get()), cairo_destroy);
  Canvas cv(cr.get());
  return f(cv);
}

}  // namespace

HeatmapLayout heatmap_layout(const std::vector<HeatmapPanel>& panels, int cell_px) {
  return with_scratch_canvas([&](Canvas& cv) { return layout_with(cv, panels, cell_px); });
}

plot::FigurePaths write_heatmap(const std::vector<HeatmapPanel>& panels,
                                const std::filesystem::path& path, int cell_px) {
  const HeatmapLayout layout = heatmap_layout(panels, cell_px);
  std::string title;
  for (const auto& p : panels) title += (title.empty() ? "" : "; ") + p.title;
  return plot::write_figure(path, layout.width, layout.height, title, [&](Canvas& cv) {
    for (std::size_t i = 0; i < panels.size(); ++i) {
      const HeatmapFrame& f = layout.panels[i];
      cv.set_font(kTitlePx, true);
      cv.text(panels[i].title, f.grid.x0, kTop - 10, {0, 1}, plot::kText);
      draw_cells(cv, panels[i], f);
      draw_grid_labels(cv, panels[i], f);
      draw_colour_bar(cv, f);
    }
  });
}

}  // namespace kvq::lifecycle
