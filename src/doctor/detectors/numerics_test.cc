#include "doctor/detectors/numerics.h"

#include <gtest/gtest.h>

#include <random>

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

// ---- precision fit ----

TEST(DeclaredPrecision, ReadsTheUsualSpellings) {
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"precision": "16-mixed"})"}}).fp16);
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"precision": 16})"}}).fp16);
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"fp16": {"enabled": true}})"}}).fp16);  // DeepSpeed
  EXPECT_FALSE(ParseDeclaredPrecision({{"config", R"({"fp16": {"enabled": false}})"}}).fp16);
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"training": {"bf16": true}})"}}).bf16);
  const DeclaredPrecision mixed = ParseDeclaredPrecision({{"config", R"({"precision": "bf16-mixed"})"}});
  EXPECT_TRUE(mixed.bf16);
  EXPECT_FALSE(mixed.bf16_weights);  // autocast: FP32 master weights
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"precision": "bf16-true"})"}}).bf16_weights);
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"torch_dtype": "bfloat16"})"}}).bf16_weights);
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"fp8": true})"}}).fp8);
  EXPECT_TRUE(ParseDeclaredPrecision({{"config", R"({"allow_tf32": true})"}}).tf32);
  const DeclaredPrecision none = ParseDeclaredPrecision({{"config", R"({"lr": 0.1, "optimizer": "sgd", "fp16_note": 1})"}});
  EXPECT_FALSE(none.fp16 || none.bf16 || none.fp8 || none.tf32);
  EXPECT_FALSE(ParseDeclaredPrecision({{"config", "not json"}}).fp16);
}

#ifdef TRAINSCOPE_WITH_NUMERICS
TensorStats Values(const std::vector<double>& v) { return ComputeTensorStats(v.data(), v.size(), true); }

std::vector<double> Spread(size_t n, double lo_exp, double hi_exp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> e(lo_exp, hi_exp);
  std::vector<double> v(n);
  for (double& x : v) x = (rng() & 1 ? -1 : 1) * std::exp2(e(rng));
  return v;
}

TEST(PrecisionFit, HealthyFp32RunIsSilent) {
  // Large activations, tiny gradients, moving weights: nothing declared, nothing lost.
  Feed feed({"precision_fit"});
  feed.Meta("config", R"({"lr": 0.1})");
  for (int64_t s = 0; s < 50; ++s) {
    feed.Scalar("train/loss", s, 1.0);
    feed.Stats("act/fc", s, Values(Spread(256, 10, 18, s)));  // up to 2^18, past 65504
    feed.Stats("grad/fc.weight", s, Values(Spread(256, -40, -10, s)));
    feed.Stats("weight/fc.weight", s, Values(Spread(256, -4, 0, s)));
    feed.Stats("update/fc.weight", s, Values(Spread(256, -12, -8, s)));
  }
  EXPECT_TRUE(feed.Finish().empty());
}

TEST(PrecisionFit, Fp16OverflowAtTheFirstStepAndLayer) {
  Feed feed({"precision_fit"});
  feed.Meta("config", R"({"precision": "16-mixed"})");
  for (int64_t s = 0; s < 30; ++s) {
    feed.Scalar("train/loss", s, 1.0);
    feed.Stats("act/fc1", s, Values(Spread(1000, -4, 8, s)));
    // fc2 leaves float16's range at step 20: 2^16 and above from then on
    feed.Stats("act/fc2", s, Values(Spread(1000, -4, s < 20 ? 15 : 17, s)));
  }
  const auto findings = feed.Finish();
  const Finding* f = FindCode(findings, "FP16_OVERFLOW");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->location, "fc2");
  EXPECT_EQ(f->step, 20);
  const json ev = json::parse(f->evidence_json);
  EXPECT_GE(ev["largest_value"].get<double>(), 65520.0);
  // values at or above 2^16 overflow for sure; the bin [2^15, 2^16) may
  EXPECT_GT(ev["fraction"].get<double>(), ev["fraction_min"].get<double>());
  EXPECT_GT(ev["fraction_min"].get<double>(), 0.03);
  EXPECT_FALSE(f->actions.empty());
  EXPECT_NE(f->actions[0].find("fc2"), std::string::npos);
}

TEST(PrecisionFit, CastFingerprintMeansFloat16WithoutAConfig) {
  Feed feed({"precision_fit"});
  for (int64_t s = 0; s < 10; ++s) {
    feed.Scalar("train/loss", s, 1.0);
    const double top = s < 5 ? 10 : 17;
    feed.Stats("act/fc", s, Values(Spread(100, 0, top, s)));
    TensorStats cast = Values(Spread(100, 0, std::min(top, 15.9), s));
    if (s >= 5) cast = WithNonFinite(cast, 0, 7);
    feed.Stats("act/to_half", s, cast);
  }
  const auto findings = feed.Finish();
  const Finding* f = FindCode(findings, "FP16_OVERFLOW");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->location, "fc");
  EXPECT_EQ(f->step, 5);
  EXPECT_NE(json::parse(f->evidence_json)["precision"].get<std::string>().find("cast to float16"), std::string::npos);
}

TEST(PrecisionFit, Fp16UnderflowRecommendsALossScaleThatFits) {
  Feed feed({"precision_fit"});
  feed.Meta("config", R"({"fp16": true})");
  for (int64_t s = 0; s < 20; ++s) {
    feed.Scalar("train/loss", s, 1.0);
    feed.Stats("grad/a.weight", s, Values(Spread(2000, -36, -8, s)));
    feed.Stats("grad/b.weight", s, Values(Spread(2000, -30, -6, 100 + s)));
  }
  const auto findings = feed.Finish();
  const Finding* f = FindCode(findings, "FP16_UNDERFLOW");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->location, "a.weight");
  const json ev = json::parse(f->evidence_json);
  const int k = ev["recommended_exponent"];
  const double largest = ev["largest_gradient"];
  EXPECT_LT(std::ldexp(largest, k), 65504.0);
  EXPECT_EQ(ev["flushed_at_recommended"].get<double>(), 0.0);
  EXPECT_EQ(ev["overflow_at_recommended"].get<double>(), 0.0);
  EXPECT_GE(k, 11);  // the smallest values, 2^-36, need 2^11 to reach 2^-25
  EXPECT_NE(f->actions[0].find("GradScaler(init_scale="), std::string::npos);
}

TEST(PrecisionFit, ObservedLostUpdatesWhateverTheConfig) {
  Feed feed({"precision_fit"});
  for (int64_t s = 0; s < 10; ++s) {
    feed.Scalar("train/loss", s, 1.0);
    std::vector<double> update = Spread(400, -12, -8, s);
    for (size_t i = 0; i < 300; ++i) update[i] = 0;  // 3/4 of the weights did not move
    feed.Stats("grad/fc.weight", s, Values(Spread(400, -6, -2, s)));
    feed.Stats("weight/fc.weight", s, Values(Spread(400, -4, 0, s)));
    feed.Stats("update/fc.weight", s, Values(update));
  }
  const auto findings = feed.Finish();
  const Finding* f = FindCode(findings, "BF16_STALE_UPDATE");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->location, "fc.weight");
  EXPECT_NEAR(json::parse(f->evidence_json)["fraction_lost"].get<double>(), 0.75, 1e-9);
}

TEST(PrecisionFit, EstimatedLostUpdatesForDeclaredBf16Weights) {
  // Updates 2^-12..2^-10 against weights 2^-1..2^0: half a bfloat16 ulp is 2^-9..2^-8,
  // every update is lost; against weights 2^-6..2^-5 (half ulp 2^-14..) none is.
  for (const bool small_weights : {false, true}) {
    Feed feed({"precision_fit"});
    feed.Meta("config", R"({"precision": "bf16-true"})");
    for (int64_t s = 0; s < 10; ++s) {
      feed.Scalar("train/loss", s, 1.0);
      feed.Stats("grad/fc.weight", s, Values(Spread(400, -6, -2, s)));
      feed.Stats("weight/fc.weight", s, Values(small_weights ? Spread(400, -6, -5, s) : Spread(400, -1, 0, s)));
      feed.Stats("update/fc.weight", s, Values(Spread(400, -12, -10, s)));
    }
    const auto findings = feed.Finish();
    const Finding* f = FindCode(findings, "BF16_STALE_UPDATE");
    if (small_weights) {
      EXPECT_EQ(f, nullptr);
    } else {
      ASSERT_NE(f, nullptr);
      const json ev = json::parse(f->evidence_json);
      EXPECT_EQ(ev["how"], "estimated");
      EXPECT_NEAR(ev["fraction_lost"].get<double>(), 1.0, 1e-9);
    }
  }
}

TEST(PrecisionFit, Fp8ReadinessOnlyWhenConsidered) {
  for (const bool declared : {false, true}) {
    Feed feed({"precision_fit"});
    if (declared) feed.Meta("config", R"({"precision": "fp8"})");
    for (int64_t s = 0; s < 20; ++s) {
      feed.Scalar("train/loss", s, 1.0);
      feed.Stats("act/fc", s, Values(Spread(500, -3, s == 15 ? 9 : 3, s)));  // amax jumps 64x at step 15
      feed.Stats("grad/fc.weight", s, Values(Spread(500, -50, -4, s)));      // wider than E5M2's range
    }
    const auto findings = feed.Finish();
    const Finding* f = FindCode(findings, "FP8_READINESS");
    if (!declared) {
      EXPECT_EQ(f, nullptr);
      continue;
    }
    ASSERT_NE(f, nullptr);
    const json ev = json::parse(f->evidence_json);
    bool act_stale = false;
    for (const auto& l : ev["layers"]) {
      if (l["tensor"] == "act/fc") {
        EXPECT_EQ(l["format"], "fp8-e4m3");
        EXPECT_EQ(l["stale_scale_steps"], 1);
        act_stale = true;
      }
      if (l["tensor"] == "grad/fc.weight") {
        EXPECT_EQ(l["format"], "fp8-e5m2");
        EXPECT_GT(l["underflow"].get<double>(), 0.0);
      }
    }
    EXPECT_TRUE(act_stale);
  }
}

TEST(PrecisionFit, Tf32NoteForAMatmulWhoseInputIsAnOffset) {
  // fc2's input (act1's output) is 1000 +- 0.01: its variation is 2^-16.6 of its magnitude,
  // which TF32's 10 mantissa bits do not resolve. fc1's input (input features) is centred.
  for (const bool declared : {false, true}) {
    Feed feed({"precision_fit"});
    feed.Meta("config", declared ? R"({"allow_tf32": true})" : R"({})");
    feed.Meta("module_order", R"(["fc1", "act1", "fc2"])");
    for (int64_t s = 0; s < 5; ++s) {
      feed.Scalar("train/loss", s, 1.0);
      feed.Stats("act/fc1", s, Normal(500, 0, 1, s));
      feed.Stats("act/act1", s, Normal(500, 1000, 0.01, s));
      feed.Stats("act/fc2", s, Normal(500, 0, 1, s));
    }
    const auto findings = feed.Finish();
    const Finding* f = FindCode(findings, "TF32_PRECISION");
    if (!declared) {
      EXPECT_EQ(f, nullptr);
      continue;
    }
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->location, "fc2");
    EXPECT_EQ(f->severity, Severity::kInfo);
    const json ev = json::parse(f->evidence_json);
    EXPECT_EQ(ev["layers"].size(), 1u);
    EXPECT_NEAR(ev["layers"][0]["mantissa_bits_needed"].get<double>(), std::log2(1000 / 0.01) + 3, 0.2);
  }
}

#endif  // TRAINSCOPE_WITH_NUMERICS

}  // namespace
}  // namespace trainscope::doctor
