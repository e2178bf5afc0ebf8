// Scalar reference kernels: the ground truth every fast kernel in kernels/cpu is tested against.
// Plain loops, fp32 arithmetic in the obvious order, no threads, no SIMD intrinsics.
#pragma once

#include <cstdint>

#include "kvq/kernels/kv_rows.h"

namespace kvq::kernels::ref {

// y = x · Wᵀ: x [m, k], w [n, k] (PyTorch Linear layout, row-major), y [m, n].
void matmul(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
            std::int64_t k);
// y = W · x: w [n, k], x [k], y [n].
void gemv(const float* w, const float* x, float* y, std::int64_t n, std::int64_t k);
// The same with bf16 weights (w [n, k] holds bf16 bits): each weight widened to fp32, products
// and sums in fp32, x not rounded.
void matmul_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k);
void gemv_bf16(const std::uint16_t* w, const float* x, float* y, std::int64_t n, std::int64_t k);

// Hugging Face LlamaRMSNorm per row: y = weight * (x * rsqrt(mean(x²) + eps)).
// x, y [rows, dim] (may alias); weight [dim].
void rmsnorm(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t dim,
             float eps);

// Rotate-half RoPE on one row in place: x [head_dim]; cos, sin [head_dim / 2] for its position.
// x[i] ← x[i]·cos[i] − x[i+h]·sin[i];  x[i+h] ← x[i+h]·cos[i] + x[i]·sin[i]   (h = head_dim/2)
void rope_row(float* x, const float* cos, const float* sin, std::int64_t head_dim);

// In-place numerically stable softmax of one row: x [n].
void softmax(float* x, std::int64_t n);

// SiLU-gated product: out[i] = silu(gate[i]) * up[i]; all [n].
void swiglu(const float* gate, const float* up, float* out, std::int64_t n);

// GELU, tanh form (PyTorch's gelu(approximate="tanh"), transformers' gelu_pytorch_tanh), in
// double: y = x/2 · (1 + tanh(sqrt(2/π) · (x + 0.044715 x³))) rounded once to fp32. x, y [n].
void gelu_tanh(const float* x, float* y, std::int64_t n);

// Causal attention of one query head against one KV stream (any packed format): every row is
// first decoded to fp32 with the scalar codec (quant::dequantize_row), then plain attention.
// q [q_len, head_dim] are the queries at positions past .. past+q_len-1; keys/values hold rows
// [0, past + q_len). Query i attends to rows t <= past + i, and with window > 0 only to
// t > past + i - window (a sliding window of `window` keys, itself included). out [q_len,
// head_dim].
void attention(const float* q, const KvRowsView& keys, const KvRowsView& values, float* out,
               std::int64_t q_len, std::int64_t past, float scale, std::int64_t window = 0);

}  // namespace kvq::kernels::ref
