// The KV format codec table: one row per format (formats.h) and the scalar codec functions the
// rows point to. Adding a format is a row here plus its codec functions.
#include "kvq/quant/formats.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/core/float8.h"
#include "kvq/core/strings.h"
#include "kvq/core/tensor.h"
#include "kvq/quant/kv_row_layout.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/quant_args.h"

namespace kvq::quant {
namespace {

using detail::kNvfp4Group;
using detail::nibble;
using detail::nvfp4_block_scale;

constexpr float kFp8Max = 448.0f;  // E4M3
constexpr float kFp4Max = 6.0f;    // E2M1

// torch.clamp: NaN passes through.
float clamp(float v, float lo, float hi) {
  return std::isnan(v) ? v : std::min(std::max(v, lo), hi);
}

// round(clamp(y)) then `.to(int8)`: NaN -> 0 as torch's cast does on x86.
int round_int(float y, float lo, float hi) {
  if (std::isnan(y)) return 0;
  return static_cast<int>(std::nearbyint(clamp(y, lo, hi)));
}

// Element i dequantized for formats whose value is unscaled * scale (all but nvfp4).
template <auto Unscaled>
float scaled(const RowCodec& c, const std::byte* row, std::int64_t i) {
  return Unscaled(row, c.n, i, c.zero_point) * c.scale;
}

// ---- f32 / bf16 / f16: x / scale stored plain ---------------------------------------------

float f32_identity(float v) { return v; }

template <typename T, T (*Encode)(float), float (*Decode)(T)>
struct Plain {
  static void quantize(const RowCodec& c, const float* x, std::byte* out) {
    for (std::int64_t i = 0; i < c.n; ++i) {
      const T b = Encode(x[i] / c.scale);
      std::memcpy(out + static_cast<std::int64_t>(sizeof(T)) * i, &b, sizeof(T));
    }
  }
  static float unscaled(const std::byte* row, std::int64_t, std::int64_t i, float) {
    T b;
    std::memcpy(&b, row + static_cast<std::int64_t>(sizeof(T)) * i, sizeof(T));
    return Decode(b);
  }
};
using F32 = Plain<float, f32_identity, f32_identity>;
using BF16 = Plain<std::uint16_t, f32_to_bf16, bf16_to_f32>;
using F16 = Plain<std::uint16_t, f32_to_fp16, fp16_to_f32>;

// ---- fp8: one float8 code per value ---------------------------------------------------------

float e4m3_lookup(std::uint8_t code) { return detail::kE4M3Table[code]; }

// q = float8(clamp(x / scale + zp, ±kMax)).
template <std::uint8_t (*Encode)(float), float (*Decode)(std::uint8_t), const float& kMax>
struct Fp8 {
  static void quantize(const RowCodec& c, const float* x, std::byte* out) {
    for (std::int64_t i = 0; i < c.n; ++i) {
      float y = x[i] / c.scale;
      y += c.zero_point;
      out[i] = static_cast<std::byte>(Encode(clamp(y, -kMax, kMax)));
    }
  }
  static float unscaled(const std::byte* row, std::int64_t, std::int64_t i, float zero_point) {
    return Decode(static_cast<std::uint8_t>(row[i])) - zero_point;
  }
};
using Fp8E4M3 = Fp8<f32_to_e4m3, e4m3_lookup, kFp8Max>;

// E5M2 (vLLM's fp8_e5m2 KV dtype): compressed-tensors' math on the E5M2 grid, clamped to
// finfo(float8_e5m2).max, then torch's round-to-nearest-even cast (core/float8.h). 0.19.0's
// QuantizationArgs cannot name it: float 8 bits is always float8_e4m3fn (pytorch_dtype,
// round_to_quantized_type_args) and there is no FP8_E5M2_DATA, so the row has no args mapping:
// it is a packed cache with dynamic (or given) scales, not a checkpoint scheme.
constexpr float kFp8E5M2Max = 57344.0f;
using Fp8E5M2 = Fp8<f32_to_e5m2, e5m2_to_f32, kFp8E5M2Max>;

// ---- int8 / int4: compressed-tensors' int grids (calculate_range) -------------------------

constexpr float kInt8Min = -128.0f, kInt8Max = 127.0f;
constexpr float kInt4Min = -8.0f, kInt4Max = 7.0f;

void quantize_int8(const RowCodec& c, const float* x, std::byte* out) {
  for (std::int64_t i = 0; i < c.n; ++i) {
    float y = x[i] / c.scale;
    y += c.zero_point;
    out[i] = static_cast<std::byte>(static_cast<std::int8_t>(round_int(y, kInt8Min, kInt8Max)));
  }
}
float unscaled_int8(const std::byte* row, std::int64_t, std::int64_t i, float zero_point) {
  return static_cast<float>(static_cast<std::int8_t>(row[i])) - zero_point;
}

void quantize_int4(const RowCodec& c, const float* x, std::byte* out) {
  std::memset(out, 0x88, kv_row_bytes(KvFormat::kINT4, c.n));  // an odd tail pads q = 0
  for (std::int64_t i = 0; i < c.n; ++i) {
    float y = x[i] / c.scale;
    y += c.zero_point;
    const auto code = static_cast<unsigned>(round_int(y, kInt4Min, kInt4Max) + 8);
    std::byte& b = out[i / 2];
    b = (i & 1) ? ((b & std::byte{0x0f}) | static_cast<std::byte>(code << 4))
                : ((b & std::byte{0xf0}) | static_cast<std::byte>(code));
  }
}
float unscaled_int4(const std::byte* row, std::int64_t, std::int64_t i, float zero_point) {
  return static_cast<float>(static_cast<int>(nibble(row, i)) - 8) - zero_point;
}

// ---- nvfp4: e2m1 nibbles, then one E4M3 scale per 16 values ----------------------------------

void quantize_nvfp4(const RowCodec& c, const float* x, std::byte* out) {
  const std::int64_t n = c.n;
  std::memset(out, 0, kv_row_bytes(KvFormat::kNVFP4, n));
  std::byte* scales = out + detail::nvfp4_scales_offset(n);
  for (std::int64_t b0 = 0; b0 < n; b0 += kNvfp4Group) {
    const std::int64_t b1 = std::min<std::int64_t>(n, b0 + kNvfp4Group);
    // calculate_qparams: amax over min(min, 0) / max(max, 0); NaN propagates (torch min/max).
    float amax = 0.0f;
    for (std::int64_t i = b0; i < b1; ++i) {
      if (std::isnan(x[i])) {
        amax = x[i];
        break;
      }
      amax = std::max(amax, std::fabs(x[i]));
    }
    // scales = amax / 6 (bit_range / 2); global_scale * scales; clamp +-448 to E4M3; 0 -> eps
    // (0.125 for an fp8 scale dtype).
    const float s = c.global_scale * (amax / kFp4Max);
    std::uint8_t code = f32_to_e4m3(clamp(s, -kFp8Max, kFp8Max));
    if (e4m3_to_f32(code) == 0.0f) code = f32_to_e4m3(0.125f);
    scales[b0 / kNvfp4Group] = static_cast<std::byte>(code);
    const float scale_eff = e4m3_to_f32(code) / c.global_scale;
    for (std::int64_t i = b0; i < b1; ++i) {
      float y = x[i] / scale_eff;
      y += 0.0f;  // the fp8 zero point compressed-tensors adds (it turns -0 into +0)
      const std::uint8_t e = f32_to_e2m1(clamp(y, -kFp4Max, kFp4Max));
      out[i / 2] |= static_cast<std::byte>((i & 1) ? e << 4 : e);
    }
  }
}
float unscaled_nvfp4(const std::byte* row, std::int64_t n, std::int64_t i, float) {
  return e2m1_to_f32(nibble(row, i)) * nvfp4_block_scale(row, n, i);
}
float value_nvfp4(const RowCodec& c, const std::byte* row, std::int64_t i) {
  return e2m1_to_f32(nibble(row, i)) * (nvfp4_block_scale(row, c.n, i) / c.global_scale);
}

// ---- int8_g32 / int4_g32: int codes, then one fp16 scale per 32 values ---------------------

using detail::group_scale;
using detail::group_scales_offset;
using detail::kGroupValues;

constexpr float kFp16Max = 65504.0f;
// int5_g32: a block's 32 codes in 16 nibble bytes and 4 bytes of fifth bits.
constexpr std::int64_t kInt5BlockBytes = 20;
static_assert(detail::group_scales_offset(5, kGroupValues) == kInt5BlockBytes);

// Scale rules of one block x[0, m) (NaN ignored): the fp32 scale before its fp16 rounding.
// int8_g32: amax / 127.
float int8_g32_scale(const float* x, std::int64_t m) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < m; ++i)
    if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
  return amax / 127.0f;
}
// q4_0 / q5_0: d = max / kLo with max the value of largest magnitude (the first on ties), sign
// kept, so max gets the most negative code.
template <int kLo>
float signed_max_scale(const float* x, std::int64_t m) {
  float amax = 0.0f, max = 0.0f;
  for (std::int64_t i = 0; i < m; ++i) {
    if (!std::isnan(x[i]) && std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max / static_cast<float>(kLo);
}

// Codes of a group format with nibbles (4 bits) or bytes (8 bits) and the scale rule above, one
// scale per kGroup values: d = fp16(clamp(rule, ±65504)),
// q = d == 0 ? 0 : round_half_even(clamp(x / d, lo, hi)). The code layout does not depend on
// kGroup (int5's 20-byte code blocks hold 32 values whatever the scale's group).
template <int kBits, float (*Scale)(const float*, std::int64_t), int kLo, int kHi,
          std::int64_t kGroup = kGroupValues>
struct Group {
  static void quantize(const RowCodec& c, const float* x, std::byte* out) {
    const std::int64_t n = c.n;
    const auto code_bytes = static_cast<std::size_t>(group_scales_offset(kBits, n));
    std::memset(out, kBits == 4 ? 0x88 : 0, code_bytes);  // an odd tail pads q = 0
    for (std::int64_t b0 = 0; b0 < n; b0 += kGroup) {
      const std::int64_t m = std::min<std::int64_t>(kGroup, n - b0);
      const std::uint16_t h = f32_to_fp16(clamp(Scale(x + b0, m), -kFp16Max, kFp16Max));
      std::memcpy(out + code_bytes + 2 * (b0 / kGroup), &h, 2);
      const float d = fp16_to_f32(h);
      for (std::int64_t i = b0; i < b0 + m; ++i) {
        const int q = d == 0.0f ? 0 : round_int(x[i] / d, kLo, kHi);
        if constexpr (kBits == 8) {
          out[i] = static_cast<std::byte>(static_cast<std::int8_t>(q));
        } else if constexpr (kBits == 5) {
          const auto u = static_cast<unsigned>(q + 16);
          std::byte* block = out + (i / kGroupValues) * kInt5BlockBytes;
          const std::int64_t j = i % kGroupValues;
          std::byte& lo = block[j / 2];
          lo = (j & 1) ? ((lo & std::byte{0x0f}) | static_cast<std::byte>((u & 15u) << 4))
                       : ((lo & std::byte{0xf0}) | static_cast<std::byte>(u & 15u));
          std::byte& hi = block[16 + j / 8];
          const auto bit = static_cast<std::byte>(1u << (j % 8));
          hi = (u & 16u) ? (hi | bit) : (hi & ~bit);
        } else {
          out[i / 2] = (i & 1)
                           ? ((out[i / 2] & std::byte{0x0f}) | static_cast<std::byte>((q + 8) << 4))
                           : ((out[i / 2] & std::byte{0xf0}) | static_cast<std::byte>(q + 8));
        }
      }
    }
  }
  static float code(const std::byte* row, std::int64_t i) {
    if constexpr (kBits == 8) {
      return static_cast<float>(static_cast<std::int8_t>(row[i]));
    } else if constexpr (kBits == 5) {
      const std::byte* block = row + (i / kGroupValues) * kInt5BlockBytes;
      const std::int64_t j = i % kGroupValues;
      const unsigned hi = (static_cast<unsigned>(block[16 + j / 8]) >> (j % 8)) & 1u;
      return static_cast<float>(static_cast<int>(nibble(block, j) | (hi << 4)) - 16);
    } else {
      return static_cast<float>(static_cast<int>(nibble(row, i)) - 8);
    }
  }
  // (q - zp) * d; the SIMD kernels' order of operations (zero_point is 0 here).
  static float unscaled(const std::byte* row, std::int64_t n, std::int64_t i, float zero_point) {
    return (code(row, i) - zero_point) *
           group_scale(row, group_scales_offset(kBits, n), i, 2, kGroup);
  }
  // (q - zp) * d: fp16 block scales have no global scale (RowCodec::global_scale is ignored).
  static float value(const RowCodec& c, const std::byte* row, std::int64_t i) {
    return (code(row, i) - c.zero_point) *
           group_scale(row, group_scales_offset(kBits, c.n), i, 2, kGroup);
  }
};
using Int8G32 = Group<8, int8_g32_scale, -127, 127>;
using Int4G32 = Group<4, signed_max_scale<-8>, -8, 7>;
using Int5G32 = Group<5, signed_max_scale<-16>, -16, 15>;

// int4_g32_mse / int5_g32_mse / nl4: the clipping search of formats.h. Each candidate is scored
// with the fp16 scale it stores and the codes its quantize would give (Snap: x / d -> the unscaled
// value its code decodes to), so the winner is exactly what decodes.
constexpr int kMseRatios = 16;
constexpr float kMseRatioStep = 0.02f;
// The squared error of block x[0, m) coded on scale d (NaN ignored).
template <float (*Snap)(float)>
double block_error(const float* x, std::int64_t m, float d) {
  double err = 0.0;
  for (std::int64_t i = 0; i < m; ++i) {
    if (std::isnan(x[i])) continue;
    const float q = d == 0.0f ? 0.0f : Snap(x[i] / d);
    const double e = static_cast<double>(q * d) - static_cast<double>(x[i]);
    err += e * e;
  }
  return err;
}
template <int kLo, float (*Snap)(float)>
float mse_scale(const float* x, std::int64_t m) {
  const float full = signed_max_scale<kLo>(x, m);
  float best = full;
  double best_err = std::numeric_limits<double>::infinity();
  for (int k = 0; k < kMseRatios; ++k) {
    const float candidate = full * (1.0f - kMseRatioStep * static_cast<float>(k));
    const float d = fp16_to_f32(f32_to_fp16(clamp(candidate, -kFp16Max, kFp16Max)));
    const double err = block_error<Snap>(x, m, d);
    if (err < best_err) {
      best_err = err;
      best = candidate;
    }
  }
  return best;
}
template <int kLo, int kHi>
float snap_int(float y) {
  return static_cast<float>(round_int(y, kLo, kHi));
}
using Int4G32Mse = Group<4, mse_scale<-8, snap_int<-8, 7>>, -8, 7>;
using Int5G32Mse = Group<5, mse_scale<-16, snap_int<-16, 15>>, -16, 15>;
using Int4G64Mse = Group<4, mse_scale<-8, snap_int<-8, 7>>, -8, 7, 64>;
using Int5G64Mse = Group<5, mse_scale<-16, snap_int<-16, 15>>, -16, 15, 64>;

// nl4 / nl3: codes indexing a table of levels (kNl4Levels: unsigned nibbles in int4 order;
// kNl3Levels: 3-bit codes in bit planes, detail::code3), one fp16 scale per kGroup values.
template <std::size_t K>
struct LevelTable {
  const std::array<float, K>& levels;
  std::array<float, K - 1> midpoints;  // exact: halves of integers
  std::uint8_t nan_code;               // the level nearest 0 (NaN, zero blocks, padding)
};
template <std::size_t K>
constexpr LevelTable<K> level_table(const std::array<float, K>& levels) {
  LevelTable<K> t{levels, {}, 0};
  for (std::size_t k = 0; k + 1 < K; ++k) t.midpoints[k] = 0.5f * (levels[k] + levels[k + 1]);
  for (std::size_t k = 1; k < K; ++k)
    if ((levels[k] < 0 ? -levels[k] : levels[k]) <
        (levels[t.nan_code] < 0 ? -levels[t.nan_code] : levels[t.nan_code]))
      t.nan_code = static_cast<std::uint8_t>(k);
  return t;
}
// int5_g32_e4m3: the 32 integers -16 ... 15 as levels (int5 codes q = c - 16).
constexpr std::array<float, 32> kInt5Levels = [] {
  std::array<float, 32> l{};
  for (int c = 0; c < 32; ++c) l[static_cast<std::size_t>(c)] = static_cast<float>(c - 16);
  return l;
}();
constexpr LevelTable<32> kInt5 = level_table(kInt5Levels);
constexpr LevelTable<16> kNl4 = level_table(detail::kNl4Levels);
constexpr LevelTable<8> kNl3 = level_table(detail::kNl3Levels);
static_assert(kNl4.nan_code == 8 && kNl3.nan_code == 4 && kInt5.nan_code == 16);

// The level nearest y, the lower one on a tie: the number of midpoints below y (NaN: the level
// nearest 0). Counted without branches: 1.5x faster writes than a binary search, whose branches
// mispredict on every other value (BM_Quantize, nl4_g32: 2.85 against 4.32 ms per 256 rows).
template <std::size_t K, const LevelTable<K>& T>
std::uint8_t level_code(float y) {
  if (std::isnan(y)) return T.nan_code;
  unsigned c = 0;
  for (std::size_t k = 0; k + 1 < K; ++k) c += y > T.midpoints[k] ? 1u : 0u;
  return static_cast<std::uint8_t>(c);
}
template <std::size_t K, const LevelTable<K>& T>
float snap_level(float y) {
  return T.levels[level_code<K, T>(y)];
}

// The byte-scaled formats' search (formats.h): the byte of block x[0, m)'s scale over global
// scale g, from one step above the code nearest to g · m / kLo (kLo: the lowest level, -127 for
// nl4, -16 for int5) down to kBelow below it, the first smallest squared error winning; 0 when
// the nearest is 0. Both bytes are a sign bit over a magnitude that grows with its code (E4M3:
// 0x7f is NaN; the log scale: 16 steps per octave), so a step is one code.
enum class BlockScale { kFp16, kE4m3, kLog };
template <BlockScale kKind>
struct ByteScaleRule {
  static constexpr const std::array<float, 256>& kTable =
      kKind == BlockScale::kE4m3 ? detail::kE4M3Table : detail::kLogScaleTable;
  static constexpr int kBelow = kKind == BlockScale::kE4m3 ? 3 : 6;  // both about ratio 0.75
  static constexpr unsigned kMaxMagnitude = kKind == BlockScale::kE4m3 ? 0x7e : 0x7f;
  static constexpr float kTop = kKind == BlockScale::kE4m3 ? kFp8Max : 1.0f;  // the largest scale
  // The nearest code to s (E4M3: round to nearest even, saturating at ±448; the log scale:
  // the nearest step, clamped to [1, 127], so only s = 0 gives 0).
  static std::uint8_t nearest(float s) {
    if constexpr (kKind == BlockScale::kE4m3) {
      return f32_to_e4m3(clamp(s, -kFp8Max, kFp8Max));
    } else {
      if (s == 0.0f) return 0;
      const float t = static_cast<float>(detail::kLogScaleStepsPerOctave) * std::log2(std::fabs(s));
      const int e = t >= 0.0f ? 127 : t <= -126.0f ? 1 : 127 + static_cast<int>(std::nearbyint(t));
      return static_cast<std::uint8_t>((s < 0.0f ? 0x80u : 0u) | static_cast<unsigned>(e));
    }
  }
};
template <BlockScale kKind, int kLo, float (*Snap)(float)>
std::uint8_t byte_block_scale(const float* x, std::int64_t m, float g) {
  using Rule = ByteScaleRule<kKind>;
  constexpr int kAbove = 1;
  const std::uint8_t nearest = Rule::nearest(signed_max_scale<kLo>(x, m) * g);
  const unsigned sign = nearest & 0x80u, em = nearest & 0x7fu;
  if (em == 0) return 0;
  std::uint8_t best = nearest;
  double best_err = std::numeric_limits<double>::infinity();
  for (int k = kAbove; k >= -Rule::kBelow; --k) {
    const int e = static_cast<int>(em) + k;
    if (e < 1 || e > static_cast<int>(Rule::kMaxMagnitude)) continue;  // 0: no scale
    const auto code = static_cast<std::uint8_t>(sign | static_cast<unsigned>(e));
    const double err = block_error<Snap>(x, m, Rule::kTable[code] / g);
    if (err < best_err) {
      best_err = err;
      best = code;
    }
  }
  return best;
}

// kScale: one fp16 scale per block, or one byte (E4M3 or the log scale) over the stream's global
// scale.
template <int kBits, std::int64_t kGroup, const auto& T, BlockScale kScale = BlockScale::kFp16>
struct NonLinear {
  static constexpr std::size_t K = std::size_t{1} << kBits;
  static_assert(T.midpoints.size() + 1 == K);
  // The scale search puts the block's extreme on the lowest level (-127; int5's -16).
  static constexpr int kLo = static_cast<int>(T.levels[0]);
  static_assert(T.levels[0] == static_cast<float>(kLo));
  static void put(std::byte* out, std::int64_t i, unsigned q) {
    if constexpr (kBits == 4) {
      out[i / 2] = (i & 1) ? ((out[i / 2] & std::byte{0x0f}) | static_cast<std::byte>(q << 4))
                           : ((out[i / 2] & std::byte{0xf0}) | static_cast<std::byte>(q));
    } else if constexpr (kBits == 5) {  // int5's layout: low nibbles, then fifth bits per 32
      std::byte* block = out + (i / kGroupValues) * kInt5BlockBytes;
      const std::int64_t j = i % kGroupValues;
      std::byte& lo = block[j / 2];
      lo = (j & 1) ? ((lo & std::byte{0x0f}) | static_cast<std::byte>((q & 15u) << 4))
                   : ((lo & std::byte{0xf0}) | static_cast<std::byte>(q & 15u));
      std::byte& hi = block[16 + j / 8];
      const auto bit = static_cast<std::byte>(1u << (j % 8));
      hi = (q & 16u) ? (hi | bit) : (hi & ~bit);
    } else {
      std::byte* block = out + (i / kGroupValues) * detail::plane_block_bytes(3);
      const std::int64_t j = i % kGroupValues;
      const int lo = 2 * static_cast<int>(j % 4), hi = static_cast<int>(j % 8);
      block[j / 4] = (block[j / 4] & static_cast<std::byte>(~(3u << lo))) |
                     static_cast<std::byte>((q & 3u) << lo);
      block[8 + j / 8] = (block[8 + j / 8] & static_cast<std::byte>(~(1u << hi))) |
                         static_cast<std::byte>((q >> 2 & 1u) << hi);
    }
  }
  static std::uint8_t code(const std::byte* row, std::int64_t i) {
    if constexpr (kBits == 4) {
      return nibble(row, i);
    } else if constexpr (kBits == 5) {
      const std::byte* block = row + (i / kGroupValues) * kInt5BlockBytes;
      const std::int64_t j = i % kGroupValues;
      const unsigned hi = (static_cast<unsigned>(block[16 + j / 8]) >> (j % 8)) & 1u;
      return static_cast<std::uint8_t>(nibble(block, j) | (hi << 4));
    } else {
      return detail::code3(row, i);
    }
  }
  static void quantize(const RowCodec& c, const float* x, std::byte* out) {
    const std::int64_t n = c.n;
    const std::int64_t code_bytes = group_scales_offset(kBits, n);
    std::memset(out, 0, static_cast<std::size_t>(code_bytes));
    // A partial last block pads the level nearest 0 (times d).
    for (std::int64_t i = n; i < code_bytes * 8 / kBits; ++i) put(out, i, T.nan_code);
    for (std::int64_t b0 = 0; b0 < n; b0 += kGroup) {
      const std::int64_t m = std::min<std::int64_t>(kGroup, n - b0);
      float d;  // what the block's codes decode on, exactly as value() computes it
      if constexpr (kScale != BlockScale::kFp16) {
        const std::uint8_t s =
            byte_block_scale<kScale, kLo, snap_level<K, T>>(x + b0, m, c.global_scale);
        out[code_bytes + b0 / kGroup] = static_cast<std::byte>(s);
        d = ByteScaleRule<kScale>::kTable[s] / c.global_scale;
      } else {
        const float rule = mse_scale<kLo, snap_level<K, T>>(x + b0, m);
        const std::uint16_t h = f32_to_fp16(clamp(rule, -kFp16Max, kFp16Max));
        std::memcpy(out + code_bytes + 2 * (b0 / kGroup), &h, 2);
        d = fp16_to_f32(h);
      }
      for (std::int64_t i = b0; i < b0 + m; ++i)
        put(out, i, d == 0.0f ? T.nan_code : level_code<K, T>(x[i] / d));
    }
  }
  // The block scale of element i (a byte scale: before the global scale).
  static float block_scale(const std::byte* row, std::int64_t n, std::int64_t i) {
    const std::int64_t offset = group_scales_offset(kBits, n);
    if constexpr (kScale != BlockScale::kFp16)
      return ByteScaleRule<kScale>::kTable[static_cast<std::uint8_t>(row[offset + i / kGroup])];
    else
      return group_scale(row, offset, i, 2, kGroup);
  }
  // (L[c] - zp) * d, the SIMD kernels' order (zero_point is 0 here).
  static float unscaled(const std::byte* row, std::int64_t n, std::int64_t i, float zero_point) {
    return (T.levels[code(row, i)] - zero_point) * block_scale(row, n, i);
  }
  // Byte scales are divided by the stream's global scale; fp16 ones have none.
  static float value(const RowCodec& c, const std::byte* row, std::int64_t i) {
    const float level = T.levels[code(row, i)] - c.zero_point;
    if constexpr (kScale != BlockScale::kFp16)
      return level * (block_scale(row, c.n, i) / c.global_scale);
    else
      return level * block_scale(row, c.n, i);
  }
};

// int4_g32a (q4_1): unsigned nibbles q in [0, 15], then per block fp16 d and fp16 m.
namespace int4_g32a {
void quantize(const RowCodec& c, const float* x, std::byte* out) {
  const std::int64_t n = c.n;
  const auto code_bytes = static_cast<std::size_t>(group_scales_offset(4, n));
  std::memset(out, 0, code_bytes);  // an odd tail pads q = 0
  for (std::int64_t b0 = 0; b0 < n; b0 += kGroupValues) {
    const std::int64_t b1 = std::min<std::int64_t>(n, b0 + kGroupValues);
    float lo = 0.0f, hi = 0.0f;
    bool any = false;
    for (std::int64_t i = b0; i < b1; ++i) {
      if (std::isnan(x[i])) continue;
      lo = any ? std::min(lo, x[i]) : x[i];
      hi = any ? std::max(hi, x[i]) : x[i];
      any = true;
    }
    const std::uint16_t hd = f32_to_fp16(std::min((hi - lo) / 15.0f, kFp16Max));
    const std::uint16_t hm = f32_to_fp16(clamp(lo, -kFp16Max, kFp16Max));
    std::byte* sm = out + code_bytes + 4 * (b0 / kGroupValues);
    std::memcpy(sm, &hd, 2);
    std::memcpy(sm + 2, &hm, 2);
    const float d = fp16_to_f32(hd), m = fp16_to_f32(hm);
    for (std::int64_t i = b0; i < b1; ++i) {
      const int q = d == 0.0f ? 0 : round_int((x[i] - m) / d, 0.0f, 15.0f);
      out[i / 2] |= static_cast<std::byte>((i & 1) ? q << 4 : q);
    }
  }
}
float unscaled(const std::byte* row, std::int64_t n, std::int64_t i, float zero_point) {
  const std::int64_t off = group_scales_offset(4, n);
  return std::fma(static_cast<float>(nibble(row, i)) - zero_point, group_scale(row, off, i, 4),
                  detail::group_min(row, off, i));
}
float value(const RowCodec& c, const std::byte* row, std::int64_t i) {
  const std::int64_t off = group_scales_offset(4, c.n);
  return std::fma(static_cast<float>(nibble(row, i)) - c.zero_point, group_scale(row, off, i, 4),
                  detail::group_min(row, off, i));
}
}  // namespace int4_g32a

// ---- dynamic-parameter rules -----------------------------------------------------------------

// compressed-tensors' symmetric calculate_qparams on the format's grid, in fp32:
// amax / (bit_range / 2), a zero scale becoming finfo(fp32).eps.
float symmetric_scale(const KvFormatTraits& t, float amax) {
  const float bit_range = t.code_max - t.code_min;
  const float s = amax / (bit_range / 2.0f);
  return s == 0.0f ? std::numeric_limits<float>::epsilon() : s;
}

// generate_gparam(±headroom · amax): the reference's own function.
float nvfp4_global_scale(const KvFormatTraits&, float amax) {
  const float a = kNvfp4DynamicHeadroom * amax;
  return generate_gparam(Tensor::from_f32({1}, std::span<const float>(&a, 1)),
                         Tensor::from_f32({1}, std::span<const float>(&a, 1)))
      .f32()[0];
}

// The byte-scaled formats: block scales whose largest, at the first write's amax times nvfp4's
// headroom, is the byte's largest, kTop (E4M3: 448; the log scale: 1):
// global = kTop · |lowest level| / (headroom · amax) (fp32; capped at FLT_MAX; the lowest level
// is code_min: -127, int5's -16).
template <BlockScale kKind>
float byte_scale_global(const KvFormatTraits& t, float amax) {
  const float g = ByteScaleRule<kKind>::kTop * -t.code_min / (kNvfp4DynamicHeadroom * amax);
  return std::min(g, std::numeric_limits<float>::max());
}
constexpr auto* e4m3_global_scale = &byte_scale_global<BlockScale::kE4m3>;
constexpr auto* log_scale_global = &byte_scale_global<BlockScale::kLog>;

// ---- the table, indexed by KvFormat ----------------------------------------------------------

constexpr std::array<KvFormatTraits, kKvFormatCount> kTable{{
    {.format = KvFormat::kF32,
     .name = "f32",
     .aliases = {"fp32", "float32", "float"},
     .bits = 32,
     .block_values = 1,
     .block_bytes = 4,
     .quantize_row = F32::quantize,
     .unscaled = F32::unscaled,
     .value = scaled<F32::unscaled>},
    {.format = KvFormat::kBF16,
     .name = "bf16",
     .aliases = {"bfloat16"},
     .bits = 16,
     .block_values = 1,
     .block_bytes = 2,
     .quantize_row = BF16::quantize,
     .unscaled = BF16::unscaled,
     .value = scaled<BF16::unscaled>},
    {.format = KvFormat::kF16,
     .name = "f16",
     .aliases = {"fp16", "float16", "half"},
     .bits = 16,
     .block_values = 1,
     .block_bytes = 2,
     .quantize_row = F16::quantize,
     .unscaled = F16::unscaled,
     .value = scaled<F16::unscaled>},
    {.format = KvFormat::kFP8E4M3,
     .name = "fp8",
     .aliases = {"fp8_e4m3", "e4m3", "float8_e4m3fn", "f8_e4m3", "fp8e4m3"},
     .bits = 8,
     .block_values = 1,
     .block_bytes = 1,
     .needs_scale = true,
     .code_min = -kFp8Max,
     .code_max = kFp8Max,
     .args = {.exists = true, .is_float = true, .num_bits = 8},
     .quantize_row = Fp8E4M3::quantize,
     .unscaled = Fp8E4M3::unscaled,
     .value = scaled<Fp8E4M3::unscaled>,
     .dynamic_param = symmetric_scale},
    {.format = KvFormat::kINT8,
     .name = "int8",
     .aliases = {"i8"},
     .bits = 8,
     .block_values = 1,
     .block_bytes = 1,
     .needs_scale = true,
     .supports_zero_point = true,
     .code_min = kInt8Min,
     .code_max = kInt8Max,
     .int8_query_codes = KvIntCodes::kInt8,
     .int8_query_multiple = 1,
     .args = {.exists = true, .num_bits = 8},
     .quantize_row = quantize_int8,
     .unscaled = unscaled_int8,
     .value = scaled<unscaled_int8>,
     .dynamic_param = symmetric_scale},
    {.format = KvFormat::kINT4,
     .name = "int4",
     .aliases = {"i4"},
     .bits = 4,
     .block_values = 2,
     .block_bytes = 1,
     .needs_scale = true,
     .supports_zero_point = true,
     .code_min = kInt4Min,
     .code_max = kInt4Max,
     .int8_query_codes = KvIntCodes::kInt4,
     .int8_query_multiple = 1,
     .args = {.exists = true, .num_bits = 4},
     .quantize_row = quantize_int4,
     .unscaled = unscaled_int4,
     .value = scaled<unscaled_int4>,
     .dynamic_param = symmetric_scale},
    {.format = KvFormat::kNVFP4,
     .name = "nvfp4",
     .aliases = {"fp4", "nvfp4_e2m1"},
     .bits = 4,
     .block_values = 16,
     .block_bytes = 9,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -kFp4Max,
     .code_max = kFp4Max,
     .int8_query_codes = KvIntCodes::kE2m1Nibbles,
     .int8_query_multiple = 64,
     .args = {.exists = true, .is_float = true, .num_bits = 4, .group_size = 16},
     .quantize_row = quantize_nvfp4,
     .unscaled = unscaled_nvfp4,
     .value = value_nvfp4,
     .dynamic_param = nvfp4_global_scale},
    {.format = KvFormat::kFP8E5M2,
     .name = "fp8_e5m2",
     .aliases = {"e5m2", "float8_e5m2", "f8_e5m2", "fp8e5m2"},
     .bits = 8,
     .block_values = 1,
     .block_bytes = 1,
     .needs_scale = true,
     .code_min = -kFp8E5M2Max,
     .code_max = kFp8E5M2Max,
     .quantize_row = Fp8E5M2::quantize,
     .unscaled = Fp8E5M2::unscaled,
     .value = scaled<Fp8E5M2::unscaled>,
     .dynamic_param = symmetric_scale},
    {.format = KvFormat::kINT8G32,
     .name = "int8_g32",
     .aliases = {"q8_0", "i8_g32"},
     .bits = 8,
     .block_values = 32,
     .block_bytes = 34,
     .head_dim_multiple = 32,
     .code_min = -127.0f,
     .code_max = 127.0f,
     .quantize_row = Int8G32::quantize,
     .unscaled = Int8G32::unscaled,
     .value = Int8G32::value},
    {.format = KvFormat::kINT4G32,
     .name = "int4_g32",
     .aliases = {"q4_0", "i4_g32"},
     .bits = 4,
     .block_values = 32,
     .block_bytes = 18,
     .head_dim_multiple = 32,
     .code_min = -8.0f,
     .code_max = 7.0f,
     .quantize_row = Int4G32::quantize,
     .unscaled = Int4G32::unscaled,
     .value = Int4G32::value},
    {.format = KvFormat::kINT4G32A,
     .name = "int4_g32a",
     .aliases = {"q4_1", "i4_g32a"},
     .bits = 4,
     .block_values = 32,
     .block_bytes = 20,
     .head_dim_multiple = 32,
     .code_min = 0.0f,
     .code_max = 15.0f,
     .block_min = true,
     .quantize_row = int4_g32a::quantize,
     .unscaled = int4_g32a::unscaled,
     .value = int4_g32a::value},
    {.format = KvFormat::kINT4G32Mse,
     .name = "int4_g32_mse",
     .aliases = {"q4_0_mse", "i4_g32_mse"},
     .bits = 4,
     .block_values = 32,
     .block_bytes = 18,
     .head_dim_multiple = 32,
     .code_min = -8.0f,
     .code_max = 7.0f,
     .quantize_row = Int4G32Mse::quantize,
     .unscaled = Int4G32Mse::unscaled,
     .value = Int4G32Mse::value},
    {.format = KvFormat::kINT5G32,
     .name = "int5_g32",
     .aliases = {"q5_0", "i5_g32"},
     .bits = 5,
     .block_values = 32,
     .block_bytes = 22,
     .head_dim_multiple = 32,
     .code_min = -16.0f,
     .code_max = 15.0f,
     .quantize_row = Int5G32::quantize,
     .unscaled = Int5G32::unscaled,
     .value = Int5G32::value},
    {.format = KvFormat::kINT5G32Mse,
     .name = "int5_g32_mse",
     .aliases = {"q5_0_mse", "i5_g32_mse"},
     .bits = 5,
     .block_values = 32,
     .block_bytes = 22,
     .head_dim_multiple = 32,
     .code_min = -16.0f,
     .code_max = 15.0f,
     .quantize_row = Int5G32Mse::quantize,
     .unscaled = Int5G32Mse::unscaled,
     .value = Int5G32Mse::value},
    {.format = KvFormat::kINT4G64Mse,
     .name = "int4_g64_mse",
     .aliases = {"i4_g64_mse"},
     .bits = 4,
     .block_values = 64,
     .block_bytes = 34,
     .head_dim_multiple = 64,
     .code_min = -8.0f,
     .code_max = 7.0f,
     .quantize_row = Int4G64Mse::quantize,
     .unscaled = Int4G64Mse::unscaled,
     .value = Int4G64Mse::value},
    {.format = KvFormat::kINT5G64Mse,
     .name = "int5_g64_mse",
     .aliases = {"i5_g64_mse"},
     .bits = 5,
     .block_values = 64,
     .block_bytes = 42,
     .head_dim_multiple = 64,
     .code_min = -16.0f,
     .code_max = 15.0f,
     .quantize_row = Int5G64Mse::quantize,
     .unscaled = Int5G64Mse::unscaled,
     .value = Int5G64Mse::value},
    {.format = KvFormat::kNL4G32,
     .name = "nl4_g32",
     .aliases = {"iq4_nl", "nl4"},
     .bits = 4,
     .block_values = 32,
     .block_bytes = 18,
     .head_dim_multiple = 32,
     .code_min = -127.0f,
     .code_max = 113.0f,
     .quantize_row = NonLinear<4, 32, kNl4>::quantize,
     .unscaled = NonLinear<4, 32, kNl4>::unscaled,
     .value = NonLinear<4, 32, kNl4>::value},
    {.format = KvFormat::kNL4G64,
     .name = "nl4_g64",
     .aliases = {"iq4_nl_g64"},
     .bits = 4,
     .block_values = 64,
     .block_bytes = 34,
     .head_dim_multiple = 64,
     .code_min = -127.0f,
     .code_max = 113.0f,
     .quantize_row = NonLinear<4, 64, kNl4>::quantize,
     .unscaled = NonLinear<4, 64, kNl4>::unscaled,
     .value = NonLinear<4, 64, kNl4>::value},
    {.format = KvFormat::kNL3G32,
     .name = "nl3_g32",
     .aliases = {"nl3"},
     .bits = 3,
     .block_values = 32,
     .block_bytes = 14,
     .head_dim_multiple = 32,
     .code_min = -127.0f,
     .code_max = 95.0f,
     .quantize_row = NonLinear<3, 32, kNl3>::quantize,
     .unscaled = NonLinear<3, 32, kNl3>::unscaled,
     .value = NonLinear<3, 32, kNl3>::value},
    {.format = KvFormat::kNL3G64,
     .name = "nl3_g64",
     .bits = 3,
     .block_values = 64,
     .block_bytes = 26,
     .head_dim_multiple = 64,
     .code_min = -127.0f,
     .code_max = 95.0f,
     .quantize_row = NonLinear<3, 64, kNl3>::quantize,
     .unscaled = NonLinear<3, 64, kNl3>::unscaled,
     .value = NonLinear<3, 64, kNl3>::value},
    {.format = KvFormat::kNL4G32E4M3,
     .name = "nl4_g32_e4m3",
     .aliases = {"nl4_e4m3"},
     .bits = 4,
     .block_values = 32,
     .block_bytes = 17,
     .head_dim_multiple = 32,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -127.0f,
     .code_max = 113.0f,
     .quantize_row = NonLinear<4, 32, kNl4, BlockScale::kE4m3>::quantize,
     .unscaled = NonLinear<4, 32, kNl4, BlockScale::kE4m3>::unscaled,
     .value = NonLinear<4, 32, kNl4, BlockScale::kE4m3>::value,
     .dynamic_param = e4m3_global_scale},
    {.format = KvFormat::kNL4G16E4M3,
     .name = "nl4_g16_e4m3",
     .bits = 4,
     .block_values = 16,
     .block_bytes = 9,
     .head_dim_multiple = 16,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -127.0f,
     .code_max = 113.0f,
     .quantize_row = NonLinear<4, 16, kNl4, BlockScale::kE4m3>::quantize,
     .unscaled = NonLinear<4, 16, kNl4, BlockScale::kE4m3>::unscaled,
     .value = NonLinear<4, 16, kNl4, BlockScale::kE4m3>::value,
     .dynamic_param = e4m3_global_scale},
    {.format = KvFormat::kINT5G32E4M3,
     .name = "int5_g32_e4m3",
     .bits = 5,
     .block_values = 32,
     .block_bytes = 21,
     .head_dim_multiple = 32,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -16.0f,
     .code_max = 15.0f,
     .quantize_row = NonLinear<5, 32, kInt5, BlockScale::kE4m3>::quantize,
     .unscaled = NonLinear<5, 32, kInt5, BlockScale::kE4m3>::unscaled,
     .value = NonLinear<5, 32, kInt5, BlockScale::kE4m3>::value,
     .dynamic_param = e4m3_global_scale},
    {.format = KvFormat::kNL4G32Log,
     .name = "nl4_g32_log",
     .aliases = {"nl4_log"},
     .bits = 4,
     .block_values = 32,
     .block_bytes = 17,
     .head_dim_multiple = 32,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -127.0f,
     .code_max = 113.0f,
     .quantize_row = NonLinear<4, 32, kNl4, BlockScale::kLog>::quantize,
     .unscaled = NonLinear<4, 32, kNl4, BlockScale::kLog>::unscaled,
     .value = NonLinear<4, 32, kNl4, BlockScale::kLog>::value,
     .dynamic_param = log_scale_global},
    {.format = KvFormat::kNL4G16Log,
     .name = "nl4_g16_log",
     .bits = 4,
     .block_values = 16,
     .block_bytes = 9,
     .head_dim_multiple = 16,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -127.0f,
     .code_max = 113.0f,
     .quantize_row = NonLinear<4, 16, kNl4, BlockScale::kLog>::quantize,
     .unscaled = NonLinear<4, 16, kNl4, BlockScale::kLog>::unscaled,
     .value = NonLinear<4, 16, kNl4, BlockScale::kLog>::value,
     .dynamic_param = log_scale_global},
    {.format = KvFormat::kINT5G32Log,
     .name = "int5_g32_log",
     .bits = 5,
     .block_values = 32,
     .block_bytes = 21,
     .head_dim_multiple = 32,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -16.0f,
     .code_max = 15.0f,
     .quantize_row = NonLinear<5, 32, kInt5, BlockScale::kLog>::quantize,
     .unscaled = NonLinear<5, 32, kInt5, BlockScale::kLog>::unscaled,
     .value = NonLinear<5, 32, kInt5, BlockScale::kLog>::value,
     .dynamic_param = log_scale_global},
    {.format = KvFormat::kNL3G32Log,
     .name = "nl3_g32_log",
     .aliases = {"nl3_log"},
     .bits = 3,
     .block_values = 32,
     .block_bytes = 13,
     .head_dim_multiple = 32,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -127.0f,
     .code_max = 95.0f,
     .quantize_row = NonLinear<3, 32, kNl3, BlockScale::kLog>::quantize,
     .unscaled = NonLinear<3, 32, kNl3, BlockScale::kLog>::unscaled,
     .value = NonLinear<3, 32, kNl3, BlockScale::kLog>::value,
     .dynamic_param = log_scale_global},
    {.format = KvFormat::kNL3G16Log,
     .name = "nl3_g16_log",
     .bits = 3,
     .block_values = 16,
     .block_bytes = 7,
     .head_dim_multiple = 32,
     .needs_scale = true,
     .global_scale = true,
     .code_min = -127.0f,
     .code_max = 95.0f,
     .quantize_row = NonLinear<3, 16, kNl3, BlockScale::kLog>::quantize,
     .unscaled = NonLinear<3, 16, kNl3, BlockScale::kLog>::unscaled,
     .value = NonLinear<3, 16, kNl3, BlockScale::kLog>::value,
     .dynamic_param = log_scale_global},
}};

constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<std::size_t>(kTable[i].format) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kTable rows must follow the KvFormat order");

}  // namespace

std::span<const KvFormatTraits> kv_format_table() { return kTable; }

const KvFormatTraits& kv_format_traits(KvFormat format) {
  const auto i = static_cast<std::size_t>(format);
  KVQ_CHECK(i < kTable.size(), "bad KvFormat {}", i);
  return kTable[i];
}

std::optional<KvFormat> parse_kv_format(std::string_view text) {
  std::string lower = ascii_lower(text);
  if (lower.starts_with("torch.")) lower.erase(0, 6);
  if (lower.empty()) return std::nullopt;
  for (const auto& t : kTable)
    if (t.name == lower) return t.format;
  for (const auto& t : kTable)
    for (std::string_view alias : t.aliases)
      if (alias == lower) return t.format;
  return std::nullopt;
}

std::size_t kv_row_bytes(KvFormat format, std::int64_t head_dim) {
  const auto& t = kv_format_traits(format);
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(head_dim, 0));
  const auto bits = static_cast<std::size_t>(t.bits);
  const auto block = static_cast<std::size_t>(t.block_values);
  // What a block holds beyond its values: its in-row scale (nvfp4: 1 byte).
  const std::size_t scale_bytes = static_cast<std::size_t>(t.block_bytes) - block * bits / 8;
  const auto code_bytes =
      static_cast<std::size_t>(detail::group_scales_offset(t.bits, static_cast<std::int64_t>(n)));
  return code_bytes + (n + block - 1) / block * scale_bytes;
}

double kv_bytes_per_value(KvFormat format) {
  const auto& t = kv_format_traits(format);
  return static_cast<double>(t.block_bytes) / t.block_values;
}

std::optional<KvFormat> kv_format_for_args(const QuantizationArgs& args) {
  const bool is_float = args.type == QuantizationType::kFloat;
  for (const auto& t : kTable)
    if (t.args.exists && t.args.is_float == is_float && t.args.num_bits == args.num_bits)
      return t.format;
  return std::nullopt;
}

std::optional<QuantizationArgs> kv_quantization_args(KvFormat format, bool symmetric,
                                                     QuantizationStrategy strategy) {
  const KvArgsForm& form = kv_format_traits(format).args;
  if (!form.exists) return std::nullopt;
  QuantizationArgs a;
  a.num_bits = form.num_bits;
  a.type = form.is_float ? QuantizationType::kFloat : QuantizationType::kInt;
  a.symmetric = symmetric;
  a.strategy = strategy;
  if (form.group_size > 0) {
    a.strategy = QuantizationStrategy::kTensorGroup;
    a.group_size = form.group_size;
    a.dynamic = DynamicType::kLocal;
    a.scale_dtype = DType::kF8E4M3;
  }
  a.validate();
  return a;
}

float kv_dynamic_param(KvFormat format, float amax) {
  const KvFormatTraits& t = kv_format_traits(format);
  KVQ_CHECK(t.dynamic_param != nullptr, "{} has no dynamic parameter", t.name);
  return t.dynamic_param(t, amax);
}

bool kv_int8_query_supported(KvFormat format, std::int64_t n) {
  const KvFormatTraits& t = kv_format_traits(format);
  return t.supports_int8_query() && n > 0 && n % t.int8_query_multiple == 0;
}

void quantize_row(KvFormat format, const float* x, std::int64_t n, float scale, float zero_point,
                  float global_scale, std::byte* out) {
  kv_format_traits(format).quantize_row({format, n, scale, zero_point, global_scale}, x, out);
}

void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out) {
  const RowCodec codec{format, n, scale, zero_point, global_scale};
  const auto value = kv_format_traits(format).value;
  for (std::int64_t i = 0; i < n; ++i) out[i] = value(codec, in, i);
}

}  // namespace kvq::quant
