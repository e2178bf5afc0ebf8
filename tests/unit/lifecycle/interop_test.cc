// transformers interop, recorded once by tools/reference/check_checkpoint_interop.py: a kvq
// checkpoint of the tiny GQA Llama (q/k/v FP8 per head) loads in transformers 5.17 +
// compressed-tensors 0.19 with bit-identical scales, and its fake-quantized logits agree with
// kvq's forward of the same checkpoint. The checkpoint is rebuilt here deterministically.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "interop_support.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

TEST(Interop, TransformersLoadsKvqCheckpoint) {
  const auto tiny = test::test_data_dir() / "tiny_llama" / "gqa";
  auto m = model::CausalLM::load(tiny);
  auto lc = apply_quantization_config(
      *m, quant::load_recipe(test::test_data_dir() / "lifecycle" / "recipes" /
                             "attn_fp8_head_static_minmax.yaml"));
  calibrate(*lc, interop::interop_samples(), {.show_progress = false});
  test::TempDir tmp;
  std::filesystem::path out = tmp / "ckpt";
  if (const char* dir = std::getenv("KVQ_INTEROP_SAVE_DIR")) out = dir;  // reference generation
  save_pretrained(*lc, tiny, out);

  std::ifstream in(test::test_data_dir() / "lifecycle" / "interop_transformers.json");
  ASSERT_TRUE(in) << "run tools/reference/check_checkpoint_interop.py";
  const auto rec = nlohmann::json::parse(in);
  EXPECT_TRUE(rec["scales_loaded_equal"].get<bool>());
  EXPECT_EQ(rec["scales_checked"].get<int>(), 9);
  auto qm = QuantizedModel::load(out);
  const auto prompt = rec["prompt"].get<std::vector<std::int32_t>>();
  const Tensor got = qm.model->forward(prompt, model::LogitsMode::kAll);
  // Tolerance: fp32 on both sides, different summation orders (~1e-6); a state landing on an
  // E4M3 rounding midpoint could round differently and move a logit by ~1e-3 — the tiny model's
  // logits are O(1), so 5e-3 absolute catches any real mismatch (wrong scale, missing q quant).
  const double worst = interop::max_abs_logit_diff(got, rec["logits"]);
  std::printf("max |logit diff| kvq vs transformers: %.3g\n", worst);
  EXPECT_LT(worst, 5e-3);
}

}  // namespace
}  // namespace kvq::lifecycle
