#include "kvq/plot/colour.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

namespace kvq::plot {
namespace {

constexpr Rgb hex(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 8),
          static_cast<std::uint8_t>(v)};
}

}  // namespace

Rgb series_colour(int i) {
  // matplotlib's "tab10", in its order.
  static constexpr std::array<Rgb, 10> kTab10{
      hex(0x1f77b4), hex(0xff7f0e), hex(0x2ca02c), hex(0xd62728), hex(0x9467bd),
      hex(0x8c564b), hex(0xe377c2), hex(0x7f7f7f), hex(0xbcbd22), hex(0x17becf)};
  return kTab10[static_cast<std::size_t>(((i % 10) + 10) % 10)];
}

Rgb viridis(double t) {
  // viridis(9) of matplotlib / viridisLite: evenly spaced from 0 to 1.
  static constexpr std::array<Rgb, 9> kStops{hex(0x440154), hex(0x472D7B), hex(0x3B528B),
                                             hex(0x2C728E), hex(0x21908C), hex(0x27AD81),
                                             hex(0x5DC863), hex(0xAADC32), hex(0xFDE725)};
  if (!(t > 0)) t = 0;  // NaN included: callers colour non-finite values themselves
  const double s = std::min(t, 1.0) * (kStops.size() - 1);
  const std::size_t i = std::min(kStops.size() - 2, static_cast<std::size_t>(s));
  const double f = s - static_cast<double>(i);
  auto mix = [&](std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>(std::lround(a + f * (b - a)));
  };
  const Rgb &a = kStops[i], &b = kStops[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

}  // namespace kvq::plot
