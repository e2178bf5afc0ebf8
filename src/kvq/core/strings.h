// Small string helpers shared by the parsers of names users type (formats, schemes, enums).
#pragma once

#include <string>
#include <string_view>

namespace kvq {

// ASCII lowercase (names are ASCII; other bytes are kept as they are).
std::string ascii_lower(std::string_view text);

}  // namespace kvq
