#include "doctor/detectors/early_steps.h"

#include <cmath>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using testing::Feed;
using testing::FindCode;
using testing::WithRms;

// The loss of the first steps, then a flat tail; the gradient norm and the first update.
std::vector<Finding> Start(std::vector<double> first_losses, double update_ratio = 0.01, double grad_jump = 1,
                           std::set<std::string> only = {"early_blowup"}) {
  Feed feed(std::move(only));
  for (int64_t s = 0; s < 150; ++s) {
    const double loss = s < static_cast<int64_t>(first_losses.size()) ? first_losses[s] : 2.3;
    feed.Scalar("train/loss", s, loss);
    feed.Scalar("grad/global_norm", s, s == 1 ? 0.7 * grad_jump : 0.7);
    if (s == 0) {
      feed.Stats("weight/fc.weight", s, WithRms(100, 1.0));
      feed.Stats("update/fc.weight", s, WithRms(100, update_ratio, 3));
    }
  }
  return feed.Finish();
}

TEST(EarlyBlowup, LossManyTimesItsStartInTheFirstStepsIsTheLearningRate) {
  const auto f = Start({2.31, 1111, 31, 2.4, 2.3}, 0.97, 1250);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "LOSS_DIVERGENCE");
  EXPECT_EQ(f[0].severity, Severity::kCritical);  // 480x
  EXPECT_EQ(f[0].step, 1);
  ASSERT_FALSE(f[0].causes.empty());
  EXPECT_EQ(f[0].causes[0].id, "lr_too_high");
  EXPECT_GE(f[0].causes[0].confidence, 0.9);  // the update ratio and the gradient norm agree
  EXPECT_NE(f[0].evidence_json.find("\"early_blowup\":true"), std::string::npos);
  EXPECT_NE(f[0].evidence_json.find("max_update_ratio"), std::string::npos);
}

TEST(EarlyBlowupEdges, TenTimesIsTheBarAndOnlyInTheFirstPoints) {
  EXPECT_TRUE(Start({2.3, 2.5, 22.0, 2.3}).empty());          // 9.6x: a bad first batch, not this
  ASSERT_EQ(Start({2.3, 2.5, 23.5, 2.3}).size(), 1u);         // 10.2x: warning
  EXPECT_EQ(Start({2.3, 2.5, 23.5, 2.3})[0].severity, Severity::kWarning);
  std::vector<double> late(12, 2.3);
  late.push_back(500);                                        // the 12th point after the first: later than the window
  EXPECT_TRUE(Start(late).empty());
  EXPECT_TRUE(Start({0.001, 0.5}).empty());                   // a loss that starts at ~0: a ratio means nothing
}

// With the detector that judges the rest of the run: the dead network's plateau, vanishing
// gradients and stuck accuracy after the blow-up are its consequences, listed in its
// evidence, not findings advising a higher learning rate.
TEST(EarlyBlowup, ConsequencesAreListedNotReported) {
  Feed feed({"early_blowup", "loss_plateau", "grad_vanishing"});
  for (int64_t s = 0; s < 200; ++s) {
    feed.Scalar("train/loss", s, s == 1 ? 1111.0 : 2.302 + 1e-4 * (s % 3));
    feed.Stats("grad/fc.weight", s, WithRms(100, s < 2 ? 1.0 : 0.0));
  }
  const auto f = feed.Finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "LOSS_DIVERGENCE");
  EXPECT_NE(f[0].evidence_json.find("consequences"), std::string::npos);
  EXPECT_NE(f[0].evidence_json.find("LOSS_PLATEAU"), std::string::npos);
}

std::vector<Finding> Offline(const std::vector<double>& loss) {
  DoctorOptions options;
  options.only = {"early_blowup"};
  options.streaming = false;
  Doctor doctor(std::move(options));
  for (size_t s = 0; s < loss.size(); ++s) doctor.OnScalar("train/loss", static_cast<int64_t>(s), 0, loss[s]);
  doctor.Finish();
  return doctor.findings();
}

// Offline the end of the run is known: a jump in the first steps that the run came back
// from, ending far below its start, was a transient; one that killed the network (its loss
// back near ln K, its start) stays a divergence.
TEST(EarlyBlowup, OfflineAStartTheRunRecoveredFromIsNoDivergence) {
  std::vector<double> learned = {2.31, 1111, 31};
  for (int i = 0; i < 200; ++i) learned.push_back(2.3 * std::exp(-i / 40.0) + 0.05);
  EXPECT_TRUE(Offline(learned).empty());
  std::vector<double> killed = {2.31, 1111, 31};
  for (int i = 0; i < 200; ++i) killed.push_back(2.302 + 1e-3 * (i % 3));
  ASSERT_EQ(Offline(killed).size(), 1u);
  EXPECT_EQ(Offline(killed)[0].code, "LOSS_DIVERGENCE");
}

// Online and offline alike: a loss back below its start within the next points came back
// from an overshoot of the first updates (issue 27: a healthy super-resolution net went
// 0.46 -> 19.2 -> 0.14 under its example's default Adam). It is said, as info.
TEST(EarlyBlowup, AnOvershootTheLossComesBackFromIsInfo) {
  const auto f = Start({2.31, 1111, 31, 0.3, 0.2});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo) << f[0].summary;
  EXPECT_NE(f[0].evidence_json.find("\"recovered_at\":3"), std::string::npos) << f[0].evidence_json;
  // Still above 0.9x its start after 20 points: the divergence, critical for a 480x jump.
  std::vector<double> stays = {2.31, 1111, 31};
  for (int i = 0; i < 25; ++i) stays.push_back(2.25);
  ASSERT_EQ(Start(stays).size(), 1u);
  EXPECT_EQ(Start(stays)[0].severity, Severity::kCritical);
}

}  // namespace
}  // namespace trainscope::doctor
