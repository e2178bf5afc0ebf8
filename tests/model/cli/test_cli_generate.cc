// `kvq generate` on the default model against the engine goldens of transformers
// (tests/data/engine/smollm2_golden.safetensors, tools/reference/make_engine_goldens.py), and
// its error handling.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "kvq/io/safetensors.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::test {
namespace {

std::filesystem::path golden_path() {
  return test_data_dir() / "engine" / "smollm2_golden.safetensors";
}

std::vector<std::int32_t> golden_ids(const std::string& name) {
  const auto f = io::SafetensorsFile::open(golden_path());
  std::vector<std::int32_t> out;  // [n]; an integer dtype, exact in fp32 (ids < 2^24)
  for (float v : f.tensor(name).to_f32_vector()) out.push_back(static_cast<std::int32_t>(v));
  return out;
}

// Greedy ids up to and including the first stop id (kvq stops there; the golden does not).
std::vector<std::int32_t> cut_at_eos(std::vector<std::int32_t> ids, std::size_t n,
                                     const std::vector<std::int64_t>& stop) {
  ids.resize(std::min(ids.size(), n));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (std::find(stop.begin(), stop.end(), ids[i]) != stop.end()) {
      ids.resize(i + 1);
      break;
    }
  }
  return ids;
}

std::vector<std::int64_t> default_eos() {
  const auto tok = tok::Tokenizer::from_dir(default_model_dir());
  std::vector<std::int64_t> e;
  if (tok.eos_id()) e.push_back(*tok.eos_id());
  return e;
}

class CliGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    KVQ_REQUIRE_DEFAULT_MODEL();
    ASSERT_TRUE(std::filesystem::exists(golden_path())) << golden_path();
  }
};

TEST_F(CliGenerate, GreedyMatchesEngineGolden) {
  const CliResult r = run_kvq({"generate", "--model", default_model_dir().string(), "--prompt",
                               "Hello my name is", "--max-new-tokens", "20", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<std::int32_t>>(), golden_ids("prompt0.input_ids"));
  const auto want = cut_at_eos(golden_ids("prompt0.decode_tokens"), 20, default_eos());
  EXPECT_EQ(j["generated_ids"].get<std::vector<std::int32_t>>(), want);
  EXPECT_NE(r.err.find("decode"), std::string::npos) << "stats line on stderr: " << r.err;
}

TEST_F(CliGenerate, StreamedTextIsTheDecodedIds) {
  const CliResult r = run_kvq({"generate", "--model", default_model_dir().string(), "--prompt",
                               "Hello my name is", "--max-new-tokens", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto tok = tok::Tokenizer::from_dir(default_model_dir());
  auto ids = cut_at_eos(golden_ids("prompt0.decode_tokens"), 20, default_eos());
  if (!ids.empty() && tok.is_special(ids.back())) ids.pop_back();  // the EOS is not printed
  EXPECT_EQ(r.out, tok.decode(ids) + "\n");
  EXPECT_NE(r.err.find("prompt 4 tokens"), std::string::npos) << r.err;
}

TEST_F(CliGenerate, ChatPromptMatchesTemplateGolden) {
  const CliResult r =
      run_kvq({"generate", "--model", default_model_dir().string(), "--chat", "--prompt",
               "What is the capital of France?", "--max-new-tokens", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<std::int32_t>>(), golden_ids("prompt2.input_ids"));
  const auto want = golden_ids("prompt2.decode_tokens");
  const auto got = j["generated_ids"].get<std::vector<std::int32_t>>();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], want[0]);
}

void expect_fails(const std::vector<std::string>& extra, const std::string& message) {
  std::vector<std::string> args = {"generate", "--model", default_model_dir().string()};
  args.insert(args.end(), extra.begin(), extra.end());
  const CliResult r = run_kvq(args);
  EXPECT_NE(r.exit_code, 0) << "args: " << ::testing::PrintToString(extra);
  EXPECT_NE(r.err.find(message), std::string::npos)
      << "stderr: " << r.err << " (wanted '" << message << "')";
}

TEST_F(CliGenerate, BadArgumentsFailWithAMessage) {
  expect_fails({"--prompt", ""}, "--prompt is empty");
  expect_fails({"--prompt", "Hi", "--temperature", "-0.5"}, "--temperature must be >= 0");
  expect_fails({"--prompt", "Hi", "--top-p", "0"}, "--top-p must be in (0, 1]");
  expect_fails({"--prompt", "Hi", "--top-p", "1.5"}, "--top-p must be in (0, 1]");
  expect_fails({"--prompt", "Hi", "--top-k", "-1"}, "--top-k must be >= 0");
  // Range-checked by the parser (apps/kvq/flag_limits.h), before the model is read.
  expect_fails({"--prompt", "Hi", "--max-new-tokens", "0"},
               "--max-new-tokens: Value 0 not in range 1 to");
  expect_fails({"--prompt", "Hi", "--kv-cache", "int3"}, "unknown KV cache format");
  // "Hello my name is" is 4 tokens: it does not fit a context of 4 with room for one more.
  expect_fails({"--prompt", "Hello my name is", "--ctx", "4"}, "--truncate");
  const CliResult r = run_kvq({"generate", "--model", "/nonexistent/model", "--prompt", "Hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
}

TEST_F(CliGenerate, TruncateKeepsTheLastTokens) {
  const CliResult r =
      run_kvq({"generate", "--model", default_model_dir().string(), "--prompt", "Hello my name is",
               "--ctx", "4", "--truncate", "--max-new-tokens", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto full = golden_ids("prompt0.input_ids");
  const std::vector<std::int32_t> last2(full.end() - 2, full.end());
  EXPECT_EQ(j["prompt_ids"].get<std::vector<std::int32_t>>(), last2);
  EXPECT_EQ(j["generated_ids"].size(), 2u);
}

}  // namespace
}  // namespace kvq::test
