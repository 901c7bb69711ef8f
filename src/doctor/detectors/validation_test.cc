#include "doctor/detectors/validation.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

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

// The same run judged offline (`trainscope diagnose`): the whole curve is known.
std::vector<Finding> Offline(const std::set<std::string>& only, const std::vector<std::tuple<std::string, int64_t, double>>& points,
                             const std::map<std::string, std::string>& meta = {}) {
  DoctorOptions options;
  options.only = only;
  options.streaming = false;
  Doctor doctor(std::move(options));
  for (const auto& [k, v] : meta) doctor.OnMeta(k, v);
  for (const auto& [tag, step, value] : points) doctor.OnScalar(tag, step, 0, value);
  doctor.Finish();
  return doctor.findings();
}

TEST(Overfitting, DatedAtTheSmoothedMinimumNotAtAnEarlyBump) {
  // Validation falls to its minimum at evaluation 15, with a noisy bump at 3..5 that rises
  // 10 % above the minimum so far, then rises steadily after 15.
  std::vector<std::tuple<std::string, int64_t, double>> pts;
  const double val[] = {1.0, 0.8, 0.7, 0.8, 0.82, 0.79, 0.62, 0.58, 0.55, 0.52, 0.5, 0.48, 0.47, 0.46, 0.45,
                        0.44, 0.47, 0.5, 0.55, 0.6, 0.66, 0.72};
  for (int64_t e = 0; e < 22; ++e) {
    for (int64_t b = 0; b < 10; ++b) pts.emplace_back("train/loss", e * 10 + b, 1.0 * std::exp(-(e * 10.0 + b) / 60.0));
    pts.emplace_back("val/loss", e * 10 + 9, val[e]);
  }
  const auto f = Offline({"overfitting"}, pts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].step, 15 * 10 + 9) << f[0].summary;
}

TEST(Overfitting, OfflineANoisyValidationThatEndsLowIsNotOverfitting) {
  // Keras lung-CT shape: val jumps at epochs 1 and 4, its minimum is at epoch 7 of 10.
  const double val[] = {0.61, 0.96, 0.39, 0.33, 0.92, 0.25, 0.43, 0.16, 0.17, 0.29};
  const double train[] = {0.60, 0.27, 0.25, 0.23, 0.20, 0.28, 0.22, 0.15, 0.16, 0.17};
  std::vector<std::tuple<std::string, int64_t, double>> pts;
  for (int64_t e = 0; e < 10; ++e) {
    pts.emplace_back("loss", e, train[e]);
    pts.emplace_back("val_loss", e, val[e]);
  }
  EXPECT_TRUE(Offline({"overfitting"}, pts).empty());
}

TEST(NonfiniteMetric, ValidationLossNaNIsNamedWhileTheTrainingLossIsFinite) {
  std::vector<std::tuple<std::string, int64_t, double>> pts;
  for (int64_t e = 0; e < 30; ++e) {
    pts.emplace_back("train/box_loss", e, 1.0 / (1 + e));
    pts.emplace_back("val/box_loss", e, e >= 12 ? std::nan("") : 1.2 / (1 + e));
    pts.emplace_back("metrics/mAP50", e, e >= 12 ? std::nan("") : 0.1 * e);
    pts.emplace_back("lr/pg0", e, std::nan(""));  // not a metric
  }
  const auto f = Offline({"nonfinite_metric"}, pts);
  ASSERT_EQ(f.size(), 2u);
  const Finding* loss = FindCode(f, "NONFINITE_LOSS");
  const Finding* metric = FindCode(f, "NONFINITE_METRIC");
  ASSERT_TRUE(loss && metric);
  EXPECT_EQ(loss->location, "val/box_loss");
  EXPECT_EQ(loss->step, 12);
  EXPECT_EQ(loss->severity, Severity::kWarning);
  EXPECT_EQ(metric->location, "metrics/mAP50");
}

TEST(NonfiniteMetric, SeriesThatFollowTheTrainingLossAreOneInfoFinding) {
  std::vector<std::tuple<std::string, int64_t, double>> pts;
  for (int64_t e = 0; e < 10; ++e) {
    pts.emplace_back("loss", e, e >= 3 ? std::nan("") : 1.0);
    pts.emplace_back("val_loss", e, e >= 4 ? std::nan("") : 1.0);
    pts.emplace_back("val_acc", e, e >= 4 ? std::nan("") : 0.5);
  }
  const auto f = Offline({"nonfinite_metric"}, pts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  EXPECT_NE(f[0].summary.find("val_loss"), std::string::npos);
  EXPECT_NE(f[0].summary.find("val_acc"), std::string::npos);
}

TEST(ChanceLevel, BinaryClassifierStuckOnHeldOutData) {
  // Validation loss ~ ln 2 for 30 evaluations, validation accuracy constant, noisy training loss.
  std::vector<std::tuple<std::string, int64_t, double>> pts;
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 0.15);
  for (int64_t s = 0; s < 3000; ++s) {
    pts.emplace_back("train/loss", s, 0.693 + noise(rng));
    if (s % 100 == 99) {
      pts.emplace_back("val/loss", s, 0.6931 + 0.004 * std::sin(static_cast<double>(s)));
      pts.emplace_back("val/acc", s, 0.5124);
    }
  }
  const auto f = Offline({"chance_level"}, pts);
  const Finding* plateau = FindCode(f, "LOSS_PLATEAU");
  const Finding* stall = FindCode(f, "METRIC_STALL");
  ASSERT_TRUE(plateau && stall);
  EXPECT_EQ(plateau->location, "val/loss");
  EXPECT_NE(plateau->summary.find("ln(2)"), std::string::npos) << plateau->summary;
  EXPECT_EQ(stall->severity, Severity::kWarning);
  EXPECT_EQ(stall->location, "val/acc");
  // Declared classes win over the guess: with 10 classes, 0.693 is not chance level.
  const auto g = Offline({"chance_level"}, pts, {{"num_classes", "10"}});
  EXPECT_EQ(FindCode(g, "LOSS_PLATEAU"), nullptr);
}

TEST(ChanceLevel, ALearningClassifierIsSilent) {
  std::vector<std::tuple<std::string, int64_t, double>> pts;
  for (int64_t s = 0; s < 3000; ++s) {
    pts.emplace_back("train/loss", s, 0.693 * std::exp(-s / 1000.0));
    if (s % 100 == 99) {
      pts.emplace_back("val/loss", s, 0.693 * std::exp(-s / 1200.0));
      pts.emplace_back("val/acc", s, 0.5 + 0.4 * (1 - std::exp(-s / 1000.0)));
    }
  }
  EXPECT_TRUE(Offline({"chance_level"}, pts).empty());
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

// A per-batch training accuracy (64 samples) of a model that keeps learning: its level
// climbs 0.80 -> 0.88 while single batches read anywhere in +-0.06, and one early lucky
// batch reads 1.0. Judged by its median over 9 batches, not by that batch: no stall. The
// same accuracy flat at its level while the loss keeps falling is one.
TEST(MetricStall, APerBatchAccuracyIsJudgedByItsLevelNotItsLuckiestBatch) {
  auto run = [](bool learning) {
    Feed feed({"metric_stall"});
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> noise(-0.06, 0.06);
    for (int64_t s = 0; s < 1000; ++s) {
      feed.Scalar("train/loss", s, 2.0 * std::exp(-static_cast<double>(s) / 200.0));
      const double level = learning ? 0.80 + 0.08 * static_cast<double>(s) / 1000.0 : 0.80;
      feed.Scalar("train/acc", s, s == 40 ? 1.0 : level + noise(rng));
    }
    return feed.Finish();
  };
  EXPECT_TRUE(run(true).empty());
  const auto flat = run(false);
  ASSERT_EQ(flat.size(), 1u);
  EXPECT_EQ(flat[0].code, "METRIC_STALL");
}

TEST(MetricStall, AnAccuracyAtItsCeilingHasNothingToGain) {
  Feed feed({"metric_stall"});
  for (int64_t s = 0; s < 1000; ++s) {
    feed.Scalar("train/loss", s, 2.0 * std::exp(-static_cast<double>(s) / 200.0));
    if (s % 20 == 19) feed.Scalar("val/acc", s, s < 300 ? 0.5 + s / 600.0 : 100.0 / 100.0);
  }
  EXPECT_TRUE(feed.Finish().empty());
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
