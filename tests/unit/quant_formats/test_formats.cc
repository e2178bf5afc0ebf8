// The KV storage format table and row codecs (kvq/quant/formats.h):
//  - traits, names, row sizes;
//  - quantize_row + dequantize_row == compressed-tensors' fake_quantize (kvq::quant port, itself
//    checked against the reference by tests/golden/quant) bit for bit in fp32;
//  - every fast path (AVX-512 and AVX2, called directly when the CPU has them, and the runtime
//    dispatch) against the scalar reference on rows of awkward lengths;
//  - the documented NaN / saturation policies.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "kvq/core/float8.h"
#include "kvq/core/tensor.h"
#include "kvq/quant/fake_quantize.h"
#include "kvq/quant/formats.h"
#include "kvq/quant/formats_simd.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/quant_args.h"

namespace kvq::quant {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr KvFormat kAll[] = {KvFormat::kF32,  KvFormat::kBF16, KvFormat::kF16,  KvFormat::kFP8E4M3,
                             KvFormat::kINT8, KvFormat::kINT4, KvFormat::kNVFP4};
constexpr std::int64_t kLengths[] = {1, 15, 16, 17, 63, 64, 128, 1000};

// Same value bit for bit, except that NaNs match any NaN and +0 matches -0 (int codes cannot
// carry the sign of a zero; attention cannot tell them apart).
::testing::AssertionResult same_value(float got, float want) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (got == 0.0f && want == 0.0f) return ::testing::AssertionSuccess();
  if (std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " != " << want;
}

std::vector<float> random_row(std::mt19937& rng, std::int64_t n, float spread) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (float& v : x) v = dist(rng);
  if (n > 4) {
    x[1] = 0.0f;
    x[2] = -0.0f;
    x[3] *= 9.0f;  // an outlier
  }
  return x;
}

TEST(KvFormats, TraitsTable) {
  ASSERT_EQ(kv_format_table().size(), 7u);
  for (std::size_t i = 0; i < kv_format_table().size(); ++i) {
    const auto& t = kv_format_table()[i];
    EXPECT_EQ(static_cast<std::size_t>(t.format), i);
    EXPECT_EQ(&kv_format_traits(t.format), &t);
    EXPECT_EQ(parse_kv_format(t.name), t.format);
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
  EXPECT_FALSE(parse_kv_format("int3").has_value());
  EXPECT_FALSE(parse_kv_format("").has_value());
}

TEST(KvFormats, RowBytes) {
  EXPECT_EQ(kv_row_bytes(KvFormat::kF32, 64), 256u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kBF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kF16, 64), 128u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kFP8E4M3, 64), 64u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT8, 64), 64u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4, 64), 32u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kINT4, 17), 9u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 64), 36u);  // 4 blocks x (8 + 1)
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 128), 72u);
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 17), 9u + 2u);  // partial block padded
  EXPECT_EQ(kv_row_bytes(KvFormat::kNVFP4, 1), 2u);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kF32), 4.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kBF16), 2.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kFP8E4M3), 1.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT8), 1.0);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kINT4), 0.5);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(KvFormat::kNVFP4), 0.5625);
  for (KvFormat f : kAll)  // bytes per value is the row size of whole blocks
    EXPECT_DOUBLE_EQ(kv_bytes_per_value(f) * 1024, static_cast<double>(kv_row_bytes(f, 1024)));
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

// ---- quantize_row + dequantize_row == fake_quantize -------------------------------------

QuantizationArgs make_args(KvFormat f, bool symmetric) {
  QuantizationArgs a;
  if (f == KvFormat::kNVFP4) {
    a.num_bits = 4;
    a.type = QuantizationType::kFloat;
    a.strategy = QuantizationStrategy::kTensorGroup;
    a.group_size = 16;
    a.dynamic = DynamicType::kLocal;
    a.scale_dtype = DType::kF8E4M3;
  } else {
    a.num_bits = f == KvFormat::kINT4 ? 4 : 8;
    a.type = f == KvFormat::kFP8E4M3 ? QuantizationType::kFloat : QuantizationType::kInt;
    a.strategy = QuantizationStrategy::kTensor;
  }
  a.symmetric = symmetric;
  a.validate();
  return a;
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
  const QuantizationArgs args = make_args(c.format, c.symmetric);
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
  if (c.format == KvFormat::kNVFP4) {
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

TEST(KvFormats, RoundTripEqualsFakeQuantize) {
  const Case cases[] = {
      {KvFormat::kINT8, true, 1.0f},     {KvFormat::kINT8, false, 1.0f},
      {KvFormat::kINT8, true, 0.3f},     {KvFormat::kINT8, false, 0.3f},
      {KvFormat::kINT4, true, 1.0f},     {KvFormat::kINT4, false, 1.0f},
      {KvFormat::kINT4, true, 0.3f},     {KvFormat::kFP8E4M3, true, 1.0f},
      {KvFormat::kFP8E4M3, true, 0.01f}, {KvFormat::kNVFP4, true, 1.0f},
      {KvFormat::kNVFP4, true, 0.01f},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
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
  for (KvFormat f : {KvFormat::kINT8, KvFormat::kINT4, KvFormat::kFP8E4M3, KvFormat::kNVFP4}) {
    check_against_fake_quantize({f, true, 1.0f}, ties);
    check_against_fake_quantize({f, true, 1.0f}, finite);
    check_against_fake_quantize({f, true, 0.25f}, finite);
    if (kv_format_traits(f).supports_zero_point)
      check_against_fake_quantize({f, false, 1.0f}, finite);
  }
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
  // fp8: NaN stays NaN, inf saturates to +-448 (clamp before the cast).
  quantize_row(KvFormat::kFP8E4M3, x.data(), 32, 0.5f, 0.0f, 1.0f, row.data());
  dequantize_row(KvFormat::kFP8E4M3, row.data(), 32, 0.5f, 0.0f, 1.0f, got.data());
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(got[1], 224.0f);
  EXPECT_EQ(got[2], -224.0f);
  EXPECT_EQ(got[3], 0.25f);
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

// ---- fast paths vs the scalar reference --------------------------------------------------

using DequantFn = std::int64_t (*)(KvFormat, const std::byte*, std::int64_t, float, float, float,
                                   float*);
using DotFn = std::int64_t (*)(KvFormat, const float*, const std::byte*, std::int64_t, float,
                               float*);
using AxpyFn = std::int64_t (*)(KvFormat, float, const std::byte*, std::int64_t, float, float*);

struct Impl {
  const char* name;
  bool available;
  std::int64_t step;  // values per SIMD chunk
  DequantFn dequant;
  DotFn dot;
  AxpyFn axpy;
};

// The SIMD kernels only cover whole chunks; finish the tail like the dispatcher does.
void finish_tail(KvFormat f, const std::byte* row, std::int64_t n, std::int64_t from, float zp,
                 std::vector<float>& out, float scale, float gs) {
  for (std::int64_t i = from; i < n; ++i) {
    out[i] = f == KvFormat::kNVFP4
                 ? e2m1_to_f32(detail::nibble(row, i)) * (detail::nvfp4_block_scale(row, n, i) / gs)
                 : detail::decode_value(f, row, n, i, zp) * scale;
  }
}

std::vector<Impl> impls() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  return {{"avx512", avx512, 16, detail::avx512::dequantize_row, detail::avx512::dot_row,
           detail::avx512::axpy_row},
          {"avx2", avx2, 8, detail::avx2::dequantize_row, detail::avx2::dot_row,
           detail::avx2::axpy_row}};
}

// A row of random bytes (every code, NaN codes included) for the decode-only comparisons.
std::vector<std::byte> random_bytes(std::mt19937& rng, std::size_t count) {
  std::vector<std::byte> b(count);
  for (auto& v : b) v = static_cast<std::byte>(rng() & 0xff);
  return b;
}

TEST(KvFormats, FastDequantizeEqualsReferenceOnEveryCode) {
  std::cout << "dispatch: " << kv_format_isa() << "\n";
  std::mt19937 rng(11);
  for (const Impl& impl : impls()) {
    if (!impl.available) continue;
    for (KvFormat f : kAll) {
      for (std::int64_t n : kLengths) {
        const auto row = random_bytes(rng, kv_row_bytes(f, n));
        const float zp = kv_format_traits(f).supports_zero_point ? -3.0f : 0.0f;
        std::vector<float> want(n), got(n, -1.0f), via_dispatch(n);
        ref::dequantize_row(f, row.data(), n, 0.37f, zp, 1.7f, want.data());
        const std::int64_t done = impl.dequant(f, row.data(), n, 0.37f, zp, 1.7f, got.data());
        ASSERT_EQ(done, n - n % impl.step) << impl.name;
        finish_tail(f, row.data(), n, done, zp, got, 0.37f, 1.7f);
        dequantize_row(f, row.data(), n, 0.37f, zp, 1.7f, via_dispatch.data());
        for (std::int64_t i = 0; i < n; ++i) {
          // Bit-exact (NaN payloads aside): the same per-element ops in the same order.
          const bool ok =
              (std::isnan(want[i]) && std::isnan(got[i])) ||
              std::bit_cast<std::uint32_t>(want[i]) == std::bit_cast<std::uint32_t>(got[i]);
          ASSERT_TRUE(ok) << impl.name << " " << kv_format_name(f) << " n=" << n << " i=" << i
                          << " got " << got[i] << " want " << want[i];
          ASSERT_TRUE((std::isnan(want[i]) && std::isnan(via_dispatch[i])) ||
                      want[i] == via_dispatch[i]);
        }
      }
    }
  }
}

TEST(KvFormats, E4M3TableEqualsCodec) {
  for (int c = 0; c < 256; ++c) {
    const float want = e4m3_to_f32(static_cast<std::uint8_t>(c));
    const float got = detail::kE4M3Table[c];
    EXPECT_TRUE((std::isnan(want) && std::isnan(got)) ||
                std::bit_cast<std::uint32_t>(want) == std::bit_cast<std::uint32_t>(got))
        << c;
  }
}

TEST(KvFormats, Fp8FastDecodeCoversAll256Codes) {
  std::vector<std::byte> row(256);
  for (int c = 0; c < 256; ++c) row[c] = static_cast<std::byte>(c);
  std::vector<float> got(256);
  dequantize_row(KvFormat::kFP8E4M3, row.data(), 256, 1.0f, 0.0f, 1.0f, got.data());
  for (int c = 0; c < 256; ++c) {
    const float want = e4m3_to_f32(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[c])) << c;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got[c]), std::bit_cast<std::uint32_t>(want)) << c;
    }
  }
}

TEST(KvFormats, FastDotAndAxpyMatchReference) {
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const Impl& impl : impls()) {
    if (!impl.available) continue;
    for (KvFormat f : kAll) {
      for (std::int64_t n : kLengths) {
        std::vector<float> x = random_row(rng, n, 2.0f);
        if (n >= 16) {  // edge values: the format's extremes after scaling
          x[5] = 1e6f;
          x[6] = -1e6f;
        }
        float amax = 0.0f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        const float scale = amax / 100.0f;
        const float zp = kv_format_traits(f).supports_zero_point ? 2.0f : 0.0f;
        const float gs = 448.0f * 6.0f / amax;
        std::vector<std::byte> row(kv_row_bytes(f, n));
        quantize_row(f, x.data(), n, scale, zp, gs, row.data());
        std::vector<float> q(n);
        for (float& v : q) v = dist(rng);

        // dot: summation order differs (lanes, two accumulators); the error of either order is
        // below n * eps * sum|q_i v_i|, so their difference is below twice that.
        const float want = ref::dot_row(f, q.data(), row.data(), n, zp);
        float head = 0.0f;
        const std::int64_t done = impl.dot(f, q.data(), row.data(), n, zp, &head);
        float got = head;
        double abs_sum = 0.0;
        for (std::int64_t i = 0; i < n; ++i) {
          const float v = detail::decode_value(f, row.data(), n, i, zp);
          abs_sum += std::fabs(static_cast<double>(q[i]) * v);
          if (i >= done) got += q[i] * v;
        }
        const double tol = 2.0 * static_cast<double>(n) * 0x1p-24 * abs_sum;
        EXPECT_LE(std::fabs(static_cast<double>(got) - want), tol)
            << impl.name << " " << kv_format_name(f) << " n=" << n;
        EXPECT_LE(std::fabs(static_cast<double>(dot_row(f, q.data(), row.data(), n, zp)) - want),
                  tol);

        // axpy: one fma per element in both: bit-exact.
        std::vector<float> acc_ref(q), acc_fast(q), acc_dispatch(q);
        ref::axpy_row(f, 0.625f, row.data(), n, zp, acc_ref.data());
        const std::int64_t done_axpy = impl.axpy(f, 0.625f, row.data(), n, zp, acc_fast.data());
        for (std::int64_t i = done_axpy; i < n; ++i)
          acc_fast[i] =
              std::fma(0.625f, detail::decode_value(f, row.data(), n, i, zp), acc_fast[i]);
        axpy_row(f, 0.625f, row.data(), n, zp, acc_dispatch.data());
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(acc_fast[i], acc_ref[i]) << impl.name << " " << kv_format_name(f) << " i=" << i;
          ASSERT_EQ(acc_dispatch[i], acc_ref[i]);
        }
      }
    }
  }
}

// The fast paths fold no scale: dot / axpy of a row equal the dequantized row over its scale.
TEST(KvFormats, DotAndAxpyLeaveTheStreamScaleOut) {
  std::mt19937 rng(17);
  for (KvFormat f : kAll) {
    const std::int64_t n = 64;
    const std::vector<float> x = random_row(rng, n, 1.0f);
    const float scale = 0.02f, gs = 300.0f;
    std::vector<std::byte> row(kv_row_bytes(f, n));
    quantize_row(f, x.data(), n, scale, 0.0f, gs, row.data());
    std::vector<float> deq(n), acc(n, 0.0f);
    dequantize_row(f, row.data(), n, scale, 0.0f, gs, deq.data());
    axpy_row(f, 1.0f, row.data(), n, 0.0f, acc.data());
    const float fold = f == KvFormat::kNVFP4 ? 1.0f / gs : scale;
    for (std::int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(acc[i] * fold, deq[i], 1e-6f * std::fabs(deq[i]) + 1e-30f)
          << kv_format_name(f) << " " << i;
  }
}

}  // namespace
}  // namespace kvq::quant
