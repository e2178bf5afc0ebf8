// Compiled with kvq_core's include root only (tests/CMakeLists.txt): core sits below model, so
// this include must not be found — the build enforces the layering.
#include "kvq/model/causal_lm.h"
