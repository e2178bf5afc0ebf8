// The packed KV-cache storage formats: ONE codec table (like ggml's type traits), one row per
// format with its data and its scalar codec functions. The fast CPU kernels that read packed
// rows live in kvq/kernels (cpu/kv_row_kernels.h, their own per-format table in
// cpu/kv_format_simd.inc); this file is their ground truth.
//
// A row is the head_dim values of one token of one kv head. Scales are per row stream (per
// tensor or per head, as compressed-tensors' kv_cache_scheme defines them) and passed in; NVFP4
// and the group formats (int8_g32, int4_g32, int4_g32a: llama.cpp's q8_0 / q4_0 / q4_1) keep
// per-block scales inside the row. Row layouts (little-endian, n = head_dim):
//   f32 / bf16 / f16  n plain values of x / scale (scale is 1 for an unquantized cache)
//   fp8   n E4M3 bytes (float8_e4m3fn)
//   fp8_e5m2  n E5M2 bytes (float8_e5m2, vLLM's other FP8 KV dtype)
//   int8  n int8 values q (symmetric: zero point 0; asymmetric: integer zp in [-128, 127])
//   int4  ceil(n/2) bytes: element 2i in the LOW nibble, 2i+1 in the high nibble, each stored
//         as q + 8 (unsigned 0..15, q in [-8, 7]) — the pack order of compressed-tensors'
//         pack_fp4_to_uint8 / pack_to_int32 with their unsigned offset. An odd n pads a 8 (q=0).
//   nvfp4 ceil(n/2) bytes of E2M1 sign-magnitude nibble pairs (same order as int4), then
//         ceil(n/16) E4M3 block scales, one per 16 values. Scales live in their own region at
//         the end of the row rather than after each 8-byte block: the nibble region is then
//         exactly the int4 layout (one unpack kernel, 32-byte aligned loads for head_dim 64),
//         the scales are one contiguous load, and it mirrors compressed-tensors' checkpoint
//         layout (`*_packed` [.., n/2] + `*_scale` [.., n/16]). Same bytes per row either way.
//   int8_g32  n int8 codes q in [-127, 127], then ceil(n/32) fp16 block scales d (8.5 bits per
//         value, the bytes of llama.cpp's q8_0 with the scales moved to the end of the row)
//   int4_g32  ceil(n/2) bytes of int4 nibbles (exactly the int4 layout: q + 8, q in [-8, 7]), then
//         ceil(n/32) fp16 block scales d (4.5 bits per value, like q4_0; q4_0 orders its nibbles
//         differently: kvq keeps one nibble order for every format)
//   int4_g32a ceil(n/2) bytes of UNSIGNED nibbles q in [0, 15] (int4 order, no offset), then per
//         block of 32 an fp16 scale d and an fp16 minimum m (5 bits per value, like q4_1)
//   int5_g32 / int5_g32_mse  per block of 32 values, 20 bytes of codes q + 16 (q in [-16, 15]):
//         16 bytes of their low nibbles (int4 order within the block), then 4 bytes of their
//         fifth bits (value j of the block: bit j % 8 of byte j / 8); then ceil(n/32) fp16 block
//         scales d at the end of the row (5.5 bits per value, like llama.cpp's q5_0; a block's
//         codes stay together so a decoder needs no row length)
//   int4_g64_mse / int5_g64_mse  the codes of int4_g32 / int5_g32, then ceil(n/64) fp16 block
//         scales: one scale per 64 values (4.25 / 5.25 bits per value; head_dim 64: one per row
//         of a head, the per-token-head scale of vLLM's int4_per_token_head)
//   nl4_g32 / nl4_g64  ceil(n/2) bytes of UNSIGNED nibbles c in [0, 15] (int4 order, no offset),
//         indices into llama.cpp's iq4_nl codebook (kNl4Levels), then ceil(n/32) / ceil(n/64) fp16
//         block scales (4.5 / 4.25 bits per value; nl4_g32 is iq4_nl's block with kvq's order)
//   nl3_g32 / nl3_g64  per block of 32 values 12 bytes of 3-bit codes c in [0, 7] indexing
//         kNl3Levels: 8 bytes of their low two bits (value j at bit 2 (j % 4) of byte j / 4), then
//         4 bytes of their third bits (bit j % 8 of byte j / 8); then ceil(n/32) / ceil(n/64) fp16
//         block scales (3.5 / 3.25 bits per value)
//   nl4_g32_e4m3 / nl4_g16_e4m3  nl4's nibbles, then ceil(n/32) / ceil(n/16) E4M3 block scales
//         (signed, one byte each; 4.25 / 4.5 bits per value; nl4_g16_e4m3 has nvfp4's layout) over
//         a per-stream fp32 global scale, as nvfp4's (dynamic: fixed by the first write)
//   int5_g32_e4m3  int5_g32's codes (q + 16 in nibbles and fifth bits per block of 32), then
//         ceil(n/32) E4M3 block scales over a global scale (5.25 bits per value)
//   nl4_g32_log / nl4_g16_log / int5_g32_log  the same layouts with a log-scale byte in place of
//         each E4M3 block scale (sign bit over a magnitude e: 2^((e - 127) / 16), e = 0 is 0;
//         detail::kLogScaleTable)
//   nl3_g32_log / nl3_g16_log  nl3's codes (bit planes per block of 32), then ceil(n/32) /
//         ceil(n/16) log-scale bytes (3.25 / 3.5 bits per value)
//   The fp16-scaled group formats are dynamic and need no calibration: each block's scale comes
//   from the row itself when it is written, so they have no per-stream parameter
//   (KvScales::kNone, like f16). The KV cache needs head_dim to be a multiple of their block
//   (KvFormatTraits::head_dim_multiple); the codec itself pads a partial last block.
//
// Quantization math is compressed-tensors 0.19.0's `_quantize` in fp32 (see fake_quantize.h):
//   int:  q = round_half_even(clamp(x / scale + zp, code_min, code_max))
//   fp8:  q = e4m3(clamp(x / scale + zp, -448, 448))
//   fp8_e5m2: q = e5m2(clamp(x / scale + zp, -57344, 57344)) (finfo(float8_e5m2).max; no
//         QuantizationArgs name E5M2, see formats.cc)
//   nvfp4 (tensor_group, group 16, `global_scale` = the stream's fp32 global scale):
//         block_scale = e4m3(clamp(global_scale * (amax_block / 6), ±448)), 0 -> 0.125
//         q = e2m1(clamp(x / (block_scale / global_scale), -6, 6))
//   int8_g32 (kvq's rule, per block of 32; NaN is ignored by the amax):
//         d = fp16(min(amax_block / 127, 65504)) (round to nearest even)
//         q = d == 0 ? 0 : round_half_even(clamp(x / d, -127, 127))
//   int4_g32 (llama.cpp q4_0's scale: m = the block's value of largest magnitude, the first one
//         on ties, keeping its sign; NaN is ignored):
//         d = fp16(clamp(m / -8, ±65504)), q = d == 0 ? 0 : round_half_even(clamp(x / d, -8, 7))
//         so m gets code -8 and the other side reaches +7 (KLD 0.076 vs 0.094 for a symmetric
//         amax / 7 on the default model: docs/numerics.md). Both divide by the STORED fp16 scale
//         (q4_0 multiplies by 1 / the fp32 one), so codes are the nearest to what decodes.
//   int4_g32_mse (kvq's: int4_g32's layout and decode, its scale chosen per block by a clipping
//         search): the candidates d_r = fp16(m · r / -8) for r = 1, 0.98, ..., 0.70 (16 ratios,
//         m as in int4_g32), each scored by the squared error of its codes
//         sum_i (q_i · d_r - x_i)^2 (NaN ignored); the smallest error wins, the first (largest r)
//         on ties, so a block int4_g32 already codes exactly keeps its scale. Same bits as
//         int4_g32; KLD 0.045 -> 0.040 on the default model with R2 + R3 (docs/results.md).
//   int5_g32 (llama.cpp q5_0's scale): d = fp16(clamp(m / -16, ±65504)), m as in int4_g32,
//         q = d == 0 ? 0 : round_half_even(clamp(x / d, -16, 15)); int5_g32_mse searches the
//         same 16 ratios as int4_g32_mse on this grid.
//   int4_g64_mse / int5_g64_mse: int4_g32_mse / int5_g32_mse's search over blocks of 64 values.
//   nl4_g32 / nl4_g64 (non-linear 4-bit: the 16 levels L of llama.cpp's iq4_nl, -127 ... 113,
//         denser near 0 where rotated keys and values are dense): element = L[c] · d. d is chosen
//         per block by int4_g32_mse's clipping search with m / -127 in place of m / -8
//         (candidates d_r = fp16(m · r / -127), r = 1, 0.98, ..., 0.70; squared error of the
//         codes each gives; first on ties), and c is the level nearest x / d, the lower one on a
//         tie (c = the number of midpoints (L[k] + L[k+1]) / 2 below x / d); NaN stores the code
//         of level 1 (decodes to d), d == 0 stores it for every value (decodes to 0). The
//         levels cost nothing at decode (one vpermps, as e2m1) and lower the squared error of
//         Gaussian blocks by ~15 % against int4_g32_mse, of heavier-tailed ones by ~30 %.
//   nl4_g32_e4m3 / nl4_g16_e4m3 (nl4 with one-byte block scales, so a block of 32 costs what
//         nl4_g64's 64 do): element = L[c] · (s / global_scale), s the block's E4M3 scale. The
//         search scores, largest first, the five E4M3 codes s around the nearest one to
//         global_scale · m / -127 (one step above it, it, three below: ratios about 1.1 ... 0.75,
//         as the fp16 search's); same squared error, codes and ties as nl4. A block whose scale
//         rounds to 0 stores 0 and code 8 everywhere (decodes to 0). The global scale is the
//         stream's dynamic parameter: 448 · 127 / (kNvfp4DynamicHeadroom · amax) of its first
//         write, so block scales sit in E4M3's normal range (2^-6 ... 448) for blocks from
//         amax / 4 down to ~1e-4 · amax. Squared error on Gaussian blocks ~1.03x nl4_g32's.
//   int5_g32_e4m3: the same rule on the 32 levels -16 ... 15 (the extreme on -16, global
//         448 · 16 / (headroom · amax); a tie takes the lower level, not int5_g32's half to even).
//   nl4_g32_log / nl4_g16_log / int5_g32_log / nl3_g32_log / nl3_g16_log: the E4M3-scaled rule
//         on a finer byte: steps of 2^(1/16) (4.4 %) instead of E4M3's 6.7-12.5 %, so the search
//         scores the codes from one step above the nearest to g · m / L[0] down to six below
//         (ratios 1.04 ... 0.77); the nearest is round(16 · log2 |s|) + 127 clamped to [1, 127]
//         (only s = 0 gives 0: a block below the smallest scale, ~1/235 of the largest, is coded
//         on it). Global scale 1 · |lowest level| / (headroom · amax): the first write's blocks
//         sit 2 octaves below the top, and blocks down to ~1/60 of its amax keep a full-resolution
//         scale.
//   nl3_g32 / nl3_g64: nl4's rule with kvq's 8 levels (kNl3Levels: -127, -75, -43, -18, 4, 27,
//         55, 95, a Lloyd-Max codebook for blocks scaled this way; NaN, zero blocks and padding
//         take level 4, the one nearest 0).
//   int4_g32a (llama.cpp q4_1: asymmetric per block; NaN is ignored by min / max):
//         d = fp16(min((max - min) / 15, 65504)), m = fp16(clamp(min, ±65504))
//         q = d == 0 ? 0 : round_half_even(clamp((x - m) / d, 0, 15)), decoded fma(q, d, m)
// and dequantization is `(q - zp) * scale` (nvfp4: q * (block_scale / global_scale); the group
// formats: q * d), so
// dequantize_row(quantize_row(x)) equals kvq::quant::fake_quantize bit for bit, except that a
// zero may come back with the other sign (int codes have no -0).
//
// NaN policy: fp8 / fp8_e5m2 keep NaN (a NaN code); int8/int4 store q = 0 for NaN (what torch's
// `.to(int8)` gives on x86, i.e. compressed-tensors' compressed checkpoint), so NaN decodes as
// -zp * scale; an nvfp4 block containing a NaN gets a NaN block scale, so the whole block decodes
// to NaN (as fake_quantize's NaN amax does). ±inf saturate to the format's largest value; in a
// group format a ±inf makes its block's scale the largest fp16 (the block's other values then
// round to 0 or ±1 codes), and NaN stores q = 0 (decodes to ±0; int4_g32a: to the block's m).
//
// Adding a format: an enumerator (and kKvFormatCount) here, a row and its codec functions in
// formats.cc, a row in kernels/cpu/kv_format_simd.inc (docs/design.md, "Where things go").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvq::quant {

struct QuantizationArgs;
enum class QuantizationStrategy;

enum class KvFormat : std::uint8_t {
  kF32,
  kBF16,
  kF16,
  kFP8E4M3,
  kINT8,
  kINT4,
  kNVFP4,
  kFP8E5M2,
  kINT8G32,
  kINT4G32,
  kINT4G32A,
  kINT4G32Mse,
  kINT5G32,
  kINT5G32Mse,
  kINT4G64Mse,
  kINT5G64Mse,
  kNL4G32,
  kNL4G64,
  kNL3G32,
  kNL3G64,
  kNL4G32E4M3,
  kNL4G16E4M3,
  kINT5G32E4M3,
  kNL4G32Log,
  kNL4G16Log,
  kINT5G32Log,
  kNL3G32Log,
  kNL3G16Log,
};
inline constexpr std::size_t kKvFormatCount = 28;  // the number of enumerators above

// Dynamic nvfp4 global scales leave this factor of headroom above the first write's amax
// (model/kv_cache.h).
inline constexpr float kNvfp4DynamicHeadroom = 4.0f;

// How to dequantize the rows of one stream: row j's element c is (code - zero_point) * scale
// (nvfp4: e2m1 * (block_scale / global_scale)), exactly dequantize_row's value.
struct RowCodec {
  KvFormat format = KvFormat::kF32;
  std::int64_t n = 0;  // values per row (head_dim); rows are kv_row_bytes(format, n) apart
  float scale = 1.0f;
  float zero_point = 0.0f;
  // The divisor of byte block scales: nvfp4's and the E4M3- / log-scaled formats' per-stream
  // parameter; ignored by every other format (the fp16-scaled group formats have none).
  float global_scale = 1.0f;
  // Optional, read by the fast kernels only (kernels::prepare_block_scales): for a format with
  // byte block scales, entry e is that byte's scale / global_scale, looked up instead of one
  // division per block (the same quotients, so the same bits). nullptr: the kernels divide.
  const float* block_scales = nullptr;
};

// The integer codes int8-query dot products multiply a K row by (kernels/cpu/int8_query.h).
enum class KvIntCodes : std::uint8_t {
  kNone,         // no integer form: int8-query scores are not defined
  kInt8,         // one signed byte per value
  kInt4,         // int4 nibbles (code + 8)
  kE2m1Nibbles,  // nvfp4: 2 · e2m1 is an integer in [-12, 12], scaled per 16-value block
};

// The compressed-tensors QuantizationArgs whose fake quantization a format's round trip is.
struct KvArgsForm {
  bool exists = false;    // false: QuantizationArgs cannot express the format
  bool is_float = false;  // type float (else int)
  int num_bits = 0;
  int group_size = 0;  // > 0: tensor_group with this group, local dynamic, fp8 scales
};

struct KvFormatTraits {
  KvFormat format;
  // "f32", "bf16", "f16", "fp8", "int8", "int4", "nvfp4", "fp8_e5m2", "int8_g32", "int4_g32"
  std::string_view name;
  std::array<std::string_view, 6> aliases;  // parse_kv_format also accepts these ("" = unused)
  // Layout: a block of block_values values takes block_bytes bytes, its in-row scale included
  // (nvfp4: 16 values, 8 + 1 bytes); a row is ceil(n * bits / 8) bytes of values followed by
  // ceil(n / block_values) in-row scales (kv_row_bytes).
  int bits;          // bits per value, block scales excluded
  int block_values;  // values per block (1 for element formats, 2 for int4, 16 for nvfp4, 32 for
                     // the group formats)
  int block_bytes;   // bytes per block incl. its in-row scale (nvfp4: 8 + 1 = 9; int4_g32: 16 + 2)
  // The KV cache refuses a head_dim that is not a multiple of this (0: any head_dim).
  int head_dim_multiple;
  bool needs_scale;  // quantized: a per-stream parameter must be calibrated (or dynamic)
  // The per-stream parameter is a global scale over in-row block scales (nvfp4); the stream
  // scale is then unused (1).
  bool global_scale;
  bool supports_zero_point;  // asymmetric (zero point) quantization is meaningful
  // The grid x / scale + zero_point is clamped to before rounding (0, 0 for plain formats);
  // zero points are integers in it, and dynamic scales map the first write's amax onto it.
  float code_min, code_max;
  // Its in-row blocks also carry an fp16 minimum after their scale (int4_g32a): element i is
  // fma(code, block_scale, block_min).
  bool block_min;
  KvIntCodes int8_query_codes;  // kNone: no int8-query scores
  int int8_query_multiple;      // int8-query rows need head_dim a multiple of this
  KvArgsForm args;

  // The scalar codec (the ground truth of every kernel), n = codec.n:
  //   quantize_row  x [n] -> out [kv_row_bytes(format, n)]
  //   unscaled      element i before the stream scale: (code - zero_point), the value of a
  //                 plain format, nvfp4 e2m1 * block_scale
  //   value         element i dequantized: (code - zero_point) * scale (nvfp4: e2m1 *
  //                 (block_scale / global_scale))
  void (*quantize_row)(const RowCodec& codec, const float* x, std::byte* out);
  float (*unscaled)(const std::byte* row, std::int64_t n, std::int64_t i, float zero_point);
  float (*value)(const RowCodec& codec, const std::byte* row, std::int64_t i);
  // The parameter a dynamic stream fixes from the absmax (> 0, finite) of its first write
  // (model/kv_cache.h); null when the format has no per-stream parameter.
  float (*dynamic_param)(const KvFormatTraits& traits, float amax);

  bool supports_int8_query() const { return int8_query_codes != KvIntCodes::kNone; }
  // The row holds per-block scales after its codes (nvfp4, int8_g32, int4_g32, int4_g32a).
  constexpr bool has_row_scales() const { return block_bytes * 8 > block_values * bits; }
};

const KvFormatTraits& kv_format_traits(KvFormat format);
std::span<const KvFormatTraits> kv_format_table();
// Canonical names plus aliases ("fp8_e4m3", "e4m3", "float8_e4m3fn", "float32", "bfloat16",
// "float16", "fp32", "fp16", "nvfp4", "fp4"...), case-insensitive; nullopt when unknown.
std::optional<KvFormat> parse_kv_format(std::string_view text);
inline std::string_view kv_format_name(KvFormat format) { return kv_format_traits(format).name; }

// Bytes of one row of head_dim values, in-row block scales included (partial blocks padded).
std::size_t kv_row_bytes(KvFormat format, std::int64_t head_dim);
// Average bytes per value with in-row scales (nvfp4: 9/16), for reporting.
double kv_bytes_per_value(KvFormat format);

// The packed format of a compressed-tensors k/v scheme: float 8 -> fp8 (E4M3: the only 8-bit
// float QuantizationArgs express), int 8 -> int8, int 4 -> int4, float 4 -> nvfp4 (kvq's
// extension: an fp4 scheme is stored as NVFP4); nullopt for anything else.
std::optional<KvFormat> kv_format_for_args(const QuantizationArgs& args);
// The validated QuantizationArgs whose fake_quantize equals the format's round trip, with this
// symmetry and strategy (nvfp4: tensor_group 16, local dynamic, fp8 scales, whatever the
// strategy); nullopt when QuantizationArgs cannot express the format (plain formats).
std::optional<QuantizationArgs> kv_quantization_args(KvFormat format, bool symmetric,
                                                     QuantizationStrategy strategy);
// The format's dynamic-parameter rule at this absmax (> 0, finite): a symmetric scale
// amax / ((code_max - code_min) / 2), compressed-tensors' calculate_qparams on the format's grid
// (amax / 448, amax / 127.5, amax / 7.5), or nvfp4's global scale
// generate_gparam(±kNvfp4DynamicHeadroom · amax). The format must need a scale.
float kv_dynamic_param(KvFormat format, float amax);
// Whether int8-query decode scores are defined for rows of this format and length.
bool kv_int8_query_supported(KvFormat format, std::int64_t n);

// Encodes one row: x [n] -> out [kv_row_bytes(format, n)]. `scale` / `zero_point` are the
// stream's (ignored by nvfp4; zero_point ignored by f32/bf16/f16); `global_scale` is used by
// the formats with byte block scales only (nvfp4, *_e4m3, *_log).
void quantize_row(KvFormat format, const float* x, std::int64_t n, float scale, float zero_point,
                  float global_scale, std::byte* out);
// Decodes one row with the scalar codec: in [kv_row_bytes] -> out [n] = (q - zp) * scale
// (nvfp4: see above). kernels::dequantize_row is the fast path with the same values.
void dequantize_row(KvFormat format, const std::byte* in, std::int64_t n, float scale,
                    float zero_point, float global_scale, float* out);

}  // namespace kvq::quant
