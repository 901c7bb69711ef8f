#include "doctor/ranks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/tag.h"
#include "doctor/detector.h"
#include "doctor/knowledge.h"
#include "doctor/roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

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

double Median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2) return upper;
  return (*std::max_element(v.begin(), v.begin() + mid) + upper) / 2;
}

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

std::string RoleTag(const RunData& data, Role role) {
  RoleResolver roles;
  auto it = data.meta.find("roles");
  if (it != data.meta.end()) roles.SetExplicit(it->second);
  for (const ScalarSeries& s : data.scalars) roles.See(s.tag);
  return roles.Get(role);
}

// The series `tag` of every rank that has it (non-finite points are left to each rank's own
// non-finite detectors).
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

// Steps where at least two ranks have a point, in order.
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

// A stretch of consecutive windows (or steps) in which one rank is out the same way.
struct Stretch {
  size_t begin = 0, end = 0;  // [begin, end) in windows / shared steps
  int direction = 0;          // +1 above the others, -1 below
  size_t compared = 0;        // windows / steps in which the rank was compared at all
  size_t length() const { return end - begin; }
};

// The longest run of equal non-zero directions (0 breaks a run; so does a window in which
// the rank was not compared, marked by `compared[i] == false`).
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

struct Window {
  int64_t first_step = 0, last_step = 0;
  std::vector<double> level, se;  // per rank index; NaN where the rank has too few points
  std::vector<std::vector<double>> points;  // per rank index, sorted
  std::vector<double> all_points;           // every rank's, sorted
};

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

// Cuts the shared steps into windows and computes each rank's level there: the mean (or the
// median) of its points with the standard error of that estimate.
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

// With 2 ranks (or a split), which rank moved at `onset` against its own history: each
// rank's levels at windows onset and onset + 1 are predicted from its own last (up to 3)
// windows before, with their trend (a loss still falling keeps falling; in log for positive
// levels, at most 2x per window, so two noisy windows do not extrapolate wildly). The rank
// whose levels miss its prediction by more than every other rank's by at least ln(ratio) is
// the one that moved; -1 when none does or there is nothing before.
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

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

json RankLevels(const std::vector<RankSeries>& series, const std::vector<Window>& windows, size_t begin, size_t end) {
  json levels = json::object();
  for (size_t r = 0; r < series.size(); ++r) {
    std::vector<double> v;
    for (size_t w = begin; w < end; ++w) {
      if (!std::isnan(windows[w].level[r])) v.push_back(windows[w].level[r]);
    }
    levels[std::to_string(series[r].rank)] = Num(Median(v));
  }
  return levels;
}

void FillActions(RankFinding* f) {
  RankCauses(&f->finding.causes);
  f->finding.actions = KnowledgeBase::Builtin().ActionsFor(f->finding);
}

// What the level rule says about one series: findings for the ranks out for a sustained
// stretch. `what` names the quantity in summaries ("loss", "gradient norm").
std::vector<RankFinding> JudgeLevels(const std::vector<RankSeries>& series, const std::string& tag,
                                     const std::string& code, const std::string& what, const LevelRule& rule,
                                     const RankOptions& options) {
  std::vector<RankFinding> out;
  if (series.size() < 2) return out;
  const std::vector<int64_t> steps = SharedSteps(series);
  const size_t window_steps = options.window_steps > 0
                                  ? static_cast<size_t>(options.window_steps)
                                  : std::clamp<size_t>(steps.size() / 16, 8, 50);
  if (steps.size() < window_steps * static_cast<size_t>(options.min_windows)) return out;
  const std::vector<Window> windows = MakeWindows(series, steps, window_steps, rule.use_median);
  const LevelComparison c = CompareLevels(windows, series.size(), rule);

  std::vector<size_t> flagged;
  std::vector<Stretch> stretches(series.size());
  for (size_t r = 0; r < series.size(); ++r) {
    stretches[r] = LongestStretch(c.direction[r], c.compared[r]);
    if (IsSustained(stretches[r], options.min_windows, options.min_stretch_share)) flagged.push_back(r);
  }
  if (flagged.empty()) return out;

  std::vector<std::vector<double>> levels(series.size());
  for (size_t r = 0; r < series.size(); ++r) {
    for (const Window& w : windows) levels[r].push_back(w.level[r]);
  }
  auto make = [&](int named_index, const std::vector<int>& ranks, const Stretch& s, const std::string& reference) {
    RankFinding f;
    f.rank = named_index >= 0 ? series[named_index].rank : -1;
    f.ranks = ranks;
    Finding& finding = f.finding;
    finding.code = code;
    finding.severity = Severity::kWarning;
    finding.step = windows[s.begin].first_step;
    finding.last_step = windows[s.end - 1].last_step;
    finding.location = tag;
    json evidence = {{"rank", f.rank >= 0 ? json(f.rank) : json(nullptr)},
                     {"ranks", ranks},
                     {"tag", tag},
                     {"rule", rule.use_median ? "window medians" : "window means"},
                     {"reference", reference},
                     {"window_steps", window_steps},
                     {"windows_out", s.length()},
                     {"windows_compared", s.compared},
                     {"level_ratio", rule.ratio},
                     {"rank_levels", RankLevels(series, windows, s.begin, s.end)}};
    if (named_index >= 0) {
      std::vector<double> ratios;
      for (size_t w = s.begin; w < s.end; ++w) {
        if (c.reference[named_index][w] != 0) ratios.push_back(windows[w].level[named_index] / c.reference[named_index][w]);
      }
      const double ratio = Median(ratios);
      evidence["ratio_to_others"] = Num(ratio);
      finding.summary = "rank " + std::to_string(f.rank) + "'s " + what + " is " + FormatNumber(ratio, 3) +
                        "x the other ranks' over steps " + std::to_string(finding.step) + "-" +
                        std::to_string(finding.last_step) + " (" + std::to_string(s.length()) + " windows of " +
                        std::to_string(window_steps) + " steps" +
                        (reference == "own history"
                             ? "; no majority to compare with: named because its own level moved there and the "
                               "others' did not"
                             : "") +
                        ")";
    } else {
      finding.summary = "ranks " + RankList(ranks) + " disagree on the " + what + " over steps " +
                        std::to_string(finding.step) + "-" + std::to_string(finding.last_step) + " (" +
                        std::to_string(s.length()) + " windows of " + std::to_string(window_steps) + " steps)" +
                        (ranks.size() == 2 && series.size() == 2
                             ? "; with 2 ranks neither is the majority and neither moved against its own history: "
                               "compare both"
                             : ": the ranks split into groups, none is the odd one out");
    }
    finding.evidence_json = evidence.dump();
    return f;
  };

  const std::string against_others = "median of the other ranks";
  // Slower-only rules are directional: of 2 ranks only the slower can be out, so it is named
  // (all ranks slower than each other cannot happen; nothing is said then).
  if (rule.only_above) {
    if (flagged.size() < series.size()) {
      for (size_t r : flagged) out.push_back(make(static_cast<int>(r), {series[r].rank}, stretches[r], against_others));
    }
    return out;
  }
  // 3+ ranks: the ranks out in one direction, if fewer than half, are each the odd one out
  // against the others' median. Half or more out the same way is a split.
  if (series.size() >= 3) {
    std::vector<size_t> split;
    for (int direction : {1, -1}) {
      std::vector<size_t> group;
      for (size_t r : flagged) {
        if (stretches[r].direction == direction) group.push_back(r);
      }
      if (group.size() * 2 < series.size()) {
        for (size_t r : group) out.push_back(make(static_cast<int>(r), {series[r].rank}, stretches[r], against_others));
      } else {
        split.insert(split.end(), group.begin(), group.end());
      }
    }
    if (split.empty()) return out;
    flagged = split;
  }
  // 2 ranks, or a split: the rank that moved against its own history at the onset, if one did.
  size_t first = flagged.front();
  for (size_t r : flagged) {
    if (stretches[r].begin < stretches[first].begin) first = r;
  }
  std::vector<double> moves;
  const int moved = MovedAgainstOwnHistory(levels, stretches[first].begin, rule.ratio, &moves);
  std::vector<int> ranks;
  for (size_t r : flagged) ranks.push_back(series[r].rank);
  std::sort(ranks.begin(), ranks.end());
  if (moved >= 0 && std::find(flagged.begin(), flagged.end(), static_cast<size_t>(moved)) != flagged.end()) {
    RankFinding f = make(moved, {series[moved].rank}, stretches[moved], "own history");
    json evidence = json::parse(f.finding.evidence_json);
    json own = json::object();
    for (size_t r = 0; r < series.size(); ++r) own[std::to_string(series[r].rank)] = Num(moves[r]);
    evidence["moved_at_onset"] = own;  // ln(after / before) of each rank's own level
    f.finding.evidence_json = evidence.dump();
    out.push_back(std::move(f));
    return out;
  }
  out.push_back(make(-1, ranks, stretches[first], "none"));
  return out;
}

// The exact rule for a series equal across ranks by construction. Returns true when the
// series is replicated (then the level rule is not needed for it).
bool JudgeReplicated(const std::vector<RankSeries>& series, const std::string& tag, const RankOptions& options,
                     std::vector<RankFinding>* out) {
  if (series.size() < 2) return false;
  const std::vector<int64_t> steps = SharedSteps(series);
  if (steps.size() < 10) return false;
  const size_t n = series.size();
  auto same = [&](double a, double b) {
    return std::fabs(a - b) <= options.replicated_tolerance * std::max(std::fabs(a), std::fabs(b));
  };
  // Per step: the value most ranks share (a majority of at least 2), and who departs from it.
  std::vector<std::vector<int>> departs(n, std::vector<int>(steps.size(), 0));
  std::vector<std::vector<bool>> compared(n, std::vector<bool>(steps.size(), false));
  std::vector<std::vector<double>> values(n, std::vector<double>(steps.size(), kNaN));
  size_t agreeing_steps = 0, leading_agreement = 0;
  bool leading = true;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::vector<size_t> present;
    for (size_t r = 0; r < n; ++r) {
      const double v = series[r].At(steps[i]);
      if (!std::isnan(v)) present.push_back(r), values[r][i] = v;
    }
    // A value more than half of the ranks share holds the middle of the sorted values.
    std::vector<double> sorted;
    for (size_t r : present) sorted.push_back(values[r][i]);
    std::sort(sorted.begin(), sorted.end());
    const double best_value = sorted[(sorted.size() - 1) / 2];
    size_t best_count = 0;
    for (double v : sorted) best_count += same(v, best_value);
    const bool majority = best_count >= 2 && best_count * 2 > present.size();
    agreeing_steps += best_count >= 2;
    leading = leading && best_count == present.size();
    leading_agreement += leading;
    for (size_t r : present) {
      compared[r][i] = true;
      if (majority) {
        const double v = values[r][i];
        if (std::fabs(v - best_value) > options.departure_tolerance * std::max(std::fabs(v), std::fabs(best_value))) {
          departs[r][i] = 1;
        }
      } else if (present.size() == 2) {
        departs[r][i] = 1;  // two ranks apart: both depart; who is the odd one is decided below
      }
    }
  }
  const bool replicated = static_cast<double>(agreeing_steps) >= options.replicated_share * steps.size() ||
                          leading_agreement >= 10;
  if (!replicated) return false;

  std::vector<size_t> flagged;
  std::vector<Stretch> stretches(n);
  for (size_t r = 0; r < n; ++r) {
    stretches[r] = LongestStretch(departs[r], compared[r]);
    if (IsSustained(stretches[r], options.min_departure_steps, options.min_departure_share)) flagged.push_back(r);
  }
  if (flagged.empty()) return true;

  auto make = [&](int index, const std::vector<int>& ranks, const Stretch& s, const std::string& reference) {
    RankFinding f;
    f.rank = index >= 0 ? series[index].rank : -1;
    f.ranks = ranks;
    Finding& finding = f.finding;
    finding.code = "RANK_DIVERGENCE";
    finding.step = steps[s.begin];
    finding.last_step = steps[s.end - 1];
    finding.location = tag;
    json levels = json::object();
    for (size_t r = 0; r < n; ++r) {
      std::vector<double> v;
      for (size_t i = s.begin; i < s.end; ++i) {
        if (!std::isnan(values[r][i])) v.push_back(values[r][i]);
      }
      levels[std::to_string(series[r].rank)] = Num(Median(v));
    }
    json evidence = {{"rank", f.rank >= 0 ? json(f.rank) : json(nullptr)},
                     {"ranks", ranks},
                     {"tag", tag},
                     {"rule", "equal across ranks by construction (all-reduced)"},
                     {"reference", reference},
                     {"steps_apart", s.length()},
                     {"steps_compared", s.compared},
                     {"rank_levels", levels}};
    const std::string range = std::to_string(finding.step) + "-" + std::to_string(finding.last_step);
    if (f.rank >= 0) {
      finding.summary = "rank " + std::to_string(f.rank) + "'s " + tag +
                        " leaves the value the other ranks share (all-reduced gradients are equal on every rank) at " +
                        std::to_string(s.length()) + " steps in a row, " + range;
    } else {
      finding.summary = "ranks " + RankList(ranks) + " stop agreeing on " + tag + " (equal on every rank when "
                        "gradients are all-reduced) at steps " + range +
                        "; with 2 ranks neither is the majority and neither moved against its own history";
    }
    finding.evidence_json = evidence.dump();
    RaiseCause(&finding.causes, "rank_desync", 0.7);
    FillActions(&f);
    return f;
  };

  if (n >= 3) {
    for (size_t r : flagged) out->push_back(make(static_cast<int>(r), {series[r].rank}, stretches[r], "the value the other ranks share"));
    return true;
  }
  // 2 ranks: the one whose value moved against its own preceding steps when they parted:
  // the same test as for levels, on blocks of `span` steps, the onset starting a block.
  const size_t onset = std::min(stretches[0].begin, stretches[1].begin);
  const size_t span = std::clamp<size_t>(steps.size() / 16, 4, 50);
  const size_t blocks_before = std::min<size_t>(3, onset / span);
  std::vector<std::vector<double>> levels(2);
  for (size_t r = 0; r < 2; ++r) {
    auto mean_of = [&](size_t from, size_t to) {
      double sum = 0;
      int count = 0;
      for (size_t i = from; i < to && i < steps.size(); ++i) {
        if (!std::isnan(values[r][i])) sum += values[r][i], ++count;
      }
      return count ? sum / count : kNaN;
    };
    for (size_t k = blocks_before; k >= 1; --k) levels[r].push_back(mean_of(onset - k * span, onset - (k - 1) * span));
    for (size_t k = 0; k < 2; ++k) levels[r].push_back(mean_of(onset + k * span, onset + (k + 1) * span));
  }
  std::vector<double> moves;
  const int moved = blocks_before > 0 ? MovedAgainstOwnHistory(levels, blocks_before, 2.0, &moves) : -1;
  std::vector<int> ranks = {series[0].rank, series[1].rank};
  std::sort(ranks.begin(), ranks.end());
  if (moved >= 0) {
    out->push_back(make(moved, {series[moved].rank}, stretches[moved], "own history"));
  } else {
    out->push_back(make(-1, ranks, stretches[0].length() >= stretches[1].length() ? stretches[0] : stretches[1], "none"));
  }
  return true;
}

}  // namespace

std::vector<RankFinding> CompareRanks(const std::vector<RankRun>& ranks, const RankOptions& options) {
  std::vector<RankFinding> out;
  if (ranks.size() < 2) return out;
  const RunData* first = nullptr;
  for (const RankRun& r : ranks) {
    if (r.data && !first) first = r.data;
  }
  if (!first) return out;
  // Each rank's tags are the same program's: rank 0's role map names them for all.
  const std::string loss_tag = RoleTag(*first, Role::kLoss);
  const std::string grad_tag = RoleTag(*first, Role::kGradNorm);

  std::vector<RankFinding> grad_findings;
  if (!grad_tag.empty()) {
    const std::vector<RankSeries> grad = Collect(ranks, grad_tag);
    if (!JudgeReplicated(grad, grad_tag, options, &grad_findings)) {
      LevelRule rule{options.level_ratio, options.z, options.share_above};
      grad_findings = JudgeLevels(grad, grad_tag, "RANK_DIVERGENCE", "gradient norm", rule, options);
      for (RankFinding& f : grad_findings) {
        RaiseCause(&f.finding.causes, "rank_desync", 0.5);
        RaiseCause(&f.finding.causes, "rank_data_shard", 0.3);
        FillActions(&f);
      }
    }
  }
  if (!loss_tag.empty()) {
    LevelRule rule{options.level_ratio, options.z, options.share_above};
    for (RankFinding& f : JudgeLevels(Collect(ranks, loss_tag), loss_tag, "RANK_DIVERGENCE", "loss", rule, options)) {
      // Two ranks apart on the loss, no majority, and one of them named by its gradient norm
      // leaving the shared value before: that rank's copy of the model is the one that left.
      for (const RankFinding& g : grad_findings) {
        if (f.rank < 0 && f.ranks.size() == 2 && g.rank >= 0 && g.finding.step <= f.finding.step &&
            std::find(f.ranks.begin(), f.ranks.end(), g.rank) != f.ranks.end()) {
          f.rank = g.rank;
          f.ranks = {g.rank};
          json evidence = json::parse(f.finding.evidence_json);
          evidence["rank"] = g.rank;
          evidence["ranks"] = f.ranks;
          evidence["reference"] = "gradient norm";
          f.finding.evidence_json = evidence.dump();
          f.finding.summary = "rank " + std::to_string(g.rank) + "'s loss parts from the other rank's over steps " +
                              std::to_string(f.finding.step) + "-" + std::to_string(f.finding.last_step) +
                              ", after its " + g.finding.location + " left the shared value at step " +
                              std::to_string(g.finding.step);
        }
      }
      // The gradient norm tells the two causes apart: shared (same model, different data)
      // or parted on the same rank too (the model copies left each other).
      bool grads_parted = false;
      for (const RankFinding& g : grad_findings) {
        grads_parted = grads_parted || g.rank == f.rank || g.rank < 0 || f.rank < 0;
      }
      RaiseCause(&f.finding.causes, "rank_data_shard", grads_parted ? 0.3 : 0.6);
      RaiseCause(&f.finding.causes, "rank_desync", grads_parted ? 0.6 : 0.2);
      FillActions(&f);
      out.push_back(std::move(f));
    }
  }
  for (RankFinding& f : grad_findings) out.push_back(std::move(f));

  // Stragglers: phases each rank spends on its own (its data wait, its forward). Backward
  // and the step include waiting in the all-reduce for the slowest rank, equal for all.
  LevelRule slow{options.straggler_ratio, options.z, options.share_above, options.straggler_min_seconds, true, true};
  for (const char* phase : {tags::kTimeData, tags::kTimeForward}) {
    for (RankFinding& f : JudgeLevels(Collect(ranks, phase), phase, "STRAGGLER", std::string(phase) + " time", slow, options)) {
      if (f.rank < 0) continue;  // slower is directional: a rank is named or nothing is said
      RaiseCause(&f.finding.causes, std::string(phase) == tags::kTimeData ? "slow_dataloader" : "host_contention", 0.4);
      FillActions(&f);
      out.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace trainscope::doctor
