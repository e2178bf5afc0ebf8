// The SIMD row kernels (kvq/kernels/cpu/kv_row_kernels.h, one row per format in
// kv_format_simd.inc) against the scalar codec and its twins (quant::dequantize_row,
// kernels/ref/kv_rows_ref.h): every ISA level this CPU runs, called directly through the per-ISA
// table, and the runtime dispatch, on rows of awkward lengths and on every code.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/kernels/ref/kv_rows_ref.h"
#include "kvq/quant/formats.h"
#include "support/random_rows.h"

namespace kvq::kernels {
namespace {

using quant::kv_format_name;
using quant::kv_format_table;
using quant::kv_format_traits;
using quant::kv_row_bytes;

constexpr std::int64_t kLengths[] = {1, 15, 16, 17, 63, 64, 128, 1000};

using test::random_row;

// The row-kernel levels this CPU runs (kv_rows_isa's requirements per level).
std::vector<Isa> row_isas() {
  const CpuFeatures& f = cpu_features();
  std::vector<Isa> isas;
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c)
    isas.push_back(Isa::kAvx512);
  if (f.avx2 && f.fma && f.f16c) isas.push_back(Isa::kAvx2);
  return isas;
}

// Every (level, format row, its SIMD kernels) this CPU runs.
struct LevelRow {
  Isa isa;
  const quant::KvFormatTraits& t;
  const KvRowSimd& k;
};
std::vector<LevelRow> level_rows() {
  std::vector<LevelRow> rows;
  for (Isa isa : row_isas())
    for (const auto& t : kv_format_table())
      if (const KvRowSimd* k = kv_row_simd(t.format, isa)) rows.push_back({isa, t, *k});
  return rows;
}

// A row of random bytes (every code, NaN codes included) for the decode-only comparisons.
std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t count) {
  std::vector<std::byte> b(count);
  for (auto& v : b) v = static_cast<std::byte>(rng() & 0xff);
  return b;
}

// Same bits, or both NaN (payloads may differ).
bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Every format of the codec table has its row in the kernel table on every level (a format
// without one would silently run the scalar codec).
TEST(KvRowSimd, EveryFormatHasARowOnEveryLevel) {
  std::cout << "dispatch: " << isa_name(kv_rows_isa()) << "\n";
  for (const auto& t : kv_format_table()) {
    EXPECT_EQ(kv_row_simd(t.format, Isa::kScalar), nullptr);
    const KvRowSimd* a = kv_row_simd(t.format, Isa::kAvx512);
    const KvRowSimd* b = kv_row_simd(t.format, Isa::kAvx2);
    ASSERT_NE(a, nullptr) << t.name;
    ASSERT_NE(b, nullptr) << t.name;
    EXPECT_EQ(a->width, 16);
    EXPECT_EQ(b->width, 8);
  }
}

TEST(KvRowSimd, DequantizeEqualsTheCodecOnEveryCode) {
  std::mt19937 rng(11);
  for (const auto& [isa, t, k] : level_rows()) {
    const KvFormat f = t.format;
    for (std::int64_t n : kLengths) {
      const auto row = random_bytes(rng, kv_row_bytes(f, n));
      const float zp = t.supports_zero_point ? -3.0f : 0.0f;
      std::vector<float> want(n), got(n, -1.0f), via_dispatch(n);
      quant::dequantize_row(f, row.data(), n, 0.37f, zp, 1.7f, want.data());
      const std::int64_t done = k.dequantize_row(row.data(), n, 0.37f, zp, 1.7f, got.data());
      ASSERT_EQ(done, n - n % k.width) << isa_name(isa);
      // The SIMD kernels only cover whole chunks; finish the tail like the dispatcher does.
      const quant::RowCodec codec{f, n, 0.37f, zp, 1.7f};
      for (std::int64_t i = done; i < n; ++i) got[i] = t.value(codec, row.data(), i);
      kernels::dequantize_row(f, row.data(), n, 0.37f, zp, 1.7f, via_dispatch.data());
      for (std::int64_t i = 0; i < n; ++i) {
        // Bit-exact (NaN payloads aside): the same per-element ops in the same order.
        ASSERT_TRUE(same_bits(got[i], want[i]))
            << isa_name(isa) << " " << t.name << " n=" << n << " i=" << i << " got " << got[i]
            << " want " << want[i];
        ASSERT_TRUE(same_bits(via_dispatch[i], want[i]));
      }
    }
  }
}

// One byte per value: a row holding all 256 codes decodes as the codec does, through every level
// and the dispatch (fp8: every E4M3 code, NaNs included; int8: every value).
TEST(KvRowSimd, ByteFormatsDecodeAll256Codes) {
  std::vector<std::byte> row(256);
  for (int c = 0; c < 256; ++c) row[c] = static_cast<std::byte>(c);
  for (const auto& t : kv_format_table()) {
    if (t.bits != 8 || t.block_values != 1) continue;
    std::vector<float> want(256), got(256);
    quant::dequantize_row(t.format, row.data(), 256, 1.0f, 0.0f, 1.0f, want.data());
    kernels::dequantize_row(t.format, row.data(), 256, 1.0f, 0.0f, 1.0f, got.data());
    for (int c = 0; c < 256; ++c) EXPECT_TRUE(same_bits(got[c], want[c])) << t.name << " " << c;
    for (Isa isa : row_isas()) {
      const KvRowSimd* k = kv_row_simd(t.format, isa);
      if (k == nullptr) continue;
      std::fill(got.begin(), got.end(), -1.0f);
      ASSERT_EQ(k->dequantize_row(row.data(), 256, 1.0f, 0.0f, 1.0f, got.data()), 256);
      for (int c = 0; c < 256; ++c)
        EXPECT_TRUE(same_bits(got[c], want[c])) << isa_name(isa) << " " << t.name << " " << c;
    }
  }
}

TEST(KvRowSimd, DotAndAxpyMatchTheScalarTwins) {
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const auto& [isa, t, k] : level_rows()) {
    const KvFormat f = t.format;
    for (std::int64_t n : kLengths) {
      std::vector<float> x = random_row(rng, n, 2.0f);
      if (n >= 16) {  // edge values: the format's extremes after scaling
        x[5] = 1e6f;
        x[6] = -1e6f;
      }
      float amax = 0.0f;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      const float scale = amax / 100.0f;
      const float zp = t.supports_zero_point ? 2.0f : 0.0f;
      const float gs = 448.0f * 6.0f / amax;
      std::vector<std::byte> row(kv_row_bytes(f, n));
      quant::quantize_row(f, x.data(), n, scale, zp, gs, row.data());
      std::vector<float> q(n);
      for (float& v : q) v = dist(rng);

      // dot: summation order differs (lanes, two accumulators); the error of either order is
      // below n * eps * sum|q_i v_i|, so their difference is below twice that.
      const float want = ref::dot_row(f, q.data(), row.data(), n, zp);
      float head = 0.0f;
      const std::int64_t done = k.dot_row(q.data(), row.data(), n, zp, &head);
      float got = head;
      double abs_sum = 0.0;
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = t.unscaled(row.data(), n, i, zp);
        abs_sum += std::fabs(static_cast<double>(q[i]) * v);
        if (i >= done) got += q[i] * v;
      }
      const double tol = 2.0 * static_cast<double>(n) * 0x1p-24 * abs_sum;
      EXPECT_LE(std::fabs(static_cast<double>(got) - want), tol)
          << isa_name(isa) << " " << t.name << " n=" << n;
      EXPECT_LE(std::fabs(static_cast<double>(dot_row(f, q.data(), row.data(), n, zp)) - want),
                tol);

      // axpy: one fma per element in both: bit-exact.
      std::vector<float> acc_ref(q), acc_fast(q), acc_dispatch(q);
      ref::axpy_row(f, 0.625f, row.data(), n, zp, acc_ref.data());
      const std::int64_t done_axpy = k.axpy_row(0.625f, row.data(), n, zp, acc_fast.data());
      for (std::int64_t i = done_axpy; i < n; ++i)
        acc_fast[i] = std::fma(0.625f, t.unscaled(row.data(), n, i, zp), acc_fast[i]);
      axpy_row(f, 0.625f, row.data(), n, zp, acc_dispatch.data());
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(acc_fast[i], acc_ref[i]) << isa_name(isa) << " " << t.name << " i=" << i;
        ASSERT_EQ(acc_dispatch[i], acc_ref[i]);
      }
    }
  }
}

// The multi-query kernels of every level (not only the dispatched one) on packed rows give
// exactly what the same level's f32 kernels give on the decoded rows, with the codec's byte
// block scales prepared and not: head_dim 64 (queries held in registers where they fit), 48
// and 128 (the general paths), 1 to 9 queries, 37 rows (a 16-row reduction block and a tail).
TEST(KvRowSimd, MultiQueryKernelsOnEveryLevelEqualF32OnTheDecodedRows) {
  std::mt19937 rng(29);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  constexpr std::int64_t kRows = 37, kLd = 40;
  for (const LevelRow& lr : level_rows()) {
    const KvRowSimd* f32 = kv_row_simd(KvFormat::kF32, lr.isa);
    ASSERT_NE(f32, nullptr);
    for (const std::int64_t n : {48, 64, 128}) {
      if (lr.t.head_dim_multiple > 0 && n % lr.t.head_dim_multiple != 0) continue;
      RowCodec c{lr.t.format, n, lr.t.needs_scale ? 0.0377f : 1.0f, 0.0f,
                 lr.t.global_scale ? 1234.567f : 1.0f};
      const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(c.format, n));
      std::vector<std::byte> rows(static_cast<std::size_t>(kRows * row_bytes));
      std::vector<float> decoded(static_cast<std::size_t>(kRows * n));
      for (std::int64_t j = 0; j < kRows; ++j) {
        const std::vector<float> x = random_row(rng, n, 1.0f);
        quant::quantize_row(c.format, x.data(), n, c.scale, 0.0f, c.global_scale,
                            rows.data() + j * row_bytes);
        quant::dequantize_row(c.format, rows.data() + j * row_bytes, n, c.scale, 0.0f,
                              c.global_scale, decoded.data() + j * n);
      }
      const RowCodec f32_codec{KvFormat::kF32, n};
      const auto* f32_rows = reinterpret_cast<const std::byte*>(decoded.data());
      BlockScaleValues block_scales;
      for (const bool prepared : {false, true}) {
        if (prepared) prepare_block_scales(c, block_scales);
        for (const std::int64_t nq : {1, 2, 3, 4, 9}) {
          SCOPED_TRACE(testing::Message() << isa_name(lr.isa) << " " << lr.t.name << " n=" << n
                                          << " nq=" << nq << (prepared ? " prepared" : ""));
          std::vector<float> q(static_cast<std::size_t>(nq * n));
          for (float& v : q) v = dist(rng);
          std::vector<float> s(static_cast<std::size_t>(nq * kLd)), s_f32(s.size());
          for (std::int64_t k0 = 0; k0 < nq; k0 += kMaxRowQueries) {  // as the dispatcher does
            const std::int64_t m = std::min(kMaxRowQueries, nq - k0);
            ASSERT_EQ(lr.k.dot_rows(c, q.data() + k0 * n, m, rows.data(), kRows,
                                    s.data() + k0 * kLd, kLd),
                      n);
            ASSERT_EQ(f32->dot_rows(f32_codec, q.data() + k0 * n, m, f32_rows, kRows,
                                    s_f32.data() + k0 * kLd, kLd),
                      n);
          }
          for (std::int64_t i = 0; i < nq; ++i)
            for (std::int64_t j = 0; j < kRows; ++j) {
              const auto at = static_cast<std::size_t>(i * kLd + j);
              ASSERT_EQ(std::bit_cast<std::uint32_t>(s[at]),
                        std::bit_cast<std::uint32_t>(s_f32[at]))
                  << "query " << i << " row " << j;
            }
          std::vector<float> p(static_cast<std::size_t>(nq * kLd)), acc(q.size());
          for (float& v : p) v = dist(rng);
          for (float& v : acc) v = dist(rng);
          std::vector<float> acc_f32 = acc;
          for (std::int64_t k0 = 0; k0 < nq; k0 += kMaxRowQueries) {
            const std::int64_t m = std::min(kMaxRowQueries, nq - k0);
            lr.k.axpy_rows(c, p.data() + k0 * kLd, m, kLd, rows.data(), kRows, acc.data() + k0 * n);
            f32->axpy_rows(f32_codec, p.data() + k0 * kLd, m, kLd, f32_rows, kRows,
                           acc_f32.data() + k0 * n);
          }
          for (std::size_t e = 0; e < acc.size(); ++e)
            ASSERT_EQ(std::bit_cast<std::uint32_t>(acc[e]),
                      std::bit_cast<std::uint32_t>(acc_f32[e]))
                << e;
        }
      }
    }
  }
}

// fp8 E4M3 rows without a NaN code decode in a faster form (checked per row, row_plain): every
// code through the multi-query kernels of every level, in rows with and without NaN codes, gives
// what the f32 kernels give on the decoded rows (NaN where they give NaN).
TEST(KvRowSimd, Fp8RowsWithAndWithoutNaNCodesEqualF32OnTheDecodedRows) {
  constexpr std::int64_t n = 64, kRows = 37, kLd = 40;
  const RowCodec c{KvFormat::kFP8E4M3, n, 0.0377f};
  std::vector<std::byte> rows(static_cast<std::size_t>(kRows * n));
  for (std::int64_t j = 0; j < kRows; ++j) {
    for (std::int64_t e = 0; e < n; ++e) {
      int code = static_cast<int>((j * n + e) % 256);  // rows 0-3 hold every code once
      if ((code & 0x7f) == 0x7f) code ^= 1;            // ... but the two NaNs
      if (j % 6 == 5 && e == j % n) code = j % 12 == 5 ? 0x7f : 0xff;  // one NaN in these rows
      rows[static_cast<std::size_t>(j * n + e)] = static_cast<std::byte>(code);
    }
  }
  std::vector<float> decoded(static_cast<std::size_t>(kRows * n));
  quant::dequantize_row(c.format, rows.data(), kRows * n, c.scale, 0.0f, 1.0f, decoded.data());
  const RowCodec f32_codec{KvFormat::kF32, n};
  const auto* f32_rows = reinterpret_cast<const std::byte*>(decoded.data());
  std::mt19937 rng(31);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (Isa isa : row_isas()) {
    const KvRowSimd* k = kv_row_simd(c.format, isa);
    const KvRowSimd* f32 = kv_row_simd(KvFormat::kF32, isa);
    ASSERT_NE(k, nullptr);
    for (const std::int64_t nq : {1, 3}) {
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " nq=" << nq);
      std::vector<float> q(static_cast<std::size_t>(nq * n));
      for (float& v : q) v = dist(rng);
      std::vector<float> s(static_cast<std::size_t>(nq * kLd)), s_f32(s.size());
      k->dot_rows(c, q.data(), nq, rows.data(), kRows, s.data(), kLd);
      f32->dot_rows(f32_codec, q.data(), nq, f32_rows, kRows, s_f32.data(), kLd);
      for (std::int64_t i = 0; i < nq; ++i) {
        for (std::int64_t j = 0; j < kRows; ++j) {
          const auto at = static_cast<std::size_t>(i * kLd + j);
          ASSERT_EQ(std::isnan(s[at]), j % 6 == 5) << "query " << i << " row " << j;
          ASSERT_TRUE(same_bits(s[at], s_f32[at])) << "query " << i << " row " << j;
        }
      }
      std::vector<float> p(static_cast<std::size_t>(nq * kLd)), acc(q.size());
      for (float& v : p) v = dist(rng);
      for (float& v : acc) v = dist(rng);
      std::vector<float> acc_f32 = acc;
      k->axpy_rows(c, p.data(), nq, kLd, rows.data(), kRows, acc.data());
      f32->axpy_rows(f32_codec, p.data(), nq, kLd, f32_rows, kRows, acc_f32.data());
      for (std::size_t e = 0; e < acc.size(); ++e) ASSERT_TRUE(same_bits(acc[e], acc_f32[e])) << e;
    }
  }
}

// The fast paths fold no scale: dot / axpy of a row equal the dequantized row over its scale.
TEST(KvRowSimd, DotAndAxpyLeaveTheStreamScaleOut) {
  std::mt19937 rng(17);
  for (const auto& t : kv_format_table()) {
    const KvFormat f = t.format;
    const std::int64_t n = 64;
    const std::vector<float> x = random_row(rng, n, 1.0f);
    const float scale = 0.02f, gs = 300.0f;
    std::vector<std::byte> row(kv_row_bytes(f, n));
    quant::quantize_row(f, x.data(), n, scale, 0.0f, gs, row.data());
    std::vector<float> deq(n), acc(n, 0.0f);
    kernels::dequantize_row(f, row.data(), n, scale, 0.0f, gs, deq.data());
    axpy_row(f, 1.0f, row.data(), n, 0.0f, acc.data());
    // In-row block scales are applied; the stream factor is then 1 / global_scale for byte
    // block scales (nvfp4, *_e4m3, *_log) and 1 for fp16 ones, which have no global scale.
    const float fold = !t.has_row_scales() ? scale : t.global_scale ? 1.0f / gs : 1.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      if (fold == 1.0f)  // the same operations as the codec's
        EXPECT_EQ(acc[i], deq[i]) << kv_format_name(f) << " " << i;
      else
        EXPECT_NEAR(acc[i] * fold, deq[i], 1e-6f * std::fabs(deq[i]) + 1e-30f)
            << kv_format_name(f) << " " << i;
    }
  }
}

}  // namespace
}  // namespace kvq::kernels
