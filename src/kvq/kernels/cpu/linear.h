// Fast fp32 Linear layers: y = x · Wᵀ with W in PyTorch's [out, in] row-major layout.
//
// Prefill (m > 1) goes to OpenBLAS sgemm. Decode (m == 1) is memory bound and OpenBLAS is slow
// there, so it runs a custom GEMV (AVX-512 / AVX2 / scalar, picked at run time) parallelised over
// output rows with OpenMP (kvq::num_threads()).
#pragma once

#include <cstdint>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels {

// x [m, k], w [n, k], y [m, n].
void linear(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
            std::int64_t k);

// y [n] = W [n, k] · x [k], at the detected ISA.
void gemv(const float* w, const float* x, float* y, std::int64_t n, std::int64_t k);
// The same at a given ISA (tests compare every level with the scalar reference); the caller
// must check the CPU supports it.
void gemv_isa(Isa isa, const float* w, const float* x, float* y, std::int64_t n, std::int64_t k);

// OpenBLAS sgemm for any m (exposed for the benchmark).
void sgemm_xwt(const float* x, const float* w, float* y, std::int64_t m, std::int64_t n,
               std::int64_t k);

}  // namespace kvq::kernels
