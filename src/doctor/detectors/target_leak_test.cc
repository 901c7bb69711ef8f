#include "doctor/detectors/target_leak.h"

#include <cmath>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using testing::Feed;

// A loss falling from `start` to `end` geometrically over `steps`, then flat; optional
// validation loss every 50 steps and the data check of the first 20 batches.
std::vector<Finding> Curve(double start, double end, int steps, double copy = -1, double next = 0,
                           double val_over_train = -1, int total = 400, int classes = 10) {
  Feed feed({"target_leak"});
  if (classes > 1) feed.Meta("num_classes", std::to_string(classes));
  for (int s = 0; s < total; ++s) {
    const double t = std::min(1.0, s / static_cast<double>(steps));
    const double loss = start * std::pow(end / start, t);
    feed.Scalar("train/loss", s, loss);
    if (copy >= 0 && s < 20) {
      feed.Scalar("data/target_copy_fraction", s, copy);
      feed.Scalar("data/target_next_fraction", s, next);
    }
    if (val_over_train >= 0 && s % 50 == 49) feed.Scalar("val/loss", s, loss * val_over_train);
  }
  return feed.Finish();
}

TEST(TargetLeak, CopiedTargetsAndACollapsingLoss) {
  const auto f = Curve(4.2, 0.002, 200, /*copy=*/1.0, /*next=*/0.07, /*val=*/1.0);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "TARGET_LEAK");
  EXPECT_EQ(f[0].step, 0);
  EXPECT_EQ(f[0].causes[0].id, "target_is_input");
  // Found once the loss is under 5 % of its start: 0.21 here, reached at ~step 80.
  EXPECT_NE(f[0].evidence_json.find("\"target_copy_fraction\":1.0"), std::string::npos);
}

TEST(TargetLeakEdges, WhatATaskAllows) {
  // Next-token targets (the inputs shifted by one): a healthy LM at 0.46 nats is no leak.
  EXPECT_TRUE(Curve(3.3, 0.46, 300, 0.02, 1.0, 1.05).empty());
  // Targets equal to the inputs but the loss stays at a language model's level: a model
  // that shifts the labels itself (Hugging Face causal LMs take labels = input_ids).
  EXPECT_TRUE(Curve(10.8, 3.0, 300, 1.0, 0.05, 1.1).empty());
  // No data check: the loss alone must fall under 1 % of its start and under 0.05.
  EXPECT_TRUE(Curve(2.3, 0.03, 300, -1, 0, 1.0).empty());        // 1.3 %
  ASSERT_EQ(Curve(2.3, 0.004, 300, -1, 0, 1.0).size(), 1u);      // 0.17 %
  EXPECT_EQ(Curve(2.3, 0.004, 300, -1, 0, 1.0)[0].severity, Severity::kInfo);  // an easy task looks the same
  EXPECT_EQ(Curve(4.2, 0.002, 200, 1.0, 0.07, 1.0)[0].severity, Severity::kWarning);
  // Memorising the training set: validation stays high. That is overfitting, not a leak.
  EXPECT_TRUE(Curve(2.3, 0.004, 300, -1, 0, /*val=*/200.0).empty());
  // Too slow to be a copy: reached after the first 1000 points.
  EXPECT_TRUE(Curve(2.3, 0.004, 1500, -1, 0, 1.0, 1800).empty());
  // A loss that does not start at a classification loss's level (a regression near 0).
  EXPECT_TRUE(Curve(0.5, 0.0001, 100, -1, 0, 1.0).empty());
  // Issue 27 (pytorch/examples regression): a polynomial fit's loss goes from 15.7 to 0.04
  // honestly; with no labels, accuracy or class count the loss alone says nothing.
  EXPECT_TRUE(Curve(15.7, 0.004, 300, -1, 0, -1, 400, /*classes=*/0).empty());
  EXPECT_EQ(Curve(15.7, 0.004, 300, -1, 0, -1, 400, /*classes=*/10).size(), 1u);
}

}  // namespace
}  // namespace trainscope::doctor

namespace trainscope::doctor {
namespace {

using testing::Feed;

// A VAE's loss (a negative ELBO per pixel) falls fast from ~2 to near 0 and then below it:
// a log-likelihood, not a supervised loss.
TEST(TargetLeak, ALossThatGoesNegativeIsNoLeak) {
  Feed feed({"target_leak"});
  for (int s = 0; s < 400; ++s) {
    const double loss = s < 150 ? 2.3 * std::pow(0.001 / 2.3, s / 150.0) : 0.001 - 0.002 * (s - 150);
    feed.Scalar("train/loss", s, loss);
  }
  EXPECT_TRUE(feed.Finish().empty());
}

// A GAN's discriminator winning fast: its loss collapses, the run has two models with
// their own optimizers.
TEST(TargetLeak, AnAdversarialRunIsNotJudged) {
  Feed feed({"target_leak"});
  feed.Meta("models", R"([{"name": "", "class": "Generator", "optimizer": "Adam"},
                         {"name": "D", "class": "Discriminator", "optimizer": "Adam"}])");
  for (int s = 0; s < 400; ++s) feed.Scalar("train/loss", s, 2.3 * std::pow(0.002 / 2.3, std::min(1.0, s / 200.0)));
  EXPECT_TRUE(feed.Finish().empty());
  EXPECT_EQ(feed.doctor().not_checked().empty(), false);
}

}  // namespace
}  // namespace trainscope::doctor
