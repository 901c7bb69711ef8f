// Fp16OverflowDetector: steps skipped on float16 overflow, the loss-scale trajectory and
// NaN iterations, from what the training printed (numerics.h says what is healthy).
#include "doctor/detectors/numerics.h"

#include <algorithm>
#include <cmath>

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

std::string Percent(double fraction) { return FormatNumber(100 * fraction, 2) + " %"; }

}  // namespace

void Fp16OverflowDetector::AddSkip(int64_t step) {
  if (!skips_.empty() && step < skips_.back()) step = skips_.back();  // keep step order
  const int64_t previous = skips_.empty() ? first_step_ - 1 : skips_.back();
  skips_.push_back(step);
  if (calibration_open_) {
    const bool starts_early = skips_.size() > 1 || step - first_step_ <= options_.calibration_start;
    const bool continues = skips_.size() == 1 || step - previous <= options_.calibration_gap;
    if (starts_early && continues) {
      ++calibration_skips_;
      return;
    }
    calibration_open_ = false;
  }
  // After the calibration: runs of consecutive skipped steps and the windowed rate. Two
  // engines (an RLHF actor and critic) may skip the same step: that is still one run.
  if (run_length_ == 0 || step - previous > 1) {
    run_length_ = 1;
  } else if (step - previous == 1) {
    ++run_length_;
  }
  if (run_length_ > max_run_) {
    max_run_ = run_length_;
    max_run_end_ = step;
  }
  window_.push_back(step);
  while (!window_.empty() && window_.front() <= step - options_.rate_window) window_.pop_front();
  if (window_.size() > max_window_skips_) {
    max_window_skips_ = window_.size();
    max_window_end_ = step;
  }
}

void Fp16OverflowDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  if (!any_frame_) first_step_ = frame.step;
  any_frame_ = true;
  last_step_ = frame.step;
  if (calibration_open_ && !skips_.empty() && frame.step - skips_.back() > options_.calibration_gap) {
    calibration_open_ = false;
  }

  // Skip events: one point per skipped step (DeepSpeed's OVERFLOW lines, a client's
  // amp/overflow_skip), else a counter of skipped steps.
  // Every point counts: two engines (an RLHF actor and critic) may both skip at one step.
  const std::string& event_tag = facts.roles.Get(Role::kOverflowSkip);
  if (!event_tag.empty()) {
    for (const auto& [tag, v] : frame.scalars) {
      if (tag != event_tag || !std::isfinite(v) || v <= 0) continue;
      from_events_ = true;
      skip_source_ = event_tag;
      const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(std::lround(std::min(v, 1e6))));
      for (int64_t i = 0; i < n; ++i) AddSkip(frame.step);
    }
  }
  const std::string& counter_tag = facts.roles.Get(Role::kSkippedSteps);
  if (const double* v = counter_tag.empty() ? nullptr : frame.Scalar(counter_tag)) {
    if (std::isfinite(*v) && *v >= 0) {
      // Megatron prints skips per logging interval ("number of skipped iterations"),
      // DeepSpeed a running total (`skipped=K`).
      const bool per_interval = counter_tag.rfind("number of", 0) == 0;
      double added = per_interval ? *v : *v >= counter_last_ ? *v - counter_last_ : *v;
      counter_last_ = *v;
      counter_value_ = *v;
      if (!from_events_ && added > 0) {
        // A counter says how many steps of the interval were skipped, not which: they are
        // placed at the interval's start, as a start-up burst would be.
        skip_source_ = counter_tag;
        const int64_t from = counter_seen_ ? counter_step_ + 1 : first_step_;
        const int64_t n = static_cast<int64_t>(std::min(added, 1e6));
        for (int64_t i = 0; i < n; ++i) AddSkip(std::min(from + i, frame.step));
      }
      counter_seen_ = true;
      counter_step_ = frame.step;
    }
  }
  const std::string& nan_tag = facts.roles.Get(Role::kNanSteps);
  if (const double* v = nan_tag.empty() ? nullptr : frame.Scalar(nan_tag)) {
    if (std::isfinite(*v) && *v > 0) {
      nan_total_ += *v;
      if (nan_first_step_ < 0) nan_first_step_ = frame.step;
      nan_last_step_ = frame.step;
      Finding f;
      f.code = "NONFINITE_LOSS";
      f.severity = Severity::kWarning;
      f.step = nan_first_step_;
      f.last_step = frame.step;
      f.location = nan_tag;
      f.summary = FormatNumber(nan_total_, 6) + " iteration(s) had a NaN/Inf loss and were skipped (first logged at step " +
                  std::to_string(nan_first_step_) + ")";
      f.evidence_json = json{{"nan_iterations", Num(nan_total_)}, {"first_step", nan_first_step_},
                             {"last_step", nan_last_step_}, {"source", nan_tag}}.dump();
      f.causes = {{"precision_overflow", 0.3}, {"lr_too_high", 0.3}, {"gradient_explosion", 0.2}};
      ctx.Amend(std::move(f));
    }
  }

  const std::string& scale_tag = facts.roles.Get(Role::kLossScale);
  if (const double* v = scale_tag.empty() ? nullptr : frame.Scalar(scale_tag)) {
    if (std::isfinite(*v) && *v > 0) {
      if (scale_changes_.empty() || scale_changes_.back().second != *v) scale_changes_.emplace_back(frame.step, *v);
      if (std::isnan(scale_min_) || *v < scale_min_) {
        scale_min_ = *v;
        scale_min_step_ = frame.step;
      }
      if (!calibration_open_ && (std::isnan(scale_peak_after_calibration_) || *v > scale_peak_after_calibration_)) {
        scale_peak_after_calibration_ = *v;
      }
    }
  }

  if (skips_.empty()) return;
  std::string why;
  const Severity severity = Judge(&why);
  if (severity > Severity::kInfo && (!reported_any_ || severity > reported_)) {
    ctx.Report(Build(severity, why, ctx));  // the live alert; Finish amends the evidence
    reported_any_ = true;
    reported_ = severity;
  }
}

Severity Fp16OverflowDetector::Judge(std::string* why) const {
  Severity s = Severity::kInfo;
  auto raise = [&](Severity to, const std::string& reason) {
    if (to > s) {
      s = to;
      *why = reason;
    }
  };
  const double window_rate = static_cast<double>(max_window_skips_) / static_cast<double>(options_.rate_window);
  if (window_rate > options_.warning_rate) {
    raise(Severity::kWarning, std::to_string(max_window_skips_) + " of the " + std::to_string(options_.rate_window) +
                                  " steps up to step " + std::to_string(max_window_end_) + " were skipped");
  }
  if (max_run_ >= options_.max_consecutive) {
    raise(Severity::kWarning, std::to_string(max_run_) + " consecutive steps skipped up to step " +
                                  std::to_string(max_run_end_) + " after the loss scale had settled");
  }
  if (!std::isnan(scale_peak_after_calibration_) && !scale_changes_.empty() &&
      scale_changes_.back().second * options_.collapse_ratio <= scale_peak_after_calibration_) {
    raise(Severity::kWarning, "the loss scale fell from " + FormatNumber(scale_peak_after_calibration_, 6) + " to " +
                                  FormatNumber(scale_changes_.back().second, 6));
  }
  if (window_rate >= options_.critical_rate) {
    raise(Severity::kCritical, std::to_string(max_window_skips_) + " of the " + std::to_string(options_.rate_window) +
                                   " steps up to step " + std::to_string(max_window_end_) +
                                   " were skipped: most updates are lost");
  }
  if (!std::isnan(scale_min_) && scale_min_ <= options_.min_scale) {
    raise(Severity::kCritical, "the loss scale reached " + FormatNumber(scale_min_, 6) + " at step " +
                                   std::to_string(scale_min_step_) + ": gradients overflow float16 even unscaled");
  }
  return s;
}

Finding Fp16OverflowDetector::Build(Severity severity, const std::string& why, const DetectorContext& ctx) const {
  const int64_t steps = std::max<int64_t>(1, last_step_ - first_step_ + 1);
  const size_t n = skips_.size();
  const size_t after = n - calibration_skips_;
  Finding f;
  f.code = "FP16_OVERFLOW";
  f.severity = severity;
  f.step = skips_.front();
  f.last_step = skips_.back();
  f.location = skip_source_;
  std::string text = std::to_string(n) + " step" + (n == 1 ? "" : "s") + " skipped on float16 overflow in " +
                     std::to_string(steps) + " steps (" + Percent(static_cast<double>(n) / static_cast<double>(steps)) + ")";
  if (calibration_skips_ > 0) {
    text += "; " + std::to_string(calibration_skips_) + " at the start while the loss scale calibrated";
    if (scale_changes_.size() >= 2) {
      double calibrated = scale_changes_.front().second;
      for (const auto& [step, scale] : scale_changes_) {
        if (step <= skips_[calibration_skips_ - 1]) calibrated = scale;
      }
      text += " (" + FormatNumber(scale_changes_.front().second, 6) + " -> " + FormatNumber(calibrated, 6) + ")";
    }
  }
  if (after > 0) {
    text += "; " + std::to_string(after) + " after it, at most " + std::to_string(max_window_skips_) + " in any " +
            std::to_string(options_.rate_window) + " steps";
  }
  if (!scale_changes_.empty()) {
    text += "; loss scale now " + FormatNumber(scale_changes_.back().second, 6) + ", lowest " + FormatNumber(scale_min_, 6);
  }
  text += severity == Severity::kInfo ? ". Dynamic loss scaling at work: normal at this rate" : ". " + why;
  f.summary = text;

  json skip_steps = json::array();
  for (size_t i = 0; i < n && i < 50; ++i) skip_steps.push_back(skips_[i]);
  json ev = {{"skipped", n},
             {"steps", steps},
             {"skip_rate", Num(static_cast<double>(n) / static_cast<double>(steps))},
             {"calibration_skips", calibration_skips_},
             {"skip_steps", skip_steps},
             {"max_consecutive_after_calibration", max_run_},
             {"max_skips_in_window", max_window_skips_},
             {"window_steps", options_.rate_window},
             {"source", skip_source_}};
  if (n > 50) ev["skip_steps_truncated"] = true;
  if (!std::isnan(counter_value_)) ev["skipped_counter"] = {{"tag", ctx.facts.roles.Get(Role::kSkippedSteps)}, {"value", Num(counter_value_)}};
  if (!scale_changes_.empty()) {
    json trajectory = json::array();
    const size_t m = scale_changes_.size();
    const size_t half = options_.max_trajectory / 2;
    for (size_t i = 0; i < m; ++i) {
      if (m > options_.max_trajectory && i >= half && i < m - half) continue;
      trajectory.push_back({scale_changes_[i].first, Num(scale_changes_[i].second)});
    }
    ev["loss_scale"] = {{"tag", ctx.facts.roles.Get(Role::kLossScale)},
                        {"first", Num(scale_changes_.front().second)},
                        {"last", Num(scale_changes_.back().second)},
                        {"min", Num(scale_min_)},
                        {"min_step", scale_min_step_},
                        {"changes", m},
                        {"trajectory", trajectory}};
    if (m > options_.max_trajectory) ev["loss_scale"]["trajectory_truncated"] = true;
  }
  if (!why.empty() && severity > Severity::kInfo) ev["why"] = why;
  f.evidence_json = ev.dump();
  if (severity == Severity::kInfo) {
    f.causes = {{"precision_overflow", 0.3}};
  } else {
    f.causes = {{"precision_overflow", 0.6}, {"gradient_explosion", 0.3}, {"lr_too_high", 0.2}};
  }
  return f;
}

void Fp16OverflowDetector::Finish(const DetectorContext& ctx) {
  if (skips_.empty()) return;
  std::string why;
  const Severity severity = Judge(&why);
  ctx.Amend(Build(severity, why, ctx));
}

}  // namespace trainscope::doctor
