#include "kvq/core/torch_sampling.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "kvq/core/error.h"

namespace kvq {

std::vector<std::int64_t> torch_randperm(std::int64_t n, TorchGenerator& generator) {
  constexpr std::int64_t kSmallN = std::int64_t{0xFFFFFFFF} / 20;  // torch's "small n" branch
  if (n < 0 || n >= kSmallN)
    fail<InvalidArgument>("randperm of {} elements: only 0 <= n < {} is reproduced", n, kSmallN);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  for (std::int64_t i = 0; i + 1 < n; ++i) {
    const auto z =
        static_cast<std::int64_t>(generator.random() % static_cast<std::uint64_t>(n - i));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(z + i)]);
  }
  return perm;
}

std::vector<std::int64_t> torch_random_sampler(std::int64_t n, std::int64_t k, std::uint64_t seed,
                                               int draws_before) {
  if (k < 0 || k > n) fail<InvalidArgument>("cannot sample {} of {} indices", k, n);
  TorchGenerator global(seed);
  for (int i = 0; i < draws_before; ++i) (void)global.random64();
  TorchGenerator sampler(global.random64() % (std::uint64_t{1} << 63));
  std::vector<std::int64_t> perm = torch_randperm(n, sampler);
  perm.resize(static_cast<std::size_t>(k));
  return perm;
}

std::vector<std::int64_t> torch_argsort_descending(const std::vector<std::int64_t>& values) {
  std::vector<std::pair<std::int64_t, std::int64_t>> keyed(values.size());  // (value, index)
  for (std::size_t i = 0; i < values.size(); ++i)
    keyed[i] = {values[i], static_cast<std::int64_t>(i)};
  std::sort(keyed.begin(), keyed.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::int64_t> order(values.size());
  for (std::size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  return order;
}

}  // namespace kvq
