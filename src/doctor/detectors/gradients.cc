// Detectors on gradients: explosion (global, per layer and by depth), vanishing (by depth,
// all-zero weights, a global norm at the floor) and gradients not zeroed between steps.
#include "doctor/detectors/gradients.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/tag.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

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

// The global gradient norm per model: with several models, each one's own (its global_norm
// series, else the root of its parameters' squared gradient norms); else the run's.
std::map<std::string, double> ModelGradNorms(const StepFrame& frame, const RunFacts& facts) {
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
  return norms;
}

}  // namespace

// ---- explosion ----

bool GradExplosionDetector::BeyondLogNoise(const RollingMedianMad& logs, double norm) const {
  if (!(norm > 0) || logs.count() < options_.warmup) return true;
  return !(logs.RobustZ(std::log(norm)) < options_.noise_z);
}

void GradExplosionDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  JudgeByLoss(frame, ctx);
  std::string worst;
  double worst_ratio = 0;
  std::map<std::string, bool> model_shows_jump;
  FindLayerJump(frame, facts, &worst, &worst_ratio, &model_shows_jump);
  // The global norm per model: with several models, each one's own (its global_norm
  // series, else the root of its parameters' squared gradient norms); else the run's.
  const std::map<std::string, double> norms = ModelGradNorms(frame, facts);
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
  bool layer_fired = worst_ratio >= options_.layer_ratio && !(facts.clip_norm > 0);
  // A layer's jump is an explosion only when the model's gradient shows it too: above the
  // model's early level and beyond its own recent noise, as the global check asks. Else the
  // layer is a small part moving: a converged flow's bias 44x a tiny median while the
  // model's norm sat 17x under its start; Adam's oscillation near the end moving a layer
  // 20x with the model's norm within its noise (the loss flat to 0.1 %, both).
  const std::string worst_model = facts.models.size() >= 2 ? facts.ModelOf(worst) : std::string();
  if (layer_fired) {
    const auto model = model_shows_jump.find(worst_model);
    if (model != model_shows_jump.end() && !model->second) layer_fired = false;
  }
  // Only one layer jumped, under an optimizer that scales each parameter's step by its own
  // gradient history: the update grew a few times at most (Adam's second moment catches up
  // within the step), so it is said, not warned of.
  const bool damped = !global_fired && layer_fired && facts.AdaptiveStep(worst_model);
  if (global_fired || layer_fired) {
    Finding f;
    f.code = "GRAD_EXPLOSION";
    f.severity = damped ? Severity::kInfo : Severity::kWarning;
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
                  std::to_string(frame.step) +
                  (damped ? " (under " + facts.OptimizerOf(worst_model) +
                                ", which scales each parameter's step by its own gradient history, its update grew far less)"
                          : "");
    }
    f.evidence_json = json{{"grad_norm", Num(g)}, {"grad_norm_median", Num(global_med)}, {"layer", worst},
                           {"layer_ratio", Num(worst_ratio)}, {"lr", Num(facts.lr)},
                           {"flight_recorder", ctx.flight.Snapshot(worst.empty() ? std::vector<std::string>{}
                                                                                  : std::vector<std::string>{tags::kGrad.Of(worst)})}}
                          .dump();
    f.causes = {{"gradient_explosion", 0.7}, {"lr_too_high", 0.4}, {"bad_batch", 0.2}};
    if (pending_) {
      pending_->finding.last_step = frame.step;  // the same jump, still waiting for the loss
    } else if (recent_losses_.size() >= options_.loss_baseline) {
      pending_ = Pending{std::move(f), Median(recent_losses_),
                         *std::max_element(recent_losses_.begin(), recent_losses_.end()), {}};
    } else {
      ctx.Report(std::move(f));  // no loss to judge it by
    }
  }
  CheckDepth(frame, ctx);
}

void GradExplosionDetector::JudgeByLoss(const StepFrame& frame, const DetectorContext& ctx) {
  const std::string& loss_tag = ctx.facts.roles.Get(Role::kLoss);
  const double* loss = loss_tag.empty() ? nullptr : frame.Scalar(loss_tag);
  if (!loss) return;
  if (pending_ && pending_->finding.step < frame.step) {
    Pending& p = *pending_;
    p.after.push_back(*loss);
    if (p.after.size() >= options_.loss_response_steps || !std::isfinite(*loss)) {
      const bool finite = std::all_of(p.after.begin(), p.after.end(), [](double v) { return std::isfinite(v); });
      const double after_median = finite ? Median(p.after) : kNaN;
      // A loss below zero is no sign of learning: a flipped sign (a VAE's KL term) falls forever.
      const bool learned = finite && *std::min_element(p.after.begin(), p.after.end()) >= 0 &&
                           *std::max_element(p.after.begin(), p.after.end()) <= p.before_max &&
                           after_median <= p.before_median - options_.loss_fall * std::fabs(p.before_median);
      Finding f = std::move(p.finding);
      json ev = json::parse(f.evidence_json, nullptr, false);
      if (!ev.is_object()) ev = json::object();
      ev["loss_median_before"] = Num(p.before_median);
      ev["loss_median_after"] = Num(after_median);
      if (learned) {
        f.severity = Severity::kInfo;
        f.summary += "; the loss fell through it (median " + FormatNumber(p.before_median, 4) + " before, " +
                     FormatNumber(after_median, 4) + " over the next " + std::to_string(p.after.size()) +
                     " steps): the model learning, not an explosion";
        ev["learned_through"] = true;
      }
      f.evidence_json = ev.dump();
      pending_.reset();
      ctx.Report(std::move(f));
    }
  }
  if (!std::isfinite(*loss)) return;
  recent_losses_.push_back(*loss);
  if (recent_losses_.size() > options_.loss_baseline) recent_losses_.pop_front();
}

void GradExplosionDetector::Finish(const DetectorContext& ctx) {
  if (pending_) ctx.Report(std::move(pending_->finding));  // the run ended before the loss could tell
  pending_.reset();
}

// Per layer: the largest jump against the layer's own median, kept only when its robust z
// is past the threshold too. `model_shows_jump`: per model, whether the norm of all its
// layers' gradients at this step is above its early level and beyond its recent noise.
void GradExplosionDetector::FindLayerJump(const StepFrame& frame, const RunFacts& facts, std::string* worst_layer,
                                          double* worst_layer_ratio, std::map<std::string, bool>* model_shows_jump) {
  std::string& worst = *worst_layer;
  double& worst_ratio = *worst_layer_ratio;
  double worst_z = 0;
  std::map<std::string, double> squares;
  for (const auto& [tag, s] : frame.stats) {
    std::string_view rest;
    if (!tags::kGrad.Holds(tag, &rest)) continue;
    const double n = s.l2_norm();
    if (!std::isfinite(n) || s.nan + s.inf) continue;
    squares[facts.models.size() >= 2 ? facts.ModelOf(rest) : std::string()] += n * n;
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
  const std::string worst_model = facts.models.size() >= 2 ? facts.ModelOf(worst) : std::string();
  for (const auto& [model, sq] : squares) {
    const double norm = std::sqrt(sq);
    NormSeries& series = layer_sums_.try_emplace(model, options_.window).first->second;
    if (series.early.size() < options_.early) series.early.push_back(norm);
    if (!worst.empty() && model == worst_model) {  // its medians are paid only for a candidate
      (*model_shows_jump)[model] = norm > Median(series.early) && BeyondLogNoise(series.logs, norm);
    }
    if (norm > 0) series.logs.Add(std::log(norm));
  }
}

// By depth: gradients that grow toward the input.
void GradExplosionDetector::CheckDepth(const StepFrame& frame, const DetectorContext& ctx) {
  const RunFacts& facts = ctx.facts;
  const auto by_depth = WeightGradsByDepth(frame, facts);
  if (by_depth.size() >= 3) {
    const double first = by_depth.front().second->rms(), last = by_depth.back().second->rms();
    if (std::isfinite(first) && std::isfinite(last) && last > 0) {
      depth_.push_back(first / last);
      if (depth_.size() > options_.depth_window) depth_.pop_front();
      if (depth_.size() == options_.depth_window) {
        const double med = Median(depth_);
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

namespace {

// Why a weight's gradient is exactly zero. `module_learns`: another parameter of its module
// gets a gradient.
std::vector<Cause> ZeroGradientCauses(const std::string& p, const StepFrame& frame, const RunFacts& facts,
                                      bool* module_learns) {
  std::vector<Cause> causes;
  // Every gradient exactly 0 from the first step, with a loss that moves: the gradients
  // were there and were cleared (zero_grad between backward and step), or the graph was
  // cut; the knowledge base requires those facts (facts.cc).
  if (facts.grads_zero_from_start) RaiseCause(&causes, "gradients_cleared_before_step", 0.8);
  // Every gradient 0 and the loss one number at every step, whatever the batch: the loss
  // does not depend on the output (cross_entropy over one column, a detached output);
  // the knowledge base requires that fact (facts.cc).
  if (facts.grads_zero_from_start) RaiseCause(&causes, "loss_constant", 0.9);
  // Another parameter of its module gets a gradient: the module's units are alive, so this
  // parameter's own path carries nothing (its input always zero: a recurrent weight that
  // only sees the zero initial state; or its output masked before the loss).
  const std::string module = RunFacts::ModuleOfParam(p);
  *module_learns = false;
  for (const auto& [other_tag, o] : frame.stats) {
    std::string_view other;
    if (tags::kGrad.Holds(other_tag, &other) && other != p && o.numel > 0 && o.zeros < o.numel &&
        RunFacts::ModuleOfParam(std::string(other)) == module) {
      *module_learns = true;
      break;
    }
  }
  if (!*module_learns) {
    RaiseCause(&causes, "constant_init", 0.4);
    RaiseCause(&causes, "dying_relu", 0.4);
    return causes;
  }
  RaiseCause(&causes, "zero_input_or_unused_output", 0.7);
  // Where the zero input comes from, when the run shows it: weights initialised constant
  // (all zero) upstream, whose units then output zero; else dead units.
  if (facts.weights_constant_at_start) {
    RaiseCause(&causes, "constant_init", 0.85);
  } else if (facts.dead_fraction_max >= 0.5) {
    RaiseCause(&causes, "dying_relu", 0.85);
  }
  return causes;
}

}  // namespace


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
    bool module_learns = false;
    f.causes = ZeroGradientCauses(p, frame, facts, &module_learns);
    json ev = {{"zero_steps", len}, {"numel", s.numel}};
    if (module_learns) ev["module_gets_gradient"] = true;
    f.evidence_json = ev.dump();
    ctx.Report(std::move(f));
  }
  // By depth.
  const auto by_depth = WeightGradsByDepth(frame, facts);
  if (by_depth.size() >= 3) {
    const double first = by_depth.front().second->rms(), last = by_depth.back().second->rms();
    if (std::isfinite(first) && std::isfinite(last) && last > 0 && first > 0) {
      depth_.push_back(first / last);
      if (depth_.size() > options_.depth_window) depth_.pop_front();
      if (depth_.size() == options_.depth_window) {
        const double med = Median(depth_);
        if (med <= options_.depth_ratio) {
          Finding f;
          f.code = "GRAD_VANISHING";
          f.severity = Severity::kWarning;
          f.step = f.last_step = frame.step;
          f.location = by_depth.front().first;
          json layers = json::object();
          for (const auto& [p, s] : by_depth) layers[p] = Num(s->rms());
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
    ++streak.not_zeroed;
    if (streak.length == 0) streak.start = frame.step;
    if (++streak.length < options_.sustain) continue;
    streak.tag = std::string(tag);
    streak.longest = std::max(streak.longest, streak.length);
    ctx.Report(Describe(model, streak, frame.step, ctx));  // a later sighting extends it
  }
}

void GradNotZeroedDetector::Finish(const DetectorContext& ctx) {
  // The finding opened at its second step; its summary and evidence say how long it lasted.
  for (const auto& [model, streak] : streaks_) {
    if (streak.longest > 0) ctx.Amend(Describe(model, streak, streak.start, ctx));
  }
}

Finding GradNotZeroedDetector::Describe(const std::string& model, const Streak& streak, int64_t last_step,
                                        const DetectorContext& ctx) const {
  Finding f;
  f.code = "GRAD_NOT_ZEROED";
  f.severity = Severity::kCritical;
  f.step = streak.start;
  f.last_step = last_step;
  f.location = ctx.facts.ModelLabel(model);
  f.summary = "gradients " + (f.location == "model" ? std::string() : "of model " + f.location + " ") +
              "were not zeroed between optimizer steps (" + std::to_string(streak.longest) + " steps in a row" +
              (streak.not_zeroed > streak.longest ? ", " + std::to_string(streak.not_zeroed) + " in all" : std::string()) +
              "): each step applies the sum of all gradients so far";
  json ev = {{"steps_not_zeroed", streak.longest}, {"steps_not_zeroed_in_all", streak.not_zeroed},
             {"declared_accumulation_steps", ctx.facts.accumulation_steps}, {"series", streak.tag}};
  if (model.empty() && std::isfinite(ctx.facts.grad_norm)) ev["grad_norm"] = Num(ctx.facts.grad_norm);
  f.evidence_json = ev.dump();
  f.causes = {{"missing_zero_grad", 0.9}};
  return f;
}

}  // namespace trainscope::doctor
