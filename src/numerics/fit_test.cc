#include "numerics/fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace trainscope::numerics {
namespace {

const FloatFormat& Get(const char* name) { return *FormatTable::Builtin().Find(name); }

// Counts what a cast does, value by value, with the format's own rounding.
FitCounts Direct(const std::vector<float>& values, const FloatFormat& f, int k) {
  FitCounts c;
  for (float v : values) {
    ++c.numel;
    if (!std::isfinite(v)) {
      ++c.nonfinite;
      continue;
    }
    if (v == 0) {
      ++c.zeros;
      continue;
    }
    const double r = f.Round(std::ldexp(static_cast<double>(v), k));
    if (!std::isfinite(r) || (f.layout.encoding == Encoding::kFinite && std::fabs(r) == f.max_finite &&
                               std::fabs(std::ldexp(static_cast<double>(v), k)) >= f.overflow_threshold)) {
      ++c.overflow_min;
    } else if (r == 0) {
      ++c.underflow_min;
    } else if (std::fabs(r) < f.min_normal) {
      ++c.subnormal_min;
    }
  }
  return c;
}

std::vector<float> LogUniform(size_t n, double lo_exp, double hi_exp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> e(lo_exp, hi_exp);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>((sign(rng) ? -1 : 1) * std::exp2(e(rng)));
  return v;
}

void ExpectBrackets(const std::vector<float>& values, const char* format, int k) {
  const FloatFormat& f = Get(format);
  const TensorStats s = ComputeTensorStats(values.data(), values.size(), true);
  const FitCounts fit = FitStats(s, f, k);
  const FitCounts truth = Direct(values, f, k);
  SCOPED_TRACE(std::string(format) + " k=" + std::to_string(k));
  EXPECT_EQ(fit.numel, truth.numel);
  EXPECT_LE(fit.overflow_min, truth.overflow_min);
  EXPECT_GE(fit.overflow_max, truth.overflow_min);
  EXPECT_LE(fit.underflow_min, truth.underflow_min);
  EXPECT_GE(fit.underflow_max, truth.underflow_min);
  EXPECT_LE(fit.subnormal_min, truth.subnormal_min);
  EXPECT_GE(fit.subnormal_max, truth.subnormal_min);
}

TEST(Fit, BracketsTheDirectCountInEveryFormat) {
  const std::vector<float> v = LogUniform(20000, -40, 20, 7);
  for (const FloatFormat& f : FormatTable::Builtin().formats()) {
    for (int k : {-8, 0, 6, 12}) ExpectBrackets(v, f.name().c_str(), k);
  }
}

// Underflow edges are powers of two, and so are bins: exact, not just bracketed.
TEST(Fit, UnderflowIsExactForFp16) {
  const std::vector<float> v = LogUniform(50000, -34, -10, 3);
  const FitCounts fit = FitStats(ComputeTensorStats(v.data(), v.size(), true), Get("fp16"), 0);
  const FitCounts truth = Direct(v, Get("fp16"), 0);
  EXPECT_GT(truth.underflow_min, 10000u);
  EXPECT_EQ(fit.underflow_min, truth.underflow_min);
  EXPECT_EQ(fit.underflow_max, truth.underflow_min);
  EXPECT_EQ(fit.overflow_max, 0u);
}

TEST(Fit, StraddlingOverflowBinIsApportionedConservatively) {
  // 100 values in [2^15, 2^16): 99 below 65520, one at 65530 (overflows FP16).
  std::vector<float> v(99, 40000.0f);
  v.push_back(65530.0f);
  const TensorStats s = ComputeTensorStats(v.data(), v.size(), true);
  const FitCounts fit = FitStats(s, Get("fp16"), 0);
  EXPECT_EQ(fit.overflow_min, 1u);   // abs_max proves one
  EXPECT_EQ(fit.overflow_max, 100u); // the whole bin may
  // abs_max below the threshold: nothing overflows, exactly.
  v.back() = 65504.0f;
  const FitCounts none = FitStats(ComputeTensorStats(v.data(), v.size(), true), Get("fp16"), 0);
  EXPECT_EQ(none.overflow_max, 0u);
  // A bin wholly above the threshold is exact.
  std::vector<float> big(10, 70000.0f);
  const FitCounts all = FitStats(ComputeTensorStats(big.data(), big.size(), true), Get("fp16"), 0);
  EXPECT_EQ(all.overflow_min, 10u);
  EXPECT_EQ(all.overflow_max, 10u);
}

TEST(Fit, LossScaleShiftsBinsExactly) {
  const std::vector<float> v = LogUniform(30000, -36, -14, 11);
  const TensorStats s = ComputeTensorStats(v.data(), v.size(), true);
  for (int k = 0; k <= 16; k += 4) {
    const FitCounts fit = FitStats(s, Get("fp16"), k);
    const FitCounts truth = Direct(v, Get("fp16"), k);
    EXPECT_EQ(fit.underflow_max, truth.underflow_min) << k;
  }
}

TensorStatsSeries Series(const std::string& tag, const std::vector<std::vector<float>>& steps) {
  TensorStatsSeries s;
  s.tag = tag;
  for (size_t i = 0; i < steps.size(); ++i) {
    s.steps.push_back(static_cast<int64_t>(i));
    s.wall_times.push_back(0);
    s.stats.push_back(ComputeTensorStats(steps[i].data(), steps[i].size(), true));
  }
  return s;
}

TEST(Fit, RecommendedLossScaleRemovesUnderflowWithoutOverflow) {
  // Gradients spanning 2^-36 .. 2^-6: FP16 flushes those below 2^-25 unscaled.
  const TensorStatsSeries g = Series("grad/w", {LogUniform(20000, -36, -6, 1), LogUniform(20000, -35, -7, 2)});
  const LossScaleAdvice a = RecommendLossScale({&g}, Get("fp16"));
  ASSERT_TRUE(a.valid);
  EXPECT_GT(a.at_one.underflow_min, 0u);
  EXPECT_EQ(a.at_recommended.underflow_max, 0u);
  EXPECT_EQ(a.at_recommended.overflow_max, 0u);
  EXPECT_LE(a.k_low, a.k_recommended);
  EXPECT_LE(a.k_recommended, a.k_high);
  // The direct count at the recommended scale agrees.
  for (size_t i = 0; i < g.stats.size(); ++i) {
    std::vector<float> values = i == 0 ? LogUniform(20000, -36, -6, 1) : LogUniform(20000, -35, -7, 2);
    const FitCounts truth = Direct(values, Get("fp16"), a.k_recommended);
    EXPECT_EQ(truth.underflow_min, 0u);
    EXPECT_EQ(truth.overflow_min, 0u);
  }
  // Headroom: the largest gradient times 2^(k_high + 1) is still in range.
  EXPECT_LT(std::ldexp(a.abs_max, a.k_high + 1), Get("fp16").overflow_threshold);
  EXPECT_GE(std::ldexp(a.abs_max, a.k_high + 2), Get("fp16").overflow_threshold);
}

TEST(Fit, FitRunSortsWorstFirstAndScalesOnlyGradients) {
  RunData run;
  const std::vector<float> small = LogUniform(1000, -40, -20, 5);
  const std::vector<float> fine = LogUniform(1000, -8, 4, 6);
  for (int step = 0; step < 3; ++step) {
    run.OnTensorStats("grad/a", step, 0, ComputeTensorStats(small.data(), small.size(), true));
    run.OnTensorStats("act/b", step, 0, ComputeTensorStats(small.data(), small.size(), true));
    run.OnTensorStats("weight/c", step, 0, ComputeTensorStats(fine.data(), fine.size(), true));
    run.OnTensorStats("weight/d", step, 0, ComputeTensorStats(fine.data(), fine.size(), false));
  }
  FitOptions o;
  std::vector<TensorFit> fits = FitRun(run, Get("fp16"), o);
  ASSERT_EQ(fits.size(), 3u);  // weight/d has no histogram
  EXPECT_GT(fits[0].counts.lost(), 0.5);
  EXPECT_EQ(fits[2].tag, "weight/c");
  EXPECT_EQ(fits[2].counts.lost(), 0.0);
  EXPECT_EQ(fits[0].step_first, 0);
  EXPECT_EQ(fits[0].step_last, 2);
  o.grad_scale_exponent = 24;
  fits = FitRun(run, Get("fp16"), o);
  EXPECT_EQ(fits[0].tag, "act/b");  // still flushed: the scale is on gradients only
  const TensorFit& grad = fits[0].tag == "grad/a" ? fits[0] : fits[1];
  EXPECT_EQ(grad.tag, "grad/a");
  EXPECT_EQ(grad.scale_exponent, 24);
  EXPECT_EQ(grad.counts.underflow_max, 0u);
}

TEST(Fit, DelayedScalingOverflowsWhenAmaxOutgrowsItsHistory) {
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 6; ++i) steps.push_back(LogUniform(2000, -6, 0, 20 + i));
  steps.push_back(LogUniform(2000, -6, 4, 99));  // amax 16x larger than any before
  const TensorStatsSeries s = Series("act/x", steps);
  const DelayedScalingFit d = FitDelayedScaling(s, Get("fp8-e4m3"), 4);
  EXPECT_EQ(d.points, 7u);
  EXPECT_EQ(d.overflow_points, 1u);
  EXPECT_EQ(d.first_overflow_step, 6);
  EXPECT_EQ(d.worst_step, 6);
  EXPECT_GT(d.counts.overflow_min, 0u);
  EXPECT_EQ(d.amax_history.size(), 4u);
  EXPECT_EQ(DelayedScaleExponent(1.0, Get("fp8-e4m3")), 8);  // 2^8 <= 448 < 2^9
  EXPECT_EQ(DelayedScaleExponent(448.0, Get("fp8-e4m3")), 0);
}

}  // namespace
}  // namespace trainscope::numerics
