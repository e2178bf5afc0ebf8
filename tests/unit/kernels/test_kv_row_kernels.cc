// The multi-query row kernels dot_rows / axpy_rows (kvq/kernels/cpu/kv_row_kernels.h), which
// decode attention runs on the packed KV cache:
//  - against the scalar twins (ref::dot_rows / axpy_rows) for every format, query counts
//    across the kernels' register blocks (1..kMaxRowQueries and beyond) and row lengths with
//    and without a scalar tail;
//  - THE property the engine relies on: on packed rows they give results bit-identical to the
//    same kernels on fp32 rows holding the dequantized values (a fake-quantized cache), for
//    every format, with scales, zero points and nvfp4 global scales that are not powers of two.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/kernels/ref/kv_rows_ref.h"
#include "kvq/quant/formats.h"
#include "kvq/quant/kv_row_layout.h"

namespace kvq::kernels {
namespace {

using quant::kv_format_name;
using quant::kv_row_bytes;

// Every format of the codec table.
std::vector<KvFormat> all_formats() {
  std::vector<KvFormat> formats;
  for (const auto& t : quant::kv_format_table()) formats.push_back(t.format);
  return formats;
}
constexpr std::int64_t kLengths[] = {7, 16, 40, 64, 128};
constexpr std::int64_t kQueries[] = {1, 2, 3, 5, 8, 9, 17};
constexpr std::int64_t kRows = 37;  // two blocks of 16 rows (AVX-512 block reduction) + 5

struct Rows {
  RowCodec codec;
  std::vector<std::byte> bytes;  // [kRows, kv_row_bytes]
  std::vector<float> decoded;    // [kRows, n] = dequantize_row of each row
};

// Scales, zero points and global scales that are not powers of two (per the format's row).
RowCodec codec_for(KvFormat format, std::int64_t n) {
  const quant::KvFormatTraits& t = quant::kv_format_traits(format);
  RowCodec c{format, n};
  c.scale = !t.needs_scale ? 1.0f : (format == KvFormat::kFP8E4M3 ? 0.0131f : 0.0377f);
  c.zero_point = format == KvFormat::kINT8 ? -3.0f : (format == KvFormat::kINT4 ? 1.0f : 0.0f);
  c.global_scale = t.global_scale ? 1234.567f : 1.0f;
  return c;
}

Rows make_rows(std::mt19937& rng, KvFormat format, std::int64_t n) {
  Rows r{codec_for(format, n), {}, {}};
  const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(format, n));
  r.bytes.resize(static_cast<std::size_t>(kRows * row_bytes));
  r.decoded.resize(static_cast<std::size_t>(kRows * n));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < kRows; ++j) {
    for (float& v : x) v = dist(rng);
    std::byte* row = r.bytes.data() + j * row_bytes;
    quant::quantize_row(format, x.data(), n, r.codec.scale, r.codec.zero_point,
                        r.codec.global_scale, row);
    kernels::dequantize_row(format, row, n, r.codec.scale, r.codec.zero_point, r.codec.global_scale,
                            r.decoded.data() + j * n);
  }
  return r;
}

std::vector<float> random_vector(std::mt19937& rng, std::int64_t size) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(size));
  for (float& x : v) x = dist(rng);
  return v;
}

constexpr std::int64_t kLd = kRows + 3;  // a score stride wider than the row count

TEST(RowKernels, MatchScalarReference) {
  std::mt19937 rng(7);
  for (KvFormat f : all_formats()) {
    for (std::int64_t n : kLengths) {
      const Rows r = make_rows(rng, f, n);
      for (std::int64_t nq : kQueries) {
        SCOPED_TRACE(testing::Message() << kv_format_name(f) << " n=" << n << " nq=" << nq);
        const auto q = random_vector(rng, nq * n);
        std::vector<float> s(static_cast<std::size_t>(nq * kLd)), s_ref(s.size());
        dot_rows(r.codec, q.data(), nq, r.bytes.data(), kRows, s.data(), kLd);
        ref::dot_rows(r.codec, q.data(), nq, r.bytes.data(), kRows, s_ref.data(), kLd);
        for (std::int64_t i = 0; i < nq; ++i) {
          for (std::int64_t j = 0; j < kRows; ++j) {
            // Sums of n products of magnitude ~|q|·|x|: a few ulp of sum_c |q_c x_c|.
            float mag = 0.0f;
            for (std::int64_t c = 0; c < n; ++c)
              mag += std::abs(q[static_cast<std::size_t>(i * n + c)] *
                              r.decoded[static_cast<std::size_t>(j * n + c)]);
            const auto at = static_cast<std::size_t>(i * kLd + j);
            EXPECT_NEAR(s[at], s_ref[at], 1e-6f * mag + 1e-30f) << "i=" << i << " j=" << j;
          }
        }
        const auto p = random_vector(rng, nq * kLd);
        auto acc = random_vector(rng, nq * n);
        auto acc_ref = acc;
        axpy_rows(r.codec, p.data(), nq, kLd, r.bytes.data(), kRows, acc.data());
        ref::axpy_rows(r.codec, p.data(), nq, kLd, r.bytes.data(), kRows, acc_ref.data());
        // Same per-element fma sequence (j ascending) as the reference: bit-exact.
        for (std::size_t e = 0; e < acc.size(); ++e) ASSERT_EQ(acc[e], acc_ref[e]) << e;
      }
    }
  }
}

// With and without prepare_block_scales (attention prepares every stream's codec): the looked-up
// byte block scales must be the very quotients the kernels divide out otherwise.
TEST(RowKernels, PackedRowsBitIdenticalToFakeQuantizedFp32Rows) {
  std::mt19937 rng(11);
  for (KvFormat f : all_formats()) {
    for (std::int64_t n : kLengths) {
      for (const bool prepared : {false, true}) {
        Rows packed = make_rows(rng, f, n);
        BlockScaleValues block_scales;
        if (prepared) prepare_block_scales(packed.codec, block_scales);
        // The fake-quantized cache: fp32 rows holding the dequantized values, unit scale.
        const RowCodec f32{KvFormat::kF32, n};
        const auto* f32_rows = reinterpret_cast<const std::byte*>(packed.decoded.data());
        for (std::int64_t nq : kQueries) {
          SCOPED_TRACE(testing::Message() << kv_format_name(f) << " n=" << n << " nq=" << nq
                                          << (prepared ? " prepared" : ""));
          const auto q = random_vector(rng, nq * n);
          std::vector<float> s(static_cast<std::size_t>(nq * kLd)), s_f32(s.size());
          dot_rows(packed.codec, q.data(), nq, packed.bytes.data(), kRows, s.data(), kLd);
          dot_rows(f32, q.data(), nq, f32_rows, kRows, s_f32.data(), kLd);
          for (std::size_t e = 0; e < s.size(); e += 1) {
            if (static_cast<std::int64_t>(e) % kLd >= kRows) continue;  // untouched stride gap
            ASSERT_EQ(std::bit_cast<std::uint32_t>(s[e]), std::bit_cast<std::uint32_t>(s_f32[e]))
                << e;
          }
          const auto p = random_vector(rng, nq * kLd);
          auto acc = random_vector(rng, nq * n);
          auto acc_f32 = acc;
          axpy_rows(packed.codec, p.data(), nq, kLd, packed.bytes.data(), kRows, acc.data());
          axpy_rows(f32, p.data(), nq, kLd, f32_rows, kRows, acc_f32.data());
          for (std::size_t e = 0; e < acc.size(); ++e)
            ASSERT_EQ(std::bit_cast<std::uint32_t>(acc[e]),
                      std::bit_cast<std::uint32_t>(acc_f32[e]))
                << e;
        }
      }
    }
  }
}

// fp8 E4M3's bare form folds its decode's 2^8 into the stream scale (kRawFactor); a scale whose
// 256 multiple overflows must run the general form and still give the fake-quantized cache's
// results (the bare form would multiply by infinity).
TEST(RowKernels, Fp8ScaleTooLargeToFoldRunsTheGeneralForm) {
  constexpr std::int64_t n = 64;
  RowCodec c{KvFormat::kFP8E4M3, n};
  c.scale = 2e36f;  // scale * 256 overflows; the codes below (|value| <= 1) stay finite
  ASSERT_FALSE(std::isfinite(c.scale * 256.0f));
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> magnitude(0, 0x38), sign(0, 1);
  std::vector<std::byte> bytes(static_cast<std::size_t>(kRows * n));
  for (std::byte& b : bytes) b = static_cast<std::byte>(magnitude(rng) | (sign(rng) << 7));
  std::vector<float> decoded(static_cast<std::size_t>(kRows * n));
  for (std::int64_t j = 0; j < kRows; ++j)
    kernels::dequantize_row(c.format, bytes.data() + j * n, n, c.scale, 0.0f, 1.0f,
                            decoded.data() + j * n);
  const RowCodec f32{KvFormat::kF32, n};
  const auto* f32_rows = reinterpret_cast<const std::byte*>(decoded.data());
  for (std::int64_t nq : {1, 3}) {
    const auto q = random_vector(rng, nq * n);
    std::vector<float> s(static_cast<std::size_t>(nq * kLd)), s_f32(s.size());
    dot_rows(c, q.data(), nq, bytes.data(), kRows, s.data(), kLd);
    dot_rows(f32, q.data(), nq, f32_rows, kRows, s_f32.data(), kLd);
    for (std::int64_t k = 0; k < nq; ++k) {
      for (std::int64_t j = 0; j < kRows; ++j) {
        const auto e = static_cast<std::size_t>(k * kLd + j);
        ASSERT_TRUE(std::isfinite(s[e]));
        ASSERT_EQ(std::bit_cast<std::uint32_t>(s[e]), std::bit_cast<std::uint32_t>(s_f32[e]));
      }
    }
    const auto p = random_vector(rng, nq * kLd);
    auto acc = random_vector(rng, nq * n);
    auto acc_f32 = acc;
    axpy_rows(c, p.data(), nq, kLd, bytes.data(), kRows, acc.data());
    axpy_rows(f32, p.data(), nq, kLd, f32_rows, kRows, acc_f32.data());
    for (std::size_t e = 0; e < acc.size(); ++e)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(acc[e]), std::bit_cast<std::uint32_t>(acc_f32[e]));
  }
}

// prepare_block_scales fills a table only for byte block scales (nvfp4, *_e4m3, *_log: the
// formats with a global scale), and only where SIMD kernels read it: entry e = the byte's
// decoded scale (E4M3, or the log scale for *_log) / the global scale. That the kernels index
// it with each block's byte is the bit-identity test above.
TEST(RowKernels, BlockScalesArePreparedForByteScalesOnly) {
  for (const auto& t : quant::kv_format_table()) {
    SCOPED_TRACE(kv_format_name(t.format));
    RowCodec c = codec_for(t.format, 64);
    BlockScaleValues values;
    values.fill(-1.0f);
    prepare_block_scales(c, values);
    const bool expected = t.global_scale && kv_rows_isa() != Isa::kScalar;
    ASSERT_EQ(c.block_scales != nullptr, expected);
    if (!expected) {
      EXPECT_EQ(values[0], -1.0f);
      continue;
    }
    EXPECT_EQ(c.block_scales, values.data());
    const bool log_scale = t.name.ends_with("_log");
    const auto& table = log_scale ? quant::detail::kLogScaleTable : quant::detail::kE4M3Table;
    for (std::size_t e = 0; e < values.size(); ++e)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(values[e]),
                std::bit_cast<std::uint32_t>(table[e] / c.global_scale))
          << e;
  }
}

// A row's score does not depend on the rows decoded with it: blocks of 16 rows reduce their
// horizontal sums together, bit-identical to one row at a time.
TEST(RowKernels, ScoresIndependentOfRowBlocking) {
  std::mt19937 rng(13);
  for (KvFormat f : all_formats()) {
    for (std::int64_t n : kLengths) {
      const Rows r = make_rows(rng, f, n);
      const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(f, n));
      for (std::int64_t nq : {1, 3, 9}) {
        SCOPED_TRACE(testing::Message() << kv_format_name(f) << " n=" << n << " nq=" << nq);
        const auto q = random_vector(rng, nq * n);
        std::vector<float> all(static_cast<std::size_t>(nq * kLd)), one(all.size());
        dot_rows(r.codec, q.data(), nq, r.bytes.data(), kRows, all.data(), kLd);
        for (std::int64_t j = 0; j < kRows; ++j)
          dot_rows(r.codec, q.data(), nq, r.bytes.data() + j * row_bytes, 1, one.data() + j, kLd);
        for (std::int64_t i = 0; i < nq; ++i)
          for (std::int64_t j = 0; j < kRows; ++j) {
            const auto at = static_cast<std::size_t>(i * kLd + j);
            ASSERT_EQ(std::bit_cast<std::uint32_t>(all[at]), std::bit_cast<std::uint32_t>(one[at]))
                << "query " << i << " row " << j;
          }
      }
    }
  }
}

TEST(RowKernels, NoRowsAndNoQueriesAreNoOps) {
  const RowCodec c{KvFormat::kINT8, 64, 0.5f};
  std::vector<std::byte> row(64);
  std::vector<float> q(64, 1.0f), s(4, 42.0f), acc(64, 3.0f);
  dot_rows(c, q.data(), 1, row.data(), 0, s.data(), 4);
  EXPECT_EQ(s[0], 42.0f);
  axpy_rows(c, s.data(), 1, 4, row.data(), 0, acc.data());
  EXPECT_EQ(acc[0], 3.0f);
  dot_rows(c, q.data(), 0, row.data(), 1, s.data(), 4);
  EXPECT_EQ(s[0], 42.0f);
}

}  // namespace
}  // namespace kvq::kernels
