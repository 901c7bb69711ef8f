// Detectors on weights, their updates and the learning rate: the update/weight ratio, weights
// left symmetric by a constant initialisation, normalisation scales collapsing or blowing
// up, and learning-rate anomalies.
#include "doctor/detectors/gradients.h"

#include <algorithm>
#include <cmath>

#include "core/tag.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

// ---- update ratio ----

void UpdateRatioDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  if (std::isfinite(facts.grad_norm) && facts.grad_norm > 0) {
    if (early_grad_.size() < options_.early_grad_points) early_grad_.push_back(facts.grad_norm);
    recent_grad_.push_back(facts.grad_norm);
    if (recent_grad_.size() > options_.low_window) recent_grad_.pop_front();
  }
  if (std::isfinite(facts.loss)) {
    losses_.emplace_back(frame.step, facts.loss);
    while (losses_.size() > 1 && losses_.front().first < frame.step - 4 * static_cast<int64_t>(options_.window)) {
      losses_.pop_front();
    }
  }
  std::vector<double> step_ratios;
  std::string worst;
  double worst_median = 0;
  MeasureRatios(frame, facts, &step_ratios, &worst, &worst_median);
  if (worst_median >= options_.high) ReportHigh(frame.step, worst, worst_median, ctx);
  if (step_ratios.empty()) return;
  CheckLow(frame.step, step_ratios, ctx);
}

// Each weight's update/weight ratio at this step, and the parameter whose median over the
// window is the largest.
void UpdateRatioDetector::MeasureRatios(const StepFrame& frame, const RunFacts& facts, std::vector<double>* ratios,
                                        std::string* worst_param, double* worst_param_median) {
  std::vector<double>& step_ratios = *ratios;
  std::string& worst = *worst_param;
  double& worst_median = *worst_param_median;
  std::unordered_map<std::string_view, const TensorStats*> weights;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kWeight.Holds(tag, &rest)) weights[rest] = &s;
  }
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kUpdate.Holds(tag, &rest)) continue;
    auto w = weights.find(rest);
    if (w == weights.end()) continue;
    const std::string p(rest);
    if (IsBiasOrNormParam(p, facts) || s.numel < 2) continue;
    const double wn = w->second->l2_norm(), un = s.l2_norm();
    if (!(wn > 1e-12) || !std::isfinite(un) || !std::isfinite(wn)) continue;
    if (un == 0) continue;  // a skipped step (guard mode, accumulation): not a "low" update
    const double r = un / wn;
    step_ratios.push_back(r);
    if (frame.step < facts.first_step + options_.skip_steps) continue;
    auto& d = ratios_[p];
    d.emplace_back(frame.step, r);
    const auto window = static_cast<int64_t>(options_.window);
    while (d.size() > options_.min_records && d[1].first <= frame.step - window + 1) d.pop_front();
    if (d.size() >= options_.min_records && frame.step - d.front().first + 1 >= window) {
      std::deque<double> values;
      for (const auto& point : d) values.push_back(point.second);
      const double med = Median(values);
      if (med > worst_median) {
        worst_median = med;
        worst = p;
      }
    }
  }
}

void UpdateRatioDetector::ReportHigh(int64_t step_now, const std::string& worst, double worst_median,
                                     const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  if (high_location_.empty()) high_location_ = worst;
  Finding f;
  f.code = "UPDATE_RATIO_HIGH";
  f.severity = Severity::kWarning;
  f.step = ratios_[worst].front().first;
  f.last_step = step_now;
  f.location = high_location_;
  const std::string changes = "each step changes " + worst + " by " + FormatNumber(worst_median, 3) +
                              " of its norm (median over the last " + std::to_string(options_.window) + " steps; ~1e-3 is ";
  f.summary = changes + "healthy): the learning rate is too high for it";
  json evidence = {{"param", worst}, {"update_ratio_median", Num(worst_median)}, {"lr", Num(facts.lr)}};
  std::vector<double> xs, ys;
  for (const auto& [step, loss] : losses_) {  // the last 4 windows of steps
    xs.push_back(static_cast<double>(step));
    ys.push_back(loss);
  }
  if (xs.size() >= 10) {
    const double z = RobustSlope(xs, ys).trend_z;
    evidence["loss_trend_z"] = Num(z);
    if (z <= options_.falling_z) {
      f.severity = Severity::kInfo;
      f.summary = changes + "usual), and the loss still falls (Mann-Kendall z " + FormatNumber(z, 2) +
                  "): large steps that make progress";
    }
  }
  f.evidence_json = evidence.dump();
  f.causes = {{"lr_too_high", f.severity == Severity::kInfo ? 0.3 : 0.8}};
  ctx.Report(std::move(f));
}

// The median ratio over layers and steps too low while the LR was not decayed on purpose:
// the weights barely move, unless the training has converged.
void UpdateRatioDetector::CheckLow(int64_t step_now, const std::vector<double>& step_ratios, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  global_.push_back(Median(step_ratios));
  if (global_.size() > options_.low_window) global_.pop_front();
  if (global_.size() < options_.low_window) return;
  const double med = Median(global_);
  if (med >= options_.low) return;
  // A schedule that has decayed the LR on purpose is not "too low".
  if (std::isfinite(facts.lr) && facts.lr_max > 0 && facts.lr < options_.decayed_lr_fraction * facts.lr_max) return;
  Finding f;
  f.code = "UPDATE_RATIO_LOW";
  f.severity = Severity::kWarning;
  f.step = step_now - static_cast<int64_t>(options_.low_window) + 1;
  f.last_step = step_now;
  f.location = "";
  if (!low_reported_) {
    const std::string updates = "updates are " + FormatNumber(med, 3) + " of the weights' norm (median over layers and " +
                                std::to_string(options_.low_window) + " steps; ~1e-3 is ";
    f.summary = updates + "healthy): the weights barely move";
    json evidence = {{"update_ratio_median", Num(med)}, {"lr", Num(facts.lr)}};
    f.causes = {{"lr_too_low", 0.8}};
    std::vector<double> recent_loss;
    for (const auto& [step, loss] : losses_) recent_loss.push_back(loss);
    const double loss_now = recent_loss.empty() ? kNaN : Median(recent_loss);
    const bool loss_fell = facts.loss_first > 0 && loss_now <= options_.converged_loss_fraction * facts.loss_first;
    const bool grads_known = early_grad_.size() >= options_.early_grad_points && !recent_grad_.empty();
    const double grad_early = grads_known ? Median(early_grad_) : kNaN;
    const double grad_now = grads_known ? Median(recent_grad_) : kNaN;
    if (loss_fell && (!grads_known || grad_now <= options_.converged_grad_fraction * grad_early)) {
      f.severity = Severity::kInfo;
      f.summary = updates + "usual), after the loss fell from " + FormatNumber(facts.loss_first, 3) + " to " +
                  FormatNumber(loss_now, 3) +
                  (grads_known ? " and the gradients shrank " + FormatNumber(grad_early / grad_now, 2) + "x" : "") +
                  ": the training has converged; small gradients, not a low learning rate";
      evidence["converged"] = true;
      evidence["loss_first"] = Num(facts.loss_first);
      evidence["loss_recent"] = Num(loss_now);
      if (grads_known) {
        evidence["grad_norm_early"] = Num(grad_early);
        evidence["grad_norm_recent"] = Num(grad_now);
      }
      f.causes.clear();
      f.actions = {"Nothing to raise: the loss has converged. Judge the model on held-out data: a loss near its floor "
                   "on the training data says nothing about generalisation"};
    }
    f.evidence_json = evidence.dump();
    low_severity_ = f.severity;
  }
  f.severity = low_severity_;  // later reports extend the first, as it was judged
  low_reported_ = true;
  ctx.Report(std::move(f));
}

// ---- symmetry ----

void WeightSymmetryDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kWeight.Holds(tag, &rest)) continue;
    const std::string p(rest);
    if (!seen_.insert(p).second) continue;  // only the first record: the initialisation
    if (IsBiasOrNormParam(p, ctx.facts) || s.numel < 2 || s.nan + s.inf) continue;
    // Only a parameter that mixes units (a matrix, a kernel) makes its units alike when
    // constant: a vector scales each unit alone (LayerScale starts at a constant 1e-6).
    if (const int dims = ctx.facts.ParamDims(p); dims >= 0 && dims < 2) continue;
    const double sd = s.stddev();
    if (!(sd <= options_.rel_std * std::max(1.0, std::fabs(s.mean())))) continue;
    Finding f;
    f.code = "WEIGHT_SYMMETRY";
    f.severity = Severity::kWarning;
    f.step = f.last_step = frame.step;
    f.location = p;
    const bool zero = s.zeros == s.numel;
    f.summary = p + (zero ? " starts all zero" : " starts with every value equal (" + FormatNumber(s.mean(), 3) + ")") +
                ": all its units compute the same and get the same gradient, so they never differ";
    f.evidence_json = json{{"mean", Num(s.mean())}, {"std", Num(sd)}, {"numel", s.numel}, {"all_zero", zero}}.dump();
    f.causes = {{"constant_init", 0.9}};
    ctx.Report(std::move(f));
  }
  for (const auto& [tag, v] : frame.vectors) {
    std::string_view rest;
    // Two units always get equal gradient norms under a 2-class softmax/cross-entropy output
    // (the gradients of the two logits are each other's negative): three or more.
    if (!tags::kGradUnits.Holds(tag, &rest) || v.size() < 3) continue;
    Welford w;
    for (float x : v) w.Add(x);
    const double mean = w.mean(), sd = std::sqrt(std::max(0.0, w.variance()));
    auto& streak = unit_streak_[std::string(rest)];
    if (!(mean > 0) || sd / mean > options_.units_cv) {
      streak = 0;
      continue;
    }
    if (++streak < options_.sustain) continue;
    Finding f;
    f.code = "WEIGHT_SYMMETRY";
    f.severity = Severity::kWarning;
    f.step = f.last_step = frame.step;
    f.location = std::string(rest);
    f.summary = "all " + std::to_string(v.size()) + " units of " + std::string(rest) +
                " get the same gradient (coefficient of variation " + FormatNumber(sd / mean, 3) +
                "): they were initialised alike and stay alike";
    f.evidence_json = json{{"units", v.size()}, {"mean_unit_grad_norm", Num(mean)}, {"cv", Num(sd / mean)}}.dump();
    f.causes = {{"constant_init", 0.9}};
    ctx.Report(std::move(f));
  }
}

// ---- norm scale ----

void NormScaleDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kWeight.Holds(tag, &rest)) continue;
    const std::string p(rest);
    if (ClassifyParam(p, ctx.facts) != ParamRole::kNormScale) continue;
    const double rms = s.rms();
    if (!std::isfinite(rms)) continue;
    auto [it, added] = baseline_.try_emplace(p, rms);
    const double base = it->second;
    if (!(base > 0)) continue;
    const double ratio = rms / base;
    auto& [len, start] = streak_[p];
    if (ratio > options_.collapse && ratio < options_.blowup) {
      len = 0;
      continue;
    }
    if (len == 0) start = frame.step;
    if (++len < options_.sustain) continue;
    Finding f;
    f.code = "NORM_SCALE_COLLAPSE";
    f.severity = Severity::kWarning;
    f.step = start;
    f.last_step = frame.step;
    f.location = p;
    const bool collapsed = ratio <= options_.collapse;
    f.summary = "the learned scale of " + RunFacts::ModuleOfParam(p) + (collapsed ? " collapsed to " : " blew up to ") +
                FormatNumber(ratio, 3) + "x its initial RMS (" + FormatNumber(rms, 3) + " from " + FormatNumber(base, 3) + ")";
    f.evidence_json = json{{"rms", Num(rms)}, {"initial_rms", Num(base)}, {"ratio", Num(ratio)}}.dump();
    f.causes = collapsed ? std::vector<Cause>{{"weight_decay_on_norm", 0.6}, {"lr_too_high", 0.2}}
                         : std::vector<Cause>{{"lr_too_high", 0.5}, {"unnormalized_input", 0.3}};
    ctx.Report(std::move(f));
  }
}

// ---- learning rate ----

void LrAnomalyDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const std::string& tag = ctx.facts.roles.Get(Role::kLr);
  const double* lr = tag.empty() ? nullptr : frame.Scalar(tag);
  if (!lr) return;
  const double x = *lr;
  ++points_;
  if (points_ == bad_from_start_ + 1 && !(x > 0 && std::isfinite(x))) {
    ++bad_from_start_;
    if (bad_from_start_ == options_.zero_points) {
      Finding f;
      f.code = "LR_ANOMALY";
      f.severity = Severity::kWarning;
      f.step = ctx.facts.first_step;
      f.last_step = frame.step;
      f.location = tag;
      f.summary = "the learning rate has been " + FormatNumber(x, 3) + " since the start: nothing can train";
      f.evidence_json = json{{"lr", Num(x)}, {"points", bad_from_start_}}.dump();
      f.causes = {{"lr_too_low", 0.7}};
      ctx.Report(std::move(f));
    }
  }
  if (std::isfinite(prev_) && prev_ > 0 && points_ > 5 && x >= options_.jump_ratio * prev_ &&
      x >= options_.above_max_ratio * std::max(max_before_, prev_)) {
    Finding f;
    f.code = "LR_ANOMALY";
    f.severity = Severity::kWarning;
    f.step = f.last_step = frame.step;
    f.location = tag;
    f.summary = "the learning rate jumped from " + FormatNumber(prev_, 3) + " to " + FormatNumber(x, 3) + " at step " +
                std::to_string(frame.step) + " (" + FormatNumber(x / prev_, 3) + "x, above anything before)";
    f.evidence_json = json{{"lr", Num(x)}, {"previous", Num(prev_)}, {"max_before", Num(max_before_)}}.dump();
    f.causes = {{"lr_too_high", 0.6}, {"scheduler_bug", 0.5}};
    ctx.Report(std::move(f));
  }
  if (std::isfinite(x) && x > max_) {
    max_ = x;
    max_step_ = frame.step;
  }
  if (std::isfinite(x)) ++lr_points_;
  if (max_ > 0 && std::isfinite(x) && x < options_.collapse_ratio * max_) {
    if (collapsed_points_++ == 0) {
      collapsed_since_ = frame.step;
      points_before_collapse_ = lr_points_ - 1;
    }
    const double needed = std::max(static_cast<double>(options_.collapse_points),
                                   options_.collapse_fraction * static_cast<double>(points_before_collapse_));
    if (static_cast<double>(collapsed_points_) >= needed && !collapse_reported_) {
      collapse_reported_ = true;
      Finding f;
      f.code = "LR_ANOMALY";
      f.severity = Severity::kWarning;
      f.step = collapsed_since_;
      f.last_step = frame.step;
      f.location = tag;
      f.summary = "the learning rate collapsed: it fell from " + FormatNumber(max_, 3) + " at step " +
                  std::to_string(max_step_) + " to " + FormatNumber(x, 3) + " by step " + std::to_string(frame.step) +
                  " (below " + FormatNumber(options_.collapse_ratio, 2) + " of its maximum since step " +
                  std::to_string(collapsed_since_) + "): nothing trains any more";
      f.evidence_json = json{{"lr", Num(x)}, {"lr_max", Num(max_)}, {"lr_max_step", max_step_},
                             {"collapsed_since", collapsed_since_}, {"points_collapsed", collapsed_points_}}
                            .dump();
      f.causes = {{"lr_schedule_collapsed", 0.85}};
      ctx.Report(std::move(f));
    }
  } else {
    collapsed_points_ = 0;
  }
  if (std::isfinite(x)) {
    if (std::isfinite(prev_)) max_before_ = std::max(max_before_, prev_);
    prev_ = x;
  }
}

}  // namespace trainscope::doctor
