// Fast forms of the forward pass's pointwise layers, each with its scalar twin in
// kernels/ref (ref_kernels.h) and a test against it (tests/unit/kernels/test_pointwise.cc).
//
//   rmsnorm   AVX-512: the sum of squares in 16 lanes (a different order than the scalar loop:
//             within a few ulp), then y = w · (x · inv) as the reference.
//   rope_row  rotate-half RoPE; the reference's products and differences per element, vectorised
//             by the compiler for AVX-512 / AVX2 (which may fuse one product into the
//             difference: within an ulp).
//   swiglu    silu(gate) · up with the Cephes exp of softmax.h on -|gate| (sigmoid written for
//             either sign, so the exp argument is never positive): within a few ulp of the
//             reference's g / (1 + exp(-g)) · u (0 for g < -87.3, where the reference's value is
//             below 1e-36).
//   geglu     gelu_tanh(gate) · up, gelu_tanh in fp32 with the constants, operation order and
//             tanhf of PyTorch's CPU gelu(approximate="tanh") kernel (its vector path uses
//             Sleef's 1-ulp tanhf: within an ulp of it), within a few ulp of the reference's
//             double-precision formula.
//
// Fusion: RoPE runs inside the [tokens, heads·d] → [heads, tokens, d] copy (one pass), and
// swiglu writes over gate while reading up (one pass over the two projections).
#pragma once

#include <cstdint>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels {

// y [rows, dim] = weight ⊙ x / sqrt(mean(x²) + eps), row by row.
void rmsnorm(const float* x, const float* weight, float* y, std::int64_t rows, std::int64_t dim,
             float eps);
void rmsnorm_isa(Isa isa, const float* x, const float* weight, float* y, std::int64_t rows,
                 std::int64_t dim, float eps);

// x [head_dim] rotated in place by cos / sin [head_dim / 2].
void rope_row(float* x, const float* cos, const float* sin, std::int64_t head_dim);

// out [n] = silu(gate) · up; out may alias gate.
void swiglu(const float* gate, const float* up, float* out, std::int64_t n);
void swiglu_isa(Isa isa, const float* gate, const float* up, float* out, std::int64_t n);

// PyTorch's gelu(x, approximate="tanh") (transformers' gelu_pytorch_tanh) in fp32:
// 0.5 · x · (1 + tanh(β · (x + κ · x³))), β = fp32(√2 · 2/√π · 0.5), κ = fp32(0.044715).
float gelu_tanh(float x);
// out [n] = gelu_tanh(gate) · up (Gemma's GeGLU MLP); out may alias gate.
void geglu(const float* gate, const float* up, float* out, std::int64_t n);

}  // namespace kvq::kernels
