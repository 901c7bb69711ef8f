// The other loss-curve detectors: oscillation (a loss whose steps keep changing direction with
// a large amplitude), negative values of a loss that cannot be negative, and loss terms whose
// magnitudes differ by decades (LossMagnitudeDetector).
#include "doctor/detectors/loss_curve.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/tag.h"
#include "doctor/facts.h"
#include "doctor/knowledge.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

// ---- oscillation ----

void LossOscillationDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const double x = ctx.facts.loss;
  if (!std::isfinite(x)) return;
  window_.emplace_back(frame.step, x);
  if (window_.size() > options_.window) window_.pop_front();
  if (window_.size() < options_.window) return;
  size_t changes = 0, diffs = 0;
  double amplitude = 0;
  double prev_diff = 0;
  for (size_t i = 1; i < window_.size(); ++i) {
    const double d = window_[i].second - window_[i - 1].second;
    amplitude += std::fabs(d);
    if (i >= 2 && d * prev_diff < 0) ++changes;
    if (i >= 2) ++diffs;
    prev_diff = d;
  }
  amplitude /= static_cast<double>(window_.size() - 1);
  const double alternation = diffs ? static_cast<double>(changes) / static_cast<double>(diffs) : 0;
  if (alternation < options_.min_alternation) return;  // the common case: judged without a median
  std::vector<double> xs, ys;
  for (const auto& [step, value] : window_) {
    xs.push_back(static_cast<double>(step));
    ys.push_back(value);
  }
  const double level = std::fabs(Median(ys));
  if (amplitude < options_.min_amplitude * level) return;
  const SlopeFit fit = RobustSlope(xs, ys);
  if (std::fabs(fit.trend_z) >= options_.max_trend_z) return;
  Finding f;
  f.code = "LOSS_OSCILLATION";
  f.severity = Severity::kWarning;
  f.step = window_.front().first;
  f.last_step = frame.step;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  f.summary = "loss see-saws without progress: " + FormatNumber(100 * alternation, 4) + "% of steps reverse direction, swings of " +
              FormatNumber(amplitude, 4) + " around " + FormatNumber(level, 4);
  f.evidence_json = json{{"alternation", Num(alternation)}, {"mean_swing", Num(amplitude)}, {"level", Num(level)},
                         {"trend_z", Num(fit.trend_z)}, {"window", options_.window}}.dump();
  f.causes = {{"lr_too_high", 0.7}};
  ctx.Report(std::move(f));
}

// ---- negative ----

bool LossMayBeNegative(std::string_view name) {
  const std::string tag = Lower(name);
  // Long enough to match anywhere in the name.
  for (const char* may : {"nll", "elbo", "kl", "gan", "gen", "disc", "reward", "score", "likelihood", "contrast",
                          "actor", "policy", "advantage", "entropy", "surrogate", "ppo", "grpo", "reinforce"}) {
    if (tag.find(may) != std::string::npos) return true;
  }
  // Short words only as whole words: "act_loss" (DeepSpeed-Chat's PPO actor), "pg_loss",
  // "rl/loss", "pi_loss", but not "exact" or "impact".
  std::vector<std::string> words;
  std::string word;
  for (char c : tag + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word.push_back(c);
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  for (const std::string& w : words) {
    for (const char* may : {"act", "pg", "rl", "pi", "adv"}) {
      if (w == may) return true;
    }
  }
  return false;
}

void NegativeLossDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const double x = ctx.facts.loss;
  if (!std::isfinite(x)) return;
  if (LossMayBeNegative(ctx.facts.roles.Get(Role::kLoss))) return;
  if (x >= -options_.tolerance) {
    streak_ = 0;
    return;
  }
  if (streak_ == 0) streak_start_ = frame.step;
  if (++streak_ < options_.sustain) return;
  Finding f;
  f.code = "NEGATIVE_LOSS";
  f.severity = Severity::kWarning;
  f.step = streak_start_;
  f.last_step = frame.step;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  f.summary = "loss is negative (" + FormatNumber(x, 4) + " at step " + std::to_string(frame.step) +
              "): cross-entropy, MSE and friends cannot be";
  f.evidence_json = json{{"value", Num(x)}, {"first_negative_step", streak_start_}}.dump();
  f.causes = {{"wrong_loss_inputs", 0.7}};
  ctx.Report(std::move(f));
}

// ---- magnitude ----

namespace {

// A loss term logged beside the total: "loss" in its name, not a validation loss.
bool IsTrainLossTerm(std::string_view tag) {
  const std::string t = Lower(tag);
  if (t.find("loss") == std::string::npos) return false;
  for (const char* held_out : {"val", "eval", "test"}) {
    if (t.find(held_out) != std::string::npos) return false;
  }
  return true;
}

double Decades(double hi, double lo) { return hi > 0 && lo > 0 ? std::log10(hi / lo) : kNaN; }

}  // namespace

void LossMagnitudeDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  // The verdict falls at the initial_points-th point: a loss that started in range has
  // nothing more to collect.
  if (!reported_ && first_.size() == options_.initial_points) return;
  const std::string& loss_tag = ctx.facts.roles.Get(Role::kLoss);
  for (const auto& [tag, value] : frame.scalars) {
    if (tag == loss_tag || !std::isfinite(value) || !IsTrainLossTerm(tag)) continue;
    Term& term = At(terms_, tag);
    if (term.first.size() < options_.initial_points) term.first.push_back(std::fabs(value));
    term.last = value;
  }
  const double x = ctx.facts.loss;
  if (!std::isfinite(x)) return;
  if (first_.empty()) first_step_ = frame.step;
  if (first_.size() < options_.initial_points) first_.push_back(x);
  if (x > max_) max_ = x, max_step_ = frame.step;
  last_ = x, last_step_ = frame.step;
  if (!reported_ && first_.size() == options_.initial_points && Median(first_) > options_.max_initial) {
    reported_ = true;
    ctx.Report(Describe(ctx));
  }
}

void LossMagnitudeDetector::Finish(const DetectorContext& ctx) {
  if (first_.empty()) return;
  if (!reported_ && Median(first_) <= options_.max_initial) return;
  ctx.Amend(Describe(ctx));
}

Finding LossMagnitudeDetector::Describe(const DetectorContext& ctx) const {
  const double initial = Median(first_);
  Finding f;
  f.code = "LOSS_MAGNITUDE";
  f.severity = Severity::kWarning;
  f.step = first_step_;
  f.last_step = last_step_;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  f.summary = "loss starts at " + FormatNumber(initial, 4) + " (median of its first " + std::to_string(first_.size()) +
              " points), above FP16's largest value " + FormatNumber(options_.max_initial, 6) + "; its maximum is " +
              FormatNumber(max_, 4) + " at step " + std::to_string(max_step_) + ", and it is " + FormatNumber(last_, 4) +
              " at step " + std::to_string(last_step_);
  // "initial" is the first value logged; "initial_level" the median the summary quotes.
  json ev = {{"initial", Num(first_.front())}, {"initial_level", Num(initial)}, {"max", Num(max_)},
             {"max_step", max_step_},          {"last", Num(last_)},          {"last_step", last_step_},
             {"decades_fallen", Num(Decades(initial, last_))}};
  // The loss terms beside it, largest first, and how many decades they span.
  std::vector<std::pair<double, std::string>> levels;
  json terms = json::array();
  for (const auto& [tag, term] : terms_) {
    const double level = Median(term.first);
    levels.emplace_back(level, tag);
  }
  std::sort(levels.rbegin(), levels.rend());
  for (const auto& [level, tag] : levels) {
    terms.push_back({{"tag", tag}, {"initial", Num(level)}, {"last", Num(terms_.at(tag).last)}});
  }
  std::vector<Cause> causes;
  double span = kNaN;
  if (levels.size() >= 2) {
    span = Decades(levels.front().first, levels.back().first);
    ev["terms"] = terms;
    ev["terms_span_decades"] = Num(span);
  }
  if (std::isfinite(span) && span >= options_.unbalanced_decades) {
    f.summary += "; its terms span " + FormatNumber(span, 3) + " decades (" + levels.front().second + " " +
                 FormatNumber(levels.front().first, 3) + ", " + levels.back().second + " " +
                 FormatNumber(levels.back().first, 3) + ")";
    RaiseCause(&causes, "unbalanced_loss_terms", 0.7);
    RaiseCause(&causes, "unscaled_targets", 0.3);
  } else {
    RaiseCause(&causes, "unscaled_targets", 0.6);
    RaiseCause(&causes, "unbalanced_loss_terms", 0.2);
  }
  RaiseCause(&causes, "bad_init", 0.2);
  f.evidence_json = ev.dump();
  f.causes = causes;
  return f;
}

}  // namespace trainscope::doctor
