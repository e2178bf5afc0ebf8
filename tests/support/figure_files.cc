#include "support/figure_files.h"

#include <cairo.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace kvq::test {

DecodedPng read_png(const std::filesystem::path& path) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> s(
      cairo_image_surface_create_from_png(path.c_str()), cairo_surface_destroy);
  if (cairo_surface_status(s.get()) != CAIRO_STATUS_SUCCESS)
    throw std::runtime_error(path.string() + ": " +
                             cairo_status_to_string(cairo_surface_status(s.get())));
  cairo_surface_flush(s.get());
  DecodedPng img;
  img.width = cairo_image_surface_get_width(s.get());
  img.height = cairo_image_surface_get_height(s.get());
  const int stride = cairo_image_surface_get_stride(s.get());
  const unsigned char* data = cairo_image_surface_get_data(s.get());
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      // cairo's pixels are native-endian 0xAARRGGBB words; our PNGs are opaque.
      std::uint32_t v;
      std::memcpy(&v, data + static_cast<std::ptrdiff_t>(y) * stride + 4 * x, 4);
      img.pixels.push_back({static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 8),
                            static_cast<std::uint8_t>(v)});
    }
  return img;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool is_well_formed_xml(std::string_view xml) {
  std::vector<std::string_view> open;
  int roots = 0;
  for (std::size_t i = xml.find('<'); i != std::string_view::npos; i = xml.find('<', i)) {
    if (xml.substr(i, 4) == "<!--") {
      i = xml.find("-->", i);
      if (i == std::string_view::npos) return false;
      continue;
    }
    const std::size_t end = xml.find('>', i);
    if (end == std::string_view::npos) return false;
    const std::string_view tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.starts_with('?') || tag.starts_with('!')) continue;
    if (tag.starts_with('/')) {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
      continue;
    }
    if (open.empty()) ++roots;
    if (tag.ends_with('/')) continue;
    open.push_back(tag.substr(0, tag.find_first_of(" \t\r\n")));
  }
  return open.empty() && roots == 1;
}

int colour_distance(plot::Rgb a, plot::Rgb b) {
  return std::max({std::abs(a.r - b.r), std::abs(a.g - b.g), std::abs(a.b - b.b)});
}

}  // namespace kvq::test
