#include "doctor/detectors/loss_curve.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "core/tag.h"
#include "doctor/doctor.h"
#include "doctor/facts.h"
#include "doctor/knowledge.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

// ---- spike ----

namespace {

// The epoch-level aggregate a writer logs beside a per-step loss: Lightning's
// train_loss_step / train_loss_epoch, Keras' batch_loss / epoch_loss.
// The names under which the epoch aggregate of `loss` is logged.
std::vector<std::string> EpochAggregateNames(const std::string& loss) {
  std::string base = loss;
  for (const char* suffix : {"_step", "/step"}) {
    const size_t n = std::strlen(suffix);
    if (base.size() > n && base.compare(base.size() - n, n, suffix) == 0) base.resize(base.size() - n);
  }
  std::vector<std::string> names = {base + "_epoch", base + "/epoch", "epoch_loss", "train_loss_epoch", "loss_epoch",
                                    "train/epoch_loss"};
  std::erase(names, loss);
  return names;
}

}  // namespace

void LossSpikeDetector::NoteEpochAggregate(const StepFrame& frame, const DetectorContext& ctx) {
  const std::string& loss_tag = ctx.facts.roles.Get(Role::kLoss);
  if (loss_tag.empty()) return;
  if (epoch_tag_.empty()) {
    if (epoch_names_of_ != loss_tag) {  // built once per loss tag, not per step
      epoch_names_of_ = loss_tag;
      epoch_names_ = EpochAggregateNames(loss_tag);
    }
    for (const auto& [tag, value] : frame.scalars) {
      if (std::find(epoch_names_.begin(), epoch_names_.end(), tag) != epoch_names_.end()) {
        epoch_tag_ = tag;
        break;
      }
    }
  }
  if (epoch_tag_.empty()) return;
  const double* v = frame.Scalar(epoch_tag_);
  if (v && std::isfinite(*v)) epoch_points_.emplace_back(frame.step, *v);
}

void LossSpikeDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& f = ctx.facts;
  // Leading signals: the update size and the gradient norm against their own medians.
  auto lead = [&](RollingMedianMad& series, RollingMedianMad& logs, double v, const char* what) {
    if (!std::isfinite(v)) return;
    const bool positive = v > 0;
    if (series.count() >= options_.warmup) {
      const double med = series.Median();
      // The robust z (two medians) only for a value that is high already.
      if (med > 0 && v >= options_.leading_ratio * med &&
          (!positive || !(logs.RobustZ(std::log(v)) < options_.noise_z))) {
        last_lead_step_ = frame.step;
        lead_what_ = what;
        lead_ratio_ = v / med;
      }
    }
    series.Add(v);
    if (positive) logs.Add(std::log(v));
  };
  lead(update_, update_log_, f.update_ratio, "update/weight ratio");
  lead(grad_, grad_log_, f.grad_norm, "gradient norm");
  NoteEpochAggregate(frame, ctx);

  const double x = f.loss;
  if (!std::isfinite(x)) return;  // NaN/Inf is the non-finite detector's
  if (TrackRecovery(x)) Publish(ctx, true);
  if (pending_) {
    const Pending p = *pending_;
    pending_.reset();
    // The next point confirms when it is itself well above the noise, not merely above
    // the median: in a batch-of-4 loss every other point is 1.5x the median.
    if (x >= p.median + options_.rel * 0.5 * std::fabs(p.median) && loss_.RobustZ(x) >= 0.5 * options_.z) {
      Emit(p, true, "the loss stayed high at the next point", ctx);
    } else {
      Emit(p, false, "", ctx);
    }
  }
  if (first_.size() < 10) first_.push_back(x);
  ++seen_;
  const size_t count = loss_.count();
  if (count >= options_.early_points) {
    const double med = loss_.Median();
    // Early on the median still falls with the loss: only a jump far above it counts.
    const double rel = count >= options_.warmup ? options_.rel : options_.early_ratio - 1;
    // The robust z and the initial level only for a point above the median already.
    const bool above = x > med + rel * std::fabs(med);
    const double z = above ? loss_.RobustZ(x) : 0;
    if (above && z > options_.z && x - med >= options_.min_jump_of_initial * std::fabs(Median(first_))) {
      Pending p{frame.step, x, med, z, LogNoiseZ(x, med)};
      if (last_lead_step_ != std::numeric_limits<int64_t>::min() && frame.step - last_lead_step_ <= options_.leading_steps) {
        Emit(p, true, "the " + lead_what_ + " jumped " + FormatNumber(lead_ratio_, 4) + "x at step " +
                          std::to_string(last_lead_step_), ctx);
      } else {
        pending_ = p;
      }
    }
  }
  loss_.Add(x);
  if (x > 0) {
    const double lx = std::log(x);
    if (std::isfinite(last_log_)) log_diff_.Add(lx - last_log_);
    last_log_ = lx;
  } else {
    last_log_ = kNaN;
  }
}

bool LossSpikeDetector::Transient(const Spike& s) const {
  // Where the untrained model's loss started: the highest of the first points (their
  // median sits lower when the loss falls fast from its first step).
  const double initial = first_.empty() ? kNaN : std::fabs(*std::max_element(first_.begin(), first_.end()));
  return std::isfinite(initial) && s.value < initial;
}

bool LossSpikeDetector::TrackRecovery(double x) {
  bool lasting = false;
  for (Spike& s : spikes_) {  // every unsettled one: a later spike may settle before an earlier
    if (s.settled) continue;
    ++s.points_after;
    const bool in_band = x <= s.median + options_.rel * 0.5 * std::fabs(s.median);
    const bool jump_given_back = x - s.median <= (1 - options_.recovery_share) * (s.value - s.median);
    if (in_band || jump_given_back) {
      s.settled = s.recovered = true;
    } else if (s.points_after >= options_.recovery_points) {
      s.settled = true;
      lasting = true;
    }
  }
  return lasting;
}

double LossSpikeDetector::LogNoiseZ(double x, double median) const {
  if (!(x > 0) || !(median > 0) || log_diff_.count() < options_.early_points) return kNaN;
  const double sigma = 1.4826 * log_diff_.Mad() / std::sqrt(2.0);
  const double excess = std::log(x / median);
  if (!(sigma > 0)) return excess > 0 ? std::numeric_limits<double>::infinity() : 0;
  return excess / sigma;
}

void LossSpikeDetector::Finish(const DetectorContext& ctx) {
  if (pending_) Emit(*pending_, false, "", ctx);
  pending_.reset();
  bool changed = false;
  for (Spike& s : spikes_) {  // the run ended before the loss came back: not a recovery
    if (!s.settled) s.settled = changed = true;
  }
  // Epoch aggregates: the mean over the spike's epoch against the epoch before it.
  for (Spike& sp : spikes_) {
    if (sp.confirmed || epoch_points_.size() < 2) continue;
    auto after = std::lower_bound(epoch_points_.begin(), epoch_points_.end(), sp.step,
                                  [](const auto& p, int64_t step) { return p.first < step; });
    if (after == epoch_points_.end() || after == epoch_points_.begin()) continue;
    const auto before = std::prev(after);
    if (before->second > 0 && after->second >= before->second * (1 + options_.epoch_rise)) {
      sp.confirmed = true;
      sp.why = "the epoch loss (" + epoch_tag_ + ") rose from " + FormatNumber(before->second, 4) + " to " +
               FormatNumber(after->second, 4) + " over its epoch";
      changed = true;
    }
  }
  if (changed) Publish(ctx, true);
}

void LossSpikeDetector::Emit(const Pending& p, bool confirmed, const std::string& why, const DetectorContext& ctx) {
  spikes_.push_back({p.step, p.value, p.median, p.z, confirmed, why, p.noise_z});
  Publish(ctx, spikes_.size() > 1);
}

void LossSpikeDetector::Publish(const DetectorContext& ctx, bool amend) {
  auto ratio = [](const Spike& s) { return s.value / (s.median != 0 ? std::fabs(s.median) : 1.0); };
  auto severity_of = [&](const Spike& s) {
    const bool alarm = (s.confirmed || ratio(s) >= options_.big_jump) && BeyondNoise(s) &&
                       !(Transient(s) && (!s.settled || s.recovered));
    return alarm ? Severity::kWarning : Severity::kInfo;
  };
  const Spike* largest = &spikes_.front();
  Severity severity = Severity::kInfo;
  for (const Spike& s : spikes_) {
    if (ratio(s) > ratio(*largest)) largest = &s;
    severity = std::max(severity, severity_of(s));
  }
  Finding f;
  f.code = "LOSS_SPIKE";
  f.severity = severity;
  f.step = spikes_.front().step;
  f.last_step = spikes_.back().step;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  auto describe = [&](const Spike& s) {
    return FormatNumber(s.value, 4) + " at step " + std::to_string(s.step) + " (" + FormatNumber(ratio(s), 4) +
           "x its rolling median " + FormatNumber(s.median, 4) + ")";
  };
  if (spikes_.size() == 1) {
    const Spike& s = spikes_.front();
    f.summary = "loss jumped to " + describe(s) + ", robust z " + FormatNumber(s.z, 4) +
                (!BeyondNoise(s) ? "; within this run's own batch-to-batch scatter (" +
                                       FormatNumber(s.noise_z, 3) + " noise units on a log scale)"
                 : s.confirmed ? "; " + s.why
                             : ratio(s) >= options_.big_jump ? "; a jump of this size is not batch noise"
                                                             : "; a single outlier (hard batch?)");
  } else {
    f.summary = "loss spiked " + std::to_string(spikes_.size()) + " times; the largest to " + describe(*largest);
    size_t listed = 0;
    for (const Spike& s : spikes_) {
      if (&s == largest || listed == 3) continue;
      f.summary += listed == 0 ? "; also " : ", ";
      f.summary += describe(s);
      ++listed;
    }
    if (spikes_.size() > listed + 1) f.summary += ", ... (evidence.spikes lists them)";
    if (largest->confirmed) f.summary += "; at the largest, " + largest->why;
  }
  json list = json::array();
  for (const Spike& s : spikes_) {
    if (list.size() >= options_.max_listed) break;
    json e = {{"step", s.step}, {"value", Num(s.value)}, {"median", Num(s.median)}, {"ratio", Num(ratio(s))},
              {"robust_z", Num(s.z)}, {"confirmed", s.confirmed}, {"severity", SeverityName(severity_of(s))},
              {"log_noise_z", Num(s.noise_z)}};
    if (!BeyondNoise(s)) e["within_noise"] = "no more than " + FormatNumber(options_.noise_z, 2) +
                                             "x the run's own batch-to-batch scatter (log scale)";
    if (s.recovered && Transient(s))
      e["transient"] = "the loss was back (in the band, or 90 % of the jump given back) within " +
                       std::to_string(s.points_after) + " points, and the spike stayed below the loss's initial level";
    if (!s.why.empty()) e["confirmation"] = s.why;
    list.push_back(std::move(e));
  }
  // The top-level fields describe the largest spike; "spikes" lists every one.
  json ev = {{"value", Num(largest->value)}, {"median", Num(largest->median)}, {"robust_z", Num(largest->z)},
             {"step", largest->step},        {"confirmed", largest->confirmed}, {"count", spikes_.size()},
             {"spikes", list}};
  if (!largest->why.empty()) ev["confirmation"] = largest->why;
  if (last_lead_step_ > std::numeric_limits<int64_t>::min()) {
    ev["leading_signal"] = {{"what", lead_what_}, {"step", last_lead_step_}, {"ratio", Num(lead_ratio_)}};
  }
  if (!epoch_tag_.empty()) ev["epoch_aggregate"] = epoch_tag_;
  f.evidence_json = ev.dump();
  const bool confirmed = std::any_of(spikes_.begin(), spikes_.end(), [](const Spike& s) { return s.confirmed; });
  std::vector<Cause> causes;
  if (confirmed && lead_what_ == "update/weight ratio") RaiseCause(&causes, "lr_too_high", 0.5);
  if (confirmed && lead_what_ == "gradient norm") RaiseCause(&causes, "gradient_explosion", 0.5);
  RaiseCause(&causes, "bad_batch", confirmed ? 0.3 : 0.5);
  RaiseCause(&causes, "lr_too_high", 0.2);
  f.causes = causes;
  if (amend) ctx.Amend(std::move(f));
  else ctx.Report(std::move(f));
}

// ---- divergence ----

void LossDivergenceDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const double x = ctx.facts.loss;
  if (std::isnan(x)) {
    // No loss at this step, or a logged NaN (which ends the run's judgement as non-finite).
    const double* logged = frame.Scalar(ctx.facts.roles.Get(Role::kLoss));
    if (logged && std::isnan(*logged)) end_nonfinite_ = true;
    return;
  }
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
  recent_steps_.push_back(frame.step);
  if (recent_.size() > options_.window) {
    recent_.pop_front();
    recent_steps_.pop_front();
  }
  long_.push_back(v);
  long_steps_.push_back(frame.step);
  if (long_.size() > std::max(options_.best_window, options_.trend_points)) {
    long_.pop_front();
    long_steps_.pop_front();
  }
  if (first_.size() < options_.initial_points || recent_.size() < options_.window) return;
  const double initial = Median(first_);
  if (!(initial > 0)) return;  // ratios need a positive loss
  std::vector<double> r(recent_.begin(), recent_.end());
  const double cur = Median(r);
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
  if (!std::isfinite(best_)) best_ = initial, best_step_ = frame.step;
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
    if (streak_ == 0) streak_start_ = frame.step;
    ++streak_;
  } else {
    streak_ = 0;
  }
  if (streak_ < options_.sustain) return;
  const bool critical = cur >= options_.critical_ratio * initial;
  // Offline the report waits for the end of the run (Finish): only a climb that lasts is one.
  auto out = [&](Finding f) {
    if (ctx.options.streaming) {
      ctx.Report(std::move(f));
    } else if (!deferred_) {
      json ev = json::parse(f.evidence_json.empty() ? "{}" : f.evidence_json, nullptr, false);
      if (ev.is_object()) {
        ev["detected_at"] = frame.step;  // when the climb was seen, not the end of the run
        f.evidence_json = ev.dump();
      }
      deferred_ = std::move(f);
    } else {
      deferred_->last_step = std::max(deferred_->last_step, f.last_step);
      if (f.severity > deferred_->severity) {
      f.evidence_json = deferred_->evidence_json;
      f.summary = f.summary.empty() ? deferred_->summary : f.summary;
      f.causes = f.causes.empty() ? deferred_->causes : f.causes;
      *deferred_ = std::move(f);
    }
    }
  };
  if (reported_ && (!critical || critical_)) {
    Finding f;
    f.code = "LOSS_DIVERGENCE";
    f.location = ctx.facts.roles.Get(Role::kLoss);
    f.severity = critical_ ? Severity::kCritical : Severity::kWarning;
    f.step = climb_start_;
    f.last_step = frame.step;
    out(std::move(f));
    return;
  }
  reported_ = true;
  critical_ = critical;
  climb_start_ = std::min(streak_start_, near_best_step_);
  Finding f;
  f.code = "LOSS_DIVERGENCE";
  f.severity = critical ? Severity::kCritical : Severity::kWarning;
  f.step = climb_start_;
  f.last_step = frame.step;
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
  out(std::move(f));
}

void LossDivergenceDetector::Finish(const DetectorContext& ctx) {
  if (!deferred_) return;
  Finding f = std::move(*deferred_);
  deferred_.reset();
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

// ---- plateau ----

void LossPlateauDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  // Recorded runs log the batch's label range (run.watch): K = max label + 1.
  if (const double* v = frame.Scalar(tags::kInputLabelMax); v && std::isfinite(*v)) label_max_ = std::max(label_max_, *v);
  if (const double* v = frame.Scalar(tags::kInputLabelMin); v && std::isfinite(*v)) {
    label_min_ = std::isnan(label_min_) ? *v : std::min(label_min_, *v);
  }
  for (Role role : {Role::kAcc, Role::kValAcc}) {  // the validation accuracy, when there is one, last
    if (!ctx.facts.roles.Has(role)) continue;
    if (const double* v = frame.Scalar(ctx.facts.roles.Get(role)); v && std::isfinite(*v)) accuracy_ = *v;
  }
  const double x = ctx.facts.loss;
  if (!std::isfinite(x)) return;
  if (thin_.arrivals() > 0 && x == last_value_) {
    ++run_;
  } else {
    run_ = 1;
    run_start_ = frame.step;
  }
  last_value_ = x;
  last_step_ = frame.step;
  const size_t w = options_.initial_points;
  if (first_values_.size() < w) first_values_.push_back(x);
  last_values_.push_back(x);
  if (last_values_.size() > w) last_values_.erase(last_values_.begin());
  const double rolling = last_values_.size() < w ? kNaN : Median(last_values_);
  if (!(best_rolling_ <= rolling)) {  // NaN at first: replaced
    best_rolling_ = rolling;
    best_step_ = frame.step;
  }
  if (thin_.Admit()) {
    steps_.push_back(frame.step);
    values_.push_back(x);
    lrs_.push_back(ctx.facts.lr);
    update_ratios_.push_back(ctx.facts.update_ratio);
    rolling_.push_back(rolling);
    thin_.Trim(steps_, values_, lrs_, update_ratios_, rolling_);
  }
  const size_t points = thin_.arrivals();
  // (A negative loss repeating is NEGATIVE_LOSS's to report.)
  // A stretch, not a coincidence: also >= 10 % of the points so far (a long log printed
  // with two decimals repeats a slowly moving value five times now and then).
  if (!reported_ && run_ >= std::max(options_.frozen_points, points / 10) && x > 0 &&
      x >= 0.05 * std::fabs(first_values_.front())) {
    ReportFrozen(ctx);
  }
  // Every eval_every points: online an early warning; offline a candidate that the end of
  // the run confirms (Finish) or drops (the loss went on to improve).
  if (!candidate_ && points >= options_.min_points && CheckDue(points, options_.eval_every)) {
    Check(ctx, false, options_.min_improvement);
  }
}

void LossPlateauDetector::Finish(const DetectorContext& ctx) {
  CheckProbabilityFloor(ctx);
  if (reported_) return;
  // A plateau seen during the run still stands if the whole run gained less than twice the
  // threshold; otherwise the run is judged as a whole.
  Check(ctx, true, candidate_ ? 2 * options_.min_improvement : options_.min_improvement);
}

void LossPlateauDetector::CheckProbabilityFloor(const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  const size_t n = values_.size();
  if (thin_.arrivals() < options_.min_points || !(accuracy_ >= 0 && accuracy_ <= 1)) return;
  // The class count declared or from the labels (not inferred from the loss level).
  int c = facts.num_classes;
  if (c <= 1 && label_min_ >= 0 && label_max_ >= 1 && label_max_ < 1e6 && label_max_ == std::floor(label_max_)) {
    c = static_cast<int>(label_max_) + 1;
  }
  if (c < 3) return;  // with 2 classes the floor (0.31) is a loss a real model reaches
  bool softmax = std::find(facts.functional_ops.begin(), facts.functional_ops.end(), "softmax") !=
                 facts.functional_ops.end();
  for (const auto& [module, type] : facts.module_types) softmax = softmax || type == "Softmax";
  if (!softmax) return;
  const double floor = std::log(1 + (c - 1) / std::exp(1.0));
  const double lowest = best_rolling_;  // the best the loss ever did
  const size_t recent_n = std::max<size_t>(20, static_cast<size_t>(options_.recent_fraction * n));
  const double now = Median(std::span<const double>(values_.data() + (n - recent_n), recent_n));
  // A real model this accurate has a loss far below the floor: -ln(0.9) = 0.1 at 90 %.
  const double accurate = std::max(0.5, 3.0 / c);
  if (!(lowest >= 0.97 * floor && now <= 1.3 * floor && accuracy_ >= accurate)) return;
  Finding f;
  f.code = "ARCHITECTURE_WARNING";
  f.severity = Severity::kWarning;
  f.step = steps_.front();
  f.last_step = last_step_;
  f.location = facts.roles.Get(Role::kLoss);
  f.summary = "the loss sits on " + FormatNumber(now, 4) + " while the accuracy is " + FormatNumber(100 * accuracy_, 3) +
              " %: cross-entropy over probabilities cannot go below ln(1 + (" + std::to_string(c) + " - 1) / e) = " +
              FormatNumber(floor, 4) + ", and the forward has a softmax: the loss applies its own (softmax twice), its "
              "gradients shrink as the model gets right";
  f.evidence_json = json{{"loss_now", Num(now)}, {"loss_lowest", Num(lowest)}, {"floor", Num(floor)}, {"classes", c},
                         {"accuracy", Num(accuracy_)}, {"softmax_in_forward", true}}.dump();
  f.causes = {{"double_softmax", 0.85}};
  f.actions = {"Return the logits from forward() and let the loss apply the softmax (F.cross_entropy, "
               "nn.CrossEntropyLoss); apply softmax only for predictions",
               "Or keep the probabilities and use F.nll_loss(torch.log(p + 1e-9), target)"};
  ctx.Report(std::move(f));
}

void LossPlateauDetector::ReportFrozen(const DetectorContext& ctx) {
  reported_ = true;
  Finding f;
  f.code = "LOSS_PLATEAU";
  f.severity = Severity::kWarning;
  f.step = run_start_;
  f.last_step = last_step_;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  f.summary = "loss is frozen: exactly " + FormatNumber(last_value_, 6) + " at " + std::to_string(run_) +
              " points in a row (steps " + std::to_string(run_start_) + " to " + std::to_string(last_step_) +
              "); a loss that does not change at all means the weights do not change";
  f.evidence_json = json{{"value", Num(last_value_)}, {"repeats", run_}, {"from_step", run_start_},
                         {"to_step", last_step_}, {"initial", Num(first_values_.front())}, {"frozen", true},
                         {"at_chance", false}}.dump();
  std::vector<Cause> causes;
  RaiseCause(&causes, "skipped_updates", 0.5);
  RaiseCause(&causes, "lr_too_low", 0.3);
  RaiseCause(&causes, "precision_overflow", 0.3);
  f.causes = causes;
  ctx.Report(std::move(f));
}

void LossPlateauDetector::Check(const DetectorContext& ctx, bool final, double min_improvement) {
  if (reported_ || thin_.arrivals() < options_.min_points) return;
  const size_t n = values_.size(), points = thin_.arrivals();
  const double initial = Median(first_values_);
  const size_t recent_n = std::max<size_t>(20, static_cast<size_t>(options_.recent_fraction * n));
  const size_t recent_points = recent_n * thin_.stride();
  const double now = Median(std::span<const double>(values_.data() + (n - recent_n), recent_n));
  // Still warming up: the learning rate is rising over the recent window.
  const double lr_then = lrs_[n - recent_n], lr_now = lrs_.back();
  if (!final && std::isfinite(lr_then) && std::isfinite(lr_now) && lr_now > lr_then * 1.01) return;
  // The class count: declared (config num_classes), else from the recorded label range,
  // else inferred from where the loss sits (see PlateauOptions).
  int c = ctx.facts.num_classes;
  std::string classes_from = c > 1 ? "config" : "";
  if (c <= 1) {
    if (label_min_ >= 0 && label_max_ >= 1 && label_max_ < 1e6 && label_max_ == std::floor(label_max_)) {
      c = static_cast<int>(label_max_) + 1;
      classes_from = "label range";
    }
  }
  const double whole = Median(values_);
  if (c <= 1) {
    for (int k = 2; k <= options_.max_inferred_classes; ++k) {
      const double lk = std::log(static_cast<double>(k));
      if (std::fabs(now - lk) <= options_.chance_tolerance * lk && std::fabs(whole - lk) <= options_.chance_tolerance * lk &&
          initial >= (1 - 2 * options_.chance_tolerance) * lk) {
        c = k;
        classes_from = "inferred from the loss level";
        break;
      }
    }
  }
  const double chance = c > 1 ? std::log(static_cast<double>(c)) : kNaN;
  const bool near_chance = c > 1 && std::fabs(now - chance) <= options_.chance_tolerance * chance;
  bool at_chance = near_chance;
  // Within +-5 % of where it started: a loss far above its start is diverging, not stuck.
  bool stuck = initial > 0 && std::fabs(initial - now) < min_improvement * initial;
  bool settled = false;
  if (at_chance || stuck) {
    std::vector<double> xs(steps_.end() - static_cast<std::ptrdiff_t>(recent_n), steps_.end());
    std::span<const double> ys(values_.data() + (n - recent_n), recent_n);
    const SlopeFit fit = RobustSlope(xs, ys);
    const double z = fit.trend_z;
    // Still going down, by a fall that matters: a loss creeping onto chance from above
    // (0.6938 to 0.6936) falls steadily and learns nothing.
    const double fall = -fit.slope * (xs.back() - xs.front());
    if (z <= -2 && !(at_chance && fall < options_.chance_fall * chance)) at_chance = false;
    std::vector<double> deviations;
    const double level = Median(ys);
    for (double y : ys) deviations.push_back(std::fabs(y - level));
    settled = level > 0 && Median(deviations) < options_.settled_spread * level;
    if (z >= 3) at_chance = stuck = false;  // climbing through its start: diverging, not stuck
  }
  if (!stuck && !at_chance) return;
  if (!final && !ctx.options.streaming) {
    candidate_ = true;  // offline: the end of the run decides
    candidate_step_ = last_step_;
    return;
  }
  const bool inferred = classes_from == "inferred from the loss level";
  reported_ = true;
  Finding f;
  f.code = "LOSS_PLATEAU";
  f.severity = Severity::kWarning;
  f.step = steps_.front();
  f.last_step = last_step_;
  f.location = ctx.facts.roles.Get(Role::kLoss);
  const std::string chance_words =
      inferred ? "ln(" + std::to_string(c) + ") = " + FormatNumber(chance, 4) + ", chance level if this is a " + std::to_string(c) +
                     "-class classifier (no class count in the config)"
               : "ln(" + std::to_string(c) + ") = " + FormatNumber(chance, 4) + ", chance level for " + std::to_string(c) +
                     " classes (" + classes_from + "): the model predicts uniform probabilities";
  const double best = best_rolling_;
  const bool regressed = best <= options_.regressed_ratio * std::min(initial, now);
  if (regressed) {
    // Where it went back up: the first point after the best whose rolling median is past
    // half way from the best to the level now.
    size_t i = static_cast<size_t>(std::lower_bound(steps_.begin(), steps_.end(), best_step_) - steps_.begin());
    while (i + 1 < n && !(rolling_[i] >= best + 0.5 * (now - best))) ++i;
    f.step = steps_[std::min(i, n - 1)];
    f.summary = "loss went back up after the model had learned: it reached " + FormatNumber(best, 4) + " at step " +
                std::to_string(best_step_) + ", rose again from step " + std::to_string(f.step) + " and is " +
                FormatNumber(now, 4) + " now (median of the last " + std::to_string(recent_points) + " points), " +
                (at_chance ? "at " + chance_words : "back at its initial value " + FormatNumber(initial, 4));
  } else if (at_chance && !stuck) {
    f.summary = "loss is stuck at chance level: " + FormatNumber(now, 4) + " (median of the last " + std::to_string(recent_points) +
                " of " + std::to_string(points) + " points) ~ " + chance_words;
  } else {
    f.summary = "loss is stuck at its initial value: " + FormatNumber(now, 4) + " now (median of the last " + std::to_string(recent_points) +
                " points) against " + FormatNumber(initial, 4) + " at the start (median of the first " +
                std::to_string(options_.initial_points) + "; " + FormatNumber(100 * (initial - now) / initial, 4) + "% better after " +
                std::to_string(points) + " points)" + (near_chance ? "; that is " + chance_words : "");
  }
  at_chance = at_chance || (near_chance && stuck);
  // "initial" is the first value logged; the comparison uses the medians.
  json ev = {{"initial", Num(first_values_.front())}, {"initial_level", Num(initial)}, {"now", Num(now)},
             {"points", points}, {"at_chance", at_chance}, {"settled", settled}};
  if (thin_.stride() > 1) ev["judged_every"] = thin_.stride();  // the run's points, evenly thinned
  if (candidate_) ev["detected_at"] = candidate_step_;
  if (c > 1) {
    ev["chance_level"] = Num(chance);
    ev["classes"] = c;
    ev["classes_from"] = classes_from;
  }
  std::vector<Cause> causes;
  const double lr = ctx.facts.lr;
  if (regressed) {
    // It learned at this learning rate, so a slow optimiser or labels without signal are
    // unlikely: what undoes learning is a step too large (or a spike through it) that
    // knocks units dead or the weights off. A 10x higher lr (the code's own advice) is
    // the wrong fix here, so the actions are the causes'.
    ev["regressed"] = true;
    ev["best_level"] = Num(best);
    ev["best_step"] = best_step_;
    ev["rose_from_step"] = f.step;
    if (std::isfinite(lr)) ev["lr"] = Num(lr);
    RaiseCause(&causes, "lr_too_high", 0.5);
    RaiseCause(&causes, "dying_relu", 0.35);
    RaiseCause(&causes, "gradient_explosion", 0.25);
    f.actions = {"Look at the steps around " + std::to_string(f.step) +
                 ": a LOSS_SPIKE, GRAD_EXPLOSION or DEAD_UNITS finding there names what went first"};
    const KnowledgeBase& kb = KnowledgeBase::Builtin();
    for (const Cause& cause : causes) {
      if (const CauseInfo* info = kb.Cause(cause.id); info && !info->actions.empty()) f.actions.push_back(info->actions[0]);
    }
    f.evidence_json = ev.dump();
    f.causes = causes;
    ctx.Report(std::move(f));
    return;
  }
  // An LR that fell below a millionth of its maximum is not "too low" to be raised: the
  // schedule collapsed (a per-epoch scheduler stepped per batch), LR_ANOMALY names it.
  const bool collapsed = std::isfinite(lr) && ctx.facts.lr_max > 0 && lr < 1e-6 * ctx.facts.lr_max;
  if (collapsed) {
    ev["lr_max"] = Num(ctx.facts.lr_max);
    RaiseCause(&causes, "lr_schedule_collapsed", 0.85);
  }
  // What the steps did over the recent window: each step moving the weights by more than 1 %
  // of their norm (~1e-3 is healthy) is an LR too high to learn, not too low to move; so is
  // an adaptive optimizer's LR of 1e-2 and above (each weight moves by about the LR a step).
  std::vector<double> recent_ratios;
  for (size_t i = n - recent_n; i < n; ++i) {
    if (std::isfinite(update_ratios_[i])) recent_ratios.push_back(update_ratios_[i]);
  }
  const double update_ratio = recent_ratios.empty() ? ctx.facts.update_ratio : Median(recent_ratios);
  const bool adam = ctx.facts.optimizer.find("adam") != std::string::npos;
  const bool steps_too_big = (std::isfinite(update_ratio) && update_ratio >= 1e-2) ||
                             (adam && std::isfinite(lr) && lr >= 1e-2);
  if (std::isfinite(lr)) ev["lr"] = Num(lr);
  if (std::isfinite(update_ratio)) ev["update_ratio"] = Num(update_ratio);
  if (steps_too_big) {
    RaiseCause(&causes, "lr_too_high", 0.6);
    ev["lr_too_low_excluded"] = "the steps are large: update/weight ratio " + FormatNumber(update_ratio, 3) +
                                (std::isfinite(lr) ? ", lr " + FormatNumber(lr, 3) : "");
  } else if (std::isfinite(lr)) {
    RaiseCause(&causes, "lr_too_low", lr < (adam ? 1e-5 : 1e-4) ? 0.6 : 0.3);
  } else {
    RaiseCause(&causes, "lr_too_low", 0.3);
  }
  if (!steps_too_big && std::isfinite(update_ratio) && update_ratio < 1e-5) RaiseCause(&causes, "lr_too_low", 0.5);
  RaiseCause(&causes, "bad_init", 0.2);
  RaiseCause(&causes, "missing_zero_grad", 0.05);
  // At chance with a learning rate that is not tiny: the labels (or their pairing with the
  // inputs) carry no signal the model can use, likelier than a slow optimiser.
  if (at_chance) RaiseCause(&causes, "label_noise", inferred ? 0.3 : 0.5);
  // Settled on chance: the optimiser found the best a model can do when the inputs carry
  // nothing about the targets (too large a step would not let it sit still).
  if (at_chance) RaiseCause(&causes, "no_signal", settled ? 0.6 : 0.3);
  f.evidence_json = ev.dump();
  f.causes = causes;
  ctx.Report(std::move(f));
}

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
