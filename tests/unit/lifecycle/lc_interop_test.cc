// Interop the other way round: kvq loads a checkpoint that llm-compressor 0.14.0.1 `oneshot`
// saved (tests/data/lifecycle/lc_tiny_kv_fp8_head/: the tiny GQA Llama in bf16 with a kv-only
// FP8 attn_head kv_cache_scheme, written by tools/reference/make_lc_tiny_checkpoint.py) and
// reproduces the logits transformers + compressed-tensors compute from the same directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "interop_support.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/lifecycle/checkpoint.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

TEST(LcInterop, KvqLoadsLlmCompressorCheckpoint) {
  const auto dir = test::test_data_dir() / "lifecycle" / "lc_tiny_kv_fp8_head";
  const auto rec = io::read_json_file(test::test_data_dir() / "lifecycle" /
                                      "lc_tiny_kv_fp8_head_transformers.json");
  ASSERT_TRUE(rec["scales_loaded_equal"].get<bool>());
  ASSERT_TRUE(rec["weights_equal_source_bf16"].get<bool>());

  QuantizedModel qm = QuantizedModel::load(dir);
  ASSERT_NE(qm.lifecycle, nullptr);
  EXPECT_EQ(qm.lifecycle->kv_format(), quant::KvFormat::kFP8E4M3);
  ASSERT_EQ(qm.lifecycle->states().size(), 3u);

  // The k/v scales kvq restored are the file's bf16 values (and what transformers registered).
  const auto st = io::SafetensorsModel::open(dir);
  int checked = 0;
  for (const auto& s : qm.lifecycle->states()) {
    EXPECT_FALSE(s->q.has_value()) << s->name;  // kv-only: no q quantization
    for (char base : {'k', 'v'}) {
      const auto& p = s->param(base);
      ASSERT_TRUE(p.has_value()) << s->name << " " << base;
      const std::string name = p->tensor_name(s->name);
      EXPECT_EQ(p->scale_dtype, DType::kBF16) << name;
      EXPECT_EQ(p->shape, (Shape{2, 1, 1})) << name;
      EXPECT_FALSE(p->zero_point.has_value()) << name;
      EXPECT_EQ(p->scale, st.tensor(name).to_f32_vector()) << name;
      EXPECT_EQ(p->scale, rec["scales"][name].get<std::vector<float>>()) << name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);

  // kvq's fake-quant forward (fp32 compute on the bf16 weights, k/v quantized by the hooks) vs
  // transformers' (loaded in float32: the same fp32 values). Both sides compute in fp32 with
  // different summation orders (~1e-6 on these O(1) logits).
  const auto prompt = rec["prompt"].get<std::vector<std::int32_t>>();
  const Tensor got = qm.model->forward(prompt, model::LogitsMode::kAll);
  const double worst = interop::max_abs_logit_diff(got, rec["logits"]);
  std::printf("max |logit diff| kvq vs transformers (llm-compressor checkpoint): %.3g\n", worst);
  EXPECT_LT(worst, 1e-3);
  // The comparison can see the quantization: the fake quantization moves the reference logits
  // by far more than the tolerance (recorded by the script with compressed-tensors disabled).
  EXPECT_GT(rec["logits_max_abs_diff_unquantized"].get<double>(), 1e-2);
}

}  // namespace
}  // namespace kvq::lifecycle
