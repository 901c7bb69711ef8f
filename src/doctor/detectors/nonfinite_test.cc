#include "doctor/detectors/nonfinite.h"

#include <gtest/gtest.h>

#include "doctor/test_util.h"

namespace trainscope::doctor {
namespace {

using namespace testing;

// A 3-module forward (fc1 -> act -> head) with parameters fc1.weight, head.weight. At
// `bad_step` the given thing goes non-finite (and what it poisons downstream with it).
enum class Fault { kInput, kActivation, kLossOnly, kBackward, kWeight, kNone };

std::vector<Finding> NanRun(Fault fault, int64_t bad_step, double lr = 0.01, bool climb = false,
                         const std::string& act_name = "act") {
  Feed feed({"nonfinite"});
  feed.Meta("config", R"({"num_classes": 10})");
  for (int64_t s = 0; s <= bad_step + 2; ++s) {
    const bool bad = s >= bad_step && fault != Fault::kNone;
    const bool fwd_bad = bad && (fault == Fault::kInput || fault == Fault::kActivation);
    feed.Stats("input/x", s, fault == Fault::kInput && bad ? WithNonFinite(WithRms(32, 1), 1) : WithRms(32, 1));
    feed.Stats("act/fc1", s, fault == Fault::kInput && bad ? WithNonFinite(WithRms(32, 1), 4) : WithRms(32, 1));
    feed.Stats("act/" + act_name, s, fwd_bad ? WithNonFinite(WithRms(32, 1), 4) : WithRms(32, 1));
    feed.Stats("act/head", s, fwd_bad ? WithNonFinite(WithRms(10, 1), 10) : WithRms(10, 1));
    const bool loss_bad = fwd_bad || (bad && fault == Fault::kLossOnly);
    feed.Scalar("train/loss", s, loss_bad ? NAN : 1.0);
    feed.Scalar("opt/lr", s, lr);
    const double g = climb ? std::pow(3.0, static_cast<double>(s)) * 1e-3 : 0.1;
    const bool grads_bad = loss_bad || (bad && fault == Fault::kBackward);
    // In a backward-born NaN only the parameters before the producer (fc1) go bad.
    feed.Stats("grad/head.weight", s, loss_bad ? WithNonFinite(WithRms(64, g), 64) : WithRms(64, g));
    feed.Stats("grad/fc1.weight", s, grads_bad ? WithNonFinite(WithRms(64, g), 64) : WithRms(64, g));
    feed.Stats("weight/fc1.weight", s, bad && fault == Fault::kWeight ? WithNonFinite(WithRms(64, 0.1), 2)
                                                                       : WithRms(64, 0.1));
    feed.Stats("weight/head.weight", s, WithRms(64, 0.1));
  }
  return feed.Finish();
}

TEST(NonFinite, InputIsTheFirstProducer) {
  const auto f = NanRun(Fault::kInput, 137);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "NONFINITE_INPUT");
  EXPECT_EQ(f[0].step, 137);
  EXPECT_EQ(f[0].location, "input");
  ASSERT_FALSE(f[0].causes.empty());
  EXPECT_EQ(f[0].causes[0].id, "input_nonfinite");
  EXPECT_NE(f[0].evidence_json.find("flight_recorder"), std::string::npos);
}

TEST(NonFinite, EarliestModuleInForwardOrder) {
  const auto f = NanRun(Fault::kActivation, 50, 0.01, false, "exp_gate");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "NONFINITE_ACTIVATION");
  EXPECT_EQ(f[0].location, "exp_gate");
  EXPECT_EQ(f[0].causes[0].id, "exp_overflow");
  EXPECT_NE(f[0].evidence_json.find("\"phase\":\"forward\""), std::string::npos);
}

TEST(NonFinite, ContainerIsNotTheProducer) {
  Feed feed({"nonfinite"});
  feed.Meta("module_order", R"(["block", "block.sqrt", "head"])");  // pre-order: parent first
  feed.Stats("act/block.sqrt", 3, WithNonFinite(WithRms(4, 1), 1));
  feed.Stats("act/block", 3, WithNonFinite(WithRms(4, 1), 1));
  feed.Stats("act/head", 3, WithNonFinite(WithRms(4, 1), 1));
  const auto f = feed.Finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].location, "block.sqrt");
  EXPECT_EQ(f[0].causes[0].id, "sqrt_at_zero");
}

TEST(NonFinite, ProducerNamesAreReadAsWords) {
  auto top = [](const std::string& module, const std::string& type) {
    Feed feed({"nonfinite"});
    if (!type.empty()) feed.Meta("module_types", "{\"" + module + "\": \"" + type + "\"}");
    feed.Stats("act/" + module, 0, WithNonFinite(WithRms(4, 1), 1));
    const auto f = feed.Finish();
    return f.empty() || f[0].causes.empty() ? std::string() : f[0].causes[0].id;
  };
  EXPECT_EQ(top("experts.3", ""), "");  // not "exp"
  EXPECT_EQ(top("logits", ""), "");     // not "log"
  EXPECT_EQ(top("attn.probs", "LogSoftmax"), "log_of_zero");
  EXPECT_EQ(top("gate", "Softmax"), "exp_overflow");
  EXPECT_EQ(top("block.to_half", ""), "precision_overflow");
}

TEST(NonFinite, LossWithFiniteLogitsIsTheLossFunction) {
  const auto f = NanRun(Fault::kLossOnly, 20);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "NONFINITE_LOSS");
  EXPECT_EQ(f[0].location, "loss");
  EXPECT_EQ(f[0].causes[0].id, "log_of_zero");
}

TEST(NonFinite, BackwardBornNamesTheLatestParameterInForwardOrder) {
  const auto f = NanRun(Fault::kBackward, 30);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "NONFINITE_GRAD");
  EXPECT_EQ(f[0].location, "fc1.weight");
  EXPECT_NE(f[0].evidence_json.find("\"phase\":\"backward\""), std::string::npos);
  EXPECT_EQ(f[0].causes[0].id, "sqrt_at_zero");
}

TEST(NonFinite, EarlyWithLargeLrAndClimbingGradients) {
  const auto f = NanRun(Fault::kBackward, 12, 0.5, /*climb=*/true);
  ASSERT_EQ(f.size(), 1u);
  bool lr = false, explosion = false;
  for (const auto& c : f[0].causes) {
    lr = lr || (c.id == "lr_too_high" && c.confidence >= 0.5);
    explosion = explosion || (c.id == "gradient_explosion" && c.confidence >= 0.5);
  }
  EXPECT_TRUE(lr);
  EXPECT_TRUE(explosion);
}

TEST(NonFinite, SmallLrLateFlatGradientsDoNotBlameLr) {
  const auto f = NanRun(Fault::kBackward, 300, 1e-3, false);
  ASSERT_EQ(f.size(), 1u);
  for (const auto& c : f[0].causes) {
    if (c.id == "lr_too_high") {
      EXPECT_LT(c.confidence, 0.3);
    }
    EXPECT_NE(c.id, "gradient_explosion");
  }
}

TEST(NonFinite, WeightAfterTheOptimizerStep) {
  const auto f = NanRun(Fault::kWeight, 40);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].code, "NONFINITE_WEIGHT");
  EXPECT_EQ(f[0].location, "fc1.weight");
}

TEST(NonFinite, Fp16OverflowIsPrecision) {
  Feed feed({"nonfinite"});
  for (int64_t s = 0; s < 5; ++s) {
    TensorStats big = WithRms(8, 1);
    big.abs_max = s < 4 ? 1e3 * (s + 1) : 9e4;
    feed.Stats("act/fc", s, big);
    feed.Stats("act/to_half", s, s == 4 ? WithNonFinite(WithRms(8, 1), 0, 3) : WithRms(8, 1));
  }
  const auto f = feed.Finish();
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].location, "to_half");
  EXPECT_EQ(f[0].causes[0].id, "precision_overflow");
}

TEST(NonFinite, HealthyIsSilent) { EXPECT_TRUE(NanRun(Fault::kNone, 100).empty()); }

TEST(LabelRange, EdgesOfTheClassRange) {
  auto run = [](double lo, double hi) {
    Feed feed({"label_range"});
    feed.Meta("num_classes", "10");
    feed.Scalar("input/label_min", 0, lo);
    feed.Scalar("input/label_max", 0, hi);
    return feed.Finish();
  };
  EXPECT_TRUE(run(0, 9).empty());
  EXPECT_TRUE(run(-100, 9).empty());  // ignore_index
  EXPECT_EQ(run(0, 10).size(), 1u);
  EXPECT_EQ(run(0, 10)[0].code, "LABEL_OUT_OF_RANGE");
}

// minGPT masks its targets with -1 (cross_entropy(..., ignore_index=-1)) and trains with a
// finite loss: PyTorch would have raised for a -1 it did not ignore.
TEST(LabelRange, AnyIgnoreValueTheRunTrainsOnIsNoFault) {
  Feed feed({"label_range"});
  for (int64_t s = 0; s < 50; ++s) {
    feed.Scalar("train/loss", s, 4.0 - 0.02 * s);
    feed.Scalar("input/label_min", s, -1);
    feed.Scalar("input/label_max", s, 64);
  }
  EXPECT_TRUE(feed.Finish().empty());
}

TEST(LabelRange, NegativeLabelsUsedOutOfRange) {
  {  // the loss is non-finite at the step with the label
    Feed feed({"label_range"});
    for (int64_t s = 0; s < 10; ++s) {
      feed.Scalar("train/loss", s, s == 6 ? kNaN : 2.0);
      feed.Scalar("input/label_min", s, s == 6 ? -3 : 0);
      feed.Scalar("input/label_max", s, 9);
    }
    const auto f = feed.Finish();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].step, 6);
  }
  {  // the run crashed at it (CPU PyTorch raises before a loss is logged)
    Feed feed({"label_range"});
    feed.Meta("exception", R"({"type": "IndexError", "message": "Target -1 is out of bounds."})");
    for (int64_t s = 0; s < 5; ++s) {
      feed.Scalar("input/label_min", s, s == 4 ? -1 : 0);
      feed.Scalar("input/label_max", s, 9);
      if (s < 4) feed.Scalar("train/loss", s, 2.0);
    }
    const auto f = feed.Finish();
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].step, 4);
  }
}

}  // namespace
}  // namespace trainscope::doctor
