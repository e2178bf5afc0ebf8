#include "kvq/tokenizer/byte_level.h"

#include <array>

namespace kvq::tok {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  // Alphabet code points are all below 0x144; index by code point.
  std::array<int16_t, 0x144> char_to_byte{};
};

// Printable Latin-1 bytes map to themselves; the other 68 bytes, in order, to U+0100 onwards.
Tables make_tables() {
  Tables t;
  t.char_to_byte.fill(-1);
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    t.byte_to_char[b] = printable ? static_cast<char32_t>(b) : next++;
    t.char_to_byte[t.byte_to_char[b]] = static_cast<int16_t>(b);
  }
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

char32_t byte_to_char(uint8_t b) { return tables().byte_to_char[b]; }

std::string byte_level_decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    auto c0 = static_cast<uint8_t>(token[i]);
    size_t len = c0 < 0x80 ? 1 : c0 < 0xE0 ? 2 : c0 < 0xF0 ? 3 : 4;
    if (i + len > token.size()) len = token.size() - i;
    char32_t cp = c0;
    if (len == 2) cp = ((c0 & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
    if (len == 2 && cp < t.char_to_byte.size() && t.char_to_byte[cp] >= 0) {
      out += static_cast<char>(t.char_to_byte[cp]);
    } else if (len == 1 && t.char_to_byte[cp] >= 0) {
      out += static_cast<char>(t.char_to_byte[cp]);
    } else {
      out.append(token.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char b : bytes) append_utf8(out, byte_to_char(static_cast<uint8_t>(b)));
  return out;
}

}  // namespace kvq::tok
