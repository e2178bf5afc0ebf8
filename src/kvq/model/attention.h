// LlamaAttention as a module with query / key / value hook points (compressed-tensors'
// register_query_hook / register_key_hook / register_value_hook, spec §4.5).
//
// Hooks see a mutable fp32 view of the states and may rewrite them in place:
//   query hooks: [batch, heads, new_tokens, head_dim], post-RoPE, fired just before attention;
//   key hooks:   [batch, kv_heads, new_tokens, head_dim], post-RoPE, the tokens being appended
//                to the cache, before GQA head repetition;
//   value hooks: [batch, kv_heads, new_tokens, head_dim], same tokens.
// Key and value hooks share one list and fire in registration order (as pre-hooks of the
// reference's kv_cache module), before the states are written to the cache; query hooks fire
// after, in registration order. Hooks fire in prefill, decode and cache-less forwards. The
// forward pass always materialises these buffers, so a hook that does nothing leaves the logits
// bit-identical. Hook lists belong to the module: no process-global state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvq/model/module.h"

namespace kvq::model {

// Mutable view of states [batch, heads, tokens, head_dim], contiguous fp32: element
// (b, h, t, d) is data[((b * heads + h) * tokens + t) * head_dim + d].
struct StatesView {
  float* data = nullptr;
  std::int64_t batch = 0, heads = 0, tokens = 0, head_dim = 0;
  std::int64_t start_position = 0;  // position of token 0 (the cache length before this forward)
  // Keys / values only: the cache these states are appended to stores them quantized with
  // calibrated parameters (KvCacheConfig::stores_calibrated_quantization: the packed form of the
  // model's k/v quantization), so fake-quantizing hooks leave them to it and k/v are quantized
  // exactly once. Observers and transforms run either way.
  bool quantized_by_cache = false;

  std::int64_t numel() const { return batch * heads * tokens * head_dim; }
  float* row(std::int64_t b, std::int64_t h, std::int64_t t) const {
    return data + ((b * heads + h) * tokens + t) * head_dim;
  }
};

class AttentionModule;
using AttentionHook = std::function<void(AttentionModule&, StatesView)>;

namespace detail {
struct HookRegistry;
}

// Returned by register_*_hook. remove() unregisters (idempotent; safe after the module is
// gone). Destroying a HookHandle does NOT remove the hook (like torch's RemovableHandle); use
// ScopedHook for RAII.
class HookHandle {
 public:
  HookHandle() = default;
  void remove();
  bool active() const;  // registered and the module still alive

 private:
  friend class AttentionModule;
  HookHandle(std::weak_ptr<detail::HookRegistry> registry, std::uint64_t id)
      : registry_(std::move(registry)), id_(id) {}
  std::weak_ptr<detail::HookRegistry> registry_;
  std::uint64_t id_ = 0;
};

// Removes its hook when it goes out of scope.
class ScopedHook {
 public:
  ScopedHook() = default;
  explicit ScopedHook(HookHandle handle) : handle_(std::move(handle)) {}
  ~ScopedHook() { handle_.remove(); }
  ScopedHook(ScopedHook&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  ScopedHook& operator=(ScopedHook&& other) noexcept {
    if (this != &other) {
      handle_.remove();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ScopedHook(const ScopedHook&) = delete;
  ScopedHook& operator=(const ScopedHook&) = delete;
  HookHandle& handle() { return handle_; }

 private:
  HookHandle handle_;
};

enum class StatesKind { kQuery, kKey, kValue };

class AttentionModule : public Module {
 public:
  // class_hierarchy: the architecture's attention classes ({"LlamaAttention", "Module"}).
  AttentionModule(std::string name, std::vector<std::string> class_hierarchy,
                  std::int64_t layer_idx, std::int64_t num_heads, std::int64_t num_kv_heads,
                  std::int64_t head_dim);
  ~AttentionModule() override;

  HookHandle register_query_hook(AttentionHook hook);
  HookHandle register_key_hook(AttentionHook hook);
  HookHandle register_value_hook(AttentionHook hook);
  std::size_t num_hooks() const;

  std::int64_t layer_idx() const { return layer_idx_; }
  std::int64_t num_heads() const { return num_heads_; }
  std::int64_t num_kv_heads() const { return num_kv_heads_; }
  std::int64_t head_dim() const { return head_dim_; }

  // Called by the forward pass.
  void run_key_value_hooks(StatesView keys, StatesView values);
  void run_query_hooks(StatesView queries);

 private:
  HookHandle add(StatesKind kind, AttentionHook hook);

  std::int64_t layer_idx_, num_heads_, num_kv_heads_, head_dim_;
  std::shared_ptr<detail::HookRegistry> hooks_;
};

}  // namespace kvq::model
