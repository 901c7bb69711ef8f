#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "core/sample.h"

namespace trainscope {
// The portable float32 kernel (tensor_stats.cc), the reference for the SIMD one.
TensorStats ComputeTensorStatsScalar(const float* values, size_t n, bool histogram);
namespace {

TEST(TensorStats, CountsAndMomentsMatchDirectComputation) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::vector<float> v(10007);
  for (auto& x : v) x = normal(rng);
  v[3] = 0.0f;
  v[10] = -0.0f;
  v[100] = std::numeric_limits<float>::quiet_NaN();
  v[200] = std::numeric_limits<float>::infinity();
  v[300] = -std::numeric_limits<float>::infinity();
  const TensorStats s = ComputeTensorStats(v.data(), v.size(), true);
  double sum = 0, sq = 0, mn = 1e300, mx = -1e300, am = 0;
  for (float x : v) {
    if (!std::isfinite(x)) continue;
    sum += x; sq += double(x) * x; mn = std::min<double>(mn, x); mx = std::max<double>(mx, x);
    am = std::max<double>(am, std::fabs(x));
  }
  EXPECT_EQ(s.numel, v.size());
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 2u);
  EXPECT_EQ(s.zeros, 2u);
  // The SIMD kernel adds float partial sums (tensor_stats.cc): equal to ~1e-7 of the
  // magnitudes summed, as torch's float32 reductions are.
  const double scale = std::sqrt(sq * v.size());  // >= the sum of |x|
  EXPECT_NEAR(s.sum, sum, 1e-6 * scale);
  EXPECT_NEAR(s.sum_squares, sq, 1e-6 * sq);
  EXPECT_EQ(s.min, mn);
  EXPECT_EQ(s.max, mx);
  EXPECT_EQ(s.abs_max, am);
  EXPECT_NEAR(s.l2_norm(), std::sqrt(sq), 1e-6 * std::sqrt(sq));
  EXPECT_NEAR(s.mean(), sum / (v.size() - 3), 1e-6 * scale / v.size());
  uint64_t histogram_total = 0;
  for (auto c : s.exponent_counts) histogram_total += c;
  EXPECT_EQ(histogram_total, v.size() - 3 - 2);  // every finite non-zero value, once
}

TEST(TensorStats, ExponentBinsFollowPowersOfTwo) {
  const float v[] = {1.0f, 1.5f, 1.999f, 2.0f, 0.5f, -0.75f, 1e-30f, 1e30f, 3e38f};
  const TensorStats s = ComputeTensorStats(v, std::size(v), true);
  const int bin_of_one = 0 - TensorStats::kMinExponent;  // [1, 2)
  EXPECT_EQ(s.exponent_counts[bin_of_one], 3u);
  EXPECT_EQ(s.exponent_counts[bin_of_one + 1], 1u);  // 2.0
  EXPECT_EQ(s.exponent_counts[bin_of_one - 1], 2u);  // 0.5, -0.75
  EXPECT_EQ(s.exponent_counts[0], 1u);               // 1e-30 < 2^-64: clamped low
  EXPECT_EQ(s.exponent_counts[TensorStats::kExponentBins - 1], 2u);  // 1e30, 3e38 >= 2^64: clamped high
  EXPECT_EQ(TensorStats::ExponentBin(1.0), bin_of_one);
  EXPECT_EQ(TensorStats::ExponentBin(0.999), bin_of_one - 1);
}

TEST(TensorStats, HalfAndBFloat16DecodeLikeFloat) {
  // 1.0, -2.5, 65504 (fp16 max), smallest fp16 subnormal 2^-24, +inf, NaN
  const uint16_t half[] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x7c00, 0x7e00};
  const TensorStats h = ComputeTensorStatsHalf(half, 6, true);
  EXPECT_EQ(h.inf, 1u);
  EXPECT_EQ(h.nan, 1u);
  EXPECT_DOUBLE_EQ(h.max, 65504.0);
  EXPECT_DOUBLE_EQ(h.min, -2.5);
  EXPECT_EQ(h.exponent_counts[-24 - TensorStats::kMinExponent], 1u);
  EXPECT_EQ(h.exponent_counts[15 - TensorStats::kMinExponent], 1u);  // 65504 in [2^15, 2^16)
  const uint16_t bf[] = {0x3f80, 0xc020, 0x0000};  // 1.0, -2.5, 0
  const TensorStats b = ComputeTensorStatsBFloat16(bf, 3, true);
  EXPECT_DOUBLE_EQ(b.sum, -1.5);
  EXPECT_EQ(b.zeros, 1u);
}

TEST(TensorStats, EmptyAndAllNonFinite) {
  const TensorStats empty = ComputeTensorStats(static_cast<const float*>(nullptr), 0, true);
  EXPECT_EQ(empty.numel, 0u);
  EXPECT_TRUE(std::isnan(empty.mean()));
  const double v[] = {std::nan(""), std::numeric_limits<double>::infinity()};
  const TensorStats s = ComputeTensorStats(v, 2, false);
  EXPECT_EQ(s.finite(), 0u);
  EXPECT_TRUE(std::isnan(s.stddev()));
}

TEST(TensorStats, MergeEqualsWhole) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(float(i)) * 10;
  TensorStats a = ComputeTensorStats(v.data(), 400, true);
  MergeTensorStats(a, ComputeTensorStats(v.data() + 400, 600, true));
  const TensorStats whole = ComputeTensorStats(v.data(), v.size(), true);
  EXPECT_EQ(a.numel, whole.numel);
  EXPECT_NEAR(a.sum, whole.sum, 1e-6 * std::sqrt(whole.sum_squares * v.size()));
  EXPECT_EQ(a.max, whole.max);
  EXPECT_EQ(a.exponent_counts, whole.exponent_counts);
}

// Every exponent field, in a small tensor (the kernel's two counter tables) and a large one
// (eight): the same bins as the portable kernel, the clamped ends included.
TEST(TensorStats, Float32HistogramOfEveryExponentAgreesWithPortableKernel) {
  for (size_t copies : {size_t{1}, size_t{20}}) {
    std::vector<float> v;
    for (size_t c = 0; c < copies; ++c) {
      for (uint32_t field = 0; field < 256; ++field) {
        const uint32_t mantissa = field == 255 ? 0 : static_cast<uint32_t>(c);  // 255: Inf, not NaN
        v.push_back(std::bit_cast<float>((field << 23) | (c & 1 ? 0x80000000u : 0u) | mantissa));
      }
    }
    const TensorStats a = ComputeTensorStats(v.data(), v.size(), true);
    const TensorStats b = ComputeTensorStatsScalar(v.data(), v.size(), true);
    SCOPED_TRACE(v.size());
    EXPECT_EQ(a.inf, copies);
    for (int i = 0; i < TensorStats::kExponentBins; ++i) EXPECT_EQ(a.exponent_counts[i], b.exponent_counts[i]) << i;
  }
}

// The dispatched float32 kernel (AVX2 where the CPU has it) must agree with the portable
// one on every count and bin, for every length (block tails, vector tails) and for values
// that need care: signed zeros, subnormals, NaN/Inf inside a vector, huge and tiny values.
TEST(TensorStats, Float32KernelAgreesWithPortableKernel) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{2047}, size_t{2048}, size_t{2049},
                   size_t{4096 + 13}, size_t{100003}}) {
    std::vector<float> v(n);
    for (auto& x : v) {
      const int k = pick(rng);
      if (k == 0) x = std::numeric_limits<float>::quiet_NaN();
      else if (k == 1) x = -std::numeric_limits<float>::infinity();
      else if (k == 2) x = -0.0f;
      else if (k == 3) x = 1e-40f;  // subnormal
      else if (k == 4) x = 3e38f;
      else if (k == 5) x = -1e-30f;  // normal, below the lowest bin's 2^-64: clamped into it
      else if (k < 20) x = 0.0f;
      else x = normal(rng) * std::ldexp(1.0f, pick(rng) - 50);
    }
    for (bool histogram : {false, true}) {
      const TensorStats a = ComputeTensorStats(v.data(), n, histogram);
      const TensorStats b = ComputeTensorStatsScalar(v.data(), n, histogram);
      SCOPED_TRACE(n);
      EXPECT_EQ(a.numel, b.numel);
      EXPECT_EQ(a.nan, b.nan);
      EXPECT_EQ(a.inf, b.inf);
      EXPECT_EQ(a.zeros, b.zeros);
      EXPECT_EQ(a.min, b.min);
      EXPECT_EQ(a.max, b.max);
      EXPECT_EQ(a.abs_max, b.abs_max);
      // Sums are added in float partial sums on clean blocks: equal to ~1e-7.
      EXPECT_NEAR(a.sum, b.sum, 1e-6 * std::sqrt(b.sum_squares * std::max<size_t>(n, 1)));
      EXPECT_NEAR(a.sum_squares, b.sum_squares, 1e-6 * b.sum_squares);
      EXPECT_EQ(a.has_histogram, b.has_histogram);
      for (int i = 0; i < TensorStats::kExponentBins; ++i) EXPECT_EQ(a.exponent_counts[i], b.exponent_counts[i]) << i;
    }
  }
}

// Clean data takes the SIMD kernel's fast path (float partial sums): sums agree with
// double accumulation to ~1e-7, everything else exactly. Blocks of very large or very small
// magnitudes, whose float squares would overflow or underflow, must still come out right.
TEST(TensorStats, Float32FastPathIsAccurateAtEveryScale) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float scale : {1.0f, 1e-3f, 1e-12f, 1e-20f, 1e-30f, 1e-38f, 1e15f, 1e19f, 1e30f}) {
    std::vector<float> v(100003);
    for (auto& x : v) x = normal(rng) * scale;
    v[17] = 0.0f;
    v[5000] = -0.0f;
    const TensorStats a = ComputeTensorStats(v.data(), v.size(), true);
    const TensorStats b = ComputeTensorStatsScalar(v.data(), v.size(), true);
    SCOPED_TRACE(scale);
    EXPECT_EQ(a.nan, 0u);
    EXPECT_EQ(a.inf, 0u);
    EXPECT_EQ(a.zeros, b.zeros);
    EXPECT_EQ(a.min, b.min);
    EXPECT_EQ(a.max, b.max);
    EXPECT_EQ(a.abs_max, b.abs_max);
    ASSERT_GT(b.sum_squares, 0.0);
    EXPECT_NEAR(a.sum_squares, b.sum_squares, 1e-6 * b.sum_squares);
    // sum of N(0,1)*scale values: compare against the magnitude it is made of
    EXPECT_NEAR(a.sum, b.sum, 1e-6 * std::sqrt(b.sum_squares * v.size()));
    EXPECT_TRUE(std::isfinite(a.l2_norm()));
    for (int i = 0; i < TensorStats::kExponentBins; ++i) EXPECT_EQ(a.exponent_counts[i], b.exponent_counts[i]) << i;
  }
}

TEST(TensorStats, AllNonFiniteFloat32HasNoFiniteExtremes) {
  const float v[] = {std::nanf(""), std::numeric_limits<float>::infinity(), std::nanf(""), std::nanf(""),
                     std::nanf(""), std::nanf(""), std::nanf(""), std::nanf(""), std::nanf("")};
  const TensorStats s = ComputeTensorStats(v, std::size(v), true);
  EXPECT_EQ(s.nan, 8u);
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(s.abs_max, 0.0);
  EXPECT_TRUE(std::isinf(s.min));
  uint64_t total = 0;
  for (auto c : s.exponent_counts) total += c;
  EXPECT_EQ(total, 0u);
}

}  // namespace
}  // namespace trainscope

namespace trainscope {
namespace {

TEST(TensorStats, FromDeviceReductionsMatchesTheOnePass) {
  const float v[] = {-3.0f, 0.0f, 2.0f, NAN, INFINITY};
  const TensorStats pass = ComputeTensorStats(v, 5, false);
  const TensorStats reduced = TensorStatsFromReductions(5, 1, 1, 1, -3.0, 2.0, -1.0, 13.0);
  EXPECT_EQ(reduced.numel, pass.numel);
  EXPECT_EQ(reduced.nan, pass.nan);
  EXPECT_EQ(reduced.inf, pass.inf);
  EXPECT_EQ(reduced.zeros, pass.zeros);
  EXPECT_EQ(reduced.abs_max, pass.abs_max);
  EXPECT_EQ(reduced.sum_squares, pass.sum_squares);
  EXPECT_EQ(TensorStatsFromReductions(2, 2, 0, 0, INFINITY, -INFINITY, 0, 0).abs_max, 0.0);
}

// data/tensor_stats.json's rows: each names a field of its own, and the rows of the stores'
// first schema come first (their columns and checksum order are fixed).
TEST(MeasuredStats, EachRowHasItsOwnNameAndFieldAndTheFirstSchemaComesFirst) {
  ASSERT_GT(tensor_stats::kMeasuredCount, 0u);
  bool later = false;
  for (size_t i = 0; i < tensor_stats::kMeasuredCount; ++i) {
    const tensor_stats::MeasuredStat* stat = tensor_stats::kMeasured[i];
    EXPECT_EQ(tensor_stats::FindMeasured(stat->name), stat);
    EXPECT_FALSE(stat->unit.empty()) << stat->name;
    EXPECT_FALSE(stat->computed.empty()) << stat->name;
    EXPECT_FALSE(later && stat->first_schema) << stat->name;
    later = later || !stat->first_schema;
    TensorStats s;
    EXPECT_TRUE(std::isnan(s.*stat->field)) << stat->name << ": not measured until measured";
    s.*stat->field = 1.0;
    for (size_t j = 0; j < tensor_stats::kMeasuredCount; ++j) {
      if (j == i) continue;
      EXPECT_TRUE(std::isnan(s.*tensor_stats::kMeasured[j]->field)) << stat->name;
    }
  }
  EXPECT_EQ(tensor_stats::FindMeasured("l2_norm"), nullptr);
  EXPECT_EQ(tensor_stats::kSaturatedFractionHigh, 0.99);
  EXPECT_EQ(tensor_stats::kSaturatedFractionLow, 0.01);
}

}  // namespace
}  // namespace trainscope
