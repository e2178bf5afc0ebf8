// Fast Walsh–Hadamard transform of query / key / value rows (the Hadamard rotations of SpinQuant
// R3 and llama.cpp's KV rotation; head_dim 64, 128, 256), runtime-dispatched to AVX-512 / AVX2 /
// scalar. Its scalar twin is kernels/ref/hadamard_ref.h, and every level is BIT-IDENTICAL to it:
// the SIMD kernels (hadamard_avx512.cc, hadamard_avx2.cc: hadamard_simd_body.inc) do the same
// butterflies (a + b, a - b of the same operands, stage by stage) and then the same multiply by
// 1 / sqrt(n), only several at once; no FMA, no reassociation. Sizes below 16 run the scalar
// twin. Rows are split over threads only when rows · n is large (a prefill): the decode step's
// few rows per token stay on the calling thread.
#pragma once

#include <cstdint>

#include "kvq/kernels/cpu/cpu_features.h"

namespace kvq::kernels {

// n >= 1 and a power of two: the sizes hadamard_rows accepts.
bool is_power_of_two_size(std::int64_t n);

// Each row of x [rows, n] (row r at x + r·n) becomes (H_n · row) / sqrt(n) in place, exactly
// ref::hadamard_rows. InvalidArgument naming n when n is not a power of two or rows < 0.
void hadamard_rows(float* x, std::int64_t rows, std::int64_t n);
// The same at a given ISA (tests run every level); the caller must check the CPU supports it.
void hadamard_rows_isa(Isa isa, float* x, std::int64_t rows, std::int64_t n);

}  // namespace kvq::kernels
