#include "core/finding_json.h"

#include <gtest/gtest.h>

namespace trainscope {
namespace {

using json = nlohmann::json;

Finding Sample() {
  Finding f;
  f.code = "LOSS_SPIKE";
  f.severity = Severity::kCritical;
  f.step = 12;
  f.last_step = 15;
  f.location = "train/loss";
  f.summary = "loss jumped";
  f.evidence_json = R"({"ratio":40.5,"value":"nan"})";
  f.causes = {{"lr_too_high", 0.625}};
  f.actions = {"lower the LR"};
  return f;
}

TEST(FindingJson, WrittenFormReadsBackWhole) {
  const json written = FindingToJson(Sample());
  EXPECT_EQ(written["severity"], "critical");
  EXPECT_EQ(written["evidence"]["ratio"], 40.5);
  Finding back;
  ASSERT_TRUE(FindingFromJson(written, FindingFields::kComplete, &back).ok());
  EXPECT_EQ(FindingToJson(back).dump(), written.dump());
}

TEST(FindingJson, CompleteFormNamesTheMissingOrMistypedField) {
  json j = FindingToJson(Sample());
  j.erase("location");
  Finding f;
  Status s = FindingFromJson(j, FindingFields::kComplete, &f);
  EXPECT_EQ(s.message(), "'location' is required");
  j = FindingToJson(Sample());
  j["step"] = "12";
  s = FindingFromJson(j, FindingFields::kComplete, &f);
  EXPECT_EQ(s.message(), "'step' must be an integer");
  j = FindingToJson(Sample());
  j["evidence"] = json::array({1});
  EXPECT_EQ(FindingFromJson(j, FindingFields::kComplete, &f).message(), "'evidence' must be an object");
  j = FindingToJson(Sample());
  j["causes"] = json::array({"lr"});
  EXPECT_EQ(FindingFromJson(j, FindingFields::kComplete, &f).message(),
            "each cause must be an object with a string 'id'");
  EXPECT_EQ(f.code, "") << "a failed read leaves the finding as it was";
}

TEST(FindingJson, CodeOnlyFormFillsDefaultsAndTakesMessageForSummary) {
  Finding f;
  ASSERT_TRUE(FindingFromJson(json{{"code", "X"}, {"step", 3}, {"message", "said"}, {"location", nullptr}},
                              FindingFields::kCodeOnly, &f)
                  .ok());
  EXPECT_EQ(f.code, "X");
  EXPECT_EQ(f.severity, Severity::kWarning);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(f.last_step, 3);
  EXPECT_EQ(f.summary, "said");
  EXPECT_EQ(f.location, "");
  EXPECT_EQ(f.evidence_json, "{}");
  EXPECT_EQ(FindingFromJson(json{{"severity", "warning"}}, FindingFields::kCodeOnly, &f).message(), "'code' is required");
  EXPECT_EQ(FindingFromJson(json{{"code", "X"}, {"severity", "loud"}}, FindingFields::kCodeOnly, &f).message(),
            "'severity' must be info, warning or critical, got 'loud'");
  EXPECT_EQ(FindingFromJson(json::array(), FindingFields::kCodeOnly, &f).message(), "expected a JSON object");
}

TEST(FindingJson, RangeEndingBeforeItsStartReadsAsOneStep) {
  json j = FindingToJson(Sample());
  j["last_step"] = 4;
  Finding f;
  ASSERT_TRUE(FindingFromJson(j, FindingFields::kComplete, &f).ok());
  EXPECT_EQ(f.last_step, 12);
}

}  // namespace
}  // namespace trainscope
