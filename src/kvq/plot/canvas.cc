#include "kvq/plot/canvas.h"

#include <cmath>
#include <numbers>
#include <string>

namespace kvq::plot {

void Canvas::set_colour(Rgb c) const {
  // n / 255 round-trips through cairo's 16-bit colour to exactly n in an 8-bit PNG.
  cairo_set_source_rgb(cr_, c.r / 255.0, c.g / 255.0, c.b / 255.0);
}

void Canvas::set_font(double px, bool bold) {
  cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr_, px);
}

Size Canvas::text_size(std::string_view text) const {
  const std::string s(text);  // cairo wants a NUL-terminated string
  cairo_text_extents_t te;
  cairo_font_extents_t fe;
  cairo_text_extents(cr_, s.c_str(), &te);
  cairo_font_extents(cr_, &fe);
  return {te.x_advance, fe.ascent + fe.descent};
}

Box Canvas::text(std::string_view text, double x, double y, Align align, Rgb colour,
                 double degrees) {
  const std::string s(text);
  const Size sz = text_size(s);
  cairo_font_extents_t fe;
  cairo_font_extents(cr_, &fe);
  cairo_save(cr_);
  cairo_translate(cr_, x, y);
  cairo_rotate(cr_, degrees * std::numbers::pi / 180.0);
  cairo_move_to(cr_, -align.x * sz.w, -align.y * sz.h + fe.ascent);
  set_colour(colour);
  cairo_show_text(cr_, s.c_str());
  cairo_new_path(cr_);  // show_text leaves a current point; the next shape must not join it
  cairo_restore(cr_);
  const double x0 = x - align.x * sz.w, y0 = y - align.y * sz.h;
  return {x0, y0, x0 + sz.w, y0 + sz.h};
}

std::vector<std::string> Canvas::wrap(std::string_view text, double max_width) const {
  // The fewest lines greedy filling needs, then the narrowest width that still needs no more:
  // lines of similar length instead of a full line and a lonely last word.
  const std::size_t n = greedy_wrap(text, max_width).size();
  double lo = 0, hi = max_width;
  for (int i = 0; i < 20; ++i) {
    const double mid = 0.5 * (lo + hi);
    (greedy_wrap(text, mid).size() <= n ? hi : lo) = mid;
  }
  return greedy_wrap(text, hi);
}

std::vector<std::string> Canvas::greedy_wrap(std::string_view text, double max_width) const {
  std::vector<std::string> lines;
  std::string line;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    const std::string joined = line.empty() ? std::string(word) : line + " " + std::string(word);
    if (!line.empty() && text_size(joined).w > max_width) {
      lines.push_back(line);
      line = std::string(word);
    } else {
      line = joined;
    }
    start = end + 1;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

void Canvas::fill(const Box& box, Rgb colour) {
  set_colour(colour);
  cairo_rectangle(cr_, box.x0, box.y0, box.width(), box.height());
  cairo_fill(cr_);
}

void Canvas::outline(const Box& box, Rgb colour, double width) {
  set_colour(colour);
  cairo_set_line_width(cr_, width);
  const double h = 0.5 * width;
  cairo_rectangle(cr_, std::round(box.x0) + h, std::round(box.y0) + h,
                  std::round(box.x1) - std::round(box.x0) - width,
                  std::round(box.y1) - std::round(box.y0) - width);
  cairo_stroke(cr_);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb colour, double width) {
  if (width == 1.0 && x0 == x1) x0 = x1 = std::floor(x0) + 0.5;
  if (width == 1.0 && y0 == y1) y0 = y1 = std::floor(y0) + 0.5;
  set_colour(colour);
  cairo_set_line_width(cr_, width);
  cairo_move_to(cr_, x0, y0);
  cairo_line_to(cr_, x1, y1);
  cairo_stroke(cr_);
}

void Canvas::dot(double x, double y, double r, Rgb colour) {
  cairo_new_sub_path(cr_);
  cairo_arc(cr_, x, y, r + 1.0, 0, 2 * std::numbers::pi);
  set_colour(kWhite);
  cairo_fill(cr_);
  cairo_new_sub_path(cr_);
  cairo_arc(cr_, x, y, r, 0, 2 * std::numbers::pi);
  set_colour(colour);
  cairo_fill(cr_);
}

}  // namespace kvq::plot
