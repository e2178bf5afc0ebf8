#include "kvq/quant/json_util.h"

#include <cctype>
#include <cmath>
#include <limits>

namespace kvq::quant {

int json_int(const Json& value, std::string_view where) {
  if (value.is_number_integer()) {
    const auto v = value.get<long long>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail<ConfigError>("{}: Input should be a valid integer", where);
    return static_cast<int>(v);
  }
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 2147483648.0)
      return static_cast<int>(v);
    fail<ConfigError>("{}: Input should be a valid integer, got a number with a fractional part",
                      where);
  }
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    try {
      std::size_t used = 0;
      const long long v = std::stoll(text, &used);
      if (used == text.size() && v >= std::numeric_limits<int>::min() &&
          v <= std::numeric_limits<int>::max())
        return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    fail<ConfigError>("{}: Input should be a valid integer, unable to parse string as an integer",
                      where);
  }
  if (value.is_boolean()) return value.get<bool>() ? 1 : 0;
  fail<ConfigError>("{}: Input should be a valid integer", where);
}

bool json_bool(const Json& value, std::string_view where) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer()) {
    const auto v = value.get<long long>();
    if (v == 0 || v == 1) return v == 1;
  }
  if (value.is_string()) {
    std::string t = value.get<std::string>();
    for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const char* yes : {"true", "yes", "on", "1", "t", "y"})
      if (t == yes) return true;
    for (const char* no : {"false", "no", "off", "0", "f", "n"})
      if (t == no) return false;
    fail<ConfigError>("{}: Input should be a valid boolean, unable to interpret input", where);
  }
  fail<ConfigError>("{}: Input should be a valid boolean", where);
}

std::string python_repr(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case Json::value_t::string: {
      const std::string s = value.get<std::string>();
      const bool has_single = s.find('\'') != std::string::npos;
      const bool has_double = s.find('"') != std::string::npos;
      const char quote = (has_single && !has_double) ? '"' : '\'';
      std::string out(1, quote);
      for (char c : s) {
        if (c == '\\')
          out += "\\\\";
        else if (c == quote)
          out += std::string("\\") + c;
        else if (c == '\n')
          out += "\\n";
        else
          out += c;
      }
      return out + quote;
    }
    case Json::value_t::array: {
      std::string out = "[";
      bool first = true;
      for (const Json& v : value) {
        if (!first) out += ", ";
        first = false;
        out += python_repr(v);
      }
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : value.items()) {
        if (!first) out += ", ";
        first = false;
        out += python_repr(Json(k)) + ": " + python_repr(v);
      }
      return out + "}";
    }
    case Json::value_t::number_float: {
      const double d = value.get<double>();
      if (d == std::floor(d) && std::fabs(d) < 1e16) return fmt::format("{:.1f}", d);
      return fmt::format("{}", d);  // shortest round-trip, like Python's repr
    }
    default:
      return value.dump();
  }
}

}  // namespace kvq::quant
