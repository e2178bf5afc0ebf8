// Sampler: greedy, seeded sampling, top-k / top-p support, parameter validation; generate().
#include <map>

#include "kvq/model/sampler.h"
#include "tiny_model.h"

namespace kvq::model::test {
namespace {

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  Sampler s;
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  Sampler s({.temperature = 5.0, .top_k = 1, .seed = 3});
  const std::vector<float> logits = {0.1f, 0.2f, 0.15f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> logits = {2.0f, 1.9f, 1.8f, -5.0f, 0.0f};
  Sampler k2({.temperature = 1.0, .top_k = 2, .seed = 1});
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[k2.sample(logits)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[0], 800);  // p ≈ 0.525 vs 0.475
  EXPECT_GT(seen[1], 700);
  // top_p = 0.5: token 0 alone holds ~0.36 < 0.5, so 0 and 1 are kept (0.69 ≥ 0.5).
  Sampler p({.temperature = 1.0, .top_p = 0.5, .seed = 2});
  seen.clear();
  for (int i = 0; i < 2000; ++i) ++seen[p.sample(logits)];
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.count(0) && seen.count(1));
}

TEST(Sampler, SameSeedSameSequence) {
  const std::vector<float> logits = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f};
  Sampler a({.temperature = 1.0, .seed = 42}), b({.temperature = 1.0, .seed = 42});
  Sampler c({.temperature = 1.0, .seed = 43});
  std::vector<int> xa, xb, xc;
  for (int i = 0; i < 64; ++i) {
    xa.push_back(a.sample(logits));
    xb.push_back(b.sample(logits));
    xc.push_back(c.sample(logits));
  }
  EXPECT_EQ(xa, xb);
  EXPECT_NE(xa, xc);
}

TEST(Sampler, BadParametersThrow) {
  EXPECT_THROW(Sampler({.temperature = -1.0}), InvalidArgument);
  EXPECT_THROW(Sampler({.temperature = NAN}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_k = -2}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_p = 0.0}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_p = 1.5}), InvalidArgument);
  Sampler s;
  EXPECT_THROW(s.sample({}), InvalidArgument);
}

}  // namespace
}  // namespace kvq::model::test
