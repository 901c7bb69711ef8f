#include "doctor/detectors/early_steps.h"

#include <cmath>

#include "core/tag.h"
#include "doctor/param_roles.h"

namespace trainscope::doctor {

namespace {
using json = nlohmann::json;
}  // namespace

void EarlyBlowupDetector::Settle(const DetectorContext& ctx, int64_t recovered_step, double recovered_loss) {
  Finding f = std::move(*open_);
  open_.reset();
  json evidence = json::parse(f.evidence_json);
  if (recovered_step >= 0) {
    f.summary += "; back at " + FormatNumber(recovered_loss, 4) + " by step " + std::to_string(recovered_step) +
                 ", below its start: an overshoot of the first updates the run recovered from";
    evidence["recovered_at"] = recovered_step;
    f.severity = Severity::kInfo;
  } else {
    f.severity = severity_if_lasting_;
  }
  f.evidence_json = evidence.dump();
  ctx.Amend(std::move(f));
}

void EarlyBlowupDetector::Finish(const DetectorContext& ctx) {
  if (open_) Settle(ctx, -1, kNaN);  // the run ended before the loss came back
}

// Evidence beside the loss: the largest gradient norm and update/weight ratio of the first steps.
void EarlyBlowupDetector::NoteUpdateSizes(const StepFrame& frame, const RunFacts& facts) {
  if (std::isfinite(facts.grad_norm)) {
    if (std::isnan(first_grad_)) first_grad_ = facts.grad_norm;
    if (std::isnan(max_grad_) || facts.grad_norm > max_grad_) {
      max_grad_ = facts.grad_norm;
      max_grad_step_ = frame.step;
    }
  }
  for (const auto& [tag, update] : frame.stats) {
    std::string_view rest;
    if (!tags::kUpdate.Holds(tag, &rest)) continue;
    const std::string param(rest);
    if (ClassifyParam(param, facts) != ParamRole::kWeight) continue;
    const TensorStats* weight = frame.Stats(tags::kWeight.Of(param));
    if (!weight || !(weight->sum_squares > 0) || !std::isfinite(update.sum_squares)) continue;
    // The weight after the update: a matrix that started at 0 (LoRA's B) has ratio 1 at
    // its first update without anything being wrong; weight - update is what it was.
    const double before = std::sqrt(weight->sum_squares) - std::sqrt(update.sum_squares);
    if (!(before > 0)) continue;
    const double ratio = std::sqrt(update.sum_squares / weight->sum_squares);
    if (ratio > max_update_) {
      max_update_ = ratio;
      max_update_param_ = param;
      max_update_step_ = frame.step;
    }
  }
}

void EarlyBlowupDetector::OnStep(const StepFrame& frame, const DetectorContext& ctx) {
  if (open_) {
    const double loss = ctx.facts.loss;
    if (std::isnan(loss)) return;
    ++points_after_jump_;
    if (!std::isfinite(loss) || points_after_jump_ > options_.recovery_points) {
      Settle(ctx, -1, kNaN);
    } else if (loss <= options_.recovery_level * first_loss_) {
      Settle(ctx, frame.step, loss);
    }
    return;
  }
  if (done_) return;
  const RunFacts& facts = ctx.facts;
  NoteUpdateSizes(frame, facts);
  const double loss = facts.loss;
  if (std::isnan(loss)) return;
  if (std::isnan(first_loss_)) {
    if (!std::isfinite(loss)) {
      done_ = true;  // non-finite from the start: the non-finite forensics own it
      return;
    }
    first_loss_ = loss;
    first_step_ = frame.step;
    if (!(loss >= options_.min_first_loss)) done_ = true;
    return;
  }
  if (++points_ > options_.points) {
    done_ = true;
    return;
  }
  if (!std::isfinite(loss)) {
    done_ = true;
    return;
  }
  const double ratio = loss / first_loss_;
  if (!(ratio >= options_.jump_ratio)) return;
  done_ = true;
  // Offline the end is known: a run whose loss ends far below where it started came back
  // from its first steps and learned; the jump was a transient, not a divergence (the
  // spike detectors still see it).
  if (ctx.facts.loss_end_level <= options_.recovered_fraction * first_loss_) return;
  Finding f;
  f.code = "LOSS_DIVERGENCE";
  severity_if_lasting_ = ratio >= options_.critical_ratio ? Severity::kCritical : Severity::kWarning;
  f.severity = Severity::kInfo;  // until the next points show whether the loss came back (Settle)
  f.step = f.last_step = frame.step;
  f.location = facts.roles.Get(Role::kLoss);
  std::vector<Cause> causes = {{"lr_too_high", 0.8}, {"gradient_explosion", 0.25}, {"bad_batch", 0.1}};
  json evidence = {{"early_blowup", true},
                   {"first_loss", Num(first_loss_)},
                   {"first_loss_step", first_step_},
                   {"loss", Num(loss)},
                   {"ratio", Num(ratio)},
                   {"lr", Num(facts.lr)}};
  std::string summary = "the loss jumped from " + FormatNumber(first_loss_, 4) + " at step " +
                        std::to_string(first_step_) + " to " + FormatNumber(loss, 4) + " at step " +
                        std::to_string(frame.step) + " (" + FormatNumber(ratio, 3) + "x) in the first " +
                        std::to_string(options_.points) + " steps";
  if (std::isfinite(first_grad_) && first_grad_ > 0 && max_grad_ >= options_.grad_ratio * first_grad_) {
    RaiseCause(&causes, "lr_too_high", 0.5);
    evidence["first_grad_norm"] = Num(first_grad_);
    evidence["max_grad_norm"] = Num(max_grad_);
    evidence["max_grad_norm_step"] = max_grad_step_;
    summary += "; the gradient norm went from " + FormatNumber(first_grad_, 3) + " to " + FormatNumber(max_grad_, 3);
  }
  if (max_update_ >= options_.update_ratio) {
    RaiseCause(&causes, "lr_too_high", 0.5);
    evidence["max_update_ratio"] = Num(max_update_);
    evidence["max_update_param"] = max_update_param_;
    evidence["max_update_step"] = max_update_step_;
    summary += "; the update at step " + std::to_string(max_update_step_) + " changed " + max_update_param_ + " by " +
               FormatNumber(max_update_, 3) + " of its norm";
  }
  if (facts.clip_norm > 0) evidence["gradient_clipping"] = Num(facts.clip_norm);
  summary += ": the first updates were far too large for the weights (the learning rate)";
  f.summary = summary;
  f.evidence_json = evidence.dump();
  f.causes = std::move(causes);
  open_ = f;
  points_after_jump_ = 0;
  ctx.Report(std::move(f));
}

}  // namespace trainscope::doctor
