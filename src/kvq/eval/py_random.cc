#include "kvq/eval/py_random.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_set>

#include "kvq/core/error.h"

namespace kvq::eval {
namespace {
constexpr int kN = 624, kM = 397;
constexpr std::uint32_t kMatrixA = 0x9908b0dfU, kUpper = 0x80000000U, kLower = 0x7fffffffU;
}  // namespace

PyRandom::PyRandom(std::uint64_t seed) {
  // init_genrand(19650218) then init_by_array(key): CPython's random_seed() with the absolute
  // value of the int split into little-endian 32-bit words (one word for 0).
  std::vector<std::uint32_t> key;
  do {
    key.push_back(static_cast<std::uint32_t>(seed & 0xffffffffU));
    seed >>= 32;
  } while (seed != 0);

  mt_[0] = 19650218U;
  for (int i = 1; i < kN; ++i) {
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
  }
  int i = 1, j = 0;
  const int key_length = static_cast<int>(key.size());
  for (int k = std::max(kN, key_length); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] +
             static_cast<std::uint32_t>(j);
    ++i, ++j;
    if (i >= kN) mt_[0] = mt_[kN - 1], i = 1;
    if (j >= key_length) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) -
             static_cast<std::uint32_t>(i);
    ++i;
    if (i >= kN) mt_[0] = mt_[kN - 1], i = 1;
  }
  mt_[0] = 0x80000000U;
  mti_ = kN;
}

std::uint32_t PyRandom::genrand_uint32() {
  if (mti_ >= kN) {
    auto mix = [](std::uint32_t a, std::uint32_t b) {
      const std::uint32_t y = (a & kUpper) | (b & kLower);
      return (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    };
    int kk = 0;
    for (; kk < kN - kM; ++kk) mt_[kk] = mt_[kk + kM] ^ mix(mt_[kk], mt_[kk + 1]);
    for (; kk < kN - 1; ++kk) mt_[kk] = mt_[kk + (kM - kN)] ^ mix(mt_[kk], mt_[kk + 1]);
    mt_[kN - 1] = mt_[kM - 1] ^ mix(mt_[kN - 1], mt_[0]);
    mti_ = 0;
  }
  std::uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

std::uint32_t PyRandom::getrandbits(int k) {
  KVQ_CHECK(k >= 1 && k <= 32, "getrandbits({})", k);
  return genrand_uint32() >> (32 - k);
}

std::uint64_t PyRandom::randbelow(std::uint64_t n) {
  KVQ_CHECK(n >= 1 && n <= 0xffffffffULL, "randbelow({})", n);
  const int k = std::bit_width(n);  // n.bit_length()
  std::uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<std::int64_t> PyRandom::sample(std::int64_t n, std::int64_t k) {
  if (k < 0 || k > n) fail<InvalidArgument>("sample: k = {} outside [0, {}]", k, n);
  std::vector<std::int64_t> result(static_cast<std::size_t>(k));
  std::int64_t setsize = 21;  // size of a small set minus size of an empty list
  if (k > 5) {
    setsize += static_cast<std::int64_t>(
        std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  }
  if (n <= setsize) {
    std::vector<std::int64_t> pool(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) pool[static_cast<std::size_t>(i)] = i;
    for (std::int64_t i = 0; i < k; ++i) {
      const auto j = static_cast<std::size_t>(randbelow(static_cast<std::uint64_t>(n - i)));
      result[static_cast<std::size_t>(i)] = pool[j];
      pool[j] = pool[static_cast<std::size_t>(n - i - 1)];
    }
  } else {
    std::unordered_set<std::int64_t> selected;
    for (std::int64_t i = 0; i < k; ++i) {
      auto j = static_cast<std::int64_t>(randbelow(static_cast<std::uint64_t>(n)));
      while (selected.count(j) != 0)
        j = static_cast<std::int64_t>(randbelow(static_cast<std::uint64_t>(n)));
      selected.insert(j);
      result[static_cast<std::size_t>(i)] = j;
    }
  }
  return result;
}

}  // namespace kvq::eval
