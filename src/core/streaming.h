// Small streaming statistics the doctor builds its detectors from. Each is O(1) or O(window)
// per value and has no dependencies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

namespace trainscope {

// Exponential moving average with bias correction (as TensorBoard's smoothing): the
// first values are not pulled toward zero. weight = how much of the past is kept (0..1).
class Ema {
 public:
  explicit Ema(double weight) : weight_(weight) {}
  void Add(double x);
  double value() const;  // NaN before the first value
  size_t count() const { return count_; }

 private:
  double weight_;
  double biased_ = 0;
  double weight_power_ = 1;  // weight^count
  size_t count_ = 0;
};

// Mean and variance in one pass, numerically stable (Welford 1962).
class Welford {
 public:
  void Add(double x);
  void Merge(const Welford& other);  // Chan et al. parallel combination
  size_t count() const { return count_; }
  double mean() const;
  double variance() const;  // sample variance (n - 1); NaN below 2 values
  double stddev() const;

 private:
  size_t count_ = 0;
  double mean_ = 0;
  double m2_ = 0;
};

// Median and median absolute deviation of the last `window` values. MAD * 1.4826 estimates
// the standard deviation of normal data and is not moved by the spikes it is used to find.
class RollingMedianMad {
 public:
  explicit RollingMedianMad(size_t window) : window_(window) {}
  void Add(double x);
  size_t count() const { return values_.size(); }
  bool full() const { return values_.size() == window_; }
  double Median() const;  // NaN when empty
  double Mad() const;     // NaN when empty
  // (x - median) / (1.4826 * MAD); +-inf when MAD is 0 and x differs from the median.
  double RobustZ(double x) const;

 private:
  size_t window_;
  std::deque<double> values_;
  // Median and MAD of values_ as they are now: a detector asks for both, and for a robust z,
  // at every step.
  mutable double median_ = 0, mad_ = 0;
  mutable bool median_known_ = false, mad_known_ = false;
};

// Median of the values (copies; NaN when empty).
double Median(std::span<const double> values);
inline double Median(const std::deque<double>& values) { return Median(std::vector<double>(values.begin(), values.end())); }

// Theil-Sen slope: the median of the slopes between all pairs of points. Robust to up to
// ~29 % outliers. Above max_points the series is thinned evenly first (keeps O(n^2) bounded).
struct SlopeFit {
  double slope = 0;      // units of y per unit of x
  double intercept = 0;  // median of y - slope * x
  // Mann-Kendall trend statistic as a z-score: |z| > 3 is a trend at p < 0.003.
  double trend_z = 0;
  size_t points = 0;
};
SlopeFit RobustSlope(std::span<const double> x, std::span<const double> y, size_t max_points = 400);

}  // namespace trainscope
