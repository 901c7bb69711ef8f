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
  for (const std::string& bad : {std::string(), std::string(kMaxTagBytes + 1, 'a'), std::string("a\nb")}) {
    EXPECT_TRUE(ValidateTag(bad).IsInvalidArgument()) << StatusCodeName(ValidateTag(bad).code());
  }
}

TEST(Utf8, RejectsOverlongsSurrogatesAndTruncation) {
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));       // euro sign
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));   // emoji
}

// data/tag_families.json: a family is a prefix, a known tag a whole tag; the user's tags,
// even those starting like trainscope's words, stay the user's.
TEST(TagFamilies, TrainscopeSeriesByPrefixOrWholeTag) {
  for (const char* tag : {"grad/fc.weight/norm", "update_ratio/fc.weight", "census/dict", "sys/cpu_percent",
                          "input/0/mean", "amp/scale", "train/grad_zeroed", "opt/lr"}) {
    EXPECT_TRUE(tags::IsTrainscopeSeries(tag)) << tag;
  }
  for (const char* tag : {"train/loss", "val/acc", "gradnorm", "train/grad_zeroed_total", "my/grad/x", "loss",
                          "census", "", "weight/fc.weight", "act/fc"}) {
    EXPECT_FALSE(tags::IsTrainscopeSeries(tag)) << tag;
  }
}

TEST(TagFamilies, OneParser) {
  std::string_view rest;
  EXPECT_EQ(tags::FamilyOf("grad/encoder.0.weight", &rest), &tags::kGrad);
  EXPECT_EQ(rest, "encoder.0.weight");
  EXPECT_EQ(tags::FamilyOf("grad_units/fc.weight", &rest), &tags::kGradUnits);  // not grad/
  EXPECT_EQ(rest, "fc.weight");
  EXPECT_EQ(tags::FamilyOf("train/loss"), nullptr);
  EXPECT_EQ(tags::FamilyOf("grad"), nullptr);
  EXPECT_EQ(tags::kAct.Of("blocks.0"), "act/blocks.0");
  EXPECT_TRUE(tags::kTime.Holds(tags::kTimeStep, &rest));
  EXPECT_EQ(rest, "step");
  EXPECT_TRUE(tags::InGroup(tags::kMemRss, tags::kPerformanceGroup));
  EXPECT_FALSE(tags::InGroup("train/loss", tags::kPerformanceGroup));
}

// Every known tag lies in a family of the table, or is one of the few trainscope writes
// under the user's own train/ prefix.
TEST(TagFamilies, KnownTagsBelongToAFamily) {
  for (const tags::KnownTag& known : tags::kKnownTags) {
    const bool under_train = known.tag.substr(0, 6) == "train/";
    EXPECT_TRUE(tags::FamilyOf(known.tag) != nullptr || under_train) << known.tag;
  }
}

}  // namespace
}  // namespace trainscope
