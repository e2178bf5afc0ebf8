#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/lifecycle/heatmap_png.h"
#include "kvq/plot/colour.h"
#include "support/figure_files.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

using plot::Box;
using test::colour_distance;

// Pixels in `box` darker than the light greys of antialiased edges: text was drawn there.
int dark_pixels(const test::DecodedPng& img, const Box& box) {
  int n = 0;
  for (int y = static_cast<int>(box.y0); y < static_cast<int>(box.y1); ++y)
    for (int x = static_cast<int>(box.x0); x < static_cast<int>(box.x1); ++x) {
      const plot::Rgb c = img.at(x, y);
      n += c.r < 120 && c.g < 120 && c.b < 120;
    }
  return n;
}

TEST(Heatmap, CellsColourBarAndLabels) {
  // 30 layers x 3 heads of k scales rising with the layer, then a panel with a NaN.
  HeatmapPanel k{"k_scale", {}};
  for (int l = 0; l < 30; ++l) k.rows.push_back({0.1f * l, 0.1f * l + 0.01f, 0.1f * l + 0.02f});
  HeatmapPanel v{"v_scale", {{1.0f, 2.0f}, {3.0f, NAN}}, {"4", "7"}};
  const std::vector<HeatmapPanel> panels{k, v};
  test::TempDir tmp;
  const plot::FigurePaths out = write_heatmap(panels, tmp / "heat.png");
  const HeatmapLayout layout = heatmap_layout(panels);
  const test::DecodedPng img = test::read_png(out.png);
  ASSERT_EQ(img.width, layout.width);
  ASSERT_EQ(img.height, layout.height);
  ASSERT_EQ(layout.panels.size(), 2u);

  const HeatmapFrame& f = layout.panels[0];
  EXPECT_FLOAT_EQ(f.lo, 0.0f);
  EXPECT_NEAR(f.hi, 2.92f, 1e-5);
  auto cell = [&](const HeatmapFrame& fr, int r, int c) {
    return img.at(static_cast<int>(fr.grid.x0 + (c + 0.5) * fr.cell_w),
                  static_cast<int>(fr.grid.y0 + (r + 0.5) * fr.cell_h));
  };
  EXPECT_EQ(cell(f, 0, 0), plot::viridis(0));   // the min, top left (layer 0)
  EXPECT_EQ(cell(f, 29, 2), plot::viridis(1));  // the max, bottom right
  EXPECT_LE(colour_distance(cell(f, 15, 0), plot::viridis(1.5 / 2.92)), 1);
  EXPECT_EQ(cell(layout.panels[1], 1, 1), plot::kNonFinite);

  // The colour bar runs from the map's max at the top to its min at the bottom.
  for (const HeatmapFrame& fr : layout.panels) {
    const Box& b = fr.colour_bar;
    const int x = static_cast<int>(b.cx());
    EXPECT_LE(colour_distance(img.at(x, static_cast<int>(b.y0)), plot::viridis(1)), 1);
    EXPECT_LE(colour_distance(img.at(x, static_cast<int>(b.y1) - 1), plot::viridis(0)), 1);
    EXPECT_LE(colour_distance(img.at(x, static_cast<int>(b.cy())), plot::viridis(0.5)), 4);
    EXPECT_GE(b.height(), 90);
    // Its min and max values are written right of it, the layer labels left of the rows, the
    // head labels under the columns and the title above the grid.
    EXPECT_GT(dark_pixels(img, {b.x1 + 2, b.y0 - 8, b.x1 + 40, b.y0 + 8}), 10);
    EXPECT_GT(dark_pixels(img, {b.x1 + 2, b.y1 - 8, b.x1 + 40, b.y1 + 8}), 10);
    EXPECT_GT(dark_pixels(img, {fr.grid.x0 - 20, fr.grid.y0, fr.grid.x0 - 2, fr.grid.y1}), 10);
    EXPECT_GT(dark_pixels(img, {fr.grid.x0, fr.grid.y1 + 2, fr.grid.x1, fr.grid.y1 + 16}), 5);
    EXPECT_GT(dark_pixels(img, {fr.grid.x0, 0, fr.grid.x1, fr.grid.y0 - 2}), 20);
  }
  // Nothing is written where no label belongs (the check above can fail): the bar's own column
  // right of a mid value has no text between the min and max labels.
  const Box& b = f.colour_bar;
  EXPECT_EQ(dark_pixels(img, {b.x1 + 2, b.y0 + 20, b.x1 + 40, b.y1 - 20}), 0);

  const std::string svg = test::read_text(out.svg);
  EXPECT_TRUE(test::is_well_formed_xml(svg));
  EXPECT_NE(svg.find("<title>k_scale; v_scale</title>"), std::string::npos);
  EXPECT_NE(svg.find("linearGradient"), std::string::npos);  // the bar stays a gradient
}

TEST(Heatmap, BadInputsAndPaths) {
  EXPECT_THROW(heatmap_layout({}), InvalidArgument);
  try {
    write_heatmap({{"k_scale", {{1.0f}}}}, "/nonexistent-dir/heat.png");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/heat.png"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvq::lifecycle
