// LossSpikeDetector: a loss point far above its rolling median and beyond the run's own
// noise, confirmed or not by the points after it, told apart from an epoch boundary and from
// a transient that the loss recovers from.
#include "doctor/detectors/loss_curve.h"

#include <algorithm>
#include <cmath>
#include <cstring>


namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

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

}  // namespace trainscope::doctor
