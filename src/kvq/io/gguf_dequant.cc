#include "kvq/io/gguf_dequant.h"

#include <cstring>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"

namespace kvq::io {
namespace {

// Block layouts as in ggml-common.h. All fields are little-endian; fp16 scales are raw bits.
constexpr int kQK = 32;    // elements per block of the legacy formats
constexpr int kQKK = 256;  // elements per super-block of the k-quants

struct BlockQ4_0 {
  std::uint16_t d;           // fp16 scale
  std::uint8_t qs[kQK / 2];  // element j in the low nibble of qs[j], j+16 in the high one
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  std::uint16_t d, m;  // fp16 scale, fp16 minimum
  std::uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];  // bit j: the 5th bit of element j
  std::uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  std::uint16_t d, m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

constexpr int kScaleBytesK = 12;  // 8 six-bit scales + 8 six-bit minimums

struct BlockQ4_K {
  std::uint16_t d, dmin;  // super-block scales for the scales and the minimums
  std::uint8_t scales[kScaleBytesK];
  std::uint8_t qs[kQKK / 2];  // 4 groups of 32 bytes: sub-block 2g low nibbles, 2g+1 high
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[kScaleBytesK];
  std::uint8_t qh[kQKK / 8];  // bit s of qh[l]: the 5th bit of sub-block s, position l
  std::uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  std::uint8_t ql[kQKK / 2];      // low 4 bits
  std::uint8_t qh[kQKK / 4];      // high 2 bits
  std::int8_t scales[kQKK / 16];  // one 8-bit scale per 16 elements
  std::uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

template <class Block>
Block load_block(const std::uint8_t* src, std::int64_t index) {
  Block b;
  std::memcpy(&b, src + index * static_cast<std::int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

inline float h2f(std::uint16_t bits) { return fp16_to_f32(bits); }

void dequant_q4_0(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = h2f(b.d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>((b.qs[j] & 0x0F) - 8);
      y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_1(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = h2f(b.d);
    const float m = h2f(b.m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * static_cast<float>(b.qs[j] & 0x0F) + m;
      y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
    }
  }
}

inline std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dequant_q5_0(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = h2f(b.d);
    const std::uint32_t qh = load_u32(b.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo - 16);
      y[j + kQK / 2] = d * static_cast<float>(hi - 16);
    }
  }
}

void dequant_q5_1(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = h2f(b.d);
    const float m = h2f(b.m);
    const std::uint32_t qh = load_u32(b.qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo) + m;
      y[j + kQK / 2] = d * static_cast<float>(hi) + m;
    }
  }
}

void dequant_q8_0(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQK) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = h2f(b.d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// The 6-bit scale and minimum of sub-block s (0..7) of a Q4_K / Q5_K super-block: sub-blocks
// 0..3 use the low 6 bits of bytes s and s+4; 4..7 combine a nibble of byte s+4 with the top two
// bits of bytes s-4 (scale) and s (minimum).
inline void scale_min_k4(int s, const std::uint8_t* q, std::uint8_t* sc, std::uint8_t* m) {
  if (s < 4) {
    *sc = q[s] & 63;
    *m = q[s + 4] & 63;
  } else {
    *sc = static_cast<std::uint8_t>((q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4));
    *m = static_cast<std::uint8_t>((q[s + 4] >> 4) | ((q[s] >> 6) << 4));
  }
}

void dequant_q4_k(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQKK) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = h2f(b.d);
    const float dmin = h2f(b.dmin);
    for (int s = 0; s < 8; ++s) {
      std::uint8_t sc, m;
      scale_min_k4(s, b.scales, &sc, &m);
      const float ds = d * static_cast<float>(sc);
      const float ms = dmin * static_cast<float>(m);
      const std::uint8_t* q = b.qs + (s / 2) * 32;
      const int shift = (s % 2) * 4;
      for (int l = 0; l < 32; ++l) {
        y[s * 32 + l] = ds * static_cast<float>((q[l] >> shift) & 0x0F) - ms;
      }
    }
  }
}

void dequant_q5_k(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQKK) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = h2f(b.d);
    const float dmin = h2f(b.dmin);
    for (int s = 0; s < 8; ++s) {
      std::uint8_t sc, m;
      scale_min_k4(s, b.scales, &sc, &m);
      const float ds = d * static_cast<float>(sc);
      const float ms = dmin * static_cast<float>(m);
      const std::uint8_t* q = b.qs + (s / 2) * 32;
      const int shift = (s % 2) * 4;
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0F) | (((b.qh[l] >> s) & 1) << 4);
        y[s * 32 + l] = ds * static_cast<float>(v) - ms;
      }
    }
  }
}

void dequant_q6_k(const std::uint8_t* src, float* y, std::int64_t nb) {
  for (std::int64_t i = 0; i < nb; ++i, y += kQKK) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = h2f(b.d);
    // Two halves of 128 elements; within a half, group g (0..3) of 32 elements takes the low
    // (g < 2) or high (g >= 2) nibble of ql[64·half + 32·(g % 2) + l] and bits 2g..2g+1 of
    // qh[32·half + l].
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* ql = b.ql + half * 64;
      const std::uint8_t* qh = b.qh + half * 32;
      for (int g = 0; g < 4; ++g) {
        const int ql_shift = (g / 2) * 4;
        for (int l = 0; l < 32; ++l) {
          const int e = half * 128 + g * 32 + l;
          const int lo = (ql[(g % 2) * 32 + l] >> ql_shift) & 0x0F;
          const int hi = (qh[l] >> (2 * g)) & 0x03;
          const float ds = d * static_cast<float>(b.scales[e / 16]);
          y[e] = ds * static_cast<float>((lo | (hi << 4)) - 32);
        }
      }
    }
  }
}

}  // namespace

bool ggml_can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(GgmlType type, const void* src_void, float* dst, std::int64_t n) {
  const auto& traits = ggml_traits(type);
  if (n < 0 || n % traits.block_size != 0) {
    fail<InvalidArgument>("dequantize_row: {} elements is not a multiple of the {} block size {}",
                          n, traits.name, traits.block_size);
  }
  const auto* src = static_cast<const std::uint8_t*>(src_void);
  const std::int64_t nb = n / traits.block_size;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = fp16_to_f32(h);
      }
      return;
    case GgmlType::kBF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::kQ4_0:
      dequant_q4_0(src, dst, nb);
      return;
    case GgmlType::kQ4_1:
      dequant_q4_1(src, dst, nb);
      return;
    case GgmlType::kQ5_0:
      dequant_q5_0(src, dst, nb);
      return;
    case GgmlType::kQ5_1:
      dequant_q5_1(src, dst, nb);
      return;
    case GgmlType::kQ8_0:
      dequant_q8_0(src, dst, nb);
      return;
    case GgmlType::kQ4_K:
      dequant_q4_k(src, dst, nb);
      return;
    case GgmlType::kQ5_K:
      dequant_q5_k(src, dst, nb);
      return;
    case GgmlType::kQ6_K:
      dequant_q6_k(src, dst, nb);
      return;
    default:
      break;
  }
  fail<NotSupported>(
      "dequantization of GGML type {} is not supported (supported: F32, F16, "
      "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
      traits.name);
}

Tensor dequantize_tensor(const GgufFile& file, const GgufTensorInfo& info) {
  if (!ggml_can_dequantize(info.type)) {
    fail<NotSupported>(
        "{}: tensor '{}' has GGML type {}, which kvq cannot dequantize (supported: "
        "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
        file.source(), info.name, ggml_type_name(info.type));
  }
  Tensor out(DType::kF32, info.shape());
  const auto bytes = file.tensor_bytes(info);
  const std::int64_t numel = info.numel();
  if (numel == 0) return out;
  const std::int64_t row = info.ne.empty() ? 1 : static_cast<std::int64_t>(info.ne[0]);
  const std::int64_t rows = numel / row;
  const auto& traits = ggml_traits(info.type);
  const std::int64_t row_bytes = row / traits.block_size * traits.type_size;
  float* dst = out.f32();  // [rows, row]
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    dequantize_row(info.type, bytes.data() + r * row_bytes, dst + r * row, row);
  }
  return out;
}

}  // namespace kvq::io
