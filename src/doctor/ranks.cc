#include "doctor/ranks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/tag.h"
#include "doctor/detector.h"
#include "doctor/knowledge.h"
#include "doctor/rank_stats.h"
#include "doctor/roles.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

using namespace rank_stats;  // the comparison statistics (rank_stats.h)

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

// What a level finding is made from: one series compared in windows.
struct LevelJudgement {
  const std::vector<RankSeries>& series;
  const std::string& tag;
  const std::string& code;
  const std::string& what;
  const LevelRule& rule;
  size_t window_steps;
  const std::vector<Window>& windows;
  const LevelComparison& c;
};

// The finding for a stretch: the named rank (`named_index` >= 0) against `reference`, or
// the ranks that disagree with none named.
RankFinding MakeLevelFinding(const LevelJudgement& j, int named_index, const std::vector<int>& ranks, const Stretch& s,
                             const std::string& reference) {
  const std::vector<RankSeries>& series = j.series;
  const std::string &tag = j.tag, &code = j.code, &what = j.what;
  const LevelRule& rule = j.rule;
  const size_t window_steps = j.window_steps;
  const std::vector<Window>& windows = j.windows;
  const LevelComparison& c = j.c;
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
  const LevelJudgement judgement{series, tag, code, what, rule, window_steps, windows, c};

  const std::string against_others = "median of the other ranks";
  // Slower-only rules are directional: of 2 ranks only the slower can be out, so it is named
  // (all ranks slower than each other cannot happen; nothing is said then).
  if (rule.only_above) {
    if (flagged.size() < series.size()) {
      for (size_t r : flagged) out.push_back(MakeLevelFinding(judgement, static_cast<int>(r), {series[r].rank}, stretches[r], against_others));
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
        for (size_t r : group) out.push_back(MakeLevelFinding(judgement, static_cast<int>(r), {series[r].rank}, stretches[r], against_others));
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
    RankFinding f = MakeLevelFinding(judgement, moved, {series[moved].rank}, stretches[moved], "own history");
    json evidence = json::parse(f.finding.evidence_json);
    json own = json::object();
    for (size_t r = 0; r < series.size(); ++r) own[std::to_string(series[r].rank)] = Num(moves[r]);
    evidence["moved_at_onset"] = own;  // ln(after / before) of each rank's own level
    f.finding.evidence_json = evidence.dump();
    out.push_back(std::move(f));
    return out;
  }
  out.push_back(MakeLevelFinding(judgement, -1, ranks, stretches[first], "none"));
  return out;
}

// Per step of a series equal across ranks by construction: the value most ranks share (a
// majority of at least 2), who departs from it, and how many steps agree.
struct ReplicaAgreement {
  std::vector<std::vector<int>> departs;
  std::vector<std::vector<bool>> compared;
  std::vector<std::vector<double>> values;
  size_t agreeing_steps = 0, leading_agreement = 0;
};

ReplicaAgreement CompareReplicas(const std::vector<RankSeries>& series, const std::vector<int64_t>& steps,
                                 const RankOptions& options) {
  const size_t n = series.size();
  ReplicaAgreement agreement;
  auto same = [&](double a, double b) {
    return std::fabs(a - b) <= options.replicated_tolerance * std::max(std::fabs(a), std::fabs(b));
  };
  // Per step: the value most ranks share (a majority of at least 2), and who departs from it.
  std::vector<std::vector<int>>& departs = agreement.departs;
  departs.assign(n, std::vector<int>(steps.size(), 0));
  std::vector<std::vector<bool>>& compared = agreement.compared;
  compared.assign(n, std::vector<bool>(steps.size(), false));
  std::vector<std::vector<double>>& values = agreement.values;
  values.assign(n, std::vector<double>(steps.size(), kNaN));
  size_t& agreeing_steps = agreement.agreeing_steps;
  size_t& leading_agreement = agreement.leading_agreement;
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
  return agreement;
}

// The finding for a stretch apart: the rank at `index` (>= 0) against `reference`, or the
// ranks that stop agreeing with none named.
RankFinding MakeReplicaFinding(const std::vector<RankSeries>& series, const std::vector<int64_t>& steps,
                               const std::vector<std::vector<double>>& values, const std::string& tag, int index,
                               const std::vector<int>& ranks, const Stretch& s, const std::string& reference) {
  const size_t n = series.size();
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
}

// The exact rule for a series equal across ranks by construction. Returns true when the
// series is replicated (then the level rule is not needed for it).
bool JudgeReplicated(const std::vector<RankSeries>& series, const std::string& tag, const RankOptions& options,
                     std::vector<RankFinding>* out) {
  if (series.size() < 2) return false;
  const std::vector<int64_t> steps = SharedSteps(series);
  if (steps.size() < 10) return false;
  const size_t n = series.size();
  const ReplicaAgreement agreement = CompareReplicas(series, steps, options);
  const std::vector<std::vector<int>>& departs = agreement.departs;
  const std::vector<std::vector<bool>>& compared = agreement.compared;
  const std::vector<std::vector<double>>& values = agreement.values;
  const size_t agreeing_steps = agreement.agreeing_steps, leading_agreement = agreement.leading_agreement;
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


  if (n >= 3) {
    for (size_t r : flagged) out->push_back(MakeReplicaFinding(series, steps, values, tag, static_cast<int>(r), {series[r].rank}, stretches[r], "the value the other ranks share"));
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
    out->push_back(MakeReplicaFinding(series, steps, values, tag, moved, {series[moved].rank}, stretches[moved], "own history"));
  } else {
    out->push_back(MakeReplicaFinding(series, steps, values, tag, -1, ranks, stretches[0].length() >= stretches[1].length() ? stretches[0] : stretches[1], "none"));
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
