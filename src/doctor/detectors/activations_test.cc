#include "doctor/detectors/activations.h"

#include <gtest/gtest.h>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using namespace testing;

std::vector<Finding> FractionRun(const std::string& detector, double value, int64_t steps, bool saturated) {
  Feed feed({detector});
  for (int64_t s = 0; s < 100; ++s) {
    TensorStats a = WithRms(64, 1.0, s);
    const double x = s >= 50 && s < 50 + steps ? value : 0.05;
    (saturated ? a.saturated_fraction : a.dead_fraction) = x;
    feed.Stats("act/relu1", s, a);
  }
  return feed.Finish();
}

TEST(DeadUnits, Edges) {
  EXPECT_TRUE(FractionRun("dead_units", 0.65, 40, false).empty());
  EXPECT_TRUE(FractionRun("dead_units", 0.9, 19, false).empty());
  const auto f = FractionRun("dead_units", 0.9, 20, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].step, 50);
  EXPECT_EQ(f[0].location, "relu1");
  EXPECT_EQ(f[0].causes[0].id, "dying_relu");
}

TEST(Saturation, Edges) {
  EXPECT_TRUE(FractionRun("saturation", 0.55, 40, true).empty());
  EXPECT_TRUE(FractionRun("saturation", 0.9, 19, true).empty());
  EXPECT_EQ(FractionRun("saturation", 0.9, 20, true).size(), 1u);
}

std::vector<Finding> DriftRun(double growth) {
  Feed feed({"activation_drift"});
  for (int64_t s = 0; s < 200; ++s) {
    const double sd = s < 100 ? 1.0 : growth;
    feed.Stats("act/block", s, Normal(256, 0, sd, s));
  }
  return feed.Finish();
}

TEST(ActivationDrift, Edges) {
  EXPECT_TRUE(DriftRun(5).empty());
  auto f = DriftRun(20);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kInfo);
  f = DriftRun(200);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::kWarning);
}

TEST(InputScale, Edges) {
  auto run = [](double rms) {
    Feed feed({"input_scale"});
    for (int64_t s = 0; s < 20; ++s) feed.Stats("input/x", s, WithRms(128, rms, s));
    return feed.Finish();
  };
  EXPECT_TRUE(run(1).empty());
  EXPECT_TRUE(run(15).empty());
  ASSERT_EQ(run(100).size(), 1u);
  EXPECT_EQ(run(100)[0].code, "UNNORMALIZED_INPUT");
}

TEST(BatchNormBatch, TinyBatchesOnly) {
  auto run = [](const std::string& config) {
    Feed feed({"batchnorm_batch"});
    feed.Meta("config", config);
    for (int64_t s = 0; s < 3; ++s) {
      feed.Stats("act/fc1", s, WithRms(8, 1));
      feed.Stats("act/bn1", s, WithRms(8, 1));
    }
    return feed.Finish();
  };
  EXPECT_TRUE(run(R"({"batch_size": 32})").empty());
  EXPECT_TRUE(run(R"({})").empty());
  const auto f = run(R"({"batch": 2})");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "ARCHITECTURE_WARNING");
  EXPECT_EQ(f[0].location, "bn1");
  EXPECT_EQ(f[0].causes[0].id, "batchnorm_stats");
}

}  // namespace
}  // namespace trainscope::doctor
