// AVX-512 VNNI scores for int8 / int4 / nvfp4 K rows against an int8 query (int8_query.h).
// Compiled for avx512f/bw/dq/vl + avx512vnni through a target pragma covering only this file's
// code; called only after the runtime check in int8_query.cc. The kernel is chosen by the
// codec table's integer-code layout (quant::KvFormatTraits::int8_query_codes).
//
// vpdpbusd multiplies unsigned by signed bytes, so each int8 K code c (signed) is read as c + 128
// (its sign bit flipped) and 128 · Σ query codes is taken off the integer sum afterwards; an int4
// nibble already is code + 8 (8 · Σ query codes). A row of 64 int8 codes is one load, one xor
// and one vpdpbusd per query head; 64 int4 codes are one 32-byte load split into low and high
// nibbles (elements 0, 2, .., 62 then 1, 3, .., 63: the query codes are permuted to match once
// per call). The 16 lanes of each head's sum are reduced 16 rows at a time (integer adds: exact
// in any order).
// GCC 12 reports its own _mm512_shuffle_f32x4 (`__Y = __Y`, inlined from the header, so the
// diagnostic is placed there) as uninitialized in the float block reduction: a false positive,
// silenced for this file before the header is read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kvq/kernels/cpu/int8_query.h"
#include "kvq/quant/kv_row_layout.h"

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored \
    "-Wmaybe-uninitialized"  // GCC 12's own intrinsics (see kv_rows_avx512.cc)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")

namespace kvq::kernels::avx512vnni {
namespace {

constexpr int kMaxQueries = 4;  // query heads kept in registers per pass over the rows
constexpr int kBlock = 16;      // rows reduced together

inline __m512 as_ps(__m512 v) { return v; }
inline __m512 as_ps(__m512i v) { return _mm512_castsi512_ps(v); }
// v as the vector type of the second argument (a tag: only its type matters).
inline __m512 like(__m512 v, __m512) { return v; }
inline __m512i like(__m512 v, __m512i) { return _mm512_castps_si512(v); }
template <typename V>
V from_ps(__m512 v) {
  return like(v, V());
}
inline __m512i add(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
inline __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }

// Lane r of the result: the sum of v[r]'s 16 lanes, for 16 vectors at once, int32 or float.
// The pairings of one _mm512_reduce_add_ps per vector (lane i + i+8, then i + i+4, i + i+2,
// i + i+1), two vectors combined per register (kv_rows_avx512.cc's reduce_block).
template <typename V>
V reduce_block(const V* v) {
  V t[8], u[4], z[2];
  for (int p = 0; p < 8; ++p) {  // 256-bit half b of t[p]: halves of v[2p] and v[2p + 1] added
    const __m512 a = as_ps(v[2 * p]), b = as_ps(v[2 * p + 1]);
    t[p] = add(from_ps<V>(_mm512_shuffle_f32x4(a, b, 0x44)),
               from_ps<V>(_mm512_shuffle_f32x4(a, b, 0xEE)));
  }
  for (int q = 0; q < 4; ++q) {  // 128-bit block L of u[q]: 4 partial sums of v[4q + L]
    const __m512 a = as_ps(t[2 * q]), b = as_ps(t[2 * q + 1]);
    u[q] = add(from_ps<V>(_mm512_shuffle_f32x4(a, b, 0x88)),
               from_ps<V>(_mm512_shuffle_f32x4(a, b, 0xDD)));
  }
  for (int r = 0; r < 2; ++r) {  // block L of z[r]: 2 sums of v[8r + L], 2 of v[8r + 4 + L]
    const __m512 a = as_ps(u[2 * r]), b = as_ps(u[2 * r + 1]);
    z[r] =
        add(from_ps<V>(_mm512_shuffle_ps(a, b, 0x44)), from_ps<V>(_mm512_shuffle_ps(a, b, 0xEE)));
  }
  const __m512 a = as_ps(z[0]), b = as_ps(z[1]);
  // Lane 4L + m of w: the sum of v[L + 4m].
  const V w =
      add(from_ps<V>(_mm512_shuffle_ps(a, b, 0x88)), from_ps<V>(_mm512_shuffle_ps(a, b, 0xDD)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return from_ps<V>(_mm512_permutexvar_ps(order, as_ps(w)));
}

// Σ_c q_k[c] · (code[c] + bias) over one row, as 16 lanes per query k (bias 128 for int8, 8 for
// int4). kChunks > 0: the row is exactly kChunks × 64 codes and the query codes stay in
// registers (head_dim 64 and 128, the common cases); kChunks == 0 (int8 only): any length, query
// codes reloaded and the tail masked.
template <int NQ, int kChunks, bool kInt4>
struct RowSums {
  static_assert(!kInt4 || kChunks > 0, "int4 rows need whole 64-value chunks");
  static constexpr int kHeld = kChunks > 0 ? kChunks : 1;
  __m512i q[NQ][kHeld];
  const std::int8_t* codes;  // [NQ, n]
  std::int64_t n;

  RowSums(const std::int8_t* query_codes, std::int64_t row_len) : codes(query_codes), n(row_len) {
    if constexpr (kChunks > 0) {
      for (int k = 0; k < NQ; ++k) {
        for (int c = 0; c < kChunks; ++c) {
          const std::int8_t* src = codes + k * n + 64 * c;
          if constexpr (kInt4) {  // the nibble order of a row: even elements, then odd ones
            alignas(64) std::int8_t perm[64];
            for (int e = 0; e < 32; ++e) {
              perm[e] = src[2 * e];
              perm[32 + e] = src[2 * e + 1];
            }
            q[k][c] = _mm512_load_si512(perm);
          } else {
            q[k][c] = _mm512_loadu_si512(src);
          }
        }
      }
    }
  }

  void operator()(const std::byte* row, __m512i* acc) const {
    if constexpr (kInt4) {
      const __m256i low = _mm256_set1_epi8(0x0f);
      __builtin_prefetch(row + 2048, 0, 0);
      for (int k = 0; k < NQ; ++k) acc[k] = _mm512_setzero_si512();
      for (int c = 0; c < kChunks; ++c) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c));
        const __m512i k8 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(x, low)),
                                              _mm256_and_si256(_mm256_srli_epi16(x, 4), low), 1);
        for (int k = 0; k < NQ; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], k8, q[k][c]);
      }
      return;
    }
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    // 2 KiB ahead, as the exact kernels do for 8-bit rows (kv_rows_simd_body.inc: one thread's
    // demand misses alone do not keep enough lines in flight).
    __builtin_prefetch(row + 2048, 0, 0);
    for (int k = 0; k < NQ; ++k) acc[k] = _mm512_setzero_si512();
    if constexpr (kChunks > 0) {
      for (int c = 0; c < kChunks; ++c) {
        const __m512i k8 = _mm512_xor_si512(_mm512_loadu_si512(row + 64 * c), flip);
        for (int k = 0; k < NQ; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], k8, q[k][c]);
      }
    } else {
      for (std::int64_t c = 0; c < n; c += 64) {
        const __mmask64 m = n - c >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - c)) - 1;
        // Masked-off bytes load as 0 and become 128, against query codes that load as 0.
        const __m512i k8 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, row + c), flip);
        for (int k = 0; k < NQ; ++k)
          acc[k] = _mm512_dpbusd_epi32(acc[k], k8, _mm512_maskz_loadu_epi8(m, codes + k * n + c));
      }
    }
  }
};

// Queries [i0, i0 + NQ).
template <int NQ, int kChunks, bool kInt4>
void run(const RowCodec& codec, const Int8Query& q, std::int64_t i0, const std::byte* rows,
         std::int64_t nt, float* scores, std::int64_t ld) {
  const std::int64_t n = q.n, row_bytes = kInt4 ? n / 2 : n;
  const RowSums<NQ, kChunks, kInt4> row_sums(q.codes.data() + i0 * n, n);
  std::int32_t bias[NQ];
  float zq[NQ], f[NQ];
  for (int k = 0; k < NQ; ++k) {
    const auto i = static_cast<std::size_t>(i0 + k);
    bias[k] = (kInt4 ? 8 : 128) * q.sum[i];
    zq[k] = codec.zero_point * static_cast<float>(q.sum[i]);
    f[k] = q.scale[i] * codec.scale;
  }
  std::int64_t j = 0;
  for (; j + kBlock <= nt; j += kBlock) {
    __m512i partial[NQ][kBlock];
    for (int b = 0; b < kBlock; ++b) {
      __m512i acc[NQ];
      row_sums(rows + (j + b) * row_bytes, acc);
      for (int k = 0; k < NQ; ++k) partial[k][b] = acc[k];
    }
    for (int k = 0; k < NQ; ++k) {
      // The twin's (float(dot) - zq) * f, 16 rows at once (no fma: the same two roundings).
      const __m512 dot = _mm512_cvtepi32_ps(
          _mm512_sub_epi32(reduce_block<__m512i>(partial[k]), _mm512_set1_epi32(bias[k])));
      _mm512_storeu_ps(
          scores + (i0 + k) * ld + j,
          _mm512_mul_ps(_mm512_sub_ps(dot, _mm512_set1_ps(zq[k])), _mm512_set1_ps(f[k])));
    }
  }
  for (; j < nt; ++j) {
    __m512i acc[NQ];
    row_sums(rows + j * row_bytes, acc);
    for (int k = 0; k < NQ; ++k) {
      const std::int32_t dot = _mm512_reduce_add_epi32(acc[k]) - bias[k];
      scores[(i0 + k) * ld + j] = (static_cast<float>(dot) - zq[k]) * f[k];
    }
  }
}

// NVFP4 rows of kChunks × 64 values (int8_query.h): per chunk, the nibbles in the int4 order
// mapped by vpshufb to w + 12 = 2 · e2m1 + 12 in [0, 24], one vpdpbusd per query head, the
// lanes' 12 · Σ query codes taken off, then scaled by their block scale into float lanes.
template <int NQ, int kChunks>
void run_nvfp4(const RowCodec& codec, const Int8Query& q, std::int64_t i0, const std::byte* rows,
               std::int64_t nt, float* scores, std::int64_t ld) {
  const std::int64_t n = q.n, row_bytes = n / 2 + n / 16;
  const RowSums<NQ, kChunks, true> codes(q.codes.data() + i0 * n, n);  // permuted query codes
  __m512i bias[NQ][kChunks];
  for (int k = 0; k < NQ; ++k) {
    for (int c = 0; c < kChunks; ++c) {
      const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1),
                                               codes.q[k][c]);  // Σ of each lane's 4 codes
      bias[k][c] = _mm512_mullo_epi32(sums, _mm512_set1_epi32(12));
    }
  }
  float factor[NQ];
  for (int k = 0; k < NQ; ++k)
    factor[k] = q.scale[static_cast<std::size_t>(i0 + k)] * (0.5f / codec.global_scale);
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i low = _mm256_set1_epi8(0x0f);
  // Lane l's block within a chunk: lanes 0-7 hold even elements 8l.., 8-15 odd ones.
  const __m512i block_of_lane = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3);
  const auto row_lanes = [&](const std::byte* row, __m512* acc) {
    __builtin_prefetch(row + 2048, 0, 0);
    for (int k = 0; k < NQ; ++k) acc[k] = _mm512_setzero_ps();
    const std::byte* block_scales = row + n / 2;
    for (int c = 0; c < kChunks; ++c) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c));
      const __m512i nib = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(x, low)),
                                             _mm256_and_si256(_mm256_srli_epi16(x, 4), low), 1);
      const __m512i w = _mm512_shuffle_epi8(lut, nib);
      const std::byte* s4 = block_scales + 4 * c;
      const __m128 b4 = _mm_setr_ps(quant::detail::kE4M3Table[static_cast<std::uint8_t>(s4[0])],
                                    quant::detail::kE4M3Table[static_cast<std::uint8_t>(s4[1])],
                                    quant::detail::kE4M3Table[static_cast<std::uint8_t>(s4[2])],
                                    quant::detail::kE4M3Table[static_cast<std::uint8_t>(s4[3])]);
      const __m512 bs = _mm512_permutexvar_ps(block_of_lane, _mm512_castps128_ps512(b4));
      for (int k = 0; k < NQ; ++k) {
        const __m512i lanes = _mm512_sub_epi32(
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, codes.q[k][c]), bias[k][c]);
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), bs, acc[k]);
      }
    }
  };
  std::int64_t j = 0;
  for (; j + kBlock <= nt; j += kBlock) {
    __m512 partial[NQ][kBlock];
    for (int b = 0; b < kBlock; ++b) {
      __m512 acc[NQ];
      row_lanes(rows + (j + b) * row_bytes, acc);
      for (int k = 0; k < NQ; ++k) partial[k][b] = acc[k];
    }
    for (int k = 0; k < NQ; ++k) {
      _mm512_storeu_ps(scores + (i0 + k) * ld + j,
                       _mm512_mul_ps(reduce_block(partial[k]), _mm512_set1_ps(factor[k])));
    }
  }
  for (; j < nt; ++j) {
    __m512 acc[NQ];
    row_lanes(rows + j * row_bytes, acc);
    for (int k = 0; k < NQ; ++k)
      scores[(i0 + k) * ld + j] = _mm512_reduce_add_ps(acc[k]) * factor[k];
  }
}

template <int NQ>
void run_any_length(const RowCodec& codec, const Int8Query& q, std::int64_t i0,
                    const std::byte* rows, std::int64_t nt, float* scores, std::int64_t ld) {
  const quant::KvIntCodes codes = quant::kv_format_traits(codec.format).int8_query_codes;
  if (codes == quant::KvIntCodes::kE2m1Nibbles) {  // n is 64 or 128 (int8_query_dot_is_fast)
    if (q.n == 64)
      run_nvfp4<NQ, 1>(codec, q, i0, rows, nt, scores, ld);
    else
      run_nvfp4<NQ, 2>(codec, q, i0, rows, nt, scores, ld);
    return;
  }
  const bool int4 = codes == quant::KvIntCodes::kInt4;
  if (q.n == 64)
    int4 ? run<NQ, 1, true>(codec, q, i0, rows, nt, scores, ld)
         : run<NQ, 1, false>(codec, q, i0, rows, nt, scores, ld);
  else if (q.n == 128)
    int4 ? run<NQ, 2, true>(codec, q, i0, rows, nt, scores, ld)
         : run<NQ, 2, false>(codec, q, i0, rows, nt, scores, ld);
  else
    run<NQ, 0, false>(codec, q, i0, rows, nt, scores, ld);  // int8 (see has_fast_path)
}

}  // namespace

void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld) {
  for (std::int64_t i0 = 0; i0 < q.nq; i0 += kMaxQueries) {
    switch (std::min<std::int64_t>(kMaxQueries, q.nq - i0)) {
      case 1:
        run_any_length<1>(codec, q, i0, rows, nt, scores, ld);
        break;
      case 2:
        run_any_length<2>(codec, q, i0, rows, nt, scores, ld);
        break;
      case 3:
        run_any_length<3>(codec, q, i0, rows, nt, scores, ld);
        break;
      default:
        run_any_length<4>(codec, q, i0, rows, nt, scores, ld);
        break;
    }
  }
}

}  // namespace kvq::kernels::avx512vnni

#pragma GCC diagnostic pop
#pragma GCC pop_options
