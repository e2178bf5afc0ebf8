// `--kv-cache` parsing and resolution (kvq/runtime/kv_cache_choice.h) on the tiny GQA Llama: plain
// model (f32 / unscaled / dynamic low-bit), a calibrated lifecycle standing in for a quantized
// checkpoint (packed by default, fake on request, disagreeing formats refused), and the
// fallback to fake quantization when the checkpoint cannot be packed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/recipe.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "support/test_paths.h"

namespace kvq::runtime {
namespace {

using model::KvCacheConfig;
using model::KvScaleGranularity;
using model::KvScales;
using quant::KvFormat;
using Mode = KvCacheOption::Mode;

std::string error_of(std::string_view text) {
  try {
    parse_kv_cache_option(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(KvCacheOption, ParsesModesFormatsAliasesAndGranularity) {
  EXPECT_EQ(parse_kv_cache_option("auto").mode, Mode::kAuto);
  EXPECT_EQ(parse_kv_cache_option("AUTO").mode, Mode::kAuto);
  EXPECT_EQ(parse_kv_cache_option("fake").mode, Mode::kFake);
  struct Case {
    std::string text;
    KvFormat format;
    std::optional<KvScaleGranularity> g;
  };
  for (const Case& c : std::vector<Case>{
           {"f32", KvFormat::kF32, std::nullopt},
           {"bfloat16", KvFormat::kBF16, std::nullopt},
           {"float16", KvFormat::kF16, std::nullopt},
           {"fp8", KvFormat::kFP8E4M3, std::nullopt},
           {"e4m3:tensor", KvFormat::kFP8E4M3, KvScaleGranularity::kTensor},
           {"INT8:head", KvFormat::kINT8, KvScaleGranularity::kHead},
           {"int4:Tensor", KvFormat::kINT4, KvScaleGranularity::kTensor},
           {"nvfp4:head", KvFormat::kNVFP4, KvScaleGranularity::kHead},
           {"int8_g32", KvFormat::kINT8G32, std::nullopt},
           {"Q8_0", KvFormat::kINT8G32, std::nullopt},  // llama.cpp's names
           {"int4_g32", KvFormat::kINT4G32, std::nullopt},
           {"q4_0", KvFormat::kINT4G32, std::nullopt},
           {"q4_1", KvFormat::kINT4G32A, std::nullopt},
       }) {
    const KvCacheOption o = parse_kv_cache_option(c.text);
    EXPECT_EQ(o.mode, Mode::kFormat) << c.text;
    EXPECT_EQ(o.format, c.format) << c.text;
    EXPECT_EQ(o.granularity, c.g) << c.text;
    EXPECT_EQ(o.text, c.text);
  }
  std::string e = error_of("int3");
  EXPECT_NE(e.find("--kv-cache 'int3': unknown KV cache format 'int3'"), std::string::npos) << e;
  EXPECT_NE(
      e.find("auto, fake, or FORMAT[:tensor|head][+q8] with FORMAT one of f32, bf16, f16, fp8, "
             "int8, int4, nvfp4"),
      std::string::npos)
      << e;
  e = error_of("int8:channel");
  EXPECT_NE(e.find("granularity must be 'tensor' or 'head'"), std::string::npos) << e;
  EXPECT_THROW(parse_kv_cache_option("f16:tensor"), NotSupported);
  // The group formats have no stream scale to choose a granularity for.
  e = error_of("int4_g32:head");
  EXPECT_NE(e.find("--kv-cache 'int4_g32:head': int4_g32 has no stream scales to choose a "
                   "granularity for: one scale per 32 values is computed from each row when it "
                   "is written"),
            std::string::npos)
      << e;
  EXPECT_THROW(parse_kv_cache_option("q8_0:tensor"), NotSupported);
  EXPECT_THROW(parse_kv_cache_option("int8_g32+q8"), NotSupported);
  const KvCacheConfig g = resolve_kv_cache("q4_0", nullptr, "tiny");
  EXPECT_EQ(g.format, KvFormat::kINT4G32);
  EXPECT_EQ(g.scales, model::KvScales::kNone);
  EXPECT_EQ(g.label(), "int4_g32");
  EXPECT_THROW(parse_kv_cache_option(""), InvalidArgument);
}

std::unique_ptr<model::CausalLM> tiny() {
  return model::CausalLM::load(test::test_data_dir() / "tiny_llama" / "gqa");
}

// `+q8`: int8, int4 and nvfp4 caches opt in to approximate int8-query decode scores; the flag
// reaches the spec, the label and the K views (not V) of the cache; other formats refuse it.
TEST(KvCacheOption, Int8QueryScoresAreAnInt8OptIn) {
  for (std::string_view t : {"int8+q8", "INT8:head+Q8", "int8:tensor+q8", "int4:head+q8"}) {
    const KvCacheOption o = parse_kv_cache_option(t);
    EXPECT_EQ(o.format, t[3] == '4' ? KvFormat::kINT4 : KvFormat::kINT8) << t;
    EXPECT_TRUE(o.int8_query) << t;
    EXPECT_EQ(o.text, t);
  }
  EXPECT_FALSE(parse_kv_cache_option("int8:head").int8_query);
  const std::string e = error_of("fp8:head+q8");
  EXPECT_NE(e.find("--kv-cache 'fp8:head+q8': +q8 (decode scores with an int8 query) applies to "
                   "int8, int4, nvfp4 caches only"),
            std::string::npos)
      << e;
  EXPECT_THROW(parse_kv_cache_option("bf16+q8"), NotSupported);

  const auto m = tiny();
  const KvCacheConfig c = resolve_kv_cache("int8+q8", nullptr, "tiny");
  EXPECT_EQ(c.label(), "int8:head+q8");
  EXPECT_TRUE(c.int8_query_scores);
  const model::KvCache cache = m->make_cache(1, 4, c);
  EXPECT_TRUE(cache.keys(0).rows(0, 0).int8_query_scores);
  EXPECT_FALSE(cache.values(0).rows(0, 0).int8_query_scores);
  EXPECT_FALSE(m->make_cache(1, 4, resolve_kv_cache("int8", nullptr, "tiny"))
                   .keys(0)
                   .rows(0, 0)
                   .int8_query_scores);
  KvCacheConfig bf16 = KvCacheConfig::of(KvFormat::kBF16);
  bf16.int8_query_scores = true;
  EXPECT_THROW(m->make_cache(1, 4, bf16), InvalidArgument);
  // nvfp4 takes +q8 with whole 64-value chunks only; the tiny model's heads are smaller.
  EXPECT_TRUE(parse_kv_cache_option("nvfp4:head+q8").int8_query);
  ASSERT_NE(m->config().head_dim % 64, 0);
  KvCacheConfig nvfp4 = KvCacheConfig::of(KvFormat::kNVFP4);
  nvfp4.int8_query_scores = true;
  try {
    m->make_cache(1, 4, nvfp4);
    ADD_FAILURE() << "nvfp4+q8 accepted with head_dim " << m->config().head_dim;
  } catch (const InvalidArgument& err) {
    EXPECT_NE(std::string(err.what()).find("or nvfp4 with head_dim a multiple of 64"),
              std::string::npos)
        << err.what();
  }
}

TEST(KvCacheOption, PlainModelGetsUnscaledOrDynamicCaches) {
  const auto m = tiny();
  const auto resolve = [&](std::string_view t) { return resolve_kv_cache(t, nullptr, "tiny"); };
  KvCacheConfig c = resolve("auto");
  EXPECT_EQ(c.label(), "f32");
  EXPECT_EQ(c.scales, KvScales::kNone);
  EXPECT_FALSE(c.granularity);
  EXPECT_EQ(dynamic_scales_note(c, "the prompt"), "");

  c = resolve("bf16");
  EXPECT_EQ(c.label(), "bf16");
  EXPECT_EQ(c.format, KvFormat::kBF16);
  EXPECT_FALSE(c.granularity);

  c = resolve("int8");
  EXPECT_EQ(c.label(), "int8:head");
  EXPECT_EQ(c.scales, KvScales::kDynamic);
  EXPECT_EQ(c.granularity, KvScaleGranularity::kHead);
  EXPECT_TRUE(c.layers.empty());
  EXPECT_NE(dynamic_scales_note(c, "the prompt")
                .find("fixed from the absmax of the prompt (per "
                      "kv head); `kvq oneshot` calibrates"),
            std::string::npos);
  EXPECT_TRUE(m->make_cache(1, 4, c).has_dynamic_scales());

  c = resolve("nvfp4:tensor");
  EXPECT_EQ(c.label(), "nvfp4:tensor");
  EXPECT_EQ(c.scales, KvScales::kDynamic);
  EXPECT_EQ(c.granularity, KvScaleGranularity::kTensor);
  const nlohmann::json j = kv_cache_json(c);
  EXPECT_EQ(j["kv_cache"], "nvfp4:tensor");
  EXPECT_EQ(j["kv_format"], "nvfp4");
  EXPECT_EQ(j["kv_granularity"], "tensor");
  EXPECT_EQ(j["kv_scales"], "dynamic");
  EXPECT_EQ(j["kv_fake_quant"], false);
  EXPECT_TRUE(kv_cache_json(resolve("f32"))["kv_granularity"].is_null());

  // Bytes per token: 2 (k, v) · layers · kv heads · row bytes.
  const auto& cfg = m->config();
  const std::int64_t values = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim;
  EXPECT_EQ(kv_bytes_per_token(*m, resolve("f32")), values * 4);
  EXPECT_EQ(kv_bytes_per_token(*m, resolve("fp8:tensor")), values);
  EXPECT_EQ(kv_bytes_per_token(*m, resolve("int4")), values / 2);

  try {
    resolve("fake");
    ADD_FAILURE() << "fake accepted on a plain model";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache fake: tiny is not a quantized checkpoint"),
              std::string::npos)
        << e.what();
  }
}

quant::QuantizationConfig kv_config(const std::string& strategy, const std::string& ignore = "") {
  return quant::parse_quantization_config(
      quant::Json::parse(fmt::format(
          R"({{"config_groups": {{}}, "ignore": [{}], "kv_cache_scheme": {{"num_bits": 8,
          "type": "float", "strategy": "{}", "symmetric": true, "observer": "static_minmax"}}}})",
          ignore, strategy)),
      "test");
}

void calibrate_tiny(lifecycle::QuantizationLifecycle& lc) {
  lifecycle::CalibrationSample s;
  for (int t = 0; t < 24; ++t) s.tokens.push_back((t * 37 + 3) % 256);
  const std::vector<lifecycle::CalibrationSample> samples = {s};
  lifecycle::calibrate(lc, samples, {.show_progress = false});
}

TEST(KvCacheOption, SinkTokensKeepTheFirstTokensOfADynamicCacheInBf16) {
  for (std::string_view t : {"int4_g32_mse+sink1", "INT8:head+SINK4+q8", "nvfp4+q8+sink64"}) {
    const KvCacheOption o = parse_kv_cache_option(t);
    EXPECT_EQ(o.sink_tokens, t[0] == 'i' ? 1 : t[0] == 'I' ? 4 : 64) << t;
    EXPECT_EQ(o.int8_query, t.find("q8") != std::string_view::npos) << t;
  }
  EXPECT_EQ(parse_kv_cache_option("int8").sink_tokens, 0);
  for (std::string_view t : {"int8+sink0", "int8+sink65", "int8+sink", "int8+sinkx", "int8+sink-1",
                             "int8+sink1+sink2", "int8+q8+q8", "int8+bogus"}) {
    const std::string e = error_of(t);
    EXPECT_NE(e.find(fmt::format("--kv-cache '{}'", t)), std::string::npos) << t << ": " << e;
  }
  EXPECT_NE(error_of("int8+sink65").find("+sinkN with N from 1 to 64"), std::string::npos);

  const auto m = tiny();
  const KvCacheConfig c = resolve_kv_cache("int8+sink2", nullptr, "tiny");
  EXPECT_EQ(c.sink_tokens, 2);
  EXPECT_EQ(c.label(), "int8:head+sink2");
  EXPECT_EQ(kv_cache_json(c)["kv_sink_tokens"], 2);
  const model::KvCache cache = m->make_cache(1, 8, c);
  EXPECT_EQ(cache.keys(m->config().num_hidden_layers - 1).rows(0, 1).sink_rows, 2);
  EXPECT_EQ(cache.values(0).rows(0, 0).sink_rows, 2);
  EXPECT_NE(cache.values(0).rows(0, 0).sink_data, nullptr);
  // Longer than the cache: every row is a sink row.
  EXPECT_EQ(m->make_cache(1, 1, c).keys(0).rows(0, 0).sink_rows, 1);

  // Unquantized caches have nothing to keep; calibrated ones must equal their fake quantization.
  for (KvCacheConfig bad :
       {KvCacheConfig::of(KvFormat::kBF16), KvCacheConfig::of(KvFormat::kF32)}) {
    bad.sink_tokens = 1;
    EXPECT_THROW(m->make_cache(1, 4, bad), InvalidArgument) << bad.label();
  }
  auto lc = lifecycle::apply_quantization_config(*m, kv_config("attn_head"));
  calibrate_tiny(*lc);
  KvCacheConfig calibrated = lc->kv_cache_config();
  calibrated.sink_tokens = 1;
  try {
    m->make_cache(1, 4, calibrated);
    ADD_FAILURE() << "sinks accepted on a calibrated cache";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sink tokens need a dynamic cache"), std::string::npos)
        << e.what();
  }
  try {
    resolve_kv_cache("fp8:head+sink1", lc.get(), "ckpt");
    ADD_FAILURE() << "+sink1 accepted on a checkpoint";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ckpt is a quantized checkpoint"), std::string::npos)
        << e.what();
  }
}

TEST(KvCacheOption, KAndVTakeTwoFormatsLikeLlamaCppsCtkCtv) {
  const KvCacheOption o = parse_kv_cache_option("int8_g32/Q4_0+sink1");
  EXPECT_EQ(o.format, KvFormat::kINT8G32);
  EXPECT_EQ(o.value_format, KvFormat::kINT4G32);
  EXPECT_EQ(o.sink_tokens, 1);
  EXPECT_FALSE(parse_kv_cache_option("int8/int8").value_format) << "one format: no V override";
  EXPECT_EQ(parse_kv_cache_option("bf16/int4:tensor").granularity, KvScaleGranularity::kTensor);
  EXPECT_NE(error_of("fp8:tensor/int8:head").find("one granularity"), std::string::npos);
  EXPECT_NE(error_of("int8/bogus").find("unknown KV cache format 'bogus'"), std::string::npos);
  EXPECT_NE(error_of("int8/").find("unknown KV cache format ''"), std::string::npos);

  const auto m = tiny();
  const KvCacheConfig c = resolve_kv_cache("bf16/int8:head", nullptr, "tiny");
  EXPECT_EQ(c.label(), "bf16/int8:head");
  EXPECT_EQ(c.k_format(), KvFormat::kBF16);
  EXPECT_EQ(c.v_format(), KvFormat::kINT8);
  EXPECT_EQ(c.scales, KvScales::kDynamic);
  EXPECT_EQ(kv_cache_json(c)["kv_value_format"], "int8");
  const model::KvCache cache = m->make_cache(1, 4, c);
  EXPECT_EQ(cache.keys(0).format(), KvFormat::kBF16);
  EXPECT_EQ(cache.values(0).format(), KvFormat::kINT8);
  EXPECT_TRUE(cache.values(0).dynamic(0));
  EXPECT_FALSE(cache.keys(0).dynamic(0));
  // Bytes per token: K's rows plus V's.
  const std::int64_t d = cache.head_dim();
  EXPECT_EQ(cache.bytes_per_token(),
            cache.layers() * cache.kv_heads() *
                static_cast<std::int64_t>(quant::kv_row_bytes(KvFormat::kBF16, d) +
                                          quant::kv_row_bytes(KvFormat::kINT8, d)));

  auto lc = lifecycle::apply_quantization_config(*m, kv_config("attn_head"));
  calibrate_tiny(*lc);
  try {
    resolve_kv_cache("fp8:head/int8:head", lc.get(), "ckpt");
    ADD_FAILURE() << "two formats accepted on a checkpoint";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("quantizes k and v alike"), std::string::npos) << e.what();
  }
  KvCacheConfig calibrated = lc->kv_cache_config();
  calibrated.value_format = KvFormat::kINT8;
  EXPECT_THROW(m->make_cache(1, 4, calibrated), InvalidArgument);
}

TEST(KvCacheOption, CheckpointRunsItsPackedCacheOrItsFakeQuantization) {
  auto m = tiny();
  auto lc = lifecycle::apply_quantization_config(*m, kv_config("attn_head"));
  calibrate_tiny(*lc);
  const auto resolve = [&](std::string_view t) { return resolve_kv_cache(t, lc.get(), "ckpt"); };
  for (const char* t : {"auto", "fp8", "fp8:head", "float8_e4m3fn"}) {
    const KvCacheConfig c = resolve(t);
    EXPECT_EQ(c.label(), "fp8:head") << t;
    EXPECT_EQ(c.scales, KvScales::kCalibrated) << t;
    EXPECT_FALSE(c.fake_quant);
    EXPECT_EQ(c.format, KvFormat::kFP8E4M3);
    EXPECT_TRUE(c.stores_calibrated_quantization());
    // The lifecycle's own config: its calibrated per-head scales.
    const KvCacheConfig want = lc->kv_cache_config();
    ASSERT_EQ(c.layers.size(), want.layers.size());
    EXPECT_EQ(c.layers[1].v_scale, want.layers[1].v_scale);
    EXPECT_EQ(c.describe(), "fp8:head (calibrated scales from the checkpoint)");
  }

  const KvCacheConfig fake = resolve("fake");
  EXPECT_EQ(fake.label(), "fake(fp8:head)");
  EXPECT_TRUE(fake.fake_quant);
  EXPECT_EQ(fake.format, KvFormat::kF32);
  EXPECT_FALSE(fake.stores_calibrated_quantization()) << "the hooks quantize k/v, not the cache";
  EXPECT_EQ(kv_cache_json(fake)["kv_scales"], "calibrated");
  EXPECT_EQ(kv_cache_json(fake)["kv_fake_quant"], true);

  for (const char* t : {"int8", "fp8:tensor", "f32", "nvfp4"}) {
    try {
      resolve(t);
      ADD_FAILURE() << t << " accepted on an fp8 attn_head checkpoint";
    } catch (const InvalidArgument& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(fmt::format("--kv-cache {}: ckpt is a quantized checkpoint whose KV cache "
                                   "is fp8:head",
                                   t)),
                std::string::npos)
          << w;
      EXPECT_NE(w.find("fake"), std::string::npos) << w;
    }
  }

  // A per-tensor checkpoint is fp8:tensor.
  auto m2 = tiny();
  auto lc2 = lifecycle::apply_quantization_config(*m2, kv_config("tensor"));
  calibrate_tiny(*lc2);
  EXPECT_EQ(resolve_kv_cache("auto", lc2.get(), "ckpt").label(), "fp8:tensor");
  EXPECT_EQ(resolve_kv_cache("fp8:tensor", lc2.get(), "ckpt").label(), "fp8:tensor");
}

// A checkpoint whose attention is quantized in some layers only runs its packed cache with f32
// in the others; one whose layers take different scale granularities has no packed cache: `auto`
// runs its fake quantization; an explicit format says why it cannot.
TEST(KvCacheOption, PartialCheckpointPacksPerLayerUnpackableFallsBackToFake) {
  auto m = tiny();
  // An attention config group on layer 0 only (kv_cache_scheme would cover every layer).
  const auto group = [](int layer, const char* strategy) {
    return fmt::format(R"("g{}": {{"targets": ["model.layers.{}.self_attn"],
        "input_activations": {{"num_bits": 8, "type": "float", "strategy": "{}",
        "symmetric": true, "observer": "static_minmax"}}}})",
                       layer, layer, strategy);
  };
  const auto config = [](const std::string& groups) {
    return quant::parse_quantization_config(
        quant::Json::parse(fmt::format(R"({{"config_groups": {{{}}}}})", groups)), "test");
  };
  auto lc = lifecycle::apply_quantization_config(*m, config(group(0, "tensor")));
  calibrate_tiny(*lc);
  const std::string f32_rest =
      fmt::format("fp8:tensor+kv1-{}=f32", m->config().num_hidden_layers - 1);
  EXPECT_EQ(resolve_kv_cache("auto", lc.get(), "ckpt").label(), f32_rest);
  EXPECT_EQ(resolve_kv_cache("fp8", lc.get(), "ckpt").label(), f32_rest);
  EXPECT_TRUE(resolve_kv_cache("auto", lc.get(), "ckpt").stores_calibrated_quantization());
  EXPECT_THROW(resolve_kv_cache("fp8+v1=int8", lc.get(), "ckpt"), InvalidArgument);

  auto m2 = tiny();
  auto lc2 = lifecycle::apply_quantization_config(
      *m2, config(group(0, "tensor") + "," + group(1, "attn_head")));
  calibrate_tiny(*lc2);
  const KvCacheConfig c = resolve_kv_cache("auto", lc2.get(), "ckpt");
  EXPECT_TRUE(c.fake_quant);
  EXPECT_EQ(c.label(), "fake(fp8:tensor)");
  EXPECT_THROW(resolve_kv_cache("fp8", lc2.get(), "ckpt"), NotSupported);
}

TEST(KvCacheOption, PerLayerExceptionsTakeTheirOwnFormat) {
  const KvCacheOption o = parse_kv_cache_option("int4_g32_mse+sink1+v1=int8_g32+K0-1=bf16+kv2=f32");
  EXPECT_EQ(o.format, KvFormat::kINT4G32Mse);
  EXPECT_EQ(o.sink_tokens, 1);
  ASSERT_EQ(o.layer_formats.size(), 3u);  // in the order given: a later one wins
  EXPECT_EQ(o.layer_formats[0].format, KvFormat::kINT8G32);
  EXPECT_FALSE(o.layer_formats[0].keys);
  EXPECT_TRUE(o.layer_formats[0].values);
  EXPECT_EQ(o.layer_formats[1].first, 0);
  EXPECT_EQ(o.layer_formats[1].last, 1);
  EXPECT_FALSE(o.layer_formats[1].values);
  EXPECT_TRUE(o.layer_formats[2].keys && o.layer_formats[2].values);
  for (std::string_view t : {"int8+x1=bf16", "int8+v=bf16", "int8+v1-=bf16", "int8+v3-1=bf16",
                             "int8+v1=bogus", "int8+v1", "int8+v1=int4:tensor+v2=int4:head",
                             "int8:head+v1=int4:tensor", "int8+q8+k1=bf16"}) {
    EXPECT_NE(error_of(t).find(fmt::format("--kv-cache '{}'", t)), std::string::npos)
        << t << ": " << error_of(t);
  }
  EXPECT_NE(error_of("int8+v3-1=bf16").find("the range is empty"), std::string::npos);
  EXPECT_TRUE(parse_kv_cache_option("int8+q8+v1=bf16").int8_query) << "V exceptions keep +q8";

  const auto m = tiny();
  const std::int64_t L = m->config().num_hidden_layers;
  ASSERT_GE(L, 3);
  KvCacheConfig c = resolve_kv_cache("int4+v1=fp8+k0-1=bf16+kv2=f32", nullptr, "tiny");
  EXPECT_EQ(c.label(), "int4:head+v1=fp8:head+k0-1=bf16+kv2=f32");
  EXPECT_EQ(c.scales, KvScales::kDynamic);
  EXPECT_EQ(kv_cache_json(c)["kv_layer_formats"].size(), 3u);
  EXPECT_EQ(kv_cache_json(c)["kv_layer_formats"][1]["last_layer"], 1);
  model::KvCache cache = m->make_cache(1, 8, c);
  EXPECT_EQ(cache.keys(0).format(), KvFormat::kBF16);
  EXPECT_EQ(cache.values(0).format(), KvFormat::kINT4);
  EXPECT_EQ(cache.values(1).format(), KvFormat::kFP8E4M3);
  EXPECT_EQ(cache.keys(2).format(), KvFormat::kF32);
  EXPECT_EQ(cache.values(2).format(), KvFormat::kF32);
  std::int64_t bytes = 0;
  for (std::int64_t l = 0; l < L; ++l) {
    bytes += cache.kv_heads() *
             static_cast<std::int64_t>(quant::kv_row_bytes(c.k_format(l), cache.head_dim()) +
                                       quant::kv_row_bytes(c.v_format(l), cache.head_dim()));
  }
  EXPECT_EQ(cache.bytes_per_token(), bytes);

  // An exception with stream scales makes them dynamic, at the cache's one granularity.
  c = resolve_kv_cache("bf16+v0=int8:tensor", nullptr, "tiny");
  EXPECT_EQ(c.label(), "bf16+v0=int8:tensor");
  EXPECT_EQ(c.scales, KvScales::kDynamic);
  cache = m->make_cache(1, 8, c);
  EXPECT_TRUE(cache.values(0).dynamic(0));
  EXPECT_FALSE(cache.values(1).dynamic(0));
  // dynamic_cache, the rule itself: with no granularity given, per kv head; what kvq eval /
  // compare size a scheme's bytes with (before 2026-12-07 they refused `f32+k1=int4`: "layer 1 has
  // no k_scale").
  c = dynamic_cache(KvFormat::kF32, model::KvScaleGranularity::kHead, false, std::nullopt,
                    {{.first = 1, .last = 1, .values = false, .format = KvFormat::kINT4}});
  EXPECT_EQ(c.scales, KvScales::kDynamic);
  EXPECT_EQ(c.granularity, model::KvScaleGranularity::kHead);
  cache = m->make_cache(1, 8, c);
  EXPECT_TRUE(cache.keys(1).dynamic(0));
  EXPECT_EQ(cache.keys(0).format(), KvFormat::kF32);
  EXPECT_EQ(dynamic_cache(KvFormat::kINT4G32, model::KvScaleGranularity::kHead, false, std::nullopt,
                          {{.first = 0, .last = 0, .format = KvFormat::kBF16}})
                .scales,
            KvScales::kNone);

  // Layers the model does not have, named.
  try {
    m->make_cache(1, 8, resolve_kv_cache(fmt::format("int8+v1-{}=bf16", L), nullptr, "tiny"));
    ADD_FAILURE() << "layer past the model accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  fmt::format("names layers 1-{}; the model has layers 0-{}", L, L - 1)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvq::runtime
