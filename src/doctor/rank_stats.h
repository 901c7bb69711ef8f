// The statistics of comparing one series across the ranks of a data-parallel run: each
// rank's points, the steps they share, windows with each rank's level there, the level
// rule's per-window directions, stretches of windows out the same way, and which rank moved
// against its own history.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "doctor/detector.h"
#include "doctor/ranks.h"
#include "doctor/roles.h"

namespace trainscope::doctor::rank_stats {

// One rank's points of one series: the last finite value at each step, by step.
struct RankSeries {
  int rank = 0;
  std::vector<int64_t> steps;
  std::vector<double> values;
  // Index of the first point at or after `step`.
  size_t LowerBound(int64_t step) const {
    return static_cast<size_t>(std::lower_bound(steps.begin(), steps.end(), step) - steps.begin());
  }
  // The value at `step`, or NaN.
  double At(int64_t step) const {
    const size_t i = LowerBound(step);
    return i < steps.size() && steps[i] == step ? values[i] : kNaN;
  }
};

double Median(std::vector<double> v);

std::string RoleTag(const RunData& data, Role role);

// The series `tag` of every rank that has it (non-finite points are left to each rank's own
// non-finite detectors).
std::vector<RankSeries> Collect(const std::vector<RankRun>& ranks, const std::string& tag);

// Steps where at least two ranks have a point, in order.
std::vector<int64_t> SharedSteps(const std::vector<RankSeries>& series);

// A stretch of consecutive windows (or steps) in which one rank is out the same way.
struct Stretch {
  size_t begin = 0, end = 0;  // [begin, end) in windows / shared steps
  int direction = 0;          // +1 above the others, -1 below
  size_t compared = 0;        // windows / steps in which the rank was compared at all
  size_t length() const { return end - begin; }
};

// The longest run of equal non-zero directions (0 breaks a run; so does a window in which
// the rank was not compared, marked by `compared[i] == false`).
Stretch LongestStretch(const std::vector<int>& direction, const std::vector<bool>& compared);

struct Window {
  int64_t first_step = 0, last_step = 0;
  std::vector<double> level, se;  // per rank index; NaN where the rank has too few points
  std::vector<std::vector<double>> points;  // per rank index, sorted
  std::vector<double> all_points;           // every rank's, sorted
};

// Cuts the shared steps into windows and computes each rank's level there: the mean (or the
// median) of its points with the standard error of that estimate.
std::vector<Window> MakeWindows(const std::vector<RankSeries>& series, const std::vector<int64_t>& steps,
                                size_t window_steps, bool use_median);

struct LevelRule {
  double ratio = 2;
  double z = 4;
  double share_above = 0.8;   // or (1 - it): the rank's points lie beyond the others'
  double min_difference = 0;  // absolute, in the series' unit
  bool only_above = false;    // STRAGGLER: slower only
  bool use_median = false;
};

// For each rank index: +1 / -1 / 0 per window, against the median of the other ranks.
struct LevelComparison {
  std::vector<std::vector<int>> direction;
  std::vector<std::vector<bool>> compared;
  std::vector<std::vector<double>> reference;
};

LevelComparison CompareLevels(const std::vector<Window>& windows, size_t n_ranks, const LevelRule& rule);

bool IsSustained(const Stretch& s, size_t min_length, double min_share);

// With 2 ranks (or a split), which rank moved at `onset` against its own history: each
// rank's levels at windows onset and onset + 1 are predicted from its own last (up to 3)
// windows before, with their trend (a loss still falling keeps falling; in log for positive
// levels, at most 2x per window, so two noisy windows do not extrapolate wildly). The rank
// whose levels miss its prediction by more than every other rank's by at least ln(ratio) is
// the one that moved; -1 when none does or there is nothing before.
int MovedAgainstOwnHistory(const std::vector<std::vector<double>>& levels, size_t onset, double ratio,
                           std::vector<double>* moves);

}  // namespace trainscope::doctor::rank_stats
