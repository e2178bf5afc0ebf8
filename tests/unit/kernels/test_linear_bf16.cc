// bf16-weight Linear kernels (GEMV at every ISA level this CPU has, the widen-then-sgemm prefill
// path) against the scalar reference, and against the fp32 kernels run on the rounded weights.
//
// Tolerances:
//  - fast vs scalar reference: both sum the same k fp32 products (bf16 weight widened exactly,
//    times the unrounded fp32 x), in different orders; as in test_linear.cc the reordering error
//    is ~√k·2⁻²⁴·Σ|w·x| for random data, and we allow 1e-5·Σ|w·x| (a real bug, a wrong or
//    missing element, shows up at the scale of Σ|w·x| itself).
//  - bf16 GEMV vs fp32 GEMV on the widened weights, same ISA: the same kernel body on the same
//    values in the same order, so bit-identical (EXPECT_EQ).
//  - bf16 prefill (blocks of rows widened, one sgemm per block) vs fp32 sgemm on the widened
//    weights: the same products, summation order left to OpenBLAS: 1e-5·Σ|w·x|.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel_test_support.h"
#include "kvq/core/dtype.h"
#include "kvq/core/threading.h"
#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/cpu/linear.h"
#include "kvq/kernels/ref/ref_kernels.h"

namespace kvq::kernels {
namespace {

using test::random_vector;

std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

std::vector<float> widened(const std::vector<std::uint16_t>& b) {
  std::vector<float> v(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_f32(b[i]);
  return v;
}

using test::abs_sums;
using test::expect_rows_bit_identical;
using test::supported_isas;

struct Dims {
  std::int64_t n, k;
};
// k below, at and around multiples of 8 / 16 / 32 (the AVX2, AVX-512 and unrolled steps), n
// around the 64-row OpenMP chunks, n = 1, and the default model's shapes.
const Dims kDims[] = {{1, 1},  {3, 7},     {4, 8},      {4, 16},   {5, 15},
                      {1, 17}, {17, 33},   {64, 64},    {63, 65},  {130, 31},
                      {9, 47}, {576, 576}, {200, 1536}, {1, 1000}, {65, 100}};

TEST(WidenBf16, EveryIsaIsExactOnAllBitPatterns) {
  std::vector<std::uint16_t> all(65536 + 5);  // + 5: a tail for the vector loops
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);
  for (std::size_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
  for (Isa isa : supported_isas()) {
    for (std::int64_t count : {std::int64_t{65541}, std::int64_t{13}, std::int64_t{0}}) {
      std::vector<float> out(all.size(), -7.0f);
      widen_bf16_isa(isa, all.data(), out.data(), count);
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::uint32_t{all[i]} << 16)
            << isa_name(isa) << " i=" << i;
      }
      for (std::size_t i = static_cast<std::size_t>(count); i < out.size(); ++i) {
        ASSERT_EQ(out[i], -7.0f) << isa_name(isa) << " wrote past count " << count;
      }
    }
  }
}

TEST(GemvBf16, EveryIsaMatchesScalarReference) {
  for (Isa isa : supported_isas()) {
    for (const Dims& dm : kDims) {
      const auto wb = to_bf16(random_vector(static_cast<std::size_t>(dm.n * dm.k), 1 + dm.n));
      const auto x = random_vector(static_cast<std::size_t>(dm.k), 2 + dm.k);
      std::vector<float> want(static_cast<std::size_t>(dm.n)), got(want.size(), -1.0f);
      ref::gemv_bf16(wb.data(), x.data(), want.data(), dm.n, dm.k);
      gemv_bf16_isa(isa, wb.data(), x.data(), got.data(), dm.n, dm.k);
      const auto scale = abs_sums(widened(wb), x.data(), dm.n, dm.k);
      for (std::int64_t r = 0; r < dm.n; ++r) {
        ASSERT_NEAR(got[r], want[r], 1e-5f * scale[r] + 1e-30f)
            << isa_name(isa) << " n=" << dm.n << " k=" << dm.k << " row " << r;
      }
    }
  }
}

TEST(GemvBf16, EqualsFp32GemvOnTheRoundedWeightsBitForBit) {
  for (Isa isa : supported_isas()) {
    for (const Dims& dm : kDims) {
      const auto wb = to_bf16(random_vector(static_cast<std::size_t>(dm.n * dm.k), 3 + dm.n));
      const auto wf = widened(wb);
      const auto x = random_vector(static_cast<std::size_t>(dm.k), 4 + dm.k);
      std::vector<float> a(static_cast<std::size_t>(dm.n)), b(a.size());
      gemv_bf16_isa(isa, wb.data(), x.data(), a.data(), dm.n, dm.k);
      gemv_isa(isa, wf.data(), x.data(), b.data(), dm.n, dm.k);
      EXPECT_EQ(a, b) << isa_name(isa) << " n=" << dm.n << " k=" << dm.k;
    }
  }
}

// Edge values: signed zeros, the smallest bf16 subnormal, the largest finite bf16, 1 and -1
// (x is kept small enough that nothing overflows), in a row whose length is not a multiple of 8.
TEST(GemvBf16, EdgeValuesMatchScalarReference) {
  const std::uint16_t edge[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x7f7f, 0xff7f, 0x3f80, 0xbf80};
  const std::int64_t n = 8, k = 27;
  std::vector<std::uint16_t> wb(static_cast<std::size_t>(n * k));
  for (std::size_t i = 0; i < wb.size(); ++i) wb[i] = edge[(i * 5 + i / 7) % 8];
  const auto x = random_vector(static_cast<std::size_t>(k), 5, 1e-30f);
  std::vector<float> want(static_cast<std::size_t>(n));
  ref::gemv_bf16(wb.data(), x.data(), want.data(), n, k);
  const auto scale = abs_sums(widened(wb), x.data(), n, k);
  for (Isa isa : supported_isas()) {
    std::vector<float> got(want.size(), -1.0f);
    gemv_bf16_isa(isa, wb.data(), x.data(), got.data(), n, k);
    for (std::int64_t r = 0; r < n; ++r) {
      ASSERT_TRUE(std::isfinite(got[r])) << isa_name(isa) << " row " << r;
      ASSERT_NEAR(got[r], want[r], 1e-5f * scale[r] + 1e-37f) << isa_name(isa) << " row " << r;
    }
  }
}

// Rows are independent, so how many threads split them cannot change a single bit.
TEST(GemvBf16, ThreadCountDoesNotChangeResults) {
  const std::int64_t n = 1000, k = 576;  // n·k above the parallel threshold
  const auto wb = to_bf16(random_vector(static_cast<std::size_t>(n * k), 6));
  const auto x = random_vector(static_cast<std::size_t>(k), 7);
  const int saved = num_threads();
  std::vector<float> one(static_cast<std::size_t>(n)), two(one.size());
  set_num_threads(1);
  gemv_bf16(wb.data(), x.data(), one.data(), n, k);
  set_num_threads(2);
  gemv_bf16(wb.data(), x.data(), two.data(), n, k);
  set_num_threads(saved);
  EXPECT_EQ(one, two);
}

// m in (1, 8]: the batched GEMV; m > 8: blocks of weight rows widened, one sgemm each. Shapes with
// one block, several blocks with a partial last one (256 K floats per block: 436 rows at k = 600,
// 170 at k = 1536), k not a multiple of 8, and m = 2.
TEST(LinearBf16, PrefillMatchesReferenceAndFp32OnRoundedWeights) {
  const std::int64_t shapes[][3] = {{2, 3, 5},       {7, 64, 64},    {33, 100, 77},
                                    {16, 1000, 600}, {5, 400, 1536}, {3, 1, 9}};
  for (const auto& s : shapes) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    const auto x = random_vector(static_cast<std::size_t>(m * k), 11 + m);
    const auto wb = to_bf16(random_vector(static_cast<std::size_t>(n * k), 12 + n));
    const auto wf = widened(wb);
    std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size(), -1.0f);
    std::vector<float> f32(want.size()), again(want.size());
    ref::matmul_bf16(x.data(), wb.data(), want.data(), m, n, k);
    linear_bf16(x.data(), wb.data(), got.data(), m, n, k);
    linear(x.data(), wf.data(), f32.data(), m, n, k);
    linear_bf16(x.data(), wb.data(), again.data(), m, n, k);
    EXPECT_EQ(got, again) << "not deterministic: m=" << m << " n=" << n << " k=" << k;
    for (std::int64_t i = 0; i < m; ++i) {
      const auto scale = abs_sums(wf, x.data() + i * k, n, k);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t at = static_cast<std::size_t>(i * n + j);
        ASSERT_NEAR(got[at], want[at], 1e-5f * scale[j])
            << "vs ref: m=" << m << " n=" << n << " k=" << k << " (" << i << ", " << j << ")";
        ASSERT_NEAR(got[at], f32[at], 1e-5f * scale[j])
            << "vs fp32: m=" << m << " n=" << n << " k=" << k << " (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(LinearBf16, SingleRowUsesGemv) {
  const auto x = random_vector(96, 5);
  const auto wb = to_bf16(random_vector(50 * 96, 6));
  std::vector<float> a(50), b(50);
  linear_bf16(x.data(), wb.data(), a.data(), 1, 50, 96);
  gemv_bf16(wb.data(), x.data(), b.data(), 50, 96);
  EXPECT_EQ(a, b);
}

// Batched GEMV on bf16 weights: every row bit-identical to the single-input bf16 GEMV.
TEST(GemvBatchBf16, EveryRowEqualsSingleGemvBitForBit) {
  const Dims dims[] = {{5, 15}, {63, 65}, {130, 31}, {576, 576}, {64, 1536}};
  for (Isa isa : supported_isas()) {
    for (const Dims& dm : dims) {
      const auto wb = to_bf16(random_vector(static_cast<std::size_t>(dm.n * dm.k), 3 + dm.n));
      for (std::int64_t m : {2, 7, 8, 11, 16, 19}) {
        const auto x = random_vector(static_cast<std::size_t>(m * dm.k), 30 + m);
        expect_rows_bit_identical(
            [&](const float* xs, float* ys) {
              gemv_batch_bf16_isa(isa, wb.data(), xs, ys, m, dm.n, dm.k);
            },
            [&](const float* xi, float* yi) { gemv_bf16_isa(isa, wb.data(), xi, yi, dm.n, dm.k); },
            x, m, dm.n, dm.k, isa_name(isa));
      }
    }
  }
}

// linear_rows_bf16 (a decode step of m sequences) never takes sgemm, whatever m.
TEST(LinearBf16, RowsOfSeparateSequencesEqualTheSingleGemvAtAnyCount) {
  const auto wb = to_bf16(random_vector(70 * 576, 8));
  for (std::int64_t m : {1, 2, 8, 9, 16, 24}) {
    const auto x = random_vector(static_cast<std::size_t>(m * 576), 9 + m);
    expect_rows_bit_identical(
        [&](const float* xs, float* ys) { linear_rows_bf16(xs, wb.data(), ys, m, 70, 576); },
        [&](const float* xi, float* yi) { gemv_bf16(wb.data(), xi, yi, 70, 576); }, x, m, 70, 576,
        "linear_rows_bf16");
  }
}

}  // namespace
}  // namespace kvq::kernels
