// torch's CPU sampling and sorting, reproduced where kvq must pick exactly what the reference
// picks (llm-compressor's calibration sampler). Checked against torch 2.14 by
// tests/unit/core/test_torch_sampling.cc (goldens from
// tools/reference/make_torch_sampling_goldens.py).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kvq {

// torch.Generator().manual_seed(seed): at::mt19937 seeded with the seed's low 32 bits, which is
// std::mt19937's standard initialisation.
class TorchGenerator {
 public:
  explicit TorchGenerator(std::uint64_t seed) : engine_(static_cast<std::uint32_t>(seed)) {}
  std::uint32_t random() { return static_cast<std::uint32_t>(engine_()); }
  // Two draws, the first one the high half (at::detail::make64BitsFrom32Bits).
  std::uint64_t random64() {
    const std::uint64_t hi = random();
    return hi << 32 | random();
  }

 private:
  std::mt19937 engine_;
};

// torch.randperm(n, generator=g) on the CPU: Fisher-Yates from the front, z = random() % (n - i).
// torch switches to another algorithm from n = 2^32 / 20; such n are refused (InvalidArgument).
std::vector<std::int64_t> torch_randperm(std::int64_t n, TorchGenerator& generator);

// The first k indices torch.utils.data.RandomSampler(range(n), num_samples=k) yields (k <= n)
// after torch.manual_seed(seed) and `draws_before` other int64 random_() draws from the global
// generator (a DataLoader iteration draws its base seed just before its sampler's): the sampler
// seeds a fresh generator with the next such draw (random64() mod 2^63) and takes randperm(n).
std::vector<std::int64_t> torch_random_sampler(std::int64_t n, std::int64_t k, std::uint64_t seed,
                                               int draws_before = 0);

// torch.argsort(torch.tensor(values), descending=True) on the CPU, ties included: torch's sort is
// not stable, and its order of equal values is that of libstdc++'s std::sort over (value, index)
// comparing values only (checked on the goldens), not index order.
std::vector<std::int64_t> torch_argsort_descending(const std::vector<std::int64_t>& values);

}  // namespace kvq
