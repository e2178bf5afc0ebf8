// `kvq compare` / `kvq eval` with --text (a small file of our own) and --kld exact on the default
// model, tiny budgets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/cli/cli_run.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;

namespace {

// The first GSM8K test questions, one per line: a text that is not WikiText-2.
fs::path write_questions(const fs::path& path) {
  std::ifstream in(kvq::test::shared_data_dir() / "gsm8k" / "test.jsonl");
  std::ofstream out(path, std::ios::binary);
  std::string line;
  for (int i = 0; i < 12 && std::getline(in, line); ++i)
    out << nlohmann::json::parse(line)["question"].get<std::string>() << "\n";
  return path;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

}  // namespace

// --text: the report names the file, results.json says so; --kld exact: every row's KLD is the
// exact KL (the baseline's 0), within the top-K bounds of a --kld topk run of the same scheme.
TEST(CompareTextKld, OwnTextAndExactKld) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const fs::path text = write_questions(tmp / "questions.txt");
  const fs::path out = tmp / "out";
  const auto run = [&](const std::string& kld) {
    return kvq::test::run_kvq({"-q",
                               "compare",
                               "--model",
                               kvq::test::default_model_dir().string(),
                               "--schemes",
                               "baseline,KV-INT4-Head",
                               "--text",
                               text.string(),
                               "--kld",
                               kld,
                               "--ctx",
                               "128",
                               "--max-windows",
                               "2",
                               "--calib-samples",
                               "4",
                               "--gsm8k-limit",
                               "0",
                               "--decode-steps",
                               "0",
                               "--data",
                               kvq::test::shared_data_dir().string(),
                               "--out",
                               out.string()});
  };
  const kvq::test::CliResult exact_run = run("exact");
  ASSERT_EQ(exact_run.exit_code, 0) << exact_run.err;
  EXPECT_NE(exact_run.out.find("— questions.txt ctx 128, 2 windows"), std::string::npos)
      << exact_run.out;
  EXPECT_EQ(exact_run.out.find("lower bound"), std::string::npos) << exact_run.out;
  const auto exact = read_json(out / "results.json");
  EXPECT_EQ(exact["text"], "questions.txt");
  const auto& base = exact["schemes"][0];
  EXPECT_EQ(base["kld"]["mean"].get<double>(), 0.0);
  EXPECT_TRUE(base["kld"]["exact"].get<bool>());
  const auto& int4 = exact["schemes"][1];
  EXPECT_TRUE(int4["kld"]["exact"].get<bool>());
  EXPECT_EQ(int4["wikitext2"]["windows"].get<int>(), 2);

  const kvq::test::CliResult topk_run = run("topk");  // the same out: calibration reused
  ASSERT_EQ(topk_run.exit_code, 0) << topk_run.err;
  EXPECT_NE(topk_run.out.find("lower bound"), std::string::npos) << topk_run.out;
  const auto topk = read_json(out / "results.json");
  const auto& bounds = topk["schemes"][1];
  EXPECT_FALSE(bounds["kld"]["exact"].get<bool>());
  const double kl = int4["kld"]["mean"].get<double>();
  EXPECT_GT(kl, 0.0);
  // Per token KL_K <= KL <= KL_upper, up to the cached log-probs' float32 rounding.
  EXPECT_LE(bounds["kld"]["mean"].get<double>(), kl + 1e-6);
  EXPECT_GE(bounds["kld"]["upper"].get<double>(), kl - 1e-6);
  EXPECT_EQ(bounds["wikitext2"]["ppl"].get<double>(), int4["wikitext2"]["ppl"].get<double>());
}

TEST(CompareTextKld, MissingTextIsNamed) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const std::string missing = (tmp / "no-such-text.txt").string();
  for (const char* cmd : {"eval", "compare"}) {
    std::vector<std::string> args = {
        "-q",     cmd,     "--model", kvq::test::default_model_dir().string(),
        "--text", missing, "--data",  kvq::test::shared_data_dir().string()};
    if (std::string(cmd) == "eval") args.insert(args.end(), {"--kv-cache", "int8:head"});
    if (std::string(cmd) == "compare") args.insert(args.end(), {"--out", (tmp / "out").string()});
    const kvq::test::CliResult r = kvq::test::run_kvq(args);
    EXPECT_NE(r.exit_code, 0) << cmd;
    EXPECT_NE(r.err.find(missing), std::string::npos) << cmd << ": " << r.err;
  }
}

TEST(CompareTextKld, EvalExactKldOnOwnText) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const fs::path text = write_questions(tmp / "questions.txt");
  const kvq::test::CliResult r = kvq::test::run_kvq(
      {"-q", "eval", "--model", kvq::test::default_model_dir().string(), "--kv-cache", "int8:head",
       "--task", "kld", "--kld", "exact", "--text", text.string(), "--ctx", "128", "--max-windows",
       "1", "--data", kvq::test::shared_data_dir().string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], "questions.txt");
  EXPECT_TRUE(j["scheme"]["kld"]["exact"].get<bool>());
  EXPECT_EQ(j["baseline"]["kld"]["mean"].get<double>(), 0.0);
  EXPECT_GT(j["scheme"]["kld"]["mean"].get<double>(), 0.0);
  EXPECT_EQ(j["scheme"]["kld"]["upper"].get<double>(), j["scheme"]["kld"]["mean"].get<double>());
  const kvq::test::CliResult bad = kvq::test::run_kvq(
      {"-q", "eval", "--model", kvq::test::default_model_dir().string(), "--kld", "full"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("topk or exact"), std::string::npos) << bad.err;
}
