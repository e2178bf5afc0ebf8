// How attention kernels see one head's cached K or V rows, whatever the packed format.
//
// The KV cache (kvq/model/kv_cache.h) owns the bytes; a KvRowsView describes the rows of one
// (layer, batch, kv head) stream: `capacity` rows of kv_row_bytes(format, head_dim) bytes in one
// of the quant::KvFormat layouts (kvq/quant/formats.h), plus the stream's dequantization
// parameters. A kernel either reads rows directly with dot_rows / axpy_rows (decode,
// cpu/kv_row_kernels.h) or
// decodes a tile to fp32 in a small scratch buffer with load_kv_rows (prefill) — never a
// dequantized copy of the whole cache. Both see exactly the dequantized values below, so a
// packed cache computes what an fp32 cache holding those values (fake quantization) computes.
//
// Sliding-window layers keep a RING of rows (KvCacheConfig::window_chunk): position t is stored in
// row t % ring_rows, so rows [t0, t0 + n) are contiguous only up to the ring's end. A PAGED cache
// (kvq serve's block pool, model/kv_block_pool.h) keeps its rows in fixed-size blocks: row r in
// blocks[r / block_rows] at block_offset + (r % block_rows) · row_bytes. Kernels take rows in runs
// (run()) that end where the ring wraps or a block ends, which changes no result (scores are per
// row, P·V adds rows in order).
//
// Decoded value of element i of row t:
//   f32/bf16/f16/fp8/int8/int4:  (code_i - zero_point) * scale
//   nvfp4:                       e2m1_i * (block_scale_i / global_scale)
// except the stream's first `sink_rows` rows (attention sinks, KvCacheConfig::sink_tokens): those
// are bf16 rows at sink_data whatever `format` is, and `data`'s rows [0, sink_rows) are unused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvq/quant/formats.h"

namespace kvq::kernels {

using quant::KvFormat;

struct KvRowsView {
  KvFormat format = KvFormat::kF32;
  const std::byte* data = nullptr;  // [capacity or ring_rows, row_bytes]; unused when paged
  std::int64_t row_bytes = 0;       // kv_row_bytes(format, head_dim)
  std::int64_t head_dim = 0;
  float scale = 1.0f;         // stream dequant scale (ignored by nvfp4)
  float zero_point = 0.0f;    // stream zero point, an integer code (int8 / int4 only)
  float global_scale = 1.0f;  // nvfp4 stream global scale (> 0)
  // K rows of an int8 / int4 / nvfp4 cache opted in to approximate decode scores: the query is
  // quantized to int8 and the products run on integer instructions (cpu/int8_query.h). Prefill
  // and V stay exact.
  bool int8_query_scores = false;
  // > 0: a ring of this many rows (position t in row t % ring_rows); 0: row t is position t.
  std::int64_t ring_rows = 0;
  // Paged: row r lives in block r / block_rows, at blocks[r / block_rows] + block_offset +
  // (r % block_rows) · row_bytes. nullptr: rows are contiguous from `data`.
  const std::byte* const* blocks = nullptr;
  std::int64_t block_rows = 0;
  std::int64_t block_offset = 0;
  // Rows [0, sink_rows) are bf16 rows of kv_row_bytes(kBF16, head_dim) bytes at sink_data.
  const std::byte* sink_data = nullptr;
  std::int64_t sink_rows = 0;

  // The stream's sink rows as a view of their own (bf16, unscaled; row t = position t).
  KvRowsView sinks() const {
    KvRowsView s;
    s.format = KvFormat::kBF16;
    s.data = sink_data;
    s.row_bytes = static_cast<std::int64_t>(quant::kv_row_bytes(KvFormat::kBF16, head_dim));
    s.head_dim = head_dim;
    return s;
  }
  // How many of rows [t0, t0 + n) are sink rows (they come first).
  std::int64_t sink_count(std::int64_t t0, std::int64_t n) const {
    return sink_rows > t0 ? (sink_rows - t0 < n ? sink_rows - t0 : n) : 0;
  }

  // The stream's dequantization, for dot_rows / axpy_rows.
  quant::RowCodec codec() const { return {format, head_dim, scale, zero_point, global_scale}; }
  // Position t's row (a sink position's is unused: see sinks()).
  const std::byte* row(std::int64_t t) const {
    const std::int64_t r = ring_rows > 0 ? t % ring_rows : t;
    if (blocks != nullptr)
      return blocks[r / block_rows] + block_offset + r % block_rows * row_bytes;
    return data + r * row_bytes;
  }
  // How many of positions [t0, t0 + n) lie in consecutive rows from row(t0) (n unless the ring
  // wraps or a block ends inside them).
  std::int64_t run(std::int64_t t0, std::int64_t n) const {
    std::int64_t r = t0, to_end = n;
    if (ring_rows > 0) {
      r = t0 % ring_rows;
      to_end = ring_rows - r;
    }
    if (blocks != nullptr && block_rows - r % block_rows < to_end)
      to_end = block_rows - r % block_rows;
    return n < to_end ? n : to_end;
  }

  // Positions [t0, t0 + n) as fp32 pointer when the storage is fp32 with unit scale and they are
  // consecutive rows, else nullptr.
  const float* f32_rows(std::int64_t t0, std::int64_t n) const {
    if (format != KvFormat::kF32 || scale != 1.0f || sink_rows > 0 || run(t0, n) < n)
      return nullptr;
    return reinterpret_cast<const float*>(row(t0));
  }
};

// Decodes rows [t0, t0 + n) to fp32 with kernels::dequantize_row (fast path): out [n, head_dim].
void load_kv_rows(const KvRowsView& view, std::int64_t t0, std::int64_t n, float* out);
// The same with the scalar codec (quant::dequantize_row), for ref kernels.
void load_kv_rows_ref(const KvRowsView& view, std::int64_t t0, std::int64_t n, float* out);

}  // namespace kvq::kernels
