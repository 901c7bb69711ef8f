#include "doctor/detectors/numerics.h"

#include <gtest/gtest.h>

#include "doctor/detectors/loss_curve.h"
#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using namespace testing;
using json = nlohmann::json;

// A DeepSpeed-style fp16 run: `steps` steps; a skip writes amp/overflow_skip = 1 and the
// new loss scale at that step (as the DeepSpeed log reader does). `skip_at(step)` says
// whether the step overflowed. The scale halves on every skip and doubles after `window`
// clean steps.
struct Fp16Run {
  int64_t steps = 2000;
  double scale = 65536;
  int64_t window = 100;
  template <typename SkipAt>
  std::vector<Finding> Run(SkipAt skip_at, std::set<std::string> only = {"fp16_overflow"}) {
    Feed feed(std::move(only));
    int64_t clean = 0;
    for (int64_t s = 0; s < steps; ++s) {
      feed.Scalar("train/loss", s, 2.0);
      if (skip_at(s)) {
        scale /= 2;
        clean = 0;
        feed.Scalar("amp/overflow_skip", s, 1);
        feed.Scalar("amp/loss_scale", s, scale);
      } else if (++clean == window) {
        scale = std::min(scale * 2, 65536.0);
        clean = 0;
      }
    }
    return feed.Finish();
  }
};

TEST(Fp16Overflow, CalibrationAndOneSkipPerGrowthWindowIsInfo) {
  // 5 halvings at the start (65536 -> 2048), then the scaler probes upwards and overflows
  // once per 100-step growth window: DeepSpeed-Chat's SFT log looks like this.
  Fp16Run run;
  const auto f = run.Run([](int64_t s) { return (s >= 1 && s <= 5) || (s > 600 && s % 101 == 0); });
  const Finding* o = FindCode(f, "FP16_OVERFLOW");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->severity, Severity::kInfo);
  EXPECT_EQ(o->step, 1);
  EXPECT_EQ(o->location, "amp/overflow_skip");
  const json ev = json::parse(o->evidence_json);
  EXPECT_EQ(ev["calibration_skips"], 5);
  EXPECT_EQ(ev["skipped"], 5 + 14);  // 606, 707, ..., 1919
  EXPECT_EQ(ev["skip_steps"][0], 1);
  EXPECT_EQ(ev["loss_scale"]["first"], 32768.0);
  EXPECT_EQ(ev["loss_scale"]["min"], 2048.0);
  EXPECT_NE(o->summary.find("5 at the start"), std::string::npos) << o->summary;
}

TEST(Fp16Overflow, ManySkipsAfterCalibrationWarn) {
  // One step in 6 skipped from step 500 on: 33 in a 200-step window (> 10 %).
  Fp16Run run;
  run.window = 3;  // the scale keeps recovering, so it never collapses
  const auto f = run.Run([](int64_t s) { return s >= 500 && s < 900 && s % 6 == 0; });
  const Finding* o = FindCode(f, "FP16_OVERFLOW");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->severity, Severity::kWarning);
  const json ev = json::parse(o->evidence_json);
  EXPECT_EQ(ev["calibration_skips"], 0);
  EXPECT_GE(ev["max_skips_in_window"].get<int>(), 33);
  EXPECT_LE(ev["max_skips_in_window"].get<int>(), 34);
  // Just under the threshold (1 in 11: 18 in 200 steps) stays info.
  Fp16Run calm;
  calm.window = 3;
  const auto g = calm.Run([](int64_t s) { return s >= 500 && s < 900 && s % 11 == 0; });
  ASSERT_NE(FindCode(g, "FP16_OVERFLOW"), nullptr);
  EXPECT_EQ(FindCode(g, "FP16_OVERFLOW")->severity, Severity::kInfo);
}

TEST(Fp16Overflow, ConsecutiveSkipsAfterCalibrationWarn) {
  Fp16Run run;
  const auto f = run.Run([](int64_t s) { return s >= 1000 && s < 1008; });  // 8 in a row: /256
  ASSERT_NE(FindCode(f, "FP16_OVERFLOW"), nullptr);
  EXPECT_EQ(FindCode(f, "FP16_OVERFLOW")->severity, Severity::kWarning);
  EXPECT_EQ(FindCode(f, "FP16_OVERFLOW")->step, 1000);
  Fp16Run shorter;
  const auto g = shorter.Run([](int64_t s) { return s >= 1000 && s < 1007; });
  EXPECT_EQ(FindCode(g, "FP16_OVERFLOW")->severity, Severity::kInfo);
  // The same 8 at the very start are the calibration: info.
  Fp16Run start;
  const auto h = start.Run([](int64_t s) { return s < 8; });
  EXPECT_EQ(FindCode(h, "FP16_OVERFLOW")->severity, Severity::kInfo);
  EXPECT_EQ(json::parse(FindCode(h, "FP16_OVERFLOW")->evidence_json)["calibration_skips"], 8);
}

TEST(Fp16Overflow, ScaleCollapsingToOneIsCritical) {
  Fp16Run run;
  run.window = 1000000;  // never grows back
  // 16 halvings spread out (never 8 in a row, never 10 % of a window): 65536 -> 1.
  const auto f = run.Run([](int64_t s) { return s >= 200 && s % 50 == 0 && s <= 950; });
  const Finding* o = FindCode(f, "FP16_OVERFLOW");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->severity, Severity::kCritical);
  EXPECT_EQ(json::parse(o->evidence_json)["loss_scale"]["min"], 1.0);
  EXPECT_NE(o->summary.find("even unscaled"), std::string::npos) << o->summary;
}

TEST(Fp16Overflow, NoSkipsNoFinding) {
  Fp16Run run;
  const auto f = run.Run([](int64_t) { return false; });
  EXPECT_EQ(FindCode(f, "FP16_OVERFLOW"), nullptr);
}

TEST(Fp16Overflow, MegatronCountersPerInterval) {
  // Megatron prints per logging interval: "number of skipped iterations" and "number of
  // nan iterations", and the loss scale.
  Feed feed({"fp16_overflow"});
  for (int64_t s = 10; s <= 2000; s += 10) {
    feed.Scalar("lm loss", s, 5.0);
    feed.Scalar("loss scale", s, s == 10 ? 131072 : 65536);
    feed.Scalar("number of skipped iterations", s, s == 10 ? 7 : s == 1500 ? 1 : 0);
    feed.Scalar("number of nan iterations", s, s == 1500 ? 1 : 0);
  }
  const auto f = feed.Finish();
  const Finding* o = FindCode(f, "FP16_OVERFLOW");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->severity, Severity::kInfo);
  EXPECT_EQ(o->location, "number of skipped iterations");
  const json ev = json::parse(o->evidence_json);
  EXPECT_EQ(ev["skipped"], 8);
  EXPECT_EQ(ev["calibration_skips"], 7);  // the first interval's burst
  const Finding* nan = FindCode(f, "NONFINITE_LOSS");
  ASSERT_NE(nan, nullptr);
  EXPECT_EQ(nan->step, 1500);
  EXPECT_EQ(nan->location, "number of nan iterations");
}

TEST(Fp16Overflow, CumulativeCounterWithoutEvents) {
  // DeepSpeed's `skipped=K` alone (a log cut before its OVERFLOW lines): a running total.
  Feed feed({"fp16_overflow"});
  for (int64_t s = 10; s <= 1000; s += 10) feed.Scalar("skipped", s, s < 500 ? 3 : 4);
  const auto f = feed.Finish();
  const Finding* o = FindCode(f, "FP16_OVERFLOW");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(json::parse(o->evidence_json)["skipped"], 4);
  EXPECT_EQ(o->severity, Severity::kInfo);
}

// ---- negative loss names ----

TEST(NegativeLossNames, PolicyGradientLossesMayBeNegative) {
  for (const char* name : {"act_loss", "actor_loss", "policy_loss", "pg_loss", "ppo/loss/policy", "rl/loss",
                           "advantage_loss", "train/entropy_loss", "nll", "gen_loss"}) {
    EXPECT_TRUE(LossMayBeNegative(name)) << name;
  }
  for (const char* name : {"train/loss", "loss", "cri_loss", "exact_match_loss", "impact_loss", "lm loss",
                           "value_loss", "mean_loss"}) {
    EXPECT_FALSE(LossMayBeNegative(name)) << name;
  }
}

TEST(NegativeLossNames, NegativeActorLossIsNotReported) {
  Feed feed({"negative_loss"});
  for (int64_t s = 0; s < 50; ++s) feed.Scalar("act_loss", s, -0.2);
  EXPECT_EQ(FindCode(feed.Finish(), "NEGATIVE_LOSS"), nullptr);
  Feed plain({"negative_loss"});
  for (int64_t s = 0; s < 50; ++s) plain.Scalar("train_loss", s, -0.2);
  EXPECT_NE(FindCode(plain.Finish(), "NEGATIVE_LOSS"), nullptr);
}

}  // namespace
}  // namespace trainscope::doctor
