// `kvq oneshot` never overwrites an input: a --report naming the dataset, the recipe or a file
// of the model, a --report that names the heatmap's own file, and an --output that is or holds
// an input are refused before anything runs, and the inputs are left byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "support/test_paths.h"

namespace kvq::test {
namespace {
namespace fs = std::filesystem;

std::string read(const fs::path& p) { return read_bytes(p); }

TEST(CliOneshot, OutputsThatWouldOverwriteAnInputAreRefused) {
  TempDir tmp;
  const fs::path dataset = tmp / "data.jsonl";
  std::ofstream(dataset) << R"({"text": "hello world, this is a calibration line"})"
                         << "\n";
  const fs::path recipe = fs::path(KVQ_SOURCE_DIR) / "examples/recipes/kv_fp8_head.yaml";
  const std::string data_before = read(dataset), recipe_before = read(recipe);
  const fs::path model = default_model_dir();
  const std::vector<std::string> base = {"oneshot",  "--model",       model.string(),
                                         "--recipe", recipe.string(), "--num-calibration-samples",
                                         "1"};
  const auto expect_refused = [&](std::vector<std::string> extra, const std::string& message,
                                  const fs::path& data = {}) {
    std::vector<std::string> args = base;
    args.push_back("--dataset");
    args.push_back(data.empty() ? dataset.string() : data.string());
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_kvq(args);
    EXPECT_NE(r.exit_code, 0) << ::testing::PrintToString(extra);
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  };
  expect_refused({"--report", dataset.string()}, "would overwrite --dataset");
  expect_refused({"--report", recipe.string()}, "would overwrite --recipe");
  expect_refused({"--report", (model / "config.json").string()},
                 "would overwrite a file of --model");
  expect_refused({"--report", (tmp / "heat.png").string()}, "names the heatmap's file");
  // data.json's heatmap would be data.png, beside data.jsonl: fine; but a report whose .png or
  // .svg sibling is an input is refused too.
  const fs::path svg_input = tmp / "notes.svg";
  std::ofstream(svg_input) << "<svg/>";
  expect_refused({"--report", (tmp / "notes.json").string()}, "would overwrite --dataset",
                 svg_input);
  expect_refused({"--output", model.string(), "--overwrite"}, "would replace --model");
  expect_refused({"--output", model.parent_path().string(), "--overwrite"},
                 "would replace --model");
  expect_refused({"--output", tmp.path().string(), "--overwrite"}, "would replace --dataset");
  expect_refused({"--output", tmp.path().string() + "/", "--overwrite"}, "would replace --dataset");
  EXPECT_EQ(read(dataset), data_before);
  EXPECT_EQ(read(recipe), recipe_before);
  EXPECT_TRUE(fs::exists(model / "model.safetensors"));
}

}  // namespace
}  // namespace kvq::test
