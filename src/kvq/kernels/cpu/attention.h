// Fast causal GQA attention reading the packed KV cache in place (any quant::KvFormat).
//
// Prefill (q_len > 1): flash-style tiles (32 queries × 64 keys) with an online softmax, so the
// S × S score matrix is never materialised; each 64-row K / V tile is decoded to fp32 in a small
// per-thread scratch (load_kv_rows: the dequantized values (code - zp) · scale, exactly what a
// fake-quantized fp32 cache would hold); work items (head, query tile) run on OpenMP threads.
// Decode (q_len == 1): no decoded copy at all — scores are quant::dot_row on the packed K rows
// with the K stream factor folded into the softmax scale, outputs accumulate quant::axpy_row on
// the packed V rows and the V stream factor is applied once per output. The query heads of one
// KV group are processed together so each cached row is read from memory once per step; long
// contexts are also split along the sequence (partial softmax states merged at the end) so every
// thread gets work even with few KV heads.
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
};

// q [heads, q_len, head_dim]; keys, values: kv_heads views each; out [q_len, heads, head_dim].
// Query i (position past + i) attends to rows t <= past + i.
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
