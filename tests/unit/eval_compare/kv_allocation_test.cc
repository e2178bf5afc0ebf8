// The pure parts of `kvq allocate` (eval/kv_allocation.h): the --kv-cache exceptions a set of
// tensors becomes, and the greedy choice under a bits budget. The scan itself runs in
// tests/model/eval/allocate_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
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

// One-step ladders (base -> upgrade), as `kvq allocate` without --downgrade climbs them.
std::vector<Ladder> one_step(const std::vector<double>& gains, const std::vector<double>& costs) {
  std::vector<Ladder> l;
  for (std::size_t i = 0; i < gains.size(); ++i) l.push_back({{gains[i]}, {costs[i]}});
  return l;
}
std::vector<std::size_t> taken(const std::vector<Ladder>& ladders, double start, double budget) {
  std::vector<std::size_t> order;
  const std::vector<int> steps = climb_ladders(ladders, start, budget, &order);
  for (std::size_t i = 0; i < steps.size(); ++i)
    EXPECT_EQ(steps[i], std::count(order.begin(), order.end(), i)) << i;
  return order;
}

TEST(KvAllocation, GreedyByGainPerBitWithinTheBudget) {
  // Four candidates of cost 0.25 bits, one of 0.5: budget 4.0 + 0.75.
  const auto l = one_step({0.010, -0.002, 0.030, 0.020, 0.045}, {0.25, 0.25, 0.25, 0.25, 0.5});
  // Gain per bit: #2 0.12, #4 0.09, #3 0.08, #0 0.04; #2 (4.25) + #4 (4.75) fill the budget.
  EXPECT_EQ(taken(l, 4.0, 4.75), (std::vector<std::size_t>{2, 4}));
  // A budget that #4 no longer fits: it is skipped, cheaper ones after it still taken.
  EXPECT_EQ(taken(l, 4.0, 4.5), (std::vector<std::size_t>{2, 3}));
  // No budget left: nothing; every positive gain when the budget is large; never a loss.
  EXPECT_TRUE(taken(l, 4.0, 4.0).empty());
  EXPECT_EQ(taken(l, 4.0, 10.0), (std::vector<std::size_t>{2, 4, 3, 0}));
  // Equal ratios keep the candidates' order.
  EXPECT_EQ(taken(one_step({0.01, 0.01, 0.01}, {0.1, 0.1, 0.1}), 0.0, 0.2),
            (std::vector<std::size_t>{0, 1}));
  // 60 tensors at 1/60 bit each land exactly on 4.25 + 15/60 = 4.5 despite rounding.
  EXPECT_EQ(taken(one_step(std::vector<double>(60, 0.001), std::vector<double>(60, 1.0 / 60.0)),
                  4.25, 4.5)
                .size(),
            15u);
}

// Ladders of two steps (downgrade -> base -> upgrade): each climbs in order, the step with the
// larger gain per bit first across ladders, so an insensitive tensor stays low while a sensitive
// one climbs twice.
TEST(KvAllocation, LaddersClimbInOrderByGainPerBit) {
  // Expected KLD e · rho: rho_down 4 (the step up from it saves 3e), rho_up 0.25 (saves 0.75e);
  // every step costs 1 bit. e = 0.04, 0.001, 0.012.
  std::vector<Ladder> l;
  for (const double e : {0.04, 0.001, 0.012}) l.push_back({{3 * e, 0.75 * e}, {1.0, 1.0}});
  // Ratios: #0 0.12 then 0.03; #1 0.003 then 0.00075; #2 0.036 then 0.009.
  EXPECT_EQ(taken(l, 3.0, 5.0), (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(taken(l, 3.0, 6.0), (std::vector<std::size_t>{0, 2, 0}));
  EXPECT_EQ(taken(l, 3.0, 100.0), (std::vector<std::size_t>{0, 2, 0, 2, 1, 1}));
  // A step that does not fit stops its ladder; another ladder's cheaper step still fits.
  std::vector<Ladder> m = {{{0.05, 0.04}, {1.0, 2.0}}, {{0.01}, {0.5}}};
  EXPECT_EQ(climb_ladders(m, 0.0, 1.6), (std::vector<int>{1, 1}));
  // A step with no gain stops its ladder even when a later one would gain.
  std::vector<Ladder> n = {{{0.0, 0.5}, {1.0, 1.0}}};
  EXPECT_EQ(climb_ladders(n, 0.0, 10.0), (std::vector<int>{0}));
}

}  // namespace
}  // namespace kvq::eval
