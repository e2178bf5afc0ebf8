#include "kvq/core/threading.h"

#include <omp.h>

#include "kvq/core/error.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace kvq {

void set_num_threads(int threads) {
  if (threads < 1) fail<InvalidArgument>("--threads must be >= 1, got {}", threads);
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace kvq
