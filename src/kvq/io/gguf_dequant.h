// Scalar reference dequantization of GGML tensor types to fp32.
//
// Bit-exact with gguf-py's gguf.quants.dequantize (and ggml's dequantize_row_*): every value is
// computed with the same fp32 operations in the same order (e.g. Q4_K: (d·sc)·q − (dmin·m)),
// with no fused multiply-add. tests/golden/io_gguf checks this against gguf-py outputs.
#pragma once

#include <cstdint>

#include "kvq/core/tensor.h"
#include "kvq/io/gguf.h"
#include "kvq/io/gguf_types.h"

namespace kvq::io {

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
bool ggml_can_dequantize(GgmlType type);

// Dequantizes `n` elements (a multiple of the type's block size) from `src` (n / block_size
// blocks, any alignment) into `dst` [n]. NotSupported for a type outside the list above.
void dequantize_row(GgmlType type, const void* src, float* dst, std::int64_t n);

// The whole tensor as an owning fp32 Tensor with the row-major shape (GGUF ne reversed).
// NotSupported naming the file, tensor and type when the type cannot be dequantized.
Tensor dequantize_tensor(const GgufFile& file, const GgufTensorInfo& info);

}  // namespace kvq::io
