#include "doctor/doctor.h"

#include <gtest/gtest.h>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using namespace testing;

TEST(Doctor, HealthyRunRaisesNoAlarm) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Feed feed({});
    HealthyRun(feed, 600, seed);
    const auto findings = feed.Finish();
    for (const auto& f : findings) {
      EXPECT_LT(f.severity, Severity::kWarning) << "seed " << seed << ": " << f.code << " at " << f.step << " in "
                                                << f.location << ": " << f.summary;
    }
    EXPECT_EQ(feed.doctor().steps_judged(), 600);
  }
}

TEST(Doctor, OfflineEqualsOnline) {
  RunData run;
  Feed online({});
  // Replay a run series by series offline; feed the same samples step by step online.
  std::mt19937 rng(3);
  for (int64_t s = 0; s < 300; ++s) {
    const double loss = s == 200 ? 50.0 : HealthyLoss(s, rng);
    run.OnScalar("train/loss", s, 0, loss);
    online.Scalar("train/loss", s, loss);
    const TensorStats g = WithRms(64, s == 250 ? NAN : 0.1, s);
    run.OnTensorStats("grad/w", s, 0, s == 250 ? WithNonFinite(g, 3) : g);
    online.Stats("grad/w", s, s == 250 ? WithNonFinite(g, 3) : g);
  }
  const Diagnosis offline = Diagnose(run);
  const auto live = online.Finish();
  ASSERT_EQ(offline.findings.size(), live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    EXPECT_EQ(offline.findings[i].code, live[i].code);
    EXPECT_EQ(offline.findings[i].step, live[i].step);
    EXPECT_EQ(offline.findings[i].location, live[i].location);
  }
  EXPECT_NE(FindCode(live, "NONFINITE_GRAD"), nullptr);
  EXPECT_EQ(offline.steps, 300);
}

TEST(Doctor, SamplesOfAStepArriveInterleavedWithTheNext) {
  Feed feed({"nonfinite"});
  feed.Scalar("train/loss", 0, 1.0);
  feed.Scalar("train/loss", 1, 1.0);
  // The gradient of step 0 arrives after step 1 started: still judged with step 0.
  feed.Stats("grad/w", 0, WithNonFinite(WithRms(8, 1), 1));
  feed.Scalar("train/loss", 5, 1.0);
  feed.Stats("grad/w", 0, WithRms(8, 1));  // too late: step 0 was judged
  const auto findings = feed.Finish();
  const Finding* f = FindCode(findings, "NONFINITE_GRAD");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->step, 0);
  EXPECT_EQ(feed.doctor().late_samples(), 1u);
}

TEST(Doctor, RecordedFindingsMergeByCodeAndLocation) {
  RunData run;
  for (int64_t s = 0; s < 10; ++s) run.OnScalar("train/loss", s, 0, s == 4 ? NAN : 1.0);
  Finding recorded;
  recorded.code = "NONFINITE_LOSS";
  recorded.location = "loss";
  recorded.step = 4;
  run.OnFinding(recorded);
  Finding other = recorded;
  other.code = "ARCHITECTURE_WARNING";
  other.location = "pool1";
  run.OnFinding(other);
  const Diagnosis d = Diagnose(run);
  int nonfinite = 0;
  for (const auto& f : d.findings) nonfinite += f.code == "NONFINITE_LOSS";
  EXPECT_EQ(nonfinite, 1);
  EXPECT_NE(FindCode(d.findings, "ARCHITECTURE_WARNING"), nullptr);
  EXPECT_EQ(d.findings.front().severity, Severity::kCritical);  // worst first
}

TEST(Doctor, RepeatedFindingExtendsInsteadOfDuplicating) {
  Feed feed({"nonfinite"});
  for (int64_t s = 0; s < 20; ++s) feed.Scalar("train/loss", s, s >= 10 ? NAN : 1.0);
  const auto findings = feed.Finish();
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].step, 10);
  EXPECT_EQ(findings[0].last_step, 19);
  EXPECT_FALSE(findings[0].actions.empty());  // filled from the knowledge base
}

TEST(Doctor, LossOnlyLogSaysWhatItCouldNotCheck) {
  RunData run;
  run.OnMeta("roles", R"({"loss": "objective"})");
  std::mt19937 rng(1);
  for (int64_t s = 0; s < 200; ++s) run.OnScalar("objective", s * 10, 0, HealthyLoss(s, rng));
  const Diagnosis d = Diagnose(run);
  EXPECT_EQ(Alarms(d.findings), 0u);
  std::set<std::string> unchecked;
  for (const auto& n : d.not_checked) {
    EXPECT_FALSE(n.reason.empty());
    for (const auto& c : n.codes) unchecked.insert(c);
  }
  for (const char* code : {"NONFINITE_GRAD", "GRAD_VANISHING", "DEAD_UNITS", "OVERFITTING", "MEMORY_LEAK",
                           "DATALOADER_BOTTLENECK", "UPDATE_RATIO_HIGH", "NONFINITE_INPUT", "LR_ANOMALY"}) {
    EXPECT_TRUE(unchecked.count(code)) << code;
  }
  EXPECT_FALSE(unchecked.count("LOSS_SPIKE"));  // the loss was found through the role map
  const auto j = DiagnosisToJson(d, "x.csv", "csv", 1990);
  EXPECT_EQ(j["steps"], 1990);
  EXPECT_TRUE(j["not_checked"].is_array());
  EXPECT_GT(j["not_checked"].size(), 5u);
}

TEST(Doctor, LiveAlertCallbackFiresOncePerFinding) {
  DoctorOptions o;
  int calls = 0;
  o.on_finding = [&](const Finding& f) { ++calls; };
  Feed feed({"nonfinite"}, o);
  for (int64_t s = 0; s < 20; ++s) feed.Scalar("train/loss", s, s >= 10 ? NAN : 1.0);
  feed.Finish();
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace trainscope::doctor
