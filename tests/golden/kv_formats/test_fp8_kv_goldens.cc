// Every fp8 row of the KV codec table against torch 2.14's float8 casts
// (tests/data/codec/codec_goldens.json, written by tools/reference/make_codec_goldens.py):
//  - a row holding all 256 codes decodes to torch's value of each code, through the scalar codec,
//    the dispatched kernels and every SIMD level the CPU runs;
//  - quantize_row at scale 1 stores torch's code of every golden input (every rounding midpoint
//    and its neighbours) inside the grid, and the largest code beyond it: compressed-tensors
//    clamps to finfo.max before the cast, where torch's E5M2 cast alone would give inf.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/quant/formats.h"
#include "support/codec_goldens.h"

namespace kvq {
namespace {

using quant::KvFormat;

const nlohmann::json& goldens() { return test::codec_goldens(); }

// The goldens of each fp8 row ("e4m3_decode", "e4m3_encode", ...).
struct Fp8Goldens {
  KvFormat format;
  const char* key;
};
constexpr Fp8Goldens kFp8[] = {{KvFormat::kFP8E4M3, "e4m3"}, {KvFormat::kFP8E5M2, "e5m2"}};

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

// Every fp8 row of the table has goldens here.
TEST(Fp8KvGoldens, EveryFp8RowIsCovered) {
  for (const auto& t : quant::kv_format_table()) {
    if (!t.name.starts_with("fp8")) continue;
    bool found = false;
    for (const Fp8Goldens& g : kFp8) found = found || g.format == t.format;
    EXPECT_TRUE(found) << t.name << ": add its codec goldens to kFp8";
  }
}

TEST(Fp8KvGoldens, RowsDecodeAll256CodesAsTorch) {
  std::vector<std::byte> row(256);
  for (int c = 0; c < 256; ++c) row[c] = static_cast<std::byte>(c);
  for (const Fp8Goldens& g : kFp8) {
    const auto& want = goldens().at(std::string(g.key) + "_decode");
    ASSERT_EQ(want.size(), 256u);
    std::vector<float> codec(256), fast(256);
    quant::dequantize_row(g.format, row.data(), 256, 1.0f, 0.0f, 1.0f, codec.data());
    kernels::dequantize_row(g.format, row.data(), 256, 1.0f, 0.0f, 1.0f, fast.data());
    std::vector<std::vector<float>> levels;
    for (kernels::Isa isa : {kernels::Isa::kAvx512, kernels::Isa::kAvx2}) {
      const kernels::CpuFeatures& f = kernels::cpu_features();
      const bool runs = isa == kernels::Isa::kAvx512
                            ? f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c
                            : f.avx2 && f.fma && f.f16c;
      const kernels::KvRowSimd* k = kernels::kv_row_simd(g.format, isa);
      if (!runs || k == nullptr) continue;
      levels.emplace_back(256);
      ASSERT_EQ(k->dequantize_row(row.data(), 256, 1.0f, 0.0f, 1.0f, levels.back().data()), 256);
    }
    for (int c = 0; c < 256; ++c) {
      const float ref = std::bit_cast<float>(want[c].get<std::uint32_t>());
      EXPECT_TRUE(same_bits(codec[c], ref)) << g.key << " code " << c << ": " << codec[c];
      EXPECT_TRUE(same_bits(fast[c], ref)) << g.key << " code " << c << ": " << fast[c];
      for (const auto& level : levels)
        EXPECT_TRUE(same_bits(level[c], ref)) << g.key << " code " << c << ": " << level[c];
    }
  }
}

TEST(Fp8KvGoldens, QuantizeRowStoresTorchCodesInsideTheGrid) {
  for (const Fp8Goldens& g : kFp8) {
    const quant::KvFormatTraits& t = quant::kv_format_traits(g.format);
    const auto& enc = goldens().at(std::string(g.key) + "_encode");
    const auto& inputs = enc.at("inputs");
    const auto& codes = enc.at("codes");
    ASSERT_EQ(inputs.size(), codes.size());
    ASSERT_GT(inputs.size(), 2000u);
    // The largest finite code: where the clamp puts everything beyond the grid.
    const auto& decode = goldens().at(std::string(g.key) + "_decode");
    int max_code = -1;
    for (int c = 0; c < 128; ++c)
      if (std::bit_cast<float>(decode[c].get<std::uint32_t>()) == t.code_max) max_code = c;
    ASSERT_GE(max_code, 0) << g.key << ": code_max " << t.code_max << " is no code";
    int mismatches = 0, beyond = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float x = std::bit_cast<float>(inputs[i].get<std::uint32_t>());
      int want = codes[i].get<int>();
      if (std::fabs(x) > t.code_max) {
        want = (std::signbit(x) ? 0x80 : 0) | max_code;
        ++beyond;
      }
      if (x == 0.0f) want = 0;  // x / 1 + zero point 0 turns -0 into +0, as compressed-tensors
      std::byte b{};
      quant::quantize_row(g.format, &x, 1, 1.0f, 0.0f, 1.0f, &b);
      const int got = static_cast<int>(b);
      const bool ok = std::isnan(x) ? (got & 0x7f) == (want & 0x7f) : got == want;
      if (!ok && ++mismatches <= 20)
        ADD_FAILURE() << g.key << ": x=" << x << " got 0x" << std::hex << got << " want 0x" << want;
    }
    EXPECT_EQ(mismatches, 0) << g.key;
    EXPECT_GT(beyond, 0) << g.key << ": the goldens reach past the grid";
  }
}

}  // namespace
}  // namespace kvq
