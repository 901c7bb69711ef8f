#include "doctor/layer_health.h"

#include <gtest/gtest.h>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using testing::Normal;

const LayerHealth& Find(const std::vector<LayerHealth>& all, const std::string& layer) {
  for (const LayerHealth& h : all) {
    if (h.layer == layer) return h;
  }
  ADD_FAILURE() << "no layer " << layer;
  return all.front();
}

// Three linear layers and a ReLU: the score is the lowest of its parts, and says which.
TEST(LayerHealth, TheLowestPartSetsTheScoreAndSaysWhy) {
  RunData run;
  run.OnMeta("module_order", R"(["fc1", "relu", "fc2", "fc3"])");
  for (int64_t s = 0; s < 10; ++s) {
    for (const char* layer : {"fc1", "fc2", "fc3"}) {
      const std::string p = std::string(layer) + ".weight";
      const double ratio = std::string(layer) == "fc3" ? 1e-7 : 1e-3;  // fc3 hardly moves
      run.OnTensorStats("grad/" + p, s, 0, Normal(400, 0, 0.01, s + 1));
      run.OnTensorStats("weight/" + p, s, 0, Normal(400, 0, 1, s + 2));
      run.OnTensorStats("update/" + p, s, 0, Normal(400, 0, ratio, s + 3));
    }
    TensorStats relu = Normal(400, 0.5, 0.5, s + 4);
    relu.dead_fraction = 0.62;  // mostly zeros: not scored by itself (DEAD_UNITS judges that)
    run.OnTensorStats("act/relu", s, 0, relu);
  }
  Finding warning;
  warning.code = "GRAD_VANISHING";
  warning.severity = Severity::kWarning;
  warning.step = 4;
  warning.location = "fc2.weight";
  Finding info = warning;
  info.code = "ACTIVATION_DRIFT";
  info.severity = Severity::kInfo;
  info.location = "relu";
  const auto health = LayerHealthOf(run, {warning, info});
  ASSERT_EQ(health.size(), 4u);
  EXPECT_EQ(health[0].layer, "fc1");  // forward order
  EXPECT_EQ(health[1].layer, "relu");
  EXPECT_EQ(Find(health, "fc1").score, 100);
  EXPECT_EQ(Find(health, "fc1").worst, "");
  EXPECT_EQ(Find(health, "relu").score, 90);
  EXPECT_EQ(Find(health, "relu").worst, "info ACTIVATION_DRIFT at step 4");
  EXPECT_EQ(Find(health, "fc2").score, 50);
  EXPECT_EQ(Find(health, "fc2").worst, "warning GRAD_VANISHING at step 4");
  EXPECT_EQ(Find(health, "fc3").score, 33);  // 2 decades under 1e-5
  EXPECT_NE(Find(health, "fc3").worst.find("update/weight ratio"), std::string::npos);
}

// A knowledge-distillation run: the student learns, the teacher (watched with no optimizer)
// stays put by design. The student's layer whose weights do not move scores 0; the
// teacher's are not scored on learning.
TEST(LayerHealth, AModelNoOptimizerStepsIsNotScoredOnLearning) {
  RunData run;
  run.OnMeta("models", R"([{"name": "", "optimizer": "Adam"}, {"name": "teacher", "optimizer": ""}])");
  TensorStats still;
  still.numel = 400;
  still.zeros = 400;
  still.min = still.max = 0;
  for (int64_t s = 0; s < 10; ++s) {
    for (const char* p : {"fc.weight", "head.weight", "teacher/fc.weight"}) {
      const bool moves = std::string(p) == "fc.weight";
      run.OnTensorStats(std::string("weight/") + p, s, 0, Normal(400, 0, 1, s + 2));
      run.OnTensorStats(std::string("update/") + p, s, 0, moves ? Normal(400, 0, 1e-3, s + 3) : still);
    }
  }
  const auto health = LayerHealthOf(run, {});
  EXPECT_EQ(Find(health, "fc").score, 100);
  EXPECT_EQ(Find(health, "head").score, 0);
  EXPECT_EQ(Find(health, "head").worst, "its weights do not move");
  EXPECT_EQ(Find(health, "teacher/fc").score, 100);
}

TEST(LayerHealth, NonFiniteGradientsAreZero) {
  RunData run;
  for (int64_t s = 0; s < 3; ++s) {
    TensorStats g = Normal(100, 0, 0.1, s + 1);
    if (s == 2) g = testing::WithNonFinite(g, 3);
    run.OnTensorStats("grad/head.weight", s, 0, g);
  }
  const auto health = LayerHealthOf(run, {});
  ASSERT_EQ(health.size(), 1u);
  EXPECT_EQ(health[0].score, 0);
  EXPECT_EQ(health[0].worst, "non-finite values in its gradient");
}

}  // namespace
}  // namespace trainscope::doctor
