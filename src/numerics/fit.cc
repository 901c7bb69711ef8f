#include "numerics/fit.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

namespace trainscope::numerics {

void FitCounts::Add(const FitCounts& o) {
  numel += o.numel;
  nonfinite += o.nonfinite;
  zeros += o.zeros;
  overflow_min += o.overflow_min;
  overflow_max += o.overflow_max;
  underflow_min += o.underflow_min;
  underflow_max += o.underflow_max;
  subnormal_min += o.subnormal_min;
  subnormal_max += o.subnormal_max;
}

FitCounts FitStats(const TensorStats& stats, const FloatFormat& format, int scale_exponent) {
  FitCounts c;
  c.numel = stats.numel;
  c.nonfinite = stats.nan + stats.inf;
  c.zeros = stats.zeros;
  const double over = format.overflow_threshold;
  const double under = format.underflow_threshold;
  const double normal = format.normal_threshold;
  // abs_max is exact: it caps the top populated bin (inclusive), and alone proves that one
  // value overflows.
  const double abs_max = std::ldexp(stats.abs_max, scale_exponent);
  const bool have_max = stats.finite() > stats.zeros && std::isfinite(abs_max) && abs_max > 0;
  if (!stats.has_histogram) {
    if (have_max && abs_max >= over) c.overflow_min = c.overflow_max = 1;
    return c;
  }
  constexpr int kBins = TensorStats::kExponentBins;
  for (int i = 0; i < kBins; ++i) {
    const uint64_t n = stats.exponent_counts[i];
    if (n == 0) continue;
    const int e = i + TensorStats::kMinExponent + scale_exponent;
    // Bin 0 also holds everything below 2^kMinExponent; the last everything above.
    double lo = i == 0 ? 0.0 : std::ldexp(1.0, e);
    double hi = i == kBins - 1 ? std::numeric_limits<double>::infinity() : std::ldexp(1.0, e + 1);
    bool hi_inclusive = false;
    if (have_max && abs_max < hi && abs_max >= lo) {
      hi = abs_max;
      hi_inclusive = true;
    }
    // Overflow: x >= over.
    if (lo >= over) {
      c.overflow_min += n;
      c.overflow_max += n;
      continue;
    }
    if (hi > over || (hi_inclusive && hi >= over)) {
      c.overflow_max += n;
      if (hi_inclusive) c.overflow_min += 1;  // the largest value is past the threshold
    }
    // Underflow: x <= under rounds to zero. Edges are powers of two and so is `under`.
    if (hi <= under) {
      c.underflow_min += n;
      c.underflow_max += n;
      continue;
    }
    if (lo < under) c.underflow_max += n;  // bin 0 straddling a threshold below 2^-63
    // Subnormal: under < x < normal.
    const bool inside = lo >= under && (hi_inclusive ? hi < normal : hi <= normal);
    if (inside) {
      c.subnormal_min += n;
      c.subnormal_max += n;
    } else if (lo < normal && hi > under) {
      c.subnormal_max += n;
    }
  }
  return c;
}

void SplitTag(const std::string& tag, std::string* family, std::string* layer) {
  const size_t slash = tag.find('/');
  if (slash == std::string::npos) {
    family->clear();
    *layer = tag;
    return;
  }
  *family = tag.substr(0, slash);
  *layer = tag.substr(slash + 1);
}

TensorFitAccumulator::TensorFitAccumulator(std::string tag, const FloatFormat* format, int scale_exponent)
    : format_(format) {
  fit_.tag = std::move(tag);
  SplitTag(fit_.tag, &fit_.family, &fit_.layer);
  fit_.scale_exponent = scale_exponent;
}

void TensorFitAccumulator::Add(int64_t step, const TensorStats& stats) {
  TensorFit& f = fit_;
  ++f.points_all;
  const double scaled_max = std::ldexp(stats.abs_max, f.scale_exponent);
  if (stats.finite() > stats.zeros && std::isfinite(scaled_max)) {
    if (scaled_max > f.abs_max) {
      f.abs_max = scaled_max;
      f.abs_max_step = step;
    }
    if (scaled_max >= format_->overflow_threshold) {
      ++f.overflow_points;
      if (f.first_overflow_step < 0) f.first_overflow_step = step;
    }
  }
  if (!stats.has_histogram) return;
  const FitCounts c = FitStats(stats, *format_, f.scale_exponent);
  if (f.points == 0) f.step_first = step;
  f.step_first = std::min(f.step_first, step);
  f.step_last = f.points == 0 ? step : std::max(f.step_last, step);
  ++f.points;
  f.counts.Add(c);
  const double lost = c.lost();
  if (f.points == 1 || lost > f.worst_lost) {
    f.worst_lost = lost;
    f.worst_step = step;
  }
}

namespace {

bool WantedFamily(const std::string& family, const std::vector<std::string>& families) {
  static const std::vector<std::string> kDefault = {"grad", "weight", "update", "act", "input"};
  const auto& list = families.empty() ? kDefault : families;
  return std::find(list.begin(), list.end(), family) != list.end();
}

}  // namespace

std::vector<TensorFit> FitRun(const RunData& run, const FloatFormat& format, const FitOptions& options) {
  std::vector<TensorFit> out;
  for (const TensorStatsSeries& series : run.tensor_stats) {
    std::string family, layer;
    SplitTag(series.tag, &family, &layer);
    if (!WantedFamily(family, options.families)) continue;
    TensorFitAccumulator acc(series.tag, &format, family == "grad" ? options.grad_scale_exponent : 0);
    for (size_t i = 0; i < series.steps.size(); ++i) {
      const int64_t step = series.steps[i];
      if (step < options.step_min || step > options.step_max) continue;
      acc.Add(step, series.stats[i]);
    }
    if (acc.fit().points > 0) out.push_back(acc.fit());
  }
  std::stable_sort(out.begin(), out.end(), [](const TensorFit& a, const TensorFit& b) {
    const double la = a.counts.lost(), lb = b.counts.lost();
    if (la != lb) return la > lb;
    const double sa = a.counts.Fraction(a.counts.subnormal_max), sb = b.counts.Fraction(b.counts.subnormal_max);
    if (sa != sb) return sa > sb;
    return a.tag < b.tag;
  });
  return out;
}

LossScaleAdvice RecommendLossScale(const std::vector<const TensorStatsSeries*>& grads, const FloatFormat& format,
                                   int64_t step_min, int64_t step_max, int headroom_binades) {
  // Each tag's histogram points summed, and the largest gradient over every point,
  // histogram or not.
  std::vector<MergedGradient> merged;
  double abs_max = 0;
  std::string abs_max_tag;
  int64_t abs_max_step = 0;
  for (const TensorStatsSeries* series : grads) {
    MergedGradient m{series->tag, {}};
    bool any = false;
    for (size_t i = 0; i < series->steps.size(); ++i) {
      const int64_t step = series->steps[i];
      if (step < step_min || step > step_max) continue;
      const TensorStats s = series->stats[i];
      if (s.finite() > s.zeros && std::isfinite(s.abs_max) && s.abs_max > abs_max) {
        abs_max = s.abs_max;
        abs_max_tag = series->tag;
        abs_max_step = step;
      }
      if (!s.has_histogram) continue;
      MergeTensorStats(m.merged, s);
      any = true;
    }
    if (any) merged.push_back(std::move(m));
  }
  return RecommendLossScaleMerged(merged, abs_max, abs_max_tag, abs_max_step, format, headroom_binades);
}

LossScaleAdvice RecommendLossScaleMerged(const std::vector<MergedGradient>& grads, double abs_max,
                                         const std::string& abs_max_tag, int64_t abs_max_step,
                                         const FloatFormat& format, int headroom_binades) {
  LossScaleAdvice advice;
  advice.abs_max = abs_max;
  advice.abs_max_tag = abs_max_tag;
  advice.abs_max_step = abs_max_step;
  if (grads.empty()) return advice;
  TensorStats all;
  double worst = -1;
  for (const MergedGradient& g : grads) {
    const FitCounts c = FitStats(g.merged, format, 0);
    const double u = c.Fraction(c.underflow_max);
    if (u > worst) {
      worst = u;
      advice.worst_tag = g.tag;
      advice.worst_tag_underflow = u;
    }
    MergeTensorStats(all, g.merged);
  }
  advice.valid = true;
  all.abs_max = std::max(all.abs_max, abs_max);
  advice.abs_max = all.abs_max;
  advice.at_one = FitStats(all, format, 0);
  // k_high: abs_max * 2^(k + headroom) below the overflow threshold.
  int k_high = 0;
  if (advice.abs_max > 0) {
    k_high = static_cast<int>(std::floor(std::log2(format.overflow_threshold / advice.abs_max))) - headroom_binades;
    while (std::ldexp(advice.abs_max, k_high + headroom_binades) >= format.overflow_threshold) --k_high;
    while (std::ldexp(advice.abs_max, k_high + 1 + headroom_binades) < format.overflow_threshold) ++k_high;
  }
  k_high = std::clamp(k_high, -126, 126);
  const uint64_t best = FitStats(all, format, k_high).underflow_max;
  int k_low = k_high;
  // Underflow only falls as k grows: walk down while it stays at its best.
  const int floor_k = std::min(0, k_high);
  while (k_low - 1 >= floor_k && FitStats(all, format, k_low - 1).underflow_max <= best) --k_low;
  advice.k_high = k_high;
  advice.k_low = k_low;
  advice.k_recommended = k_low + (k_high - k_low + 1) / 2;
  advice.at_recommended = FitStats(all, format, advice.k_recommended);
  return advice;
}

int DelayedScaleExponent(double amax_ref, const FloatFormat& format) {
  if (!(amax_ref > 0) || !std::isfinite(amax_ref)) return 0;
  int k = static_cast<int>(std::floor(std::log2(format.max_finite / amax_ref)));
  while (std::ldexp(amax_ref, k) > format.max_finite) --k;  // log2 rounding at the edges
  while (std::ldexp(amax_ref, k + 1) <= format.max_finite) ++k;
  return std::clamp(k, -200, 200);
}

DelayedScalingFit FitDelayedScaling(const TensorStatsSeries& series, const FloatFormat& format, int history,
                                    int64_t step_min, int64_t step_max) {
  DelayedScalingFit fit;
  fit.tag = series.tag;
  SplitTag(series.tag, &fit.family, &fit.layer);
  fit.format = format.name();
  fit.history = std::max(1, history);
  std::vector<double> window;  // abs_max of the previous points, oldest first
  for (size_t i = 0; i < series.steps.size(); ++i) {
    const int64_t step = series.steps[i];
    if (step < step_min || step > step_max) continue;
    const TensorStats s = series.stats[i];
    const double amax = s.finite() > s.zeros && std::isfinite(s.abs_max) ? s.abs_max : 0.0;
    double reference = amax;
    if (!window.empty()) reference = *std::max_element(window.begin(), window.end());
    const int k = DelayedScaleExponent(reference > 0 ? reference : amax, format);
    if (fit.points == 0) fit.step_first = step;
    fit.step_last = step;
    ++fit.points;
    fit.last_scale_exponent = k;
    if (amax > 0 && std::ldexp(amax, k) >= format.overflow_threshold) {
      ++fit.overflow_points;
      if (fit.first_overflow_step < 0) fit.first_overflow_step = step;
    }
    if (s.has_histogram) {
      const FitCounts c = FitStats(s, format, k);
      fit.counts.Add(c);
      if (fit.histogram_points == 0 || c.lost() > fit.worst_lost) {
        fit.worst_lost = c.lost();
        fit.worst_step = step;
      }
      ++fit.histogram_points;
    }
    if (amax > 0) window.push_back(amax);
    if (static_cast<int>(window.size()) > fit.history) window.erase(window.begin());
  }
  fit.amax_history = window;
  // The scale the next step would use: from the history as it stands.
  if (!window.empty()) fit.last_scale_exponent = DelayedScaleExponent(*std::max_element(window.begin(), window.end()), format);
  return fit;
}

}  // namespace trainscope::numerics
