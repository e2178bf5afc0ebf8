// The CPU's SIMD features, detected once at run time: the only place kvq asks the CPU. Each
// kernel family picks its level from these (the row kernels also need DQ and F16C, the
// int8-query scores VNNI).
#pragma once

#include <string_view>

namespace kvq::kernels {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false;
};
const CpuFeatures& cpu_features();

enum class Isa { kScalar, kAvx2, kAvx512 };

// The best level this CPU supports (AVX-512 needs F, BW, VL; AVX2 needs FMA too).
Isa detected_isa();
std::string_view isa_name(Isa isa);

}  // namespace kvq::kernels
