// The statistics of comparing one series across ranks (rank_stats.h): windows, levels,
// the Mann-Whitney share, stretches and the own-history test.
#include "doctor/rank_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/tag.h"

namespace trainscope::doctor::rank_stats {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// How far apart two levels are, as ln(larger / smaller) for values of one sign: the effect
// size, the same for 0.02 vs 0.04 as for 2 vs 4. Values of opposite signs or a zero are far
// apart in proportion to the smaller magnitude (log1p of the difference over it).
double Distance(double a, double b) {
  const double d = std::fabs(a - b);
  if (d == 0) return 0;
  const double smaller = std::min(std::fabs(a), std::fabs(b));
  if (smaller == 0) return kInf;
  return std::log1p(d / smaller);
}

// The share of pairs (a from `mine`, b from `theirs`) with a > b, ties counting half: the
// Mann-Whitney statistic over its maximum. Near 1 (or 0) when one sample lies above (below)
// the other whatever the tails: a heavy-tailed rank (one value 100x, the next 2x) is not
// hidden by its own standard error.
// `mine_sorted` is one rank's points, `all_sorted` every rank's (its own included), both
// sorted: the others' points below a value are all's minus mine's (n log n, not n^2).
double ShareAbove(const std::vector<double>& mine_sorted, const std::vector<double>& all_sorted) {
  const size_t theirs = all_sorted.size() - mine_sorted.size();
  if (mine_sorted.empty() || theirs == 0) return 0.5;
  double above = 0;
  for (double a : mine_sorted) {
    const auto [low, high] = std::equal_range(all_sorted.begin(), all_sorted.end(), a);
    const auto [own_low, own_high] = std::equal_range(mine_sorted.begin(), mine_sorted.end(), a);
    above += static_cast<double>((low - all_sorted.begin()) - (own_low - mine_sorted.begin())) +
             0.5 * static_cast<double>((high - low) - (own_high - own_low));
  }
  return above / (static_cast<double>(mine_sorted.size()) * static_cast<double>(theirs));
}

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2) return upper;
  return (*std::max_element(v.begin(), v.begin() + mid) + upper) / 2;
}

std::string RoleTag(const RunData& data, Role role) {
  RoleResolver roles;
  auto it = data.meta.find("roles");
  if (it != data.meta.end()) roles.SetExplicit(it->second);
  for (const ScalarSeries& s : data.scalars) roles.See(s.tag);
  return roles.Get(role);
}

std::vector<RankSeries> Collect(const std::vector<RankRun>& ranks, const std::string& tag) {
  std::vector<RankSeries> out;
  for (const RankRun& r : ranks) {
    const ScalarSeries* s = r.data ? r.data->FindScalar(tag) : nullptr;
    if (!s) continue;
    // Points by step, the last logged at a step winning (steps may repeat or go backwards).
    std::vector<size_t> order;
    for (size_t i = 0; i < s->steps.size(); ++i) {
      if (std::isfinite(s->values[i])) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [s](size_t a, size_t b) { return s->steps[a] < s->steps[b]; });
    RankSeries series{r.rank, {}, {}};
    for (size_t i : order) {
      if (!series.steps.empty() && series.steps.back() == s->steps[i]) {
        series.values.back() = s->values[i];
      } else {
        series.steps.push_back(s->steps[i]);
        series.values.push_back(s->values[i]);
      }
    }
    if (!series.steps.empty()) out.push_back(std::move(series));
  }
  return out;
}

std::vector<int64_t> SharedSteps(const std::vector<RankSeries>& series) {
  std::vector<int64_t> all;
  for (const RankSeries& s : series) all.insert(all.end(), s.steps.begin(), s.steps.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> steps;
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    if (all[i] == all[i + 1] && (steps.empty() || steps.back() != all[i])) steps.push_back(all[i]);
  }
  return steps;
}

Stretch LongestStretch(const std::vector<int>& direction, const std::vector<bool>& compared) {
  Stretch best, current;
  for (size_t i = 0; i < direction.size(); ++i) {
    if (compared[i]) ++best.compared;
    if (direction[i] != 0 && i > 0 && current.direction == direction[i] && current.end == i) {
      current.end = i + 1;
    } else if (direction[i] != 0) {
      current = {i, i + 1, direction[i], 0};
    }
    if (current.direction != 0 && current.length() > best.length()) {
      const size_t n = best.compared;
      best = current;
      best.compared = n;
    }
  }
  return best;
}

std::vector<Window> MakeWindows(const std::vector<RankSeries>& series, const std::vector<int64_t>& steps,
                                size_t window_steps, bool use_median) {
  std::vector<Window> windows;
  // steps.size() / window_steps windows of (nearly) equal size: the last steps are judged too.
  const size_t count = std::max<size_t>(1, steps.size() / window_steps);
  for (size_t k = 0; k < count; ++k) {
    const size_t begin = k * steps.size() / count, end = (k + 1) * steps.size() / count;
    Window w;
    w.first_step = steps[begin];
    w.last_step = steps[end - 1];
    for (const RankSeries& s : series) {
      std::vector<double> points;
      for (size_t i = s.LowerBound(w.first_step); i < s.steps.size() && s.steps[i] <= w.last_step; ++i) {
        points.push_back(s.values[i]);
      }
      double level = kNaN, se = kNaN;
      if (points.size() >= std::max<size_t>(2, (end - begin) / 2)) {
        double sum = 0;
        for (double v : points) sum += v;
        const double mean = sum / points.size();
        double ss = 0;
        for (double v : points) ss += (v - mean) * (v - mean);
        const double sd = std::sqrt(ss / (points.size() - 1));
        // The median's standard error is ~1.25x the mean's (normal noise).
        level = use_median ? Median(points) : mean;
        se = (use_median ? 1.2533 : 1.0) * sd / std::sqrt(static_cast<double>(points.size()));
      }
      w.level.push_back(level);
      w.se.push_back(se);
      if (std::isnan(level)) points.clear();
      std::sort(points.begin(), points.end());
      w.all_points.insert(w.all_points.end(), points.begin(), points.end());
      w.points.push_back(std::move(points));
    }
    std::sort(w.all_points.begin(), w.all_points.end());
    windows.push_back(std::move(w));
  }
  return windows;
}

LevelComparison CompareLevels(const std::vector<Window>& windows, size_t n_ranks, const LevelRule& rule) {
  LevelComparison c;
  c.direction.assign(n_ranks, std::vector<int>(windows.size(), 0));
  c.compared.assign(n_ranks, std::vector<bool>(windows.size(), false));
  c.reference.assign(n_ranks, std::vector<double>(windows.size(), kNaN));
  const double min_distance = std::log(rule.ratio);
  for (size_t w = 0; w < windows.size(); ++w) {
    for (size_t r = 0; r < n_ranks; ++r) {
      const double level = windows[w].level[r];
      if (std::isnan(level)) continue;
      std::vector<double> others, others_se;
      for (size_t q = 0; q < n_ranks; ++q) {
        if (q != r && !std::isnan(windows[w].level[q])) {
          others.push_back(windows[w].level[q]);
          others_se.push_back(windows[w].se[q]);
        }
      }
      if (others.empty()) continue;
      const double ref = Median(others);
      const double ref_se = Median(others_se);
      c.compared[r][w] = true;
      c.reference[r][w] = ref;
      const double difference = level - ref;
      const double noise = rule.z * std::sqrt(windows[w].se[r] * windows[w].se[r] + ref_se * ref_se);
      // Beyond the noise: the means differ by z standard errors, or (heavy tails) the rank's
      // points lie above / below nearly all of the other ranks' in the window.
      const double above = ShareAbove(windows[w].points[r], windows[w].all_points);
      const bool separated = difference > 0 ? above >= rule.share_above : above <= 1 - rule.share_above;
      if (Distance(level, ref) >= min_distance && (std::fabs(difference) > noise || separated) &&
          std::fabs(difference) >= rule.min_difference && (!rule.only_above || difference > 0)) {
        c.direction[r][w] = difference > 0 ? 1 : -1;
      }
    }
  }
  return c;
}

bool IsSustained(const Stretch& s, size_t min_length, double min_share) {
  return s.direction != 0 && s.length() >= min_length &&
         static_cast<double>(s.length()) >= min_share * static_cast<double>(s.compared);
}

int MovedAgainstOwnHistory(const std::vector<std::vector<double>>& levels, size_t onset, double ratio,
                           std::vector<double>* moves) {
  moves->assign(levels.size(), kNaN);
  if (onset == 0) return -1;
  for (size_t r = 0; r < levels.size(); ++r) {
    std::vector<double> before, after;
    for (size_t i = onset >= 3 ? onset - 3 : 0; i < onset; ++i) {
      if (!std::isnan(levels[r][i])) before.push_back(levels[r][i]);
    }
    for (size_t i = onset; i < onset + 2 && i < levels[r].size(); ++i) {
      if (!std::isnan(levels[r][i])) after.push_back(levels[r][i]);
    }
    if (before.empty() || after.empty()) return -1;
    bool positive = true;
    for (double v : before) positive = positive && v > 0;
    auto f = [&](double v) { return positive ? std::log(v) : v; };
    auto back = [&](double y) { return positive ? std::exp(y) : y; };
    double mean_x = (before.size() - 1) / 2.0, mean_y = 0, sxy = 0, sxx = 0;
    for (double v : before) mean_y += f(v) / before.size();
    for (size_t i = 0; i < before.size(); ++i) {
      sxy += (i - mean_x) * (f(before[i]) - mean_y);
      sxx += (i - mean_x) * (i - mean_x);
    }
    // A trend only where it is a ratio per window (positive levels); otherwise the level.
    const double slope = positive && sxx > 0 ? std::clamp(sxy / sxx, -std::log(2.0), std::log(2.0)) : 0;
    double miss = 0;
    for (size_t j = 0; j < after.size(); ++j) {
      const double predicted = back(mean_y + slope * (before.size() + j - mean_x));
      miss += Distance(after[j], predicted) / after.size();
    }
    (*moves)[r] = miss;
  }
  int best = -1;
  for (size_t r = 0; r < moves->size(); ++r) {
    if (best < 0 || (*moves)[r] > (*moves)[best]) best = static_cast<int>(r);
  }
  for (size_t r = 0; r < moves->size(); ++r) {
    if (static_cast<int>(r) != best && (*moves)[best] - (*moves)[r] < std::log(ratio)) return -1;
  }
  return best;
}

}  // namespace trainscope::doctor::rank_stats
