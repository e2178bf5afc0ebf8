#include "kvq/quant/int8_query.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvq/core/error.h"
#include "kvq/core/float8.h"
#include "kvq/quant/formats_simd.h"

namespace kvq::quant {

void quantize_query_int8(const float* q, std::int64_t nq, std::int64_t n, Int8Query* out) {
  out->nq = nq;
  out->n = n;
  out->codes.resize(static_cast<std::size_t>(nq * n));
  out->scale.resize(static_cast<std::size_t>(nq));
  out->sum.resize(static_cast<std::size_t>(nq));
  for (std::int64_t i = 0; i < nq; ++i) {
    const float* qi = q + i * n;
    float amax = 0.0f;
    bool finite = true;
    for (std::int64_t c = 0; c < n; ++c) {
      amax = std::max(amax, std::fabs(qi[c]));
      finite = finite && std::isfinite(qi[c]);
    }
    if (!finite) {
      // A NaN / Inf query (a diverged model) has no int8 form; a NaN scale makes every score
      // NaN, as the exact path's would be, instead of casting NaN to int8 (undefined).
      std::fill_n(out->codes.begin() + i * n, n, std::int8_t{0});
      out->scale[static_cast<std::size_t>(i)] = std::numeric_limits<float>::quiet_NaN();
      out->sum[static_cast<std::size_t>(i)] = 0;
      continue;
    }
    const float s = amax > 0.0f ? amax / 127.0f : 1.0f;
    std::int32_t sum = 0;
    for (std::int64_t c = 0; c < n; ++c) {
      // Round half to even by the 1.5 * 2^23 trick (|q / s| <= 127; nearbyint is a libm call
      // on baseline x86-64, which made quantizing a query cost as much as scoring 256 rows).
      constexpr float kMagic = 12582912.0f;
      const float r = std::clamp((qi[c] / s + kMagic) - kMagic, -127.0f, 127.0f);
      out->codes[static_cast<std::size_t>(i * n + c)] = static_cast<std::int8_t>(r);
      sum += static_cast<std::int32_t>(r);
    }
    out->scale[static_cast<std::size_t>(i)] = s;
    out->sum[static_cast<std::size_t>(i)] = sum;
  }
}

namespace {

void check_args(const RowCodec& codec, const Int8Query& q) {
  KVQ_CHECK(int8_query_rows_supported(codec.format, codec.n),
            "int8 query dot products need int8 or int4 rows, or nvfp4 rows of a multiple of 64 "
            "values, not {} x {}",
            kv_format_name(codec.format), codec.n);
  KVQ_CHECK(codec.n == q.n, "int8 query of {} values against rows of {}", q.n, codec.n);
}

// The nvfp4 semantics of int8_query.h, one query row against one row.
float nvfp4_score(const std::int8_t* qi, const std::byte* row, std::int64_t n, float factor) {
  float acc[16] = {};
  for (std::int64_t t = 0; t < n; t += 64) {
    for (int l = 0; l < 16; ++l) {
      const std::int64_t first = t + 8 * (l % 8) + (l / 8);  // E(l) = first + 2m, m < 4
      std::int32_t sum = 0;
      for (int m = 0; m < 4; ++m) {
        const std::int64_t c = first + 2 * m;
        const auto w = static_cast<std::int32_t>(2.0f * e2m1_to_f32(detail::nibble(row, c)));
        sum += std::int32_t{qi[c]} * w;
      }
      acc[l] = std::fma(static_cast<float>(sum), detail::nvfp4_block_scale(row, n, first), acc[l]);
    }
  }
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  return acc[0] * factor;
}

}  // namespace

namespace ref {

void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld) {
  check_args(codec, q);
  const std::int64_t n = codec.n;
  const bool int4 = codec.format == KvFormat::kINT4;
  const auto row_bytes = static_cast<std::int64_t>(kv_row_bytes(codec.format, n));
  if (codec.format == KvFormat::kNVFP4) {
    for (std::int64_t i = 0; i < q.nq; ++i) {
      const float factor = q.scale[static_cast<std::size_t>(i)] * (0.5f / codec.global_scale);
      for (std::int64_t j = 0; j < nt; ++j) {
        scores[i * ld + j] = nvfp4_score(q.codes.data() + i * n, rows + j * row_bytes, n, factor);
      }
    }
    return;
  }
  for (std::int64_t i = 0; i < q.nq; ++i) {
    const std::int8_t* qi = q.codes.data() + i * n;
    const float zq = codec.zero_point * static_cast<float>(q.sum[static_cast<std::size_t>(i)]);
    const float f = q.scale[static_cast<std::size_t>(i)] * codec.scale;
    for (std::int64_t j = 0; j < nt; ++j) {
      const std::byte* row = rows + j * row_bytes;
      std::int32_t dot = 0;
      for (std::int64_t c = 0; c < n; ++c) {
        const std::int32_t code = int4 ? std::int32_t{detail::nibble(row, c)} - 8
                                       : std::int32_t{static_cast<std::int8_t>(row[c])};
        dot += std::int32_t{qi[c]} * code;
      }
      scores[i * ld + j] = (static_cast<float>(dot) - zq) * f;
    }
  }
}

}  // namespace ref

bool int8_query_rows_supported(KvFormat format, std::int64_t n) {
  return format == KvFormat::kINT8 || format == KvFormat::kINT4 ||
         (format == KvFormat::kNVFP4 && n > 0 && n % 64 == 0);
}

bool int8_query_dot_is_fast(const RowCodec& codec) {
#if defined(__x86_64__)
  static const bool vnni = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
  }();
  if (!vnni) return false;
  return codec.format == KvFormat::kINT8 ||
         ((codec.format == KvFormat::kINT4 || codec.format == KvFormat::kNVFP4) &&
          (codec.n == 64 || codec.n == 128));
#else
  (void)codec;
  return false;
#endif
}

void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld) {
#if defined(__x86_64__)
  if (int8_query_dot_is_fast(codec)) {
    check_args(codec, q);
    detail::avx512vnni::dot_rows_int8_query(codec, q, rows, nt, scores, ld);
    return;
  }
#endif
  ref::dot_rows_int8_query(codec, q, rows, nt, scores, ld);
}

}  // namespace kvq::quant
