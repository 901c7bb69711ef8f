#include "doctor/detectors/validation.h"


#include <algorithm>
#include <cmath>
#include <limits>

#include "core/tag.h"

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
  val_tag_ = val_tag;
  evals_.push_back({frame.step, *val, TrainLevel(train_recent_)});
  if (!ctx.online()) return;  // offline: judged once, at Finish, on the whole curve
  std::optional<Finding> f = Judge(ctx);
  if (!f) return;
  if (reported_) f->evidence_json.clear(), f->causes.clear();  // the first report keeps its evidence
  reported_ = true;
  ctx.Report(std::move(*f));
}

void OverfittingDetector::Finish(const DetectorContext& ctx) {
  if (ctx.online()) return;
  std::optional<Finding> f = Judge(ctx);
  if (!f) return;
  // When the data first showed it: the shortest prefix of the evaluations that already
  // shows the same turn (bounded: long curves are dated at the end).
  if (evals_.size() <= 2000) {
    const std::vector<Eval> all = evals_;
    for (size_t k = options_.evals_after_best + 1; k < all.size(); ++k) {
      evals_.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k));
      std::optional<Finding> early = Judge(ctx);
      if (early && early->step == f->step) {
        json ev = json::parse(f->evidence_json, nullptr, false);
        if (ev.is_object()) {
          ev["detected_at"] = all[k - 1].step;
          f->evidence_json = ev.dump();
        }
        break;
      }
    }
    evals_ = all;
  }
  ctx.Report(std::move(*f));
}

std::vector<double> OverfittingDetector::Smoothed(const std::vector<Eval>& evals) {
  std::vector<double> out(evals.size());
  for (size_t i = 0; i < evals.size(); ++i) {
    if (i == 0 || i + 1 == evals.size()) {
      out[i] = evals[i].val;  // the ends have one neighbour: kept as they are
      continue;
    }
    double a = evals[i - 1].val, b = evals[i].val, c = evals[i + 1].val;
    out[i] = std::max(std::min(a, b), std::min(std::max(a, b), c));  // median of three
  }
  return out;
}

std::optional<Finding> OverfittingDetector::Judge(const DetectorContext& ctx) const {
  const size_t n = evals_.size();
  if (n < options_.evals_after_best + 1) return std::nullopt;
  const std::vector<double> sm = Smoothed(evals_);
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (sm[i] < sm[best]) best = i;
  }
  const size_t after = n - 1 - best;
  if (after < options_.evals_after_best) return std::nullopt;
  // (best indexes the smoothed curve; the finding is dated next to it, below.)
  for (size_t i = n - options_.evals_after_best; i < n; ++i) {
    if (sm[i] <= sm[best] + options_.rise * std::fabs(sm[best])) return std::nullopt;
  }
  // Dated at the lowest evaluation next to the smoothed curve's minimum (the median of three
  // sits on one of them).
  size_t turn = best;
  for (size_t i = best > 0 ? best - 1 : 0; i <= std::min(best + 1, n - 1); ++i) {
    if (evals_[i].val < evals_[turn].val) turn = i;
  }
  const Eval& b = evals_[turn];
  const Eval& now = evals_.back();
  const double val_now = sm[n - 1];
  if (!(now.train < (1 - options_.train_drop) * b.train)) return std::nullopt;  // train loss must still be falling
  if (val_now - sm[best] < options_.min_rise_of_first * std::fabs(evals_.front().val)) return std::nullopt;
  // And the rise clears the evaluation noise: sigma from the MAD of successive differences
  // (robust to the curve's own trend and to single outliers), the rise >= noise_sigmas of it.
  std::vector<double> diffs;
  for (size_t i = 1; i < n; ++i) diffs.push_back(evals_[i].val - evals_[i - 1].val);
  const double mid = Median(diffs);
  std::vector<double> dev;
  for (double d : diffs) dev.push_back(std::fabs(d - mid));
  const double noise = 1.4826 * Median(dev) / std::sqrt(2.0);
  if (val_now - sm[best] < options_.noise_sigmas * noise) return std::nullopt;
  const double gap_then = sm[best] - b.train, gap_now = val_now - now.train;
  if (!(gap_now > options_.gap_growth * std::max(gap_then, 0.0) && gap_now > 0)) return std::nullopt;
  Finding f;
  f.code = "OVERFITTING";
  f.severity = Severity::kWarning;
  f.step = b.step;
  f.last_step = now.step;
  f.location = val_tag_;
  f.summary = "validation loss turned at step " + std::to_string(b.step) + " (" + FormatNumber(b.val, 4) +
              "; the curve smoothed over 3 evaluations has its minimum " + FormatNumber(sm[best], 4) + " there) and rose to " +
              FormatNumber(val_now, 4) +
              " while the training loss fell from " + FormatNumber(b.train, 4) + " to " + FormatNumber(now.train, 4) +
              "; the gap grew from " + FormatNumber(gap_then, 4) + " to " + FormatNumber(gap_now, 4);
  f.evidence_json = json{{"best_val", Num(b.val)},        {"best_val_smoothed", Num(sm[best])},
                         {"best_step", b.step},           {"val_now", Num(now.val)},
                         {"val_now_smoothed", Num(val_now)}, {"train_at_best", Num(b.train)},
                         {"train_now", Num(now.train)},   {"gap_at_best", Num(gap_then)},
                         {"gap_now", Num(gap_now)},       {"evaluations", n},
                         {"evaluations_after_best", after}, {"smoothing", "median of 3 evaluations"}}
                        .dump();
  f.causes = {{"overfitting", 0.8}, {"insufficient_data", 0.4}};
  (void)ctx;  // judged on the evaluations alone
  return f;
}

// ---- non-finite metrics ----

bool IsMetricTag(std::string_view tag) {
  const std::string t = Lower(tag);
  if (tags::kSys.Holds(t) || HasPrefix(t, "system/") || tags::kTime.Holds(t) || tags::kMem.Holds(t)) return false;
  for (const char* not_metric : {"grad", "lr", "learning_rate", "learning rate", "time", "mem", "throughput", "mfu",
                                 "scale", "samples_per", "steps_per", "tokens_per", "_pct"}) {
    if (t.find(not_metric) != std::string::npos) return false;
  }
  for (const char* metric : {"loss", "acc", "ppl", "perplex", "f1", "precision", "recall", "map", "auc", "bleu",
                             "rouge", "wer", "cer", "score", "error", "top1", "top5", "iou", "dice", "reward",
                             "return", "nll", "bpc", "mse", "mae"}) {
    if (t.find(metric) != std::string::npos) return true;
  }
  return false;
}

bool NonfiniteMetricDetector::IsMetric(std::string_view tag) {
  auto it = is_metric_.find(tag);
  if (it == is_metric_.end()) it = is_metric_.emplace(tag, IsMetricTag(tag)).first;
  return it->second;
}

void NonfiniteMetricDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const std::string& loss_tag = ctx.facts.roles.Get(Role::kLoss);
  if (!loss_tag.empty()) {
    const double* loss = frame.Scalar(loss_tag);
    if (loss && !std::isfinite(*loss) && train_nonfinite_step_ < 0) train_nonfinite_step_ = frame.step;
  }
  const std::string& val_tag = ctx.facts.roles.Get(Role::kValLoss);
  for (const auto& [tag, value] : frame.scalars) {
    if (tag == loss_tag) continue;  // the training loss: the non-finite detector's
    if (tag != val_tag && !IsMetric(tag)) continue;
    PerTag& t = At(tags_, tag);
    ++t.points;
    if (std::isfinite(value)) continue;
    if (t.nonfinite++ == 0) {
      t.first_step = frame.step;
      t.first_value = value;
      t.train_nonfinite_step = train_nonfinite_step_;
    }
    t.last_step = frame.step;
  }
}

void NonfiniteMetricDetector::Finish(const DetectorContext& ctx) {
  // Series that went non-finite after the training loss did follow it: one info finding
  // lists them. A series that went non-finite on its own is a finding of its own.
  std::vector<std::string> followers;
  int64_t follow_first = std::numeric_limits<int64_t>::max(), follow_last = 0;
  for (const auto& [tag, t] : tags_) {
    if (t.nonfinite == 0) continue;
    if (t.train_nonfinite_step >= 0) {
      followers.push_back(tag);
      follow_first = std::min(follow_first, t.first_step);
      follow_last = std::max(follow_last, t.last_step);
      continue;
    }
    const bool is_loss = Lower(tag).find("loss") != std::string::npos;
    Finding f;
    f.code = is_loss ? "NONFINITE_LOSS" : "NONFINITE_METRIC";
    f.severity = Severity::kWarning;
    f.step = t.first_step;
    f.last_step = t.last_step;
    f.location = tag;
    const std::string spelled = std::isnan(t.first_value) ? "nan" : t.first_value > 0 ? "inf" : "-inf";
    f.summary = tag + " is non-finite (" + spelled + ") from step " + std::to_string(t.first_step) + ": " +
                std::to_string(t.nonfinite) + " of its " + std::to_string(t.points) +
                " points; the training loss was finite then, so the " + std::string(is_loss ? "loss" : "metric") +
                " itself overflowed (mixed-precision evaluation, a log of 0, an empty batch)";
    f.evidence_json = json{{"series", tag}, {"first_step", t.first_step}, {"last_step", t.last_step},
                           {"first_value", spelled}, {"nonfinite_points", t.nonfinite}, {"points", t.points}}.dump();
    f.causes = {{"precision_overflow", 0.4}, {"log_of_zero", 0.3}, {"division_by_zero", 0.2}};
    ctx.Report(std::move(f));
  }
  if (followers.empty()) return;
  Finding f;
  f.code = "NONFINITE_METRIC";
  f.severity = Severity::kInfo;
  f.step = follow_first;
  f.last_step = follow_last;
  f.location = "";
  std::string names;
  for (size_t i = 0; i < followers.size() && i < 8; ++i) names += (i ? ", " : "") + followers[i];
  if (followers.size() > 8) names += ", ...";
  f.summary = std::to_string(followers.size()) + " more series went non-finite after the training loss did (step " +
              std::to_string(train_nonfinite_step_) + "): " + names;
  json series = json::object();
  for (const std::string& tag : followers) {
    const PerTag& t = tags_.at(tag);
    series[tag] = {{"first_step", t.first_step}, {"nonfinite_points", t.nonfinite}, {"points", t.points}};
  }
  f.evidence_json = json{{"series", series}, {"training_loss_nonfinite_step", train_nonfinite_step_}}.dump();
  f.causes = {{"lr_too_high", 0.3}};
  ctx.Report(std::move(f));
}

// ---- chance level on held-out data ----

void ChanceLevelDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (const double* v = frame.Scalar(tags::kInputLabelMax); v && std::isfinite(*v)) label_max_ = std::max(label_max_, *v);
  if (const double* v = frame.Scalar(tags::kInputLabelMin); v && std::isfinite(*v)) {
    label_min_ = std::isnan(label_min_) ? *v : std::min(label_min_, *v);
  }
  const std::string& val_tag = ctx.facts.roles.Get(Role::kValLoss);
  if (const double* v = val_tag.empty() ? nullptr : frame.Scalar(val_tag); v && std::isfinite(*v)) {
    val_tag_ = val_tag;
    if (val_thin_.Admit()) {
      val_steps_.push_back(static_cast<double>(frame.step));
      val_values_.push_back(*v);
      val_thin_.Trim(val_steps_, val_values_);
    }
    val_last_.push_back(*v);
    if (val_last_.size() > options_.min_evals) val_last_.erase(val_last_.begin());
    val_last_step_ = frame.step;
  }
  std::string acc_tag = ctx.facts.roles.Get(Role::kValAcc);
  if (acc_tag.empty()) acc_tag = ctx.facts.roles.Get(Role::kAcc);
  if (const double* v = acc_tag.empty() ? nullptr : frame.Scalar(acc_tag); v && std::isfinite(*v)) {
    acc_tag_ = acc_tag;
    // The trailing run of (within 1e-9 of) the newest value.
    if (acc_evals_ > 0 && std::fabs(*v - acc_last_) <= 1e-9 * std::max(1.0, std::fabs(*v))) {
      ++acc_run_;
    } else {
      acc_run_ = 1;
      acc_run_start_ = frame.step;
    }
    ++acc_evals_;
    acc_last_ = *v;
    acc_last_step_ = frame.step;
  }
}

void ChanceLevelDetector::Finish(const DetectorContext& ctx) {
  JudgeValLoss(ctx);
  JudgeAccuracy(ctx);
}

void ChanceLevelDetector::JudgeValLoss(const DetectorContext& ctx) {
  const size_t n = val_thin_.arrivals();
  if (n < options_.min_evals) return;
  const std::vector<double>& values = val_values_;
  const double median = Median(values);
  int c = ctx.facts.num_classes;
  std::string from = c > 1 ? "config" : "";
  if (c <= 1 && label_min_ >= 0 && label_max_ >= 1 && label_max_ < 1e6 && label_max_ == std::floor(label_max_)) {
    c = static_cast<int>(label_max_) + 1;
    from = "label range";
  }
  if (c <= 1) {
    for (int k = 2; k <= options_.max_inferred_classes; ++k) {
      const double lk = std::log(static_cast<double>(k));
      if (std::fabs(median - lk) <= options_.tolerance * lk) {
        c = k;
        from = "inferred from the loss level";
        break;
      }
    }
  }
  if (c <= 1) return;
  const double chance = std::log(static_cast<double>(c));
  if (std::fabs(median - chance) > options_.tolerance * chance) return;
  for (double v : val_last_) {
    if (std::fabs(v - chance) > options_.tolerance * chance) return;
  }
  const double z = RobustSlope(val_steps_, values).trend_z;
  if (z <= -2) return;  // still going down
  Finding f;
  f.code = "LOSS_PLATEAU";
  f.severity = Severity::kWarning;
  f.step = static_cast<int64_t>(val_steps_.front());
  f.last_step = val_last_step_;
  f.location = val_tag_;
  const bool inferred = from == "inferred from the loss level";
  f.summary = "validation loss is stuck at chance level: median " + FormatNumber(median, 4) + " ~ ln(" + std::to_string(c) +
              ") = " + FormatNumber(chance, 4) + " over " + std::to_string(n) + " evaluations" +
              (inferred ? ", chance level if this is a " + std::to_string(c) + "-class classifier (no class count in the config)"
                        : " (" + std::to_string(c) + " classes, " + from + "): on held-out data the model predicts uniform probabilities");
  f.evidence_json = json{{"initial", Num(values.front())}, {"now", Num(val_last_.back())}, {"median", Num(median)},
                         {"evaluations", n}, {"at_chance", true}, {"chance_level", Num(chance)}, {"classes", c},
                         {"classes_from", from}, {"trend_z", Num(z)}}.dump();
  f.causes = {{"label_noise", 0.4}, {"lr_too_low", 0.3}, {"bad_init", 0.2}};
  ctx.Report(std::move(f));
}

void ChanceLevelDetector::JudgeAccuracy(const DetectorContext& ctx) {
  const size_t n = acc_evals_, run = acc_run_;
  if (n < options_.constant_evals) return;
  const double last = acc_last_;
  if (run < options_.constant_evals || run * 2 < n) return;
  const double share = last > 1 ? last / 100 : last;  // percent or fraction
  if (share >= 0.99) return;  // constant at (almost) perfect: nothing to learn
  Finding f;
  f.code = "METRIC_STALL";
  f.severity = Severity::kWarning;
  f.step = acc_run_start_;
  f.last_step = acc_last_step_;
  f.location = acc_tag_;
  f.summary = acc_tag_ + " is exactly " + FormatNumber(last, 6) + " at each of the last " + std::to_string(run) +
              " evaluations: the model gives every example the same class, and " + FormatNumber(last, 6) +
              " is that class's share (the majority rate when it is the most frequent)";
  f.evidence_json = json{{"value", Num(last)}, {"constant_evaluations", run}, {"evaluations", n},
                         {"from_step", acc_run_start_}, {"constant", true}}.dump();
  f.causes = {{"class_imbalance", 0.4}, {"lr_too_low", 0.3}, {"label_noise", 0.3}};
  ctx.Report(std::move(f));
}

void MetricStallDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (std::isfinite(ctx.facts.loss)) {
    train_recent_.push_back(ctx.facts.loss);
    if (train_recent_.size() > 20) train_recent_.pop_front();
  }
  std::string tag = ctx.facts.roles.Get(Role::kValAcc);
  const bool per_batch = tag.empty();
  if (per_batch) tag = ctx.facts.roles.Get(Role::kAcc);
  const double* m = tag.empty() ? nullptr : frame.Scalar(tag);
  if (!m || !std::isfinite(*m)) return;
  double metric = *m;
  if (per_batch) {
    batch_metric_.push_back(metric);
    if (batch_metric_.size() > options_.per_batch_window) batch_metric_.pop_front();
    if (batch_metric_.size() < options_.per_batch_window) return;
    metric = Median(std::vector<double>(batch_metric_.begin(), batch_metric_.end()));
  }
  now_ = {frame.step, metric, train_recent_.empty() ? kNaN : TrainLevel(train_recent_)};
  if (evaluations_ == 0 || now_.metric > best_.metric + options_.min_delta) {
    best_ = now_;
    best_index_ = evaluations_;
  }
  ++evaluations_;
}

void MetricStallDetector::Finish(const DetectorContext& ctx) {
  if (evaluations_ < options_.evals) return;
  const size_t since = evaluations_ - 1 - best_index_;
  if (since < options_.evals || since * 2 < evaluations_) return;
  const Point& b = best_;
  const Point& now = now_;
  if (!(std::isfinite(b.train) && std::isfinite(now.train) && now.train < (1 - options_.train_drop) * b.train)) return;
  if ((b.metric > 1 ? b.metric / 100 : b.metric) >= 0.99) return;  // at its ceiling (percent or fraction): nothing to gain
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
