// FP8 E4M3 / E5M2 and FP4 E2M1 codecs against torch 2.14 / compressed-tensors 0.19.0
// (tests/data/codec/codec_goldens.json, written by tools/reference/make_codec_goldens.py).
// Every comparison is on bit patterns: the sign of zero and the NaN codes must match too.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/core/float8.h"
#include "kvq/quant/fake_quantize.h"
#include "support/codec_goldens.h"

namespace kvq {
namespace {

const nlohmann::json& goldens() { return test::codec_goldens(); }

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

TEST(CodecGoldens, RecordsReferenceVersions) {
  EXPECT_EQ(goldens().at("versions").at("torch").get<std::string>().substr(0, 4), "2.14");
  EXPECT_EQ(goldens().at("versions").at("compressed_tensors").get<std::string>(), "0.19.0");
}

TEST(CodecGoldens, E4M3DecodeAll256Codes) {
  const auto& want = goldens().at("e4m3_decode");
  ASSERT_EQ(want.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float got = e4m3_to_f32(static_cast<std::uint8_t>(c));
    const float ref = from_bits(want[c].get<std::uint32_t>());
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(ref))
          << "code " << c << " got " << got << " want " << ref;
    }
  }
}

TEST(CodecGoldens, E5M2DecodeAll256Codes) {
  const auto& want = goldens().at("e5m2_decode");
  ASSERT_EQ(want.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float got = e5m2_to_f32(static_cast<std::uint8_t>(c));
    const float ref = from_bits(want[c].get<std::uint32_t>());
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(ref))
          << "code " << c << " got " << got << " want " << ref;
    }
  }
}

template <typename Encode>
void check_encode(const char* key, Encode encode) {
  const auto& g = goldens().at(key);
  const auto& inputs = g.at("inputs");
  const auto& codes = g.at("codes");
  ASSERT_EQ(inputs.size(), codes.size());
  ASSERT_GT(inputs.size(), 2000u);  // the dense set: every midpoint and its neighbours
  int mismatches = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const float x = from_bits(inputs[i].get<std::uint32_t>());
    const int want = codes[i].get<int>();
    const int got = encode(x);
    if (got != want && ++mismatches <= 20)
      ADD_FAILURE() << key << ": x=" << x << " (bits 0x" << std::hex
                    << inputs[i].get<std::uint32_t>() << ") got 0x" << got << " want 0x" << want;
  }
  EXPECT_EQ(mismatches, 0) << key;
}

TEST(CodecGoldens, E4M3EncodeMatchesTorchOnEveryGoldenInput) {
  check_encode("e4m3_encode", [](float x) { return int{f32_to_e4m3(x)}; });
}

TEST(CodecGoldens, E5M2EncodeMatchesTorchOnEveryGoldenInput) {
  check_encode("e5m2_encode", [](float x) { return int{f32_to_e5m2(x)}; });
}

// compressed-tensors' cast_to_fp4 (the value function kvq::quant::round_to_fp4 mirrors) and our
// E2M1 code encoder, decoded back, on every threshold and its fp32 neighbours.
TEST(CodecGoldens, E2M1RoundingMatchesCompressedTensors) {
  const auto& g = goldens().at("e2m1");
  const auto& inputs = g.at("inputs");
  const auto& outputs = g.at("outputs");
  ASSERT_EQ(inputs.size(), outputs.size());
  ASSERT_GT(inputs.size(), 100u);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const float x = from_bits(inputs[i].get<std::uint32_t>());
    const std::uint32_t want = outputs[i].get<std::uint32_t>();
    const float ref = from_bits(want);
    const float value = quant::round_to_fp4(x);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(value)) << "x=" << x;
      continue;  // E2M1 has no NaN code: f32_to_e2m1 saturates NaN (documented in float8.h)
    }
    EXPECT_EQ(std::bit_cast<std::uint32_t>(value), want) << "round_to_fp4 x=" << x;
    // The code encoder agrees with the value function, including the sign of zero.
    const float decoded = e2m1_to_f32(f32_to_e2m1(x));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(decoded), want) << "f32_to_e2m1 x=" << x;
  }
}

}  // namespace
}  // namespace kvq
