#include "kvq/model/kv_cache.h"

#include <cmath>
#include <cstring>

#include "kvq/core/dtype.h"
#include "kvq/core/error.h"

namespace kvq::model {

KvBuffer::KvBuffer(KvStorage storage, std::int64_t batch, std::int64_t kv_heads,
                   std::int64_t capacity, std::int64_t head_dim)
    : storage_(storage),
      batch_(batch),
      kv_heads_(kv_heads),
      capacity_(capacity),
      head_dim_(head_dim),
      row_bytes_(head_dim * static_cast<std::int64_t>(kernels::kv_storage_element_bytes(storage))),
      scales_(static_cast<std::size_t>(kv_heads), 1.0f) {
  const std::int64_t total = batch * kv_heads * capacity * row_bytes_;
  bytes_ = std::make_unique<std::byte[]>(static_cast<std::size_t>(total));
}

void KvBuffer::set_head_scales(std::span<const float> scales) {
  if (static_cast<std::int64_t>(scales.size()) != kv_heads_) {
    fail<InvalidArgument>("KV cache scales: expected {} per-head scales, got {}", kv_heads_,
                          scales.size());
  }
  for (float s : scales) {
    if (!std::isfinite(s) || s <= 0.0f) fail<InvalidArgument>("KV cache scale {} is not > 0", s);
  }
  scales_.assign(scales.begin(), scales.end());
}

void KvBuffer::write(std::int64_t pos, std::int64_t n, const float* states) {
  KVQ_CHECK(pos >= 0 && n >= 0 && pos + n <= capacity_, "KV write [{}, {}) past capacity {}", pos,
            pos + n, capacity_);
  for (std::int64_t b = 0; b < batch_; ++b) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      const float* src = states + ((b * kv_heads_ + h) * n) * head_dim_;  // [n, head_dim]
      std::byte* dst = bytes_.get() + ((b * kv_heads_ + h) * capacity_ + pos) * row_bytes_;
      const float scale = scales_[static_cast<std::size_t>(h)];
      const std::int64_t count = n * head_dim_;
      switch (storage_) {
        case KvStorage::kF32:
          if (scale == 1.0f) {
            std::memcpy(dst, src, static_cast<std::size_t>(count) * 4);
          } else {
            auto* o = reinterpret_cast<float*>(dst);
            for (std::int64_t i = 0; i < count; ++i) o[i] = src[i] / scale;
          }
          break;
        case KvStorage::kBF16: {
          auto* o = reinterpret_cast<std::uint16_t*>(dst);
          for (std::int64_t i = 0; i < count; ++i) o[i] = f32_to_bf16(src[i] / scale);
          break;
        }
        case KvStorage::kF16: {
          auto* o = reinterpret_cast<std::uint16_t*>(dst);
          for (std::int64_t i = 0; i < count; ++i) o[i] = f32_to_fp16(src[i] / scale);
          break;
        }
      }
    }
  }
}

kernels::KvRowsView KvBuffer::rows(std::int64_t b, std::int64_t h) const {
  KVQ_CHECK(b >= 0 && b < batch_ && h >= 0 && h < kv_heads_, "KV stream ({}, {})", b, h);
  kernels::KvRowsView v;
  v.storage = storage_;
  v.data = bytes_.get() + (b * kv_heads_ + h) * capacity_ * row_bytes_;
  v.row_bytes = row_bytes_;
  v.head_dim = head_dim_;
  v.scale = scales_[static_cast<std::size_t>(h)];
  return v;
}

std::vector<float> KvBuffer::read(std::int64_t n) const {
  KVQ_CHECK(n >= 0 && n <= capacity_, "KV read {} past capacity {}", n, capacity_);
  std::vector<float> out(static_cast<std::size_t>(batch_ * kv_heads_ * n * head_dim_));
  for (std::int64_t b = 0; b < batch_; ++b) {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      kernels::load_kv_rows(rows(b, h), 0, n, out.data() + (b * kv_heads_ + h) * n * head_dim_);
    }
  }
  return out;
}

KvCache::KvCache(std::int64_t layers, std::int64_t batch, std::int64_t kv_heads,
                 std::int64_t head_dim, std::int64_t capacity, KvStorage storage)
    : batch_(batch),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      capacity_(capacity),
      storage_(storage) {
  if (layers <= 0 || batch <= 0 || kv_heads <= 0 || head_dim <= 0 || capacity <= 0) {
    fail<InvalidArgument>(
        "KV cache: layers {}, batch {}, kv_heads {}, head_dim {}, capacity {} must all be > 0",
        layers, batch, kv_heads, head_dim, capacity);
  }
  keys_.reserve(static_cast<std::size_t>(layers));
  values_.reserve(static_cast<std::size_t>(layers));
  for (std::int64_t l = 0; l < layers; ++l) {
    keys_.emplace_back(storage, batch, kv_heads, capacity, head_dim);
    values_.emplace_back(storage, batch, kv_heads, capacity, head_dim);
  }
}

KvBuffer& KvCache::keys(std::int64_t layer) { return keys_.at(static_cast<std::size_t>(layer)); }
const KvBuffer& KvCache::keys(std::int64_t layer) const {
  return keys_.at(static_cast<std::size_t>(layer));
}
KvBuffer& KvCache::values(std::int64_t layer) {
  return values_.at(static_cast<std::size_t>(layer));
}
const KvBuffer& KvCache::values(std::int64_t layer) const {
  return values_.at(static_cast<std::size_t>(layer));
}

void KvCache::advance(std::int64_t n) {
  KVQ_CHECK(n >= 0 && length_ + n <= capacity_, "KV advance {} + {} > {}", length_, n, capacity_);
  length_ += n;
}

void KvCache::truncate(std::int64_t n) {
  if (n < 0 || n > length_) {
    fail<InvalidArgument>("KV cache truncate to {}: length is {}", n, length_);
  }
  length_ = n;
}

std::int64_t KvCache::bytes_per_token() const {
  std::int64_t total = 0;
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    total += keys_[l].bytes_per_token() + values_[l].bytes_per_token();
  }
  return total;
}

}  // namespace kvq::model
