// GPT-2's ByteLevel alphabet: every byte 0..255 is shown as one printable Unicode char, so a
// byte-level BPE vocabulary spells raw bytes as text ("Ġ" is the space byte 0x20).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvq::tok {

// The code point that byte `b` is spelled with in a byte-level vocabulary.
char32_t byte_to_char(uint8_t b);

// The raw bytes a byte-level token string stands for. Code points outside the alphabet (e.g.
// in added tokens such as "<|im_end|>", whose ASCII chars are in it anyway) pass through as
// their UTF-8, as the Hugging Face ByteLevel decoder does.
std::string byte_level_decode(std::string_view token);

// The byte-level spelling (UTF-8) of raw bytes: the inverse of byte_level_decode.
std::string byte_level_encode(std::string_view bytes);

}  // namespace kvq::tok
