// Compiled twice by tests/CMakeLists.txt: with kvq_core's include root it must not find this
// header (core sits below model: the build enforces the layering), and with kvq_model's it must
// (so the failure is the layering, not a wrong name).
#include "kvq/model/causal_lm.h"
