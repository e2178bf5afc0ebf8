// Weight-quantized checkpoints llm-compressor 0.14 saved (tests/data/lifecycle/wq_tiny_*:
// the tiny GQA Llama with FP8 / FP8_DYNAMIC / W8A8 int8 / W4A16 group-32 sym and asym Linears,
// written by tools/reference/make_weight_quant_goldens.py): kvq dequantizes them at load
// bit-exactly as compressed-tensors does, and its forward (weights + the schemes' input
// quantization) reproduces transformers' logits.
#include <fmt/format.h>

#include <cstdio>

#include "kvq/core/error.h"
#include "kvq/io/json_file.h"
#include "kvq/model/model_config.h"
#include "tiny_model.h"

namespace kvq::model::test {
namespace {

std::filesystem::path dir_of(const std::string& variant) {
  return ::kvq::test::test_data_dir() / "lifecycle" / ("wq_tiny_" + variant);
}
nlohmann::json goldens_of(const std::string& variant) {
  return io::read_json_file(::kvq::test::test_data_dir() / "lifecycle" /
                            ("wq_tiny_" + variant + "_goldens.json"));
}

// FNV-1a 64 of a tensor's little-endian bytes, as the golden script hashes torch's.
std::string fnv1a64(const Tensor& t) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const std::uint8_t*>(t.data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return fmt::format("{:016x}", h);
}

DType dtype_of(const std::string& torch_name) {
  return torch_name == "bfloat16" ? DType::kBF16 : DType::kF32;
}

// Every quantized Linear's weight as kvq stores it against the golden's (dtype and bytes), and
// the full values of the one tensor the golden lists in full, for a readable first mismatch.
void expect_weights(const CausalLM& m, const nlohmann::json& golden, DType storage) {
  ASSERT_EQ(m.compressed_linears().size(), golden.size());
  for (const auto& [module, rec] : golden.items()) {
    const Module* mod = const_cast<CausalLM&>(m).find_module(module);
    ASSERT_NE(mod, nullptr) << module;
    const Tensor& w = mod->weight();
    EXPECT_EQ(w.dtype(), storage) << module;
    EXPECT_EQ(w.shape(), rec["shape"].get<Shape>()) << module;
    EXPECT_EQ(fnv1a64(w), rec["fnv1a64"].get<std::string>()) << module;
    if (rec.contains("values")) {
      const std::vector<float> want = rec["values"].get<std::vector<float>>();
      const std::vector<float> got = w.to_f32_vector();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << module << "[" << i << "]";
    }
  }
}

class CompressedLinear : public ::testing::TestWithParam<std::string> {};

// --weights auto picks the scales' dtype, and the weights are then compressed-tensors' own
// decompression of the stored tensors (bf16 for the bf16 checkpoints), bit for bit.
TEST_P(CompressedLinear, AutoLoadsCompressedTensorsDecompressionBitExact) {
  const auto golden = goldens_of(GetParam());
  const DType stored = dtype_of(golden["stored"].begin().value()["dtype"].get<std::string>());
  EXPECT_EQ(resolve_weight_dtype("auto", dir_of(GetParam())), stored);
  const auto m = CausalLM::load(dir_of(GetParam()), LoadOptions{stored});
  expect_weights(*m, golden["stored"], stored);
}

// --weights f32: the weights transformers holds after from_pretrained(dtype=float32), which casts
// the scales to fp32 before decompressing (equal to the above for fp32 checkpoints).
TEST_P(CompressedLinear, F32LoadsWhatTransformersHoldsInFloat32) {
  const auto m = CausalLM::load(dir_of(GetParam()), LoadOptions{DType::kF32});
  expect_weights(*m, goldens_of(GetParam())["float32"], DType::kF32);
}

// The logits of transformers + compressed-tensors (float32, eager; W8A8 / FP8 inputs quantized
// per token or with the static input_scale, as compressed-tensors' forward does). Both compute
// in fp32 with their own summation orders (~1e-6 apart), so an input that lands within that
// distance of a rounding midpoint of the input quantization can take the other code. On this
// prompt that happens once, for int8 (127 steps per token's amax; FP8's coarser grid has fewer
// midpoints near any value): position 10 of w8a8_int8 differs by 0.026 and position 11, which
// attends to it, by 0.018; positions 0-9 agree to 1.6e-6. The activation quantization itself
// moves the logits by 0.05-0.24 (recorded by the script), so a forward without it would fail.
TEST_P(CompressedLinear, LogitsMatchTransformers) {
  const auto golden = goldens_of(GetParam());
  const auto m = CausalLM::load(dir_of(GetParam()), LoadOptions{DType::kF32});
  const auto prompt = golden["prompt"].get<std::vector<std::int32_t>>();
  const Tensor got = m->forward(prompt, LogitsMode::kAll);
  const auto want = golden["logits"].get<std::vector<std::vector<float>>>();
  ASSERT_EQ(static_cast<std::int64_t>(want.size() * want[0].size()), got.numel());
  const std::size_t flipped_from = GetParam() == "w8a8_int8" ? 10 : want.size();
  double worst = 0, worst_flipped = 0;
  for (std::size_t t = 0; t < want.size(); ++t)
    for (std::size_t v = 0; v < want[t].size(); ++v) {
      const double d = std::fabs(got.f32()[t * want[t].size() + v] - want[t][v]);
      (t < flipped_from ? worst : worst_flipped) =
          std::max(t < flipped_from ? worst : worst_flipped, d);
    }
  std::printf(
      "%s: max |logit diff| kvq vs transformers %.3g (positions after a flipped input "
      "code: %.3g; activation quantization moves them by %.3g)\n",
      GetParam().c_str(), worst, worst_flipped,
      golden["logits_max_abs_diff_act_quant"].get<double>());
  EXPECT_LT(worst, 1e-4);
  EXPECT_LT(worst_flipped, 0.03);
}

INSTANTIATE_TEST_SUITE_P(LlmCompressor, CompressedLinear,
                         ::testing::Values("fp8", "fp8_dynamic", "w8a8_int8", "w4a16",
                                           "w4a16_asym"));

// The config of `variant` with quantization_config.<key> (in group_0 when `in_group`) set.
ModelConfig config_with(const std::string& variant, const std::string& key,
                        const nlohmann::json& value, bool in_group) {
  ModelConfig c = load_model_config(dir_of(variant));
  auto& q = c.raw["quantization_config"];
  (in_group ? q["config_groups"]["group_0"] : q)[key] = value;
  return c;
}

std::string load_error(const ModelConfig& c, const std::string& variant) {
  try {
    CausalLM::from_weights(c, load_weights(dir_of(variant)), "ckpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

// Formats kvq does not read are refused naming the format and a module; so are a sparse
// checkpoint and a scheme kvq cannot run.
TEST(CompressedLinearRefusals, NameWhatIsUnsupported) {
  for (const char* format : {"marlin-24", "nvfp4-pack-quantized", "mxfp4-pack-quantized"}) {
    const std::string e = load_error(config_with("fp8", "format", format, true), "fp8");
    EXPECT_NE(e.find(std::string("format ") + format), std::string::npos) << e;
    EXPECT_NE(e.find("'model.layers.0."), std::string::npos) << e;
  }
  std::string e = load_error(config_with("w4a16", "format", "bogus-format", true), "w4a16");
  // (the config parser's pydantic-style message names the field and the formats it knows)
  EXPECT_NE(e.find("group_0: format: Input should be 'dense'"), std::string::npos) << e;
  EXPECT_NE(e.find("input_value='bogus-format'"), std::string::npos) << e;  // the value given
  e = load_error(config_with("fp8", "sparsity_config", {{"format", "sparse-24-bitmask"}}, false),
                 "fp8");
  EXPECT_NE(e.find("sparse-24-bitmask"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'model.layers.0."), std::string::npos) << e;
  // A quantization_config whose groups do not reach the compressed Linears.
  e = load_error(config_with("w8a8_int8", "ignore", {"re:.*mlp.*"}, false), "w8a8_int8");
  EXPECT_NE(e.find("no config group of the quantization_config targets 'model.layers.0.mlp."),
            std::string::npos)
      << e;
  // Output activation quantization is not run.
  nlohmann::json out = {{"num_bits", 8},
                        {"type", "float"},
                        {"strategy", "token"},
                        {"dynamic", true},
                        {"symmetric", true}};
  e = load_error(config_with("fp8_dynamic", "output_activations", out, true), "fp8_dynamic");
  EXPECT_NE(e.find("quantizes its outputs"), std::string::npos) << e;
  // Without a quantization_config the tensors mean nothing kvq can run.
  ModelConfig plain = load_model_config(dir_of("fp8"));
  plain.raw.erase("quantization_config");
  e = load_error(plain, "fp8");
  EXPECT_NE(e.find("config.json has no quantization_config"), std::string::npos) << e;
}

}  // namespace
}  // namespace kvq::model::test
