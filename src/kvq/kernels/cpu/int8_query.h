// Decode scores of INT8 / INT4 / NVFP4 K rows against a query quantized to int8 on the fly
// (opt-in, approximate: `--kv-cache int8:head+q8`).
//
// The exact decode path (kv_row_kernels.h: dot_rows) dequantizes every K code to fp32 and runs
// 16-wide float FMAs, so it reproduces a fake-quantized cache bit for bit. This path instead
// quantizes each query row symmetrically to int8 (one absmax scale per row, round half to even) and
// sums the integer products exactly on integer dot-product instructions (AVX-512 VNNI: one vpdpbusd
// is 64 multiply-adds). It is NOT exact: the query's rounding moves each element by at most
// max|q| / 254, so a score by at most Σ_c (s_i / 2) |x_c| (the bound the tests check); its cost
// in perplexity is measured in docs/benchmarks.md.
//   quantize_query_int8: codes[i, c] = clamp(round(q[i, c] / s_i), -127, 127),
//                        s_i = max_c |q[i, c]| / 127 (1 for an all-zero row), sum_i = Σ_c codes;
//                        a row with a NaN or Inf gets codes 0 and s_i = NaN (its scores are NaN)
//   dot_rows_int8_query: scores[i * ld + j] =
//       (float(Σ_c codes[i, c] * code_j[c]) - zero_point * float(sum_i)) * (s_i * codec.scale)
// where code_j is row j's signed codes (int4: nibble - 8). The integer sums are exact in any
// order, so the fast path equals the scalar twin (kernels/ref/kv_rows_ref.h) bit for bit.
// Which rows qualify, and how their codes are integers, is the codec table's
// (quant::KvFormatTraits::int8_query_codes / int8_query_multiple, kv_int8_query_supported).
//
// NVFP4 rows (n a multiple of 64): w = 2 · e2m1 is an integer in [-12, 12], so each 64-value
// chunk t gives 16 exact integer lane sums L_l = Σ_{c ∈ E(l)} codes[i, c] · w_c over
// E(l) = {64t + 8l + 2m} (l < 8) or {64t + 8(l - 8) + 2m + 1} (l >= 8), m < 4 — the nibble
// order of the fast path; all of E(l) share one 16-value block, of block scale bs_l. Then
//   acc_l = fma(float(L_l), bs_l, acc_l) over the chunks in order (acc_l = 0 first),
//   scores[i * ld + j] = tree(acc) * (s_i * (0.5f / codec.global_scale)),
// tree() adding lanes l and l + 8, then l and l + 4, l and l + 2, l and l + 1 (the pairing of
// one _mm512_reduce_add_ps). The fast path does exactly these float operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvq/quant/formats.h"

namespace kvq::kernels {

using quant::KvFormat;
using quant::RowCodec;

struct Int8Query {
  std::int64_t nq = 0, n = 0;
  std::vector<std::int8_t> codes;  // [nq, n]
  std::vector<float> scale;        // [nq]: q[i, c] ≈ codes[i, c] * scale[i]
  std::vector<std::int32_t> sum;   // [nq]: Σ_c codes[i, c] (for the K zero point)
};

// q [nq, n] -> out (resized; reusing one Int8Query avoids allocations per call).
void quantize_query_int8(const float* q, std::int64_t nq, std::int64_t n, Int8Query* out);

// quant::kv_int8_query_supported(codec.format, codec.n) must hold and codec.n == q.n (checked:
// KVQ_CHECK); rows as kv_row_kernels.h's dot_rows.
void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld);

// Whether dot_rows_int8_query has a fast path on this CPU (AVX-512 VNNI) for rows of this
// codec (int8: any length; int4 and nvfp4: head_dim 64 or 128); without one it runs the scalar
// twin, which is slower than the exact float path.
bool int8_query_dot_is_fast(const RowCodec& codec);

// The KVQ_CHECKs of dot_rows_int8_query (shared with the scalar twin).
void check_int8_query_args(const RowCodec& codec, const Int8Query& q);

namespace avx512vnni {
// Rows [0, nt) on AVX-512 VNNI. Call only when int8_query_dot_is_fast(codec).
void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld);
}  // namespace avx512vnni

}  // namespace kvq::kernels
