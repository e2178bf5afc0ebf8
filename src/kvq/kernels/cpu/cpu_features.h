// Which SIMD level the fast kernels run at, detected once at run time.
#pragma once

#include <string_view>

namespace kvq::kernels {

enum class Isa { kScalar, kAvx2, kAvx512 };

// The best level this CPU supports (AVX-512 needs F, BW, VL; AVX2 needs FMA too).
Isa detected_isa();
std::string_view isa_name(Isa isa);

}  // namespace kvq::kernels
