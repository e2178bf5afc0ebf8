// Reading back the figures kvq writes (plot/figure.h): PNG pixels decoded with cairo, and a
// small well-formedness check for the SVG text.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/plot/colour.h"

namespace kvq::test {

struct DecodedPng {
  int width = 0, height = 0;
  std::vector<plot::Rgb> pixels;  // [height, width], row-major
  plot::Rgb at(int x, int y) const {
    return pixels[static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                  static_cast<std::size_t>(x)];
  }
};

// The PNG at `path` (fails the test's assertion by throwing std::runtime_error if cairo cannot
// read it).
DecodedPng read_png(const std::filesystem::path& path);

std::string read_text(const std::filesystem::path& path);

// True when `xml` is one element with properly nested, matching start and end tags (comments,
// the <?xml?> declaration and self-closing tags allowed). Enough to catch a truncated or
// spliced document; not a validating parser.
bool is_well_formed_xml(std::string_view xml);

// Largest per-channel difference.
int colour_distance(plot::Rgb a, plot::Rgb b);

}  // namespace kvq::test
