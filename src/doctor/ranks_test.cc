#include "doctor/ranks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

namespace trainscope::doctor {
namespace {

// A data-parallel training as its ranks record it: each rank's loss is the mean of its own
// batch's per-sample losses (exponentially distributed around the curve: skewed, like
// cross-entropy), the gradient norm is the same on every rank (all-reduced).
struct Ddp {
  int ranks = 4;
  int steps = 200;
  std::vector<int> batch = {32};  // per rank, cycled: batch sizes may differ
  uint32_t seed = 1;
  // Multiplies rank r's loss / grad norm at step s (1 = healthy).
  std::function<double(int rank, int step)> loss_factor = [](int, int) { return 1.0; };
  std::function<double(int rank, int step)> grad_factor = [](int, int) { return 1.0; };
  std::function<double(int rank, int step)> forward_seconds;  // time/forward, if set

  std::vector<RunData> Record() const {
    std::vector<RunData> data(ranks);
    std::mt19937 shared_rng(seed);
    std::lognormal_distribution<double> grad_noise(0, 0.3);
    std::vector<double> grad(steps);
    for (int s = 0; s < steps; ++s) grad[s] = (0.2 + 2.0 * std::exp(-s / 40.0)) * grad_noise(shared_rng);
    for (int r = 0; r < ranks; ++r) {
      std::mt19937 rng(seed * 1000 + r);
      const int b = batch[r % batch.size()];
      for (int s = 0; s < steps; ++s) {
        const double curve = 0.05 + 1.05 * std::exp(-s / 30.0);
        std::exponential_distribution<double> per_sample(1 / curve);
        double sum = 0;
        for (int i = 0; i < b; ++i) sum += per_sample(rng);
        data[r].OnScalar("train/loss", s, 0, sum / b * loss_factor(r, s));
        data[r].OnScalar("grad/global_norm", s, 0, grad[s] * grad_factor(r, s));
        if (forward_seconds) {
          std::lognormal_distribution<double> jitter(0, 0.2);
          data[r].OnScalar("time/forward", s, 0, forward_seconds(r, s) * jitter(rng));
        }
      }
    }
    return data;
  }
};

std::vector<RankFinding> Compare(const std::vector<RunData>& data, const RankOptions& options = {}) {
  std::vector<RankRun> ranks;
  for (size_t r = 0; r < data.size(); ++r) ranks.push_back({static_cast<int>(r), &data[r]});
  return CompareRanks(ranks, options);
}

std::string Describe(const std::vector<RankFinding>& findings) {
  std::string out;
  for (const RankFinding& f : findings) out += f.finding.code + " rank " + std::to_string(f.rank) + ": " + f.finding.summary + "\n";
  return out;
}

TEST(Ranks, HealthyRunsAreSilentWithDifferentBatchSizesAndSeeds) {
  // 2 and 4 ranks, batch sizes from 4 to 64 (noise 4x apart, skew very different), 30 seeds.
  for (int ranks : {2, 3, 4}) {
    for (uint32_t seed = 1; seed <= 30; ++seed) {
      Ddp ddp;
      ddp.ranks = ranks;
      ddp.batch = {4, 64, 16, 8};
      ddp.seed = seed;
      const auto findings = Compare(ddp.Record());
      EXPECT_TRUE(findings.empty()) << ranks << " ranks, seed " << seed << "\n" << Describe(findings);
    }
  }
}

TEST(Ranks, ManyRanksOverManyStepsAreSilentWhenHealthyAndNameTheOddOne) {
  // 32 ranks x 5,000 steps: 32 chances for a false alarm per window, and the cost stays
  // n log n per window (the pair shares are counted on sorted points).
  Ddp ddp;
  ddp.ranks = 32;
  ddp.steps = 5000;
  ddp.batch = {8, 32};
  EXPECT_TRUE(Compare(ddp.Record()).empty()) << Describe(Compare(ddp.Record()));
  ddp.loss_factor = [](int r, int s) { return r == 17 && s >= 4000 ? 3.0 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 17);
  EXPECT_NEAR(findings[0].finding.step, 4000, 50);
}

TEST(Ranks, OneRankOfFourWithItsOwnLossLevelIsNamed) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r == 2 ? 3.0 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  const RankFinding& f = findings[0];
  EXPECT_EQ(f.finding.code, "RANK_DIVERGENCE");
  EXPECT_EQ(f.rank, 2);
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_EQ(f.finding.location, "train/loss");
  EXPECT_EQ(f.finding.step, 0);
  ASSERT_FALSE(f.finding.causes.empty());
  EXPECT_EQ(f.finding.causes[0].id, "rank_data_shard");  // the gradient norm is still shared
  EXPECT_FALSE(f.finding.actions.empty());
  const auto evidence = nlohmann::json::parse(f.finding.evidence_json);
  EXPECT_NEAR(evidence["ratio_to_others"].get<double>(), 3.0, 0.6);
  EXPECT_EQ(evidence["rank"], 2);
}

TEST(Ranks, ALowerLossIsADifferenceToo) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r == 1 ? 0.3 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 1);
}

TEST(Ranks, AHeavyTailedRankIsNamedThoughItsOwnNoiseIsLarge) {
  // Unnormalised inputs on one rank: its loss 2x to 1000x the others', step to step.
  Ddp ddp;
  ddp.loss_factor = [](int r, int s) { return r == 2 ? std::exp(0.7 + 0.8 * ((s * 7919) % 10)) : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 2);
}

TEST(Ranks, TwoOddRanksInOppositeDirectionsAreBothNamed) {
  Ddp ddp;
  ddp.ranks = 5;
  ddp.loss_factor = [](int r, int) { return r == 1 ? 4.0 : r == 3 ? 0.25 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 2u) << Describe(findings);
  EXPECT_EQ(findings[0].rank + findings[1].rank, 4);
}

TEST(Ranks, ASpikeOnOneRankIsNotASustainedDifference) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int s) { return r == 3 && s >= 100 && s < 103 ? 50.0 : 1.0; };
  EXPECT_TRUE(Compare(ddp.Record()).empty());
}

TEST(Ranks, LossUpByHalfIsBelowTheEffectSize) {
  // A shard 1.5x harder (a statistically clear difference) is not called a divergence.
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r == 0 ? 1.5 : 1.0; };
  EXPECT_TRUE(Compare(ddp.Record()).empty());
}

TEST(Ranks, TwoRanksApartFromTheStartAreNotTold) {
  Ddp ddp;
  ddp.ranks = 2;
  ddp.loss_factor = [](int r, int) { return r == 1 ? 4.0 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, -1);
  EXPECT_EQ(findings[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_NE(findings[0].finding.summary.find("ranks 0 and 1 disagree"), std::string::npos);
}

TEST(Ranks, OfTwoRanksTheOneThatMovedAgainstItsOwnHistoryIsNamed) {
  for (int bad : {0, 1}) {
    Ddp ddp;
    ddp.ranks = 2;
    ddp.loss_factor = [bad](int r, int s) { return r == bad && s >= 100 ? 4.0 : 1.0; };
    const auto findings = Compare(ddp.Record());
    ASSERT_EQ(findings.size(), 1u) << Describe(findings);
    EXPECT_EQ(findings[0].rank, bad) << findings[0].finding.evidence_json;
    EXPECT_GE(findings[0].finding.step, 95);
    EXPECT_LE(findings[0].finding.step, 110);
    EXPECT_EQ(nlohmann::json::parse(findings[0].finding.evidence_json)["reference"], "own history");
  }
}

TEST(Ranks, HalfTheRanksApartIsASplitNotAName) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r >= 2 ? 4.0 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, -1);
  EXPECT_EQ(findings[0].ranks, (std::vector<int>{0, 1, 2, 3}));
}

TEST(Ranks, AGradientNormLeavingTheSharedValueIsNamedEvenWhenSmall) {
  Ddp ddp;
  ddp.grad_factor = [](int r, int s) { return r == 3 && s >= 50 ? 1.05 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 3);
  EXPECT_EQ(findings[0].finding.location, "grad/global_norm");
  EXPECT_EQ(findings[0].finding.step, 50);
  EXPECT_EQ(findings[0].finding.last_step, 199);
  EXPECT_EQ(findings[0].finding.causes[0].id, "rank_desync");
}

TEST(Ranks, OfTwoRanksTheOneWhoseGradientNormJumpedIsNamed) {
  Ddp ddp;
  ddp.ranks = 2;
  ddp.grad_factor = [](int r, int s) { return r == 0 && s >= 80 ? 20.0 : 1.0; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 0);
  EXPECT_EQ(findings[0].finding.step, 80);
}

TEST(Ranks, GradientNormsThatDifferByShardingAreJudgedByLevelOnly) {
  // Sharded gradients (FSDP, pipeline stages): each rank's norm its own, never equal.
  Ddp ddp;
  ddp.grad_factor = [](int r, int s) { return 1.0 + 0.1 * std::sin(r * 7.0 + s); };
  EXPECT_TRUE(Compare(ddp.Record()).empty());
}

TEST(Ranks, ASlowRankIsAStraggler) {
  Ddp ddp;
  ddp.forward_seconds = [](int r, int) { return r == 1 ? 0.030 : 0.010; };
  const auto findings = Compare(ddp.Record());
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].finding.code, "STRAGGLER");
  EXPECT_EQ(findings[0].rank, 1);
  EXPECT_EQ(findings[0].finding.location, "time/forward");
  // With 2 ranks too: slower is a direction, not a disagreement.
  ddp.ranks = 2;
  const auto two = Compare(ddp.Record());
  ASSERT_EQ(two.size(), 1u) << Describe(two);
  EXPECT_EQ(two[0].rank, 1);
}

TEST(Ranks, EqualTimesAndSubMillisecondDifferencesAreNotStragglers) {
  Ddp ddp;
  ddp.forward_seconds = [](int r, int) { return r == 1 ? 0.0006 : 0.0002; };  // 3x, but 0.4 ms
  EXPECT_TRUE(Compare(ddp.Record()).empty());
  ddp.forward_seconds = [](int, int) { return 0.01; };
  EXPECT_TRUE(Compare(ddp.Record()).empty());
}

TEST(Ranks, ARankThatStoppedIsComparedWhileItRan) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r == 0 ? 3.0 : 1.0; };
  std::vector<RunData> data = ddp.Record();
  RunData cut;  // rank 3 killed at step 120
  for (const ScalarSeries& s : data[3].scalars) {
    for (size_t i = 0; i < s.steps.size() && s.steps[i] <= 120; ++i) cut.OnScalar(s.tag, s.steps[i], 0, s.values[i]);
  }
  data[3] = cut;
  const auto findings = Compare(data);
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 0);
}

TEST(Ranks, NonFinitePointsAndRepeatedStepsAreHandled) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r == 1 ? 3.0 : 1.0; };
  std::vector<RunData> data = ddp.Record();
  data[0].OnScalar("train/loss", 50, 0, std::nan(""));      // a NaN at a step: that point is left out
  data[2].OnScalar("train/loss", 10, 0, 1e9);               // step 10 logged again: the last value wins
  data[2].OnScalar("train/loss", 10, 0, 0.5);
  RunData all_nan;
  for (int s = 0; s < 200; ++s) all_nan.OnScalar("train/loss", s, 0, std::nan(""));
  data.push_back(all_nan);                                   // a rank with nothing finite: not compared
  const auto findings = Compare(data);
  ASSERT_EQ(findings.size(), 1u) << Describe(findings);
  EXPECT_EQ(findings[0].rank, 1);
}

TEST(Ranks, FewerThanTwoRanksOrTooFewStepsSayNothing) {
  Ddp ddp;
  ddp.loss_factor = [](int r, int) { return r == 0 ? 5.0 : 1.0; };
  std::vector<RunData> data = ddp.Record();
  EXPECT_TRUE(CompareRanks({{0, &data[0]}}).empty());
  EXPECT_TRUE(CompareRanks({}).empty());
  ddp.steps = 12;
  EXPECT_TRUE(Compare(ddp.Record()).empty());
  RunData empty;
  EXPECT_TRUE(CompareRanks({{0, &empty}, {1, &empty}}).empty());
}

}  // namespace
}  // namespace trainscope::doctor
