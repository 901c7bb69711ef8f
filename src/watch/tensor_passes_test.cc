#include "watch/tensor_passes.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace trainscope::watch {
namespace {

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

TEST(TensorPasses, RowNormsAreTheNormOfEachRow) {
  const size_t rows = 37, len = 129;
  auto v = Random(rows * len, 1);
  v[5 * len + 3] = std::nanf("");
  v[9 * len + 1] = std::numeric_limits<float>::infinity();
  std::vector<float> norms;
  const TensorStats s = StatsWithRowNorms(v.data(), rows, len, DType::kFloat32, true, &norms);
  ASSERT_EQ(norms.size(), rows);
  EXPECT_EQ(s.numel, rows * len);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 1u);
  const TensorStats whole = StatsOf(v.data(), rows * len, DType::kFloat32, true);
  EXPECT_EQ(s.exponent_counts, whole.exponent_counts);
  for (size_t r = 0; r < rows; ++r) {
    if (r == 5) {
      EXPECT_TRUE(std::isnan(norms[r]));
      continue;
    }
    if (r == 9) {
      EXPECT_TRUE(std::isinf(norms[r]));
      continue;
    }
    double sq = 0;
    for (size_t i = 0; i < len; ++i) sq += double(v[r * len + i]) * v[r * len + i];
    EXPECT_NEAR(norms[r], std::sqrt(sq), 1e-5 * std::sqrt(sq));
  }
}

TEST(TensorPasses, WeightAndUpdateStatsRefreshTheSnapshot) {
  const size_t n = 40000;  // more than one block of the difference buffer
  auto cur = Random(n, 2);
  auto prev = cur;
  for (size_t i = 0; i < n; ++i) prev[i] -= 0.001f * (i % 3);
  const auto before = prev;
  TensorStats w, u;
  WeightAndUpdateStats(cur.data(), prev.data(), n, DType::kFloat32, true, &w, &u);
  double wsq = 0, usq = 0;
  uint64_t uzero = 0;
  for (size_t i = 0; i < n; ++i) {
    wsq += double(cur[i]) * cur[i];
    const float d = cur[i] - before[i];
    usq += double(d) * d;
    uzero += d == 0.0f;
  }
  EXPECT_NEAR(w.sum_squares, wsq, 1e-6 * wsq);  // float partial sums: ~1e-7 (core/tensor_stats.cc)
  EXPECT_NEAR(u.sum_squares, usq, 1e-6 * usq);
  EXPECT_EQ(u.zeros, uzero);
  EXPECT_EQ(prev, cur);  // the snapshot now holds the current weights
}

TEST(TensorPasses, BFloat16UpdateIsExact) {
  // 1.0 -> 1.0078125 (one bf16 ulp): the update is 2^-7 exactly.
  uint16_t cur[] = {0x3f81, 0x3f80};
  uint16_t prev[] = {0x3f80, 0x3f80};
  TensorStats w, u;
  WeightAndUpdateStats(cur, prev, 2, DType::kBFloat16, true, &w, &u);
  EXPECT_DOUBLE_EQ(u.max, 0.0078125);
  EXPECT_EQ(u.zeros, 1u);
  EXPECT_EQ(u.exponent_counts[-7 - TensorStats::kMinExponent], 1u);
  EXPECT_EQ(prev[0], 0x3f81);
  EXPECT_DOUBLE_EQ(w.sum, 1.0078125 + 1.0);
}

TEST(TensorPasses, DeadFractionCountsUnitsZeroForEverySample) {
  // [batch 4][units 5]: unit 1 and 3 are zero everywhere, unit 4 fires once.
  std::vector<float> v(20, 0.0f);
  for (size_t b = 0; b < 4; ++b) v[b * 5 + 0] = 1.0f, v[b * 5 + 2] = 0.5f;
  v[3 * 5 + 4] = 2.0f;
  EXPECT_DOUBLE_EQ(DeadFraction(v.data(), 4, 5, 1, DType::kFloat32), 2.0 / 5.0);
  // NCHW: [2][3 channels][4 positions]: channel 1 never fires.
  std::vector<double> c(24, 0.0);
  c[0 * 12 + 0 * 4 + 2] = 1.0;
  c[1 * 12 + 2 * 4 + 3] = 1.0;
  EXPECT_DOUBLE_EQ(DeadFraction(c.data(), 2, 3, 4, DType::kFloat64), 1.0 / 3.0);
  std::vector<float> cf(c.begin(), c.end());
  EXPECT_DOUBLE_EQ(DeadFraction(cf.data(), 2, 3, 4, DType::kFloat32), 1.0 / 3.0);
  cf[1 * 12 + 1 * 4 + 3] = -0.5f;  // channel 1 fires once, in the last sample
  EXPECT_DOUBLE_EQ(DeadFraction(cf.data(), 2, 3, 4, DType::kFloat32), 0.0);
}

TEST(TensorPasses, SaturatedFraction) {
  const float t[] = {0.995f, -0.999f, 0.5f, 0.0f, std::nanf("")};
  EXPECT_DOUBLE_EQ(SaturatedFraction(t, 5, DType::kFloat32, Saturation::kTanh), 2.0 / 4.0);
  const float s[] = {0.001f, 0.999f, 0.5f, 0.02f};
  EXPECT_DOUBLE_EQ(SaturatedFraction(s, 4, DType::kFloat32, Saturation::kSigmoid), 0.5);
  const uint16_t h[] = {0x3bf0 /* 0.9922 */, 0x3800 /* 0.5 */};
  EXPECT_DOUBLE_EQ(SaturatedFraction(h, 2, DType::kFloat16, Saturation::kTanh), 0.5);
}

// The host pass of data/tensor_stats.json's rows: a module's kind decides what its output gets.
TEST(TensorPasses, MeasureActivationGivesEachKindItsStatistics) {
  const float out[] = {0.0f, 0.995f, -0.2f, 0.0f, 0.5f, -0.999f};  // 2 samples x 3 units
  auto measure = [&](ActivationKind kind) {
    MeasuredTensorStats m;
    MeasureActivation(out, 6, 2, 3, 1, DType::kFloat32, kind, &m);
    return m;
  };
  EXPECT_TRUE(std::isnan(measure(kPlain).dead_fraction));
  EXPECT_TRUE(std::isnan(measure(kPlain).saturated_fraction));
  EXPECT_DOUBLE_EQ(measure(kDeadUnits).dead_fraction, DeadFraction(out, 2, 3, 1, DType::kFloat32));
  EXPECT_TRUE(std::isnan(measure(kDeadUnits).saturated_fraction));
  EXPECT_DOUBLE_EQ(measure(kTanh).saturated_fraction, SaturatedFraction(out, 6, DType::kFloat32, Saturation::kTanh));
  EXPECT_DOUBLE_EQ(measure(kSigmoid).saturated_fraction,
                   SaturatedFraction(out, 6, DType::kFloat32, Saturation::kSigmoid));
  EXPECT_TRUE(std::isnan(measure(kSigmoid).dead_fraction));
}

TEST(TensorPasses, RssIsPositive) { EXPECT_GT(ProcessRssBytes(), 1u << 20); }

TEST(TensorPasses, RecentRssHoldsAReadingOnlyWhileItIsYoung) {
  const uint64_t first = RecentProcessRssBytes(0);  // age 0: always a fresh reading
  EXPECT_GT(first, 1u << 20);
  // 64 MiB touched: the RSS grows by that much, but a reading an hour young is held.
  std::vector<char> grown(64u << 20, 1);
  const uint64_t held = RecentProcessRssBytes(3600);
  EXPECT_EQ(held, first);
  const uint64_t fresh = RecentProcessRssBytes(0);
  EXPECT_GE(fresh, first + (48u << 20));
  EXPECT_EQ(RecentProcessRssBytes(3600), fresh);  // the fresh reading is the one held now
  EXPECT_GT(grown[12345], 0);
}

TEST(TensorPasses, ThreadUsageCountsThisThreadsFaults) {
  uint64_t faults = 0, faults_after = 0;
  double kernel = -1, kernel_after = -1;
  if (!ThreadFaultsAndKernelSeconds(&faults, &kernel)) GTEST_SKIP() << "no per-thread usage here";
  std::vector<char> touched(16u << 20, 1);  // 4,096 fresh pages, each a minor fault
  ASSERT_TRUE(ThreadFaultsAndKernelSeconds(&faults_after, &kernel_after));
  EXPECT_GE(faults_after - faults, 1000u);
  EXPECT_GE(kernel_after, kernel);
  EXPECT_GE(kernel, 0.0);
  EXPECT_GT(touched[777], 0);
}

}  // namespace
}  // namespace trainscope::watch
