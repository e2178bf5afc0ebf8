// Dynamic KV scales (KvScales::kDynamic, kvq/model/kv_cache.h): fixed by the first
// write that holds data, from its amax per kv head or per buffer, with compressed-tensors'
// symmetric math; kept by later writes (which saturate); forgotten by reset(); never 0 or NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/model/causal_lm.h"
#include "kvq/model/kv_cache.h"
#include "kvq/quant/formats.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

using quant::KvFormat;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
// What compressed-tensors' symmetric math must give each format with a dynamic stream scale
// (written out here, not read from the codec table): scale = amax / divisor, and stored values
// saturate at [min_code, max_code] · scale; int codes have no NaN (they store 0).
struct ScaleRule {
  KvFormat format;
  float divisor, min_code, max_code;
  bool keeps_nan;
};
constexpr ScaleRule kRules[] = {
    {KvFormat::kFP8E4M3, 448.0f, -448.0f, 448.0f, true},
    {KvFormat::kINT8, 127.5f, -128.0f, 127.0f, false},
    {KvFormat::kINT4, 7.5f, -8.0f, 7.0f, false},
    {KvFormat::kFP8E5M2, 57344.0f, -57344.0f, 57344.0f, true},
};

const ScaleRule& rule(KvFormat f) {
  for (const ScaleRule& r : kRules)
    if (r.format == f) return r;
  ADD_FAILURE() << quant::kv_format_name(f) << " has no expected dynamic rule in kRules";
  static const ScaleRule kNone{};
  return kNone;
}

// The formats of the codec table with a dynamic stream scale (fp8, int8, int4).
std::vector<KvFormat> scaled_formats() {
  std::vector<KvFormat> formats;
  for (const auto& t : quant::kv_format_table())
    if (t.needs_scale && !t.global_scale) formats.push_back(t.format);
  return formats;
}
// Every format with a dynamic parameter (the scaled ones and the global scales of nvfp4,
// nl4_g16_e4m3 and nl4_g16_log) that rows of the tiny models' head_dim 16 hold (nl4_g32_e4m3's
// blocks of 32 run in GroupKvFormats on the default model).
std::vector<KvFormat> dynamic_formats() {
  std::vector<KvFormat> formats;
  for (const auto& t : quant::kv_format_table())
    if (t.needs_scale && 16 % std::max(t.head_dim_multiple, 1) == 0) formats.push_back(t.format);
  return formats;
}
bool global(KvFormat f) { return quant::kv_format_traits(f).global_scale; }

// compressed-tensors' symmetric scale: amax / ((q_max - q_min) / 2).
float ct_scale(KvFormat f, float amax) { return amax / rule(f).divisor; }
// The largest positive code of the format, as a multiple of the scale.
float max_code(KvFormat f) { return rule(f).max_code; }

std::vector<float> uniform(std::size_t n, std::uint64_t seed, float bound) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

KvCacheConfig dynamic_spec(KvFormat f, KvScaleGranularity g) {
  return KvCacheConfig::dynamic(f, g);
}

// states [B, H, n, D]: element (b, h, t, i).
std::size_t at(std::int64_t H, std::int64_t n, std::int64_t D, std::int64_t b, std::int64_t h,
               std::int64_t t, std::int64_t i) {
  return static_cast<std::size_t>(((b * H + h) * n + t) * D + i);
}

TEST(DynamicKvScales, FirstWriteFixesOneScalePerHead) {
  const std::int64_t B = 2, H = 3, D = 32, n = 5;
  for (KvFormat f : scaled_formats()) {
    const std::string name(quant::kv_format_name(f));
    KvCache cache(2, B, H, D, 16, dynamic_spec(f, KvScaleGranularity::kHead));
    EXPECT_TRUE(cache.has_dynamic_scales());
    for (std::int64_t h = 0; h < H; ++h) {
      EXPECT_TRUE(cache.keys(1).dynamic(h));
      EXPECT_TRUE(std::isnan(cache.keys(1).scale(h))) << name << " unfixed before any write";
    }
    auto x = uniform(static_cast<std::size_t>(B * H * n * D), 1, 0.5f);
    // The amax of head 0 sits in the SECOND sequence: the scale covers the whole batch.
    x[at(H, n, D, 1, 0, 3, 7)] = -2.0f;
    x[at(H, n, D, 0, 1, 0, 0)] = 3.0f;
    x[at(H, n, D, 0, 2, 4, 31)] = 0.75f;
    x[at(H, n, D, 1, 2, 1, 1)] = kInf;  // non-finite values do not count
    cache.keys(1).write(0, n, x.data());
    EXPECT_FLOAT_EQ(cache.keys(1).scale(0), ct_scale(f, 2.0f)) << name;
    EXPECT_FLOAT_EQ(cache.keys(1).scale(1), ct_scale(f, 3.0f)) << name;
    EXPECT_FLOAT_EQ(cache.keys(1).scale(2), ct_scale(f, 0.75f)) << name;
    EXPECT_EQ(cache.keys(1).zero_point(0), 0.0f);
    EXPECT_TRUE(std::isnan(cache.values(1).scale(0))) << "V is its own stream";
    EXPECT_TRUE(std::isnan(cache.keys(0).scale(0))) << "layer 0 is its own stream";

    // The stored rows are quantize_row with the fixed scale (the inf saturates).
    const std::vector<float> got = cache.keys(1).read(n);
    std::vector<std::byte> row(quant::kv_row_bytes(f, D));
    std::vector<float> want(static_cast<std::size_t>(D));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < n; ++t) {
          const float s = cache.keys(1).scale(h);
          quant::quantize_row(f, x.data() + at(H, n, D, b, h, t, 0), D, s, 0, 1, row.data());
          quant::dequantize_row(f, row.data(), D, s, 0, 1, want.data());
          for (std::int64_t i = 0; i < D; ++i)
            ASSERT_EQ(got[at(H, n, D, b, h, t, i)], want[static_cast<std::size_t>(i)])
                << name << " b" << b << " h" << h << " t" << t << " i" << i;
        }
    EXPECT_FLOAT_EQ(got[at(H, n, D, 1, 2, 1, 1)], max_code(f) * ct_scale(f, 0.75f)) << name;
  }
}

TEST(DynamicKvScales, PerTensorSharesOneScaleAcrossHeads) {
  const std::int64_t B = 1, H = 4, D = 16, n = 3;
  for (KvFormat f : scaled_formats()) {
    KvCache cache(1, B, H, D, 8, dynamic_spec(f, KvScaleGranularity::kTensor));
    auto x = uniform(static_cast<std::size_t>(B * H * n * D), 2, 1.0f);
    x[at(H, n, D, 0, 2, 1, 5)] = -6.5f;
    cache.values(0).write(0, n, x.data());
    for (std::int64_t h = 0; h < H; ++h) {
      EXPECT_FLOAT_EQ(cache.values(0).scale(h), ct_scale(f, 6.5f)) << quant::kv_format_name(f);
    }
    EXPECT_TRUE(std::isnan(cache.keys(0).scale(0)));
  }
  // nvfp4: the global scale, with the same granularity choice.
  KvCache nv(1, 1, H, D, 8, dynamic_spec(KvFormat::kNVFP4, KvScaleGranularity::kTensor));
  auto x = uniform(static_cast<std::size_t>(H * n * D), 3, 1.0f);
  x[at(H, n, D, 0, 3, 2, 0)] = 5.0f;
  nv.keys(0).write(0, n, x.data());
  for (std::int64_t h = 0; h < H; ++h) {
    EXPECT_FLOAT_EQ(nv.keys(0).global_scale(h), 448.0f * 6.0f / (kNvfp4DynamicHeadroom * 5.0f));
  }
  KvCache nv_head(1, 1, H, D, 8, dynamic_spec(KvFormat::kNVFP4, KvScaleGranularity::kHead));
  nv_head.keys(0).write(0, n, x.data());
  EXPECT_FLOAT_EQ(nv_head.keys(0).global_scale(3), 448.0f * 6.0f / (kNvfp4DynamicHeadroom * 5.0f));
  EXPECT_GT(nv_head.keys(0).global_scale(0), nv_head.keys(0).global_scale(3));
}

TEST(DynamicKvScales, LaterWritesKeepTheScaleAndSaturate) {
  const std::int64_t H = 1, D = 8;
  for (KvFormat f : scaled_formats()) {
    const std::string name(quant::kv_format_name(f));
    KvCache cache(1, 1, H, D, 8, dynamic_spec(f, KvScaleGranularity::kHead));
    std::vector<float> first(static_cast<std::size_t>(D), 0.25f);
    first[3] = -1.0f;
    cache.keys(0).write(0, 1, first.data());
    cache.advance(1);
    const float s = cache.keys(0).scale(0);
    ASSERT_FLOAT_EQ(s, ct_scale(f, 1.0f)) << name;
    // A later token 10x larger: same scale, values clamp to the format's range.
    std::vector<float> big(static_cast<std::size_t>(D), 0.0f);
    big[0] = 10.0f;
    big[1] = -10.0f;
    big[2] = 0.5f;
    cache.keys(0).write(1, 1, big.data());
    cache.advance(1);
    EXPECT_EQ(cache.keys(0).scale(0), s) << name;
    const auto got = cache.keys(0).read(2);
    const float min_code = rule(f).min_code;
    EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(D + 0)], max_code(f) * s) << name;
    EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(D + 1)], min_code * s) << name;
    EXPECT_NEAR(got[static_cast<std::size_t>(D + 2)], 0.5f, 0.5f * s / ct_scale(f, 1.0f) * 0.2f);
    // truncate(n > 0) keeps the scale; reset() and truncate(0) forget it.
    cache.truncate(1);
    EXPECT_EQ(cache.keys(0).scale(0), s);
    cache.reset();
    EXPECT_TRUE(std::isnan(cache.keys(0).scale(0))) << name;
    cache.keys(0).write(0, 1, big.data());
    EXPECT_FLOAT_EQ(cache.keys(0).scale(0), ct_scale(f, 10.0f)) << name;
    cache.advance(1);
    cache.truncate(0);
    EXPECT_TRUE(std::isnan(cache.keys(0).scale(0))) << name;
  }
}

// Sink rows (KvCacheConfig::sink_tokens) are bf16 apart from the packed rows: their values do
// not fix the dynamic scale (an attention sink's outliers would coarsen every other row), they
// read back as bf16, and a write that holds only sink rows leaves the scale for the next one.
TEST(DynamicKvScales, SinkRowsAreBf16AndDoNotFixTheScale) {
  const std::int64_t H = 2, D = 8, n = 3;
  for (KvFormat f : scaled_formats()) {
    const std::string name(quant::kv_format_name(f));
    KvCacheConfig spec = dynamic_spec(f, KvScaleGranularity::kHead);
    spec.sink_tokens = 2;
    KvCache cache(1, 1, H, D, 8, spec);
    // Position 0 holds a large outlier; positions 1 (a sink too) and 2 (packed) are small.
    std::vector<float> x(static_cast<std::size_t>(H * n * D), 0.125f);
    for (std::int64_t h = 0; h < H; ++h) {
      x[at(H, n, D, 0, h, 0, 0)] = 1000.0f + 0.3f;
      x[at(H, n, D, 0, h, 2, 1)] = -0.5f;
    }
    cache.keys(0).write(0, 1, x.data());  // read as [H, 1, D]: position 0 only, a sink row
    EXPECT_TRUE(std::isnan(cache.keys(0).scale(0))) << name << ": fixed from a sink row";
    cache.keys(0).write(0, n, x.data());
    EXPECT_FLOAT_EQ(cache.keys(0).scale(0), ct_scale(f, 0.5f)) << name;
    const std::vector<float> got = cache.keys(0).read(n);
    for (std::int64_t h = 0; h < H; ++h) {
      // bf16(1000.3) = 1000; the packed row decodes on the small scale.
      EXPECT_EQ(got[at(H, n, D, 0, h, 0, 0)], 1000.0f) << name;
      EXPECT_EQ(got[at(H, n, D, 0, h, 1, 0)], 0.125f) << name;
      EXPECT_NEAR(got[at(H, n, D, 0, h, 2, 1)], -0.5f, ct_scale(f, 0.5f)) << name;
    }
  }
}

// Zeros and non-finite values decode the same under any scale, so a write holding nothing else
// leaves the scale unfixed and the next write with data fixes it; rows read back meanwhile use
// scale 1 and never a NaN / zero scale.
TEST(DynamicKvScales, AllZeroFirstWriteLeavesTheScaleForTheNextWrite) {
  const std::int64_t H = 2, D = 16;
  for (KvFormat f : dynamic_formats()) {
    const std::string name(quant::kv_format_name(f));
    KvCache cache(1, 1, H, D, 8, dynamic_spec(f, KvScaleGranularity::kHead));
    const auto param = [&](std::int64_t h) {
      return global(f) ? cache.keys(0).global_scale(h) : cache.keys(0).scale(h);
    };
    std::vector<float> zeros(static_cast<std::size_t>(H * 2 * D), 0.0f);
    zeros[at(H, 2, D, 0, 1, 1, 3)] = kNaN;
    cache.keys(0).write(0, 2, zeros.data());
    cache.advance(2);
    EXPECT_TRUE(std::isnan(param(0))) << name;
    EXPECT_TRUE(std::isnan(param(1))) << name;
    EXPECT_EQ(cache.keys(0).rows(0, 0).scale, 1.0f);
    EXPECT_EQ(cache.keys(0).rows(0, 0).global_scale, 1.0f);
    auto got = cache.keys(0).read(2);
    EXPECT_EQ(got[at(H, 2, D, 0, 0, 1, 5)], 0.0f) << name;
    // Head 1 gets data now, head 0 still nothing but zeros.
    std::vector<float> next(static_cast<std::size_t>(H * D), 0.0f);
    next[static_cast<std::size_t>(D + 2)] = 2.0f;
    cache.keys(0).write(2, 1, next.data());
    cache.advance(1);
    EXPECT_TRUE(std::isnan(param(0))) << name;
    ASSERT_FALSE(std::isnan(param(1))) << name;
    EXPECT_GT(param(1), 0.0f);
    EXPECT_TRUE(std::isfinite(param(1)));
    got = cache.keys(0).read(3);
    EXPECT_EQ(got[at(H, 3, D, 0, 1, 0, 0)], 0.0f) << name << ": earlier zero rows stay 0";
    EXPECT_NEAR(got[at(H, 3, D, 0, 1, 2, 2)], 2.0f, 0.15f) << name;
    // int codes have no NaN (stored as 0); fp8 / nvfp4 keep it; nl4 levels store level 1,
    // times the zero block's scale 0.
    const float nan_back = got[at(H, 3, D, 0, 1, 1, 3)];
    if (global(f) ? f != KvFormat::kNVFP4 : !rule(f).keeps_nan) {
      EXPECT_EQ(nan_back, 0.0f) << name;
    } else {
      EXPECT_TRUE(std::isnan(nan_back)) << name;
    }
  }
}

TEST(DynamicKvScales, ScaleIsNeverZeroOrNaN) {
  // A subnormal amax: amax / 448 underflows to 0, and compressed-tensors' eps rule applies.
  KvCache cache(1, 1, 1, 4, 4, dynamic_spec(KvFormat::kFP8E4M3, KvScaleGranularity::kHead));
  const std::vector<float> tiny = {1e-44f, 0.0f, -1e-45f, 0.0f};
  cache.keys(0).write(0, 1, tiny.data());
  const float s = cache.keys(0).scale(0);
  EXPECT_GT(s, 0.0f);
  EXPECT_TRUE(std::isfinite(s));
  EXPECT_EQ(s, std::numeric_limits<float>::epsilon());
  // nvfp4: 448 · 6 / (4 · 1e-44) is inf; generate_gparam's rule gives 1.
  KvCache nv(1, 1, 1, 4, 4, dynamic_spec(KvFormat::kNVFP4, KvScaleGranularity::kHead));
  nv.keys(0).write(0, 1, tiny.data());
  EXPECT_EQ(nv.keys(0).global_scale(0), 1.0f);
}

TEST(DynamicKvScales, SpecRules) {
  // Given scales are used as given; only empty ones are dynamic.
  KvLayerScales ls;
  ls.k_scale = {0.5f};
  KvCacheConfig mixed_config = KvCacheConfig::dynamic(KvFormat::kINT8, KvScaleGranularity::kHead);
  mixed_config.layers = {ls};
  KvCache mixed(1, 1, 2, 8, 4, mixed_config);
  EXPECT_FALSE(mixed.keys(0).dynamic(0));
  EXPECT_EQ(mixed.keys(0).scale(1), 0.5f);
  EXPECT_TRUE(mixed.values(0).dynamic(1));
  EXPECT_TRUE(mixed.has_dynamic_scales());
  // A NaN given is still "not calibrated", dynamic or not.
  ls.k_scale = {kNaN};
  try {
    KvCacheConfig bad_config = KvCacheConfig::dynamic(KvFormat::kINT8, KvScaleGranularity::kHead);
    bad_config.layers = {ls};
    KvCache bad(1, 1, 2, 8, 4, bad_config);
    ADD_FAILURE() << "NaN scale accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("k_scale[0] is nan"), std::string::npos) << e.what();
  }
  // A zero point with a dynamic (symmetric) scale makes no sense.
  KvLayerScales zp;
  zp.v_zero_point = {3.0f};
  try {
    KvCacheConfig bad_config = KvCacheConfig::dynamic(KvFormat::kINT4, KvScaleGranularity::kTensor);
    bad_config.layers = {zp};
    KvCache bad(1, 1, 2, 8, 4, bad_config);
    ADD_FAILURE() << "zero point with a dynamic scale accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("v_scale is dynamic"), std::string::npos) << e.what();
  }
  // Unscaled formats ignore the request; without it fp8 / int still need scales.
  KvCache f16(1, 1, 2, 8, 4, KvCacheConfig::dynamic(KvFormat::kF16, KvScaleGranularity::kHead));
  EXPECT_FALSE(f16.has_dynamic_scales());
  EXPECT_EQ(f16.keys(0).scale(0), 1.0f);
  EXPECT_THROW(KvCache(1, 1, 2, 8, 4, KvCacheConfig::of(KvFormat::kFP8E4M3)), InvalidArgument);
  EXPECT_TRUE(KvCache(1, 1, 2, 8, 4, KvFormat::kNVFP4).has_dynamic_scales());
  EXPECT_EQ(kv_granularity_name(KvScaleGranularity::kTensor), "tensor");
  EXPECT_EQ(kv_granularity_name(KvScaleGranularity::kHead), "head");
}

// On the tiny model: prefill fixes the scales from the prompt's k / v, and the run equals (bit
// for bit) a run with those scales given as calibrated ones — dynamic only decides the scales.
TEST(DynamicKvScales, ModelRunEqualsTheSameScalesGiven) {
  const auto model = CausalLM::load(kvq::test::test_data_dir() / "tiny_llama" / "gqa");
  const auto& c = model->config();
  std::vector<std::int32_t> prompt, steps;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 5) % static_cast<int>(c.vocab_size));
  for (int i = 0; i < 6; ++i) steps.push_back((i * 53 + 11) % static_cast<int>(c.vocab_size));
  const auto cap = static_cast<std::int64_t>(prompt.size() + steps.size());
  // The prompt's key amax per (layer, kv head), seen by key hooks (before the cache write)
  // while `observe` is set: during the prefill of the dynamic run.
  std::vector<std::vector<float>> k_amax;
  bool observe = false;
  std::vector<ScopedHook> hooks;
  for (AttentionModule* m : model->attention_modules()) {
    hooks.emplace_back(m->register_key_hook([&](AttentionModule& mod, StatesView s) {
      if (!observe) return;
      for (std::int64_t h = 0; h < s.heads; ++h)
        for (std::int64_t t = 0; t < s.tokens; ++t)
          for (std::int64_t i = 0; i < s.head_dim; ++i) {
            float& a =
                k_amax[static_cast<std::size_t>(mod.layer_idx())][static_cast<std::size_t>(h)];
            a = std::max(a, std::fabs(s.row(0, h, t)[i]));
          }
    }));
  }
  for (KvFormat f : dynamic_formats()) {
    for (KvScaleGranularity g : {KvScaleGranularity::kHead, KvScaleGranularity::kTensor}) {
      const std::string name =
          std::string(quant::kv_format_name(f)) + ":" + std::string(kv_granularity_name(g));
      KvCache dyn = model->make_cache(1, cap, dynamic_spec(f, g));
      std::vector<std::vector<float>> a;
      const auto run = [&](KvCache& cache, std::vector<std::vector<float>>& out) {
        k_amax.assign(static_cast<std::size_t>(c.num_hidden_layers),
                      std::vector<float>(static_cast<std::size_t>(c.num_key_value_heads), 0.0f));
        observe = true;
        Tensor l = model->forward(prompt, cache);
        observe = false;
        out.emplace_back(l.f32(), l.f32() + l.numel());
        for (std::int32_t t : steps) {
          const std::int32_t one[1] = {t};
          l = model->forward(one, cache);
          out.emplace_back(l.f32(), l.f32() + l.numel());
        }
      };
      run(dyn, a);
      const auto prompt_amax = k_amax;
      KvCacheConfig given = KvCacheConfig::calibrated(f, {});
      for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
        KvLayerScales ls;
        for (std::int64_t h = 0; h < c.num_key_value_heads; ++h) {
          const float ks = global(f) ? dyn.keys(l).global_scale(h) : dyn.keys(l).scale(h);
          const float vs = global(f) ? dyn.values(l).global_scale(h) : dyn.values(l).scale(h);
          ASSERT_TRUE(std::isfinite(ks) && ks > 0 && std::isfinite(vs) && vs > 0) << name;
          // Fixed by the prefill: the prompt's amax (the decode steps did not move it).
          const auto& la = prompt_amax[static_cast<std::size_t>(l)];
          const float amax = g == KvScaleGranularity::kTensor
                                 ? *std::max_element(la.begin(), la.end())
                                 : la[static_cast<std::size_t>(h)];
          // nvfp4: e2m1's 6 on E4M3's 448; nl4_g16_e4m3: level -127 on it; nl4_g16_log: level
          // -127 on the log scale's 1.
          const float top = f == KvFormat::kNVFP4 ? 6.0f : 127.0f;
          const float byte_max = f == KvFormat::kNL4G16Log ? 1.0f : 448.0f;
          EXPECT_FLOAT_EQ(
              ks, global(f) ? byte_max * top / (kNvfp4DynamicHeadroom * amax) : ct_scale(f, amax))
              << name << " layer " << l << " head " << h;
          if (g == KvScaleGranularity::kTensor && h > 0) {
            EXPECT_EQ(ks, global(f) ? dyn.keys(l).global_scale(0) : dyn.keys(l).scale(0)) << name;
          }
          (global(f) ? ls.k_global_scale : ls.k_scale).push_back(ks);
          (global(f) ? ls.v_global_scale : ls.v_scale).push_back(vs);
        }
        given.layers.push_back(ls);
      }
      KvCache cal = model->make_cache(1, cap, given);
      EXPECT_FALSE(cal.has_dynamic_scales());
      std::vector<std::vector<float>> b;
      run(cal, b);
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << name << " step " << i;
    }
  }
}

}  // namespace
}  // namespace kvq::model
