// Byte-level helpers of the packed row layouts (formats.h), shared by the scalar codecs in
// formats.cc and the kernels that read packed rows (kvq/kernels/cpu): nibble order, the nvfp4
// block-scale region, the group formats' fp16 block scales, and the E4M3 and log-scale decode
// tables.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvq/core/dtype.h"

namespace kvq::quant::detail {

// E4M3 code -> fp32 at compile time (the bit manipulation of the SIMD decoders: normals rebias
// into the fp32 exponent, subnormals are m * 2^-9, S.1111.111 is NaN). e4m3_to_f32 uses ldexp,
// too slow for one block scale per 16 values; the tests check this table against it.
constexpr float e4m3_value(unsigned code) {
  const unsigned em = code & 0x7fu, sign = (code & 0x80u) << 24;
  if (em == 0x7fu) return std::bit_cast<float>(0x7fc00000u | sign);
  if (em < 8u) {
    const float v = static_cast<float>(em) / 512.0f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(((em << 20) + (120u << 23)) | sign);
}
inline constexpr std::array<float, 256> kE4M3Table = [] {
  std::array<float, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = e4m3_value(c);
  return t;
}();

// The log-scaled formats' block scale byte (nl4_g32_log, nl4_g16_log, int5_g32_log): sign bit
// 0x80 and a magnitude e in [0, 127]; e = 0 is 0, else 2^((e - 127) / 16) — 16 steps per octave
// (4.4 % apart, against E4M3's 6.7-12.5 %) from 1 down to 2^(-126/16) ~ 1/235.
inline constexpr int kLogScaleStepsPerOctave = 16;
inline constexpr std::array<float, 256> kLogScaleTable = [] {
  // 2^(k/16), k = 0 ... 15, rounded to fp32 (the format's definition: decoders read this table).
  constexpr std::array<float, 16> kFraction = {1.0f,        1.04427373f, 1.09050775f, 1.13878858f,
                                               1.18920708f, 1.24185777f, 1.29683959f, 1.35425556f,
                                               1.41421354f, 1.47682619f, 1.54221082f, 1.61049032f,
                                               1.68179286f, 1.75625217f, 1.8340081f,  1.91520655f};
  std::array<float, 256> t{};
  for (unsigned e = 1; e < 128; ++e) {
    // e - 127 = 16 q + k with k in [0, 16): 2^(k/16) * 2^q, q in [-8, 0] (exact halvings).
    const int steps = static_cast<int>(e) - 127 + 16 * 8;
    float v = kFraction[static_cast<unsigned>(steps % 16)];
    for (int q = steps / 16; q < 8; ++q) v *= 0.5f;
    t[e] = v;
    t[e | 0x80u] = -v;
  }
  t[0x80] = -0.0f;
  return t;
}();

inline constexpr std::int64_t kNvfp4Group = 16;  // values per nvfp4 block scale

inline std::int64_t nvfp4_scales_offset(std::int64_t n) { return (n + 1) / 2; }

// Code i of a nibble-packed row (int4, nvfp4): element 2k in the low nibble of byte k.
inline std::uint8_t nibble(const std::byte* row, std::int64_t i) {
  const auto b = static_cast<std::uint8_t>(row[i / 2]);
  return (i & 1) ? static_cast<std::uint8_t>(b >> 4) : static_cast<std::uint8_t>(b & 0xf);
}

// The E4M3 block scale of element i of an nvfp4 row of n values.
inline float nvfp4_block_scale(const std::byte* row, std::int64_t n, std::int64_t i) {
  return kE4M3Table[static_cast<std::uint8_t>(row[nvfp4_scales_offset(n) + i / kNvfp4Group])];
}

inline constexpr std::int64_t kGroupValues = 32;  // values per int8_g32 / int4_g32 block scale

// Bytes of one block of 32 codes in the formats whose codes are split in bit planes: int5
// (16 bytes of low nibbles + 4 of fifth bits) and nl3 (8 bytes of 2-bit pairs + 4 of third bits).
constexpr std::int64_t plane_block_bytes(int bits) { return bits == 5 ? 20 : 12; }

// Where a group format's fp16 block scales start: after the codes of n values of `bits` bits
// (int5_g32, nl3: whole blocks of 32 codes in bit planes, a partial last one padded).
constexpr std::int64_t group_scales_offset(int bits, std::int64_t n) {
  return bits == 5 || bits == 3 ? (n + kGroupValues - 1) / kGroupValues * plane_block_bytes(bits)
                                : (n * bits + 7) / 8;
}

// nl3 code i (0..7) of a row: per block of 32, byte j / 4 holds the low two bits of value j at
// bit 2 (j % 4), byte 8 + j / 8 its third bit at bit j % 8.
inline std::uint8_t code3(const std::byte* row, std::int64_t i) {
  const std::byte* block = row + (i / kGroupValues) * plane_block_bytes(3);
  const std::int64_t j = i % kGroupValues;
  const auto lo = static_cast<unsigned>(block[j / 4]) >> (2 * (j % 4)) & 3u;
  const auto hi = static_cast<unsigned>(block[8 + j / 8]) >> (j % 8) & 1u;
  return static_cast<std::uint8_t>(lo | hi << 2);
}

// The fp16 block scale of element i of a group-format row whose scales start at `offset`, with
// `stride` bytes per block (2: a scale; 4: a scale and a minimum, int4_g32a) and `group` values
// per block (32, or 64: int4_g64_mse / int5_g64_mse).
inline float group_scale(const std::byte* row, std::int64_t offset, std::int64_t i,
                         std::int64_t stride = 2, std::int64_t group = kGroupValues) {
  std::uint16_t h;
  std::memcpy(&h, row + offset + stride * (i / group), 2);
  return fp16_to_f32(h);
}
// nl4_g32 / nl4_g64: code c in [0, 15] decodes to kNl4Levels[c] · d (llama.cpp's iq4_nl levels,
// kvalues_iq4nl: denser near 0, one more step on the negative side, as q4_0's codes).
inline constexpr std::array<float, 16> kNl4Levels = {
    -127.0f, -104.0f, -83.0f, -65.0f, -49.0f, -35.0f, -22.0f, -10.0f,
    1.0f,    13.0f,   25.0f,  38.0f,  53.0f,  69.0f,  89.0f,  113.0f};

// nl3_g32 / nl3_g64: code c in [0, 7] decodes to kNl3Levels[c] · d. kvq's levels: a Lloyd-Max
// codebook for blocks scaled as nl4's are (the value of largest magnitude on -127), fitted to
// simulated Gaussian and Student-t(5) blocks and rounded (within 5 % of each fit's squared
// error; 8-10 % / 25 % below uniform int3 codes under the same scale search).
inline constexpr std::array<float, 8> kNl3Levels = {-127.0f, -75.0f, -43.0f, -18.0f,
                                                    4.0f,    27.0f,  55.0f,  95.0f};

// int4_g32a: the fp16 minimum after element i's block scale.
inline float group_min(const std::byte* row, std::int64_t offset, std::int64_t i) {
  std::uint16_t h;
  std::memcpy(&h, row + offset + 4 * (i / kGroupValues) + 2, 2);
  return fp16_to_f32(h);
}

}  // namespace kvq::quant::detail
