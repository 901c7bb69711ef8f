#include "doctor/detectors/validation.h"

#include <algorithm>
#include <cmath>

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

double TrainLevel(const std::deque<double>& recent) {
  std::vector<double> v(recent.begin(), recent.end());
  return Median(v);
}

}  // namespace

void OverfittingDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (std::isfinite(ctx.facts.loss)) {
    train_recent_.push_back(ctx.facts.loss);
    if (train_recent_.size() > options_.train_window) train_recent_.pop_front();
  }
  const std::string& val_tag = ctx.facts.roles.Get(Role::kValLoss);
  const double* val = val_tag.empty() ? nullptr : frame.Scalar(val_tag);
  if (!val || !std::isfinite(*val) || train_recent_.empty()) return;
  evals_.push_back({frame.step, *val, TrainLevel(train_recent_)});
  size_t best = 0;
  for (size_t i = 1; i < evals_.size(); ++i) {
    if (evals_[i].val < evals_[best].val) best = i;
  }
  const size_t after = evals_.size() - 1 - best;
  if (after < options_.evals_after_best) return;
  const Eval& b = evals_[best];
  const Eval& now = evals_.back();
  for (size_t i = evals_.size() - options_.evals_after_best; i < evals_.size(); ++i) {
    if (evals_[i].val <= b.val + options_.rise * std::fabs(b.val)) return;
  }
  if (!(now.train < (1 - options_.train_drop) * b.train)) return;  // train loss must still be falling
  if (now.val - b.val < options_.min_rise_of_first * std::fabs(evals_.front().val)) return;
  const double gap_then = b.val - b.train, gap_now = now.val - now.train;
  if (!(gap_now > options_.gap_growth * std::max(gap_then, 0.0) && gap_now > 0)) return;
  Finding f;
  f.code = "OVERFITTING";
  f.severity = Severity::kWarning;
  f.step = b.step;
  f.last_step = frame.step;
  f.location = val_tag;
  f.summary = "validation loss rose from " + FormatNumber(b.val, 4) + " (step " + std::to_string(b.step) + ") to " + FormatNumber(now.val, 4) +
              " while the training loss fell from " + FormatNumber(b.train, 4) + " to " + FormatNumber(now.train, 4) + "; the gap grew from " +
              FormatNumber(gap_then, 4) + " to " + FormatNumber(gap_now, 4);
  if (!reported_) {
    f.evidence_json = json{{"best_val", Num(b.val)}, {"best_step", b.step}, {"val_now", Num(now.val)},
                           {"train_at_best", Num(b.train)}, {"train_now", Num(now.train)},
                           {"gap_at_best", Num(gap_then)}, {"gap_now", Num(gap_now)},
                           {"evaluations", evals_.size()}}.dump();
    f.causes = {{"overfitting", 0.8}, {"insufficient_data", 0.4}};
  }
  reported_ = true;
  ctx.Report(std::move(f));
}

void MetricStallDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (std::isfinite(ctx.facts.loss)) {
    train_recent_.push_back(ctx.facts.loss);
    if (train_recent_.size() > 20) train_recent_.pop_front();
  }
  std::string tag = ctx.facts.roles.Get(Role::kValAcc);
  if (tag.empty()) tag = ctx.facts.roles.Get(Role::kAcc);
  const double* m = tag.empty() ? nullptr : frame.Scalar(tag);
  if (!m || !std::isfinite(*m)) return;
  points_.push_back({frame.step, *m, train_recent_.empty() ? kNaN : TrainLevel(train_recent_)});
}

void MetricStallDetector::Finish(const DetectorContext& ctx) {
  if (points_.size() < options_.evals) return;
  size_t best = 0;
  for (size_t i = 1; i < points_.size(); ++i) {
    if (points_[i].metric > points_[best].metric + options_.min_delta) best = i;
  }
  const size_t since = points_.size() - 1 - best;
  if (since < options_.evals || since * 2 < points_.size()) return;
  const Point& b = points_[best];
  const Point& now = points_.back();
  if (!(std::isfinite(b.train) && std::isfinite(now.train) && now.train < (1 - options_.train_drop) * b.train)) return;
  std::string tag = ctx.facts.roles.Get(Role::kValAcc);
  if (tag.empty()) tag = ctx.facts.roles.Get(Role::kAcc);
  Finding f;
  f.code = "METRIC_STALL";
  f.severity = Severity::kInfo;
  f.step = b.step;
  f.last_step = now.step;
  f.location = tag;
  f.summary = tag + " has not improved on " + FormatNumber(b.metric, 4) + " (step " + std::to_string(b.step) + ") in " +
              std::to_string(since) + " evaluations, while the training loss fell from " + FormatNumber(b.train, 4) + " to " +
              FormatNumber(now.train, 4);
  f.evidence_json = json{{"best", Num(b.metric)}, {"best_step", b.step}, {"now", Num(now.metric)},
                         {"evaluations_since", since}}.dump();
  f.causes = {{"overfitting", 0.5}, {"insufficient_capacity", 0.2}};
  ctx.Report(std::move(f));
}

void MetricImbalanceDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const std::string& f1_tag = ctx.facts.roles.Get(Role::kMacroF1);
  if (f1_tag.empty()) return;
  const double* f1 = frame.Scalar(f1_tag);
  if (!f1) return;
  // The accuracy of the same split as the F1 when both exist.
  const bool val = RoleScore(f1_tag, Role::kValLoss) > 0 || f1_tag.find("val") != std::string::npos ||
                   f1_tag.find("eval") != std::string::npos;
  std::string acc_tag = ctx.facts.roles.Get(val ? Role::kValAcc : Role::kAcc);
  if (acc_tag.empty()) acc_tag = ctx.facts.roles.Get(val ? Role::kAcc : Role::kValAcc);
  const double* acc = acc_tag.empty() ? nullptr : frame.Scalar(acc_tag);
  if (!acc || !std::isfinite(*acc) || !std::isfinite(*f1)) return;
  if (*acc < options_.min_accuracy || *acc - *f1 <= options_.gap) {
    streak_ = 0;
    return;
  }
  if (streak_ == 0) streak_start_ = frame.step;
  if (++streak_ < options_.sustain) return;
  Finding f;
  f.code = "METRIC_IMBALANCE";
  f.severity = Severity::kWarning;
  f.step = streak_start_;
  f.last_step = frame.step;
  f.location = f1_tag;
  f.summary = "accuracy " + FormatNumber(*acc, 4) + " but macro-F1 " + FormatNumber(*f1, 4) +
              ": the accuracy comes from the frequent classes; some classes are (almost) never predicted";
  f.evidence_json = json{{"accuracy", Num(*acc)}, {"macro_f1", Num(*f1)}, {"accuracy_tag", acc_tag}}.dump();
  f.causes = {{"class_imbalance", 0.8}};
  ctx.Report(std::move(f));
}

}  // namespace trainscope::doctor
