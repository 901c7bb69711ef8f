// LossDivergenceDetector: a loss that climbs well above its best level, or above where it
// started, on a sustained rising trend; offline, reported only if it is still up at the end.
#include "doctor/detectors/loss_curve.h"

#include <algorithm>
#include <cmath>

#include "doctor/facts.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

void LossDivergenceDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const double x = ctx.facts.loss;
  if (std::isnan(x)) {
    // No loss at this step, or a logged NaN (which ends the run's judgement as non-finite).
    const double* logged = frame.Scalar(ctx.facts.roles.Get(Role::kLoss));
    if (logged && std::isnan(*logged)) end_nonfinite_ = true;
    return;
  }
  if (!Record(frame.step, x)) return;
  const double initial = Median(first_);
  if (!(initial > 0)) return;  // ratios need a positive loss
  std::vector<double> r(recent_.begin(), recent_.end());
  const double cur = Median(r);
  if (!Climbing(frame.step, x, initial, cur)) return;
  const bool critical = cur >= options_.critical_ratio * initial;
  if (reported_ && (!critical || critical_)) {
    Finding f;
    f.code = "LOSS_DIVERGENCE";
    f.location = ctx.facts.roles.Get(Role::kLoss);
    f.severity = critical_ ? Severity::kCritical : Severity::kWarning;
    f.step = climb_start_;
    f.last_step = frame.step;
    ctx.ReportOrHold(std::move(f));  // offline the end of the run decides (Finish)
    return;
  }
  reported_ = true;
  critical_ = critical;
  climb_start_ = std::min(streak_start_, near_best_step_);
  Finding f = DescribeClimb(frame.step, initial, cur, critical, ctx);
  location_ = f.location;
  ctx.ReportOrHold(std::move(f));
}

// Adds the point to the windows the climb is judged on; false until they are full.
bool LossDivergenceDetector::Record(int64_t step, double x) {
  end_nonfinite_ = !std::isfinite(x);
  if (std::isfinite(x)) {
    tail_.push_back(x);
    if (tail_.size() > options_.window) tail_.pop_front();
  }
  if (first_.size() < options_.initial_points) {
    if (std::isfinite(x)) first_.push_back(x);
  }
  const double v = std::isfinite(x) ? x : std::numeric_limits<double>::max();
  recent_.push_back(v);
  recent_steps_.push_back(step);
  if (recent_.size() > options_.window) {
    recent_.pop_front();
    recent_steps_.pop_front();
  }
  long_.push_back(v);
  long_steps_.push_back(step);
  if (long_.size() > std::max(options_.best_window, options_.trend_points)) {
    long_.pop_front();
    long_steps_.pop_front();
  }
  return first_.size() >= options_.initial_points && recent_.size() >= options_.window;
}

// Whether the loss is up (well above its best, or above its start) on a rising trend, and
// has been for `sustain` points.
bool LossDivergenceDetector::Climbing(int64_t step, double x, double initial, double cur) {
  if (long_.size() >= options_.best_window) {
    std::vector<double> l(long_.end() - static_cast<std::ptrdiff_t>(options_.best_window), long_.end());
    const double level = Median(l);
    if (level < best_) {
      best_ = level;
      // A median speaks for the middle of its window (as near_best_step_ below): the end
      // of it can lie past where the climb began.
      best_step_ = long_steps_[long_steps_.size() - options_.best_window / 2 - 1];
    }
  }
  if (!std::isfinite(best_)) best_ = initial, best_step_ = step;
  // The climb starts after the last step the current level was near the best one.
  // (A median lags: it speaks for the middle of its window.)
  if (cur <= best_ + 0.1 * std::max(initial - best_, 0.0) || cur <= 1.1 * best_) {
    near_best_step_ = recent_steps_[recent_steps_.size() / 2];
  }
  if (std::isfinite(x)) spread_.Add(x);
  const double noise = 1.25 * 1.4826 * spread_.Mad() / std::sqrt(static_cast<double>(options_.window));
  const double clear = options_.noise_sigmas * (std::isfinite(noise) ? noise : 0.0);
  const bool climbed = cur > best_ + options_.rise_fraction * (initial - best_) && cur > options_.rise_ratio * best_ &&
                       cur - best_ > clear;
  const bool above_start = cur > options_.above_initial_ratio * initial && cur - initial > clear;
  bool rising = false;
  if (climbed || above_start) {
    const size_t n = std::min(long_.size(), options_.trend_points);
    std::vector<double> xs, ys;
    for (size_t i = long_.size() - n; i < long_.size(); ++i) {
      xs.push_back(static_cast<double>(i));
      ys.push_back(long_[i]);
    }
    rising = RobustSlope(xs, ys).trend_z >= options_.trend_z;
  }
  if ((climbed || above_start) && (rising || streak_ > 0)) {
    if (streak_ == 0) streak_start_ = step;
    ++streak_;
  } else {
    streak_ = 0;
  }
  return streak_ >= options_.sustain;
}

Finding LossDivergenceDetector::DescribeClimb(int64_t step, double initial, double cur, bool critical,
                                              const DetectorContext& ctx) const {
  Finding f;
  f.code = "LOSS_DIVERGENCE";
  f.severity = critical ? Severity::kCritical : Severity::kWarning;
  f.step = climb_start_;
  f.last_step = step;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  f.summary = "loss is climbing: " + FormatNumber(cur, 4) + " now (median of the last " + std::to_string(options_.window) +
              " points) against a best of " + FormatNumber(best_, 4) + " at step " + std::to_string(best_step_) +
              " (median of " + std::to_string(options_.best_window) + " points) and " + FormatNumber(initial, 4) +
              " at the start (median of the first " + std::to_string(first_.size()) + ")";
  // "initial" is the first value logged; the comparisons use the medians.
  json ev = {{"current", Num(cur)},         {"best", Num(best_)},           {"best_step", best_step_},
             {"initial", Num(first_.front())}, {"initial_level", Num(initial)}, {"initial_points", first_.size()}};
  std::vector<Cause> causes;
  RaiseCause(&causes, "lr_too_high", 0.5);
  RaiseCause(&causes, "gradient_explosion", 0.25);
  // The weights went the gradient's way: the loss climbs because each step climbs it.
  if (FindFact("updates_ascend")->eval(ctx.facts, f) == FactState::kTrue) {
    RaiseCause(&causes, "update_ascends", 0.9);
    ev["update_grad_same_sign"] = json{{"pairs", ctx.facts.update_grad_pairs}, {"same_sign", ctx.facts.update_grad_same_sign}};
  }
  if (!std::isnan(ctx.facts.lr)) {
    ev["lr"] = Num(ctx.facts.lr);
    // The LR went up over the recorded window: the likeliest trigger.
    const auto lr_hist = ctx.flight.ScalarHistory(ctx.facts.roles.Get(Role::kLr));
    if (!lr_hist.empty() && lr_hist.front().second > 0 && ctx.facts.lr >= 3 * lr_hist.front().second) {
      RaiseCause(&causes, "lr_too_high", 0.7);
      ev["lr_before"] = Num(lr_hist.front().second);
    }
  }
  if (ctx.facts.has_grad_zeroed) {
    // no change: the not-zeroed detector reports that with its own evidence
  }
  const auto& gn = ctx.flight.grad_norm();
  if (gn.size() >= 4 && std::isfinite(gn.back().second)) {
    std::vector<double> v;
    for (const auto& p : gn) {
      if (std::isfinite(p.second)) v.push_back(p.second);
    }
    const double med = Median(v);
    ev["grad_norm"] = Num(gn.back().second);
    ev["grad_norm_median"] = Num(med);
    if (med > 0 && gn.back().second > 5 * med) RaiseCause(&causes, "gradient_explosion", 0.4);
  }
  f.evidence_json = ev.dump();
  f.causes = causes;
  return f;
}

void LossDivergenceDetector::Finish(const DetectorContext& ctx) {
  std::optional<Finding> held = ctx.TakeHeld("LOSS_DIVERGENCE", location_);
  if (!held) return;  // online, or no climb seen
  Finding f = std::move(*held);
  if (!end_nonfinite_ && !tail_.empty() && first_.size() >= options_.initial_points) {
    std::vector<double> t(tail_.begin(), tail_.end());
    const double end = Median(t), initial = Median(first_);
    const bool still_up = (end > best_ + options_.rise_fraction * (initial - best_) && end > options_.rise_ratio * best_) ||
                          end > options_.above_initial_ratio * initial;
    if (!still_up) return;  // it came back down: an excursion, not a divergence
    json ev = json::parse(f.evidence_json, nullptr, false);
    if (ev.is_object()) {
      ev["end_level"] = Num(end);
      f.evidence_json = ev.dump();
    }
  }
  ctx.Report(std::move(f));
}

}  // namespace trainscope::doctor
