// Streaming token bytes to a terminal: a byte-level BPE token may end in the middle of a UTF-8
// character, so bytes are held back until the character they start is complete.
#pragma once

#include <string>
#include <string_view>

namespace kvq::eval {

class Utf8Stream {
 public:
  // Appends `bytes`; returns the longest prefix of everything pending that does not end inside
  // an incomplete UTF-8 sequence (invalid bytes are passed through, never held forever).
  std::string push(std::string_view bytes);
  // Everything still held back (an incomplete sequence at the end of the generation).
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace kvq::eval
