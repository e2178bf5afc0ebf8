// Fast causal GQA attention reading the packed KV cache in place (any quant::KvFormat).
//
// Prefill (q_len > 1): flash-style tiles (32 queries × 64 keys) with an online softmax, so the
// S × S score matrix is never materialised; each 64-row K / V tile is decoded to fp32 in a small
// per-thread scratch (load_kv_rows: the dequantized values (code - zp) · scale, exactly what a
// fake-quantized fp32 cache would hold); work items (head, query tile) run on OpenMP threads.
// Decode (q_len == 1): no decoded copy at all — dot_rows / axpy_rows (kv_row_kernels.h) read the
// packed K / V rows of a KV group once for all its query heads, dequantizing in registers to
// exactly the values a fake-quantized fp32 cache would hold, so packed and fake-quant decode are
// bit-identical (the stream scales are applied per element rather than folded out: with the
// row decoded once per GQA group the multiply is shared by the group's heads). Long contexts
// are also split along the sequence (partial softmax states merged at the end) so every thread
// gets work even with few KV heads.
#pragma once

#include <cstdint>

#include "kvq/kernels/kv_rows.h"

namespace kvq::kernels {

struct AttentionParams {
  std::int64_t heads = 0;     // query heads
  std::int64_t kv_heads = 0;  // divides heads; query head h reads KV head h / (heads / kv_heads)
  std::int64_t head_dim = 0;
  std::int64_t q_len = 0;  // new tokens
  std::int64_t past = 0;   // cached tokens before them; keys/values hold past + q_len rows
  float scale = 1.0f;      // softmax scale, normally 1/sqrt(head_dim)
  // Sliding window: > 0 limits each query to the last `window` keys, itself included (position p
  // sees p - window < t <= p, transformers' sliding_window_overlay); 0 = every earlier key.
  std::int64_t window = 0;
};

// q [heads, q_len, head_dim]; keys, values: kv_heads views each; out [q_len, heads, head_dim].
// Query i (position past + i) attends to rows t <= past + i (and t > past + i - window when
// p.window > 0; rows before the first visible one are never read).
void attention(const AttentionParams& p, const float* q, const KvRowsView* keys,
               const KvRowsView* values, float* out);

// The decode path with an explicit number of sequence splits (tests cover the merge); q_len must
// be 1. splits >= 1.
void attention_decode(const AttentionParams& p, const float* q, const KvRowsView* keys,
                      const KvRowsView* values, float* out, std::int64_t splits);
// The tiled prefill path for any q_len >= 1.
void attention_prefill(const AttentionParams& p, const float* q, const KvRowsView* keys,
                       const KvRowsView* values, float* out);

}  // namespace kvq::kernels
