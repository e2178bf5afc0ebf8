#include "kvq/core/float8.h"

#include <cmath>
#include <limits>

namespace kvq {
namespace {

// Rounds |value| (finite, >= 0) to nearest even on a float grid with `mantissa_bits` explicit
// mantissa bits and exponent bias `bias`; returns the unsigned code (exponent field may exceed
// the format's range: callers map that to NaN or inf).
unsigned encode_magnitude(float magnitude, int mantissa_bits, int bias) {
  const float min_normal = std::ldexp(1.0f, 1 - bias);
  const float steps = static_cast<float>(1 << mantissa_bits);
  if (magnitude < min_normal) {
    // Subnormal grid: step 2^(1 - bias - mantissa_bits). nearbyint rounds half to even.
    const float q = std::nearbyint(std::ldexp(magnitude, bias - 1 + mantissa_bits));
    return static_cast<unsigned>(q);  // q == 2^mantissa_bits is the smallest normal: still right
  }
  int exponent = 0;
  const float fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent
  exponent -= 1;                                            // magnitude = (2 * fraction) * 2^e
  float mantissa = std::nearbyint((2.0f * fraction - 1.0f) * steps);
  if (mantissa == steps) {
    mantissa = 0.0f;
    exponent += 1;
  }
  return (static_cast<unsigned>(exponent + bias) << mantissa_bits) |
         static_cast<unsigned>(mantissa);
}

}  // namespace

float e4m3_to_f32(std::uint8_t code) {
  const bool negative = (code & 0x80u) != 0;
  const int exponent = (code >> 3) & 0xf;
  const int mantissa = code & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return negative ? -magnitude : magnitude;
}

std::uint8_t f32_to_e4m3(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return static_cast<std::uint8_t>(sign | 0x7fu);
  if (std::isinf(value)) return static_cast<std::uint8_t>(sign | 0x7eu);
  const unsigned code = encode_magnitude(std::fabs(value), 3, 7);
  // torch 2.14 saturates: anything that rounds past 448 is ±448 (0x7e), never NaN.
  if (code >= 0x7fu) return static_cast<std::uint8_t>(sign | 0x7eu);
  return static_cast<std::uint8_t>(sign | code);
}

float e5m2_to_f32(std::uint8_t code) {
  const bool negative = (code & 0x80u) != 0;
  const int exponent = (code >> 2) & 0x1f;
  const int mantissa = code & 0x3;
  float magnitude;
  if (exponent == 0x1f) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -16);
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 4.0f, exponent - 15);
  }
  return negative ? -magnitude : magnitude;
}

std::uint8_t f32_to_e5m2(float value) {
  const std::uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return static_cast<std::uint8_t>(sign | 0x7fu);
  if (std::isinf(value)) return static_cast<std::uint8_t>(sign | 0x7cu);
  const unsigned code = encode_magnitude(std::fabs(value), 2, 15);
  if (code >= 0x7cu) return static_cast<std::uint8_t>(sign | 0x7cu);  // overflow: inf
  return static_cast<std::uint8_t>(sign | code);
}

float e2m1_to_f32(std::uint8_t code) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kValues[code & 0x7u];
  return (code & 0x8u) ? -magnitude : magnitude;
}

std::uint8_t f32_to_e2m1(float value) {
  // pack_fp4_to_uint8(cast_to_fp4(x)): cast_to_fp4 returns sign(x) * |rounded|, so the sign bit
  // is set for x < 0 only (a -0 input gives +0, -0.1 gives -0); NaN stays NaN through the cast
  // and packs as a zero magnitude (its int8 conversion is 0 on x86).
  const std::uint8_t sign =
      value < 0.0f ? 0x8u : (std::isnan(value) && std::signbit(value) ? 0x8u : 0x0u);
  if (std::isnan(value)) return sign;
  const float a = std::fabs(value);
  std::uint8_t code;
  // compressed-tensors' cast_to_fp4 thresholds: closed intervals where the even mantissa wins.
  if (a <= 0.25f)
    code = 0;
  else if (a < 0.75f)
    code = 1;
  else if (a <= 1.25f)
    code = 2;
  else if (a < 1.75f)
    code = 3;
  else if (a <= 2.5f)
    code = 4;
  else if (a < 3.5f)
    code = 5;
  else if (a <= 5.0f)
    code = 6;
  else
    code = 7;  // > 5 (and inf): saturates to ±6
  return static_cast<std::uint8_t>(sign | code);
}

}  // namespace kvq
