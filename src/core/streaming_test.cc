#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/streaming.h"

namespace trainscope {
namespace {

TEST(Ema, BiasCorrectedFromTheFirstValue) {
  Ema ema(0.9);
  EXPECT_TRUE(std::isnan(ema.value()));
  ema.Add(5.0);
  EXPECT_DOUBLE_EQ(ema.value(), 5.0);  // not 0.5: the zero start is corrected away
  ema.Add(5.0);
  EXPECT_NEAR(ema.value(), 5.0, 1e-12);
  Ema fast(0.0);
  fast.Add(1);
  fast.Add(3);
  EXPECT_DOUBLE_EQ(fast.value(), 3.0);
}

TEST(Welford, MatchesTwoPassAndMerges) {
  std::vector<double> v = {1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16};
  Welford w;
  for (double x : v) w.Add(x);
  EXPECT_DOUBLE_EQ(w.mean(), 1e9 + 10);
  EXPECT_NEAR(w.variance(), 30.0, 1e-6);  // naive sum of squares loses this entirely
  Welford a, b;
  a.Add(v[0]); a.Add(v[1]);
  b.Add(v[2]); b.Add(v[3]);
  a.Merge(b);
  EXPECT_NEAR(a.variance(), 30.0, 1e-6);
  EXPECT_EQ(a.count(), 4u);
}

TEST(RollingMedianMad, IgnoresSpikesAndSlides) {
  RollingMedianMad r(5);
  for (double x : {1.0, 2.0, 3.0, 4.0, 100.0}) r.Add(x);
  EXPECT_DOUBLE_EQ(r.Median(), 3.0);
  EXPECT_DOUBLE_EQ(r.Mad(), 1.0);
  EXPECT_GT(r.RobustZ(100.0), 50.0);
  r.Add(5.0);  // 1.0 leaves the window
  EXPECT_DOUBLE_EQ(r.Median(), 4.0);
  RollingMedianMad flat(3);
  for (int i = 0; i < 3; ++i) flat.Add(2.0);
  EXPECT_EQ(flat.RobustZ(2.0), 0.0);
  EXPECT_TRUE(std::isinf(flat.RobustZ(2.5)));
}

TEST(RobustSlope, RecoversSlopeDespiteOutliersAndFlagsTrend) {
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0, 0.5);
  std::vector<double> x, y;
  for (int i = 0; i < 300; ++i) {
    x.push_back(i);
    y.push_back(2.0 * i + 10 + noise(rng) + (i % 37 == 0 ? 500 : 0));
  }
  const SlopeFit fit = RobustSlope(x, y);
  EXPECT_NEAR(fit.slope, 2.0, 0.02);
  EXPECT_NEAR(fit.intercept, 10.0, 1.0);
  EXPECT_GT(fit.trend_z, 10.0);
  std::vector<double> flat;
  for (int i = 0; i < 300; ++i) flat.push_back(noise(rng));
  const SlopeFit none = RobustSlope(x, flat);
  EXPECT_LT(std::fabs(none.trend_z), 3.5);
  EXPECT_NEAR(none.slope, 0.0, 0.01);
}

TEST(RobustSlope, ThinsLongSeriesAndSkipsNonFinite) {
  std::vector<double> x, y;
  for (int i = 0; i < 5000; ++i) {
    x.push_back(i);
    y.push_back(i % 100 == 0 ? std::nan("") : -0.5 * i);
  }
  const SlopeFit fit = RobustSlope(x, y, 200);
  EXPECT_LE(fit.points, 200u);
  EXPECT_NEAR(fit.slope, -0.5, 1e-9);
  EXPECT_LT(fit.trend_z, -10);
}

}  // namespace
}  // namespace trainscope
