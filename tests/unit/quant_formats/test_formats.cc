// The KV storage format codec table and row codecs (kvq/quant/formats.h):
//  - traits, names, row sizes, the QuantizationArgs mapping both ways, the dynamic-scale rule;
//  - quantize_row + dequantize_row == compressed-tensors' fake_quantize (kvq::quant port, itself
//    checked against the reference by tests/golden/quant) bit for bit in fp32, for every row of
//    the table that QuantizationArgs can express, and == the same math written out
//    (tests/support/float_grid_reference.h) for those it cannot (fp8 E5M2);
//  - the documented NaN / saturation policies.
// The fast kernels on packed rows are tested against these codecs in tests/unit/kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/core/float8.h"
#include "kvq/core/tensor.h"
#include "kvq/quant/fake_quantize.h"
#include "kvq/quant/formats.h"
#include "kvq/quant/kv_row_layout.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/quant_args.h"
#include "support/float_grid_reference.h"
#include "support/random_rows.h"

namespace kvq::quant {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Same value bit for bit, except that NaNs match any NaN and +0 matches -0 (int codes cannot
// carry the sign of a zero; attention cannot tell them apart).
::testing::AssertionResult same_value(float got, float want) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (got == 0.0f && want == 0.0f) return ::testing::AssertionSuccess();
  if (std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " != " << want;
}

using test::random_row;

TEST(KvFormats, TraitsTable) {
  ASSERT_EQ(kv_format_table().size(), kKvFormatCount);
  for (std::size_t i = 0; i < kv_format_table().size(); ++i) {
    const auto& t = kv_format_table()[i];
    EXPECT_EQ(static_cast<std::size_t>(t.format), i);
    EXPECT_EQ(&kv_format_traits(t.format), &t);
    EXPECT_EQ(parse_kv_format(t.name), t.format);
    for (std::string_view alias : t.aliases) {
      if (!alias.empty()) {
        EXPECT_EQ(parse_kv_format(alias), t.format) << alias;
      }
    }
    // Every row carries its codec; a quantized one its grid and dynamic rule.
    EXPECT_NE(t.quantize_row, nullptr) << t.name;
    EXPECT_NE(t.unscaled, nullptr) << t.name;
    EXPECT_NE(t.value, nullptr) << t.name;
    EXPECT_EQ(t.dynamic_param != nullptr, t.needs_scale) << t.name;
    EXPECT_TRUE(!t.needs_scale || t.code_min < t.code_max) << t.name;
    EXPECT_TRUE(!t.global_scale || t.needs_scale) << t.name;
    EXPECT_TRUE(!t.supports_int8_query() || t.int8_query_multiple > 0) << t.name;
  }
  EXPECT_EQ(kv_format_name(KvFormat::kNVFP4), "nvfp4");
  EXPECT_EQ(kv_format_traits(KvFormat::kNVFP4).block_values, 16);
  EXPECT_EQ(kv_format_traits(KvFormat::kNVFP4).block_bytes, 9);
  EXPECT_TRUE(kv_format_traits(KvFormat::kINT4).supports_zero_point);
  EXPECT_FALSE(kv_format_traits(KvFormat::kBF16).needs_scale);
  EXPECT_EQ(parse_kv_format("fp8_e4m3"), KvFormat::kFP8E4M3);
  EXPECT_EQ(parse_kv_format("E4M3"), KvFormat::kFP8E4M3);
  EXPECT_EQ(parse_kv_format("torch.float8_e4m3fn"), KvFormat::kFP8E4M3);
  EXPECT_EQ(parse_kv_format("bfloat16"), KvFormat::kBF16);
  EXPECT_EQ(parse_kv_format("float16"), KvFormat::kF16);
  EXPECT_EQ(parse_kv_format("FP4"), KvFormat::kNVFP4);
  EXPECT_EQ(parse_kv_format("fp8_e5m2"), KvFormat::kFP8E5M2);
  EXPECT_EQ(parse_kv_format("E5M2"), KvFormat::kFP8E5M2);
  EXPECT_EQ(parse_kv_format("torch.float8_e5m2"), KvFormat::kFP8E5M2);
  EXPECT_EQ(kv_format_traits(KvFormat::kFP8E5M2).code_max, 57344.0f);
  EXPECT_FALSE(kv_format_traits(KvFormat::kFP8E5M2).supports_zero_point);
  EXPECT_FALSE(kv_format_traits(KvFormat::kFP8E5M2).supports_int8_query());
  EXPECT_EQ(parse_kv_format("int8_g32"), KvFormat::kINT8G32);
  EXPECT_EQ(parse_kv_format("Q8_0"), KvFormat::kINT8G32);  // llama.cpp's name
  EXPECT_EQ(parse_kv_format("int4_g32"), KvFormat::kINT4G32);
  EXPECT_EQ(parse_kv_format("q4_0"), KvFormat::kINT4G32);
  EXPECT_EQ(parse_kv_format("q4_1"), KvFormat::kINT4G32A);
  EXPECT_EQ(parse_kv_format("int4_g32_mse"), KvFormat::kINT4G32Mse);
  EXPECT_EQ(parse_kv_format("Q4_0_MSE"), KvFormat::kINT4G32Mse);
  EXPECT_TRUE(kv_format_traits(KvFormat::kINT4G32A).block_min);
  EXPECT_FALSE(kv_format_traits(KvFormat::kINT4G32).block_min);
  for (KvFormat f : {KvFormat::kINT8G32, KvFormat::kINT4G32, KvFormat::kINT4G32A}) {
    const auto& t = kv_format_traits(f);
    EXPECT_FALSE(t.needs_scale) << t.name;  // no per-stream parameter: scales are in-row
    EXPECT_FALSE(t.global_scale) << t.name;
    EXPECT_FALSE(t.supports_zero_point) << t.name;
    EXPECT_FALSE(t.supports_int8_query()) << t.name;
    EXPECT_FALSE(t.args.exists) << t.name;
    EXPECT_TRUE(t.has_row_scales()) << t.name;
    EXPECT_EQ(t.head_dim_multiple, 32) << t.name;
  }
  EXPECT_TRUE(kv_format_traits(KvFormat::kNVFP4).has_row_scales());
  EXPECT_FALSE(kv_format_traits(KvFormat::kINT4).has_row_scales());
  EXPECT_FALSE(parse_kv_format("int3").has_value());
  EXPECT_FALSE(parse_kv_format("").has_value());
  EXPECT_FALSE(parse_kv_format("torch.").has_value());
}

// Which formats allow int8-query scores, and for which row lengths.
TEST(KvFormats, Int8QuerySupport) {
  EXPECT_TRUE(kv_format_traits(KvFormat::kINT8).supports_int8_query());
  EXPECT_TRUE(kv_format_traits(KvFormat::kINT4).supports_int8_query());
  EXPECT_TRUE(kv_format_traits(KvFormat::kNVFP4).supports_int8_query());
  EXPECT_FALSE(kv_format_traits(KvFormat::kFP8E4M3).supports_int8_query());
  EXPECT_FALSE(kv_format_traits(KvFormat::kBF16).supports_int8_query());
  EXPECT_TRUE(kv_int8_query_supported(KvFormat::kINT8, 7));
  EXPECT_TRUE(kv_int8_query_supported(KvFormat::kINT4, 100));
  EXPECT_TRUE(kv_int8_query_supported(KvFormat::kNVFP4, 128));
  EXPECT_FALSE(kv_int8_query_supported(KvFormat::kNVFP4, 48));
  EXPECT_FALSE(kv_int8_query_supported(KvFormat::kFP8E4M3, 64));
}

// The QuantizationArgs mapping both ways: every row that has args maps back to itself, and
// the lifecycle's schemes (lifecycle/kv_cache_spec.cc) map as they always did.
TEST(KvFormats, QuantizationArgsMapping) {
  for (const auto& t : kv_format_table()) {
    for (bool symmetric : {true, false}) {
      if (!symmetric && !t.supports_zero_point) continue;
      const auto args = kv_quantization_args(t.format, symmetric, QuantizationStrategy::kTensor);
      EXPECT_EQ(args.has_value(), t.args.exists) << t.name;
      if (!args) continue;
      EXPECT_EQ(kv_format_for_args(*args), t.format) << t.name;
      EXPECT_EQ(args->symmetric, symmetric);
    }
  }
  const auto args = [](QuantizationType type, int bits) {
    QuantizationArgs a;
    a.type = type;
    a.num_bits = bits;
    return a;
  };
  using T = QuantizationType;
  EXPECT_EQ(kv_format_for_args(args(T::kFloat, 8)), KvFormat::kFP8E4M3);
  EXPECT_EQ(kv_format_for_args(args(T::kInt, 8)), KvFormat::kINT8);
  EXPECT_EQ(kv_format_for_args(args(T::kInt, 4)), KvFormat::kINT4);
  EXPECT_EQ(kv_format_for_args(args(T::kFloat, 4)), KvFormat::kNVFP4);  // fp4 stored as nvfp4
  EXPECT_FALSE(kv_format_for_args(args(T::kInt, 16)).has_value());
  EXPECT_FALSE(kv_format_for_args(args(T::kInt, 2)).has_value());
  const auto nv = kv_quantization_args(KvFormat::kNVFP4, true, QuantizationStrategy::kAttnHead);
  ASSERT_TRUE(nv.has_value());
  EXPECT_EQ(nv->strategy, QuantizationStrategy::kTensorGroup);
  EXPECT_EQ(nv->group_size, 16);
  EXPECT_EQ(nv->scale_dtype, DType::kF8E4M3);
  EXPECT_FALSE(kv_quantization_args(KvFormat::kF32, true, QuantizationStrategy::kTensor));
  // compressed-tensors 0.19.0 has no E5M2 args: float 8 bits is float8_e4m3fn.
  EXPECT_FALSE(kv_quantization_args(KvFormat::kFP8E5M2, true, QuantizationStrategy::kTensor));
}

// The dynamic-scale rule is compressed-tensors' symmetric calculate_qparams on the format's
// grid, bit for bit (for every row QuantizationArgs can express), and nvfp4's generate_gparam.
TEST(KvFormats, DynamicRuleIsCalculateQparams) {
  const float amaxes[] = {1e-44f, 1e-30f, 3e-7f,  0.0123f, 0.75f, 1.0f,
                          2.5f,   6.5f,   448.0f, 3e5f,    1e30f};
  for (const auto& t : kv_format_table()) {
    if (!t.needs_scale) continue;
    for (float amax : amaxes) {
      const Tensor mn = Tensor::from_f32({1}, std::vector<float>{-amax});
      const Tensor mx = Tensor::from_f32({1}, std::vector<float>{amax});
      const float got = kv_dynamic_param(t.format, amax);
      if (t.global_scale && !t.args.exists) {
        // Byte block scales (kvq's rule): headroom · amax's block scale, amax over the lowest
        // level times the global, is the byte's largest — E4M3's 448, the log scale's 1 (the
        // global capped at FLT_MAX).
        const bool log = t.format == KvFormat::kNL4G32Log || t.format == KvFormat::kNL4G16Log ||
                         t.format == KvFormat::kINT5G32Log || t.format == KvFormat::kNL3G32Log ||
                         t.format == KvFormat::kNL3G16Log;
        const float top = log ? 1.0f : 448.0f;
        const float lo = -t.code_min;  // 127 for nl4, 16 for int5
        const float want = top * lo / (kNvfp4DynamicHeadroom * amax);
        EXPECT_EQ(got, std::isinf(want) ? std::numeric_limits<float>::max() : want) << t.name;
        if (std::isfinite(want)) {
          EXPECT_NEAR(got * kNvfp4DynamicHeadroom * amax / lo / top, 1.0f, 1e-6f) << t.name;
        }
        continue;
      }
      if (t.global_scale) {
        const float a = kNvfp4DynamicHeadroom * amax;
        const Tensor ta = Tensor::from_f32({1}, std::vector<float>{a});
        EXPECT_EQ(got, generate_gparam(ta, ta).f32()[0]) << t.name << " " << amax;
        continue;
      }
      const auto args = kv_quantization_args(t.format, true, QuantizationStrategy::kTensor);
      if (!args) {  // QuantizationArgs cannot name this grid: the same math written out
        const test::FloatGrid* g = test::float_grid(t.format);
        ASSERT_NE(g, nullptr) << t.name << ": add its grid to tests/support/float_grid_reference.h";
        EXPECT_EQ(got, test::symmetric_scale_on_grid(*g, amax)) << t.name << " " << amax;
        continue;
      }
      const float want = calculate_qparams(mn, mx, *args).scale.to_f32().f32()[0];
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
          << t.name << " amax " << amax << ": " << got << " vs " << want;
    }
  }
}

TEST(KvFormats, RowBytes) {
  EXPECT_EQ(kv_row_bytes(KvFormat::kF32, 64), 256u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kBF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kFP8E4M3, 64), 64u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kFP8E5M2, 17), 17u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT8, 64), 64u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4, 64), 32u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4, 17), 9u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 64), 36u);  // 4 blocks x (8 + 1)
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 128), 72u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 17), 9u + 2u);  // partial block padded
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 1), 2u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT8G32, 64), 64u + 4u);  // 2 fp16 block scales
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT8G32, 128), 128u + 8u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4G32, 64), 32u + 4u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4G32, 128), 64u + 8u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4G32, 33), 17u + 4u);   // partial block padded
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4G32A, 64), 32u + 8u);  // fp16 scale + minimum per block
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kF32), 4.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kBF16), 2.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kFP8E4M3), 1.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kFP8E5M2), 1.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT8), 1.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT4), 0.5);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kNVFP4), 0.5625);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT8G32), 8.5 / 8);   // q8_0's 8.5 bits
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT4G32), 4.5 / 8);   // q4_0's 4.5 bits
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT4G32A), 5.0 / 8);  // q4_1's 5 bits
  for (const auto& t : kv_format_table())  // bytes per value is the row size of whole blocks
    EXPECT_DOUBLE_EQ(kv_bytes_per_value(t.format) * 1024,
                     static_cast<double>(kv_row_bytes(t.format, 1024)));
}

TEST(KvFormats, Int4NibbleOrderAndOffset) {
  const std::vector<float> x = {1, -2, 7, -8, 0};  // scale 1: q = x
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT4, 5));
  quantize_row(KvFormat::kINT4, x.data(), 5, 1.0f, 0.0f, 1.0f, row.data());
  EXPECT_EQ(row[0], std::byte{(-2 + 8) << 4 | (1 + 8)});  // element 0 low, element 1 high
  EXPECT_EQ(row[1], std::byte{(-8 + 8) << 4 | (7 + 8)});
  EXPECT_EQ(row[2], std::byte{0x88});  // element 4 = q 0, padding q 0
}

TEST(KvFormats, Nvfp4Layout) {
  // One block: amax 6 with global scale 448 -> block scale e4m3(448 * 6 / 6) = 448, effective
  // scale 1, so the codes are the E2M1 codes of x; the scale byte follows the 8 nibble bytes.
  std::vector<float> x(16, 0.0f);
  x[0] = 6.0f;
  x[1] = -0.5f;
  x[15] = 1.5f;
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kNVFP4, 16));
  quantize_row(KvFormat::kNVFP4, x.data(), 16, 0.0f, 0.0f, 448.0f, row.data());
  EXPECT_EQ(row[0], std::byte{0x9 << 4 | 0x7});
  EXPECT_EQ(row[7], std::byte{0x3 << 4 | 0x0});
  EXPECT_EQ(row[8], std::byte{0x7e});  // E4M3 448
}

// ---- int8_g32 / int4_g32 ------------------------------------------------------------------

std::uint16_t fp16_at(const std::vector<std::byte>& row, std::size_t offset) {
  std::uint16_t h;
  std::memcpy(&h, row.data() + offset, 2);
  return h;
}

// The block's largest magnitude and the value that has it (the first one on ties, sign kept).
std::pair<float, float> block_extreme(const std::vector<float>& x, std::int64_t b0,
                                      std::int64_t b1) {
  float amax = 0.0f, m = 0.0f;
  for (std::int64_t i = b0; i < b1; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      m = x[i];
    }
  }
  return {amax, m};
}

// Hand-made blocks with fp16-exact scales: the codes, their bytes and the scale bytes.
TEST(KvFormats, Int8G32LayoutAndValues) {
  std::vector<float> x(64, 0.0f);  // block 1 stays all zeros
  x[0] = 63.5f;                    // amax: d = 63.5 / 127 = 0.5
  x[1] = -1.25f;                   // -2.5 -> -2 (ties to even)
  x[2] = 0.75f;                    // 1.5 -> 2
  x[3] = 0.25f;                    // 0.5 -> 0
  x[4] = -63.5f;                   // -127 (symmetric: never -128)
  x[31] = 0.2f;                    // 0.4 -> 0
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT8G32, 64));
  quantize_row(KvFormat::kINT8G32, x.data(), 64, 7.0f, 0.0f, 1.0f, row.data());  // scale unused
  const std::int8_t want[] = {127, -2, 2, 0, -127};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(static_cast<std::int8_t>(row[i]), want[i]) << i;
  EXPECT_EQ(fp16_at(row, 64), f32_to_fp16(0.5f));
  EXPECT_EQ(fp16_at(row, 66), 0u);  // an all-zero block: scale 0, codes 0
  for (int i = 32; i < 64; ++i) EXPECT_EQ(row[i], std::byte{0}) << i;
  std::vector<float> got(64);
  dequantize_row(KvFormat::kINT8G32, row.data(), 64, 7.0f, 0.0f, 1.0f, got.data());
  EXPECT_EQ(got[0], 63.5f);
  EXPECT_EQ(got[1], -1.0f);
  EXPECT_EQ(got[2], 1.0f);
  EXPECT_EQ(got[4], -63.5f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(got[i], 0.0f) << i;
}

// q4_0's scale: the value of largest magnitude maps to -8 exactly, whatever its sign; the other
// side reaches +7 (clamped).
TEST(KvFormats, Int4G32LayoutAndValues) {
  std::vector<float> x(64, 0.0f);
  x[0] = -4.0f;   // block 0's extreme: d = -4 / -8 = 0.5, code -8
  x[1] = 3.75f;   // 7.5 -> 8 (even) -> clamped to 7
  x[2] = 1.25f;   // 2.5 -> 2
  x[3] = 0.75f;   // 1.5 -> 2
  x[32] = 4.0f;   // block 1's extreme is positive: d = -0.5, code -8 decodes to +4
  x[33] = -1.0f;  // code 2
  x[34] = -4.0f;  // a tie on |x|: the first one sets the sign; -4 / -0.5 = 8 -> clamped to 7
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT4G32, 64));
  quantize_row(KvFormat::kINT4G32, x.data(), 64, 1.0f, 0.0f, 1.0f, row.data());
  EXPECT_EQ(row[0], std::byte{(7 + 8) << 4 | (-8 + 8)});  // element 0 low nibble (int4 order)
  EXPECT_EQ(row[1], std::byte{(2 + 8) << 4 | (2 + 8)});
  EXPECT_EQ(row[2], std::byte{0x88});  // zeros: q 0
  EXPECT_EQ(row[16], std::byte{(2 + 8) << 4 | (-8 + 8)});
  EXPECT_EQ(row[17], std::byte{0x80 | (7 + 8)});
  EXPECT_EQ(fp16_at(row, 32), f32_to_fp16(0.5f));
  EXPECT_EQ(fp16_at(row, 34), f32_to_fp16(-0.5f));
  std::vector<float> got(64);
  dequantize_row(KvFormat::kINT4G32, row.data(), 64, 1.0f, 0.0f, 1.0f, got.data());
  const std::pair<int, float> want[] = {{0, -4.0f}, {1, 3.5f},   {2, 1.0f},   {3, 1.0f},
                                        {32, 4.0f}, {33, -1.0f}, {34, -3.5f}, {35, 0.0f}};
  for (const auto& [i, v] : want) EXPECT_EQ(got[static_cast<std::size_t>(i)], v) << i;
}

// The documented rules written out (formats.h), against the codec on random rows of head_dim 64
// and 128 (and a partial block): every scale byte and every decoded value bit for bit.
// int5_g32 (q5_0's scale d = m / -16) and its layout, written out: per block of 32, 16 bytes of
// low nibbles of q + 16 (value 2j low, 2j + 1 high), 4 bytes of fifth bits (value j: bit j % 8 of
// byte j / 8), the fp16 scales after all blocks; int5_g32_mse decodes the same bytes and never
// codes a block worse.
TEST(KvFormats, Int5G32LayoutAndRule) {
  std::mt19937 rng(55);
  for (std::int64_t n : {32, 64, 128, 40}) {
    for (float spread : {1e-3f, 0.3f, 40.0f}) {
      const std::vector<float> x = random_row(rng, n, spread);
      const std::int64_t blocks = (n + 31) / 32;
      ASSERT_EQ(kv_row_bytes(KvFormat::kINT5G32, n), static_cast<std::size_t>(blocks * 22)) << n;
      std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT5G32, n));
      quantize_row(KvFormat::kINT5G32, x.data(), n, 3.0f, 0.0f, 1.0f, row.data());  // scale unused
      std::vector<float> got(static_cast<std::size_t>(n));
      dequantize_row(KvFormat::kINT5G32, row.data(), n, 3.0f, 0.0f, 1.0f, got.data());
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::int64_t b0 = 32 * b, b1 = std::min<std::int64_t>(n, b0 + 32);
        const auto [amax, m] = block_extreme(x, b0, b1);
        const std::uint16_t h = f32_to_fp16(m / -16.0f);
        ASSERT_EQ(fp16_at(row, static_cast<std::size_t>(20 * blocks + 2 * b)), h) << n << " " << b;
        const float d = fp16_to_f32(h);
        for (std::int64_t i = b0; i < b1; ++i) {
          const int q =
              d == 0.0f ? 0 : static_cast<int>(std::nearbyint(std::clamp(x[i] / d, -16.0f, 15.0f)));
          const std::int64_t j = i - b0;
          const auto byte = [&](std::int64_t k) {
            return static_cast<unsigned>(row[static_cast<std::size_t>(20 * b + k)]);
          };
          const unsigned nib = (byte(j / 2) >> (4 * (j & 1))) & 15u;
          const unsigned hi = (byte(16 + j / 8) >> (j % 8)) & 1u;
          ASSERT_EQ(static_cast<int>(nib | hi << 4) - 16, q) << n << " " << i;
          ASSERT_EQ(got[static_cast<std::size_t>(i)], static_cast<float>(q) * d) << n << " " << i;
        }
      }
      // The MSE variant: same decode, error per block never above the plain rule's.
      std::vector<std::byte> mse(row.size());
      quantize_row(KvFormat::kINT5G32Mse, x.data(), n, 1.0f, 0.0f, 1.0f, mse.data());
      std::vector<float> a(got.size()), b(got.size());
      dequantize_row(KvFormat::kINT5G32Mse, mse.data(), n, 1.0f, 0.0f, 1.0f, a.data());
      dequantize_row(KvFormat::kINT5G32, mse.data(), n, 1.0f, 0.0f, 1.0f, b.data());
      EXPECT_EQ(a, b) << "one layout";
      for (std::int64_t b0 = 0; b0 < n; b0 += 32) {
        double e_mse = 0.0, e_plain = 0.0;
        for (std::int64_t i = b0; i < std::min<std::int64_t>(n, b0 + 32); ++i) {
          const auto k = static_cast<std::size_t>(i);
          e_mse += std::pow(static_cast<double>(a[k]) - x[k], 2);
          e_plain += std::pow(static_cast<double>(got[k]) - x[k], 2);
        }
        EXPECT_LE(e_mse, e_plain * (1 + 1e-6) + 1e-30) << n << " block " << b0 / 32;
      }
    }
  }
  EXPECT_EQ(parse_kv_format("q5_0"), KvFormat::kINT5G32);
  EXPECT_EQ(parse_kv_format("int5_g32_mse"), KvFormat::kINT5G32Mse);
  EXPECT_EQ(kv_bytes_per_value(KvFormat::kINT5G32), 22.0 / 32.0);
}

TEST(KvFormats, GroupFormatsFollowTheirWrittenRule) {
  std::mt19937 rng(32);
  for (KvFormat f : {KvFormat::kINT8G32, KvFormat::kINT4G32}) {
    const bool is8 = f == KvFormat::kINT8G32;
    for (std::int64_t n : {32, 64, 128, 48}) {
      for (float spread : {1e-3f, 0.3f, 40.0f}) {
        const std::vector<float> x = random_row(rng, n, spread);
        std::vector<std::byte> row(kv_row_bytes(f, n));
        quantize_row(f, x.data(), n, 1.0f, 0.0f, 1.0f, row.data());
        std::vector<float> got(static_cast<std::size_t>(n));
        dequantize_row(f, row.data(), n, 1.0f, 0.0f, 1.0f, got.data());
        const auto offset = static_cast<std::size_t>(is8 ? n : (n + 1) / 2);
        for (std::int64_t b0 = 0; b0 < n; b0 += 32) {
          const std::int64_t b1 = std::min<std::int64_t>(n, b0 + 32);
          const auto [amax, m] = block_extreme(x, b0, b1);
          const std::uint16_t h = f32_to_fp16(is8 ? amax / 127.0f : m / -8.0f);
          ASSERT_EQ(fp16_at(row, offset + 2 * static_cast<std::size_t>(b0 / 32)), h)
              << kv_format_name(f) << " n " << n << " block " << b0 / 32;
          const float d = fp16_to_f32(h);
          for (std::int64_t i = b0; i < b1; ++i) {
            const float q = d == 0.0f ? 0.0f
                                      : std::nearbyint(std::clamp(x[i] / d, is8 ? -127.0f : -8.0f,
                                                                  is8 ? 127.0f : 7.0f));
            ASSERT_TRUE(same_value(got[i], q * d))
                << kv_format_name(f) << " n " << n << " i " << i << " x " << x[i];
          }
        }
      }
    }
  }
}

// int4_g32_mse: int4_g32's bytes with a searched scale. Written out independently: for every
// block the stored scale is the first of the 16 candidates fp16(m * (1 - 0.02 k) / -8) with the
// smallest squared error of its codes (double), so its error is never above int4_g32's; the row
// decodes identically through int4_g32 (one layout).
TEST(KvFormats, Int4G32MseSearchesTheClippingScale) {
  std::mt19937 rng(33);
  int shrunk = 0, blocks = 0;
  double err_mse = 0.0, err_q4 = 0.0;
  for (std::int64_t n : {32, 64, 128, 48}) {
    for (float spread : {1e-3f, 0.3f, 40.0f}) {
      for (int rep = 0; rep < 8; ++rep) {
        const std::vector<float> x = random_row(rng, n, spread);
        std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT4G32Mse, n));
        std::vector<std::byte> q4(kv_row_bytes(KvFormat::kINT4G32, n));
        quantize_row(KvFormat::kINT4G32Mse, x.data(), n, 1.0f, 0.0f, 1.0f, row.data());
        quantize_row(KvFormat::kINT4G32, x.data(), n, 1.0f, 0.0f, 1.0f, q4.data());
        std::vector<float> got(static_cast<std::size_t>(n)), same(got.size()), base(got.size());
        dequantize_row(KvFormat::kINT4G32Mse, row.data(), n, 1.0f, 0.0f, 1.0f, got.data());
        dequantize_row(KvFormat::kINT4G32, row.data(), n, 1.0f, 0.0f, 1.0f, same.data());
        dequantize_row(KvFormat::kINT4G32, q4.data(), n, 1.0f, 0.0f, 1.0f, base.data());
        const auto offset = static_cast<std::size_t>((n + 1) / 2);
        for (std::int64_t b0 = 0; b0 < n; b0 += 32) {
          const std::int64_t b1 = std::min<std::int64_t>(n, b0 + 32);
          const auto [amax, m] = block_extreme(x, b0, b1);
          const auto sse = [&](float d) {
            double e = 0.0;
            for (std::int64_t i = b0; i < b1; ++i) {
              const float q = d == 0.0f ? 0.0f : std::nearbyint(std::clamp(x[i] / d, -8.0f, 7.0f));
              e += std::pow(static_cast<double>(q * d) - x[i], 2);
            }
            return e;
          };
          std::uint16_t want = 0;
          double best = std::numeric_limits<double>::infinity();
          for (int k = 0; k < 16; ++k) {
            const std::uint16_t h = f32_to_fp16(m * (1.0f - 0.02f * static_cast<float>(k)) / -8.0f);
            if (const double e = sse(fp16_to_f32(h)); e < best) {
              best = e;
              want = h;
            }
          }
          const std::uint16_t h = fp16_at(row, offset + 2 * static_cast<std::size_t>(b0 / 32));
          ASSERT_EQ(h, want) << "n " << n << " block " << b0 / 32;
          const double q4_err = sse(fp16_to_f32(f32_to_fp16(m / -8.0f)));
          EXPECT_LE(best, q4_err);
          err_mse += best;
          err_q4 += q4_err;
          shrunk += h != f32_to_fp16(m / -8.0f);
          ++blocks;
          for (std::int64_t i = b0; i < b1; ++i) {
            const float d = fp16_to_f32(h);
            const float q = d == 0.0f ? 0.0f : std::nearbyint(std::clamp(x[i] / d, -8.0f, 7.0f));
            ASSERT_TRUE(same_value(got[i], q * d)) << "n " << n << " i " << i;
            ASSERT_TRUE(same_value(same[i], got[i])) << "n " << n << " i " << i;
          }
        }
      }
    }
  }
  // The search must actually move scales (these rows are uniform-ish: little to gain, but never
  // a loss) ...
  EXPECT_GT(shrunk, blocks / 4) << shrunk << " of " << blocks;
  EXPECT_LE(err_mse, err_q4);
  // ... and on Gaussian rows (what a Hadamard rotation makes of K / V) cut it (measured 0.923).
  std::normal_distribution<float> normal(0.0f, 1.0f);
  double gauss_mse = 0.0, gauss_q4 = 0.0;
  for (int rep = 0; rep < 256; ++rep) {
    std::vector<float> x(32);
    for (float& v : x) v = normal(rng);
    std::vector<std::byte> a(kv_row_bytes(KvFormat::kINT4G32, 32)), b(a.size());
    quantize_row(KvFormat::kINT4G32, x.data(), 32, 1.0f, 0.0f, 1.0f, a.data());
    quantize_row(KvFormat::kINT4G32Mse, x.data(), 32, 1.0f, 0.0f, 1.0f, b.data());
    std::vector<float> ya(32), yb(32);
    dequantize_row(KvFormat::kINT4G32, a.data(), 32, 1.0f, 0.0f, 1.0f, ya.data());
    dequantize_row(KvFormat::kINT4G32Mse, b.data(), 32, 1.0f, 0.0f, 1.0f, yb.data());
    for (int i = 0; i < 32; ++i) {
      gauss_q4 += std::pow(static_cast<double>(ya[i]) - x[i], 2);
      gauss_mse += std::pow(static_cast<double>(yb[i]) - x[i], 2);
    }
  }
  std::printf("int4_g32_mse / int4_g32 squared error: random rows %.3f, Gaussian rows %.3f\n",
              err_mse / err_q4, gauss_mse / gauss_q4);
  EXPECT_LT(gauss_mse, 0.95 * gauss_q4) << gauss_mse << " vs " << gauss_q4;
}

// A block that int4_g32 codes without error keeps int4_g32's scale (ties go to the full range).
TEST(KvFormats, Int4G32MseKeepsAnExactBlock) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i)
    x[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i % 16 - 8);
  std::vector<std::byte> a(kv_row_bytes(KvFormat::kINT4G32, 32)), b(a.size());
  quantize_row(KvFormat::kINT4G32, x.data(), 32, 1.0f, 0.0f, 1.0f, a.data());
  quantize_row(KvFormat::kINT4G32Mse, x.data(), 32, 1.0f, 0.0f, 1.0f, b.data());
  EXPECT_EQ(a, b);
}

// ---- nl4 / nl3: codes indexing a table of levels, one searched fp16 scale per block ---------

// The level of `levels` nearest y (the lower on a tie), by a linear scan.
int nearest_level(std::span<const float> levels, float y) {
  int best = 0;
  for (int c = 1; c < static_cast<int>(levels.size()); ++c)
    if (std::fabs(y - levels[static_cast<std::size_t>(c)]) <
        std::fabs(y - levels[static_cast<std::size_t>(best)]))
      best = c;
  return best;
}

// The stored scale of one block, written out: the first of the 16 candidates
// fp16(m * (1 - 0.02 k) / -127) with the smallest squared error when every value takes its
// nearest level (m: the block's value of largest magnitude).
std::uint16_t level_block_scale(std::span<const float> levels, const std::vector<float>& x,
                                std::int64_t b0, std::int64_t b1, double* sse_out = nullptr) {
  const float m = block_extreme(x, b0, b1).second;
  std::uint16_t want = 0;
  double best = std::numeric_limits<double>::infinity();
  for (int k = 0; k < 16; ++k) {
    const std::uint16_t h = f32_to_fp16(m * (1.0f - 0.02f * static_cast<float>(k)) / -127.0f);
    const float d = fp16_to_f32(h);
    double e = 0.0;
    for (std::int64_t i = b0; i < b1; ++i) {
      const float v =
          d == 0.0f ? 0.0f : levels[static_cast<std::size_t>(nearest_level(levels, x[i] / d))] * d;
      e += std::pow(static_cast<double>(v) - x[i], 2);
    }
    if (e < best) {
      best = e;
      want = h;
    }
  }
  if (sse_out) *sse_out += best;
  return want;
}

struct LevelFormat {
  KvFormat format;
  int bits, group;
  std::span<const float> levels;
};
constexpr LevelFormat kLevelFormats[] = {{KvFormat::kNL4G32, 4, 32, detail::kNl4Levels},
                                         {KvFormat::kNL4G64, 4, 64, detail::kNl4Levels},
                                         {KvFormat::kNL3G32, 3, 32, detail::kNl3Levels},
                                         {KvFormat::kNL3G64, 3, 64, detail::kNl3Levels}};

// Code i of a row, written out: nl4 nibbles in int4 order; nl3 per block of 32 values the low
// two bits of value j at bit 2 (j % 4) of byte j / 4, its third bit at bit j % 8 of byte 8 + j / 8;
// 5 bits as int5_g32's (per block of 32, 16 bytes of low nibbles, then bit j % 8 of byte
// 16 + j / 8).
int level_code_at(const LevelFormat& f, const std::vector<std::byte>& row, std::int64_t i) {
  const auto byte = [&](std::int64_t k) {
    return static_cast<unsigned>(row[static_cast<std::size_t>(k)]);
  };
  if (f.bits == 4) return static_cast<int>(byte(i / 2) >> (4 * (i % 2)) & 15u);
  if (f.bits == 5) {
    const std::int64_t block = i / 32 * 20, j = i % 32;
    return static_cast<int>((byte(block + j / 2) >> (4 * (j % 2)) & 15u) |
                            (byte(block + 16 + j / 8) >> (j % 8) & 1u) << 4);
  }
  const std::int64_t block = i / 32 * 12, j = i % 32;
  return static_cast<int>((byte(block + j / 4) >> (2 * (j % 4)) & 3u) |
                          (byte(block + 8 + j / 8) >> (j % 8) & 1u) << 2);
}
// Where the fp16 block scales start in a row of n values.
std::int64_t level_scales_at(const LevelFormat& f, std::int64_t n) {
  return f.bits == 4 ? n / 2 : (n + 31) / 32 * 12;
}

// nl4_g32 / nl4_g64 / nl3_g32 / nl3_g64 follow their rule, written out independently: per block
// the searched scale, every value the level nearest x / d, decoded as L[code] * d.
TEST(KvFormats, LevelFormatsCodeTheNearestLevelUnderTheSearchedScale) {
  std::mt19937 rng(34);
  for (const LevelFormat& f : kLevelFormats) {
    const auto name = kv_format_name(f.format);
    ASSERT_EQ(kv_row_bytes(f.format, 128),
              static_cast<std::size_t>(128 * f.bits / 8 + 2 * 128 / f.group))
        << name;
    for (std::int64_t n : {64, 128, 192}) {
      for (float spread : {1e-3f, 0.3f, 40.0f}) {
        const std::vector<float> x = random_row(rng, n, spread);
        std::vector<std::byte> row(kv_row_bytes(f.format, n));
        quantize_row(f.format, x.data(), n, 1.0f, 0.0f, 1.0f, row.data());
        std::vector<float> got(static_cast<std::size_t>(n));
        dequantize_row(f.format, row.data(), n, 1.0f, 0.0f, 1.0f, got.data());
        for (std::int64_t b0 = 0; b0 < n; b0 += f.group) {
          const std::uint16_t want = level_block_scale(f.levels, x, b0, b0 + f.group);
          const auto at = static_cast<std::size_t>(level_scales_at(f, n) + 2 * (b0 / f.group));
          ASSERT_EQ(fp16_at(row, at), want) << name << " n " << n << " b " << b0;
          const float d = fp16_to_f32(want);
          for (std::int64_t i = b0; i < b0 + f.group; ++i) {
            const int c = nearest_level(f.levels, x[i] / d);
            ASSERT_EQ(level_code_at(f, row, i), c) << name << " i " << i;
            ASSERT_TRUE(same_value(got[i], f.levels[static_cast<std::size_t>(c)] * d))
                << name << " i " << i;
          }
        }
      }
    }
  }
}

// A tie between two levels takes the lower one; NaN the level nearest 0; a zero block d = 0.
// Block 0 holds every level at least twice (the extreme, -127, once more than the nearest
// candidate needs), so d = 1 wins the search.
TEST(KvFormats, LevelFormatsTiesNanAndZeroBlocks) {
  for (const LevelFormat& f : {kLevelFormats[0], kLevelFormats[2]}) {
    const auto name = kv_format_name(f.format);
    const auto L = f.levels;
    const auto K = static_cast<int>(L.size());
    std::vector<float> y(64, 0.0f), got(64);
    for (int i = 0; i < 29; ++i)
      y[static_cast<std::size_t>(i)] = L[static_cast<std::size_t>(i % K)];
    const std::size_t z = K == 16 ? 8 : 4;  // the level nearest 0
    y[29] = 0.5f * (L[z - 1] + L[z]);       // a midpoint: the lower level
    y[30] = 0.5f * (L[z] + L[z + 1]);
    y[31] = kNaN;
    std::vector<std::byte> row(kv_row_bytes(f.format, 64));
    quantize_row(f.format, y.data(), 64, 1.0f, 0.0f, 1.0f, row.data());
    dequantize_row(f.format, row.data(), 64, 1.0f, 0.0f, 1.0f, got.data());
    const auto scales = static_cast<std::size_t>(level_scales_at(f, 64));
    ASSERT_EQ(fp16_at(row, scales), f32_to_fp16(1.0f)) << name;
    for (int i = 0; i < 29; ++i)
      EXPECT_EQ(got[static_cast<std::size_t>(i)], y[static_cast<std::size_t>(i)]) << name << i;
    EXPECT_EQ(got[29], L[z - 1]) << name;
    EXPECT_EQ(got[30], L[z]) << name;
    EXPECT_EQ(got[31], L[z]) << name;
    EXPECT_EQ(level_code_at(f, row, 31), static_cast<int>(z)) << name;
    EXPECT_EQ(fp16_to_f32(fp16_at(row, scales + 2)), 0.0f) << name;  // the zero block: d = -0
    for (int i = 32; i < 64; ++i) {
      EXPECT_EQ(got[static_cast<std::size_t>(i)], 0.0f) << name << i;
      EXPECT_EQ(level_code_at(f, row, i), static_cast<int>(z)) << name << i;
    }
  }
}

// ---- nl4 / int5 with one searched byte block scale (E4M3 or a log scale) over a global scale ----

constexpr std::array<float, 32> kInt5Levels = [] {
  std::array<float, 32> l{};
  for (int c = 0; c < 32; ++c) l[static_cast<std::size_t>(c)] = static_cast<float>(c - 16);
  return l;
}();

// The two block-scale bytes, written out. E4M3: e4m3_to_f32; the nearest code is E4M3's rounding
// of s clamped to ±448; magnitudes 1 ... 126 (127 is NaN). The log scale: sign bit, magnitude e
// decoding to 2^((e - 127) / 16) (0: zero); the nearest code is 127 + round(16 · log2 |s|)
// clamped to 1 ... 127, 0 only for s = 0.
struct ByteScaleRule {
  bool log;
  int below;  // candidates: the nearest's magnitude + 1 down to - below
  int max_magnitude;
  float top;  // the largest scale: the dynamic global maps headroom · amax onto it
  float decode(std::uint8_t s) const {
    if (!log) return e4m3_to_f32(s);
    const int e = s & 0x7f;
    const float v = e == 0 ? 0.0f : static_cast<float>(std::exp2((e - 127) / 16.0));
    return (s & 0x80) ? -v : v;
  }
  std::uint8_t nearest(float s) const {
    if (!log) return f32_to_e4m3(std::clamp(s, -448.0f, 448.0f));
    if (s == 0.0f) return 0;
    const float t = 16.0f * std::log2(std::fabs(s));
    const int e = std::clamp(127 + static_cast<int>(std::nearbyint(std::max(t, -200.0f))), 1, 127);
    return static_cast<std::uint8_t>((s < 0.0f ? 0x80 : 0) | e);
  }
};
constexpr ByteScaleRule kE4m3Rule{false, 3, 126, 448.0f};
constexpr ByteScaleRule kLogRule{true, 6, 127, 1.0f};

// The stored scale byte of one block, written out: the nearest code s0 to g * m / L[0], then
// s0's magnitude + 1, + 0, -1, ... -below (within 1 ... max_magnitude, keeping the sign), the
// first with the smallest squared error when every value takes its nearest level on
// d = decode(s) / g; 0 when s0 is ±0.
std::uint8_t byte_level_block_scale(const ByteScaleRule& rule, std::span<const float> levels,
                                    const std::vector<float>& x, std::int64_t b0, std::int64_t b1,
                                    float g) {
  const float m = block_extreme(x, b0, b1).second;
  const std::uint8_t s0 = rule.nearest(m / levels[0] * g);
  if ((s0 & 0x7f) == 0) return 0;
  std::uint8_t want = s0;
  double best = std::numeric_limits<double>::infinity();
  for (int k = 1; k >= -rule.below; --k) {
    const int em = (s0 & 0x7f) + k;
    if (em < 1 || em > rule.max_magnitude) continue;
    const auto s = static_cast<std::uint8_t>((s0 & 0x80) | em);
    const float d = rule.decode(s) / g;
    double e = 0.0;
    for (std::int64_t i = b0; i < b1; ++i) {
      const int c = nearest_level(levels, x[i] / d);
      e += std::pow(static_cast<double>(levels[static_cast<std::size_t>(c)] * d) - x[i], 2);
    }
    if (e < best) {
      best = e;
      want = s;
    }
  }
  return want;
}

struct ByteScaledFormat {
  LevelFormat f;
  const ByteScaleRule& rule;
};
constexpr ByteScaledFormat kByteScaledFormats[] = {
    {{KvFormat::kNL4G32E4M3, 4, 32, detail::kNl4Levels}, kE4m3Rule},
    {{KvFormat::kNL4G16E4M3, 4, 16, detail::kNl4Levels}, kE4m3Rule},
    {{KvFormat::kINT5G32E4M3, 5, 32, kInt5Levels}, kE4m3Rule},
    {{KvFormat::kNL4G32Log, 4, 32, detail::kNl4Levels}, kLogRule},
    {{KvFormat::kNL4G16Log, 4, 16, detail::kNl4Levels}, kLogRule},
    {{KvFormat::kINT5G32Log, 5, 32, kInt5Levels}, kLogRule},
    {{KvFormat::kNL3G32Log, 3, 32, detail::kNl3Levels}, kLogRule},
    {{KvFormat::kNL3G16Log, 3, 16, detail::kNl3Levels}, kLogRule}};

TEST(KvFormats, ByteScaledFormatsFollowTheirRule) {
  std::mt19937 rng(36);
  for (const auto& [f, rule] : kByteScaledFormats) {
    const auto name = kv_format_name(f.format);
    const std::int64_t codes = 128 * f.bits / 8;
    ASSERT_EQ(kv_row_bytes(f.format, 128), static_cast<std::size_t>(codes + 128 / f.group)) << name;
    const auto& t = kv_format_traits(f.format);
    EXPECT_TRUE(t.needs_scale && t.global_scale && !t.supports_zero_point) << name;
    EXPECT_FLOAT_EQ(kv_dynamic_param(f.format, 2.0f), rule.top * -f.levels[0] / 8.0f) << name;
    const int zero_code = nearest_level(f.levels, 0.0f);
    for (std::int64_t n : {64, 128, 192}) {
      for (float spread : {1e-3f, 0.3f, 40.0f}) {
        const std::vector<float> x = random_row(rng, n, spread);
        float amax = 0.0f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        // The stream's global from this row, one from a 100x larger first write, and none.
        for (float g :
             {kv_dynamic_param(f.format, amax), kv_dynamic_param(f.format, 100 * amax), 1.0f}) {
          std::vector<std::byte> row(kv_row_bytes(f.format, n));
          quantize_row(f.format, x.data(), n, 1.0f, 0.0f, g, row.data());
          std::vector<float> got(static_cast<std::size_t>(n));
          dequantize_row(f.format, row.data(), n, 1.0f, 0.0f, g, got.data());
          const std::int64_t scales = n * f.bits / 8;
          for (std::int64_t b0 = 0; b0 < n; b0 += f.group) {
            const std::uint8_t want =
                byte_level_block_scale(rule, f.levels, x, b0, b0 + f.group, g);
            ASSERT_EQ(
                static_cast<std::uint8_t>(row[static_cast<std::size_t>(scales + b0 / f.group)]),
                want)
                << name << " n " << n << " b " << b0 << " g " << g;
            const float d = rule.decode(want) / g;
            for (std::int64_t i = b0; i < b0 + f.group; ++i) {
              const int c = d == 0.0f ? zero_code : nearest_level(f.levels, x[i] / d);
              ASSERT_EQ(level_code_at(f, row, i), c) << name << " i " << i;
              ASSERT_TRUE(same_value(got[i], f.levels[static_cast<std::size_t>(c)] * d))
                  << name << " i " << i;
            }
          }
        }
      }
    }
  }
}

// A zero block stores scale 0 and code 8 (decodes to 0); NaN takes code 8 (decodes to d); +inf
// saturates the scale at the byte's largest negative (E4M3 -448: 0xfe; the log scale -1: 0xff)
// and decodes finite; a block far below the global's range still decodes close to its values
// (E4M3's subnormals; the log scale's smallest step).
TEST(KvFormats, ByteScaledNl4FormatsZeroNanInfBlocks) {
  for (const auto& [f, rule] : kByteScaledFormats) {
    if (f.bits != 4) continue;
    const auto name = kv_format_name(f.format);
    const std::int64_t group = f.group;
    std::vector<float> x(64, 0.0f), got(64);
    for (std::int64_t i = group; i < 64; ++i) x[static_cast<std::size_t>(i)] = 0.01f * (i % 7 - 3);
    x[static_cast<std::size_t>(group) + 1] = kNaN;
    x[63] = kInf;
    std::vector<std::byte> row(kv_row_bytes(f.format, 64));
    const float g = kv_dynamic_param(f.format, 1.0f);
    quantize_row(f.format, x.data(), 64, 1.0f, 0.0f, g, row.data());
    dequantize_row(f.format, row.data(), 64, 1.0f, 0.0f, g, got.data());
    EXPECT_EQ(row[32], std::byte{0}) << name;  // block 0: zeros
    for (std::int64_t i = 0; i < group; ++i) {
      EXPECT_EQ(got[static_cast<std::size_t>(i)], 0.0f) << name << i;
      EXPECT_EQ(row[static_cast<std::size_t>(i / 2)], std::byte{0x88}) << name << i;
    }
    const float d = rule.decode(static_cast<std::uint8_t>(row[33])) / g;
    EXPECT_EQ(got[static_cast<std::size_t>(group) + 1], d) << name;  // NaN: level 1
    if (2 * group < 64) {  // block 1 holds values of at most 0.03 (and the NaN), not the inf
      for (std::int64_t i = group + 2; i < 2 * group; ++i)
        EXPECT_NEAR(got[static_cast<std::size_t>(i)], x[static_cast<std::size_t>(i)], 0.004f)
            << name << i;
    }
    EXPECT_EQ(static_cast<std::uint8_t>(row[32 + 64 / group - 1]), rule.log ? 0xff : 0xfe) << name;
    for (float v : got) EXPECT_TRUE(std::isfinite(v)) << name;
  }
}

// The log-scale table is 2^((e - 127) / 16), rounded to fp32, with the sign bit.
TEST(KvFormats, LogScaleTableIsSixteenthsOfAnOctave) {
  EXPECT_EQ(detail::kLogScaleTable[0], 0.0f);
  EXPECT_EQ(detail::kLogScaleTable[127], 1.0f);
  EXPECT_EQ(detail::kLogScaleTable[127 - 16], 0.5f);
  for (int c = 0; c < 256; ++c) {
    const float want = kLogRule.decode(static_cast<std::uint8_t>(c));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(detail::kLogScaleTable[c]),
              std::bit_cast<std::uint32_t>(want))
        << c;
  }
}

// On Gaussian blocks (rotated K / V) the levels beat uniform codes under the same search: nl4
// against int4_g32_mse (simulated 0.85), nl3 against the 8 uniform levels -127 ... 95.25 (int3
// codes -4 ... 3 times 127 / 4) through the written-out rule (simulated 0.92).
TEST(KvFormats, LevelFormatsBeatUniformCodesOnGaussianBlocks) {
  std::mt19937 rng(35);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  constexpr std::array<float, 8> kUniform3 = {-127.0f, -95.25f, -63.5f, -31.75f,
                                              0.0f,    31.75f,  63.5f,  95.25f};
  double nl4 = 0.0, int4 = 0.0, nl3 = 0.0, uniform3 = 0.0, e4m3_32 = 0.0, e4m3_16 = 0.0,
         log_32 = 0.0, log_16 = 0.0, nl3_log_16 = 0.0;
  for (int rep = 0; rep < 256; ++rep) {
    std::vector<float> g(32);
    for (float& v : g) v = normal(rng);
    for (const auto& [f, err] :
         {std::pair{KvFormat::kNL4G32, &nl4}, std::pair{KvFormat::kINT4G32Mse, &int4},
          std::pair{KvFormat::kNL3G32, &nl3}, std::pair{KvFormat::kNL4G32E4M3, &e4m3_32},
          std::pair{KvFormat::kNL4G16E4M3, &e4m3_16}, std::pair{KvFormat::kNL4G32Log, &log_32},
          std::pair{KvFormat::kNL4G16Log, &log_16}, std::pair{KvFormat::kNL3G16Log, &nl3_log_16}}) {
      std::vector<std::byte> r(kv_row_bytes(f, 32));
      std::vector<float> back(32);
      // Byte scales: the global of a first write with amax 4 (a Gaussian row's).
      const float global = kv_format_traits(f).global_scale ? kv_dynamic_param(f, 4.0f) : 1.0f;
      quantize_row(f, g.data(), 32, 1.0f, 0.0f, global, r.data());
      dequantize_row(f, r.data(), 32, 1.0f, 0.0f, global, back.data());
      for (int i = 0; i < 32; ++i) *err += std::pow(static_cast<double>(back[i]) - g[i], 2);
    }
    level_block_scale(kUniform3, g, 0, 32, &uniform3);
  }
  std::printf(
      "Gaussian blocks, squared error: nl4_g32 / int4_g32_mse %.3f, nl3_g32 / int3 %.3f, "
      "nl4_g32_e4m3 / nl4_g32 %.3f, nl4_g16_e4m3 / nl4_g32 %.3f, nl4_g32_log / nl4_g32 %.3f, "
      "nl4_g16_log / nl4_g32 %.3f, nl3_g16_log / nl3_g32 %.3f\n",
      nl4 / int4, nl3 / uniform3, e4m3_32 / nl4, e4m3_16 / nl4, log_32 / nl4, log_16 / nl4,
      nl3_log_16 / nl3);
  EXPECT_LT(nl4, 0.92 * int4) << nl4 << " vs " << int4;
  EXPECT_LT(nl3, 0.95 * uniform3) << nl3 << " vs " << uniform3;
  // One-byte scales cost nl4_g32 little (simulated 1.03) and buy groups of 16 (simulated 0.84).
  EXPECT_LT(e4m3_32, 1.08 * nl4) << e4m3_32 << " vs " << nl4;
  EXPECT_LT(e4m3_16, 0.90 * nl4) << e4m3_16 << " vs " << nl4;
  // The log scale's finer steps take that cost back (simulated 0.99 and 0.79: 7 % below E4M3's).
  EXPECT_LT(log_32, nl4) << log_32 << " vs " << nl4;
  EXPECT_LT(log_16, 0.95 * e4m3_16) << log_16 << " vs " << e4m3_16;
  // At 3.5 bits a log byte per 16 beats an fp16 scale per 32 (simulated 0.81).
  EXPECT_LT(nl3_log_16, 0.85 * nl3) << nl3_log_16 << " vs " << nl3;
}

// int4_g32a (q4_1): d = (max - min) / 15 and m = min in fp16, unsigned codes, decoded
// fma(q, d, m); hand-made values, then the written rule on random rows.
TEST(KvFormats, Int4G32aLayoutAndRule) {
  std::vector<float> x(64, 1.0f);
  x[0] = -2.0f;   // min: m = -2
  x[1] = 5.5f;    // max: d = 7.5 / 15 = 0.5, code 15
  x[2] = -1.25f;  // 1.5 -> 2 (ties to even)
  x[3] = kNaN;    // ignored by min / max, code 0: decodes to m
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT4G32A, 64));
  quantize_row(KvFormat::kINT4G32A, x.data(), 64, 1.0f, 0.0f, 1.0f, row.data());
  EXPECT_EQ(row[0], std::byte{15 << 4 | 0});
  EXPECT_EQ(row[1], std::byte{0 << 4 | 2});
  EXPECT_EQ(row[2], std::byte{6 << 4 | 6});  // 1.0: (1 + 2) / 0.5 = 6
  EXPECT_EQ(fp16_at(row, 32), f32_to_fp16(0.5f));
  EXPECT_EQ(fp16_at(row, 34), f32_to_fp16(-2.0f));
  EXPECT_EQ(fp16_at(row, 36), 0u);  // block 1 is constant 1: d = 0, m = 1, codes 0
  EXPECT_EQ(fp16_at(row, 38), f32_to_fp16(1.0f));
  std::vector<float> got(64);
  dequantize_row(KvFormat::kINT4G32A, row.data(), 64, 1.0f, 0.0f, 1.0f, got.data());
  EXPECT_EQ(got[0], -2.0f);
  EXPECT_EQ(got[1], 5.5f);
  EXPECT_EQ(got[2], -1.0f);
  EXPECT_EQ(got[3], -2.0f);
  EXPECT_EQ(got[40], 1.0f);

  std::mt19937 rng(33);
  for (std::int64_t n : {32, 64, 128, 48}) {
    for (float spread : {1e-3f, 0.3f, 40.0f}) {
      const std::vector<float> r = random_row(rng, n, spread);
      row.assign(kv_row_bytes(KvFormat::kINT4G32A, n), std::byte{0});
      quantize_row(KvFormat::kINT4G32A, r.data(), n, 1.0f, 0.0f, 1.0f, row.data());
      got.resize(static_cast<std::size_t>(n));
      dequantize_row(KvFormat::kINT4G32A, row.data(), n, 1.0f, 0.0f, 1.0f, got.data());
      const auto offset = static_cast<std::size_t>((n + 1) / 2);
      for (std::int64_t b0 = 0; b0 < n; b0 += 32) {
        const std::int64_t b1 = std::min<std::int64_t>(n, b0 + 32);
        const float lo = *std::min_element(r.begin() + b0, r.begin() + b1);
        const float hi = *std::max_element(r.begin() + b0, r.begin() + b1);
        const std::size_t at = offset + 4 * static_cast<std::size_t>(b0 / 32);
        ASSERT_EQ(fp16_at(row, at), f32_to_fp16((hi - lo) / 15.0f)) << n;
        ASSERT_EQ(fp16_at(row, at + 2), f32_to_fp16(lo)) << n;
        const float d = fp16_to_f32(f32_to_fp16((hi - lo) / 15.0f));
        const float m = fp16_to_f32(f32_to_fp16(lo));
        for (std::int64_t i = b0; i < b1; ++i) {
          const float q = std::nearbyint(std::clamp((r[i] - m) / d, 0.0f, 15.0f));
          ASSERT_TRUE(same_value(got[i], std::fma(q, d, m))) << n << " " << i << " " << r[i];
        }
      }
    }
  }
}

// NaN is left out of the block's amax and stores q = 0; ±inf make the block scale the largest
// fp16 and saturate; a block too small for an fp16 scale stores zeros.
TEST(KvFormats, GroupFormatsNanInfAndTinyBlocks) {
  constexpr float kMaxHalf = 65504.0f;
  std::vector<float> x(96, 0.25f);
  x[0] = kNaN;  // block 0: NaN, amax 2 at x[1]
  x[1] = 2.0f;
  x[32] = kInf;  // block 1: infinities
  x[33] = -kInf;
  for (int i = 64; i < 96; ++i) x[static_cast<std::size_t>(i)] = 1e-9f;  // block 2: tiny
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kINT4G32, 96));
  std::vector<float> got(96);
  // int8_g32
  row.resize(kv_row_bytes(KvFormat::kINT8G32, 96));
  quantize_row(KvFormat::kINT8G32, x.data(), 96, 1.0f, 0.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kINT8G32, row.data(), 96, 1.0f, 0.0f, 1.0f, got.data());
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(fp16_at(row, 96), f32_to_fp16(2.0f / 127.0f));
  EXPECT_NEAR(got[1], 2.0f, 2.0f / 127.0f);
  EXPECT_EQ(fp16_at(row, 98), f32_to_fp16(kMaxHalf));
  EXPECT_EQ(got[32], 127.0f * kMaxHalf);
  EXPECT_EQ(got[33], -127.0f * kMaxHalf);
  EXPECT_EQ(got[34], 0.0f);          // 0.25 / 65504 rounds to code 0
  EXPECT_EQ(fp16_at(row, 100), 0u);  // 1e-9 / 127 underflows fp16: scale 0, codes 0
  for (int i = 64; i < 96; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], 0.0f) << i;
  // int4_g32: +inf is the first extreme, so d = -65504 and +inf decodes to -8 · d.
  row.assign(kv_row_bytes(KvFormat::kINT4G32, 96), std::byte{0});
  quantize_row(KvFormat::kINT4G32, x.data(), 96, 1.0f, 0.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kINT4G32, row.data(), 96, 1.0f, 0.0f, 1.0f, got.data());
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 2.0f);  // the extreme itself is exact (d = -0.25)
  EXPECT_EQ(fp16_at(row, 50), f32_to_fp16(-kMaxHalf));
  EXPECT_EQ(got[32], 8.0f * kMaxHalf);
  EXPECT_EQ(got[33], -7.0f * kMaxHalf);
  EXPECT_EQ(fp16_at(row, 52), 0x8000u);  // -1e-9 / 8 underflows fp16 to -0: codes 0
  for (int i = 64; i < 96; ++i) EXPECT_EQ(got[static_cast<std::size_t>(i)], 0.0f) << i;
}

// ---- quantize_row + dequantize_row == fake_quantize -------------------------------------

QuantizationArgs make_args(KvFormat f, bool symmetric) {
  const auto a = kv_quantization_args(f, symmetric, QuantizationStrategy::kTensor);
  EXPECT_TRUE(a.has_value()) << kv_format_name(f);
  return a.value_or(QuantizationArgs{});
}

struct Case {
  KvFormat format;
  bool symmetric;
  float scale_shrink;  // < 1: a static scale smaller than the data needs, so clamping happens
};

// Compares the row codecs with the reference on x [1, n] (n a multiple of 16 for nvfp4, as the
// reference requires).
void check_against_fake_quantize(const Case& c, const std::vector<float>& x) {
  const auto n = static_cast<std::int64_t>(x.size());
  const Tensor xt = Tensor::from_f32({1, n}, x);
  const bool has_args = kv_format_traits(c.format).args.exists;
  ASSERT_TRUE(has_args || test::float_grid(c.format) != nullptr)
      << kv_format_name(c.format) << ": no reference (tests/support/float_grid_reference.h)";
  const QuantizationArgs args = has_args ? make_args(c.format, c.symmetric) : QuantizationArgs{};
  float lo = 0.0f, hi = 0.0f;
  for (float v : x) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const Tensor mn = Tensor::from_f32({1}, std::vector<float>{lo * c.scale_shrink});
  const Tensor mx = Tensor::from_f32({1}, std::vector<float>{hi * c.scale_shrink});
  std::vector<float> got(x.size());
  std::vector<std::byte> row(kv_row_bytes(c.format, n));
  Tensor want;
  if (const test::FloatGrid* g = test::float_grid(c.format)) {  // no QuantizationArgs
    const float scale = test::symmetric_scale_on_grid(*g, std::max(-lo, hi) * c.scale_shrink);
    std::vector<float> w(x.size());
    for (std::int64_t i = 0; i < n; ++i) w[i] = test::fake_quantize_on_grid(*g, x[i], scale, 0.0f);
    want = Tensor::from_f32({1, n}, w);
    quantize_row(c.format, x.data(), n, scale, 0.0f, 1.0f, row.data());
    dequantize_row(c.format, row.data(), n, scale, 0.0f, 1.0f, got.data());
  } else if (kv_format_traits(c.format).global_scale) {  // nvfp4: tensor_group under a global scale
    const Tensor gs = generate_gparam(mn, mx);
    const QParams qp = compute_dynamic_scales_and_zp(xt, args, &gs);
    want = fake_quantize(xt, qp.scale, &qp.zero_point, args, &gs);
    quantize_row(c.format, x.data(), n, 0.0f, 0.0f, gs.f32()[0], row.data());
    dequantize_row(c.format, row.data(), n, 0.0f, 0.0f, gs.f32()[0], got.data());
  } else {
    const QParams qp = calculate_qparams(mn, mx, args);
    want = fake_quantize(xt, qp.scale, &qp.zero_point, args);
    const float scale = qp.scale.to_f32().f32()[0];
    const float zp = qp.zero_point.to_f32().f32()[0];
    quantize_row(c.format, x.data(), n, scale, zp, 1.0f, row.data());
    dequantize_row(c.format, row.data(), n, scale, zp, 1.0f, got.data());
  }
  ASSERT_EQ(want.dtype(), DType::kF32);
  const float* w = want.f32();
  int bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = same_value(got[i], w[i]);
    if (!r && ++bad <= 5)
      ADD_FAILURE() << kv_format_name(c.format) << (c.symmetric ? " sym" : " asym") << " n=" << n
                    << " i=" << i << " x=" << x[i] << ": " << r.message();
  }
}

// Every quantized row of the table: symmetric and (with zero points) asymmetric, with static
// scales that fit the data or make it clamp.
std::vector<Case> fake_quantize_cases() {
  std::vector<Case> cases;
  for (const auto& t : kv_format_table()) {
    // Byte block scales over levels have no compressed-tensors form:
    // ByteScaledFormatsFollowTheirRule.
    if (!t.needs_scale || (t.global_scale && !t.args.exists)) continue;
    for (float shrink : {1.0f, 0.3f, 0.01f}) {
      cases.push_back({t.format, true, shrink});
      if (t.supports_zero_point) cases.push_back({t.format, false, shrink});
    }
  }
  return cases;
}

TEST(KvFormats, RoundTripEqualsFakeQuantize) {
  std::mt19937 rng(7);
  for (const Case& c : fake_quantize_cases()) {
    for (std::int64_t n : {16, 64, 128, 1024}) {
      for (float spread : {1e-3f, 1.0f, 300.0f}) {
        check_against_fake_quantize(c, random_row(rng, n, spread));
      }
    }
  }
}

// Values sitting exactly on rounding ties of each grid (x = scale * midpoint) and saturating
// values, where half-to-even and the clamp order matter.
TEST(KvFormats, RoundTripEqualsFakeQuantizeOnTiesAndEdges) {
  std::vector<float> ties;
  for (int k = -9; k <= 9; ++k) ties.push_back(static_cast<float>(k) + 0.5f);
  for (float v : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f}) {
    ties.push_back(v);
    ties.push_back(-v);
  }
  for (float v : {464.0f, 480.0f, 1e6f, kInf, -kInf, 240.0f, 0.0f, -0.0f}) ties.push_back(v);
  while (ties.size() % 16 != 0) ties.push_back(0.001f * static_cast<float>(ties.size()));
  // With amax 1e6/inf the scales are huge; also run on the finite subset so ties matter.
  std::vector<float> finite;
  for (float v : ties)
    if (std::fabs(v) < 100.0f) finite.push_back(v);
  while (finite.size() % 16 != 0) finite.push_back(0.0f);
  for (const auto& t : kv_format_table()) {
    if (!t.needs_scale || (t.global_scale && !t.args.exists)) continue;  // as above
    const KvFormat f = t.format;
    check_against_fake_quantize({f, true, 1.0f}, ties);
    check_against_fake_quantize({f, true, 1.0f}, finite);
    check_against_fake_quantize({f, true, 0.25f}, finite);
    if (t.supports_zero_point) check_against_fake_quantize({f, false, 1.0f}, finite);
  }
}

// The written-out reference used for grids without QuantizationArgs is fake_quantize (and its
// scale calculate_qparams) bit for bit where both exist: on the E4M3 grid.
TEST(KvFormats, FloatGridReferenceIsFakeQuantizeOnE4M3) {
  const QuantizationArgs args = make_args(KvFormat::kFP8E4M3, true);
  const test::FloatGrid& g = test::kE4M3Grid;
  std::mt19937 rng(29);
  for (float spread : {1e-3f, 1.0f, 300.0f}) {
    std::vector<float> x = random_row(rng, 256, spread);
    x[7] = kNaN;
    x[8] = kInf;
    x[9] = -1e6f;
    float amax = 0.0f;
    for (float v : x)
      if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
    for (float shrink : {1.0f, 0.1f}) {
      const float a = amax * shrink;
      const QParams qp = calculate_qparams(Tensor::from_f32({1}, std::vector<float>{-a}),
                                           Tensor::from_f32({1}, std::vector<float>{a}), args);
      const float scale = qp.scale.to_f32().f32()[0];
      ASSERT_EQ(scale, test::symmetric_scale_on_grid(g, a));
      const Tensor want =
          fake_quantize(Tensor::from_f32({1, 256}, x), qp.scale, &qp.zero_point, args);
      for (int i = 0; i < 256; ++i) {
        const float got = test::fake_quantize_on_grid(g, x[i], scale, 0.0f);
        EXPECT_TRUE(std::isnan(got) ? std::isnan(want.f32()[i])
                                    : std::bit_cast<std::uint32_t>(got) ==
                                          std::bit_cast<std::uint32_t>(want.f32()[i]))
            << i << " x=" << x[i] << ": " << got << " vs " << want.f32()[i];
      }
    }
  }
}

// E5M2 at scale 1: every midpoint between neighbouring codes (ties to the even code), the
// neighbours of each midpoint, and the saturating edges (57344 is the largest finite value;
// torch's cast would give inf from 61440 on, the clamp before it does not).
TEST(KvFormats, Fp8E5M2MidpointsAndEdgesAtScaleOne) {
  const test::FloatGrid& g = *test::float_grid(KvFormat::kFP8E5M2);
  std::vector<float> x;
  for (int c = 0; c < 0x7b; ++c) {
    const float mid = (e5m2_to_f32(static_cast<std::uint8_t>(c)) +
                       e5m2_to_f32(static_cast<std::uint8_t>(c + 1))) /
                      2.0f;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  for (float v : {57344.0f, 60000.0f, 61440.0f, 1e6f, 0.0f, -0.0f, kInf}) {
    x.push_back(v);
    x.push_back(-v);
  }
  x.push_back(kNaN);  // after +inf, -inf
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::byte> row(kv_row_bytes(KvFormat::kFP8E5M2, n));
  std::vector<float> got(x.size());
  quantize_row(KvFormat::kFP8E5M2, x.data(), n, 1.0f, 0.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kFP8E5M2, row.data(), n, 1.0f, 0.0f, 1.0f, got.data());
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_TRUE(same_value(got[i], test::fake_quantize_on_grid(g, x[i], 1.0f, 0.0f)))
        << "x=" << x[i];
  EXPECT_EQ(got[got.size() - 3], 57344.0f);   // +inf saturates
  EXPECT_EQ(got[got.size() - 2], -57344.0f);  // -inf
  EXPECT_TRUE(std::isnan(got.back()));
}

// The nvfp4 block scale is global_scale * (amax / 6), in that order (calculate_qparams divides
// first). Random data almost never separates it from (global_scale * amax) / 6, so aim at E4M3
// rounding midpoints: pick global scales putting the product within a few ulp of a midpoint,
// keep those where the two orders give different codes, and compare them with the reference.
TEST(KvFormats, Nvfp4BlockScaleOperationOrder) {
  const QuantizationArgs args = make_args(KvFormat::kNVFP4, true);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> unit(0.5f, 2.0f);
  int found = 0;
  for (int trial = 0; trial < 20000 && found < 8; ++trial) {
    std::vector<float> x(16);
    for (int i = 0; i < 16; ++i) x[i] = unit(rng) * static_cast<float>(i - 5);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float midpoint = 17.0f + 2.0f * static_cast<float>(trial % 7);  // 17, 19, ... 29
    float gs = midpoint / (amax / 6.0f);
    for (int k = 0; k < trial % 5; ++k) gs = std::nextafter(gs, 0.0f);
    if (f32_to_e4m3(gs * (amax / 6.0f)) == f32_to_e4m3((gs * amax) / 6.0f)) continue;
    ++found;
    const Tensor xt = Tensor::from_f32({1, 16}, x);
    const Tensor gst = Tensor::from_f32({1}, std::vector<float>{gs});
    const QParams qp = compute_dynamic_scales_and_zp(xt, args, &gst);
    const Tensor want = fake_quantize(xt, qp.scale, &qp.zero_point, args, &gst);
    std::vector<std::byte> row(kv_row_bytes(KvFormat::kNVFP4, 16));
    std::vector<float> got(16);
    quantize_row(KvFormat::kNVFP4, x.data(), 16, 0.0f, 0.0f, gs, row.data());
    dequantize_row(KvFormat::kNVFP4, row.data(), 16, 0.0f, 0.0f, gs, got.data());
    for (int i = 0; i < 16; ++i) EXPECT_TRUE(same_value(got[i], want.f32()[i])) << i;
  }
  EXPECT_GT(found, 0) << "no global scale separating the two orders was found";
}

// Static scale 1: x itself must land on the grid, ties to even.
TEST(KvFormats, Int8StaticScaleTiesToEven) {
  const std::vector<float> x = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 126.5f, 127.5f, -128.5f, 1e9f};
  const std::vector<float> want = {0, 2, 2, 0, -2, 126, 127, -128, 127};
  std::vector<std::byte> row(x.size());
  std::vector<float> got(x.size());
  quantize_row(KvFormat::kINT8, x.data(), 9, 1.0f, 0.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kINT8, row.data(), 9, 1.0f, 0.0f, 1.0f, got.data());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], want[i]) << x[i];
}

TEST(KvFormats, PlainFormatsStoreXOverScale) {
  const std::vector<float> x = {1.0f, -3.140625f, 1e-3f, 65504.0f, 1e5f, -0.0f, kInf};
  const auto n = static_cast<std::int64_t>(x.size());
  for (KvFormat f : {KvFormat::kF32, KvFormat::kBF16, KvFormat::kF16}) {
    std::vector<std::byte> row(kv_row_bytes(f, n));
    std::vector<float> got(x.size());
    quantize_row(f, x.data(), n, 2.0f, 0.0f, 1.0f, row.data());
    dequantize_row(f, row.data(), n, 2.0f, 0.0f, 1.0f, got.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float stored = f == KvFormat::kF32    ? x[i] / 2.0f
                           : f == KvFormat::kBF16 ? round_to_bf16(x[i] / 2.0f)
                                                  : round_to_fp16(x[i] / 2.0f);
      EXPECT_TRUE(std::bit_cast<std::uint32_t>(got[i]) ==
                  std::bit_cast<std::uint32_t>(stored * 2.0f))
          << kv_format_name(f) << " " << x[i];
    }
  }
}

// ---- NaN / saturation policy -------------------------------------------------------------

TEST(KvFormats, NanAndInfPolicy) {
  std::vector<float> x(32, 0.25f);
  x[0] = kNaN;
  x[1] = kInf;
  x[2] = -kInf;
  std::vector<float> got(32);
  std::vector<std::byte> row(64);
  // fp8 / fp8_e5m2: NaN stays NaN, inf saturates to +-448 / +-57344 (clamp before the cast: never
  // E5M2's inf code).
  for (const auto& [f, saturated] :
       {std::pair{KvFormat::kFP8E4M3, 224.0f}, std::pair{KvFormat::kFP8E5M2, 28672.0f}}) {
    quantize_row(f, x.data(), 32, 0.5f, 0.0f, 1.0f, row.data());
    dequantize_row(f, row.data(), 32, 0.5f, 0.0f, 1.0f, got.data());
    EXPECT_TRUE(std::isnan(got[0])) << kv_format_name(f);
    EXPECT_EQ(got[1], saturated) << kv_format_name(f);
    EXPECT_EQ(got[2], -saturated) << kv_format_name(f);
    EXPECT_EQ(got[3], 0.25f) << kv_format_name(f);
  }
  // int8 / int4: NaN stores q = 0 (torch's .to(int8) on x86), decoding to -zp * scale.
  quantize_row(KvFormat::kINT8, x.data(), 32, 0.5f, 3.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kINT8, row.data(), 32, 0.5f, 3.0f, 1.0f, got.data());
  EXPECT_EQ(got[0], -1.5f);
  EXPECT_EQ(got[1], 62.0f);   // (127 - 3) * 0.5
  EXPECT_EQ(got[2], -65.5f);  // (-128 - 3) * 0.5
  quantize_row(KvFormat::kINT4, x.data(), 32, 0.5f, 0.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kINT4, row.data(), 32, 0.5f, 0.0f, 1.0f, got.data());
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 3.5f);
  EXPECT_EQ(got[2], -4.0f);
  // nvfp4: a NaN poisons its block's scale (the whole block decodes to NaN, as the reference's
  // NaN amax does); other blocks are untouched.
  std::vector<float> y(32, 6.0f);  // amax 6, global scale 448: block scale 448, exact
  y[5] = kNaN;
  quantize_row(KvFormat::kNVFP4, y.data(), 32, 0.0f, 0.0f, 448.0f, row.data());
  dequantize_row(KvFormat::kNVFP4, row.data(), 32, 0.0f, 0.0f, 448.0f, got.data());
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(got[i])) << i;
  for (int i = 16; i < 32; ++i) EXPECT_EQ(got[i], 6.0f) << i;
  // An all-zero nvfp4 block gets the reference's eps scale 0.125 and decodes to zeros.
  std::vector<float> z(16, 0.0f);
  quantize_row(KvFormat::kNVFP4, z.data(), 16, 0.0f, 0.0f, 448.0f, row.data());
  EXPECT_EQ(row[8], std::byte{f32_to_e4m3(0.125f)});
}

// ---- layout helpers -----------------------------------------------------------------------

TEST(KvFormats, E4M3TableEqualsCodec) {
  for (int c = 0; c < 256; ++c) {
    const float want = e4m3_to_f32(static_cast<std::uint8_t>(c));
    const float got = detail::kE4M3Table[c];
    EXPECT_TRUE((std::isnan(want) && std::isnan(got)) ||
                std::bit_cast<std::uint32_t>(want) == std::bit_cast<std::uint32_t>(got))
        << c;
  }
}

}  // namespace
}  // namespace kvq::quant
