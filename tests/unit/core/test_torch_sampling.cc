// kvq's reproduction of torch's CPU sampler and argsort against torch itself
// (tests/data/core/torch_sampling_goldens.json, tools/reference/make_torch_sampling_goldens.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/core/torch_sampling.h"
#include "support/test_paths.h"

namespace kvq {
namespace {

const nlohmann::json& goldens() {
  static const nlohmann::json j = [] {
    std::ifstream in(test::test_data_dir() / "core" / "torch_sampling_goldens.json");
    EXPECT_TRUE(in.good()) << "missing tests/data/core/torch_sampling_goldens.json";
    return nlohmann::json::parse(in);
  }();
  return j;
}

TEST(TorchSampling, RandomSamplerAfterManualSeedEqualsTorch) {
  ASSERT_GE(goldens()["random_sampler"].size(), 9u);
  for (const nlohmann::json& c : goldens()["random_sampler"]) {
    const std::uint64_t seed = std::stoull(c["seed"].get<std::string>());
    const auto want = c["indices"].get<std::vector<std::int64_t>>();
    EXPECT_EQ(torch_random_sampler(c["n"], c["k"], seed, c["draws_before"]), want)
        << "seed " << seed << " n " << c["n"] << " after " << c["draws_before"] << " draws";
  }
}

TEST(TorchSampling, ArgsortDescendingKeepsTorchsTieOrder) {
  bool saw_reordered_ties = false;
  for (const nlohmann::json& c : goldens()["argsort_descending"]) {
    const auto lengths = c["lengths"].get<std::vector<std::int64_t>>();
    const auto want = c["order"].get<std::vector<std::int64_t>>();
    EXPECT_EQ(torch_argsort_descending(lengths), want) << lengths.size() << " values";
    // The goldens must exercise ties that a stable sort would order differently.
    for (std::size_t i = 0; i + 1 < want.size(); ++i)
      saw_reordered_ties |= lengths[static_cast<std::size_t>(want[i])] ==
                                lengths[static_cast<std::size_t>(want[i + 1])] &&
                            want[i] > want[i + 1];
  }
  EXPECT_TRUE(saw_reordered_ties);
}

TEST(TorchSampling, GeneratorDrawsAndRefusals) {
  TorchGenerator g(5489);  // std::mt19937's default seed: its first output is known
  EXPECT_EQ(g.random(), 3499211612u);
  TorchGenerator a(7), b(std::uint64_t{7} | std::uint64_t{1} << 40);  // only the low 32 bits seed
  EXPECT_EQ(a.random64(), b.random64());
  EXPECT_TRUE(torch_randperm(0, g).empty());
  EXPECT_THROW((void)torch_randperm(-1, g), InvalidArgument);
  EXPECT_THROW((void)torch_random_sampler(3, 4, 0), InvalidArgument);
}

}  // namespace
}  // namespace kvq
