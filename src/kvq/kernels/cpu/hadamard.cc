// Dispatch of the Walsh–Hadamard kernel: argument checks, the ISA's row kernel (or the scalar
// twin below 16 elements) and, for large calls only, the split of rows over threads.
#include "kvq/kernels/cpu/hadamard.h"

#include <algorithm>
#include <bit>

#include "kvq/core/threading.h"
#include "kvq/kernels/ref/hadamard_ref.h"

namespace kvq::kernels {

// Each ISA's row kernel (hadamard_avx512.cc, hadamard_avx2.cc: hadamard_simd_body.inc), for
// n >= kMinSimdSize: rows [rows, n] transformed in place, every element times `scale` last.
namespace avx512 {
void hadamard_rows(float* x, std::int64_t rows, std::int64_t n, float scale);
}
namespace avx2 {
void hadamard_rows(float* x, std::int64_t rows, std::int64_t n, float scale);
}

namespace {

// Smaller rows run the scalar twin (one AVX-512 vector; AVX2 would need two).
constexpr std::int64_t kMinSimdSize = 16;
// Below this many elements (~35 µs on one thread at AVX-512 speed, 0.25-0.3 ns an element) a
// parallel region is not worth waking threads for; a decode step (a few heads of 64..256 per
// token, a few thousand elements) is far below it, a 512-token prefill above.
constexpr std::int64_t kMinParallelElements = std::int64_t{1} << 17;

}  // namespace

bool is_power_of_two_size(std::int64_t n) {
  return n >= 1 && std::has_single_bit(static_cast<std::uint64_t>(n));
}

void hadamard_rows_isa(Isa isa, float* x, std::int64_t rows, std::int64_t n) {
  ref::check_hadamard_shape(rows, n);
  const float scale = ref::hadamard_scale(n);
  // x [count, n]; rows are independent, so any split gives the same bits.
  const auto run = [&](float* xr, std::int64_t count) {
    if (n >= kMinSimdSize && isa == Isa::kAvx512) return avx512::hadamard_rows(xr, count, n, scale);
    if (n >= kMinSimdSize && isa == Isa::kAvx2) return avx2::hadamard_rows(xr, count, n, scale);
    ref::hadamard_rows(xr, count, n);
  };
  const std::int64_t threads =
      rows < kMinParallelElements / n ? 1 : std::min<std::int64_t>(num_threads(), rows);
  if (threads <= 1) return run(x, rows);
#pragma omp parallel for num_threads(static_cast <int>(threads)) schedule(static)
  for (std::int64_t t = 0; t < threads; ++t) {
    const std::int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    run(x + r0 * n, r1 - r0);
  }
}

void hadamard_rows(float* x, std::int64_t rows, std::int64_t n) {
  hadamard_rows_isa(detected_isa(), x, rows, n);
}

}  // namespace kvq::kernels
