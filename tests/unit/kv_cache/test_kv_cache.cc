// KvCache / KvBuffer: packed storage per quant::KvFormat, per-stream parameters, validation of
// the KvCacheConfig the lifecycle hands over, dynamic nvfp4 global scales, bytes per token.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/model/kv_cache.h"
#include "kvq/quant/formats.h"

namespace kvq::model {
namespace {

using quant::KvFormat;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_states(std::size_t n, std::uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The InvalidArgument message of building a 3-layer, 2-head cache from `spec`.
std::string spec_error(const KvCacheConfig& spec) {
  try {
    KvCache c(3, 1, 2, 16, 8, spec);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

KvCacheConfig int8_spec() {
  KvLayerScales ls{{0.1f}, {0.2f, 0.3f}, {}, {}, {}, {}};
  return KvCacheConfig::calibrated(KvFormat::kINT8, {ls, ls, ls});
}

TEST(KvCacheConfig, ValidSpecsBuild) {
  EXPECT_NO_THROW(KvCache(3, 1, 2, 16, 8, int8_spec()));
  // Formats without a calibrated stream scale: f32 / bf16 / f16, nvfp4 (dynamic global scale),
  // int8_g32 / int4_g32 (in-row scales only: head_dim a multiple of 32).
  for (const auto& t : quant::kv_format_table()) {
    if (t.needs_scale && !t.global_scale) continue;
    const std::int64_t d = t.head_dim_multiple > 0 ? t.head_dim_multiple : 16;
    EXPECT_NO_THROW(KvCache(3, 1, 2, d, 8, t.format)) << t.name;
  }
  KvCacheConfig asym = int8_spec();
  asym.format = KvFormat::kINT4;
  asym.layers[2].v_zero_point = {-8.0f, 7.0f};
  EXPECT_NO_THROW(KvCache(3, 1, 2, 16, 8, asym));
}

TEST(KvCacheConfig, BadSpecsNameLayerAndTensor) {
  KvCacheConfig s = int8_spec();
  s.layers[1].k_scale = {0.1f, kNaN};
  std::string e = spec_error(s);
  EXPECT_NE(e.find("layer 1 k_scale[1] is nan"), std::string::npos) << e;
  EXPECT_NE(e.find("not calibrated"), std::string::npos) << e;

  s = int8_spec();
  s.layers[2].v_scale = {};
  e = spec_error(s);
  EXPECT_NE(e.find("layer 2 has no v_scale"), std::string::npos) << e;

  s = int8_spec();
  s.layers[0].v_scale = {0.1f, 0.2f, 0.3f};
  e = spec_error(s);
  EXPECT_NE(e.find("layer 0 v_scale has 3 values"), std::string::npos) << e;

  s = int8_spec();
  s.layers[0].k_scale = {-1.0f};
  EXPECT_NE(spec_error(s).find("layer 0 k_scale[0] is -1"), std::string::npos);

  s = int8_spec();
  s.layers[1].k_zero_point = {0.5f};
  EXPECT_NE(spec_error(s).find("layer 1 k_zero_point[0] is 0.5"), std::string::npos);

  s = int8_spec();
  s.format = KvFormat::kINT4;
  s.layers[1].v_zero_point = {9.0f};
  EXPECT_NE(spec_error(s).find("expected an integer in [-8, 7]"), std::string::npos);

  s = int8_spec();
  s.format = KvFormat::kFP8E4M3;
  s.layers[0].k_zero_point = {1.0f};
  EXPECT_NE(spec_error(s).find("fp8 has no zero point"), std::string::npos);

  s = KvCacheConfig::calibrated(KvFormat::kNVFP4, std::vector<KvLayerScales>(3));
  s.layers[2].v_global_scale = {kNaN};
  EXPECT_NE(spec_error(s).find("layer 2 v_global_scale[0] is nan"), std::string::npos);

  s = int8_spec();
  s.layers.pop_back();
  EXPECT_NE(spec_error(s).find("scales for 2 layers"), std::string::npos);

  // Every format with a stream scale needs it (nvfp4's global scale is dynamic by default).
  for (const auto& t : quant::kv_format_table()) {
    if (!t.needs_scale || t.global_scale) continue;
    EXPECT_THROW(KvCache(3, 1, 2, 16, 8, t.format), InvalidArgument) << t.name;
  }
}

// Every stream stores quantize_row of its rows with ITS head's parameters; read() decodes them.
TEST(KvCache, WriteEncodesEachStreamWithItsParameters) {
  const std::int64_t B = 2, H = 3, cap = 10;
  for (const auto& t : quant::kv_format_table()) {
    const KvFormat f = t.format;
    const std::int64_t D = std::max(32, t.head_dim_multiple);  // whole blocks of every format
    KvLayerScales ls;
    const bool row_scales_only = t.has_row_scales() && !t.global_scale;  // int8_g32, int4_g32
    if (!row_scales_only) {
      ls.k_scale = {0.05f, 0.1f, 0.2f};
      ls.v_scale = {0.3f};
    }
    if (t.supports_zero_point) ls.k_zero_point = {1.0f, -2.0f, 3.0f};
    if (t.global_scale) ls.k_global_scale = {400.0f, 500.0f, 600.0f};
    KvCache cache(1, B, H, D, cap, KvCacheConfig::calibrated(f, {ls}));
    const auto x = random_states(static_cast<std::size_t>(B * H * 4 * D), 1);
    cache.keys(0).write(3, 4, x.data());  // rows [3, 7)
    const std::vector<float> got = cache.keys(0).read(7);
    std::vector<std::byte> row(quant::kv_row_bytes(f, D));
    std::vector<float> want(static_cast<std::size_t>(D));
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t h = 0; h < H; ++h) {
        // nvfp4 ignores the stream scale (its block scales are in the row).
        const float s = t.has_row_scales() ? 1.0f : ls.k_scale[static_cast<std::size_t>(h)];
        const float zp = t.supports_zero_point ? ls.k_zero_point[static_cast<std::size_t>(h)] : 0;
        const float gs = t.global_scale ? ls.k_global_scale[static_cast<std::size_t>(h)] : 1;
        for (std::int64_t r = 0; r < 4; ++r) {
          quant::quantize_row(f, x.data() + ((b * H + h) * 4 + r) * D, D, s, zp, gs, row.data());
          quant::dequantize_row(f, row.data(), D, s, zp, gs, want.data());
          for (std::int64_t i = 0; i < D; ++i) {
            ASSERT_EQ(got[static_cast<std::size_t>(((b * H + h) * 7 + 3 + r) * D + i)],
                      want[static_cast<std::size_t>(i)])
                << t.name << " b" << b << " h" << h << " r" << r << " i" << i;
          }
        }
      }
    }
    EXPECT_EQ(cache.keys(0).zero_point(2), t.supports_zero_point ? 3.0f : 0.0f);
  }
}

// int8_g32 / int4_g32 keep one scale per 32 values inside each row: a head_dim that does not
// split into whole blocks is refused by name, and so are stream scales (they have none).
TEST(KvCache, GroupFormatsNeedWholeBlocksAndNoStreamScales) {
  for (KvFormat f :
       {KvFormat::kINT8G32, KvFormat::kINT4G32, KvFormat::kINT4G32A, KvFormat::kINT4G32Mse,
        KvFormat::kINT5G32, KvFormat::kINT5G32Mse, KvFormat::kINT4G64Mse, KvFormat::kINT5G64Mse,
        KvFormat::kNL4G32, KvFormat::kNL4G64, KvFormat::kNL3G32, KvFormat::kNL3G64}) {
    const std::string name(quant::kv_format_name(f));
    const std::int64_t block = quant::kv_format_traits(f).head_dim_multiple;
    const std::string e = spec_error(KvCacheConfig::of(f));  // head_dim 16
    EXPECT_NE(
        e.find(fmt::format("KV cache ({}): head_dim 16 is not a multiple of {}", name, block)),
        std::string::npos)
        << e;
    EXPECT_THROW(KvCache(1, 1, 2, block + 16, 4, f), InvalidArgument) << name;
    for (const std::int64_t d : {block, 2 * block, std::int64_t{128}})
      EXPECT_NO_THROW(KvCache(1, 1, 2, d, 4, f)) << name;
    // Dynamic and calibrated configs alike: no per-stream parameter.
    const KvCacheConfig dyn = KvCacheConfig::dynamic(f, KvScaleGranularity::kTensor);
    EXPECT_EQ(dyn.scales, KvScales::kNone);
    EXPECT_FALSE(dyn.granularity.has_value());
    EXPECT_EQ(dyn.label(), name);
    KvCache cache(2, 1, 2, 64, 4, dyn);
    EXPECT_FALSE(cache.has_dynamic_scales());
    EXPECT_EQ(cache.keys(1).rows(0, 1).scale, 1.0f);
    EXPECT_EQ(cache.keys(1).rows(0, 1).global_scale, 1.0f);
    KvLayerScales ls;
    ls.v_scale = {0.5f};
    try {
      KvCache c(1, 1, 2, 64, 4, KvCacheConfig::calibrated(f, {ls}));
      ADD_FAILURE() << name << " accepted a stream scale";
    } catch (const InvalidArgument& ex) {
      EXPECT_NE(std::string(ex.what()).find("layer 0 has a v_scale, but " + name +
                                            " has no stream scale"),
                std::string::npos)
          << ex.what();
    }
  }
}

// bytes_per_token is the format's theoretical size: values plus in-row block scales.
TEST(KvCache, BytesPerTokenIsTheFormatsTheoreticalSize) {
  const std::int64_t layers = 30, H = 3, D = 64;
  for (const auto& t : quant::kv_format_table()) {
    KvCacheConfig spec = KvCacheConfig::of(t.format);
    if (t.needs_scale && !t.global_scale) {
      spec.scales = KvScales::kCalibrated;
      spec.layers.assign(static_cast<std::size_t>(layers), KvLayerScales{{1.0f}, {1.0f}});
    }
    KvCache cache(layers, 1, H, D, 4, spec);
    // bits / 8 per value, plus one E4M3 byte per 16 values for nvfp4 and one fp16 per 32 values
    // for int8_g32 / int4_g32.
    double per_head = D * t.bits / 8.0;
    if (t.format == KvFormat::kNVFP4 || t.format == KvFormat::kNL4G16E4M3 ||
        t.format == KvFormat::kNL4G16Log || t.format == KvFormat::kNL3G16Log)
      per_head += D / 16.0;
    if (t.format == KvFormat::kNL4G32E4M3 || t.format == KvFormat::kINT5G32E4M3 ||
        t.format == KvFormat::kNL4G32Log || t.format == KvFormat::kINT5G32Log ||
        t.format == KvFormat::kNL3G32Log)
      per_head += D / 32.0;
    if (t.format == KvFormat::kINT8G32 || t.format == KvFormat::kINT4G32 ||
        t.format == KvFormat::kINT4G32Mse || t.format == KvFormat::kINT5G32 ||
        t.format == KvFormat::kINT5G32Mse || t.format == KvFormat::kNL4G32 ||
        t.format == KvFormat::kNL3G32)
      per_head += 2 * D / 32.0;
    if (t.format == KvFormat::kINT4G64Mse || t.format == KvFormat::kINT5G64Mse ||
        t.format == KvFormat::kNL4G64 || t.format == KvFormat::kNL3G64)
      per_head += 2 * D / 64.0;
    if (t.format == KvFormat::kINT4G32A) per_head += 4 * D / 32.0;  // fp16 scale + fp16 minimum
    const double theory = 2.0 * layers * H * per_head;
    std::printf("%-6s bytes_per_token %6lld (theory %.0f, %.4f B/value)\n", t.name.data(),
                static_cast<long long>(cache.bytes_per_token()), theory,
                static_cast<double>(cache.bytes_per_token()) / (2.0 * layers * H * D));
    EXPECT_NEAR(static_cast<double>(cache.bytes_per_token()), theory, 0.02 * theory) << t.name;
  }
}

TEST(KvCache, DynamicNvfp4GlobalScaleIsFixedByTheFirstWrite) {
  const std::int64_t H = 2, D = 16;
  KvCache cache(1, 1, H, D, 16, KvFormat::kNVFP4);
  EXPECT_TRUE(std::isnan(cache.keys(0).global_scale(0)));
  auto x = random_states(static_cast<std::size_t>(H * 3 * D), 2);
  x[5] = 3.0f;       // head 0 amax
  x[3 * D] = -5.0f;  // head 1 amax
  cache.keys(0).write(0, 3, x.data());
  EXPECT_FLOAT_EQ(cache.keys(0).global_scale(0), 448.0f * 6.0f / (kNvfp4DynamicHeadroom * 3.0f));
  EXPECT_FLOAT_EQ(cache.keys(0).global_scale(1), 448.0f * 6.0f / (kNvfp4DynamicHeadroom * 5.0f));
  cache.advance(3);
  // A later, larger token does not move it; values up to the headroom still decode closely.
  std::vector<float> y(static_cast<std::size_t>(H * D), 0.0f);
  y[0] = 11.0f;
  cache.keys(0).write(3, 1, y.data());
  EXPECT_FLOAT_EQ(cache.keys(0).global_scale(0), 448.0f * 6.0f / (kNvfp4DynamicHeadroom * 3.0f));
  EXPECT_NEAR(cache.keys(0).read(4)[3 * D], 11.0f, 11.0f * 0.1f);
  // reset() / truncate(0) forget it: the next first write fixes it again.
  cache.reset();
  EXPECT_TRUE(std::isnan(cache.keys(0).global_scale(0)));
  for (float& v : x) v *= 2.0f;
  cache.keys(0).write(0, 3, x.data());
  EXPECT_FLOAT_EQ(cache.keys(0).global_scale(0), 448.0f * 6.0f / (kNvfp4DynamicHeadroom * 6.0f));
  cache.advance(3);
  cache.truncate(0);
  EXPECT_TRUE(std::isnan(cache.keys(0).global_scale(1)));
  // Calibrated global scales survive reset().
  KvLayerScales ls;
  ls.k_global_scale = {100.0f};
  KvCache cal(1, 1, H, D, 16, KvCacheConfig::calibrated(KvFormat::kNVFP4, {ls}));
  cal.reset();
  EXPECT_EQ(cal.keys(0).global_scale(1), 100.0f);
  EXPECT_TRUE(std::isnan(cal.values(0).global_scale(1)));  // v stays dynamic
}

}  // namespace
}  // namespace kvq::model

namespace kvq::model {
namespace {

// A sliding-window layer's ring (kv_cache.h): window - 1 + window_chunk rows, position t in row
// t % rows; global layers and windows that reach the capacity keep full-length buffers.
TEST(KvCacheRing, SizesRowsFromWindowAndChunk) {
  KvCacheConfig kv = KvCacheConfig::of(KvFormat::kINT8G32);
  kv.window_chunk = 4;
  const std::vector<std::int64_t> windows = {0, 6, 100};
  const KvCache c(3, 2, 2, 32, 50, kv, windows);
  EXPECT_EQ(c.rows(0), 50);
  EXPECT_EQ(c.rows(1), 9);
  EXPECT_EQ(c.rows(2), 50);  // 99 + 4 > 50: no ring
  EXPECT_FALSE(c.keys(0).ring());
  EXPECT_TRUE(c.keys(1).ring());
  EXPECT_TRUE(c.values(1).ring());
  const std::int64_t row = static_cast<std::int64_t>(quant::kv_row_bytes(KvFormat::kINT8G32, 32));
  EXPECT_EQ(c.allocated_bytes(), (50 + 9 + 50) * 2 * 2 * 2 * row);  // rows · batch · heads · K+V
  EXPECT_EQ(KvCache::allocated_bytes(3, 2, 2, 32, 50, kv, windows), c.allocated_bytes());
  EXPECT_EQ(c.attended_bytes(30), (30 + 6 + 30) * 2 * 2 * row);  // per sequence
  EXPECT_EQ(KvCache::layer_rows(50, 6, 0), 50);                  // window_chunk 0: no rings
  EXPECT_EQ(KvCache::layer_rows(50, 0, 4), 50);
  EXPECT_EQ(KvCache::layer_rows(50, 6, 4), 9);
}

TEST(KvCacheRing, WritesWrapAndReadsTheLastPositions) {
  for (KvFormat f : {KvFormat::kF32, KvFormat::kINT8, KvFormat::kINT4G32}) {
    KvCacheConfig kv = KvCacheConfig::dynamic(f);
    kv.window_chunk = 3;
    KvCache ring(1, 1, 2, 32, 40, kv, std::vector<std::int64_t>{4});  // 6 rows
    KvCache full(1, 1, 2, 32, 40, kv);
    ASSERT_EQ(ring.rows(0), 6);
    const std::vector<float> x = random_states(2 * 20 * 32, 5);  // [1, 2, 20, 32]
    // Fix the dynamic scales from all 20 rows, then store 3 at a time as the model does.
    for (std::int64_t first = 0; first < 20; first += 3) {
      const std::int64_t n = std::min<std::int64_t>(3, 20 - first);
      ring.keys(0).write(0, 20, x.data(), first, n);
    }
    full.keys(0).write(0, 20, x.data());
    EXPECT_EQ(ring.keys(0).scale(1), full.keys(0).scale(1)) << quant::kv_format_name(f);
    ring.advance(20);
    full.advance(20);
    EXPECT_EQ(ring.first_position(0), 14);
    EXPECT_EQ(ring.keys(0).read(14, 6), full.keys(0).read(14, 6)) << quant::kv_format_name(f);
    // Position 14 sits in row 14 % 6 = 2: the view's rows run 2..5, then wrap to 0..1.
    const kernels::KvRowsView v = ring.keys(0).rows(0, 1);
    EXPECT_EQ(v.ring_rows, 6);
    EXPECT_EQ(v.run(14, 6), 4);
    EXPECT_EQ(v.row(18), v.data);           // 18 % 6 = 0
    EXPECT_EQ(v.f32_rows(14, 6), nullptr);  // wraps: no single pointer
    // More positions in one write than the ring holds would overwrite its own rows: a caller's
    // bug (the model splits long writes), so an internal check.
    EXPECT_DEATH(ring.keys(0).write(20, 7, x.data()), "7 positions into a ring of 6 rows");
  }
}

TEST(KvCacheRing, TruncateKeepsWhatTheNextTokenSees) {
  KvCacheConfig kv = KvCacheConfig::of(KvFormat::kF32);
  kv.window_chunk = 4;
  KvCache c(2, 1, 1, 16, 64, kv, std::vector<std::int64_t>{0, 5});  // layer 1: 8 rows
  const std::vector<float> x = random_states(30 * 16, 3);
  for (std::int64_t l = 0; l < 2; ++l) {
    const std::int64_t keep = std::min<std::int64_t>(30, c.rows(l));  // a ring's last rows
    c.keys(l).write(0, 30, x.data(), 30 - keep, keep);
    c.values(l).write(0, 30, x.data(), 30 - keep, keep);
  }
  c.advance(30);
  // Rows hold positions [22, 30); position n sees [n - 4, n): n >= 26.
  EXPECT_TRUE(c.can_truncate(26));
  EXPECT_FALSE(c.can_truncate(25));
  EXPECT_TRUE(c.can_truncate(0));  // reset
  EXPECT_FALSE(c.can_truncate(31));
  try {
    c.truncate(25);
    ADD_FAILURE() << "truncate(25) passed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ring of the last 8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 4 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.length(), 30);
  c.truncate(26);
  EXPECT_EQ(c.length(), 26);
}

TEST(KvCacheRing, BadWindowsAreRefused) {
  KvCacheConfig kv = KvCacheConfig::of(KvFormat::kF32);
  EXPECT_THROW(KvCache(2, 1, 1, 16, 8, kv, std::vector<std::int64_t>{4}), InvalidArgument);
  EXPECT_THROW(KvCache(2, 1, 1, 16, 8, kv, std::vector<std::int64_t>{4, -1}), InvalidArgument);
  kv.window_chunk = -2;
  EXPECT_THROW(KvCache(2, 1, 1, 16, 8, kv), InvalidArgument);
}

}  // namespace
}  // namespace kvq::model

namespace kvq::model {
namespace {

// A prefill-sized write (>= 256 rows) splits its rows over threads: the bytes are the same on 1
// and 2 threads, for a searched-scale format and with a bf16 sink row.
TEST(KvCache, LargeWritesGiveTheSameBytesOnAnyThreadCount) {
  constexpr std::int64_t kHeads = 3, kDim = 64, kTokens = 300;
  KvCacheConfig spec = KvCacheConfig::of(KvFormat::kNL4G32);
  spec.sink_tokens = 1;
  const std::vector<float> x =
      random_states(static_cast<std::size_t>(2 * kHeads * kTokens * kDim), 77);  // [2, H, T, D]
  std::vector<std::vector<std::byte>> rows;
  std::vector<std::vector<float>> decoded;
  const int before = omp_get_max_threads();
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    KvCache cache(1, 2, kHeads, kDim, kTokens, spec);
    cache.keys(0).write(0, kTokens, x.data());
    std::vector<std::byte> all;  // the packed rows (position 0, the sink, is stored apart)
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t h = 0; h < kHeads; ++h) {
        const kernels::KvRowsView v = cache.keys(0).rows(b, h);
        for (std::int64_t t = 1; t < kTokens; ++t)
          all.insert(all.end(), v.row(t), v.row(t) + cache.keys(0).row_bytes());
      }
    }
    rows.push_back(std::move(all));
    decoded.push_back(cache.keys(0).read(kTokens));  // the sink row included
  }
  omp_set_num_threads(before);
  EXPECT_EQ(rows[0], rows[1]);
  EXPECT_EQ(decoded[0], decoded[1]);
}

}  // namespace
}  // namespace kvq::model
