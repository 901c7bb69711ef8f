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

std::vector<Finding> DriftRun(double growth, const std::string& also_logged = "", Feed* out = nullptr) {
  Feed local({"activation_drift"});
  Feed& feed = out ? *out : local;
  for (int64_t s = 0; s < 200; ++s) {
    const double sd = s < 100 ? 1.0 : growth;
    feed.Stats("act/block", s, Normal(256, 0, sd, s));
    if (!also_logged.empty()) feed.Scalar(also_logged, s, 20.0 + s);
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

// A reinforcement-learning run's states follow its policy (pytorch/examples' actor-critic:
// the action head's std 0.04 -> 0.44 as the policy sharpened): not judged, and said so.
TEST(ActivationDrift, NotJudgedWhereTheDataFollowsThePolicy) {
  EXPECT_EQ(DriftRun(200, "train/accuracy").size(), 1u);  // another scalar beside it changes nothing
  Feed feed({"activation_drift"});
  EXPECT_TRUE(DriftRun(200, "episode_reward", &feed).empty());
  bool said = false;
  for (const NotChecked& n : feed.doctor().not_checked()) {
    if (n.check == "activation drift") {
      said = n.reason.find("reinforcement-learning run (episode_reward)") != std::string::npos &&
             n.codes == std::vector<std::string>{"ACTIVATION_DRIFT"};
    }
  }
  EXPECT_TRUE(said);
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

// F.relu is no module: no act/ dead_fraction. Dead units show in the per-unit gradient
// norms of the weight before it: their rows' gradients are exactly 0.
TEST(DeadUnits, FunctionalReluFromPerUnitGradients) {
  auto run = [](double dead, bool relu_module) {
    Feed feed({"dead_units"});
    for (int64_t s = 0; s < 600; s += 100) {
      std::vector<float> rows(64, 0.5f);
      const size_t n_dead = static_cast<size_t>(dead * 64);
      for (size_t i = 0; i < n_dead; ++i) rows[i] = 0.0f;
      feed.Vector("grad_units/fc1.weight", s, rows);
      feed.Vector("grad_units/wte.weight", s, std::vector<float>(64, 0.0f));  // unseen tokens: not units
      TensorStats act = Normal(64, 0, 1);
      if (relu_module) act.dead_fraction = 0.1;
      feed.Stats("act/fc1", s, act);
    }
    return feed.Finish();
  };
  EXPECT_TRUE(run(0.5, false).empty());
  const auto f = run(0.8, false);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "DEAD_UNITS");
  EXPECT_EQ(f[0].location, "fc1");
  EXPECT_EQ(f[0].causes[0].id, "dying_relu");
  EXPECT_TRUE(run(0.8, true).empty());  // ReLU modules are judged on their outputs
}

// Dead fc1: conv1 before it gets no gradient through it, fc2 after it zero rows from its
// zero input (but a bias gradient). The finding names fc1 only.
TEST(DeadUnits, TheDeadLayerNotTheLayersAroundIt) {
  Feed feed({"dead_units"});
  feed.Meta("param_order", R"(["conv1.weight", "conv1.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])");
  const std::vector<float> zeros(16, 0.0f);
  for (int64_t s = 0; s < 5; ++s) {
    for (const char* p : {"conv1", "fc1", "fc2"}) feed.Vector(std::string("grad_units/") + p + ".weight", s, zeros);
    feed.Stats("grad/conv1.bias", s, ComputeTensorStats(std::vector<double>(16, 0.0).data(), 16, false));
    feed.Stats("grad/fc1.bias", s, ComputeTensorStats(std::vector<double>(16, 0.0).data(), 16, false));
    feed.Stats("grad/fc2.bias", s, Normal(16, 0, 0.1));
  }
  const auto f = feed.Finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].location, "fc1");
}

}  // namespace
}  // namespace trainscope::doctor

namespace trainscope::doctor {
namespace {

using namespace testing;

// Activations recorded every 20 steps (watch's schedule after the dense start): a check
// sustained for 20 steps fires after 20 steps, not after 20 records (step ~380).
TEST(DeadUnits, SustainIsMeasuredInStepsNotRecords) {
  Feed feed({"dead_units", "saturation"});
  for (int64_t s = 0; s < 300; ++s) {
    feed.Scalar("train/loss", s, 1.0);
    if (s % 20 != 0) continue;
    TensorStats relu = Normal(256, 0, 1, static_cast<uint32_t>(s + 1));
    relu.dead_fraction = s >= 100 ? 0.9 : 0.1;
    feed.Stats("act/relu1", s, relu);
    TensorStats sig = Normal(256, 0, 1, static_cast<uint32_t>(s + 2));
    sig.saturated_fraction = s >= 100 ? 0.8 : 0.1;
    feed.Stats("act/sig1", s, sig);
  }
  const auto f = feed.Finish();
  const Finding* dead = FindCode(f, "DEAD_UNITS");
  const Finding* sat = FindCode(f, "ACTIVATION_SATURATION");
  ASSERT_NE(dead, nullptr);
  ASSERT_NE(sat, nullptr);
  for (const Finding* x : {dead, sat}) {
    EXPECT_GT(x->step, 80);  // the record at 100 covers steps 81..100
    EXPECT_LE(x->step, 100);
    EXPECT_LE(nlohmann::json::parse(x->evidence_json)["detected_at"].get<int64_t>(), 120);
  }
}

TEST(DeadUnits, OneRecordDoesNotDecide) {
  Feed feed({"dead_units"});
  for (int64_t s = 0; s < 300; s += 20) {
    TensorStats relu = Normal(256, 0, 1, static_cast<uint32_t>(s + 1));
    relu.dead_fraction = s == 100 ? 0.9 : 0.1;  // one batch
    feed.Stats("act/relu1", s, relu);
  }
  EXPECT_TRUE(feed.Finish().empty());
}

}  // namespace
}  // namespace trainscope::doctor
