// The Walsh–Hadamard transform: the scalar reference (kernels/ref/hadamard_ref.h) against the
// matrix product in double, its algebra (self-inverse, orthonormal), and the fast kernel
// (kernels/cpu/hadamard.h) at every ISA level this CPU runs, bit for bit against the reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "kvq/core/error.h"
#include "kvq/kernels/cpu/hadamard.h"
#include "kvq/kernels/ref/hadamard_ref.h"

namespace kvq::kernels {
namespace {

using test::random_vector;
using test::supported_isas;

// 1, 2, 4, ..., max.
std::vector<std::int64_t> powers_of_two(std::int64_t max) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t n = 1; n <= max; n *= 2) sizes.push_back(n);
  return sizes;
}

// The largest error the float butterfly can make on one output of a row x [n]: log2(n) roundings
// of partial sums bounded by Σ|x|, then two of the scale (its float rounding and the multiply),
// each at most 2⁻²⁴ relative: (log2 n + 2) · 2⁻²⁴ · Σ|x| / √n, below 1e-6 · Σ|x| / √n up to
// n = 2^14. So the tolerance is 1e-6 relative to Σ|x| / √n, the magnitude of the sum.
double sum_scale(const float* x, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t j = 0; j < n; ++j) s += std::fabs(static_cast<double>(x[j]));
  return s / std::sqrt(static_cast<double>(n));
}

TEST(HadamardRef, MatchesTheMatrixProductInDouble) {
  for (std::int64_t n : powers_of_two(1024)) {
    const std::int64_t rows = 3;
    const auto x = random_vector(static_cast<std::size_t>(rows * n), 10 + n, 2.0f);
    auto got = x;
    ref::hadamard_rows(got.data(), rows, n);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * n;
      const double tol = 1e-6 * sum_scale(xr, n);
      for (std::int64_t i = 0; i < n; ++i) {
        double want = 0.0;  // Σ_j H[i][j] x[j], H[i][j] = (-1)^popcount(i & j)
        for (std::int64_t j = 0; j < n; ++j) {
          const auto bits = static_cast<std::uint64_t>(i & j);
          want += (std::popcount(bits) % 2 == 0 ? 1.0 : -1.0) * static_cast<double>(xr[j]);
        }
        want /= std::sqrt(static_cast<double>(n));
        ASSERT_NEAR(got[static_cast<std::size_t>(r * n + i)], want, tol)
            << "n=" << n << " row " << r << " i=" << i;
      }
    }
  }
  // Natural (Sylvester) order spelled out for n = 4: row i of H is (-1)^popcount(i & j).
  std::vector<float> e{1.0f, 2.0f, 3.0f, 4.0f};
  ref::hadamard_rows(e.data(), 1, 4);
  EXPECT_EQ(e, (std::vector<float>{5.0f, -1.0f, -2.0f, 0.0f}));
}

// H / √n is symmetric and orthogonal, so applying it twice gives x back. Both passes round
// (each output error ~ (log2 n + 2) · 2⁻²⁴ · Σ|x| / √n, random in sign); for N(0, 1) data
// the round trip stays within 1e-6 of the row's largest |x| up to n = 32768 (measured ≤ 2.2e-7 over
// 20 seeds a size).
TEST(HadamardRef, IsItsOwnInverse) {
  for (std::int64_t n : powers_of_two(32768)) {
    const std::int64_t rows = 2;
    const auto x = random_vector(static_cast<std::size_t>(rows * n), 20 + n);
    auto y = x;
    ref::hadamard_rows(y.data(), rows, n);
    ref::hadamard_rows(y.data(), rows, n);
    for (std::int64_t r = 0; r < rows; ++r) {
      float max_abs = 0.0f;
      for (std::int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(x[r * n + i]));
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(r * n + i);
        ASSERT_NEAR(y[k], x[k], 1e-6f * max_abs) << "n=" << n << " row " << r << " i=" << i;
      }
    }
  }
}

// Orthonormal: the 2-norm of each row is kept (in double; the float outputs' relative error is
// ~2⁻²⁴ · √(log2 n), far below 1e-6).
TEST(HadamardRef, PreservesTheNorm) {
  for (std::int64_t n : powers_of_two(32768)) {
    const auto x = random_vector(static_cast<std::size_t>(n), 30 + n, 5.0f);
    auto y = x;
    ref::hadamard_rows(y.data(), 1, n);
    double nx = 0.0, ny = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      nx += static_cast<double>(x[i]) * x[i];
      ny += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), 1e-6 * std::sqrt(nx)) << "n=" << n;
  }
}

// rows · n values whose magnitudes span the float range: row r % 3 = 0 N(0, 1); 1 from 1e-40
// (subnormal) to 1e30; 2 up to 1e38, whose sums overflow to ±inf and then inf - inf = NaN.
std::vector<float> wide_range_rows(std::int64_t rows, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> exponent(-40.0, 30.0), huge(30.0, 38.0);
  std::vector<float> x(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      const int kind = static_cast<int>(r % 3);
      x[static_cast<std::size_t>(r * n + i)] =
          kind == 0 ? v
                    : static_cast<float>(v * std::pow(10.0, kind == 1 ? exponent(rng) : huge(rng)));
    }
  }
  if (n > 3) x[1] = 0.0f, x[2] = -0.0f;  // signed zeros
  return x;
}

// Same bits, or both NaN: a NaN's payload depends on which operand of an add the compiler put
// first, which C++ does not fix for the scalar twin.
bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

void expect_same_as_reference(Isa isa, std::int64_t rows, std::int64_t n, std::uint64_t seed,
                              bool dispatched) {
  const auto x = wide_range_rows(rows, n, seed);
  auto want = x, got = x;
  ref::hadamard_rows(want.data(), rows, n);
  if (dispatched) {
    hadamard_rows(got.data(), rows, n);
  } else {
    hadamard_rows_isa(isa, got.data(), rows, n);
  }
  for (std::size_t k = 0; k < x.size(); ++k) {
    ASSERT_TRUE(same_bits(got[k], want[k]))
        << (dispatched ? "dispatched" : std::string(isa_name(isa))) << " n=" << n
        << " rows=" << rows << " element " << k << ": " << got[k] << " vs " << want[k];
  }
}

TEST(Hadamard, EveryLevelIsBitIdenticalToTheReference) {
  for (Isa isa : supported_isas()) {
    std::cout << "level: " << isa_name(isa) << "\n";
    for (std::int64_t n : powers_of_two(4096)) {
      for (std::int64_t rows : {1, 2, 3, 9}) expect_same_as_reference(isa, rows, n, 40 + n, false);
    }
  }
  if (detected_isa() != Isa::kAvx512) std::cout << "AVX-512 not on this CPU: level not tested\n";
}

// The dispatched entry at this CPU's level, from decode-sized calls to a prefill large enough to
// be split over threads (rows · n >= 2^17), up to the largest head size supported.
TEST(Hadamard, DispatchIsBitIdenticalToTheReference) {
  std::cout << "dispatch: " << isa_name(detected_isa()) << "\n";
  for (std::int64_t n : {64, 128, 256}) {
    for (std::int64_t rows : {3, 9, 1024}) expect_same_as_reference({}, rows, n, 50 + n, true);
  }
  expect_same_as_reference({}, 2, 32768, 60, true);
  expect_same_as_reference({}, 7, 32768, 61, true);
  hadamard_rows(nullptr, 0, 64);  // no rows: nothing to touch
  ref::hadamard_rows(nullptr, 0, 64);
}

// The error names the size and what kvq needs.
TEST(Hadamard, RejectsSizesThatAreNotPowersOfTwo) {
  EXPECT_TRUE(is_power_of_two_size(1));
  EXPECT_TRUE(is_power_of_two_size(128));
  EXPECT_TRUE(is_power_of_two_size(std::int64_t{1} << 40));
  for (std::int64_t n : {0, -4, 3, 96, 100, 12288}) {
    EXPECT_FALSE(is_power_of_two_size(n)) << n;
    std::vector<float> x(256, 1.0f);
    const std::string want = "Hadamard size " + std::to_string(n) + " is not a power of two";
    for (bool use_ref : {false, true}) {
      try {
        use_ref ? ref::hadamard_rows(x.data(), 1, n) : hadamard_rows(x.data(), 1, n);
        ADD_FAILURE() << "no error for n=" << n;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("head_dim 64, 128, 256"), std::string::npos);
      }
    }
  }
  std::vector<float> x(64, 1.0f);
  for (bool use_ref : {false, true}) {
    try {
      use_ref ? ref::hadamard_rows(x.data(), -1, 64) : hadamard_rows(x.data(), -1, 64);
      ADD_FAILURE() << "no error for rows=-1";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("size 64"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("-1"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvq::kernels
