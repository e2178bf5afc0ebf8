#include "kvq/eval/utf8_stream.h"

#include <cstddef>

namespace kvq::eval {
namespace {

// Length of the UTF-8 sequence a lead byte starts (1 for ASCII and for invalid lead bytes,
// which are emitted as they are).
std::size_t sequence_length(unsigned char c) {
  if (c < 0xC0) return 1;  // ASCII, or a stray continuation byte
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  if (c < 0xF8) return 4;
  return 1;
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the start of the last sequence: at most 3 continuation bytes back.
  std::size_t cut = pending_.size();
  for (std::size_t back = 1; back <= 4 && back <= pending_.size(); ++back) {
    const auto c = static_cast<unsigned char>(pending_[pending_.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    if (sequence_length(c) > back) cut = pending_.size() - back;  // incomplete: hold it back
    break;
  }
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace kvq::eval
