// CPython's `random.Random` for the two calls lm-eval's few-shot sampler makes: seeding with an
// int and `sample(population, k)`. Bit-exact with CPython 3.11 (MT19937 seeded by
// init_by_array over the seed's 32-bit words; _randbelow via getrandbits; sample's set/pool
// switch), so kvq draws the same few-shot examples as lm-eval's ContextSampler.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace kvq::eval {

class PyRandom {
 public:
  // random.Random(seed) for a non-negative int seed.
  explicit PyRandom(std::uint64_t seed);

  std::uint32_t genrand_uint32();
  // random.getrandbits(k) for 1 <= k <= 32.
  std::uint32_t getrandbits(int k);
  // random._randbelow(n) for n >= 1.
  std::uint64_t randbelow(std::uint64_t n);
  // Indices into a population of size n chosen by random.sample(range(n), k), in order.
  // InvalidArgument when k > n.
  std::vector<std::int64_t> sample(std::int64_t n, std::int64_t k);

 private:
  std::array<std::uint32_t, 624> mt_{};
  int mti_ = 625;
};

}  // namespace kvq::eval
