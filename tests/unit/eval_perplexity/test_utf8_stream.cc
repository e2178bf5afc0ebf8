// Utf8Stream (used by `kvq generate` to stream byte-level tokens) holds back cut characters.
#include <gtest/gtest.h>

#include "kvq/eval/utf8_stream.h"

namespace kvq::eval {
namespace {

TEST(Utf8Stream, AsciiPassesThrough) {
  Utf8Stream s;
  EXPECT_EQ(s.push("Hello"), "Hello");
  EXPECT_EQ(s.push(" world"), " world");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, HoldsBackASplitCharacter) {
  Utf8Stream s;
  EXPECT_EQ(s.push("caf\xC3"), "caf");  // é = C3 A9
  EXPECT_EQ(s.push("\xA9!"), "\xC3\xA9!");
  // 4-byte emoji U+1F600 = F0 9F 98 80 split 1 + 2 + 1.
  EXPECT_EQ(s.push("\xF0"), "");
  EXPECT_EQ(s.push("\x9F\x98"), "");
  EXPECT_EQ(s.push("\x80 ok"), "\xF0\x9F\x98\x80 ok");
}

TEST(Utf8Stream, FlushReturnsAnIncompleteTail) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xE2\x82"), "a");  // € = E2 82 AC, cut
  EXPECT_EQ(s.flush(), "\xE2\x82");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Stream, InvalidBytesAreNotHeldForever) {
  Utf8Stream s;
  EXPECT_EQ(s.push("\x80x"), "\x80x");  // stray continuation byte
  EXPECT_EQ(s.push("\xFFy"), "\xFFy");  // never a lead byte
}

}  // namespace
}  // namespace kvq::eval
