#include "core/streaming.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace trainscope {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

void Ema::Add(double x) {
  biased_ = weight_ * biased_ + (1 - weight_) * x;
  weight_power_ *= weight_;
  ++count_;
}

double Ema::value() const {
  if (count_ == 0) return kNaN;
  const double correction = 1 - weight_power_;
  return correction > 0 ? biased_ / correction : biased_;
}

void Welford::Add(double x) {
  ++count_;
  const double delta = x - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (x - mean_);
}

void Welford::Merge(const Welford& other) {
  if (other.count_ == 0) return;
  if (count_ == 0) { *this = other; return; }
  const double n = static_cast<double>(count_ + other.count_);
  const double delta = other.mean_ - mean_;
  mean_ += delta * static_cast<double>(other.count_) / n;
  m2_ += other.m2_ + delta * delta * static_cast<double>(count_) * static_cast<double>(other.count_) / n;
  count_ += other.count_;
}

double Welford::mean() const { return count_ ? mean_ : kNaN; }
double Welford::variance() const { return count_ > 1 ? m2_ / static_cast<double>(count_ - 1) : kNaN; }
double Welford::stddev() const { return std::sqrt(variance()); }

double Median(std::span<const double> values) {
  if (values.empty()) return kNaN;
  std::vector<double> copy(values.begin(), values.end());
  const size_t mid = copy.size() / 2;
  std::nth_element(copy.begin(), copy.begin() + mid, copy.end());
  const double upper = copy[mid];
  if (copy.size() % 2) return upper;
  const double lower = *std::max_element(copy.begin(), copy.begin() + mid);
  return (lower + upper) / 2;
}

void RollingMedianMad::Add(double x) {
  values_.push_back(x);
  if (values_.size() > window_) values_.pop_front();
  median_known_ = mad_known_ = false;
}

double RollingMedianMad::Median() const {
  if (!median_known_) {
    std::vector<double> copy(values_.begin(), values_.end());
    median_ = trainscope::Median(copy);
    median_known_ = true;
  }
  return median_;
}

double RollingMedianMad::Mad() const {
  if (values_.empty()) return kNaN;
  if (!mad_known_) {
    const double median = Median();
    std::vector<double> deviations;
    deviations.reserve(values_.size());
    for (double v : values_) deviations.push_back(std::fabs(v - median));
    mad_ = trainscope::Median(deviations);
    mad_known_ = true;
  }
  return mad_;
}

double RollingMedianMad::RobustZ(double x) const {
  const double median = Median();
  const double scale = 1.4826 * Mad();
  const double diff = x - median;
  if (scale > 0) return diff / scale;
  if (diff == 0) return 0;
  return diff > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
}

SlopeFit RobustSlope(std::span<const double> x, std::span<const double> y, size_t max_points) {
  SlopeFit fit;
  const size_t n_all = std::min(x.size(), y.size());
  std::vector<double> xs, ys;
  const size_t stride = n_all > max_points && max_points > 0 ? (n_all + max_points - 1) / max_points : 1;
  for (size_t i = 0; i < n_all; i += stride) {
    if (std::isfinite(x[i]) && std::isfinite(y[i])) {
      xs.push_back(x[i]);
      ys.push_back(y[i]);
    }
  }
  const size_t n = xs.size();
  fit.points = n;
  if (n < 2) return fit;
  std::vector<double> slopes;
  slopes.reserve(n * (n - 1) / 2);
  long long concordance = 0;  // Mann-Kendall S: sum of sign(y_j - y_i) over i < j
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double dx = xs[j] - xs[i];
      const double dy = ys[j] - ys[i];
      if (dx != 0) slopes.push_back(dy / dx);
      concordance += (dy > 0) - (dy < 0);
    }
  }
  if (slopes.empty()) return fit;
  fit.slope = Median(slopes);
  std::vector<double> residuals(n);
  for (size_t i = 0; i < n; ++i) residuals[i] = ys[i] - fit.slope * xs[i];
  fit.intercept = Median(residuals);
  // Variance of S without tie correction; ties only make the test more conservative.
  const double nn = static_cast<double>(n);
  const double variance = nn * (nn - 1) * (2 * nn + 5) / 18.0;
  if (concordance > 0) fit.trend_z = (static_cast<double>(concordance) - 1) / std::sqrt(variance);
  else if (concordance < 0) fit.trend_z = (static_cast<double>(concordance) + 1) / std::sqrt(variance);
  return fit;
}

}  // namespace trainscope
