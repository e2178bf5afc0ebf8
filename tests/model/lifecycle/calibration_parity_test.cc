// Calibration parity with llm-compressor 0.14.0.1 on the default model (SmolLM2-135M-Instruct):
// the same 64 GSM8K samples (token ids and feed order from the golden), the same recipes; every
// q/k/v scale within 1e-4 relative. Why 1e-4: both sides are fp32, but the reference attention
// (torch sdpa, MKL GEMMs) and kvq's kernels sum in different orders, so states — and their
// maxima — differ by ~1e-6 relative after 30 layers; 1e-4 leaves margin without hiding a wrong
// observer rule (minmax vs static_minmax differ by > 1e-2 here).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "kv_scale_golden.h"
#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/io/safetensors.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/states_tensor.h"
#include "kvq/quant/observers.h"
#include "kvq/quant/recipe.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

nlohmann::json golden() {
  std::ifstream in(test::test_data_dir() / "lifecycle" / "calibration_goldens.json");
  return nlohmann::json::parse(in);
}

std::vector<CalibrationSample> golden_samples(const nlohmann::json& g) {
  std::vector<CalibrationSample> out;
  for (const auto& idx : g["feed_order"]) {
    CalibrationSample s;
    s.index = idx.get<std::int64_t>();
    s.tokens = g["samples_rendered"][idx.get<std::size_t>()].get<std::vector<std::int32_t>>();
    out.push_back(std::move(s));
  }
  return out;
}

// Compares one golden recipe's layers with kvq scales; returns the worst relative difference.
double compare(const nlohmann::json& layers, const std::string& name,
               const std::function<const std::vector<float>*(std::size_t, char, Shape*)>& get) {
  double worst = 0;
  for (std::size_t l = 0; l < layers.size(); ++l)
    for (char b : {'q', 'k', 'v'}) {
      const std::string key = std::string(1, b) + "_scale";
      Shape shape;
      const std::vector<float>* got = get(l, b, &shape);
      if (!layers[l].contains(key)) {
        EXPECT_EQ(got, nullptr) << name << " layer " << l << " " << key;
        continue;
      }
      EXPECT_NE(got, nullptr) << name << " layer " << l << " " << key;
      if (got == nullptr) continue;
      EXPECT_EQ(Shape(layers[l][key]["shape"].get<std::vector<std::int64_t>>()), shape);
      if (layers[l][key].contains("uncalibrated_in_reference")) continue;  // see reference_finding
      const auto want = layers[l][key]["values"].get<std::vector<float>>();
      EXPECT_EQ(want.size(), got->size());
      for (std::size_t i = 0; i < want.size() && i < got->size(); ++i) {
        const double rel = std::fabs((*got)[i] - want[i]) / want[i];
        worst = std::max(worst, rel);
        EXPECT_LT(rel, 1e-4) << name << " layer " << l << " " << key << "[" << i << "]: kvq "
                             << (*got)[i] << " vs reference " << want[i];
      }
    }
  std::printf("%s: max relative scale difference %.3g\n", name.c_str(), worst);
  return worst;
}

// One calibration pass, as the golden was made: the attention-group recipe through calibrate()
// (q, k, v), and the kv-only recipes' observers (built from their recipes' kv_cache_scheme)
// hooked on the same attention modules, seeing the same k/v states (calibration runs with
// quantization disabled, so a kv-only lifecycle would observe exactly these states; the
// kv-only lifecycle path itself is covered by the unit tests on the tiny model).
TEST(CalibrationParity, ScalesMatchLlmCompressor) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const auto g = golden();
  auto m = model::CausalLM::load(test::default_model_dir());
  const auto recipes_dir = test::test_data_dir() / "lifecycle" / "recipes";
  auto lc = apply_quantization_config(
      *m, quant::load_recipe(recipes_dir / "attn_fp8_head_static_minmax.yaml"));
  const std::vector<std::string> kv_recipes = {"kv_fp8_tensor_static_minmax",
                                               "kv_fp8_head_static_minmax", "kv_fp8_head_minmax"};
  // side[recipe][layer][0 = k, 1 = v]
  std::vector<std::vector<std::array<std::unique_ptr<quant::Observer>, 2>>> side(kv_recipes.size());
  std::vector<model::HookHandle> handles;
  for (std::size_t r = 0; r < kv_recipes.size(); ++r) {
    const auto args = *quant::load_recipe(recipes_dir / (kv_recipes[r] + ".yaml")).kv_cache_scheme;
    side[r].resize(lc->states().size());
    for (std::size_t l = 0; l < lc->states().size(); ++l) {
      side[r][l][0] = quant::make_observer(args, "k");
      side[r][l][1] = quant::make_observer(args, "v");
      quant::Observer* k = side[r][l][0].get();
      quant::Observer* v = side[r][l][1].get();
      handles.push_back(lc->register_key_hook(
          *lc->states()[l],
          [k](model::AttentionModule&, model::StatesView s) { k->update(states_tensor(s)); }));
      handles.push_back(lc->register_value_hook(
          *lc->states()[l],
          [v](model::AttentionModule&, model::StatesView s) { v->update(states_tensor(s)); }));
    }
  }
  const auto result = calibrate(*lc, golden_samples(g), {.show_progress = false});
  for (auto& h : handles) h.remove();
  std::printf("calibrated %lld tokens in %.1f s\n", static_cast<long long>(result.tokens),
              result.seconds);

  compare(g["recipes"]["attn_fp8_head_static_minmax"]["layers"], "attn_fp8_head_static_minmax",
          [&](std::size_t l, char b, Shape* shape) -> const std::vector<float>* {
            const auto& p = lc->states()[l]->param(b);
            if (!p) return nullptr;
            *shape = p->shape;
            EXPECT_TRUE(p->calibrated());
            return &p->scale;
          });
  std::vector<std::vector<float>> keep;
  keep.reserve(200);
  for (std::size_t r = 0; r < kv_recipes.size(); ++r)
    compare(g["recipes"][kv_recipes[r]]["layers"], kv_recipes[r],
            [&](std::size_t l, char b, Shape* shape) -> const std::vector<float>* {
              if (b == 'q') return nullptr;
              const auto qp = side[r][l][b == 'k' ? 0 : 1]->peek_qparams();
              *shape = qp.scale.shape();
              keep.push_back(qp.scale.to_f32_vector());
              return &keep.back();
            });
}

TEST(CalibrationDataset, GsmRenderingMatchesReferenceTokens) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const auto g = golden();
  const auto tokenizer = tok::Tokenizer::from_dir(test::default_model_dir());
  DatasetOptions o;
  o.num_samples = 64;
  o.max_seq_length = 512;
  const auto samples =
      load_calibration_dataset(test::shared_data_dir() / "gsm8k" / "train.jsonl", tokenizer, o);
  ASSERT_EQ(samples.size(), 64u);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto want = g["samples_rendered"][i].get<std::vector<std::int32_t>>();
    const auto& got = samples[i].tokens;
    if (got == want) continue;
    std::size_t at = 0;
    while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
    std::string kvq_ids, ref_ids;
    for (std::size_t j = at; j < std::min(at + 8, got.size()); ++j)
      kvq_ids += std::to_string(got[j]) + " ";
    for (std::size_t j = at; j < std::min(at + 8, want.size()); ++j)
      ref_ids += std::to_string(want[j]) + " ";
    ADD_FAILURE() << "sample " << i << " (line " << samples[i].index
                  << "): first difference at token " << at << " of " << got.size() << " (reference "
                  << want.size() << "): kvq [" << kvq_ids << "] vs reference [" << ref_ids << "]";
  }
}

// A bf16 checkpoint of the default model (every tensor rounded to bf16 as torch's
// .to(torch.bfloat16) does) calibrates with bf16 weights and fp32 arithmetic (`--weights auto`),
// on the golden's samples in its feed order, against llm-compressor on the same checkpoint
// (tests/data/lifecycle/calibration_bf16_goldens.json, tools/reference/
// make_bf16_calibration_goldens.py): loaded as fp32 there (fp32 arithmetic on the same bf16
// weights) the scales agree within 1e-4 as above; loaded as bf16 (torch computing every
// activation in bf16, what a user of a bf16 model gets from it) they differ by the bf16 rounding
// of the observed k/v (measured: max 1.8 %, mean 0.35 %) — bounded here at 2.5 %, not hidden.
TEST(CalibrationParity, Bf16CheckpointScales) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  std::ifstream in(test::test_data_dir() / "lifecycle" / "calibration_bf16_goldens.json");
  const nlohmann::json bf16_golden = nlohmann::json::parse(in);
  test::TempDir dir;
  const auto src = io::SafetensorsModel::open(test::default_model_dir());
  io::SafetensorsWriter writer;
  std::vector<std::vector<std::uint16_t>> keep;
  for (const std::string& name : src.names()) {
    const Tensor t = src.tensor(name);
    std::vector<std::uint16_t>& bits = keep.emplace_back(static_cast<std::size_t>(t.numel()));
    for (std::int64_t i = 0; i < t.numel(); ++i) bits[i] = f32_to_bf16(t.f32()[i]);
    writer.add(name, Tensor::view(DType::kBF16, t.shape(), bits.data(), nullptr));
  }
  writer.write(dir / "model.safetensors");
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::default_model_dir() / f, dir / f);
  ASSERT_EQ(model::resolve_weight_dtype("auto", dir.path()), DType::kBF16);
  auto m = model::CausalLM::load(dir.path(), model::LoadOptions{DType::kBF16});
  auto lc = apply_quantization_config(
      *m, quant::load_recipe(test::test_data_dir() / "lifecycle" / "recipes" /
                             "kv_fp8_head_static_minmax.yaml"));
  (void)calibrate(*lc, golden_samples(golden()), {.show_progress = false});
  for (const auto& [run, bound] :
       std::vector<std::pair<std::string, double>>{{"fp32_on_bf16_weights", 1e-4}, {"bf16", 0.025}})
    (void)test::compare_kv_scales(bf16_golden["runs"][run]["layers"], *lc, bound,
                                  "bf16 checkpoint vs llm-compressor loading it as " + run);
}

}  // namespace
}  // namespace kvq::lifecycle
