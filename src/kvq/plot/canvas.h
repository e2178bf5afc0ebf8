// Drawing on a cairo context in figure pixels: text in DejaVu Sans (found through fontconfig;
// UTF-8, so "ΔPPL" and "log₂" print as written), crisp 1-px lines, dots and filled boxes. The
// same calls draw the PNG and the SVG (figure.h), so both show the same picture.
#pragma once

#include <cairo.h>

#include <string>
#include <string_view>
#include <vector>

#include "kvq/plot/colour.h"
#include "kvq/plot/geometry.h"

namespace kvq::plot {

// Where a text's anchor sits on its box: 0 = left / top, 0.5 = centre, 1 = right / bottom. The
// box is the advance width by the font's ascent + descent, so all lines of one size have one
// height whatever their letters.
struct Align {
  double x = 0, y = 0;
};

class Canvas {
 public:
  explicit Canvas(cairo_t* cr) : cr_(cr) {}
  cairo_t* cr() const { return cr_; }

  void set_font(double px, bool bold = false);
  Size text_size(std::string_view text) const;  // in the current font
  // Draws `text` so that its box's `align` point lands on (x, y); `degrees` rotates it about that
  // point (-90: reading upward, for a y axis label). Returns the box (unrotated text only).
  Box text(std::string_view text, double x, double y, Align align, Rgb colour, double degrees = 0);
  // Splits `text` at spaces into as few lines no wider than `max_width` as it can (a word wider
  // than that gets its own line), of balanced widths.
  std::vector<std::string> wrap(std::string_view text, double max_width) const;

  void fill(const Box& box, Rgb colour);
  void outline(const Box& box, Rgb colour, double width = 1.0);  // centred on pixel edges
  // A line between two points; horizontal and vertical 1-px lines are snapped to pixel centres.
  void line(double x0, double y0, double x1, double y1, Rgb colour, double width = 1.0);
  // A filled dot of radius r with a white rim, so that dots on top of each other stay apart.
  void dot(double x, double y, double r, Rgb colour);

 private:
  void set_colour(Rgb c) const;
  std::vector<std::string> greedy_wrap(std::string_view text, double max_width) const;
  cairo_t* cr_;
};

}  // namespace kvq::plot
