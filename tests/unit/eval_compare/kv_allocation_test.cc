// The pure parts of `kvq allocate` (eval/kv_allocation.h): the --kv-cache exceptions a set of
// tensors becomes, and the greedy choice under a bits budget. The scan itself runs in
// tests/model/eval/allocate_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "kvq/eval/kv_allocation.h"
#include "kvq/runtime/kv_cache_choice.h"

namespace kvq::eval {
namespace {

TEST(KvAllocation, ExceptionsMergeRunsKBeforeV) {
  EXPECT_EQ(layer_exceptions({}, "int5_g64_mse"), "");
  const std::vector<KvTensor> t = {{3, true},  {2, false},  {1, true},   {9, false},  {1, false},
                                   {3, false}, {13, false}, {10, false}, {11, false}, {3, true}};
  const std::string s = layer_exceptions(t, "int5_g64_mse");
  EXPECT_EQ(s,
            "+k1-3=int5_g64_mse+k9-11=int5_g64_mse+k13=int5_g64_mse+v1=int5_g64_mse+v3=int5_"
            "g64_mse");
  // What the string asks for is exactly the set: parsed back as the cache's exceptions.
  const runtime::KvCacheOption o = runtime::parse_kv_cache_option("nl4_g64+sink1" + s);
  ASSERT_EQ(o.layer_formats.size(), 5u);
  EXPECT_EQ(o.layer_formats[1].first, 9);
  EXPECT_EQ(o.layer_formats[1].last, 11);
  EXPECT_FALSE(o.layer_formats[1].values);
  EXPECT_TRUE(o.layer_formats[4].values);
  EXPECT_FALSE(o.layer_formats[4].keys);
  EXPECT_EQ(o.layer_formats[4].first, 3);
  EXPECT_EQ(o.layer_formats[4].format, quant::KvFormat::kINT5G64Mse);
}

TEST(KvAllocation, GreedyByGainPerBitWithinTheBudget) {
  // Four candidates of cost 0.25 bits, one of 0.5: budget 4.0 + 0.75.
  const std::vector<double> gains = {0.010, -0.002, 0.030, 0.020, 0.045};
  const std::vector<double> costs = {0.25, 0.25, 0.25, 0.25, 0.5};
  // Gain per bit: #2 0.12, #4 0.09, #3 0.08, #0 0.04; #2 (4.25) + #4 (4.75) fill the budget.
  EXPECT_EQ(choose_upgrades(gains, costs, 4.0, 4.75), (std::vector<std::size_t>{2, 4}));
  // A budget that #4 no longer fits: it is skipped, cheaper ones after it still taken.
  EXPECT_EQ(choose_upgrades(gains, costs, 4.0, 4.5), (std::vector<std::size_t>{2, 3}));
  // No budget left: nothing; every positive gain when the budget is large; never a loss.
  EXPECT_TRUE(choose_upgrades(gains, costs, 4.0, 4.0).empty());
  EXPECT_EQ(choose_upgrades(gains, costs, 4.0, 10.0), (std::vector<std::size_t>{2, 4, 3, 0}));
  // Equal ratios keep the candidates' order.
  EXPECT_EQ(choose_upgrades(std::vector<double>{0.01, 0.01, 0.01},
                            std::vector<double>{0.1, 0.1, 0.1}, 0.0, 0.2),
            (std::vector<std::size_t>{0, 1}));
  // 60 tensors at 1/60 bit each land exactly on 4.25 + 15/60 = 4.5 despite rounding.
  const std::vector<double> many_gains(60, 0.001), many_costs(60, 1.0 / 60.0);
  EXPECT_EQ(choose_upgrades(many_gains, many_costs, 4.25, 4.5).size(), 15u);
}

}  // namespace
}  // namespace kvq::eval
