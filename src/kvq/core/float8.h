// 8- and 4-bit float codecs: FP8 E4M3 (float8_e4m3fn), FP8 E5M2 and FP4 E2M1.
//
// Encoding rounds to nearest even exactly as torch's `.to(float8_e4m3fn)` does. Like torch, the
// E4M3 cast does NOT saturate: magnitudes that round above 448 become NaN (0x7f/0xff), so
// quantization clamps to ±448 first (compressed-tensors does the same).
#pragma once

#include <cstdint>

namespace kvq {

float e4m3_to_f32(std::uint8_t code);
std::uint8_t f32_to_e4m3(float value);
inline float round_to_e4m3(float value) { return e4m3_to_f32(f32_to_e4m3(value)); }

float e5m2_to_f32(std::uint8_t code);
std::uint8_t f32_to_e5m2(float value);

// FP4 E2M1: 1 sign bit, 2 exponent bits, 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6.
// Codes 0..15, sign in bit 3.
float e2m1_to_f32(std::uint8_t code);
// Rounds with compressed-tensors' threshold table (ties to even mantissa), saturating at ±6.
std::uint8_t f32_to_e2m1(float value);

}  // namespace kvq
