#include "kvq/core/interrupt.h"

#include <atomic>

namespace kvq {
namespace {
// Lock-free, so a signal handler may store to it.
std::atomic<bool> g_interrupt_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);
}  // namespace

void request_interrupt() noexcept { g_interrupt_requested.store(true, std::memory_order_relaxed); }
void clear_interrupt() noexcept { g_interrupt_requested.store(false, std::memory_order_relaxed); }
bool interrupt_requested() noexcept {
  return g_interrupt_requested.load(std::memory_order_relaxed);
}

void interruption_point() {
  if (interrupt_requested()) throw Interrupted("interrupted");
}

}  // namespace kvq
