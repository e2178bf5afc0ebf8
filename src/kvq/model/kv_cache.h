// Per-layer KV cache, preallocated to a maximum context, stored PACKED in a quant::KvFormat.
//
// Layout of every layer's K and V buffer: [batch, kv_heads, capacity, row_bytes] where a row is
// the head_dim values of one token of one kv head in the format's row layout
// (kvq/quant/formats.h: f32 / bf16 / f16 / fp8 e4m3 / int8 / int4 nibbles / nvfp4 nibbles + E4M3
// block scales); a (batch, head) stream is `capacity` contiguous rows. Keys are stored post-RoPE,
// both before GQA head repetition, exactly what the key/value hooks saw (after they ran).
//
// Every (layer, kv head) stream of K and of V has its own dequantization parameters, shared by
// the batch: scale, zero point and, for nvfp4, a global scale. Rows are encoded at append time
// with quant::quantize_row(format, x, scale, zero_point, global_scale) — the same math as
// compressed-tensors' fake_quantize with those qparams — and attention reads the packed rows
// directly through KvRowsView (kvq/kernels/kv_rows.h).
//
// NVFP4 KV is kvq's own format: compressed-tensors rejects group / tensor_group strategies for
// attention ("Group quantization cannot be applied to attention"), so there is no reference kv
// scheme to follow. Like vLLM's nvfp4 KV cache, the per-16 E4M3 block scales are computed from the
// data when a row is written (compressed-tensors' tensor_group math: block_scale =
// e4m3(global_scale · amax_block / 6)); the per-stream fp32 global scale comes from calibration
// (amax-based, generate_gparam: 448 · 6 / amax) or, when not given, is fixed at the FIRST write to
// the stream after construction / reset(): 448 · 6 / (kNvfp4DynamicHeadroom · amax) with amax over
// that write's finite values for that head across the batch (global scale 1 when they are all 0).
// The headroom (4, a power of two) lets later tokens be up to 4× larger than the first ones
// before the block scales saturate at 448; it costs only the bottom two binades of the E4M3
// block-scale range (blocks 2^11× smaller than the first write's amax lose block-scale precision).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvq/kernels/kv_rows.h"
#include "kvq/quant/formats.h"

namespace kvq::model {

using quant::KvFormat;
using KvStorage = quant::KvFormat;  // former name, kept for existing callers

// Dynamic nvfp4 global scales leave this factor of headroom above the first write's amax.
inline constexpr float kNvfp4DynamicHeadroom = 4.0f;

// The quantization parameters of one layer's K and V streams. Every vector is empty (the
// default below), one value (per-tensor: the same for every kv head) or kv_heads values
// (per-head, compressed-tensors' attn_head strategy).
struct KvLayerScales {
  // Dequantization scales: required (finite, > 0) for fp8 / int8 / int4; default 1 for
  // f32 / bf16 / f16 (where a scale divides before the cast); unused by nvfp4.
  std::vector<float> k_scale, v_scale;
  // Integer zero points (asymmetric int8 / int4, within the code range); default 0; must be 0
  // for formats without zero points.
  std::vector<float> k_zero_point, v_zero_point;
  // nvfp4 only: fp32 global scales (finite, > 0); empty = fixed at the first write (see above).
  std::vector<float> k_global_scale, v_global_scale;
};

struct KvCacheSpec {
  KvFormat format = KvFormat::kF32;
  // Empty (every default: valid for f32 / bf16 / f16 / nvfp4) or one entry per layer.
  std::vector<KvLayerScales> layers;
};

// The per-head parameters of one buffer, [kv_heads] each.
struct KvStreamParams {
  std::vector<float> scale, zero_point;
  std::vector<float> global_scale;  // nvfp4; NaN = dynamic, fixed at the first write
};

// One layer's K or V: [batch, kv_heads, capacity, row_bytes].
class KvBuffer {
 public:
  KvBuffer(KvFormat format, std::int64_t batch, std::int64_t kv_heads, std::int64_t capacity,
           std::int64_t head_dim);

  // Encodes states [batch, kv_heads, n, head_dim] (fp32, contiguous) into rows [pos, pos + n).
  void write(std::int64_t pos, std::int64_t n, const float* states);
  kernels::KvRowsView rows(std::int64_t b, std::int64_t h) const;
  // Rows [0, n) of every stream decoded to fp32: [batch, kv_heads, n, head_dim] (tests, debug).
  std::vector<float> read(std::int64_t n) const;

  // Replaces the per-head parameters (already validated: see KvCache). Set before writing.
  void set_params(KvStreamParams params);
  // Forgets dynamically fixed nvfp4 global scales (the next write fixes them again).
  void reset_dynamic();

  KvFormat format() const { return format_; }
  KvFormat storage() const { return format_; }  // former name
  float scale(std::int64_t h) const { return params_.scale.at(static_cast<std::size_t>(h)); }
  float zero_point(std::int64_t h) const {
    return params_.zero_point.at(static_cast<std::size_t>(h));
  }
  // NaN while a dynamic nvfp4 global scale is not fixed yet; 1 for other formats.
  float global_scale(std::int64_t h) const {
    return params_.global_scale.at(static_cast<std::size_t>(h));
  }
  std::int64_t row_bytes() const { return row_bytes_; }
  // Bytes one token occupies in this buffer for one sequence (all kv heads).
  std::int64_t bytes_per_token() const { return row_bytes_ * kv_heads_; }

 private:
  KvFormat format_;
  std::int64_t batch_, kv_heads_, capacity_, head_dim_, row_bytes_;
  KvStreamParams params_;
  std::vector<bool> dynamic_global_;  // [kv_heads] nvfp4 global scale fixed at first write
  std::unique_ptr<std::byte[]> bytes_;
};

class KvCache {
 public:
  // InvalidArgument naming the layer and tensor ("layer 3 k_scale[1] is nan: ...") when the
  // spec's scales are missing, not calibrated (NaN), <= 0, of the wrong size, or a zero point
  // is not an integer code of the format.
  KvCache(std::int64_t layers, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
          std::int64_t capacity, const KvCacheSpec& spec);
  // A format without calibrated parameters: f32 / bf16 / f16 (scale 1) or nvfp4 (dynamic
  // global scales); fp8 / int8 / int4 throw InvalidArgument.
  KvCache(std::int64_t layers, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
          std::int64_t capacity, KvFormat format = KvFormat::kF32);

  std::int64_t layers() const { return static_cast<std::int64_t>(keys_.size()); }
  std::int64_t batch() const { return batch_; }
  std::int64_t kv_heads() const { return kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t length() const { return length_; }  // tokens cached so far
  KvFormat format() const { return format_; }
  KvFormat storage() const { return format_; }  // former name

  KvBuffer& keys(std::int64_t layer);
  const KvBuffer& keys(std::int64_t layer) const;
  KvBuffer& values(std::int64_t layer);
  const KvBuffer& values(std::int64_t layer) const;

  // Marks n more tokens as cached (the model calls this after every layer wrote them).
  void advance(std::int64_t n);
  // Forgets everything (keeps the allocation and the calibrated parameters; dynamic nvfp4
  // global scales are fixed again by the next write).
  void reset();
  // Keeps the first n tokens (n <= length()); truncate(0) is reset().
  void truncate(std::int64_t n);

  // K and V bytes of one token of one sequence across all layers: 2 · layers · kv_heads ·
  // kv_row_bytes(format, head_dim) (values plus in-row block scales; per-stream parameters are
  // not per token and not counted).
  std::int64_t bytes_per_token() const;

 private:
  std::int64_t batch_, kv_heads_, head_dim_, capacity_;
  KvFormat format_;
  std::int64_t length_ = 0;
  std::vector<KvBuffer> keys_, values_;
};

}  // namespace kvq::model
