// `kvq oneshot` on a weight-quantized checkpoint ("take a W8A8 model, add FP8 KV"): the tiny GQA
// Llama that llm-compressor quantized with the FP8 scheme (tests/data/lifecycle/wq_tiny_fp8:
// FP8 weights per tensor, static FP8 inputs; tools/reference/make_weight_quant_goldens.py) gets
// an FP8 attn_head kv_cache_scheme calibrated by kvq. The saved checkpoint keeps every source
// tensor byte for byte and the source's config groups verbatim, adds the kv scheme and the k/v
// scales, and loads back with the same logits.
//
// KVQ_WQ_INTEROP_SAVE_DIR=<dir> also writes the checkpoint there, with kvq's logits of PROMPT in
// <dir>/kvq_logits.json, for tools/reference/check_weight_quant_interop.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "interop_support.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

const std::vector<std::int32_t> kPrompt = {5, 6, 7, 100, 200, 31, 4, 250, 17, 9, 77, 140};

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}

TEST(WeightQuantCheckpoint, OneshotAddsKvScalesAndKeepsTheQuantizedWeights) {
  const auto src = test::test_data_dir() / "lifecycle" / "wq_tiny_fp8";
  auto m = model::CausalLM::load(src);
  ASSERT_EQ(m->compressed_linears().size(), 21u);
  auto lc = apply_quantization_config(
      *m, quant::load_recipe(test::test_data_dir() / "lifecycle" / "recipes" /
                             "kv_fp8_head_static_minmax.yaml"));
  calibrate(*lc, interop::interop_samples(), {.show_progress = false});
  test::TempDir tmp;
  std::filesystem::path out = tmp / "ckpt";
  const char* interop_dir = std::getenv("KVQ_WQ_INTEROP_SAVE_DIR");
  if (interop_dir != nullptr) out = interop_dir;
  save_pretrained(*lc, src, out, {}, /*overwrite=*/interop_dir != nullptr);

  // Every source tensor (FP8 weights, weight / input scales, embeddings) byte for byte, plus a
  // k and a v scale per layer.
  const auto in = io::SafetensorsModel::open(src);
  const auto saved = io::SafetensorsModel::open(out);
  for (const std::string& name : in.names()) {
    const Tensor a = in.tensor(name), b = saved.tensor(name);
    EXPECT_EQ(a.dtype(), b.dtype()) << name;
    EXPECT_EQ(a.shape(), b.shape()) << name;
    EXPECT_EQ(bytes_of(a), bytes_of(b)) << name;
  }
  EXPECT_EQ(saved.names().size(), in.names().size() + 6);
  for (int l = 0; l < 3; ++l)
    for (const char* b : {"k", "v"}) {
      const std::string name = fmt::format("model.layers.{}.self_attn.{}_scale", l, b);
      EXPECT_EQ(saved.info(name).shape, (Shape{2, 1, 1})) << name;
    }

  // The source's config groups verbatim, its format and ignore list, and the new kv scheme.
  const auto src_qc = io::read_json_file(src / "config.json")["quantization_config"];
  const auto qc = io::read_json_file(out / "config.json")["quantization_config"];
  EXPECT_EQ(qc["config_groups"], src_qc["config_groups"]);
  EXPECT_EQ(qc["format"], "float-quantized");
  EXPECT_EQ(qc["ignore"], src_qc["ignore"]);
  EXPECT_EQ(qc["quantization_status"], "compressed");
  EXPECT_EQ(qc["kv_cache_scheme"]["strategy"], "attn_head");
  EXPECT_EQ(qc["kv_cache_scheme"]["type"], "float");

  // kvq loads it back: the same dequantized model with the kv scales, the same logits (an f32
  // fake-quant cache on both sides).
  const Tensor before = m->forward(kPrompt, model::LogitsMode::kAll);
  QuantizedModel qm = QuantizedModel::load(out);
  ASSERT_NE(qm.lifecycle, nullptr);
  EXPECT_EQ(qm.model->compressed_linears().size(), 21u);
  EXPECT_EQ(qm.lifecycle->kv_format(), quant::KvFormat::kFP8E4M3);
  const Tensor after = qm.model->forward(kPrompt, model::LogitsMode::kAll);
  EXPECT_EQ(before.to_f32_vector(), after.to_f32_vector());

  // transformers + compressed-tensors on the same checkpoint (recorded by
  // tools/reference/check_weight_quant_interop.py): FP8 weights decompressed, inputs and k/v
  // fake-quantized. fp32 on both sides with different summation orders (1.7e-6 measured); the
  // quantization moves the logits by 0.26, so a missing input or kv quantization would show.
  const auto rec =
      io::read_json_file(test::test_data_dir() / "lifecycle" / "wq_interop_transformers.json");
  EXPECT_TRUE(rec["kv_scales_loaded_equal"].get<bool>());
  EXPECT_EQ(rec["prompt"].get<std::vector<std::int32_t>>(), kPrompt);
  const double worst = interop::max_abs_logit_diff(after, rec["logits"]);
  std::printf("max |logit diff| kvq vs transformers (W8A8 FP8 + FP8 KV): %.3g\n", worst);
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(rec["logits_max_abs_diff_unquantized"].get<double>(), 1e-2);

  if (interop_dir != nullptr) {
    std::vector<std::vector<float>> rows;
    const std::int64_t vocab = after.dim(-1);
    for (std::int64_t t = 0; t < after.numel() / vocab; ++t)
      rows.emplace_back(after.f32() + t * vocab, after.f32() + (t + 1) * vocab);
    std::ofstream(out / "kvq_logits.json")
        << nlohmann::json{{"prompt", kPrompt}, {"logits", rows}}.dump();
  }
}

// The source without a kv scheme: a weight-only checkpoint has nothing for a lifecycle to do.
TEST(WeightQuantCheckpoint, WeightOnlyCheckpointLoadsWithoutALifecycle) {
  QuantizedModel qm =
      QuantizedModel::load(test::test_data_dir() / "lifecycle" / "wq_tiny_w8a8_int8");
  EXPECT_EQ(qm.lifecycle, nullptr);
  EXPECT_EQ(qm.model->compressed_linears().size(), 21u);
}

}  // namespace
}  // namespace kvq::lifecycle
