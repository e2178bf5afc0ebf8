#include "kvq/eval/plot_png.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/plot/canvas.h"
#include "kvq/plot/label_placement.h"
#include "kvq/plot/ticks.h"

namespace kvq::eval {
namespace {

using plot::Align;
using plot::Box;
using plot::Canvas;

// One panel is 480 x 360 px: matplotlib's default figure proportions at a size whose 11-14 px
// text reads without zooming.
constexpr int kPanelW = 480, kPanelH = 360;
constexpr double kLeft = 82, kRight = 18, kTop = 40, kBottom = 54;
constexpr double kDotR = 4.5;
constexpr double kTitlePx = 14, kAxisLabelPx = 12, kTickPx = 11, kPointLabelPx = 11;

// A point in axis units (log2 of x on a log2 axis, log10 of y on a log10 axis).
struct AxisPoint {
  double x, y;
  const ScatterPoint* point;
};

std::vector<AxisPoint> axis_points(const ScatterPanel& p) {
  std::vector<AxisPoint> out;
  for (const auto& pt : p.points) {
    const double x = p.log2_x ? (pt.x > 0 ? std::log2(pt.x) : NAN) : pt.x;
    const double y = p.log10_y ? (pt.y > 0 ? std::log10(pt.y) : NAN) : pt.y;
    if (std::isfinite(x) && std::isfinite(y)) out.push_back({x, y, &pt});
  }
  return out;
}

ScatterFrame frame_of(const ScatterPanel& p, int index) {
  ScatterFrame f;
  const double ox = static_cast<double>(index) * kPanelW;
  f.area = {ox + kLeft, kTop, ox + kPanelW - kRight, kPanelH - kBottom};
  double xl = INFINITY, xh = -INFINITY, yl = INFINITY, yh = -INFINITY;
  for (const auto& a : axis_points(p)) {
    xl = std::min(xl, a.x), xh = std::max(xh, a.x), yl = std::min(yl, a.y), yh = std::max(yh, a.y);
  }
  if (!std::isfinite(xl)) xl = xh = yl = yh = 0.0;
  std::tie(f.x_lo, f.x_hi) = plot::padded_range(xl, xh);
  std::tie(f.y_lo, f.y_hi) = plot::padded_range(yl, yh);
  return f;
}

double to_px_x(const ScatterFrame& f, double x) {
  return f.area.x0 + (x - f.x_lo) / (f.x_hi - f.x_lo) * f.area.width();
}
double to_px_y(const ScatterFrame& f, double y) {
  return f.area.y1 - (y - f.y_lo) / (f.y_hi - f.y_lo) * f.area.height();
}

// Grid lines, tick marks and tick values; a value that would touch the one before it is left
// out (its grid line stays).
void draw_axes(Canvas& cv, const ScatterPanel& p, const ScatterFrame& f) {
  const Box& a = f.area;
  cv.set_font(kTickPx);
  std::optional<Box> last;
  for (double t : plot::linear_ticks(f.x_lo, f.x_hi, 6, p.log2_x ? 1.0 : 0.0)) {
    const double x = std::round(to_px_x(f, t));
    cv.line(x, a.y0, x, a.y1, plot::kGrid);
    cv.line(x, a.y1, x, a.y1 + 4, plot::kAxis);
    const std::string s = plot::tick_label(p.log2_x ? std::exp2(t) : t);
    const double w = cv.text_size(s).w;
    const Box box = {x - w / 2, a.y1 + 6, x + w / 2, a.y1 + 20};
    if (last && last->inflated(3).overlaps(box)) continue;
    last = cv.text(s, x, a.y1 + 6, {0.5, 0}, plot::kText);
  }
  last.reset();
  for (double t :
       p.log10_y ? plot::log10_ticks(f.y_lo, f.y_hi) : plot::linear_ticks(f.y_lo, f.y_hi, 6)) {
    const double y = std::round(to_px_y(f, t));
    cv.line(a.x0, y, a.x1, y, plot::kGrid);
    cv.line(a.x0 - 4, y, a.x0, y, plot::kAxis);
    const std::string s = plot::tick_label(p.log10_y ? std::pow(10.0, t) : t);
    const plot::Size sz = cv.text_size(s);
    const Box box = {a.x0 - 7 - sz.w, y - sz.h / 2, a.x0 - 7, y + sz.h / 2};
    if (last && last->inflated(1).overlaps(box)) continue;
    last = cv.text(s, a.x0 - 7, y, {1, 0.5}, plot::kText);
  }
}

// Title above the plot area, x label below the tick values, y label reading upward at the left
// (wrapped onto a second line when longer than the axis).
void draw_labels(Canvas& cv, const ScatterPanel& p, const ScatterFrame& f) {
  const Box& a = f.area;
  cv.set_font(kTitlePx, true);
  cv.text(p.title, a.cx(), a.y0 - 12, {0.5, 1}, plot::kText);
  cv.set_font(kAxisLabelPx);
  cv.text(p.x_label, a.cx(), a.y1 + 27, {0.5, 0}, plot::kText);
  const std::vector<std::string> lines = cv.wrap(p.y_label, a.height());
  const double line_h = cv.text_size("Ag").h + 1;
  double x = a.x0 - 48 - line_h * static_cast<double>(lines.size() - 1);
  for (const auto& line : lines) {
    cv.text(line, x, a.cy(), {0.5, 0.5}, plot::kText, -90);
    x += line_h;
  }
}

void draw_points(Canvas& cv, const ScatterPanel& p, const ScatterFrame& f,
                 const std::map<std::string, int>& series) {
  const std::vector<AxisPoint> pts = axis_points(p);
  cv.set_font(kPointLabelPx);
  std::vector<plot::LabelRequest> requests;
  for (const auto& a : pts)
    requests.push_back({to_px_x(f, a.x), to_px_y(f, a.y),
                        a.point->label.empty() ? plot::Size{} : cv.text_size(a.point->label)});
  const auto boxes = plot::place_labels(requests, f.area.inflated(-3), kDotR + 1);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto& box = boxes[i];
    const auto& q = requests[i];
    if (box && !plot::label_is_adjacent(q, *box, kDotR + 1)) {
      const double bx = std::clamp(q.x, box->x0, box->x1), by = std::clamp(q.y, box->y0, box->y1);
      cv.line(q.x, q.y, bx, by, plot::kLeader, 0.8);
    }
    if (!box && !pts[i].point->label.empty())
      log::warn("plot '{}': no room for the label '{}'", p.title, pts[i].point->label);
  }
  for (std::size_t i = 0; i < pts.size(); ++i)
    cv.dot(requests[i].x, requests[i].y, kDotR,
           plot::series_colour(series.at(series_of(*pts[i].point))));
  for (std::size_t i = 0; i < pts.size(); ++i)
    if (boxes[i]) cv.text(pts[i].point->label, boxes[i]->x0, boxes[i]->y0, {0, 0}, plot::kText);
}

}  // namespace

std::string series_of(const ScatterPoint& point) {
  if (!point.series.empty()) return point.series;
  const std::string& l = point.label;
  const std::size_t last = l.rfind('-');
  const bool two =
      last != std::string::npos && last > 0 && l.rfind('-', last - 1) != std::string::npos;
  return two ? l.substr(0, last) : l;
}

ScatterLayout scatter_layout(const std::vector<ScatterPanel>& panels) {
  if (panels.empty()) fail<InvalidArgument>("scatter plot: no panels");
  ScatterLayout layout{kPanelW * static_cast<int>(panels.size()), kPanelH, {}};
  for (std::size_t i = 0; i < panels.size(); ++i)
    layout.panels.push_back(frame_of(panels[i], static_cast<int>(i)));
  return layout;
}

plot::FigurePaths write_scatter(const std::vector<ScatterPanel>& panels,
                                const std::filesystem::path& path) {
  const ScatterLayout layout = scatter_layout(panels);
  // Colours by series in order of first appearance, the same in every panel.
  std::map<std::string, int> series;
  for (const auto& p : panels)
    for (const auto& pt : p.points) series.emplace(series_of(pt), static_cast<int>(series.size()));
  std::string title;
  for (const auto& p : panels) title += (title.empty() ? "" : "; ") + p.title;
  return plot::write_figure(path, layout.width, layout.height, title, [&](Canvas& cv) {
    for (std::size_t i = 0; i < panels.size(); ++i) {
      draw_axes(cv, panels[i], layout.panels[i]);
      draw_points(cv, panels[i], layout.panels[i], series);
      cv.outline(layout.panels[i].area, plot::kAxis);
      draw_labels(cv, panels[i], layout.panels[i]);
    }
  });
}

}  // namespace kvq::eval
