// Thread count for kvq's OpenMP kernels and OpenBLAS. One knob, set by the CLI's --threads.
#pragma once

namespace kvq {

// Sets the number of threads used by kvq kernels and OpenBLAS (>= 1).
void set_num_threads(int threads);
int num_threads();

}  // namespace kvq
