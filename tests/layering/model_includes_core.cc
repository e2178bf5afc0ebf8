// The control for core_includes_model.cc: with kvq_model's include root, model's own headers
// and those below it (core) resolve, so the failure there is the layering, not a wrong path.
#include "kvq/core/tensor.h"
#include "kvq/model/kv_cache.h"
