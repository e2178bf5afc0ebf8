// Small JSON helpers shared by the quantization config parsers: pydantic-like lax scalar
// coercion, Python repr of JSON values (for messages that embed a repr), error context.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"

namespace kvq::quant {

using Json = nlohmann::ordered_json;

// pydantic lax int: JSON integers, integral floats, integer strings.
int json_int(const Json& value, std::string_view where);
// pydantic lax bool: true/false, 0/1, and the strings "true"/"false"/"yes"/"no"/"on"/"off"/
// "1"/"0"/"t"/"f"/"y"/"n" (any case).
bool json_bool(const Json& value, std::string_view where);
// Python repr of a JSON value: {'a': 1, 'b': [True, None]}.
std::string python_repr(const Json& value);

// Runs fn(); a ConfigError or NotSupported it throws is rethrown (same type) with
// "<where>: " prepended.
template <class Fn>
auto with_context(const std::string& where, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": " + e.what());
  } catch (const NotSupported& e) {
    throw NotSupported(where + ": " + e.what());
  }
}

}  // namespace kvq::quant
