// Fast Linear layers: y = x · Wᵀ with W in PyTorch's [out, in] row-major layout, W in fp32 or
// bf16.
//
// Prefill (m > kMaxBatchedGemvRows) goes to OpenBLAS sgemm. Decode (m == 1) is memory bound and
// OpenBLAS is slow there, so it runs a custom GEMV (AVX-512 / AVX2 / scalar, picked at run time)
// parallelised over output rows with OpenMP (kvq::num_threads()). A decode step of a few
// sequences at once (1 < m <= kMaxBatchedGemvRows) runs the batched GEMV: each weight row is read
// once for all m inputs, and every output row is bit-identical to the single-input GEMV's, so a
// sequence decoded in a batch gets exactly the logits it gets alone (CausalLM feeds any number of
// sequences' decode rows to it through linear_rows, never to sgemm).
//
// bf16 weights (std::uint16_t holding the top 16 bits of an fp32) halve the bytes a decode step
// reads. x, the products, the accumulation and y stay fp32: a weight is widened exactly (a 16-bit
// shift in registers) and multiplied with the unrounded fp32 x, so the only error against fp32
// weights is the rounding of W to bf16, done once when the weights were converted. Prefill widens
// blocks of weight rows into an fp32 scratch and runs sgemm on each block (widening is O(n·k)
// against the GEMM's O(m·n·k)). OpenBLAS's cblas_sbgemm is not an option: Debian 12's
// libopenblas 0.3.21 declares it in cblas.h but is built without it (no such symbol), and it
// would round x to bf16 as well.
#pragma once

#include <cstdint>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels {

// Largest m that linear() runs as the batched GEMV rather than sgemm.
inline constexpr std::int64_t kMaxBatchedGemvRows = 8;

// x [m, k], w [n, k], y [m, n].
void linear(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
            std::int64_t k);
// The same with bf16 weights: x [m, k] fp32, w [n, k] bf16 bits, y [m, n] fp32.
void linear_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k);
// The same for m rows that are separate sequences' decode steps, at any m: the batched GEMV
// (each weight row read once for all m), row i bit-identical to gemv(W, x_i) — never sgemm, so
// a sequence decoded beside others gets exactly its logits alone.
void linear_rows(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
                 std::int64_t k);
void linear_rows_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m,
                      std::int64_t n, std::int64_t k);

// y [n] = W [n, k] · x [k], at the detected ISA.
void gemv(const float* w, const float* x, float* y, std::int64_t n, std::int64_t k);
void gemv_bf16(const std::uint16_t* w, const float* x, float* y, std::int64_t n, std::int64_t k);
// The same at a given ISA (tests compare every level with the scalar reference); the caller
// must check the CPU supports it.
void gemv_isa(Isa isa, const float* w, const float* x, float* y, std::int64_t n, std::int64_t k);
void gemv_bf16_isa(Isa isa, const std::uint16_t* w, const float* x, float* y, std::int64_t n,
                   std::int64_t k);

// y [m, n] = x [m, k] · W [n, k]ᵀ as m GEMVs sharing each weight row; row i bit-identical to
// gemv_isa(isa, w, x + i·k, ...). The caller must check the CPU supports `isa`.
void gemv_batch_isa(Isa isa, const float* w, const float* x, float* y, std::int64_t m,
                    std::int64_t n, std::int64_t k);
void gemv_batch_bf16_isa(Isa isa, const std::uint16_t* w, const float* x, float* y, std::int64_t m,
                         std::int64_t n, std::int64_t k);

// OpenBLAS sgemm for any m (exposed for the benchmark). The bf16 form widens blocks of weight
// rows to fp32 and runs sgemm per block; deterministic (fixed blocks).
void sgemm_xwt(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
               std::int64_t k);
void sgemm_xwt_bf16(const float* x, const std::uint16_t* w, float* y, std::int64_t m,
                    std::int64_t n, std::int64_t k);

// out [count] = in [count] bf16 bits widened to fp32 (exact).
void widen_bf16(const std::uint16_t* in, float* out, std::int64_t count);
void widen_bf16_isa(Isa isa, const std::uint16_t* in, float* out, std::int64_t count);

}  // namespace kvq::kernels
