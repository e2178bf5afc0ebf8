#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/plot/canvas.h"
#include "kvq/plot/colour.h"
#include "kvq/plot/figure.h"
#include "kvq/plot/label_placement.h"
#include "kvq/plot/ticks.h"
#include "support/figure_files.h"
#include "support/test_paths.h"

namespace kvq::plot {
namespace {

// Every placed label lies inside the bounds and overlaps no other label and no dot.
void expect_clear(const std::vector<LabelRequest>& q, const std::vector<std::optional<Box>>& boxes,
                  const Box& bounds, double r) {
  ASSERT_EQ(boxes.size(), q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (!boxes[i]) continue;
    EXPECT_TRUE(bounds.contains(*boxes[i])) << i;
    for (std::size_t j = 0; j < q.size(); ++j) {
      EXPECT_FALSE(boxes[i]->overlaps(Box{q[j].x, q[j].y, q[j].x, q[j].y}.inflated(r)))
          << "label " << i << " covers dot " << j;
      if (j != i && boxes[j]) {
        EXPECT_FALSE(boxes[i]->overlaps(*boxes[j])) << i << " vs " << j;
      }
    }
  }
}

TEST(LabelPlacement, CrowdedPointsAtOneXNeverOverlap) {
  // Five 8-bit schemes at the same x near the right edge, y within a few pixels of each other
  // (the compare plot's worst case), plus two far away.
  const Box bounds{80, 40, 460, 300};
  const double r = 5.5;
  std::vector<LabelRequest> q;
  for (int i = 0; i < 5; ++i) q.push_back({440, 200 + 1.5 * i, {88, 13}});
  q.push_back({120, 60, {80, 13}});
  q.push_back({160, 150, {60, 13}});
  const auto boxes = place_labels(q, bounds, r);
  for (std::size_t i = 0; i < q.size(); ++i) EXPECT_TRUE(boxes[i].has_value()) << i;
  expect_clear(q, boxes, bounds, r);
  // The right edge is too close: the crowded labels go left of their dots, stacked.
  for (int i = 0; i < 5; ++i) EXPECT_LE(boxes[static_cast<std::size_t>(i)]->x1, 440 - r);
  // A lone dot's label sits right beside it, needing no leader.
  EXPECT_DOUBLE_EQ(boxes[5]->x0, 120 + r + 3);
  EXPECT_DOUBLE_EQ(boxes[5]->cy(), 60);
  EXPECT_TRUE(label_is_adjacent(q[5], *boxes[5], r));
}

TEST(LabelPlacement, ManyIdenticalPointsAndAFullArea) {
  const Box bounds{0, 0, 200, 60};
  std::vector<LabelRequest> q(12, LabelRequest{100, 30, {50, 12}});
  q.push_back({20, 30, {0, 0}});  // no label: nothing placed, but its dot blocks others
  const auto boxes = place_labels(q, bounds, 4);
  expect_clear(q, boxes, bounds, 4);
  EXPECT_FALSE(boxes.back().has_value());
  // 200 x 60 holds at most 4 rows x 3 columns of 50 x 12 labels beside a dot: some cannot be
  // placed, and those come back empty rather than on top of others.
  int placed = 0;
  for (const auto& b : boxes) placed += b.has_value();
  EXPECT_GE(placed, 6);
  EXPECT_LT(placed, 12);
}

TEST(Ticks, RangesAndLabels) {
  const auto lin = linear_ticks(0, 1, 5);
  ASSERT_EQ(lin.size(), 6u);
  for (std::size_t i = 0; i < lin.size(); ++i) EXPECT_NEAR(lin[i], 0.2 * i, 1e-12);
  EXPECT_EQ(linear_ticks(1.5, 4.5, 6, 1.0), (std::vector<double>{2, 3, 4}));
  const auto log = log10_ticks(-3, -1);  // 0.001 .. 0.1 in 1-2-5 steps
  ASSERT_EQ(log.size(), 7u);
  EXPECT_EQ(tick_label(std::pow(10.0, log[1])), "0.002");
  EXPECT_EQ(log10_ticks(-6, 0).size(), 7u);  // wide ranges: decades only
  EXPECT_EQ(tick_label(-1e-17), "0");
  EXPECT_EQ(padded_range(2, 2), (std::pair<double, double>{1, 3}));
}

TEST(Colour, ViridisEndsAndSeries) {
  EXPECT_EQ(viridis(0), (Rgb{0x44, 0x01, 0x54}));
  EXPECT_EQ(viridis(1), (Rgb{0xFD, 0xE7, 0x25}));
  EXPECT_EQ(viridis(-1), viridis(0));
  EXPECT_EQ(viridis(2), viridis(1));
  EXPECT_EQ(viridis(0.5), (Rgb{0x21, 0x90, 0x8C}));
  EXPECT_NE(series_colour(0), series_colour(1));
  EXPECT_EQ(series_colour(10), series_colour(0));
}

TEST(Figure, PathsKeepTheNameAndSwapOnlyImageExtensions) {
  EXPECT_EQ(figure_paths("out/plot").png, "out/plot.png");
  EXPECT_EQ(figure_paths("out/plot.png").svg, "out/plot.svg");
  EXPECT_EQ(figure_paths("out/plot.svg").png, "out/plot.png");
  EXPECT_EQ(figure_paths("out/report.v2").svg, "out/report.v2.svg");
}

TEST(Figure, WritesPngAndSvgOfOneDrawing) {
  test::TempDir tmp;
  const auto paths = write_figure(tmp / "f.png", 120, 50, "a <title> & more", [](Canvas& cv) {
    cv.fill({10, 10, 30, 30}, series_colour(2));
    cv.set_font(12);
    cv.text("ΔPPL", 40, 20, {0, 0.5}, kText);
  });
  const test::DecodedPng png = test::read_png(paths.png);
  EXPECT_EQ(png.width, 120);
  EXPECT_EQ(png.height, 50);
  EXPECT_EQ(png.at(20, 20), series_colour(2));
  EXPECT_EQ(png.at(5, 5), kWhite);
  const std::string svg = test::read_text(paths.svg);
  EXPECT_TRUE(test::is_well_formed_xml(svg));
  EXPECT_NE(svg.find("<title>a &lt;title&gt; &amp; more</title>"), std::string::npos);
  EXPECT_NE(svg.find("width=\"120px\""), std::string::npos);
}

TEST(Figure, UnwritablePathNamesIt) {
  try {
    write_figure("/nonexistent-dir/f", 10, 10, "t", [](Canvas&) {});
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/f.png"), std::string::npos) << e.what();
  }
}

TEST(XmlCheck, CatchesBrokenDocuments) {
  EXPECT_TRUE(test::is_well_formed_xml("<?xml v?><svg a=\"1\"><g><path/></g></svg>"));
  EXPECT_FALSE(test::is_well_formed_xml("<svg><g></svg>"));
  EXPECT_FALSE(test::is_well_formed_xml("<svg><g></g>"));
  EXPECT_FALSE(test::is_well_formed_xml("<svg></svg><svg></svg>"));
}

}  // namespace
}  // namespace kvq::plot
