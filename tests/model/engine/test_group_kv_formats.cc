// The group KV formats (int8_g32, int4_g32, int4_g32a: one fp16 scale (and minimum) per 32
// values inside each row, from that row) on the default model (SmolLM2-135M-Instruct, head_dim 64):
// a packed cache computes exactly what the scalar codec's quantize-dequantize computes when applied
// by key / value hooks to the same rows of an fp32 cache (fake quantization). Both see identical
// dequantized values and the attention kernels decode each row to exactly those values in the fp32
// kernels' order, so prefill and decode logits are bit-identical. The tiny test models (head_dim
// 16) cannot hold a 32-value block: refused by name.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/formats.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

using quant::KvFormat;

constexpr KvFormat kGroupFormats[] = {
    KvFormat::kINT8G32, KvFormat::kINT4G32,    KvFormat::kINT4G32A,   KvFormat::kINT4G32Mse,
    KvFormat::kINT5G32, KvFormat::kINT5G32Mse, KvFormat::kINT4G64Mse, KvFormat::kINT5G64Mse,
    KvFormat::kNL4G32,  KvFormat::kNL4G64,     KvFormat::kNL3G32,     KvFormat::kNL3G64};

class GroupKvFormats : public ::testing::Test {
 protected:
  void SetUp() override {
    KVQ_REQUIRE_DEFAULT_MODEL();
    model_ = CausalLM::load(kvq::test::default_model_dir());
    const auto vocab = static_cast<int>(model_->config().vocab_size);
    for (int i = 0; i < 24; ++i) prompt_.push_back((i * 937 + 51) % vocab);
    for (int i = 0; i < 16; ++i) steps_.push_back((i * 5303 + 113) % vocab);
  }

  // Logits of prefill (all positions) followed by one row per decode step.
  std::vector<float> run(const KvCacheConfig& config) {
    KvCache cache = model_->make_cache(1, 64, config);
    std::vector<float> out = model_->forward(prompt_, cache, LogitsMode::kAll).to_f32_vector();
    for (std::int32_t t : steps_) {
      const std::vector<float> l = model_->forward(std::span(&t, 1), cache).to_f32_vector();
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }

  // Every k / v row replaced by dequantize_row(quantize_row(row)) in the format; fp32 cache.
  std::vector<float> run_fake_quant(KvFormat f) {
    std::vector<ScopedHook> hooks;
    for (AttentionModule* m : model_->attention_modules()) {
      auto hook = [f](AttentionModule&, StatesView s) {
        std::vector<std::byte> row(quant::kv_row_bytes(f, s.head_dim));
        for (std::int64_t b = 0; b < s.batch; ++b)
          for (std::int64_t h = 0; h < s.heads; ++h)
            for (std::int64_t t = 0; t < s.tokens; ++t) {
              float* x = s.row(b, h, t);
              quant::quantize_row(f, x, s.head_dim, 1.0f, 0.0f, 1.0f, row.data());
              quant::dequantize_row(f, row.data(), s.head_dim, 1.0f, 0.0f, 1.0f, x);
            }
      };
      hooks.emplace_back(m->register_key_hook(hook));
      hooks.emplace_back(m->register_value_hook(hook));
    }
    return run(KvCacheConfig{});
  }

  std::unique_ptr<CausalLM> model_;
  std::vector<std::int32_t> prompt_, steps_;
};

TEST_F(GroupKvFormats, PackedCacheMatchesFakeQuantizedFp32Cache) {
  const std::vector<float> plain = run(KvCacheConfig{});
  const std::size_t prefill_n =
      prompt_.size() * static_cast<std::size_t>(model_->config().vocab_size);
  for (KvFormat f : kGroupFormats) {
    const std::string name(quant::kv_format_name(f));
    const std::vector<float> a = run_fake_quant(f);
    const KvCacheConfig packed = KvCacheConfig::of(f);
    EXPECT_EQ(packed.scales, KvScales::kNone) << name;
    const std::vector<float> b = run(packed);
    ASSERT_EQ(a.size(), b.size());
    float amax = 0.0f, pre = 0.0f, dec = 0.0f, vs_plain = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << name << " logit " << i;
      amax = std::max(amax, std::fabs(a[i]));
      float& worst = i < prefill_n ? pre : dec;
      worst = std::max(worst, std::fabs(a[i] - b[i]));
      vs_plain = std::max(vs_plain, std::fabs(a[i] - plain[i]));
    }
    std::printf("%-9s max|logit| %.3f  prefill %.2e  decode %.2e  (quant effect %.2e)\n",
                name.c_str(), amax, pre, dec, vs_plain / amax);
    EXPECT_EQ(pre, 0.0f) << name << " prefill";
    EXPECT_EQ(dec, 0.0f) << name << " decode";
    EXPECT_GT(vs_plain, 1e-3f * amax) << name << " did not quantize";
  }
}

// K and V in two formats (KvCacheConfig::value_format, llama.cpp's -ctk / -ctv), per-layer
// formats (KvCacheConfig::layer_formats) and attention sinks (KvCacheConfig::sink_tokens: rows of
// positions [0, sinks) stored in bf16 apart from the packed rows): the packed cache equals an
// fp32 cache whose key hooks fake-quantize in each layer's K format, value hooks in its V's, and
// both round the first `sinks` positions to bf16. Bit for bit, prefill (sink rows through
// load_kv_rows) and decode (the first tile split between bf16 and packed rows). The formats with
// byte block scales (E4M3, log) over a dynamic global per kv head (nvfp4's mechanism) get it from
// their stream's first write past the sinks (kv_dynamic_param of its amax) in the hooks as in the
// cache.
TEST_F(GroupKvFormats, SplitKvFormatsAndSinkRowsMatchTheirFakeQuantization) {
  using Layers = std::vector<KvCacheConfig::LayerFormat>;
  struct Case {
    KvFormat k, v;
    int sinks;
    const char* label;
    Layers layers = {};
  };
  const Case cases[] = {
      {KvFormat::kINT4G32Mse, KvFormat::kINT4G32Mse, 1, "int4_g32_mse+sink1"},
      {KvFormat::kINT4G32, KvFormat::kINT4G32, 5, "int4_g32+sink5"},
      {KvFormat::kINT8G32, KvFormat::kINT8G32, 24, "int8_g32+sink24"},
      {KvFormat::kINT8G32, KvFormat::kINT4G32Mse, 0, "int8_g32/int4_g32_mse"},
      {KvFormat::kBF16, KvFormat::kINT4G32, 2, "bf16/int4_g32+sink2"},
      {KvFormat::kINT5G32Mse, KvFormat::kINT4G32Mse, 1, "int5_g32_mse/int4_g32_mse+sink1"},
      {KvFormat::kINT4G64Mse, KvFormat::kINT4G64Mse, 1,
       "int4_g64_mse+sink1+v1=int8_g32+k2-4=int5_g64_mse+kv29=bf16",
       Layers{{.first = 1, .last = 1, .keys = false, .format = KvFormat::kINT8G32},
              {.first = 2, .last = 4, .values = false, .format = KvFormat::kINT5G64Mse},
              {.first = 29, .last = 29, .format = KvFormat::kBF16}}},
      {KvFormat::kNL4G32E4M3, KvFormat::kNL4G16E4M3, 0, "nl4_g32_e4m3:head/nl4_g16_e4m3:head"},
      {KvFormat::kNL4G16E4M3, KvFormat::kNL4G16E4M3, 1, "nl4_g16_e4m3:head+sink1"},
      {KvFormat::kNL4G32E4M3, KvFormat::kNL4G32E4M3, 1,
       "nl4_g32_e4m3:head+sink1+kv1-2=int5_g32_e4m3:head",
       Layers{{.first = 1, .last = 2, .format = KvFormat::kINT5G32E4M3}}},
      {KvFormat::kNL4G64, KvFormat::kNL4G64, 1, "nl4_g64+sink1+v3=nl4_g16_e4m3:head",
       Layers{{.first = 3, .last = 3, .keys = false, .format = KvFormat::kNL4G16E4M3}}},
      {KvFormat::kNL4G16Log, KvFormat::kNL3G16Log, 1,
       "nl4_g16_log:head/nl3_g16_log:head+sink1+k1-2=int5_g32_log:head+v3=nl4_g32_log:head+v4="
       "nl3_g32_log:head",
       Layers{{.first = 1, .last = 2, .values = false, .format = KvFormat::kINT5G32Log},
              {.first = 3, .last = 3, .keys = false, .format = KvFormat::kNL4G32Log},
              {.first = 4, .last = 4, .keys = false, .format = KvFormat::kNL3G32Log}}},
  };
  for (const Case& c : cases) {
    KvCacheConfig packed = KvCacheConfig::dynamic(c.k, KvScaleGranularity::kHead, false, c.v);
    packed.sink_tokens = c.sinks;
    packed.layer_formats = c.layers;
    for (const auto& lf : c.layers) {
      if (quant::kv_format_traits(lf.format).needs_scale) {  // as runtime::dynamic_cache does
        packed.scales = KvScales::kDynamic;
        packed.granularity = KvScaleGranularity::kHead;
      }
    }
    EXPECT_EQ(packed.label(), c.label);
    struct Stream {
      std::int64_t pos = 0;       // positions written
      std::vector<float> global;  // [kv heads]: byte-scaled formats, NaN until fixed
    };
    std::vector<Stream> streams(2 * model_->attention_modules().size());
    std::vector<ScopedHook> hooks;
    for (AttentionModule* m : model_->attention_modules()) {
      for (int kv = 0; kv < 2; ++kv) {
        const std::int64_t layer = m->layer_idx();
        auto hook = [f = kv == 0 ? packed.k_format(layer) : packed.v_format(layer),
                     sinks = static_cast<std::int64_t>(c.sinks), kv,
                     &streams](AttentionModule& mod, StatesView s) {
          ASSERT_EQ(s.batch, 1);
          Stream& st = streams[static_cast<std::size_t>(2 * mod.layer_idx() + kv)];
          if (st.global.empty()) st.global.assign(static_cast<std::size_t>(s.heads), NAN);
          const bool global = quant::kv_format_traits(f).global_scale;
          for (std::int64_t h = 0; h < s.heads && global; ++h) {
            float amax = 0.0f;
            for (std::int64_t t = std::max<std::int64_t>(sinks - st.pos, 0); t < s.tokens; ++t)
              for (std::int64_t i = 0; i < s.head_dim; ++i)
                amax = std::max(amax, std::fabs(s.row(0, h, t)[i]));
            float& g = st.global[static_cast<std::size_t>(h)];
            if (std::isnan(g) && amax > 0.0f) g = quant::kv_dynamic_param(f, amax);
          }
          std::vector<std::byte> row(std::max(quant::kv_row_bytes(f, s.head_dim),
                                              quant::kv_row_bytes(KvFormat::kBF16, s.head_dim)));
          for (std::int64_t t = 0; t < s.tokens; ++t) {
            const KvFormat rf = st.pos + t < sinks ? KvFormat::kBF16 : f;
            for (std::int64_t h = 0; h < s.heads; ++h) {
              const float g = st.global[static_cast<std::size_t>(h)];
              const float gs = rf == f && global && !std::isnan(g) ? g : 1.0f;
              float* x = s.row(0, h, t);
              quant::quantize_row(rf, x, s.head_dim, 1.0f, 0.0f, gs, row.data());
              quant::dequantize_row(rf, row.data(), s.head_dim, 1.0f, 0.0f, gs, x);
            }
          }
          st.pos += s.tokens;
        };
        hooks.emplace_back(kv == 0 ? m->register_key_hook(hook) : m->register_value_hook(hook));
      }
    }
    const std::vector<float> a = run(KvCacheConfig{});
    hooks.clear();
    const std::vector<float> b = run(packed);
    // The same formats without sinks, K's format for both and no per-layer exceptions: each
    // option must change something.
    const std::vector<float> other = run(KvCacheConfig::dynamic(c.k, KvScaleGranularity::kHead));
    ASSERT_EQ(a.size(), b.size());
    float amax = 0.0f, worst = 0.0f, vs_other = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) {
      amax = std::max(amax, std::fabs(a[i]));
      worst = std::max(worst, std::fabs(a[i] - b[i]));
      vs_other = std::max(vs_other, std::fabs(b[i] - other[i]));
    }
    EXPECT_EQ(worst, 0.0f) << c.label;
    EXPECT_GT(vs_other, 1e-4f * amax) << c.label << ": the sinks / V format changed nothing";
  }
}

TEST(GroupKvFormatsTiny, HeadDim16IsRefusedByName) {
  const auto tiny = CausalLM::load(kvq::test::test_data_dir() / "tiny_llama" / "gqa");
  for (KvFormat f : kGroupFormats) {
    try {
      KvCache cache = tiny->make_cache(1, 8, KvCacheConfig::of(f));
      ADD_FAILURE() << quant::kv_format_name(f) << " accepted head_dim 16";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(
          std::string(e.what()).find(fmt::format("head_dim 16 is not a multiple of {}",
                                                 quant::kv_format_traits(f).head_dim_multiple)),
          std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace kvq::model
