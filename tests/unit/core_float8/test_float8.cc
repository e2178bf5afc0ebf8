// Exhaustive properties of the FP8 / FP4 codecs (no goldens needed): every code round-trips,
// the NaN, saturation and signed-zero policies documented in kvq/core/float8.h.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kvq/core/float8.h"
#include "kvq/quant/fake_quantize.h"

namespace kvq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Float8, E4M3EveryCodeRoundTrips) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float v = e4m3_to_f32(code);
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
      ++nans;
      EXPECT_EQ(f32_to_e4m3(v), code) << "NaN keeps its sign bit";
      continue;
    }
    EXPECT_TRUE(std::isfinite(v)) << c;
    EXPECT_EQ(f32_to_e4m3(v), code) << "code " << c << " value " << v;
  }
  EXPECT_EQ(nans, 2);  // e4m3fn: only S.1111.111 is NaN, no infinities
}

TEST(Float8, E5M2EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float v = e5m2_to_f32(code);
    const int exponent = (c >> 2) & 0x1f, mantissa = c & 3;
    if (exponent == 0x1f && mantissa != 0) {
      EXPECT_TRUE(std::isnan(v)) << c;
      // torch produces one canonical NaN code per sign.
      EXPECT_EQ(f32_to_e5m2(v), (c & 0x80) | 0x7f) << c;
      continue;
    }
    EXPECT_EQ(f32_to_e5m2(v), code) << "code " << c << " value " << v;
  }
}

TEST(Float8, E4M3SaturatesLikeTorch214) {
  // torch 2.14's float8_e4m3fn cast saturates (checked by the codec goldens): everything past
  // 448, infinities included, becomes ±448; only NaN becomes NaN.
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(465.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(kInf), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-kInf), 0xfe);
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7f);
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0xff);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  // Smallest subnormal 2^-9; half of it ties to even (zero), just above rounds up.
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
}

TEST(Float8, E5M2OverflowsToInfinity) {
  EXPECT_EQ(f32_to_e5m2(57344.0f), 0x7b);
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7c);  // tie between 57344 (odd mantissa) and 2^16: inf
  EXPECT_EQ(f32_to_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7b);
  EXPECT_EQ(f32_to_e5m2(-kInf), 0xfc);
}

TEST(Float8, E2M1EveryCodeRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_f32(static_cast<std::uint8_t>(c));
    if (c == 8) {  // -0: compressed-tensors' cast gives +0 for a zero input
      EXPECT_EQ(std::bit_cast<std::uint32_t>(v), 0x80000000u);
      EXPECT_EQ(f32_to_e2m1(v), 0);
      continue;
    }
    EXPECT_EQ(f32_to_e2m1(v), c) << v;
    EXPECT_EQ(quant::round_to_fp4(v), v);
  }
}

TEST(Float8, E2M1Policies) {
  EXPECT_EQ(f32_to_e2m1(7.0f), 0x7);  // saturates at ±6 like the clamp before cast_to_fp4
  EXPECT_EQ(f32_to_e2m1(-kInf), 0xf);
  EXPECT_EQ(f32_to_e2m1(-0.1f), 0x8);     // sign(x) * 0 = -0, packed with its sign bit
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0x0);     // sign(-0) = 0: +0
  EXPECT_EQ(f32_to_e2m1(kNaN) & 0x7, 0);  // no NaN code: pack_fp4_to_uint8 stores a zero
}

}  // namespace
}  // namespace kvq
