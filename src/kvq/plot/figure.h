// A figure drawn once per output: the same drawing function paints a PNG (cairo image surface)
// and an SVG (cairo SVG surface, glyphs as paths, px units), written side by side atomically.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace kvq::plot {

class Canvas;

using DrawFn = std::function<void(Canvas&)>;

struct FigurePaths {
  std::filesystem::path png, svg;
};

// foo.png and foo.svg for `path` = foo, foo.png or foo.svg; any other extension is kept
// (report.v2 → report.v2.png), so a caller never loses part of a name it chose.
FigurePaths figure_paths(const std::filesystem::path& path);

// The encoded files, in memory. `title` becomes the SVG's <title> (its glyphs are paths, so
// this is where the words are for search and screen readers). IoError when cairo fails.
std::string render_png(int width, int height, const DrawFn& draw);
std::string render_svg(int width, int height, std::string_view title, const DrawFn& draw);

// Both files, each written atomically (temp + rename, io/atomic_write.h): first the PNG, then
// the SVG. IoError naming the path that could not be written.
FigurePaths write_figure(const std::filesystem::path& path, int width, int height,
                         std::string_view title, const DrawFn& draw);

}  // namespace kvq::plot
