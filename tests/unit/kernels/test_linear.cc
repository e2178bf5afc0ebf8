// Fast Linear kernels (GEMV at every ISA level this CPU has, OpenBLAS sgemm) against the scalar
// reference.
//
// Tolerance: both sides sum the same k products in fp32, in different orders. The reordering
// error of a length-k fp32 sum is bounded by ~k·2⁻²⁴·Σ|terms| and is ~√k·2⁻²⁴·Σ|terms| for
// random data; we allow 1e-5·Σ|w·x| (≥ 4× the typical error at k = 1536, far below any real
// bug, which shows up at the scale of Σ|w·x| itself).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "kvq/core/threading.h"
#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/cpu/linear.h"
#include "kvq/kernels/ref/ref_kernels.h"

namespace kvq::kernels {
namespace {

using test::random_vector;

using test::abs_sums;
using test::expect_rows_bit_identical;
using test::supported_isas;

struct Dims {
  std::int64_t n, k;
};
const Dims kDims[] = {{1, 1},   {3, 7},    {4, 16},    {5, 15},     {17, 33}, {64, 64},
                      {63, 65}, {130, 31}, {576, 576}, {200, 1536}, {1, 1000}};

TEST(Gemv, EveryIsaMatchesScalarReference) {
  for (Isa isa : supported_isas()) {
    for (const Dims& dm : kDims) {
      const auto w = random_vector(static_cast<std::size_t>(dm.n * dm.k), 1 + dm.n);
      const auto x = random_vector(static_cast<std::size_t>(dm.k), 2 + dm.k);
      std::vector<float> want(static_cast<std::size_t>(dm.n)), got(want.size(), -1.0f);
      ref::gemv(w.data(), x.data(), want.data(), dm.n, dm.k);
      gemv_isa(isa, w.data(), x.data(), got.data(), dm.n, dm.k);
      const auto scale = abs_sums(w, x.data(), dm.n, dm.k);
      for (std::int64_t r = 0; r < dm.n; ++r) {
        ASSERT_NEAR(got[r], want[r], 1e-5f * scale[r] + 1e-30f)
            << isa_name(isa) << " n=" << dm.n << " k=" << dm.k << " row " << r;
      }
    }
  }
}

TEST(Gemv, ZeroWeightsGiveExactZeros) {
  for (Isa isa : supported_isas()) {
    std::vector<float> w(37 * 45, 0.0f);
    const auto x = random_vector(45, 9);
    std::vector<float> y(37, 1.0f);
    gemv_isa(isa, w.data(), x.data(), y.data(), 37, 45);
    for (float v : y) EXPECT_EQ(v, 0.0f) << isa_name(isa);
  }
}

TEST(Gemv, DispatchPicksTheDetectedIsa) {
  const auto w = random_vector(100 * 70, 3);
  const auto x = random_vector(70, 4);
  std::vector<float> a(100), b(100);
  gemv(w.data(), x.data(), a.data(), 100, 70);
  gemv_isa(detected_isa(), w.data(), x.data(), b.data(), 100, 70);
  EXPECT_EQ(a, b);  // same kernel, same order: bit-identical
}

TEST(Linear, SgemmMatchesReferenceMatmul) {
  const std::int64_t shapes[][3] = {{2, 3, 5}, {7, 64, 64}, {33, 100, 77}, {128, 192, 576}};
  for (const auto& s : shapes) {
    const std::int64_t m = s[0], n = s[1], k = s[2];
    const auto x = random_vector(static_cast<std::size_t>(m * k), 11 + m);
    const auto w = random_vector(static_cast<std::size_t>(n * k), 12 + n);
    std::vector<float> want(static_cast<std::size_t>(m * n)), got(want.size());
    ref::matmul(x.data(), w.data(), want.data(), m, n, k);
    linear(x.data(), w.data(), got.data(), m, n, k);
    for (std::int64_t i = 0; i < m; ++i) {
      const std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
      const auto scale = abs_sums(w, xi.data(), n, k);
      for (std::int64_t j = 0; j < n; ++j) {
        ASSERT_NEAR(got[i * n + j], want[i * n + j], 1e-5f * scale[j])
            << "m=" << m << " n=" << n << " k=" << k << " (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(Linear, SingleRowUsesGemv) {
  const auto x = random_vector(96, 5);
  const auto w = random_vector(50 * 96, 6);
  std::vector<float> a(50), b(50);
  linear(x.data(), w.data(), a.data(), 1, 50, 96);
  gemv(w.data(), x.data(), b.data(), 50, 96);
  EXPECT_EQ(a, b);
}

// Batched GEMV (a decode step of several sequences): every row equals the single-input GEMV of
// the same ISA bit for bit, for m below, at and above one group of inputs (8, fewer for a large
// k: 6 at k = 1000, 4 at 1536) and a serve batch of 16 or 33, n around the 64-row chunks, k
// around every SIMD step.
TEST(GemvBatch, EveryRowEqualsSingleGemvBitForBit) {
  const std::int64_t ms[] = {1, 2, 3, 5, 8, 9, 13, 16, 33};
  for (Isa isa : supported_isas()) {
    for (const Dims& dm : kDims) {
      const auto w = random_vector(static_cast<std::size_t>(dm.n * dm.k), 1 + dm.n);
      for (std::int64_t m : ms) {
        const auto x = random_vector(static_cast<std::size_t>(m * dm.k), 20 + m);
        expect_rows_bit_identical(
            [&](const float* xs, float* ys) {
              gemv_batch_isa(isa, w.data(), xs, ys, m, dm.n, dm.k);
            },
            [&](const float* xi, float* yi) { gemv_isa(isa, w.data(), xi, yi, dm.n, dm.k); }, x, m,
            dm.n, dm.k, isa_name(isa));
      }
    }
  }
}

// The OpenMP split (1 or 2 threads) cannot change a bit either.
TEST(GemvBatch, ThreadCountDoesNotChangeResults) {
  const std::int64_t m = 4, n = 1000, k = 576;
  const auto w = random_vector(static_cast<std::size_t>(n * k), 6);
  const auto x = random_vector(static_cast<std::size_t>(m * k), 7);
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    expect_rows_bit_identical(
        [&](const float* xs, float* ys) { linear(xs, w.data(), ys, m, n, k); },
        [&](const float* xi, float* yi) {
          set_num_threads(1);
          gemv(w.data(), xi, yi, n, k);
          set_num_threads(threads);
        },
        x, m, n, k, threads == 1 ? "1 thread" : "2 threads");
  }
  set_num_threads(saved);
}

// linear_rows (a decode step of m sequences) never takes sgemm, whatever m.
TEST(Linear, RowsOfSeparateSequencesEqualTheSingleGemvAtAnyCount) {
  const auto w = random_vector(70 * 576, 8);
  for (std::int64_t m : {1, 2, 8, 9, 16, 24}) {
    const auto x = random_vector(static_cast<std::size_t>(m * 576), 9 + m);
    expect_rows_bit_identical(
        [&](const float* xs, float* ys) { linear_rows(xs, w.data(), ys, m, 70, 576); },
        [&](const float* xi, float* yi) { gemv(w.data(), xi, yi, 70, 576); }, x, m, 70, 576,
        "linear_rows");
  }
}

TEST(Linear, FewRowsUseTheBatchedGemv) {
  for (std::int64_t m = 2; m <= kMaxBatchedGemvRows; ++m) {
    const auto x = random_vector(static_cast<std::size_t>(m * 96), 5);
    const auto w = random_vector(50 * 96, 6);
    expect_rows_bit_identical(
        [&](const float* xs, float* ys) { linear(xs, w.data(), ys, m, 50, 96); },
        [&](const float* xi, float* yi) { gemv(w.data(), xi, yi, 50, 96); }, x, m, 50, 96,
        "linear");
  }
}

}  // namespace
}  // namespace kvq::kernels
