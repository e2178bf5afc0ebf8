// The pointwise kernels (kvq/kernels/cpu/pointwise.h) at every ISA level this CPU has, against
// their scalar twins in kernels/ref, on random rows and edge values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernel_test_support.h"
#include "kvq/kernels/cpu/pointwise.h"
#include "kvq/kernels/ref/ref_kernels.h"

namespace kvq::kernels {
namespace {

using test::supported_isas;

using test::random_vector;

// RMSNorm: only the order of the sum of squares differs (16 lanes vs one chain). Its reordering
// error is ~√dim·2⁻²⁴ of the sum (≤ 1.5e-6 at dim 576), half of that in 1/sqrt: 2e-6 relative.
TEST(Pointwise, RmsNormMatchesReference) {
  for (Isa isa : supported_isas()) {
    for (std::int64_t dim : {1, 15, 16, 64, 100, 576}) {
      const std::int64_t rows = 5;
      const auto x = random_vector(static_cast<std::size_t>(rows * dim), 1 + dim, 3.0f);
      const auto w = random_vector(static_cast<std::size_t>(dim), 2 + dim);
      std::vector<float> want(x.size()), got(x.size(), NAN);
      ref::rmsnorm(x.data(), w.data(), want.data(), rows, dim, 1e-5f);
      rmsnorm_isa(isa, x.data(), w.data(), got.data(), rows, dim, 1e-5f);
      for (std::size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-6f * std::fabs(want[i]) + 1e-30f)
            << isa_name(isa) << " dim=" << dim << " i=" << i;
    }
  }
  // A zero row gives w · 0 (no NaN from 0 / sqrt(eps)).
  std::vector<float> zeros(64, 0.0f), w(64, 2.0f), y(64, NAN);
  rmsnorm(zeros.data(), w.data(), y.data(), 1, 64, 1e-5f);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// RoPE: the same products and difference per element; the vectorised form may fuse one product
// into the subtraction (one rounding less): within one ulp of |a·cos| + |b·sin|.
TEST(Pointwise, RopeRowMatchesReference) {
  for (std::int64_t d : {2, 8, 32, 64, 80, 128}) {
    auto x = random_vector(static_cast<std::size_t>(d), 3 + d, 2.0f);
    const auto angles = random_vector(static_cast<std::size_t>(d / 2), 4 + d, 3.0f);
    std::vector<float> c, s;
    for (float a : angles) c.push_back(std::cos(a)), s.push_back(std::sin(a));
    auto want = x;
    ref::rope_row(want.data(), c.data(), s.data(), d);
    const auto before = x;
    rope_row(x.data(), c.data(), s.data(), d);
    const std::int64_t h = d / 2;
    for (std::int64_t i = 0; i < d; ++i) {
      const std::int64_t j = i % h;
      const float mag = std::fabs(before[j] * c[j]) + std::fabs(before[j + h] * s[j]) +
                        std::fabs(before[j + h] * c[j]) + std::fabs(before[j] * s[j]);
      ASSERT_NEAR(x[i], want[i], 1.2e-7f * mag) << "d=" << d << " i=" << i;
    }
  }
}

// SwiGLU: exp within 2 ulp and the sigmoid written per sign: a few ulp of |silu(g) · u|, on
// random values and on the edges (0, ±tiny, large ±, where exp under- / overflows). Below
// g = -87.3 the fast exp flushes to 0, so silu gives 0 where the reference gives ~g·e^g
// (< 1e-36): the 1e-30 absolute floor.
TEST(Pointwise, SwigluMatchesReference) {
  auto gate = random_vector(1000, 5, 4.0f);
  auto up = random_vector(1000, 6);
  const float edges[] = {0.0f,  -0.0f,  1e-30f, -1e-30f, 20.0f, -20.0f,
                         88.0f, -88.0f, 100.0f, -100.0f, 1e4f,  -1e4f};
  for (std::size_t i = 0; i < std::size(edges); ++i) gate[i] = edges[i];
  for (Isa isa : supported_isas()) {
    for (std::int64_t n : {1, 15, 16, 17, 1000}) {
      std::vector<float> want(static_cast<std::size_t>(n)), got(want.size(), NAN);
      ref::swiglu(gate.data(), up.data(), want.data(), n);
      swiglu_isa(isa, gate.data(), up.data(), got.data(), n);
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-30f)
            << isa_name(isa) << " n=" << n << " g=" << gate[i];
    }
    // In place (out == gate), as the forward pass calls it.
    auto g2 = gate;
    std::vector<float> want(1000);
    swiglu_isa(isa, gate.data(), up.data(), want.data(), 1000);
    swiglu_isa(isa, g2.data(), up.data(), g2.data(), 1000);
    EXPECT_EQ(g2, want) << isa_name(isa);
  }
}

// GELU (tanh form): PyTorch 2.14's own outputs (torch.nn.functional.gelu(x, approximate="tanh")
// on fp32 CPU tensors, printed as bits) for a few inputs, which gelu_tanh reproduces within an
// ulp (PyTorch's vector path uses Sleef's tanhf, kvq libm's), and the reference's double formula
// on random values and the tails (x → -∞: -0 as PyTorch gives; x → +∞: x).
TEST(Pointwise, GeluTanhMatchesPyTorchAndReference) {
  struct Case {
    float x;
    std::uint32_t torch_bits;
  };
  const Case cases[] = {{0.0f, 0x00000000},  {1.0f, 0x3f57585c},   {-1.0f, 0xbe229e90},
                        {0.5f, 0x3eb1016d},  {-0.5f, 0xbe1dfd26},  {2.0f, 0x3ffa3042},
                        {-3.0f, 0xbb6e6200}, {4.5f, 0x408ffff5},   {-6.0f, 0x80000000},
                        {10.0f, 0x41200000}, {-10.0f, 0x80000000}, {1e-3f, 0x3a032d35},
                        {-20.0f, 0x80000000}};
  for (const Case& c : cases) {
    const float want = std::bit_cast<float>(c.torch_bits);
    const float got = gelu_tanh(c.x);
    EXPECT_NEAR(got, want, std::fabs(want) * 1.2e-7f) << "x=" << c.x;
    if (want == 0.0f) {
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << "x=" << c.x;
    }
  }
  auto gate = random_vector(1000, 7, 4.0f);
  const auto up = random_vector(1000, 8);
  std::vector<float> want(gate.size()), got(gate.size());
  ref::gelu_tanh(gate.data(), want.data(), 1000);
  for (std::size_t i = 0; i < gate.size(); ++i) {
    // A few fp32 roundings and tanhf's ulp, relative to |x| (the value near 0 is x/2 + O(x³)).
    ASSERT_NEAR(gelu_tanh(gate[i]), want[i], 4e-7f * std::fabs(gate[i]) + 1e-30f)
        << "x=" << gate[i];
  }
  // GeGLU: gelu_tanh(gate) · up, also in place (out == gate) as the forward pass calls it.
  geglu(gate.data(), up.data(), got.data(), 1000);
  for (std::size_t i = 0; i < gate.size(); ++i) ASSERT_EQ(got[i], gelu_tanh(gate[i]) * up[i]);
  geglu(gate.data(), up.data(), gate.data(), 1000);
  EXPECT_EQ(gate, got);
}

}  // namespace
}  // namespace kvq::kernels
