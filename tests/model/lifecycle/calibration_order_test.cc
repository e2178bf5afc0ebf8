// Calibration sample selection against llm-compressor 0.14.0.1's oneshot on a dataset longer than
// num_calibration_samples (all 7,473 GSM8K train rows, 16 samples of at most 256 tokens; golden
// tests/data/lifecycle/calibration_order_goldens.json from
// tools/reference/make_calibration_order_goldens.py): kvq picks the rows llm-compressor fed, in
// its order, for shuffle_calibration_samples True (after torch.manual_seed) and False, and the
// moving-average minmax k/v scales then agree (1e-4 relative, calibration_parity_test.cc's bound
// and reason; measured 1.6e-6 and 1.2e-6). Calibrated on the first 16 rows in file order, as kvq
// did before it took llm-compressor's selection, these scales differ by up to 46 %.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kv_scale_golden.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/quant/recipe.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream in(test::test_data_dir() / "lifecycle" / "calibration_order_goldens.json");
    EXPECT_TRUE(in.good()) << "missing calibration_order_goldens.json";
    return nlohmann::json::parse(in);
  }();
  return j;
}

class CalibrationOrder : public ::testing::TestWithParam<std::string> {};

TEST_P(CalibrationOrder, SamplesAndScalesMatchLlmCompressor) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const nlohmann::json& run = golden()["runs"][GetParam()];
  const auto tokenizer = tok::Tokenizer::from_dir(test::default_model_dir());
  DatasetOptions o;
  o.num_samples = golden()["num_calibration_samples"];
  o.max_seq_length = golden()["max_seq_length"];
  o.order = run["shuffle_calibration_samples"].get<bool>() ? SampleOrder::kShuffled
                                                           : SampleOrder::kLongestFirst;
  if (!run["seed"].is_null()) o.seed = run["seed"];
  const auto samples =
      load_calibration_dataset(test::shared_data_dir() / "gsm8k" / "train.jsonl", tokenizer, o);
  std::vector<std::int64_t> rows, lengths;
  for (const CalibrationSample& s : samples) {
    rows.push_back(s.index);
    lengths.push_back(static_cast<std::int64_t>(s.tokens.size()));
  }
  ASSERT_EQ(rows, run["fed_rows"].get<std::vector<std::int64_t>>());
  EXPECT_EQ(lengths, run["fed_lengths"].get<std::vector<std::int64_t>>());

  auto m = model::CausalLM::load(test::default_model_dir());
  auto lc = apply_quantization_config(
      *m, quant::load_recipe(test::test_data_dir() / "lifecycle" / "recipes" /
                             golden()["recipe"].get<std::string>()));
  (void)calibrate(*lc, samples, {.show_progress = false});
  (void)test::compare_kv_scales(run["layers"], *lc, 1e-4, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Lc, CalibrationOrder, ::testing::Values("shuffled", "longest_first"));

}  // namespace
}  // namespace kvq::lifecycle
