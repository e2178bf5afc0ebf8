// quantize_query_int8 / dot_rows_int8_query (kvq/kernels/cpu/int8_query.h): the approximate
// int8-query scores over int8, int4 and nvfp4 K rows.
//  - the fast path (AVX-512 VNNI where the CPU has it) equals the scalar twin bit for bit
//    (integer sums), for head sizes with and without a masked tail, query counts across the
//    kernel's register blocks, and zero points;
//  - the twin is the stated formula: its distance to the exact float scores is bounded by the
//    query's rounding, sum_c (s_i / 2) |x_j[c]|, plus float rounding;
//  - the query quantization itself, including an all-zero row.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kvq/kernels/cpu/int8_query.h"
#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/kernels/ref/kv_rows_ref.h"

namespace kvq::kernels {
namespace {

constexpr std::int64_t kRows = 37;  // two blocks of 16 rows + 5 single rows
constexpr std::int64_t kLd = kRows + 3;

std::vector<float> normal(std::mt19937& rng, std::int64_t size, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(static_cast<std::size_t>(size));
  for (float& x : v) x = dist(rng);
  return v;
}

struct IntRows {
  RowCodec codec;
  std::vector<std::byte> bytes;  // [kRows, kv_row_bytes] int8 / int4 codes
  std::vector<float> decoded;    // [kRows, n]
};

IntRows make_rows(std::mt19937& rng, KvFormat format, std::int64_t n, float zero_point) {
  const float scale = format == KvFormat::kINT8 ? 0.0211f : 0.377f;
  const float gs = quant::kv_format_traits(format).global_scale ? 1234.567f : 1.0f;
  IntRows r{{format, n, scale, zero_point, gs}, {}, {}};
  const auto row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(format, n));
  r.bytes.resize(static_cast<std::size_t>(kRows * row_bytes));
  r.decoded.resize(static_cast<std::size_t>(kRows * n));
  const auto x = normal(rng, kRows * n, 1.0f);
  for (std::int64_t j = 0; j < kRows; ++j) {
    quant::quantize_row(format, x.data() + j * n, n, scale, zero_point, gs,
                        r.bytes.data() + j * row_bytes);
    kernels::dequantize_row(format, r.bytes.data() + j * row_bytes, n, scale, zero_point, gs,
                            r.decoded.data() + j * n);
  }
  return r;
}

// The formats whose rows the codec table gives integer codes (int8, int4, nvfp4).
std::vector<KvFormat> int8_query_formats() {
  std::vector<KvFormat> formats;
  for (const auto& t : quant::kv_format_table())
    if (t.supports_int8_query()) formats.push_back(t.format);
  return formats;
}

// Row lengths and zero points each format takes (nvfp4: multiples of 64, no zero point).
std::vector<std::int64_t> lengths(KvFormat f) {
  const std::int64_t m = quant::kv_format_traits(f).int8_query_multiple;
  if (m > 1) return {m, 2 * m, 3 * m};
  return {7, 16, 64, 100, 128, 200};
}
std::vector<float> zero_points(KvFormat f, float nonzero) {
  if (!quant::kv_format_traits(f).supports_zero_point) return {0.0f};
  return {0.0f, nonzero};
}

TEST(Int8Query, QuantizesEachRowByItsAbsmax) {
  std::mt19937 rng(3);
  const std::int64_t nq = 3, n = 40;
  auto q = normal(rng, nq * n, 2.0f);
  for (std::int64_t c = 0; c < n; ++c) q[static_cast<std::size_t>(2 * n + c)] = 0.0f;
  Int8Query out;
  quantize_query_int8(q.data(), nq, n, &out);
  ASSERT_EQ(out.codes.size(), static_cast<std::size_t>(nq * n));
  for (std::int64_t i = 0; i < 2; ++i) {
    float amax = 0.0f;
    std::int32_t sum = 0, max_code = 0;
    for (std::int64_t c = 0; c < n; ++c) amax = std::max(amax, std::abs(q[i * n + c]));
    const float s = out.scale[static_cast<std::size_t>(i)];
    EXPECT_EQ(s, amax / 127.0f);
    for (std::int64_t c = 0; c < n; ++c) {
      const std::int32_t code = out.codes[static_cast<std::size_t>(i * n + c)];
      EXPECT_LE(std::abs(static_cast<float>(code) * s - q[i * n + c]), 0.5f * s * (1 + 1e-6f));
      sum += code;
      max_code = std::max(max_code, std::abs(code));
    }
    EXPECT_EQ(max_code, 127);
    EXPECT_EQ(out.sum[static_cast<std::size_t>(i)], sum);
  }
  EXPECT_EQ(out.scale[2], 1.0f);  // an all-zero row: codes 0, no division by zero
  EXPECT_EQ(out.sum[2], 0);
  for (std::int64_t c = 0; c < n; ++c) EXPECT_EQ(out.codes[static_cast<std::size_t>(2 * n + c)], 0);
}

// A non-finite query row cannot be quantized: its scores come out NaN (as the exact path's), the
// other rows are unaffected, and nothing casts NaN to an integer (UBSan would flag it).
TEST(Int8Query, NonFiniteQueryRowsGiveNanScores) {
  std::mt19937 rng(4);
  for (KvFormat format : int8_query_formats()) {
    const IntRows r = make_rows(rng, format, 64, 0.0f);
    auto q = normal(rng, 3 * 64, 1.0f);
    q[5] = std::numeric_limits<float>::quiet_NaN();
    q[64 + 7] = std::numeric_limits<float>::infinity();
    Int8Query qq;
    quantize_query_int8(q.data(), 3, 64, &qq);
    EXPECT_TRUE(std::isnan(qq.scale[0]));
    EXPECT_TRUE(std::isnan(qq.scale[1]));
    EXPECT_FALSE(std::isnan(qq.scale[2]));
    std::vector<float> s(static_cast<std::size_t>(3 * kLd));
    dot_rows_int8_query(r.codec, qq, r.bytes.data(), kRows, s.data(), kLd);
    for (std::int64_t j = 0; j < kRows; ++j) {
      EXPECT_TRUE(std::isnan(s[static_cast<std::size_t>(j)])) << quant::kv_format_name(format) << j;
      EXPECT_TRUE(std::isnan(s[static_cast<std::size_t>(kLd + j)]))
          << quant::kv_format_name(format) << j;
      EXPECT_TRUE(std::isfinite(s[static_cast<std::size_t>(2 * kLd + j)]))
          << quant::kv_format_name(format) << j;
    }
  }
}

TEST(Int8Query, FastPathEqualsScalarTwinBitForBit) {
  std::mt19937 rng(5);
  for (KvFormat format : int8_query_formats()) {
    for (std::int64_t n : lengths(format)) {
      for (float zp : zero_points(format, -3.0f)) {
        const IntRows r = make_rows(rng, format, n, zp);
        for (std::int64_t nq : {1, 2, 3, 4, 5, 9}) {
          SCOPED_TRACE(testing::Message()
                       << quant::kv_format_name(format) << " n=" << n << " zp=" << zp
                       << " nq=" << nq << " fast=" << int8_query_dot_is_fast(r.codec));
          const auto q = normal(rng, nq * n, 1.0f);
          Int8Query qq;
          quantize_query_int8(q.data(), nq, n, &qq);
          std::vector<float> s(static_cast<std::size_t>(nq * kLd), -1.0f), s_ref(s);
          dot_rows_int8_query(r.codec, qq, r.bytes.data(), kRows, s.data(), kLd);
          ref::dot_rows_int8_query(r.codec, qq, r.bytes.data(), kRows, s_ref.data(), kLd);
          for (std::size_t e = 0; e < s.size(); ++e)
            ASSERT_EQ(std::bit_cast<std::uint32_t>(s[e]), std::bit_cast<std::uint32_t>(s_ref[e]))
                << e;
        }
      }
    }
  }
}

TEST(Int8Query, WithinTheQueryRoundingOfTheExactScores) {
  std::mt19937 rng(9);
  const std::int64_t n = 64, nq = 3;
  for (KvFormat format : int8_query_formats()) {
    for (float zp : zero_points(format, 2.0f)) {
      SCOPED_TRACE(testing::Message() << quant::kv_format_name(format) << " zp=" << zp);
      const IntRows r = make_rows(rng, format, n, zp);
      const auto q = normal(rng, nq * n, 1.0f);
      Int8Query qq;
      quantize_query_int8(q.data(), nq, n, &qq);
      std::vector<float> s(static_cast<std::size_t>(nq * kLd));
      ref::dot_rows_int8_query(r.codec, qq, r.bytes.data(), kRows, s.data(), kLd);
      double worst = 0.0;
      for (std::int64_t i = 0; i < nq; ++i) {
        for (std::int64_t j = 0; j < kRows; ++j) {
          double exact = 0.0, bound = 0.0, mag = 0.0;
          for (std::int64_t c = 0; c < n; ++c) {
            const double x = r.decoded[static_cast<std::size_t>(j * n + c)];
            exact += static_cast<double>(q[static_cast<std::size_t>(i * n + c)]) * x;
            bound += 0.5 * qq.scale[static_cast<std::size_t>(i)] * std::abs(x);
            mag += std::abs(q[static_cast<std::size_t>(i * n + c)] * x);
          }
          const double err = std::abs(s[static_cast<std::size_t>(i * kLd + j)] - exact);
          EXPECT_LE(err, bound * (1 + 1e-5) + 1e-5 * mag) << "i=" << i << " j=" << j;
          worst = std::max(worst, err / bound);
        }
      }
      EXPECT_GT(worst, 0.01);  // the bound is not vacuous: the rounding error is really there
    }
  }
}

TEST(Int8QueryDeathTest, RejectsOtherFormatsAndSizes) {
  Int8Query qq;
  const std::vector<float> q(64, 1.0f);
  quantize_query_int8(q.data(), 1, 64, &qq);
  std::vector<std::byte> rows(128);
  std::vector<float> s(1);
  // Internal invariants (KVQ_CHECK): misuse is a programming error and aborts with the reason.
  EXPECT_DEATH(dot_rows_int8_query({KvFormat::kBF16, 64}, qq, rows.data(), 1, s.data(), 1),
               "need int8 or int4 rows, or nvfp4 rows of a multiple of 64 values, not bf16 x 64");
  EXPECT_DEATH(dot_rows_int8_query({KvFormat::kNVFP4, 48}, qq, rows.data(), 1, s.data(), 1),
               "not nvfp4 x 48");
  EXPECT_TRUE(quant::kv_int8_query_supported(KvFormat::kNVFP4, 128));
  EXPECT_FALSE(quant::kv_int8_query_supported(KvFormat::kNVFP4, 48));
  EXPECT_FALSE(quant::kv_int8_query_supported(KvFormat::kFP8E4M3, 64));
  EXPECT_DEATH(dot_rows_int8_query({KvFormat::kINT8, 32}, qq, rows.data(), 1, s.data(), 1),
               "of 64 values against rows of 32");
}

}  // namespace
}  // namespace kvq::kernels
