// Scalar Walsh–Hadamard transform: the ground truth of the fast kernel in kernels/cpu/hadamard.h
// (which is bit-identical to it) and of the Hadamard rotations (SpinQuant R3, llama.cpp's KV
// rotation) applied to query / key / value rows.
#pragma once

#include <cstdint>

namespace kvq::kernels::ref {

// Each row of x [rows, n] becomes (H_n · row) / sqrt(n) in place, H_n the Sylvester Hadamard
// matrix in natural order (H[i][j] = (-1)^popcount(i & j)): the iterative butterfly
// (a, b) -> (a + b, a - b) on pairs (j, j + h) for h = 1, 2, 4, ..., n / 2, then every element
// times hadamard_scale(n). Orthonormal and its own inverse. n must be a power of two (1, 2, 4,
// ...) and rows >= 0, else InvalidArgument naming n.
void hadamard_rows(float* x, std::int64_t rows, std::int64_t n);

// Throws InvalidArgument unless n is a power of two and rows >= 0 (the check of both kernels).
void check_hadamard_shape(std::int64_t rows, std::int64_t n);

// 1 / sqrt(n) rounded once to float, the factor every element is multiplied by last.
float hadamard_scale(std::int64_t n);

}  // namespace kvq::kernels::ref
