// Checkpoint save / load on the tiny GQA Llama, the config dump against the one llm-compressor
// 0.14.0.1 saved, and every malformed-checkpoint error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kvq/core/error.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"
#include "support/tiny_models.h"

namespace kvq::lifecycle {
namespace {
namespace fs = std::filesystem;

fs::path tiny_dir() { return test::test_data_dir() / "tiny_llama" / "gqa"; }
fs::path recipe(const std::string& n) {
  return test::test_data_dir() / "lifecycle" / "recipes" / (n + ".yaml");
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<CalibrationSample> samples() {
  std::vector<CalibrationSample> s;
  for (int i = 0; i < 4; ++i) {
    CalibrationSample c;
    c.index = i;
    for (int t = 0; t < 20 + i; ++t) c.tokens.push_back((t * 37 + i * 11) % 256);
    s.push_back(c);
  }
  return s;
}

TEST(Checkpoint, ConfigDumpMatchesLlmCompressor) {
  // The dump does not depend on the layer count: the tiny model gives the same text as the
  // default model the golden was saved from.
  auto m = model::CausalLM::load(tiny_dir());
  auto lc =
      apply_quantization_config(*m, quant::load_recipe(recipe("attn_fp8_head_static_minmax")));
  const std::string golden = read_text(test::test_data_dir() / "lifecycle" /
                                       "lc_quantization_config_attn_fp8_head_static_minmax.json");
  EXPECT_EQ(quant::dump_sorted(checkpoint_config_json(*lc), 2) + "\n", golden);
}

TEST(Checkpoint, SaveLoadRoundTrip) {
  test::TempDir tmp;
  auto m = model::CausalLM::load(tiny_dir());
  auto lc =
      apply_quantization_config(*m, quant::load_recipe(recipe("attn_fp8_head_static_minmax")));
  calibrate(*lc, samples(), {.show_progress = false});
  const std::vector<std::int32_t> prompt{5, 6, 7, 100, 200};
  const Tensor ref = m->forward(prompt);
  save_pretrained(*lc, tiny_dir(), tmp / "q");

  const auto st = io::SafetensorsModel::open(tmp / "q");
  EXPECT_EQ(st.info("model.layers.0.self_attn.q_scale").shape, (Shape{4, 1, 1}));
  EXPECT_EQ(st.info("model.layers.0.self_attn.k_scale").shape, (Shape{2, 1, 1}));
  EXPECT_EQ(st.info("model.layers.0.self_attn.k_scale").dtype, DType::kF32);
  EXPECT_EQ(st.info("model.layers.0.self_attn.k_zero_point").dtype, DType::kF8E4M3);
  EXPECT_TRUE(st.contains("model.embed_tokens.weight"));
  const auto cfg = io::read_json_file(tmp / "q" / "config.json");
  EXPECT_EQ(cfg["quantization_config"]["quantization_status"], "compressed");
  EXPECT_EQ(cfg["quantization_config"]["version"], "0.19.0");

  auto qm = QuantizedModel::load(tmp / "q");
  ASSERT_TRUE(qm.lifecycle);
  for (std::size_t i = 0; i < lc->states().size(); ++i)
    for (char b : {'q', 'k', 'v'})
      EXPECT_EQ(qm.lifecycle->states()[i]->param(b)->scale, lc->states()[i]->param(b)->scale);
  const Tensor got = qm.model->forward(prompt);
  for (std::int64_t i = 0; i < ref.numel(); ++i) ASSERT_EQ(got.f32()[i], ref.f32()[i]) << i;
  // Round trip of the config through the checkpoint.
  EXPECT_EQ(quant::dump_sorted(checkpoint_config_json(*qm.lifecycle)),
            quant::dump_sorted(checkpoint_config_json(*lc)));
}

// A rotated scheme (SpinQuant R2 + R3, then FP8 per-head KV) survives save / load: the file holds
// the fused v_proj / o_proj weights and the transform_config, loading applies R3 only (R2 is in
// the weights), and the loaded model's logits equal the calibrated one's bit for bit.
TEST(Checkpoint, RotatedSchemeRoundTrip) {
  test::TempDir tmp;
  auto m = model::CausalLM::load(tiny_dir());
  auto lc = apply_quantization_config(
      *m, quant::load_recipe(fs::path(KVQ_SOURCE_DIR) / "examples/recipes/kv_fp8_head_r3.yaml"));
  calibrate(*lc, samples(), {.show_progress = false});
  const std::vector<std::int32_t> prompt{5, 6, 7, 100, 200};
  const Tensor ref = m->forward(prompt);
  const Tensor v_fused = m->find_module("model.layers.2.self_attn.v_proj")->weight().clone();
  save_pretrained(*lc, tiny_dir(), tmp / "q");

  const auto st = io::SafetensorsModel::open(tmp / "q");
  const Tensor v_saved = st.tensor("model.layers.2.self_attn.v_proj.weight");
  EXPECT_EQ(v_saved.to_f32_vector(), v_fused.to_f32_vector());
  const auto plain = io::SafetensorsModel::open(tiny_dir());
  EXPECT_NE(v_saved.to_f32_vector(),
            plain.tensor("model.layers.2.self_attn.v_proj.weight").to_f32_vector());
  EXPECT_EQ(st.tensor("model.layers.2.self_attn.q_proj.weight").to_f32_vector(),
            plain.tensor("model.layers.2.self_attn.q_proj.weight").to_f32_vector());
  const auto cfg = io::read_json_file(tmp / "q" / "config.json");
  const auto& groups = cfg["quantization_config"]["transform_config"]["config_groups"];
  EXPECT_EQ(groups["R3"]["apply"][0]["location"], "q_attn");
  EXPECT_EQ(groups["R2"]["head_dim"], 16);

  auto qm = QuantizedModel::load(tmp / "q");
  ASSERT_TRUE(qm.lifecycle);
  EXPECT_TRUE(qm.lifecycle->transforms().fused_modules().empty());  // already in the weights
  const Tensor got = qm.model->forward(prompt);
  for (std::int64_t i = 0; i < ref.numel(); ++i) ASSERT_EQ(got.f32()[i], ref.f32()[i]) << i;
  EXPECT_EQ(quant::dump_sorted(checkpoint_config_json(*qm.lifecycle)),
            quant::dump_sorted(checkpoint_config_json(*lc)));
}

// Phi-3's checkpoint stacks q/k/v in qkv_proj and gate/up in gate_up_proj: a rotated scheme is
// saved under Phi-3's own names (no q/k/v_proj tensors), with the rotated v_proj in qkv_proj's v
// rows, the q / k rows and gate_up_proj as stored, o_proj rotated; loaded back, kvq splits it again
// and the logits equal the calibrated model's bit for bit.
TEST(Checkpoint, Phi3RotatedSchemeIsSavedWithItsFusedTensors) {
  test::TempDir tmp;
  const fs::path dir = test::tiny_variant_dir("phi3");
  auto m = model::CausalLM::load(dir);
  // SpinQuant's R2 target re:.*v_proj$ also names qkv_proj (refused: TransformRows); this one
  // names kvq's v_proj only.
  quant::QuantizationConfig recipe_config =
      quant::load_recipe(fs::path(KVQ_SOURCE_DIR) / "examples/recipes/kv_fp8_head_r3.yaml");
  ASSERT_TRUE(recipe_config.spinquant);
  recipe_config.transforms = quant::spinquant_transform_config(*recipe_config.spinquant, 16);
  recipe_config.spinquant.reset();
  for (auto& [group, scheme] : recipe_config.transforms.config_groups) {
    for (quant::TransformArgs& args : scheme.apply) {
      for (std::string& t : args.targets) {
        if (t == "re:.*v_proj$") t = "re:.*self_attn\\.v_proj$";
      }
    }
  }
  auto lc = apply_quantization_config(*m, recipe_config);
  EXPECT_EQ(lc->transforms().fused_modules().size(), 4u);  // v_proj, o_proj of 2 layers
  calibrate(*lc, samples(), {.show_progress = false});
  const std::vector<std::int32_t> prompt{5, 6, 7, 100, 200, 17, 42, 99, 3, 250, 7, 8, 64, 1, 9};
  const Tensor ref = m->forward(prompt);  // 15 tokens: past the window of 12
  save_pretrained(*lc, dir, tmp / "q");

  const auto st = io::SafetensorsModel::open(tmp / "q");
  const auto plain = io::SafetensorsModel::open(dir);
  EXPECT_EQ(st.names().size(), plain.names().size() + 2 * 2);  // + k/v scales of 2 layers
  for (const std::string& n : st.names()) {
    EXPECT_TRUE(plain.contains(n) || n.ends_with("_scale")) << n;
  }
  const std::vector<float> qkv =
      st.tensor("model.layers.1.self_attn.qkv_proj.weight").to_f32_vector();
  const std::vector<float> qkv0 =
      plain.tensor("model.layers.1.self_attn.qkv_proj.weight").to_f32_vector();
  const std::vector<float> v =
      m->find_module("model.layers.1.self_attn.v_proj")->weight().to_f32_vector();
  const auto qk = static_cast<std::ptrdiff_t>(qkv.size() - v.size());  // q and k rows
  EXPECT_EQ(std::vector<float>(qkv.begin(), qkv.begin() + qk),
            std::vector<float>(qkv0.begin(), qkv0.begin() + qk));
  EXPECT_EQ(std::vector<float>(qkv.begin() + qk, qkv.end()), v);
  EXPECT_NE(std::vector<float>(qkv0.begin() + qk, qkv0.end()), v);  // rotated
  EXPECT_EQ(st.tensor("model.layers.0.mlp.gate_up_proj.weight").to_f32_vector(),
            plain.tensor("model.layers.0.mlp.gate_up_proj.weight").to_f32_vector());
  EXPECT_EQ(st.tensor("model.layers.0.self_attn.o_proj.weight").to_f32_vector(),
            m->find_module("model.layers.0.self_attn.o_proj")->weight().to_f32_vector());

  auto qm = QuantizedModel::load(tmp / "q");
  ASSERT_TRUE(qm.lifecycle);
  EXPECT_TRUE(qm.lifecycle->transforms().fused_modules().empty());  // already in the weights
  const Tensor got = qm.model->forward(prompt);
  for (std::int64_t i = 0; i < ref.numel(); ++i) ASSERT_EQ(got.f32()[i], ref.f32()[i]) << i;
}

// Writes a copy of `src` with tensor `name` replaced (or dropped when t is undefined).
void rewrite(const fs::path& src, const fs::path& dst, const std::string& name, const Tensor* t,
             const std::string& extra = "") {
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json", fs::copy_options::overwrite_existing);
  const auto st = io::SafetensorsModel::open(src);
  io::SafetensorsWriter w;
  for (const auto& n : st.names()) {
    if (n == name) {
      if (t) w.add(n, *t);
    } else {
      w.add(n, st.tensor(n));
    }
  }
  if (!extra.empty()) w.add(extra, Tensor::from_f32({1}, std::vector<float>{1.0f}));
  w.write(dst / "model.safetensors");
}

TEST(Checkpoint, BadCheckpointsFailClearly) {
  test::TempDir tmp;
  auto m = model::CausalLM::load(tiny_dir());
  auto lc = apply_quantization_config(*m, quant::load_recipe(recipe("kv_fp8_head_static_minmax")));
  calibrate(*lc, samples(), {.show_progress = false});
  save_pretrained(*lc, tiny_dir(), tmp / "good");
  const std::string k0 = "model.layers.0.self_attn.k_scale";
  auto expect_format_error = [&](const fs::path& dir, const std::string& needle) {
    auto mm = model::CausalLM::load(dir);
    try {
      load_quantized(*mm, dir);
      FAIL() << "expected FormatError for " << dir;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const Tensor wrong_shape = Tensor::from_f32({2}, std::vector<float>{0.1f, 0.1f});
  rewrite(tmp / "good", tmp / "shape", k0, &wrong_shape);
  expect_format_error(tmp / "shape", "has shape [2], expected [2, 1, 1]");
  Tensor wrong_dtype(DType::kBF16, {2, 1, 1});
  rewrite(tmp / "good", tmp / "dtype", k0, &wrong_dtype);
  expect_format_error(tmp / "dtype", "has dtype BF16");
  rewrite(tmp / "good", tmp / "missing", k0, nullptr);
  expect_format_error(tmp / "missing", "model.layers.0.self_attn.k_scale is missing");
  const Tensor zero = Tensor::from_f32({2, 1, 1}, std::vector<float>{0.0f, 0.1f});
  rewrite(tmp / "good", tmp / "zero", k0, &zero);
  expect_format_error(tmp / "zero", "is not a valid scale");
  rewrite(tmp / "good", tmp / "extra", "", nullptr, "model.layers.0.self_attn.q_scale");
  expect_format_error(tmp / "extra", "q_scale is not quantized by");
  // Unquantized directory.
  auto plain = model::CausalLM::load(tiny_dir());
  EXPECT_THROW(load_quantized(*plain, tiny_dir()), ConfigError);
}

TEST(Checkpoint, UncalibratedSaveLeavesNoOutput) {
  test::TempDir tmp;
  auto m = model::CausalLM::load(tiny_dir());
  auto lc =
      apply_quantization_config(*m, quant::load_recipe(recipe("kv_fp8_tensor_static_minmax")));
  EXPECT_THROW(save_pretrained(*lc, tiny_dir(), tmp / "out"), InvalidArgument);
  EXPECT_FALSE(fs::exists(tmp / "out"));
  std::size_t entries = 0;
  for (auto it = fs::directory_iterator(tmp.path()); it != fs::directory_iterator(); ++it)
    ++entries;
  EXPECT_EQ(entries, 0u);
}

}  // namespace
}  // namespace kvq::lifecycle
