// 8- and 4-bit float codecs: FP8 E4M3 (float8_e4m3fn), FP8 E5M2 and FP4 E2M1.
//
// Encoding rounds to nearest even exactly as torch 2.14's `.to(float8_e4m3fn)` /
// `.to(float8_e5m2)` do (checked on every code and every rounding midpoint by
// tests/golden/core_float8 against goldens from torch). Overflow policy, as torch 2.14:
//  - E4M3 SATURATES: anything that rounds past 448, and ±inf, becomes ±448 (0x7e / 0xfe); NaN
//    becomes 0x7f / 0xff (sign kept). (Older torch releases produced NaN past 464; quantization
//    clamps to ±448 before the cast anyway, as compressed-tensors does, so both agree there.)
//  - E5M2 overflows to ±inf (past 61440 - 1 ulp); NaN becomes 0x7f / 0xff.
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
// The code of compressed-tensors' pack_fp4_to_uint8(cast_to_fp4(x)): threshold table with ties
// to the even mantissa, saturating at ±6 (inf too); sign bit only for x < 0 (-0 -> code 0,
// -0.1 -> code 8 = -0); NaN -> a zero magnitude (E2M1 has no NaN; an NVFP4 block holding a NaN
// gets a NaN block scale instead, see kvq/quant/formats.h).
std::uint8_t f32_to_e2m1(float value);

}  // namespace kvq
