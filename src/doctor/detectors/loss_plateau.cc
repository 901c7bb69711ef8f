// LossPlateauDetector: a loss stuck at its initial value or at chance level (the class count
// declared, read from the label range, or inferred), one that went back up after learning, a
// loss frozen at one value, and the probability floor of a softmax fed to cross-entropy.
#include "doctor/detectors/loss_curve.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/tag.h"
#include "doctor/knowledge.h"

namespace trainscope::doctor {

namespace {

using json = nlohmann::json;

}  // namespace

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

// What the recent loss level says: where it sits against its start and chance level.
struct PlateauLevel {
  size_t n = 0, points = 0, recent_n = 0, recent_points = 0;
  double initial = 0, now = 0, chance = kNaN;
  int classes = 0;
  std::string classes_from;
  bool near_chance = false, at_chance = false, stuck = false, settled = false;
  bool regressed = false;  // it had learned, then went back up
};

void LossPlateauDetector::Check(const DetectorContext& ctx, bool final, double min_improvement) {
  if (reported_ || thin_.arrivals() < options_.min_points) return;
  PlateauLevel level;
  if (!JudgeLevel(ctx, final, min_improvement, &level)) return;
  if (!final && !ctx.online()) {
    candidate_ = true;  // offline: the end of the run decides
    candidate_step_ = last_step_;
    return;
  }
  reported_ = true;
  Finding f = DescribePlateau(ctx, &level);
  json ev = PlateauEvidence(level);
  if (level.regressed) {
    ReportRegressed(std::move(f), std::move(ev), ctx);
    return;
  }
  ReportStuck(std::move(f), std::move(ev), level, ctx);
}

// The level now against the start and chance; false while the loss is neither stuck nor at
// chance, or still warming up.
bool LossPlateauDetector::JudgeLevel(const DetectorContext& ctx, bool final, double min_improvement,
                                     PlateauLevel* level) const {
  const size_t n = values_.size(), points = thin_.arrivals();
  const double initial = Median(first_values_);
  const size_t recent_n = std::max<size_t>(20, static_cast<size_t>(options_.recent_fraction * n));
  const size_t recent_points = recent_n * thin_.stride();
  const double now = Median(std::span<const double>(values_.data() + (n - recent_n), recent_n));
  // Still warming up: the learning rate is rising over the recent window.
  const double lr_then = lrs_[n - recent_n], lr_now = lrs_.back();
  if (!final && std::isfinite(lr_then) && std::isfinite(lr_now) && lr_now > lr_then * 1.01) return false;
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
  if (!stuck && !at_chance) return false;
  *level = {n, points, recent_n, recent_points, initial, now, chance, c, classes_from, near_chance, at_chance, stuck, settled,
            best_rolling_ <= options_.regressed_ratio * std::min(initial, now)};
  return true;
}

// The finding's steps and summary; `level->at_chance` also counts a stuck loss near chance.
Finding LossPlateauDetector::DescribePlateau(const DetectorContext& ctx, PlateauLevel* level) const {
  const size_t n = level->n, points = level->points, recent_points = level->recent_points;
  const double initial = level->initial, now = level->now, chance = level->chance;
  const int c = level->classes;
  const std::string& classes_from = level->classes_from;
  const bool near_chance = level->near_chance, stuck = level->stuck, regressed = level->regressed;
  bool& at_chance = level->at_chance;
  const bool inferred = classes_from == "inferred from the loss level";
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
  return f;
}

nlohmann::json LossPlateauDetector::PlateauEvidence(const PlateauLevel& level) const {
  const double initial = level.initial, now = level.now, chance = level.chance;
  const int c = level.classes;
  const std::string& classes_from = level.classes_from;
  const bool at_chance = level.at_chance, settled = level.settled;
  const size_t points = level.points;
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
  return ev;
}

// It learned at this learning rate, so a slow optimiser or labels without signal are
// unlikely: what undoes learning is a step too large (or a spike through it) that knocks
// units dead or the weights off. A 10x higher lr (the code's own advice) is the wrong fix
// here, so the actions are the causes'.
void LossPlateauDetector::ReportRegressed(Finding f, nlohmann::json ev, const DetectorContext& ctx) const {
  const double best = best_rolling_;
  std::vector<Cause> causes;
  const double lr = ctx.facts.lr;
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
}

// A loss stuck where it started or at chance: the steps' size says whether the LR is too
// low to move or too high to learn.
void LossPlateauDetector::ReportStuck(Finding f, nlohmann::json ev, const PlateauLevel& level,
                                      const DetectorContext& ctx) const {
  const size_t n = level.n, recent_n = level.recent_n;
  const bool at_chance = level.at_chance, settled = level.settled;
  const bool inferred = level.classes_from == "inferred from the loss level";
  std::vector<Cause> causes;
  const double lr = ctx.facts.lr;
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

}  // namespace trainscope::doctor
