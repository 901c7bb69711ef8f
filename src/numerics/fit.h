// What fits where: from a recorded exponent histogram (a count per power of two of |x|,
// core/sample.h), the share of a tensor's values that would overflow, flush to zero or
// land in the subnormals if the tensor were cast to a format, optionally after scaling it
// by 2^k (a loss scale on gradients, a per-tensor FP8 scale).
//
// Bins and format boundaries (docs/numerics.md). Bin e holds [2^e, 2^(e+1)); scaling by
// 2^k moves every edge by k, exactly. A cast rounds to nearest, ties to even, so:
//   - underflow: |x| <= min_subnormal / 2 rounds to 0. That threshold is a power of two,
//     i.e. a bin edge: the count is exact (a value exactly on it, a tie, is the only one
//     not told apart). Only bin 0, which also holds everything below 2^-64, can straddle it
//     (formats whose subnormals lie below 2^-63: FP32, BF16, TF32, FP64).
//   - overflow: |x| >= max + ulp(max)/2 leaves the range (65520 for FP16, 464 for E4M3).
//     That threshold falls inside a bin ([2^15, 2^16) for FP16). A straddling bin is
//     apportioned conservatively: all of it counts in the upper bound, and in the lower
//     bound only the largest value when the recorded abs_max is past the threshold (abs_max
//     is exact and caps the top populated bin). So the lower bound is what is certain, the
//     upper bound what may happen, and the true count lies between them.
//   - subnormal: min_subnormal / 2 < |x| < min_normal - min_subnormal / 2 rounds to a
//     subnormal; the top edge lies inside the bin below min_normal: same apportioning.
// Fractions are of all values (zeros and non-finite values included in the denominator,
// never in a numerator: they are what they were before the cast).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/run_data.h"
#include "core/sample.h"
#include "numerics/formats.h"

namespace trainscope::numerics {

struct FitCounts {
  uint64_t numel = 0;
  uint64_t nonfinite = 0;  // NaN/Inf already in the tensor
  uint64_t zeros = 0;      // zeros already in the tensor
  uint64_t overflow_min = 0, overflow_max = 0;
  uint64_t underflow_min = 0, underflow_max = 0;
  uint64_t subnormal_min = 0, subnormal_max = 0;

  void Add(const FitCounts& other);
  double Fraction(uint64_t count) const { return numel ? static_cast<double>(count) / static_cast<double>(numel) : 0.0; }
  // Lost: overflowed or flushed to zero (upper bounds).
  double lost() const { return Fraction(overflow_max + underflow_max); }
};

// The counts for one tensor's statistics cast to `format` after multiplying by
// 2^scale_exponent. Needs the histogram (stats.has_histogram); without it only numel,
// zeros, nonfinite and what abs_max alone proves (one value overflows) are set.
FitCounts FitStats(const TensorStats& stats, const FloatFormat& format, int scale_exponent = 0);

// "grad/fc.weight" -> family "grad", layer "fc.weight"; tags without a '/' have family "".
void SplitTag(const std::string& tag, std::string* family, std::string* layer);

// One tensor's fit over a step range.
struct TensorFit {
  std::string tag, family, layer;
  int scale_exponent = 0;      // 2^k applied before the cast
  int64_t step_first = 0, step_last = 0;  // the histogram points counted
  size_t points = 0;           // histogram points counted
  size_t points_all = 0;       // points of any kind in the range (abs_max is in each)
  FitCounts counts;            // summed over the histogram points
  double abs_max = 0;          // over every point in the range (scaled)
  int64_t abs_max_step = 0;
  // Points (any kind) whose scaled abs_max is past the overflow threshold, and the first.
  size_t overflow_points = 0;
  int64_t first_overflow_step = -1;
  // The histogram point that loses the most (upper bound), and that share.
  int64_t worst_step = 0;
  double worst_lost = 0;
};

// Accumulates one tag's points (step order) for one format and scale.
class TensorFitAccumulator {
 public:
  TensorFitAccumulator(std::string tag, const FloatFormat* format, int scale_exponent);
  void Add(int64_t step, const TensorStats& stats);
  const TensorFit& fit() const { return fit_; }

 private:
  const FloatFormat* format_;
  TensorFit fit_;
};

struct FitOptions {
  int grad_scale_exponent = 0;  // loss scale 2^k, applied to grad/ tags only
  int64_t step_min = INT64_MIN, step_max = INT64_MAX;
  std::vector<std::string> families;  // empty: grad, weight, update, act, input
};

// Every tensor-stats series of the run with histogram points in the range, worst first:
// by lost share (upper bound), then subnormal share, then tag.
std::vector<TensorFit> FitRun(const RunData& run, const FloatFormat& format, const FitOptions& options);

// A static loss scale 2^k for gradients in `format` (docs/numerics.md):
//   k_high: the largest k whose scaled largest gradient (over every recorded point) stays
//           below the overflow threshold with `headroom_binades` to spare;
//   k_low:  the smallest k <= k_high that flushes no more than k_high does (usually none);
//   recommended: the middle of [k_low, k_high], rounded up: room both for gradients that
//           shrink (underflow) and that grow (overflow) later in training.
struct LossScaleAdvice {
  bool valid = false;  // some gradient histogram was there
  int k_low = 0, k_high = 0, k_recommended = 0;
  double abs_max = 0;  // the largest gradient, unscaled
  std::string abs_max_tag;
  int64_t abs_max_step = 0;
  FitCounts at_one, at_recommended;  // all gradient histograms, unscaled and scaled by 2^k
  std::string worst_tag;              // the gradient losing the most at scale 1
  double worst_tag_underflow = 0;
};
LossScaleAdvice RecommendLossScale(const std::vector<const TensorStatsSeries*>& grads, const FloatFormat& format,
                                   int64_t step_min = INT64_MIN, int64_t step_max = INT64_MAX,
                                   int headroom_binades = 1);
// The same from gradients already merged per tag (each tag's histogram points summed) and
// the largest gradient over every point: what a streaming caller (the doctor) keeps.
struct MergedGradient {
  std::string tag;
  TensorStats merged;  // histogram points only
};
LossScaleAdvice RecommendLossScaleMerged(const std::vector<MergedGradient>& grads, double abs_max,
                                         const std::string& abs_max_tag, int64_t abs_max_step,
                                         const FloatFormat& format, int headroom_binades = 1);

// FP8 with per-tensor delayed scaling (Transformer Engine's recipe, with the scale rounded
// down to a power of two so bins shift exactly): at each point the scale is 2^k with
// k = floor(log2(max_finite / amax_ref)), amax_ref the largest abs_max of the previous
// `history` points (the point's own at the first). A tensor whose amax grows past its
// history overflows; one whose range exceeds the format's flushes its small values.
struct DelayedScalingFit {
  std::string tag, family, layer, format;
  int history = 0;
  size_t points = 0, histogram_points = 0;
  int64_t step_first = 0, step_last = 0;
  int last_scale_exponent = 0;       // the scale the next step would use (from amax_history)
  std::vector<double> amax_history;  // the last `history` abs_max values (oldest first)
  FitCounts counts;                  // histogram points, each at its own delayed scale
  size_t overflow_points = 0;        // points whose amax outgrew the delayed scale
  int64_t first_overflow_step = -1;
  int64_t worst_step = 0;
  double worst_lost = 0;
};
DelayedScalingFit FitDelayedScaling(const TensorStatsSeries& series, const FloatFormat& format, int history,
                                    int64_t step_min = INT64_MIN, int64_t step_max = INT64_MAX);
// The delayed-scaling exponent for a reference amax (0 when amax_ref is 0 or not finite).
int DelayedScaleExponent(double amax_ref, const FloatFormat& format);

}  // namespace trainscope::numerics
