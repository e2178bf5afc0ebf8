#include "kvq/model/attention.h"

#include <algorithm>

#include "kvq/core/error.h"

namespace kvq::model {
namespace detail {

struct HookEntry {
  std::uint64_t id;
  StatesKind kind;
  AttentionHook hook;
};

struct HookRegistry {
  std::uint64_t next_id = 1;
  std::vector<HookEntry> entries;  // registration order
};

}  // namespace detail

void HookHandle::remove() {
  if (auto registry = registry_.lock()) {
    auto& e = registry->entries;
    e.erase(
        std::remove_if(e.begin(), e.end(), [&](const detail::HookEntry& h) { return h.id == id_; }),
        e.end());
  }
  registry_.reset();
}

bool HookHandle::active() const {
  auto registry = registry_.lock();
  if (!registry) return false;
  return std::any_of(registry->entries.begin(), registry->entries.end(),
                     [&](const detail::HookEntry& h) { return h.id == id_; });
}

AttentionModule::AttentionModule(std::string name, std::vector<std::string> class_hierarchy,
                                 std::int64_t layer_idx, std::int64_t num_heads,
                                 std::int64_t num_kv_heads, std::int64_t head_dim)
    : Module(std::move(name), std::move(class_hierarchy)),
      layer_idx_(layer_idx),
      num_heads_(num_heads),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      hooks_(std::make_shared<detail::HookRegistry>()) {}

AttentionModule::~AttentionModule() = default;

HookHandle AttentionModule::add(StatesKind kind, AttentionHook hook) {
  if (!hook) fail<InvalidArgument>("{}: cannot register an empty hook", this->name());
  const std::uint64_t id = hooks_->next_id++;
  hooks_->entries.push_back({id, kind, std::move(hook)});
  return HookHandle(hooks_, id);
}

HookHandle AttentionModule::register_query_hook(AttentionHook hook) {
  return add(StatesKind::kQuery, std::move(hook));
}
HookHandle AttentionModule::register_key_hook(AttentionHook hook) {
  return add(StatesKind::kKey, std::move(hook));
}
HookHandle AttentionModule::register_value_hook(AttentionHook hook) {
  return add(StatesKind::kValue, std::move(hook));
}

std::size_t AttentionModule::num_hooks() const { return hooks_->entries.size(); }

void AttentionModule::run_key_value_hooks(StatesView keys, StatesView values) {
  if (hooks_->entries.empty()) return;
  // A copy, so a hook may register or remove hooks without invalidating the iteration (the
  // change takes effect from the next forward).
  const std::vector<detail::HookEntry> entries = hooks_->entries;
  for (const detail::HookEntry& e : entries) {
    if (e.kind == StatesKind::kKey) e.hook(*this, keys);
    if (e.kind == StatesKind::kValue) e.hook(*this, values);
  }
}

void AttentionModule::run_query_hooks(StatesView queries) {
  if (hooks_->entries.empty()) return;
  const std::vector<detail::HookEntry> entries = hooks_->entries;
  for (const detail::HookEntry& e : entries) {
    if (e.kind == StatesKind::kQuery) e.hook(*this, queries);
  }
}

}  // namespace kvq::model
