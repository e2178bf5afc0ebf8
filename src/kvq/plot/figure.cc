#include "kvq/plot/figure.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <memory>
#include <string>

#include "kvq/core/error.h"
#include "kvq/io/atomic_write.h"
#include "kvq/plot/canvas.h"

namespace kvq::plot {
namespace fs = std::filesystem;
namespace {

using SurfacePtr = std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)>;

cairo_status_t append(void* out, const unsigned char* data, unsigned int n) {
  static_cast<std::string*>(out)->append(reinterpret_cast<const char*>(data), n);
  return CAIRO_STATUS_SUCCESS;
}

void check(cairo_status_t status, std::string_view what) {
  if (status != CAIRO_STATUS_SUCCESS)
    fail<IoError>("{}: cairo: {}", what, cairo_status_to_string(status));
}

// Paints white, then runs `draw` with hinting that keeps small text sharp on the PNG (the SVG
// ignores it).
void paint(cairo_surface_t* surface, const DrawFn& draw, std::string_view what) {
  cairo_t* cr = cairo_create(surface);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> guard(cr, cairo_destroy);
  cairo_font_options_t* fo = cairo_font_options_create();
  cairo_font_options_set_antialias(fo, CAIRO_ANTIALIAS_GRAY);
  cairo_font_options_set_hint_style(fo, CAIRO_HINT_STYLE_SLIGHT);
  cairo_font_options_set_hint_metrics(fo, CAIRO_HINT_METRICS_ON);
  cairo_set_font_options(cr, fo);
  cairo_font_options_destroy(fo);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  Canvas canvas(cr);
  draw(canvas);
  check(cairo_status(cr), what);
}

std::string xml_escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

FigurePaths figure_paths(const fs::path& path) {
  fs::path stem = path;
  if (path.extension() == ".png" || path.extension() == ".svg") stem.replace_extension();
  return {fs::path(stem) += ".png", fs::path(stem) += ".svg"};
}

std::string render_png(int width, int height, const DrawFn& draw) {
  SurfacePtr surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height),
                     cairo_surface_destroy);
  check(cairo_surface_status(surface.get()), "PNG surface");
  paint(surface.get(), draw, "PNG drawing");
  std::string bytes;
  check(cairo_surface_write_to_png_stream(surface.get(), append, &bytes), "PNG encoder");
  return bytes;
}

std::string render_svg(int width, int height, std::string_view title, const DrawFn& draw) {
  std::string bytes;
  {
    SurfacePtr surface(cairo_svg_surface_create_for_stream(append, &bytes, width, height),
                       cairo_surface_destroy);
    check(cairo_surface_status(surface.get()), "SVG surface");
    cairo_svg_surface_set_document_unit(surface.get(), CAIRO_SVG_UNIT_PX);
    paint(surface.get(), draw, "SVG drawing");
    cairo_surface_finish(surface.get());  // writes the document
    check(cairo_surface_status(surface.get()), "SVG encoder");
  }
  // The title goes first inside <svg ...>, where SVG wants it.
  const std::size_t svg = bytes.find("<svg");
  const std::size_t open_end = svg == std::string::npos ? svg : bytes.find('>', svg);
  if (open_end == std::string::npos) fail<IoError>("SVG encoder: no <svg> element in its output");
  bytes.insert(open_end + 1, "\n<title>" + xml_escaped(title) + "</title>");
  return bytes;
}

FigurePaths write_figure(const fs::path& path, int width, int height, std::string_view title,
                         const DrawFn& draw) {
  const FigurePaths out = figure_paths(path);
  auto named = [&](const fs::path& p, auto&& render) {
    try {
      return render();
    } catch (const IoError& e) {
      fail<IoError>("{}: {}", p.string(), e.what());
    }
  };
  io::write_file_atomic(out.png, named(out.png, [&] { return render_png(width, height, draw); }));
  io::write_file_atomic(out.svg,
                        named(out.svg, [&] { return render_svg(width, height, title, draw); }));
  return out;
}

}  // namespace kvq::plot
