// StatesView <-> kvq::Tensor adapters, so the hooks can call kvq::quant's observers and
// fake_quantize (the golden-tested ports of llm-compressor / compressed-tensors) directly.
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/model/attention.h"

namespace kvq::lifecycle {

// A zero-copy, read-only F32 tensor [batch, heads, tokens, head_dim] over the hook's states.
// Valid only while the hook runs (the forward pass owns the buffer).
inline Tensor states_tensor(const model::StatesView& v) {
  return Tensor::view(DType::kF32, {v.batch, v.heads, v.tokens, v.head_dim}, v.data, nullptr);
}

// Writes an F32 tensor of the states' size back into the hook's buffer (fake_quantize returns a
// new tensor: one copy per hook call).
inline void assign_states(const model::StatesView& v, const Tensor& values) {
  KVQ_CHECK(values.dtype() == DType::kF32 && values.numel() == v.numel(),
            "states write-back: got {} {} for {} values", dtype_name(values.dtype()),
            shape_str(values.shape()), v.numel());
  std::memcpy(v.data, values.f32(), static_cast<std::size_t>(v.numel()) * sizeof(float));
}

}  // namespace kvq::lifecycle
