// Small string helpers shared by the parsers of names users type (formats, schemes, enums).
#pragma once

#include <string>
#include <string_view>

namespace kvq {

// ASCII lowercase (names are ASCII; other bytes are kept as they are).
std::string ascii_lower(std::string_view text);

// Byte offset of the first invalid UTF-8 sequence in `s`, or npos. Rejects overlong forms,
// surrogates and code points above U+10FFFF (as Rust's str::from_utf8 and Python do).
std::size_t find_invalid_utf8(std::string_view s);

// `s` with every byte outside printable ASCII written as \xNN, at most `max_chars` of it (then
// "..."): for naming a string that is not valid UTF-8 in a message.
std::string escape_bytes(std::string_view s, std::size_t max_chars = 60);

}  // namespace kvq
