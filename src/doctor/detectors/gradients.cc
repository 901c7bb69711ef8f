#include "doctor/detectors/gradients.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/tag.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

double Rms(const TensorStats& s) {
  return s.finite() ? std::sqrt(s.sum_squares / static_cast<double>(s.finite())) : kNaN;
}

double MedianOf(const std::deque<double>& d) {
  std::vector<double> v(d.begin(), d.end());
  return Median(v);
}

// Weight matrices (not biases, not norm scales, not embeddings) in forward order, with
// their gradient stats at this step.
std::vector<std::pair<std::string, const TensorStats*>> WeightGradsByDepth(const StepFrame& frame,
                                                                            const RunFacts& facts) {
  std::vector<std::pair<std::string, const TensorStats*>> out;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kGrad.Holds(tag, &rest)) continue;
    const std::string p(rest);
    if (ClassifyParam(p, facts) != ParamRole::kWeight || s.numel < 2) continue;
    if (facts.ParamIndex(p) < 0) continue;
    out.emplace_back(p, &s);
  }
  std::stable_sort(out.begin(), out.end(),
                   [&](const auto& a, const auto& b) { return facts.ParamIndex(a.first) < facts.ParamIndex(b.first); });
  return out;
}

}  // namespace

// ---- explosion ----

bool GradExplosionDetector::BeyondLogNoise(const RollingMedianMad& logs, double norm) const {
  if (!(norm > 0) || logs.count() < options_.warmup) return true;
  return !(logs.RobustZ(std::log(norm)) < options_.noise_z);
}

void GradExplosionDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  // Per layer: the largest jump against the layer's own median.
  std::string worst;
  double worst_ratio = 0, worst_z = 0;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kGrad.Holds(tag, &rest)) continue;
    const double n = s.l2_norm();
    if (!std::isfinite(n) || s.nan + s.inf) continue;
    auto [it, added] = layers_.try_emplace(std::string(rest), options_.window);
    RollingMedianMad& m = it->second;
    RollingMedianMad& logs = layers_log_.try_emplace(std::string(rest), options_.window).first->second;
    auto& early = layers_early_[std::string(rest)];
    if (early.size() < options_.early) early.push_back(n);
    if (m.count() >= options_.warmup) {
      const double med = m.Median();
      // The robust z costs three medians: only the layer with the largest jump pays it.
      if (med > 0 && n / med > worst_ratio && n > Median(early) && BeyondLogNoise(logs, n)) {
        worst_ratio = n / med;
        worst = std::string(rest);
        worst_z = m.RobustZ(n);
      }
    }
    m.Add(n);
    if (n > 0) logs.Add(std::log(n));
  }
  if (!worst.empty() && !(worst_z > options_.z)) {
    worst.clear();
    worst_ratio = 0;
  }
  // The global norm per model: with several models, each one's own (its global_norm
  // series, else the root of its parameters' squared gradient norms); else the run's.
  std::map<std::string, double> norms;
  if (facts.models.size() >= 2) {
    std::map<std::string, double> squares;
    for (const auto& [tag, s] : frame.stats) {
      std::string_view rest;
      if (!tags::kGrad.Holds(tag, &rest)) continue;
      squares[facts.ModelOf(rest)] += s.nan + s.inf ? std::numeric_limits<double>::infinity() : s.sum_squares;
    }
    for (const auto& [model, sq] : squares) norms[model] = std::sqrt(sq);
    for (const auto& [tag, v] : frame.scalars) {
      std::string_view rest;
      if (!tags::kGrad.Holds(tag, &rest) || rest.size() < 11 || rest.substr(rest.size() - 11) != "global_norm") continue;
      const std::string_view head = rest.substr(0, rest.size() - 11);
      norms[head.empty() ? std::string() : facts.ModelOf(head)] = v;
    }
  } else if (std::isfinite(facts.grad_norm)) {
    norms[""] = facts.grad_norm;
  }
  double g = kNaN, global_med = kNaN;
  bool global_fired = false;
  std::string fired_model;
  for (const auto& [model, norm] : norms) {
    if (!std::isfinite(norm)) continue;
    NormSeries& series = global_.try_emplace(model, options_.window).first->second;
    if (series.early.size() < options_.early) series.early.push_back(norm);
    if (series.values.count() >= options_.warmup && !global_fired) {
      const double med = series.values.Median();
      if (med > 0 && norm >= options_.ratio * med && series.values.RobustZ(norm) > options_.z &&
          norm > Median(series.early) && BeyondLogNoise(series.logs, norm)) {
        global_fired = true;
        g = norm;
        global_med = med;
        fired_model = model;
      }
    }
    series.values.Add(norm);
    if (norm > 0) series.logs.Add(std::log(norm));
  }
  if (!global_fired) g = facts.models.size() >= 2 ? kNaN : facts.grad_norm;
  // Under gradient clipping (the norm pinned at the script's max_norm, RunFacts::clip_norm)
  // no layer's gradient reaches the update larger than the clip: a layer's jump is what
  // the clip is there for, not an explosion. (A global norm cannot jump past the clip.)
  const bool layer_fired = worst_ratio >= options_.layer_ratio && !(facts.clip_norm > 0);
  if (global_fired || layer_fired) {
    Finding f;
    f.code = "GRAD_EXPLOSION";
    f.severity = Severity::kWarning;
    f.step = f.last_step = frame.step;
    std::string loc = !worst.empty()          ? worst
                      : !fired_model.empty()   ? tags::kGrad.Of(fired_model) + "/global_norm"
                      : facts.roles.Has(Role::kGradNorm) ? facts.roles.Get(Role::kGradNorm)
                                                         : std::string(tags::kGradGlobalNorm);
    if (location_.empty()) location_ = loc;
    f.location = location_;
    if (global_fired) {
      f.summary = "gradient norm jumped to " + FormatNumber(g, 3) + " at step " + std::to_string(frame.step) + ", " +
                  FormatNumber(g / global_med, 3) + "x its median " + FormatNumber(global_med, 3) +
                  (worst.empty() ? "" : "; the largest jump in " + worst + " (" + FormatNumber(worst_ratio, 3) + "x)");
    } else {
      f.summary = "gradient of " + worst + " jumped " + FormatNumber(worst_ratio, 3) + "x its median at step " +
                  std::to_string(frame.step);
    }
    f.evidence_json = json{{"grad_norm", Num(g)}, {"grad_norm_median", Num(global_med)}, {"layer", worst},
                           {"layer_ratio", Num(worst_ratio)}, {"lr", Num(facts.lr)},
                           {"flight_recorder", ctx.flight.Snapshot(worst.empty() ? std::vector<std::string>{}
                                                                                  : std::vector<std::string>{tags::kGrad.Of(worst)})}}
                          .dump();
    f.causes = {{"gradient_explosion", 0.7}, {"lr_too_high", 0.4}, {"bad_batch", 0.2}};
    ctx.Report(std::move(f));
  }
  // By depth.
  const auto by_depth = WeightGradsByDepth(frame, facts);
  if (by_depth.size() >= 3) {
    const double first = Rms(*by_depth.front().second), last = Rms(*by_depth.back().second);
    if (std::isfinite(first) && std::isfinite(last) && last > 0) {
      depth_.push_back(first / last);
      if (depth_.size() > options_.depth_window) depth_.pop_front();
      if (depth_.size() == options_.depth_window) {
        const double med = MedianOf(depth_);
        if (med >= options_.depth_ratio) {
          Finding f;
          f.code = "GRAD_EXPLOSION";
          f.severity = Severity::kWarning;
          f.step = f.last_step = frame.step;
          f.location = by_depth.front().first;
          f.summary = "gradients grow toward the input: the first layer's RMS gradient is " + FormatNumber(med, 3) +
                      "x the last layer's (median over " + std::to_string(options_.depth_window) + " steps)";
          f.evidence_json = json{{"first_layer", by_depth.front().first}, {"last_layer", by_depth.back().first},
                                 {"ratio_median", Num(med)}}.dump();
          f.causes = {{"bad_init", 0.6}, {"gradient_explosion", 0.5}};
          ctx.Report(std::move(f));
        }
      }
    }
  }
}

// ---- vanishing ----

void GradVanishingDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  // Weights whose gradient is exactly zero everywhere.
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kGrad.Holds(tag, &rest)) continue;
    const std::string p(rest);
    if (IsBiasOrNormParam(p, facts) || s.numel < 2) continue;
    auto& [len, start] = zero_streak_[p];
    if (s.zeros != s.numel) {
      len = 0;
      continue;
    }
    if (len == 0) start = frame.step;
    if (++len < options_.zero_steps) continue;
    Finding f;
    f.code = "GRAD_VANISHING";
    f.severity = Severity::kWarning;
    f.step = start;
    f.last_step = frame.step;
    f.location = p;
    f.summary = "the gradient of " + p + " has been exactly zero for " + std::to_string(len) +
                " steps: this layer does not learn";
    f.evidence_json = json{{"zero_steps", len}, {"numel", s.numel}}.dump();
    std::vector<Cause> causes;
    // Every gradient exactly 0 from the first step, with a loss that moves: the gradients
    // were there and were cleared (zero_grad between backward and step), or the graph was
    // cut; the knowledge base requires those facts (facts.cc).
    if (facts.grads_zero_from_start) RaiseCause(&causes, "gradients_cleared_before_step", 0.8);
    RaiseCause(&causes, "constant_init", 0.4);
    RaiseCause(&causes, "dying_relu", 0.4);
    f.causes = causes;
    ctx.Report(std::move(f));
  }
  // By depth.
  const auto by_depth = WeightGradsByDepth(frame, facts);
  if (by_depth.size() >= 3) {
    const double first = Rms(*by_depth.front().second), last = Rms(*by_depth.back().second);
    if (std::isfinite(first) && std::isfinite(last) && last > 0 && first > 0) {
      depth_.push_back(first / last);
      if (depth_.size() > options_.depth_window) depth_.pop_front();
      if (depth_.size() == options_.depth_window) {
        const double med = MedianOf(depth_);
        if (med <= options_.depth_ratio) {
          Finding f;
          f.code = "GRAD_VANISHING";
          f.severity = Severity::kWarning;
          f.step = f.last_step = frame.step;
          f.location = by_depth.front().first;
          json layers = json::object();
          for (const auto& [p, s] : by_depth) layers[p] = Num(Rms(*s));
          f.summary = "gradients vanish toward the input: the first layer's RMS gradient is " + FormatNumber(med, 3) +
                      "x the last layer's (median over " + std::to_string(options_.depth_window) + " steps)";
          if (!depth_reported_) {
            f.evidence_json = json{{"first_layer", by_depth.front().first}, {"last_layer", by_depth.back().first},
                                   {"ratio_median", Num(med)}, {"rms_grad_by_layer", layers}}.dump();
          }
          depth_reported_ = true;
          std::vector<Cause> causes;
          bool saturating = false;
          for (const auto& [tag, s] : frame.stats) {
            if (tags::kAct.Holds(tag) && !std::isnan(s.saturated_fraction) && s.saturated_fraction > 0.3) saturating = true;
          }
          RaiseCause(&causes, "saturating_activation", saturating ? 0.7 : 0.4);
          RaiseCause(&causes, "bad_init", 0.4);
          f.causes = causes;
          ctx.Report(std::move(f));
        }
      }
    }
  }
  // Globally tiny.
  const double g = facts.grad_norm;
  if (std::isfinite(g) && g < options_.global_floor && std::isfinite(facts.loss) && facts.loss > 1e-3) {
    if (floor_streak_ == 0) floor_start_ = frame.step;
    if (++floor_streak_ >= 20) {
      Finding f;
      f.code = "GRAD_VANISHING";
      f.severity = Severity::kWarning;
      f.step = floor_start_;
      f.last_step = frame.step;
      f.location = facts.roles.Has(Role::kGradNorm) ? facts.roles.Get(Role::kGradNorm) : tags::kGradGlobalNorm;
      f.summary = "the global gradient norm is " + FormatNumber(g, 3) + " while the loss is still " + FormatNumber(facts.loss, 3);
      f.evidence_json = json{{"grad_norm", Num(g)}, {"loss", Num(facts.loss)}}.dump();
      f.causes = {{"saturating_activation", 0.4}, {"dying_relu", 0.4}, {"constant_init", 0.3}};
      if (facts.grads_zero_from_start && g == 0) RaiseCause(&f.causes, "gradients_cleared_before_step", 0.8);
      ctx.Report(std::move(f));
    }
  } else {
    floor_streak_ = 0;
  }
}

// ---- not zeroed ----

void GradNotZeroedDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  for (const auto& [tag, value] : frame.scalars) {
    std::string_view rest;
    if (!HasPrefix(tag, "train/", &rest)) continue;
    std::string model;
    if (rest != "grad_zeroed") {
      const size_t slash = rest.rfind('/');
      if (slash == std::string_view::npos || rest.substr(slash + 1) != "grad_zeroed") continue;
      model = std::string(rest.substr(0, slash));
    }
    // The last value at this step decides (StepFrame::Scalar); judge each series once.
    if (frame.Scalar(tag) != &value) continue;
    Streak& streak = streaks_[model];
    if (value != 0) {
      streak.length = 0;
      continue;
    }
    if (streak.length == 0) streak.start = frame.step;
    if (++streak.length < options_.sustain) continue;
    Finding f;
    f.code = "GRAD_NOT_ZEROED";
    f.severity = Severity::kCritical;
    f.step = streak.start;
    f.last_step = frame.step;
    f.location = ctx.facts.ModelLabel(model);
    f.summary = "gradients " + (f.location == "model" ? std::string() : "of model " + f.location + " ") +
                "were not zeroed between optimizer steps (" + std::to_string(streak.length) +
                " steps in a row): each step applies the sum of all gradients so far";
    json ev = {{"steps_not_zeroed", streak.length}, {"declared_accumulation_steps", ctx.facts.accumulation_steps},
               {"series", tag}};
    if (model.empty() && std::isfinite(ctx.facts.grad_norm)) ev["grad_norm"] = Num(ctx.facts.grad_norm);
    f.evidence_json = ev.dump();
    f.causes = {{"missing_zero_grad", 0.9}};
    ctx.Report(std::move(f));
  }
}

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
  std::unordered_map<std::string_view, const TensorStats*> weights;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (tags::kWeight.Holds(tag, &rest)) weights[rest] = &s;
  }
  std::vector<double> step_ratios;
  std::string worst;
  double worst_median = 0;
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
      const double med = MedianOf(values);
      if (med > worst_median) {
        worst_median = med;
        worst = p;
      }
    }
  }
  if (worst_median >= options_.high) {
    if (high_location_.empty()) high_location_ = worst;
    Finding f;
    f.code = "UPDATE_RATIO_HIGH";
    f.severity = Severity::kWarning;
    f.step = ratios_[worst].front().first;
    f.last_step = frame.step;
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
  if (step_ratios.empty()) return;
  global_.push_back(Median(step_ratios));
  if (global_.size() > options_.low_window) global_.pop_front();
  if (global_.size() < options_.low_window) return;
  const double med = MedianOf(global_);
  if (med >= options_.low) return;
  // A schedule that has decayed the LR on purpose is not "too low".
  if (std::isfinite(facts.lr) && facts.lr_max > 0 && facts.lr < options_.decayed_lr_fraction * facts.lr_max) return;
  Finding f;
  f.code = "UPDATE_RATIO_LOW";
  f.severity = Severity::kWarning;
  f.step = frame.step - static_cast<int64_t>(options_.low_window) + 1;
  f.last_step = frame.step;
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
    const double grad_now = grads_known ? MedianOf(recent_grad_) : kNaN;
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
    const double rms = Rms(s);
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
