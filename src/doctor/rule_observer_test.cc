#include "doctor/rule_observer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "recorder/recorder.h"
#include "recorder/recorder_test_fixture.h"

// The alert rules composed with a recorder, as the Python module composes them.
namespace trainscope::doctor {
namespace {

namespace fs = std::filesystem;

class RecorderWithRules : public RecorderFixture {};

// Rules are judged on the writer's tick, long before a commit (flush interval 60 s); an
// alert is taken only once its step has ended; its finding is stored with the run.
TEST_F(RecorderWithRules, AlertRulesFireBetweenCommitsAndWaitForTheirStepToEnd) {
  auto options = Options("alerts");
  options.flush_interval_seconds = 60;
  std::shared_ptr<RuleObserver> rules;
  ASSERT_TRUE(RuleObserver::FromText("[[rule]]\nname = \"high\"\nseries = \"train/*\"\nabove = 2.0\nfor = 2\n"
                                     "actions = [\"stop\"]\n",
                                     "alert rules", &rules)
                  .ok());
  options.observers.push_back(rules);
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  EXPECT_EQ(rules->rule_count(), 1u);
  uint32_t loss = 0, other = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &loss).ok());
  ASSERT_TRUE(rec->Series("val/loss", SeriesKind::kScalar, &other).ok());
  const double values[] = {1, 3, 1, 3, 3, 3};
  for (int step = 0; step < 6; ++step) {
    rec->LogScalar(loss, step, values[step]);
    rec->LogScalar(other, step, 100.0);  // no rule matches val/*
  }
  for (int i = 0; i < 400 && !rec->alerts_pending(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(rec->alerts_pending()) << "no alert within 2 s of the tick";
  EXPECT_TRUE(rec->TakeAlerts(4).empty());  // step 4 has not ended at step 4
  EXPECT_TRUE(rec->alerts_pending());
  std::vector<RuleAlert> alerts = rec->TakeAlerts(5);
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].rule, "high");
  EXPECT_EQ(alerts[0].series, "train/loss");
  EXPECT_EQ(alerts[0].step, 4);  // the second consecutive point above 2
  EXPECT_EQ(alerts[0].value, 3.0);
  EXPECT_EQ(alerts[0].actions, std::vector<std::string>{"stop"});
  EXPECT_FALSE(rec->alerts_pending());
  ASSERT_EQ(rec->live_findings().size(), 1u);
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "alerts").string(), &store).ok());
  std::vector<Finding> findings;
  ASSERT_TRUE(store->ReadFindings(&findings).ok());
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].code, "USER_ALERT");
  EXPECT_EQ(findings[0].step, 4);
  EXPECT_EQ(findings[0].location, "train/loss");
}

// The rules are parsed before Open: a bad one is reported before the run exists.
TEST_F(RecorderWithRules, ABadRuleFailsOpenBeforeTheRunExists) {
  std::shared_ptr<RuleObserver> rules;
  Status s = RuleObserver::FromText("[[rule]]\nseries = \"x\"\nabove = \"high\"\n", "rules.toml", &rules);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rules.toml"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("expected a number"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(logdir_ / "bad"));
}

}  // namespace
}  // namespace trainscope::doctor
