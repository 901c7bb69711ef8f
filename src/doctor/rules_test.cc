#include "doctor/rules.h"

#include <gtest/gtest.h>

#include <cmath>

namespace trainscope::doctor {
namespace {

std::vector<AlertRule> Parse(const std::string& text) {
  std::vector<AlertRule> rules;
  Status s = ParseRules(text, "rules.toml", &rules);
  EXPECT_TRUE(s.ok()) << s.message();
  return rules;
}

TEST(Rules, ParsesEveryField) {
  const auto rules = Parse(R"(
[[rule]]
name = "loss high"
series = "train/loss"
above = 10
for = 3
severity = "critical"
actions = ["print", "stop"]
shell = "echo {rule} {step}"
callback = "on_loss"
cooldown = 5
)");
  ASSERT_EQ(rules.size(), 1u);
  const AlertRule& r = rules[0];
  EXPECT_EQ(r.name, "loss high");
  EXPECT_DOUBLE_EQ(*r.above, 10);
  EXPECT_EQ(r.for_points, 3u);
  EXPECT_EQ(r.severity, Severity::kCritical);
  EXPECT_EQ(r.actions, (std::vector<std::string>{"print", "stop", "shell", "callback"}));
  EXPECT_EQ(r.cooldown, 5);
}

TEST(Rules, ErrorsNameTheFileLineAndWhatWasExpected) {
  std::vector<AlertRule> rules;
  Status s = ParseRules("[[rule]]\nseries = \"x\"\nabove = \"ten\"\n", "my.toml", &rules);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("my.toml"), std::string::npos);
  EXPECT_NE(s.message().find("expected a number"), std::string::npos);
  EXPECT_NE(s.message().find("3"), std::string::npos);  // the line
  s = ParseRules("[[rule]]\nseries = \"x\"\n", "my.toml", &rules);
  EXPECT_NE(s.message().find("needs a condition"), std::string::npos);
  s = ParseRules("[[rule]]\nseries = \"x\"\nabove = 1\nactions = [\"explode\"]\n", "my.toml", &rules);
  EXPECT_NE(s.message().find("unknown action 'explode'"), std::string::npos);
  s = ParseRules("[[rule]]\nseries = \"x\"\nabove = 1\nbogus = 2\n", "my.toml", &rules);
  EXPECT_NE(s.message().find("unknown rule key 'bogus'"), std::string::npos);
  s = ParseRules("[[rule]\n", "my.toml", &rules);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(LoadRulesFile("/nonexistent/rules.toml", &rules).ok());
}

TEST(Rules, AbsoluteForKConsecutive) {
  RuleEngine e(Parse("[[rule]]\nseries = \"train/loss\"\nabove = 5\nfor = 3\ncooldown = 0\n"));
  const double v[] = {6, 6, 1, 6, 6, 6, 6};
  for (int i = 0; i < 7; ++i) e.OnScalar("train/loss", i, 0, v[i]);
  const auto alerts = e.TakeAlerts();
  ASSERT_EQ(alerts.size(), 2u);
  EXPECT_EQ(alerts[0].step, 5);
  EXPECT_EQ(alerts[1].step, 6);
  EXPECT_TRUE(e.TakeAlerts().empty());
  EXPECT_FALSE(e.stop_requested());
}

TEST(Rules, RelativeToEmaAndMedian) {
  RuleEngine e(Parse(R"(
[[rule]]
name = "ema"
series = "grad/*"
stat = "l2_norm"
above_ema = 3
[[rule]]
name = "median"
series = "train/loss"
above_median = 2
window = 10
actions = ["stop"]
)"));
  TensorStats s;
  for (int i = 0; i < 20; ++i) {
    const double x = i == 15 ? 4.0 : 1.0;
    const double sq = x * x;
    s.numel = 1;
    s.sum_squares = sq;
    e.OnTensorStats("grad/fc.weight", i, 0, s);
    e.OnScalar("train/loss", i, 0, i == 12 ? 2.5 : 1.0);
    e.OnScalar("val/loss", i, 0, 100);  // no rule for it
  }
  const auto alerts = e.TakeAlerts();
  ASSERT_EQ(alerts.size(), 2u);
  EXPECT_EQ(alerts[0].rule, "median");
  EXPECT_EQ(alerts[0].step, 12);
  EXPECT_EQ(alerts[1].rule, "ema");
  EXPECT_EQ(alerts[1].series, "grad/fc.weight");
  EXPECT_EQ(alerts[1].step, 15);
  EXPECT_TRUE(e.stop_requested());
}

TEST(Rules, NoImprovementRateAndNonFinite) {
  RuleEngine e(Parse(R"(
[[rule]]
name = "stall"
series = "val/acc"
no_improvement = 30
mode = "max"
min_delta = 0.01
[[rule]]
name = "rise"
series = "mem/rss"
rate_above = 1000
for = 2
[[rule]]
name = "nan"
series = "train/loss"
nonfinite = true
severity = "critical"
)"));
  for (int i = 0; i < 100; i += 10) e.OnScalar("val/acc", i, 0, i < 40 ? 0.1 * i / 10 : 0.305);
  for (int i = 0; i < 10; ++i) e.OnScalar("mem/rss", i, 0, i < 5 ? 1e6 : 1e6 + 2000.0 * (i - 4));
  e.OnScalar("train/loss", 7, 0, NAN);
  const auto alerts = e.TakeAlerts();
  std::map<std::string, int64_t> first;
  for (const auto& a : alerts) first.try_emplace(a.rule, a.step);
  EXPECT_EQ(first["stall"], 60);  // best 0.3 at step 30; 30 steps without +0.01
  EXPECT_EQ(first["rise"], 6);
  EXPECT_EQ(first["nan"], 7);
  const Finding f = AlertToFinding(alerts.back());
  EXPECT_EQ(f.code, "USER_ALERT");
}

TEST(Rules, ShellActionGetsTheAlertInItsEnvironment) {
  const std::string out = ::testing::TempDir() + "/alert_out.txt";
  Alert a;
  a.rule = "r1";
  a.series = "train/loss";
  a.step = 42;
  a.value = 3.5;
  a.shell = "echo \"{rule} $TRAINSCOPE_ALERT_STEP {value}\" > " + out;
  EXPECT_EQ(RunShellAction(a), 0);
  FILE* f = std::fopen(out.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[64] = {0};
  ASSERT_NE(std::fgets(buf, sizeof(buf), f), nullptr);
  std::fclose(f);
  EXPECT_EQ(std::string(buf), "r1 42 3.5\n");
}

}  // namespace
}  // namespace trainscope::doctor
