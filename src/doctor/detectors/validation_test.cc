#include "doctor/detectors/validation.h"

#include <gtest/gtest.h>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using namespace testing;

// Train loss falls steadily; val loss falls until `turn` then rises by `rise` per eval.
std::vector<Finding> OverfitRun(int64_t turn, double rise) {
  Feed feed({"overfitting"});
  double val = 2.0;
  for (int64_t s = 0; s < 600; ++s) {
    feed.Scalar("train/loss", s, 2.0 * std::exp(-static_cast<double>(s) / 200.0));
    if (s % 20 == 19) {
      val = s < turn ? 2.0 * std::exp(-static_cast<double>(s) / 200.0) + 0.2 : val * (1 + rise);
      feed.Scalar("val/loss", s, val);
    }
  }
  return feed.Finish();
}

TEST(Overfitting, ValRisesWhileTrainFalls) {
  const auto f = OverfitRun(300, 0.05);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "OVERFITTING");
  EXPECT_EQ(f[0].step, 299);  // the best validation step
  EXPECT_EQ(f[0].location, "val/loss");
}

TEST(Overfitting, EdgeOfTheRise) {
  EXPECT_TRUE(OverfitRun(300, 0.0).empty());     // flat val: not over-fitting
  EXPECT_TRUE(OverfitRun(580, 0.05).empty());    // too few evaluations after the best
}

TEST(Overfitting, NoisyValidationIsSilent) {
  Feed feed({"overfitting"});
  std::mt19937 rng(4);
  for (int64_t s = 0; s < 1000; ++s) {
    feed.Scalar("train/loss", s, HealthyLoss(s, rng, 0.3));
    if (s % 20 == 19) feed.Scalar("val/loss", s, HealthyLoss(s, rng, 0.04) + 0.05);
  }
  EXPECT_TRUE(feed.Finish().empty());
}

TEST(MetricStall, InfoWhenAccuracyStopsFollowingTheLoss) {
  Feed feed({"metric_stall"});
  for (int64_t s = 0; s < 1000; ++s) {
    feed.Scalar("train/loss", s, 2.0 * std::exp(-static_cast<double>(s) / 200.0));
    if (s % 20 == 19) feed.Scalar("val/acc", s, s < 300 ? 0.5 + s / 1000.0 : 0.8);
  }
  const auto f = feed.Finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "METRIC_STALL");
  EXPECT_EQ(f[0].severity, Severity::kInfo);
}

TEST(MetricImbalance, EdgeOfTheGap) {
  auto run = [](double acc, double f1) {
    Feed feed({"metric_imbalance"});
    for (int64_t s = 0; s < 5; ++s) {
      feed.Scalar("val/acc", s * 100, acc);
      feed.Scalar("val/macro_f1", s * 100, f1);
    }
    return feed.Finish();
  };
  EXPECT_EQ(run(0.9, 0.45).size(), 1u);
  EXPECT_TRUE(run(0.9, 0.75).empty());
  EXPECT_TRUE(run(0.4, 0.1).empty());  // low accuracy: nothing hidden by it
}

}  // namespace
}  // namespace trainscope::doctor
