// Cooperative interruption of long loops, for embedders that must return control instead of
// exiting (the Python module turns Ctrl-C into KeyboardInterrupt; the CLI does not use this: its
// signal thread removes unfinished outputs and exits, io/atomic_write.h).
//
// A signal handler calls request_interrupt() (async-signal-safe: one lock-free atomic store);
// long loops reach interruption_point() between units of work (ProgressBar::advance: after each
// calibration sample, perplexity / KLD window, GSM8K question), which throws Interrupted. The
// exception unwinds like any other error, so atomic writers remove their temporaries and
// nothing half-written is left. Process-wide by nature, as a signal is.
#pragma once

#include "kvq/core/error.h"

namespace kvq {

// Thrown by interruption_point() once an interrupt was requested.
class Interrupted : public Error {
 public:
  using Error::Error;
};

void request_interrupt() noexcept;  // async-signal-safe
void clear_interrupt() noexcept;
bool interrupt_requested() noexcept;
// Throws Interrupted("interrupted") when an interrupt was requested (the request stays set until
// clear_interrupt(), so every loop up the stack stops too).
void interruption_point();

}  // namespace kvq
