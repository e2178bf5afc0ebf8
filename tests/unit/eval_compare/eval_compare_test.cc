#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/eval/builtin_recipes.h"
#include "kvq/eval/compare.h"
#include "kvq/eval/plot_png.h"
#include "kvq/eval/report.h"
#include "kvq/plot/colour.h"
#include "kvq/quant/formats.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "support/figure_files.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

TEST(Report, SignificanceMarker) {
  EXPECT_EQ(significance_marker(0.049), "*");
  EXPECT_EQ(significance_marker(0.05), "");
  EXPECT_EQ(significance_marker(NAN), "");
  EXPECT_EQ(format_number(1.23456, 3), "1.235");
  EXPECT_EQ(format_number(0.5, 2, true), "+0.50");
  EXPECT_EQ(format_number(NAN, 2), "n/a");
}

SchemeReport row(const std::string& name, double ppl, double p) {
  SchemeReport r;
  r.scheme = name;
  r.kv_format = "fp8";
  r.kv_bits_per_value = 8;
  r.kv_bytes_per_token = 11520;
  r.has_ppl = r.has_kld = true;
  r.ppl = ppl, r.ppl_lo = ppl - 1, r.ppl_hi = ppl + 1;
  r.dppl = 0.25, r.dppl_p = p;
  r.kld = 0.0123, r.kld_se = 0.0004, r.kld_p = p;
  r.top1 = 0.95;
  r.window_nll_sum = {1.5, 2.5};
  r.window_scored = {3, 4};
  return r;
}

TEST(Report, MarkdownTableMarksSignificantDeltas) {
  auto base = row("baseline", 10, 1);
  auto sig = row("KV-INT4-Head", 11, 0.001);
  auto ns = row("KV-FP8-Head", 10.1, 0.4);
  const std::string md = compare_markdown({base, sig, ns}, {"m", 512, 4, 32, 0});
  EXPECT_NE(md.find("| scheme | GSM8K"), std::string::npos);
  EXPECT_NE(
      md.find("| KV-INT4-Head | – | 11.000 [10.000, 12.000] | +0.250* | 0.01230 ± 0.00040* |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| KV-FP8-Head | – | 10.100 [9.100, 11.100] | +0.250 | 0.01230 ± 0.00040 |"),
            std::string::npos)
      << md;
  // Baseline: no delta, no marker.
  EXPECT_NE(md.find("| baseline | – | 10.000 [9.000, 11.000] | – | 0.01230 |"), std::string::npos)
      << md;
}

// A row over 40 windows of 100 scored tokens whose window NLL sums are `sums`.
SchemeReport ranked_row(const std::string& name, const std::vector<double>& sums) {
  SchemeReport r = row(name, 0, 1);
  r.window_nll_sum = sums;
  r.window_scored.assign(sums.size(), 100);
  double total = 0;
  for (double x : sums) total += x;
  r.ppl = std::exp(total / (100.0 * static_cast<double>(sums.size())));
  return r;
}

TEST(Report, RanksByPplAndTestsEachStep) {
  std::vector<double> base(40), clear(40), noise(40), other(39);
  for (std::size_t i = 0; i < base.size(); ++i) {
    base[i] = 300.0 + 10.0 * static_cast<double>(i % 7);  // windows differ a lot
    clear[i] = base[i] + 5.0;                             // every window worse by 0.05 nats/token
    noise[i] = clear[i] + (i % 2 == 0 ? 3.0 : -2.9);      // +0.0005 nats on average: noise
  }
  for (std::size_t i = 0; i < other.size(); ++i) other[i] = base[i] + 1.0;
  auto no_ppl = row("no-ppl", 0, 1);
  no_ppl.has_ppl = false;
  // Given out of order: ranked by PPL, the row without PPL left out.
  const std::vector<SchemeReport> rows = {ranked_row("noise", noise), no_ppl,
                                          ranked_row("baseline", base), ranked_row("clear", clear)};
  const auto ranking = rank_by_ppl(rows);
  ASSERT_EQ(ranking.size(), 3u);
  EXPECT_EQ(ranking[0].scheme, "baseline");
  EXPECT_FALSE(ranking[0].step.has_value());
  EXPECT_EQ(ranking[1].scheme, "clear");
  EXPECT_EQ(ranking[1].above, "baseline");
  ASSERT_TRUE(ranking[1].step.has_value());
  EXPECT_LT(ranking[1].step->p, 0.05);
  EXPECT_GT(ranking[1].step->lo, 0.0);
  EXPECT_NEAR(ranking[1].step->delta, ranking[1].ppl - ranking[0].ppl, 1e-12);
  EXPECT_EQ(ranking[2].scheme, "noise");
  EXPECT_EQ(ranking[2].above, "clear");
  ASSERT_TRUE(ranking[2].step.has_value());
  EXPECT_GT(ranking[2].step->p, 0.05);
  EXPECT_LT(ranking[2].step->lo, 0.0);
  EXPECT_GT(ranking[2].step->hi, 0.0);

  const std::string md = compare_markdown(rows, {"m", 512, 40, 32, 0});
  EXPECT_NE(md.find("| 1 | baseline | "), std::string::npos) << md;
  const auto clear_line = md.substr(md.find("| 2 | clear | "));
  EXPECT_NE(clear_line.find("]* vs baseline |"), std::string::npos) << md;
  const auto noise_line = md.substr(md.find("| 3 | noise | "));
  EXPECT_NE(noise_line.find("] vs clear |"), std::string::npos) << md;
  const auto j = compare_json(rows, {"m", 512, 40, 32, 0});
  ASSERT_EQ(j["ranking_by_ppl"].size(), 3u);
  EXPECT_EQ(j["ranking_by_ppl"][1]["step"]["above"], "baseline");
  EXPECT_FALSE(j["ranking_by_ppl"][0].contains("step"));

  // Rows over other windows cannot be paired: no step test.
  const auto mixed = rank_by_ppl({ranked_row("baseline", base), ranked_row("other", other)});
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_FALSE(mixed[1].step.has_value());
  // One scheme: no ranking section.
  EXPECT_EQ(compare_markdown({ranked_row("baseline", base)}, {"m", 512, 40, 32, 0}).find("Ranked"),
            std::string::npos);
}

TEST(Report, JsonRoundTrip) {
  auto r = row("KV-FP8-Head", 10, 0.01);
  r.has_gsm8k = true;
  r.gsm8k_n = 3;
  r.gsm8k = 1.0 / 3;
  r.gsm8k_correct = {1, 0, 0};
  const SchemeReport back = scheme_report_from_json(to_json(r));
  EXPECT_EQ(back.scheme, r.scheme);
  EXPECT_DOUBLE_EQ(back.ppl, r.ppl);
  EXPECT_DOUBLE_EQ(back.kld_p, r.kld_p);
  EXPECT_EQ(back.window_scored, r.window_scored);
  EXPECT_EQ(back.gsm8k_correct, r.gsm8k_correct);
  EXPECT_THROW(scheme_report_from_json(nlohmann::json::object()), FormatError);
  r.kld_p = NAN;  // untestable (one window): written as null, read back as NaN
  EXPECT_TRUE(std::isnan(scheme_report_from_json(nlohmann::json::parse(to_json(r).dump())).kld_p));
}

TEST(Compare, BaselineRelativeFields) {
  auto base = row("baseline", std::exp(4.0 / 7.0), 1);
  base.window_nll_sum = {1.0, 3.0};
  base.has_gsm8k = true;
  base.gsm8k = 0.5;
  base.gsm8k_correct = {1, 1, 0, 0};
  auto q = base;
  q.scheme = "q";
  q.window_nll_sum = {1.0, 3.0};  // identical NLL: delta 0, p 1
  q.gsm8k = 0.5;
  q.gsm8k_correct = {0, 1, 1, 0};
  compare_to_baseline(q, base, std::vector<double>{0.0, 0.0});
  EXPECT_DOUBLE_EQ(q.dppl, 0.0);
  EXPECT_DOUBLE_EQ(q.dppl_p, 1.0);
  EXPECT_DOUBLE_EQ(q.gsm8k_delta, 0.0);
  EXPECT_DOUBLE_EQ(q.gsm8k_p, 1.0);  // one discordant pair each way

  // Every window worse by the same amount: significant; one window only: no p-value.
  auto worse = base;
  worse.scheme = "w";
  worse.window_nll_sum = {1.3, 3.4};
  worse.ppl = std::exp(4.7 / 7.0);
  compare_to_baseline(worse, base, std::vector<double>{0.1, 0.2});
  EXPECT_GT(worse.dppl, 0.0);
  EXPECT_LT(worse.dppl_lo, worse.dppl_hi);
  auto one = base;
  one.window_nll_sum = {1.3};
  one.window_scored = {3};
  auto base1 = one;
  base1.window_nll_sum = {1.0};
  compare_to_baseline(one, base1, std::vector<double>{0.1});
  EXPECT_TRUE(std::isnan(one.dppl_p));
  EXPECT_TRUE(std::isnan(one.kld_p));
}

TEST(Compare, SchemeTable) {
  EXPECT_EQ(builtin_schemes().front().name, "baseline");
  EXPECT_EQ(builtin_schemes().size(), 31u);
  EXPECT_EQ(find_scheme("kv-fp8-head").name, "KV-FP8-Head");
  EXPECT_FALSE(find_scheme("KV-NVFP4-Calibrated").in_default);
  for (const char* name : {"KV-INT8-Group32", "KV-INT4-Group32", "KV-INT4-Group32+R3"})
    EXPECT_FALSE(find_scheme(name).in_default) << name;
  EXPECT_EQ(find_scheme("KV-INT4-Group32").kv_cache, "int4_g32");
  EXPECT_TRUE(find_scheme("KV-INT4-Group32").recipe.empty());
  EXPECT_EQ(find_scheme("KV-INT4-Group32+R3").recipe, find_scheme("KV-NVFP4+R3").recipe);
  EXPECT_EQ(find_scheme("kv-int8-group32").kv_cache, "int8_g32");
  // kvq's best 4-bit cache is in the default list; its MSE-only step is by name.
  EXPECT_TRUE(find_scheme("KV-INT4-Group32-MSE+R3+KS").in_default);
  EXPECT_EQ(find_scheme("KV-INT4-Group32-MSE+R3+KS").kv_cache, "int4_g32_mse");
  EXPECT_FALSE(find_scheme("KV-INT4-Group32-MSE+R3").in_default);
  EXPECT_FALSE(find_scheme("KV-INT8-Group32+R3+KS").in_default);
  EXPECT_TRUE(find_scheme("KV-INT4-Group32-MSE+R3+KS+Sink1").in_default);
  EXPECT_EQ(find_scheme("KV-INT4-Group32-MSE+R3+KS+Sink1").kv_cache, "int4_g32_mse+sink1");
  EXPECT_EQ(find_scheme("KV-K8V4-Group32+R3+KS+Sink1").kv_cache, "int8_g32/int4_g32_mse+sink1");
  EXPECT_EQ(find_scheme("KV-INT4-Group64-MSE+R3+KS+Sink1+Layers5").kv_cache.substr(0, 40),
            "int4_g64_mse+sink1+k1-3=int5_g64_mse+k9-");
  EXPECT_EQ(find_scheme("KV-NL4-Group32+R3+KS+Sink1").kv_cache, "nl4_g32+sink1");
  EXPECT_EQ(find_scheme("KV-NL3-Group32+R3+KS+Sink1").kv_cache, "nl3_g32+sink1");
  EXPECT_EQ(find_scheme("KV-NL4-Group64+R3+KS+Sink1+Layers5").kv_cache.substr(0, 35),
            "nl4_g64+sink1+k1-3=int5_g64_mse+k9-");
  EXPECT_EQ(find_scheme("KV-NL4-Group16-E4M3+R3+KS+Sink1").kv_cache, "nl4_g16_e4m3+sink1");
  EXPECT_EQ(find_scheme("KV-NL4-Group16-Log+R3+KS+Sink1").kv_cache, "nl4_g16_log+sink1");
  // The allocated plans spend exactly 4.5 bits per value over the default model's 30 layers
  // (each K / V tensor in the last exception that names it, else the base format).
  for (const char* plan : {"KV-NL4-E4M3-Alloc+R3+KS+Sink1", "KV-NL4-Log-Alloc+R3+KS+Sink1"}) {
    const runtime::KvCacheOption o = runtime::parse_kv_cache_option(find_scheme(plan).kv_cache);
    EXPECT_EQ(o.sink_tokens, 1) << plan;
    double bits = 0.0;
    for (int layer = 0; layer < 30; ++layer) {
      for (bool keys : {true, false}) {
        quant::KvFormat f = o.format;
        for (const auto& lf : o.layer_formats)
          if ((keys ? lf.keys : lf.values) && layer >= lf.first && layer <= lf.last) f = lf.format;
        const auto& t = quant::kv_format_traits(f);
        bits += 8.0 * t.block_bytes / t.block_values;
      }
    }
    EXPECT_DOUBLE_EQ(bits / 60.0, 4.5) << plan;
  }
  // Every scheme's --kv-cache string parses (a typo would only show when the scheme runs).
  for (const SchemeDef& s : builtin_schemes()) {
    if (!s.kv_cache.empty()) {
      EXPECT_NO_THROW(runtime::parse_kv_cache_option(s.kv_cache)) << s.name;
    }
  }
  try {
    find_scheme("KV-FP3");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KV-NVFP4"), std::string::npos) << e.what();
  }
  const auto l = parse_scheme_list("baseline, KV-INT8-Head");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[1].name, "KV-INT8-Head");
  EXPECT_EQ(parse_scheme_list("").size(), 13u);  // the default ones
  EXPECT_EQ(parse_scheme_list("KV-NVFP4-Calibrated").size(), 1u);
  EXPECT_THROW(parse_scheme_list("KV-INT8-Head,kv-int8-head"), InvalidArgument);
}

// One source of truth: every recipe in examples/recipes is compiled in byte for byte, and each
// built-in scheme with a recipe runs one of them (none is written out twice). A recipe runs in
// several schemes only with different KV caches (rotate_r2_r3.yaml: nvfp4:head, int4_g32 and
// int4_g32_mse).
TEST(Compare, SchemesAreTheExampleRecipes) {
  const std::filesystem::path dir = std::filesystem::path(KVQ_SOURCE_DIR) / "examples" / "recipes";
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    ++files;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(builtin_recipe(e.path().filename().string()), text) << e.path();
  }
  EXPECT_EQ(builtin_recipes().size(), files);
  std::set<std::string> used;
  for (const SchemeDef& s : builtin_schemes()) {
    if (s.recipe.empty()) continue;
    bool found = false;
    for (const BuiltinRecipe& r : builtin_recipes()) {
      if (r.text == s.recipe) found = used.insert(std::string(r.file) + " " + s.kv_cache).second;
    }
    EXPECT_TRUE(found) << s.name << ": its recipe is not one of examples/recipes (or is reused)";
  }
  EXPECT_THROW(builtin_recipe("kv_fp3.yaml"), InvalidArgument);
}

TEST(Compare, MissingDataNamesPath) {
  try {
    wikitext_path("/nonexistent/data");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/data/wikitext-2-raw/wiki.test.raw"),
              std::string::npos);
  }
}

// A scratch directory and the files of one scatter figure written into it.
struct WrittenScatter {
  test::TempDir dir;
  plot::FigurePaths paths;
  explicit WrittenScatter(const std::vector<ScatterPanel>& panels)
      : paths(write_scatter(panels, dir / "plot")) {}
};

TEST(Plot, WritesPngAndSvgOfTheLaidOutSize) {
  ScatterPanel p{"ΔPPL vs KV bits",
                 "KV bits per value (log₂ axis)",
                 "Mean KLD (nats)",
                 {{4, 0.1, "KV-INT4-Head"},
                  {8, 0.01, "KV-FP8-Head"},
                  {32, 0, "baseline"},
                  {8, NAN, "skipped"}},
                 true};
  const WrittenScatter out({p, p});
  EXPECT_EQ(out.paths.png, out.dir / "plot.png");
  EXPECT_EQ(out.paths.svg, out.dir / "plot.svg");
  const ScatterLayout layout = scatter_layout({p, p});
  const test::DecodedPng img = test::read_png(out.paths.png);
  EXPECT_EQ(img.width, layout.width);
  EXPECT_EQ(img.height, layout.height);
  EXPECT_EQ(layout.panels.size(), 2u);
  int dark = 0;  // the axes and text drew something
  for (const auto& px : img.pixels) dark += px.g < 100;
  EXPECT_GT(dark, 500);
  // The SVG is a whole document and carries the titles (its glyphs are paths).
  const std::string svg = test::read_text(out.paths.svg);
  EXPECT_TRUE(test::is_well_formed_xml(svg));
  EXPECT_NE(svg.find("<title>ΔPPL vs KV bits; ΔPPL vs KV bits</title>"), std::string::npos);
  EXPECT_THROW(scatter_layout({}), InvalidArgument);
}

TEST(Plot, UnwritablePathNamesIt) {
  const ScatterPanel p{"t", "x", "y", {{1, 1, "a"}}};
  try {
    write_scatter({p}, "/nonexistent-dir/plot.png");
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/plot.png"), std::string::npos);
  }
}

TEST(Plot, SeriesColourSchemeFamilies) {
  EXPECT_EQ(series_of({0, 0, "KV-FP8-Head"}), "KV-FP8");
  EXPECT_EQ(series_of({0, 0, "KV-FP8-Tensor"}), "KV-FP8");
  EXPECT_EQ(series_of({0, 0, "QKV-FP8-Head"}), "QKV-FP8");
  EXPECT_EQ(series_of({0, 0, "KV-NVFP4"}), "KV-NVFP4");
  EXPECT_EQ(series_of({0, 0, "baseline"}), "baseline");
  EXPECT_EQ(series_of({0, 0, "KV-FP8-Head", "mine"}), "mine");
}

// Centres of the dots of a one-panel image, left to right. Dots are the only pixels in the first
// series colour (a dot's inside is painted exactly; text, grid and antialiased rims never are);
// points are far enough apart in x that a gap of empty columns separates them.
std::vector<std::pair<double, double>> dot_centres(const test::DecodedPng& img) {
  std::vector<std::pair<double, double>> centres;
  double sx = 0, sy = 0;
  int n = 0;
  for (int x = 0; x <= img.width; ++x) {
    int column = 0;
    for (int y = 0; x < img.width && y < img.height; ++y)
      if (img.at(x, y) == plot::series_colour(0)) sx += x, sy += y, ++n, ++column;
    if (column == 0 && n > 0) centres.push_back({sx / n + 0.5, sy / n + 0.5}), sx = sy = 0, n = 0;
  }
  return centres;
}

std::vector<std::pair<double, double>> dot_centres(const ScatterPanel& p) {
  const WrittenScatter out({p});
  return dot_centres(test::read_png(out.paths.png));
}

// Where a point should land: its axis coordinate mapped linearly onto the panel's plot area.
std::pair<double, double> expected_px(const ScatterFrame& f, double ax, double ay) {
  return {f.area.x0 + (ax - f.x_lo) / (f.x_hi - f.x_lo) * f.area.width(),
          f.area.y1 - (ay - f.y_lo) / (f.y_hi - f.y_lo) * f.area.height()};
}

TEST(Plot, DotsLandAtTheirPixelsOnLinearLog2AndLog10Axes) {
  ScatterPanel p{"t", "x", "y", {{2, 1, ""}, {4, 2, ""}, {8, 4, ""}, {16, 8, ""}}};
  for (bool log2_x : {false, true})
    for (bool log10_y : {false, true}) {
      p.log2_x = log2_x, p.log10_y = log10_y;
      const ScatterFrame f = scatter_layout({p}).panels[0];
      const auto dots = dot_centres(p);
      ASSERT_EQ(dots.size(), 4u) << log2_x << log10_y;
      for (std::size_t i = 0; i < 4; ++i) {
        const auto& pt = p.points[i];
        const auto [ex, ey] =
            expected_px(f, log2_x ? std::log2(pt.x) : pt.x, log10_y ? std::log10(pt.y) : pt.y);
        EXPECT_NEAR(dots[i].first, ex, 0.6) << log2_x << log10_y << " point " << i;
        EXPECT_NEAR(dots[i].second, ey, 0.6) << log2_x << log10_y << " point " << i;
      }
      // Doubling x (and y) is an even step on a log axis and a doubling step on a linear one,
      // whatever the frame says.
      const double dx0 = dots[1].first - dots[0].first, dx1 = dots[2].first - dots[1].first;
      const double dy0 = dots[0].second - dots[1].second, dy1 = dots[1].second - dots[2].second;
      EXPECT_NEAR(dx1 / dx0, log2_x ? 1.0 : 2.0, 0.05);
      EXPECT_NEAR(dy1 / dy0, log10_y ? 1.0 : 2.0, 0.05);
    }
}

TEST(Plot, Log10AxisSpacesDecadesEvenly) {
  ScatterPanel p{"KLD", "BITS", "KLD", {{4, 0.001, ""}, {8, 0.01, ""}, {16, 0.1, ""}}, true};
  p.log10_y = true;
  auto dots = dot_centres(p);
  ASSERT_EQ(dots.size(), 3u);
  EXPECT_GT(dots[0].second, dots[1].second);  // larger values are drawn higher (smaller row)
  EXPECT_NEAR(dots[0].second - dots[1].second, dots[1].second - dots[2].second, 1.0);
  EXPECT_NEAR(dots[1].first - dots[0].first, dots[2].first - dots[1].first, 1.0);  // log2 x
  // The same points on a linear axis are not evenly spaced: the flag is what spaces them.
  p.log10_y = false;
  dots = dot_centres(p);
  ASSERT_EQ(dots.size(), 3u);
  EXPECT_GT(dots[1].second - dots[2].second, 5 * (dots[0].second - dots[1].second));
  // Non-positive values cannot sit on a log axis: skipped, not drawn at a made-up place.
  p.log10_y = true;
  p.points.push_back({32, 0.0, ""});
  EXPECT_EQ(dot_centres(p).size(), 3u);
}

SchemeReport plotted_row(std::string scheme, double bits, double kld, double dppl) {
  SchemeReport r;
  r.scheme = std::move(scheme);
  r.kv_bits_per_value = bits;
  r.has_kld = r.has_ppl = true;
  r.kld = kld;
  r.dppl = dppl;
  return r;
}

TEST(Compare, PlotUsesALogAxisOnlyWhenTheSchemesSpanDecades) {
  // 8-bit and 4-bit schemes together: both panels log, the baseline (0) left out.
  std::vector<SchemeReport> rows = {plotted_row("baseline", 32, 0, 0),
                                    plotted_row("KV-FP8-Head", 8, 0.006, 0.2),
                                    plotted_row("KV-INT4-Head", 4, 0.65, 31.6)};
  std::vector<ScatterPanel> panels = quality_vs_bits_panels(rows);
  ASSERT_EQ(panels.size(), 2u);
  for (const auto& panel : panels) {
    EXPECT_TRUE(panel.log10_y) << panel.title;
    EXPECT_TRUE(panel.log2_x);
    EXPECT_NE(panel.y_label.find("log axis"), std::string::npos);
    ASSERT_EQ(panel.points.size(), 2u);
    EXPECT_EQ(panel.points[0].label, "KV-FP8-Head");
  }
  // A scheme better than the baseline by noise (ΔPPL < 0) keeps that panel linear, with every
  // point; the KLD panel (all positive, two decades) stays log.
  rows[1].dppl = -0.01;
  panels = quality_vs_bits_panels(rows);
  EXPECT_TRUE(panels[0].log10_y);
  EXPECT_FALSE(panels[1].log10_y);
  EXPECT_EQ(panels[1].points.size(), 3u);
  EXPECT_EQ(panels[1].y_label, "ΔPPL (PPL − baseline PPL)");
  // 8-bit schemes only (within a factor of 10): linear, baseline drawn at 0.
  rows[1].dppl = 0.2;
  rows[2] = plotted_row("KV-FP8-Tensor", 8, 0.009, 0.3);
  panels = quality_vs_bits_panels(rows);
  for (const auto& panel : panels) {
    EXPECT_FALSE(panel.log10_y) << panel.title;
    EXPECT_EQ(panel.points.size(), 3u);
  }
  // A row without KLD is not plotted in that panel.
  rows[2].has_kld = false;
  EXPECT_EQ(quality_vs_bits_panels(rows)[0].points.size(), 2u);
  EXPECT_TRUE(quality_vs_bits_panels({}).empty());
}

}  // namespace
}  // namespace kvq::eval
