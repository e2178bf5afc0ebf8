#include "kvq/kernels/cpu/int8_query.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvq/core/error.h"
#include "kvq/kernels/cpu/cpu_features.h"
#include "kvq/kernels/ref/kv_rows_ref.h"

namespace kvq::kernels {

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

void check_int8_query_args(const RowCodec& codec, const Int8Query& q) {
  KVQ_CHECK(quant::kv_int8_query_supported(codec.format, codec.n),
            "int8 query dot products need int8 or int4 rows, or nvfp4 rows of a multiple of 64 "
            "values, not {} x {}",
            quant::kv_format_name(codec.format), codec.n);
  KVQ_CHECK(codec.n == q.n, "int8 query of {} values against rows of {}", q.n, codec.n);
}

bool int8_query_dot_is_fast(const RowCodec& codec) {
  const CpuFeatures& f = cpu_features();
  if (!(f.avx512f && f.avx512bw && f.avx512vnni)) return false;
  // The VNNI kernels: int8 rows of any length, nibble rows of one or two 64-value chunks.
  switch (quant::kv_format_traits(codec.format).int8_query_codes) {
    case quant::KvIntCodes::kInt8:
      return true;
    case quant::KvIntCodes::kInt4:
    case quant::KvIntCodes::kE2m1Nibbles:
      return codec.n == 64 || codec.n == 128;
    case quant::KvIntCodes::kNone:
      break;
  }
  return false;
}

void dot_rows_int8_query(const RowCodec& codec, const Int8Query& q, const std::byte* rows,
                         std::int64_t nt, float* scores, std::int64_t ld) {
  if (int8_query_dot_is_fast(codec)) {
    check_int8_query_args(codec, q);
    avx512vnni::dot_rows_int8_query(codec, q, rows, nt, scores, ld);
    return;
  }
  ref::dot_rows_int8_query(codec, q, rows, nt, scores, ld);
}

}  // namespace kvq::kernels
