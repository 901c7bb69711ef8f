#include <gtest/gtest.h>

#include "core/tag.h"

namespace trainscope {
namespace {

TEST(Tag, AcceptsPathsSpacesAndUnicode) {
  EXPECT_TRUE(ValidateTag("train/loss").ok());
  EXPECT_TRUE(ValidateTag("rollout/exploration rate").ok());
  EXPECT_TRUE(ValidateTag("grad/encoder.layers.0.weight").ok());
  EXPECT_TRUE(ValidateTag("val/\xc3\xa9l\xc3\xa8ve").ok());
}

TEST(Tag, RejectsEmptyTooLongControlAndBadUtf8) {
  EXPECT_NE(ValidateTag("").message().find("empty"), std::string::npos);
  EXPECT_NE(ValidateTag(std::string(kMaxTagBytes + 1, 'a')).message().find("at most"), std::string::npos);
  EXPECT_TRUE(ValidateTag(std::string(kMaxTagBytes, 'a')).ok());
  EXPECT_NE(ValidateTag("a\nb").message().find("control character at byte 1"), std::string::npos);
  EXPECT_NE(ValidateTag("bad\xff").message().find("UTF-8"), std::string::npos);
}

TEST(Utf8, RejectsOverlongsSurrogatesAndTruncation) {
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));       // euro sign
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));   // emoji
}

}  // namespace
}  // namespace trainscope
